"""Appium transport against a real Appium 3 server with @appium/fake-driver (started by the fixture).

The fake driver serves a fixed PNG, the page source of the app XML, the window size from it, and
records W3C actions (read back with ``get_log('actions')``); it implements no ``mobile:`` methods,
which exercises the error paths (they must become ActionError, not crashes)."""

from __future__ import annotations

import time

import pytest

from emulators.android.appium import AppiumTransport
from emulators.android.device import AndroidDevice
from emulators.android.transport import png_size
from emulators.base import ActionError, DeviceError
from guiagent.types import Click, Drag, Key, LongPress, OpenApp, Scroll, Swipe, Type

from .conftest import free_port


@pytest.fixture(scope="module")
def transport(appium_server, fake_caps):
    t = AppiumTransport(appium_server, fake_caps)
    yield t
    t.close()


@pytest.fixture()
def device(transport):
    transport.driver.get_log("actions")  # the log is cumulative; remember where this test starts
    return AndroidDevice(transport, settle_s=0, home_on_reset=False)


def _new_actions(transport, before: int) -> list:
    return transport.driver.get_log("actions")[before:]


def _pointer(actions_entry) -> list[dict]:
    (source,) = [s for s in actions_entry if s["type"] == "pointer"]
    assert source["parameters"]["pointerType"] == "touch"
    return source["actions"]


def test_observe_returns_png_bytes_and_the_tree(device, fake_driver_screen_png):
    obs = device.observe()
    assert obs.screenshot == fake_driver_screen_png  # PNG bytes end to end, unchanged
    assert (obs.width, obs.height) == png_size(fake_driver_screen_png)
    assert '[2] TextView "Notes" id=title bounds=[40,100][600,180]' in obs.tree  # under AppiumAUT/app
    assert device.screen_size == (1080, 2400)  # from the app XML: the touch frame


def test_click_becomes_a_touch_tap_in_device_pixels(device, transport):
    n = len(transport.driver.get_log("actions"))
    device.execute(Click(0.5, 0.25))
    (entry,) = _new_actions(transport, n)
    acts = _pointer(entry)
    assert acts[0] == {"type": "pointerMove", "duration": 0, "x": 540, "y": 600, "origin": "viewport"}
    assert [a["type"] for a in acts] == ["pointerMove", "pointerDown", "pause", "pointerUp"]


def test_long_press_holds_for_its_duration(device, transport):
    n = len(transport.driver.get_log("actions"))
    device.execute(LongPress(0.1, 0.9, duration_ms=1200))
    acts = _pointer(_new_actions(transport, n)[0])
    assert acts[0]["x"] == 108 and acts[0]["y"] == 2160
    assert {"type": "pause", "duration": 1200} in acts


def test_swipe_and_scroll_directions(device, transport):
    n = len(transport.driver.get_log("actions"))
    device.execute(Swipe(0.5, 0.8, 0.5, 0.2, duration_ms=250))
    device.execute(Scroll("down"))   # reveal content below: the finger moves up
    device.execute(Scroll("right"))  # reveal content to the right: the finger moves left
    swipe, down, right = (_pointer(e) for e in _new_actions(transport, n))
    moves = [a for a in swipe if a["type"] == "pointerMove"]
    assert (moves[0]["y"], moves[1]["y"], moves[1]["duration"]) == (1920, 480, 250)
    d = [a for a in down if a["type"] == "pointerMove"]
    assert d[0]["y"] > d[1]["y"] and d[0]["x"] == d[1]["x"] == 540
    r = [a for a in right if a["type"] == "pointerMove"]
    assert r[0]["x"] > r[1]["x"] and r[0]["y"] == r[1]["y"] == 1200


def test_drag_holds_before_moving(device, transport):
    n = len(transport.driver.get_log("actions"))
    device.execute(Drag(0.1, 0.1, 0.9, 0.9))
    acts = _pointer(_new_actions(transport, n)[0])
    assert [a["type"] for a in acts] == ["pointerMove", "pointerDown", "pause", "pointerMove", "pointerUp"]


def test_type_at_a_point_taps_then_types(device, transport):
    n = len(transport.driver.get_log("actions"))
    device.execute(Type("hi there\n", x=0.5, y=0.2))
    tap, keys = _new_actions(transport, n)
    assert _pointer(tap)[0]["y"] == 480
    (source,) = keys
    typed = [a["value"] for a in source["actions"] if a["type"] == "keyDown"]
    assert "".join(typed) == "hi there\ue007"  # newline -> W3C Enter


def test_unsupported_driver_commands_become_action_errors(device):
    with pytest.raises(ActionError, match="press_keycode 66 failed"):
        device.execute(Key("Enter"))
    with pytest.raises(ActionError, match="activate_app failed"):
        device.execute(OpenApp("org.example.notes"))
    with pytest.raises(ActionError, match="unknown app"):
        device.execute(OpenApp("No Such App"))
    with pytest.raises(ActionError, match="unknown key"):
        device.execute(Key("Hyper"))
    assert device.transport.current_activity() is None


def test_command_latency_on_loopback(transport):
    t0 = time.perf_counter()
    for _ in range(20):
        transport.tap(10, 10)
    per_call_ms = (time.perf_counter() - t0) / 20 * 1e3
    assert per_call_ms < 250, per_call_ms  # ~1-3 ms measured; generous for a loaded CI machine


def test_no_server_is_a_device_error():
    with pytest.raises(DeviceError, match="cannot start a session"):
        AppiumTransport(f"http://127.0.0.1:{free_port()}", {"platformName": "Fake"})


def test_bad_capabilities_are_a_device_error(appium_server):
    with pytest.raises(DeviceError, match="cannot start a session"):
        AppiumTransport(appium_server, {"platformName": "Fake", "appium:automationName": "Fake",
                                        "appium:app": "/nonexistent/app.xml"})


def test_dead_session_is_a_device_error(appium_server, fake_caps):
    t = AppiumTransport(appium_server, fake_caps)
    t.driver.quit()
    with pytest.raises(DeviceError, match="session is gone"):
        t.screenshot()
    t.close()


def test_marks_from_the_page_source_and_element_taps(transport):
    from guiagent.types import ClickElement

    dev = AndroidDevice(transport, settle_s=0, home_on_reset=False, with_marks="true")
    obs = dev.observe()
    assert [(m.role, m.name) for m in obs.marks] == [("text", "Notes"), ("textbox", "note_body"),
                                                      ("button", "Save"), ("checkbox", "Pin note")]
    assert obs.tree and "Save" in obs.tree  # the same dump gives the tree text
    save = next(m for m in obs.marks if m.name == "Save")
    n = len(transport.driver.get_log("actions"))
    dev.execute(ClickElement(save.id))
    (entry,) = _new_actions(transport, n)
    move = _pointer(entry)[0]
    assert abs(move["x"] - 920) <= 1 and abs(move["y"] - 2260) <= 1  # the Save button's centre
    with pytest.raises(ActionError, match="no element 9 on this screen; its elements are numbered 0-3"):
        dev.execute(ClickElement(9))
    assert AndroidDevice(transport, settle_s=0, home_on_reset=False).observe().marks is None  # off by default
