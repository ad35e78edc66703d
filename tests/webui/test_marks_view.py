"""Marks in the web UI: an element action drawn on its element, the layer numbering a screen's
elements (escaped), the list of marks beside the step, and the "marks" toggle in a real browser."""

from __future__ import annotations

import threading

import pytest

from guiagent.store import Store
from guiagent.types import Click, ClickElement, Finish, LongPressElement, Mark, Step, TaskSpec, TypeElement
from tests.webui.conftest import XSS, obs
from webui import AppConfig, create_app
from webui.overlay import mark_shapes, overlay_shapes

MARKS = (Mark(0, "link", "Contacts", (0.0, 0.1, 0.25, 0.2)), Mark(1, "button", XSS, (0.5, 0.5, 1.0, 0.75)),
         Mark(2, "textbox", "To", (0.05, 0.8, 0.95, 0.9)))


def test_element_actions_are_drawn_on_their_element():
    ov = overlay_shapes(ClickElement(1), 360, 640, MARKS)
    rect, ring, dot, label = ov["shapes"][0], ov["shapes"][-3], ov["shapes"][-2], ov["shapes"][-1]
    assert (rect["type"], rect["x"], rect["y"], rect["width"], rect["height"]) == ("rect", 180.0, 320.0, 180.0, 160.0)
    assert (ring["cx"], ring["cy"], ring["style"]) == (270.0, 400.0, "click") and dot["type"] == "dot"
    assert label["type"] == "label" and label["text"].startswith("[1] button")
    assert overlay_shapes(LongPressElement(0), 360, 640, MARKS)["shapes"][0]["style"] == "long_press"
    assert "type: Ann" in overlay_shapes(TypeElement(2, "Ann"), 360, 640, MARKS)["label"]
    # an id the screen does not hold, or a step stored without marks: only a label says what was asked
    missing = overlay_shapes(ClickElement(9), 360, 640, MARKS)
    assert [s["type"] for s in missing["shapes"]] == ["label"] and "not on this screen" in missing["label"]
    assert "no marks stored" in overlay_shapes(ClickElement(0), 360, 640)["label"]


def test_an_element_action_is_drawn_where_the_step_says_it_tapped():
    """The step's ``tap_point`` (where the browser tapped: off the centre where another element covers it) places
    the point; one outside the element's box, or metadata of another shape, leaves it at the centre."""
    from webui.data import tap_point

    at = overlay_shapes(ClickElement(1), 360, 640, MARKS, (0.9, 0.6))
    rect, ring = at["shapes"][0], at["shapes"][-3]
    assert rect["x"] == 180.0 and (ring["cx"], ring["cy"]) == (324.0, 384.0)
    outside = overlay_shapes(ClickElement(1), 360, 640, MARKS, (0.1, 0.1))
    assert (outside["shapes"][-3]["cx"], outside["shapes"][-3]["cy"]) == (270.0, 400.0)
    assert tap_point({"tap_point": [0.9, 0.6]}) == (0.9, 0.6)
    for bad in ({}, {"tap_point": "0.5,0.5"}, {"tap_point": [0.5]}, {"tap_point": [0.5, float("nan")]},
                {"tap_point": [True, 0.5]}, {"tap_point": [2.0, 0.5]}, {"tap_point": [0.5, -0.1]},
                {"tap_point": {"x": 0.5}}, {"tap_point": [0.5, 0.5, 0.5]}, [], {"tap_point": [10 ** 400, 0.5]},
                {"tap_point": [0.5, float("inf")]}):
        assert tap_point(bad) is None, bad


def test_mark_layer_geometry():
    layer = mark_shapes(MARKS, 360, 640)
    m = layer["marks"][1]
    assert (m["id"], m["x"], m["y"], m["width"], m["height"]) == (1, 180.0, 320.0, 180.0, 160.0)
    assert m["tag"]["x"] + m["tag"]["width"] <= 360 and m["title"].startswith("[1] button \"<script>")
    assert mark_shapes(None, 360, 640) is None and mark_shapes((), 360, 640)["marks"] == []
    ticked = mark_shapes((Mark(0, "checkbox", "Ugi", (0, 0, 0.5, 0.5), ("checked",)),), 360, 640)
    assert ticked["marks"][0]["title"] == '[0] checkbox checked "Ugi"'  # the tooltip and the list beside the step


@pytest.fixture(scope="module")
def marks_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("marks_runs")
    store = Store.open(root / "run")
    run = store.create_run("marks-demo")
    w = store.begin_episode(run, TaskSpec("webapps", "open_app", 1, "Open the Contacts app."), "model", episode_id="ep-marks")
    w.add_step(Step(0, obs(1, marks=MARKS), ClickElement(1), response='{"action": {"kind": "click_element", "element": 1}}',
                    metadata={"tap_point": [0.9, 0.6]}))
    w.add_step(Step(1, obs(2), Click(0.5, 0.5), response="tap"))  # a screen without marks
    w.add_step(Step(2, obs(3, marks=MARKS), Finish(), response="done", terminated=True))
    w.complete(1.0)
    store.close()
    return create_app(AppConfig(runs=root, refresh_s=0.5))


def test_replay_page_shows_marks_escaped_and_the_toggle(marks_app):
    client = marks_app.test_client()
    html = client.get("/episodes/ep-marks").get_data(as_text=True)
    assert html.count('class="marks-layer"') == 2  # steps 1 and 3; step 2 had no marks
    assert 'class="toggle-marks"' in html
    assert "3 numbered elements on this screen" in html
    assert "&lt;script&gt;" in html and XSS not in html  # page text is data, never markup
    assert 'class="ov ov-click target"' in html  # the acted-on element's box
    assert '<li value="1" class="acted">' in html
    detail = client.get("/api/episodes/ep-marks").get_json()
    s0, s1 = detail["steps"][0], detail["steps"][1]
    assert [m["id"] for m in s0["marks"]["marks"]] == [0, 1, 2] and s1["marks"] is None
    assert s0["action"] == {"kind": "click_element", "element": 1}
    assert s0["overlay"]["shapes"][0]["type"] == "rect"
    assert (s0["overlay"]["shapes"][-3]["cx"], s0["overlay"]["shapes"][-3]["cy"]) == (324.0, 384.0)  # the tap point


@pytest.mark.browser
def test_marks_toggle_in_a_real_browser(marks_app):
    from werkzeug.serving import make_server

    from emulators.browser import BrowserConfig, launch_browser

    server = make_server("127.0.0.1", 0, marks_app, threaded=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    handle = launch_browser(BrowserConfig())
    try:
        page = handle.browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        problems: list[str] = []
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("dialog", lambda d: (problems.append("dialog " + d.message), d.dismiss()))
        page.goto(f"http://127.0.0.1:{server.server_port}/episodes/ep-marks")
        layer = page.locator(".step:not([hidden]) .marks-layer")
        assert not layer.is_visible()  # off by default
        page.locator(".toggle-marks").check()
        assert layer.is_visible() and page.locator(".step:not([hidden]) .marks-layer text").all_text_contents() == \
            ["0", "1", "2"]
        box_img = page.locator(".step:not([hidden]) .shot img").bounding_box()
        assert layer.bounding_box() == pytest.approx(box_img, abs=1.0)  # laid over the screenshot
        page.keyboard.press("m")  # the keyboard switches it off again
        assert not layer.is_visible()
        page.keyboard.press("m")
        page.reload()  # the choice is remembered
        assert page.locator(".step:not([hidden]) .marks-layer").is_visible()
        assert problems == []
    finally:
        handle.close()
        server.shutdown()
        t.join(5)
