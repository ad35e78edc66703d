"""``AndroidDevice``: the :class:`~emulators.base.Device` over any :class:`Transport`.

Converts normalised actions (``guiagent.types``) into device pixels and transport
calls. The pixel frame is the transport's :meth:`Transport.screen_size` (what
touches address); a screenshot may be smaller (a scaled frame), so both sizes are
kept apart.

Action mapping:

=================  ==============================================================
Click              tap
DoubleClick        two taps back to back (Android's double-tap window is 300 ms)
RightClick, Hover  refused with an ActionError: a touch screen has no mouse buttons or pointer
LongPress          long_press(duration_ms)
Type               tap (x, y) first when given, then type_text; ``submit`` presses Enter
Scroll             a swipe with the finger moving **against** ``direction``: scrolling
                   ``down`` (reveal what lies below) drags the finger upwards, over
                   ``amount`` of the screen, centred on (x, y) or the screen centre
Swipe              swipe along the finger path as given
Drag               the transport's drag: ``input draganddrop`` on adb and android_env (android_world's,
                   4 s), press-hold 0.8 s-move-release on gRPC and Appium
Key                keys.parse_key -> Android keycode (chords hold modifiers);
                   Back/Home go to the system buttons
NavigateBack/Home  the system back / home keys
OpenApp            keys.resolve_app: label table, package name or package/activity
Wait               sleep
Answer/Finish      nothing: they end the episode in the environment, never touch the screen
*Element           the same action at the centre of the numbered element of the last
                   observation's marks (``with_marks``), or, where a control later in the
                   hierarchy is drawn over that centre, at the nearest point of the element's
                   box none covers (``ui_marks_and_taps``); an unknown number is an ActionError
=================  ==============================================================
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import replace
from typing import Collection, Mapping

from emulators.android.keys import KeyChord, parse_key, resolve_app
from emulators.android.transport import Transport, png_size
from emulators.android.uitree import UITreeError, format_ui_tree, parse_ui_tree, ui_marks_and_taps
from emulators.base import ActionError, Device, parse_flag
from emulators.snapshot import DeviceState, SnapshotError
from guiagent.types import (
    ELEMENT_ACTION_TYPES, Action, Answer, Click, DoubleClick, Drag, ElementNotFound, Finish, Hover, Key, LongPress,
    Mark, NavigateBack, NavigateHome, Observation, OpenApp, RightClick, Scroll, Swipe, Type, Wait, resolve_element,
)

__all__ = ["AndroidDevice", "to_pixels", "scroll_path"]


def to_pixels(x: float, y: float, size: tuple[int, int]) -> tuple[int, int]:
    """Normalised ``[0, 1]`` point -> device pixel; ``1.0`` maps to the last pixel, not past it.

    >>> to_pixels(0.5, 1.0, (1080, 2400))
    (540, 2399)
    """
    w, h = size
    return min(int(x * w), w - 1), min(int(y * h), h - 1)


def scroll_path(direction: str, amount: float, size: tuple[int, int],
                at: tuple[float, float] | None = None) -> tuple[int, int, int, int]:
    """Finger path ``(x1, y1, x2, y2)`` in pixels that scrolls content towards ``direction``.

    The finger moves opposite to ``direction``: ``down`` swipes up. The path is
    ``amount`` of the screen long, centred on ``at`` (default the centre), and
    kept inside the screen with a 2 % margin so it does not start on a system bar edge.

    >>> scroll_path("down", 0.5, (1000, 2000))
    (500, 1500, 500, 500)
    """
    w, h = size
    cx, cy = at if at is not None else (0.5, 0.5)
    vertical = direction in ("up", "down")
    half = amount / 2
    sign = 1 if direction in ("down", "right") else -1  # content moves towards direction, finger against
    lo, hi = 0.02, 0.98
    if vertical:
        c = min(max(cy, lo + half), hi - half) if half < (hi - lo) / 2 else 0.5
        start, end = (c + sign * half, c - sign * half)
        y1, y2 = (min(max(v, lo), hi) for v in (start, end))
        return (*to_pixels(cx, y1, size), *to_pixels(cx, y2, size))
    c = min(max(cx, lo + half), hi - half) if half < (hi - lo) / 2 else 0.5
    start, end = (c + sign * half, c - sign * half)
    x1, x2 = (min(max(v, lo), hi) for v in (start, end))
    return (*to_pixels(x1, cy, size), *to_pixels(x2, cy, size))


class AndroidDevice(Device):
    """An Android screen behind a :class:`Transport` (adb, emulator gRPC, Appium, android_env).

    ``settle_s`` waits after each action; with ``stable_timeout_s > 0`` the
    device also polls screenshots until two in a row are identical (cheap on
    the gRPC transport). ``with_tree`` adds the accessibility tree to observations (a
    ``uiautomator dump`` a step on adb: slow; off for pure-pixel agents). ``with_marks`` numbers
    the screen's controls and texts from the same dump (``Observation.marks``, for element actions
    and the ``marks`` action format; :func:`~emulators.android.uitree.ui_marks`): one dump a step
    gives both, so marks cost only their parsing when the tree is on anyway.

    Example::

        from emulators.android import AndroidDevice, AdbTransport
        dev = AndroidDevice(AdbTransport("emulator-5554"))
        dev.reset(); obs = dev.observe(); dev.execute(Click(0.5, 0.5))
    """

    def __init__(self, transport: Transport, *, with_tree: bool = True, with_activity: bool = False,
                 settle_s: float = 0.3, stable_timeout_s: float = 0.0, home_on_reset: bool = True,
                 scroll_ms: int = 400, drag_ms: int | None = None, with_marks: bool = False,
                 max_snapshots: int = 4, snapshot_peers: Collection[str] = (),
                 snapshot_transport: Transport | None = None):
        self.transport = transport
        self.with_marks = parse_flag("with_marks", with_marks)
        self._marks: tuple[Mark, ...] | None = None
        #: the last observation's marks whose centre a later control covers -> where to tap them instead
        self._taps: dict[int, tuple[float, float]] = {}
        self.with_tree = with_tree
        self.with_activity = with_activity
        self.settle_s = settle_s
        self.stable_timeout_s = stable_timeout_s
        self.home_on_reset = home_on_reset
        self.scroll_ms = scroll_ms
        self.drag_ms = None if drag_ms in (None, "") else int(drag_ms)
        """how long a Drag moves; ``None``: the transport's own (android_world's 4 s on adb)"""
        self._size: tuple[int, int] | None = None
        self._closed = False
        if int(max_snapshots) < 1:
            raise ValueError(f"max_snapshots must be >= 1, got {max_snapshots}")
        self.max_snapshots = int(max_snapshots)
        self._snapshots: list[str] = []  # the emulator snapshots this device saved or imported, oldest first
        if isinstance(snapshot_peers, str):  # from the command line: "host:port,host:port"
            snapshot_peers = [p for p in snapshot_peers.split(",") if p.strip()]
        self.snapshot_peers = frozenset(p.strip().removeprefix("grpc://") for p in snapshot_peers)
        """gRPC addresses of the emulators whose snapshots this device may copy in to restore them
        (its farm's other emulators); empty: a state restores on the emulator that saved it only"""
        self._saves_blocked: str | None = None  # why the emulator can no longer save snapshots
        self.snapshots_via: Transport = snapshot_transport or transport
        """what saves, loads, deletes and copies snapshots: ``snapshot_transport`` (e.g. the emulator's
        gRPC service beside an android_env controller), else the device's transport"""

    # Device --------------------------------------------------------------------------------------
    def reset(self) -> None:
        self._size = None
        self._marks, self._taps = None, {}
        if self.home_on_reset:
            self.transport.home()
            self._settle()

    def observe(self) -> Observation:
        png = self.transport.screenshot()
        width, height = png_size(png)
        size = self.screen_size
        if (width > height) != (size[0] > size[1]):
            self._size = None  # the screen rotated since we asked
        marks, taps = None, {}
        if self.with_marks:
            tree, marks, taps = self._tree_and_marks()
        else:
            tree = self.transport.ui_tree() if self.with_tree else None
        url = self.transport.current_activity() if self.with_activity else None
        self._marks, self._taps = marks, taps
        return Observation(screenshot=png, width=width, height=height, tree=tree, url=url, marks=marks)

    def _tree_and_marks(self) -> tuple[str | None, tuple[Mark, ...] | None, dict[int, tuple[float, float]]]:
        """Tree text (when ``with_tree``), marks and the tap points of covered marks from one dump; a screen
        without a dump this step (``uiautomator`` fails while an animation runs) has neither: no marks, not an
        empty table."""
        xml = self.transport.ui_xml()
        if xml is None:  # a back end without a dump of its own
            return (self.transport.ui_tree() if self.with_tree else None), None, {}
        try:
            nodes = parse_ui_tree(xml)
        except UITreeError:
            return None, None, {}
        marks, taps = ui_marks_and_taps(nodes, self.screen_size)
        return (format_ui_tree(nodes) if self.with_tree else None), marks, taps

    def execute(self, action: Action) -> None:
        self.element_point = None
        if isinstance(action, ELEMENT_ACTION_TYPES):
            element = action.element
            try:
                action = resolve_element(action, self._marks)
            except ElementNotFound as e:
                raise ActionError(str(e)) from None
            if element in self._taps:  # another control is drawn over its centre: a point of its own
                action = replace(action, x=self._taps[element][0], y=self._taps[element][1])
            self.element_point = (action.x, action.y)
        self._dispatch(action)
        if not isinstance(action, (Wait, Answer, Finish)):
            self._settle()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for name in self._snapshots:  # they hold the emulator's RAM and disk: gigabytes
                try:
                    self.snapshots_via.delete_snapshot(name)
                except Exception:  # noqa: BLE001 - a dead emulator takes its snapshots with it
                    pass
            self._snapshots.clear()
            self.transport.close()
            if self.snapshots_via is not self.transport:
                self.snapshots_via.close()

    # snapshots -----------------------------------------------------------------------------------
    @property
    def can_snapshot(self) -> bool:  # type: ignore[override]
        """Whether the transport can save and load emulator snapshots (gRPC, an emulator's adb,
        android_env). An emulator that loaded a snapshot copied in from another one still
        restores, but its :meth:`snapshot` raises (:attr:`saves_blocked` says why)."""
        return bool(self.snapshots_via.can_snapshot)

    @property
    def saves_blocked(self) -> str | None:
        """Why this device's emulator can no longer save snapshots (None: it can)."""
        return self._saves_blocked

    def snapshot(self) -> DeviceState:
        """An emulator snapshot of the whole device (RAM, disk, screen) under a fresh name, on the
        emulator itself: it restores there only. The device keeps its ``max_snapshots`` newest and
        deletes older ones (and all of its own on close): a state whose snapshot was deleted no
        longer restores."""
        if self._closed:
            raise SnapshotError("the device was closed")
        if self._saves_blocked is not None:
            raise SnapshotError(self._saves_blocked)
        name = f"guiagent-{uuid.uuid4().hex[:16]}"
        self.snapshots_via.save_snapshot(name)
        self._keep(name)
        return DeviceState("android-snapshot", {"name": name, "where": self.snapshots_via.snapshot_location()})

    def _keep(self, name: str) -> None:
        """Track a snapshot on this emulator; the oldest past ``max_snapshots`` are deleted."""
        self._snapshots.append(name)
        while len(self._snapshots) > self.max_snapshots:
            self.snapshots_via.delete_snapshot(self._snapshots.pop(0))

    def restore(self, state: DeviceState) -> None:
        """Load the state's emulator snapshot. A snapshot of another emulator is copied in first
        when that emulator is one of ``snapshot_peers`` and both talk gRPC (``PullSnapshot`` from
        it, ``PushSnapshot`` here; the emulators must share a hardware configuration: a farm's
        do). :class:`SnapshotError` for a snapshot of any other emulator, one its device deleted
        (``max_snapshots``), or a copy the emulator refuses.

        Once an emulator has loaded a snapshot copied in from another one, it cannot save
        snapshots any more (the emulator's rule for imported snapshots): this device's
        :meth:`snapshot` then raises :class:`SnapshotError` (:attr:`saves_blocked`) until its
        emulator restarts, and restores go on working."""
        data = state.data if state.kind == "android-snapshot" else None
        if not isinstance(data, Mapping) or not isinstance(data.get("name"), str) \
                or not isinstance(data.get("where"), str):
            raise SnapshotError(f"not an Android snapshot state: {state.kind}")
        name, where = data["name"], data["where"]
        here = self.snapshots_via.snapshot_location()
        imported = where != here
        if imported and name not in self._snapshots:
            self._copy_in(name, where, here)
        elif not imported and name not in self._snapshots:
            raise SnapshotError(f"snapshot {name} was deleted (this device keeps its "
                                f"{self.max_snapshots} newest: max_snapshots) or is not this device's")
        self.snapshots_via.load_snapshot(name)
        if imported:
            self._saves_blocked = (f"this emulator ({here}) loaded a snapshot copied from {where}; an emulator "
                                   "cannot save snapshots after that until it restarts")
        self._size = None
        self._marks, self._taps = None, {}
        self._settle()

    def _copy_in(self, name: str, where: str, here: str) -> None:
        """Copy snapshot ``name`` in from the peer emulator at ``where`` (``grpc://host:port``)."""
        address = where.removeprefix("grpc://")
        copy = getattr(self.snapshots_via, "copy_snapshot_from", None)
        if not where.startswith("grpc://") or copy is None:
            raise SnapshotError(f"the snapshot lives on {where}; this device is {here} (emulator snapshots "
                                "restore on the emulator that saved them, or are copied between emulators "
                                "that both talk gRPC)")
        if address not in self.snapshot_peers:
            raise SnapshotError(f"the snapshot lives on {where}; this device is {here} (emulator snapshots "
                                "restore on the emulator that saved them, or are copied in from one of the "
                                f"device's snapshot_peers: {', '.join(sorted(self.snapshot_peers)) or 'none'})")
        if self._closed:
            raise SnapshotError("the device was closed")
        source = self.snapshots_via.peer(address)
        try:
            copy(source, name)
        finally:
            source.close()
        self._keep(name)

    # helpers -------------------------------------------------------------------------------------
    @property
    def screen_size(self) -> tuple[int, int]:
        if self._size is None:
            self._size = self.transport.screen_size()
        return self._size

    def _px(self, x: float, y: float) -> tuple[int, int]:
        return to_pixels(x, y, self.screen_size)

    def _dispatch(self, action: Action) -> None:
        t = self.transport
        if isinstance(action, Click):
            t.tap(*self._px(action.x, action.y))
        elif isinstance(action, DoubleClick):
            p = self._px(action.x, action.y)
            t.tap(*p)
            t.tap(*p)  # no settle in between: the two taps must land inside the double-tap window
        elif isinstance(action, RightClick):
            raise ActionError("a touch screen has no right button; use LongPress for a context menu")
        elif isinstance(action, Hover):
            raise ActionError("a touch screen has no pointer to hover with; tap instead")
        elif isinstance(action, LongPress):
            t.long_press(*self._px(action.x, action.y), action.duration_ms)
        elif isinstance(action, Type):
            if action.x is not None and action.y is not None:
                t.tap(*self._px(action.x, action.y))
                self._settle()
            if action.text:
                t.type_text(action.text)
            if action.submit:
                t.key(KeyChord(66))
        elif isinstance(action, Scroll):
            at = (action.x, action.y) if action.x is not None and action.y is not None else None
            t.swipe(*scroll_path(action.direction, action.amount, self.screen_size, at), self.scroll_ms)
        elif isinstance(action, Swipe):
            t.swipe(*self._px(action.x1, action.y1), *self._px(action.x2, action.y2), action.duration_ms)
        elif isinstance(action, Drag):
            drag = getattr(t, "drag", None)
            p1, p2 = self._px(action.x1, action.y1), self._px(action.x2, action.y2)
            if drag is not None:
                drag(*p1, *p2, *([] if self.drag_ms is None else [self.drag_ms]))
            else:  # a back end without a drag gesture: the closest it has
                t.swipe(*p1, *p2, self.drag_ms or 1200)
        elif isinstance(action, Key):
            try:
                chord = parse_key(action.key)
            except ValueError as e:
                raise ActionError(str(e)) from None
            if chord == KeyChord(4):
                t.back()
            elif chord == KeyChord(3):
                t.home()
            else:
                t.key(chord)
        elif isinstance(action, NavigateBack):
            t.back()
        elif isinstance(action, NavigateHome):
            t.home()
        elif isinstance(action, OpenApp):
            try:
                package, activity = resolve_app(action.app)
            except ValueError as e:
                raise ActionError(str(e)) from None
            t.open_app(package, activity)
        elif isinstance(action, Wait):
            time.sleep(action.seconds)
        elif isinstance(action, (Answer, Finish)):
            pass  # handled by the environment; never reaches the screen
        else:
            raise ActionError(f"the Android device cannot carry out {type(action).__name__}")

    def _settle(self) -> None:
        if self.settle_s > 0:
            time.sleep(self.settle_s)
        if self.stable_timeout_s <= 0:
            return
        deadline = time.monotonic() + self.stable_timeout_s
        last = hashlib.blake2b(self.transport.screenshot(), digest_size=16).digest()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            cur = hashlib.blake2b(self.transport.screenshot(), digest_size=16).digest()
            if cur == last:
                return
            last = cur
