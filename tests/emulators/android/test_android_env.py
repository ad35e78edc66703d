"""android_env transport against android_env's own offline FakeSimulator.

The simulator subclass below only records what android_env hands it (touches in device pixels,
adb command lines) and serves a fixed gradient frame instead of noise, so the tests can check the
whole path: normalised Action -> device pixels -> android_env's normalised touch_position ->
android_env's pixel conversion -> the simulator."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("android_env")

from android_env.components.action_type import ActionType  # noqa: E402
from android_env.components.simulators.fake import fake_simulator  # noqa: E402

from emulators.android import android_env as ae  # noqa: E402
from emulators.android.device import AndroidDevice  # noqa: E402
from guiagent.types import (  # noqa: E402
    Click, Drag, Key, LongPress, NavigateBack, NavigateHome, OpenApp, Scroll, Swipe, Type,
)

W, H = 360, 640


class _RecordingAdb(fake_simulator.FakeAdbController):
    def __init__(self, log, *a, **k):
        super().__init__(*a, **k)
        self.log = log

    def execute_command(self, args, timeout=None, device_specific=True):
        self.log.append(list(args))
        return super().execute_command(args, timeout, device_specific)


class RecordingSimulator(fake_simulator.FakeSimulator):
    touches: list = []
    adb_log: list = []

    def __init__(self, config):
        super().__init__(config)
        self.touches, self.adb_log = [], []
        h, w = config.screen_dimensions
        y, x = np.mgrid[0:h, 0:w]
        self.frame = np.stack([x % 256, y % 256, (x + y) % 256], axis=-1).astype(np.uint8)

    def create_adb_controller(self):
        from android_env.components import config_classes
        return _RecordingAdb(self.adb_log, config_classes.AdbControllerConfig())

    def send_touch(self, touches):
        self.touches.extend(touches)

    def _get_screenshot_impl(self):
        return self.frame


@pytest.fixture()
def env():
    e = ae.make_fake_env((W, H), simulator_cls=RecordingSimulator)
    yield e
    e.close()


@pytest.fixture()
def sim(env):
    return env._simulator


@pytest.fixture()
def device(env):
    return AndroidDevice(ae.AndroidEnvTransport(env), with_tree=False, settle_s=0, home_on_reset=False)


def test_action_type_values_match_android_env():
    assert (ae.TOUCH, ae.LIFT, ae.REPEAT) == (ActionType.TOUCH, ActionType.LIFT, ActionType.REPEAT)
    assert (ae.KEYDOWN, ae.KEYUP, ae.KEYPRESS) == (ActionType.KEYDOWN, ActionType.KEYUP, ActionType.KEYPRESS)


def test_screenshot_is_the_simulator_frame_as_png(device, sim):
    obs = device.observe()
    assert obs.screenshot[:8] == b"\x89PNG\r\n\x1a\n"
    assert (obs.width, obs.height) == (W, H)
    decoded = np.asarray(Image.open(io.BytesIO(obs.screenshot)).convert("RGB"))
    np.testing.assert_array_equal(decoded, sim.frame)  # lossless, right orientation


def test_click_lands_on_the_device_pixel(device, sim):
    device.execute(Click(0.5, 0.25))
    assert sim.touches[-2:] == [(180, 160, True, 0), (180, 160, False, 0)]
    sim.touches.clear()
    device.execute(Click(1.0, 1.0))  # the far edge maps to the last pixel, not past it
    assert sim.touches[0][:3] == (W - 1, H - 1, True)


@pytest.mark.parametrize("px, py", [(0, 0), (1, 1), (179, 320), (359, 639), (200, 7)])
def test_pixel_round_trip_through_android_env(env, sim, px, py):
    t = ae.AndroidEnvTransport(env, own_env=False)
    t.tap(px, py)
    assert sim.touches[-2][:2] == (px, py)


def test_swipe_and_scroll_paths(device, sim):
    device.execute(Swipe(0.1, 0.5, 0.9, 0.5, duration_ms=50))
    downs = [t for t in sim.touches if t[2]]
    assert downs[0][:2] == (36, 320) and downs[-1][:2] == (324, 320)
    xs = [t[0] for t in downs]
    assert xs == sorted(xs) and len(downs) >= 2
    assert not sim.touches[-1][2]  # finger lifted
    sim.touches.clear()
    device.execute(Scroll("down", amount=0.5))
    downs = [t for t in sim.touches if t[2]]
    assert downs[0][1] > downs[-1][1]  # content down = finger up
    assert {t[0] for t in downs} == {180}


def test_long_press_keeps_the_finger_down(device, sim):
    t0 = time.monotonic()
    device.execute(LongPress(0.5, 0.5, duration_ms=300))
    assert time.monotonic() - t0 >= 0.3
    first_down = next(i for i, t in enumerate(sim.touches) if t[2])  # reset may lift fingers first
    held = sim.touches[first_down:]
    assert all(t[2] for t in held[:-1]) and not held[-1][2]
    assert len(held) >= 3


def test_text_keys_and_apps_go_through_adb_requests(device, sim):
    sim.adb_log.clear()
    device.execute(Type("hi there\nok", x=0.5, y=0.5, submit=True))
    device.execute(Key("Control+a"))
    device.execute(NavigateBack())
    device.execute(NavigateHome())
    device.execute(OpenApp("markor"))
    device.execute(OpenApp("org.example.notes"))
    log = [" ".join(a) for a in sim.adb_log]
    joined = "\n".join(log)
    assert "shell input text 'hi%sthere'" in joined  # quoted for the device shell, space as %s
    assert "shell input text 'ok'" in joined
    assert joined.count("shell input keyevent 66") == 2  # the newline and submit
    assert "shell input keycombination 113 29" in joined
    assert "shell input keyevent KEYCODE_BACK" in joined
    assert "shell input keyevent KEYCODE_HOME" in joined
    assert any("net.gsantner.markor/net.gsantner.markor.activity.MainActivity" in line for line in log)
    assert any("monkey -p org.example.notes" in line for line in log)


def test_untypeable_text_is_an_action_error(device):
    from emulators.base import ActionError
    with pytest.raises(ActionError, match="nothing of '日本' is ASCII"):
        device.execute(Type("日本"))


def test_accents_are_typed_as_android_world_types_them(device, sim):
    sim.adb_log.clear()
    device.execute(Type("Sauté"))
    assert sim.adb_log == [["shell", "input", "text", "'Saute'"]]


def test_drag_is_android_worlds_draganddrop(device, sim):
    """android_world drags on this controller with ``input draganddrop ... 4000`` (actuation.py); touch
    steps would never hold still long enough for the item to be picked up."""
    sim.adb_log.clear()
    sim.touches.clear()
    device.execute(Drag(0.1, 0.5, 0.9, 0.25))
    assert sim.adb_log == [["shell", "input", "draganddrop", "36", "320", "324", "160", "4000"]]
    assert sim.touches == []


def test_fake_transport_speed():
    t0 = time.perf_counter()
    t = ae.AndroidEnvTransport.fake((W, H))
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(10):
        t.tap(10, 10)
    tap_ms = (time.perf_counter() - t0) / 10 * 1e3
    t.close()
    assert load_s < 10 and tap_ms < 500, (load_s, tap_ms)


def _dumping_simulator(xml: bytes):
    """A recording simulator whose adb answers ``uiautomator dump`` with ``xml``."""

    class _DumpingAdb(_RecordingAdb):
        def execute_command(self, args, timeout=None, device_specific=True):
            if any("uiautomator dump" in str(a) for a in args):
                return xml
            return super().execute_command(args, timeout, device_specific)

    class _DumpingSimulator(RecordingSimulator):
        def create_adb_controller(self):
            from android_env.components import config_classes
            return _DumpingAdb(self.adb_log, config_classes.AdbControllerConfig())

    return _DumpingSimulator


#: a settings row scaled to this screen
DumpingSimulator = _dumping_simulator(
    b'<?xml version="1.0"?><hierarchy rotation="0">'
    b'<node class="android.widget.TextView" text="Wi-Fi" bounds="[20,100][200,140]"/>'
    b'<node class="android.widget.Switch" text="" checkable="true" clickable="true" '
    b'bounds="[280,100][340,140]"/></hierarchy>')


def test_marks_from_the_dump_and_element_taps_through_android_env():
    from guiagent.types import ClickElement

    env = ae.make_fake_env((W, H), simulator_cls=DumpingSimulator)
    try:
        dev = AndroidDevice(ae.AndroidEnvTransport(env), with_tree=True, with_marks=True, settle_s=0,
                            home_on_reset=False)
        obs = dev.observe()
        assert [(m.role, m.name) for m in obs.marks] == [("text", "Wi-Fi"), ("switch", "")]
        switch = next(m for m in obs.marks if m.role == "switch")
        assert switch.box == pytest.approx((280 / W, 100 / H, 340 / W, 140 / H), abs=1e-5)
        assert "Switch clickable checkable bounds=[280,100][340,140]" in obs.tree  # one dump, both
        sim = env._simulator
        sim.touches.clear()
        dev.execute(ClickElement(switch.id))
        x, y, down = sim.touches[0][:3]
        assert abs(x - 310) <= 1 and abs(y - 120) <= 1 and down  # the centre, through android_env's rounding
    finally:
        env.close()


#: a list row and a floating button drawn over the row's centre
FabSimulator = _dumping_simulator(
    b'<?xml version="1.0"?><hierarchy rotation="0">'
    b'<node class="android.widget.LinearLayout" clickable="true" bounds="[0,100][360,200]">'
    b'<node class="android.widget.TextView" text="Alice" bounds="[20,100][200,200]"/></node>'
    b'<node class="android.widget.ImageButton" content-desc="New" clickable="true" '
    b'bounds="[120,80][240,220]"/></hierarchy>')


def test_an_element_under_a_floating_button_is_tapped_where_the_button_is_not():
    """A row whose centre a later control covers (a floating button): the element action's touch lands on the
    row, beside the button, and the device says where (``element_point``, recorded with the step)."""
    from guiagent.types import ClickElement

    env = ae.make_fake_env((W, H), simulator_cls=FabSimulator)
    try:
        dev = AndroidDevice(ae.AndroidEnvTransport(env), with_marks=True, settle_s=0, home_on_reset=False)
        marks = {m.name: m for m in dev.observe().marks}
        row, fab = marks["Alice"], marks["New"]
        assert fab.contains(*row.center)
        sim = env._simulator
        sim.touches.clear()
        dev.execute(ClickElement(row.id))
        x, y = sim.touches[0][:2]
        assert not (120 <= x <= 240) and 100 <= y <= 200  # on the row, off the button
        assert dev.element_point is not None and row.contains(*dev.element_point) \
            and not fab.contains(*dev.element_point)
        sim.touches.clear()
        dev.execute(ClickElement(fab.id))  # nothing over the button: its centre
        x, y = sim.touches[0][:2]
        assert abs(x - 180) <= 1 and abs(y - 150) <= 1 and dev.element_point == fab.center
    finally:
        env.close()


def test_a_transport_without_a_dump_gives_no_marks(device):
    device.with_marks = True
    assert device.observe().marks is None  # the fake's adb answers no dump: no table, not an empty one
