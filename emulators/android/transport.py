"""The narrow interface every Android back end implements.

A :class:`Transport` speaks **device pixels** and Android keycodes; it knows
nothing of normalised actions (that is :class:`~emulators.android.device.AndroidDevice`'s
job). Screenshots are PNG bytes, always.

Errors: a transport raises :class:`~emulators.base.ActionError` for a request
the device refused or cannot do (unknown app, a chord the back end cannot send)
and :class:`~emulators.base.DeviceError` when the device is gone (no such
serial, offline, unauthorised, connection refused).
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod

from PIL import Image

from emulators.android.keys import KeyChord
from emulators.snapshot import SnapshotError

__all__ = ["Transport", "png_size", "encode_png"]


class Transport(ABC):
    """Device-pixel operations on one Android screen."""

    #: short name for logs and ``Observation.url`` prefixes
    name: str = ""

    @abstractmethod
    def screen_size(self) -> tuple[int, int]:
        """``(width, height)`` of the screen in device pixels, in the current orientation."""

    @abstractmethod
    def screenshot(self) -> bytes:
        """The screen as PNG bytes."""

    @abstractmethod
    def ui_tree(self) -> str | None:
        """The accessibility hierarchy as compact text (see :mod:`~emulators.android.uitree`), or ``None``."""

    def ui_xml(self) -> str | None:
        """The accessibility hierarchy as the XML the back end dumps (``uiautomator dump``, Appium's page
        source), or ``None`` when it has none this time: what marks are built from (one dump gives the
        device both the text and the marks). Back ends without a dump keep this default."""
        return None

    @abstractmethod
    def tap(self, x: int, y: int) -> None: ...

    @abstractmethod
    def long_press(self, x: int, y: int, duration_ms: int) -> None: ...

    @abstractmethod
    def swipe(self, x1: int, y1: int, x2: int, y2: int, duration_ms: int) -> None:
        """Finger down at (x1, y1), move to (x2, y2) over ``duration_ms``, finger up."""

    @abstractmethod
    def type_text(self, text: str) -> None:
        """Type into the focused field (``\\n`` presses Enter)."""

    @abstractmethod
    def key(self, chord: KeyChord) -> None:
        """Press a key, holding ``chord.modifiers``."""

    def back(self) -> None:
        self.key(KeyChord(4))

    def home(self) -> None:
        self.key(KeyChord(3))

    @abstractmethod
    def open_app(self, package: str, activity: str | None = None) -> None:
        """Start ``package`` (its launcher activity when ``activity`` is ``None``)."""

    def current_activity(self) -> str | None:
        """``package/activity`` in the foreground, when the back end can tell."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook; transports without connections keep it
        """Release connections. Safe to call twice."""

    # snapshots: the whole device (an emulator snapshot: RAM, disk, screen), by name ----------------
    #: whether :meth:`save_snapshot` / :meth:`load_snapshot` can work on this back end
    can_snapshot: bool = False

    def snapshot_location(self) -> str:
        """Which emulator holds the snapshots this transport saves (they live on its disk)."""
        return ""

    def save_snapshot(self, name: str) -> None:
        """Save the device's whole state as snapshot ``name``; :class:`SnapshotError` where the back
        end has no snapshots (the default: a phone, Appium) or the save failed."""
        raise SnapshotError(f"{self.name or type(self).__name__}: this back end cannot save snapshots")

    def load_snapshot(self, name: str) -> None:
        """Put the device back into snapshot ``name``; :class:`SnapshotError` when it does not load."""
        raise SnapshotError(f"{self.name or type(self).__name__}: this back end cannot load snapshots")

    def delete_snapshot(self, name: str) -> None:
        """Delete snapshot ``name`` (one this transport saved); quiet when it is already gone."""


def png_size(png: bytes) -> tuple[int, int]:
    """``(width, height)`` from a PNG's IHDR chunk, without decoding the pixels."""
    if len(png) < 24 or png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise ValueError(f"not PNG data (starts with {png[:16]!r})")
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def encode_png(pixels, *, compress_level: int = 1) -> bytes:
    """An ``(H, W, 3|4)`` uint8 array -> PNG bytes (fast compression: screenshots are frequent)."""
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()
