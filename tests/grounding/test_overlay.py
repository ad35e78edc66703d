"""Overlay data (pixel frame of the screenshot) and PIL rendering."""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image

from guiagent.types import (
    Answer, Click, DoubleClick, Drag, Finish, Hover, Key, LongPress, NavigateBack, NavigateHome, OpenApp, ParseError,
    RightClick, Scroll, Swipe, Type, Wait,
)

from grounding.overlay import draw, overlay

SIZE = (200, 400)


def test_points_and_arrows_are_in_screenshot_pixels():
    assert overlay(Click(0.5, 0.25), SIZE)["points"] == [{"x": 100.0, "y": 100.0, "style": "click"}]
    o = overlay(Swipe(0.5, 0.75, 0.5, 0.25), SIZE)
    assert o["arrows"] == [{"x1": 100.0, "y1": 300.0, "x2": 100.0, "y2": 100.0, "style": "swipe"}]
    assert o["points"][0]["style"] == "swipe"
    d = overlay(Drag(0, 0, 1, 1), SIZE)
    assert d["arrows"][0] == {"x1": 0.0, "y1": 0.0, "x2": 200.0, "y2": 400.0, "style": "drag"}
    lp = overlay(LongPress(0.1, 0.1, 1200), SIZE)
    assert lp["points"][0]["style"] == "long_press" and "1200" in lp["label"]


@pytest.mark.parametrize("action,label", [
    (DoubleClick(0.5, 0.25), "double click"), (RightClick(0.5, 0.25), "right click"),
    (Hover(0.5, 0.25), "hover"),
])
def test_pointer_actions_are_click_points_with_a_label(action, label):
    o = overlay(action, SIZE)
    assert o["kind"] == action.kind and o["label"] == label
    assert o["points"] == [{"x": 100.0, "y": 100.0, "style": "click"}]


def test_scroll_arrow_points_towards_revealed_content():
    down = overlay(Scroll("down"), SIZE)["arrows"][0]
    assert (down["x1"], down["y1"]) == (100.0, 200.0) and down["y2"] == 300.0  # amount 0.5 -> a quarter screen
    left = overlay(Scroll("left", 0.1, 0.5, amount=1.0), SIZE)["arrows"][0]
    assert left["x2"] == 0.0  # clipped to the screenshot


@pytest.mark.parametrize("action,label", [
    (Type("hello\nworld", submit=True), "type: hello⏎world ⏎"),
    (Key("Control+c"), "key: Control+c"),
    (NavigateBack(), "back"), (NavigateHome(), "home"), (OpenApp("Clock"), "open app: Clock"),
    (Wait(2.0), "wait 2 s"), (Answer("42"), "answer: 42"), (Finish("failure", "stuck"), "finish (failure): stuck"),
])
def test_labels(action, label):
    o = overlay(action, SIZE)
    assert o["label"] == label and o["kind"] == action.kind
    json.dumps(o)  # JSON-able primitives only


def test_type_at_point_parse_errors_and_long_labels():
    o = overlay(Type("x" * 500, 0.5, 0.5), SIZE)
    assert o["points"][0]["style"] == "type" and len(o["label"]) <= 90
    e = overlay(ParseError("bad_coordinates", "x=1200 is outside"), SIZE)
    assert e["kind"] == "parse_error" and "bad_coordinates" in e["label"] and not e["points"]
    assert overlay(None, SIZE)["kind"] == "none"


def test_draw_marks_the_point():
    buf = io.BytesIO()
    Image.new("RGB", SIZE, (255, 255, 255)).save(buf, format="PNG")
    out = draw(buf.getvalue(), Click(0.5, 0.5))
    img = Image.open(io.BytesIO(out))
    assert img.format == "PNG" and img.size == SIZE
    assert img.getpixel((100, 200)) != (255, 255, 255)  # the centre dot
    assert img.getpixel((5, 395)) == (255, 255, 255)  # far corner untouched
    swiped = Image.open(io.BytesIO(draw(buf.getvalue(), Swipe(0.5, 0.9, 0.5, 0.1))))
    assert swiped.getpixel((100, 200)) != (255, 255, 255)  # on the arrow's line
    labelled = Image.open(io.BytesIO(draw(buf.getvalue(), Key("Enter"))))
    corner = [labelled.getpixel((x, y)) for x in range(30) for y in range(20)]
    assert (0, 0, 0) in corner  # the label's background box at the top left


def test_element_actions_and_the_marks_layer():
    from guiagent.types import ClickElement, Mark, TypeElement
    from grounding.overlay import marks_overlay

    marks = (Mark(0, "link", "Files", (0.1, 0.1, 0.3, 0.2)), Mark(1, "textbox", "To", (0.0, 0.5, 1.0, 0.6)))
    ov = overlay(ClickElement(0), (200, 400), marks)
    assert ov["points"] == [{"x": 40.0, "y": 60.0, "style": "click"}]
    assert ov["boxes"] == [{"x0": 20.0, "y0": 40.0, "x1": 60.0, "y1": 80.0, "style": "click"}]
    assert ov["label"] == '[0] link "Files"'
    ty = overlay(TypeElement(1, "hi", submit=True), (200, 400), marks)
    assert ty["points"][0]["style"] == "type" and ty["label"] == '[1] textbox "To" · type: hi ⏎'
    assert overlay(ClickElement(5), (200, 400), marks)["label"] == "element 5 (not on this screen)"
    assert overlay(ClickElement(5), (200, 400))["points"] == []
    assert [m["id"] for m in marks_overlay(marks, (200, 400))] == [0, 1] and marks_overlay(None, (5, 5)) == []
    buf = io.BytesIO()
    Image.new("RGB", (200, 400), (255, 255, 255)).save(buf, format="PNG")
    out = Image.open(io.BytesIO(draw(buf.getvalue(), ClickElement(0), marks, show_marks=True)))
    assert out.size == (200, 400) and out.getpixel((20, 70)) != (255, 255, 255)  # the box was drawn
