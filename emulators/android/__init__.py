"""Android devices for guiagent: one :class:`AndroidDevice` over interchangeable transports.

* :class:`AdbTransport` — the adb client (universal, slow for screenshots).
* :class:`EmulatorGrpcTransport` — the emulator's gRPC service (the fast path for pixels and input),
  adb for the rest.
* :class:`AppiumTransport` — an Appium UiAutomator2 session (W3C pointer actions).
* :class:`AndroidEnvTransport` — an android_env ``AndroidEnv`` (or its FakeSimulator).

Optional dependencies (``pip install guiagent[android]``) are imported only by
the transport that needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from emulators.android.adb import AdbTarget, AdbTransport
from emulators.android.device import AndroidDevice
from emulators.android.keys import KeyChord, parse_key, resolve_app
from emulators.android.transport import Transport

if TYPE_CHECKING:
    from emulators.android.android_env import AndroidEnvTransport
    from emulators.android.appium import AppiumTransport
    from emulators.android.grpc import EmulatorGrpcTransport

__all__ = ["AndroidDevice", "Transport", "AdbTransport", "AdbTarget", "EmulatorGrpcTransport",
           "AppiumTransport", "AndroidEnvTransport", "KeyChord", "parse_key", "resolve_app"]

_LAZY = {
    "EmulatorGrpcTransport": "emulators.android.grpc",
    "AppiumTransport": "emulators.android.appium",
    "AndroidEnvTransport": "emulators.android.android_env",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
