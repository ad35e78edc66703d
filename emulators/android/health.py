"""Emulator health beyond "booted": the device answers a screenshot *and* an input within a deadline.

``sys.boot_completed = 1`` (the container's health check) stays true when an emulator's display or
input pipeline hangs: adb still answers ``getprop`` while every screenshot times out. A rollout slot
attached to such an emulator loses every episode, so leases and the farm's healer ask the device
itself, over the emulator's gRPC port:

* ``getScreenshot`` must return a PNG, and
* ``sendKey`` (a lone Shift press, which changes nothing on screen) must be accepted,

each within ``deadline_s``. :func:`grpc_probe` returns ``None`` when both did, else one line saying
what failed (``grpc: getScreenshot at 127.0.0.1:8554: DEADLINE_EXCEEDED: ...``).
"""

from __future__ import annotations

from collections.abc import Callable

from emulators.android.farm import EmulatorEndpoint
from emulators.android.grpc import EmulatorGrpcTransport
from emulators.android.keys import KeyChord
from emulators.base import ActionError, DeviceError

__all__ = ["Probe", "grpc_probe", "grpc_restore", "probe_with_deadline"]

Probe = Callable[[EmulatorEndpoint], "str | None"]


def grpc_probe(endpoint: EmulatorEndpoint, *, deadline_s: float = 10.0, token: str | None = None) -> str | None:
    """``None`` when ``endpoint`` answers a screenshot and an input over gRPC within ``deadline_s`` each."""
    try:
        t = EmulatorGrpcTransport(endpoint.grpc_address, token=token, timeout_s=deadline_s,
                                  connect_timeout_s=min(deadline_s, 5.0))
    except DeviceError as e:
        return str(e)
    try:
        t.screenshot()
        t.key(KeyChord(59))  # Shift: an input the device must take, with nothing to see on screen
    except (DeviceError, ActionError) as e:
        return str(e)
    finally:
        t.close()
    return None


def probe_with_deadline(deadline_s: float = 10.0, token: str | None = None) -> Probe:
    """:func:`grpc_probe` with its deadline bound (what :func:`~emulators.android.farm.lease_from` takes)."""

    def probe(endpoint: EmulatorEndpoint) -> str | None:
        return grpc_probe(endpoint, deadline_s=deadline_s, token=token)

    return probe


def grpc_restore(endpoint: EmulatorEndpoint, snapshot: str, *, deadline_s: float = 60.0,
                 token: str | None = None) -> str | None:
    """``None`` when ``endpoint`` loaded its snapshot ``snapshot`` over gRPC within ``deadline_s``, else why not.

    What keeps a spare warm between two leases: whatever the last episode left on it is gone."""
    try:
        t = EmulatorGrpcTransport(endpoint.grpc_address, token=token, timeout_s=deadline_s,
                                  connect_timeout_s=min(deadline_s, 5.0))
    except DeviceError as e:
        return str(e)
    try:
        t.load_snapshot(snapshot)
    except DeviceError as e:
        return str(e)
    finally:
        t.close()
    return None
