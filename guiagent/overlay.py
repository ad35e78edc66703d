"""What to draw over a screenshot for an action: data for the web UI, pixels for docs.

:func:`overlay` returns JSON-able primitives in the screenshot's own pixel frame
(origin top left): ``points`` for taps and presses, ``arrows`` for swipes,
drags and scrolls, and a ``label`` for typed text, keys and the other actions.
The web UI draws them itself (SVG/canvas); :func:`draw` renders the same data
with PIL for documentation and debugging.

Scroll arrows point in the scroll ``direction`` (towards the content that comes
into view), start at the scroll point (or the screen centre) and are
``amount / 2`` of the screen long.

Element actions (``ClickElement`` ...) are drawn where the device carried them out: the point the
step recorded (``point``: the browser and Android devices tap the part of the box the element itself
takes, which is not the centre where another element covers it), else the centre of their mark, with the mark's box and a
label naming it. They need the step's mark table (``marks``); without it, or with an id it does not
hold, only the label says what was asked. :func:`marks_overlay` gives every mark of a screen (box and number), for a layer a
viewer can switch on.
"""

from __future__ import annotations

import io
from typing import Any, Sequence

from PIL import Image, ImageDraw

from guiagent.types import (
    Action, Answer, Click, ClickElement, DoubleClick, Drag, Finish, Hover, Key, LongPress, LongPressElement,
    Mark, NavigateBack, NavigateHome, OpenApp, ParseError, RightClick, Scroll, Swipe, Type, TypeElement, Wait,
    check_image_size,
)

__all__ = ["overlay", "draw", "marks_overlay"]

_LABEL_MAX = 80


def _px(x: float, y: float, w: int, h: int) -> list[float]:
    return [round(x * w, 1), round(y * h, 1)]


def _short(text: str) -> str:
    text = text.replace("\n", "⏎")
    return text if len(text) <= _LABEL_MAX else text[:_LABEL_MAX - 1] + "…"


def overlay(action: Action | ParseError | None, image_size: tuple[int, int],
            marks: Sequence[Mark] | None = None, point: tuple[float, float] | None = None) -> dict[str, Any]:
    """Overlay primitives for ``action`` on a screenshot of ``image_size`` (width, height).

    Returns ``{"kind", "width", "height", "points": [{"x", "y", "style"}],
    "arrows": [{"x1", "y1", "x2", "y2", "style"}], "boxes": [{"x0", "y0", "x1", "y1", "style"}],
    "label": str | None}`` where ``style`` is the action kind (``click``, ``long_press``, ``type``,
    ``swipe``, ``drag``, ``scroll``; double clicks, right clicks and hovers use ``click`` plus a
    label). An element action gives its mark's box and a point, in the style of the same action at a
    point, when ``marks`` (the step's mark table) holds its id: at ``point`` (normalised, where the device
    says it carried the action out: ``Step.metadata["tap_point"]``) when that lies in the box, else at the
    box's centre. A
    :class:`ParseError` or ``None`` gives no shapes and a label.

    >>> overlay(Click(0.5, 0.25), (200, 400))["points"]
    [{'x': 100.0, 'y': 100.0, 'style': 'click'}]
    >>> ov = overlay(ClickElement(3), (200, 400), [Mark(3, "link", "Files", (0.1, 0.1, 0.3, 0.2))])
    >>> ov["points"], ov["boxes"], ov["label"]
    ([{'x': 40.0, 'y': 60.0, 'style': 'click'}], [{'x0': 20.0, 'y0': 40.0, 'x1': 60.0, 'y1': 80.0, 'style': 'click'}], '[3] link "Files"')
    """
    w, h = check_image_size(image_size)
    out: dict[str, Any] = {"kind": None, "width": w, "height": h, "points": [], "arrows": [], "boxes": [],
                           "label": None}

    def point_at(x: float, y: float, style: str) -> None:
        px, py = _px(x, y, w, h)
        out["points"].append({"x": px, "y": py, "style": style})

    def arrow(x1: float, y1: float, x2: float, y2: float, style: str) -> None:
        (a, b), (c, d) = _px(x1, y1, w, h), _px(x2, y2, w, h)
        out["arrows"].append({"x1": a, "y1": b, "x2": c, "y2": d, "style": style})

    if action is None:
        out["kind"], out["label"] = "none", "no action"
        return out
    if isinstance(action, ParseError):
        out["kind"], out["label"] = "parse_error", _short(str(action))
        return out
    out["kind"] = action.kind
    if isinstance(action, Click):
        point_at(action.x, action.y, "click")
    elif isinstance(action, (DoubleClick, RightClick, Hover)):
        # drawn as a click point (every viewer already styles it); the label tells them apart
        point_at(action.x, action.y, "click")
        out["label"] = {"double_click": "double click", "right_click": "right click",
                        "hover": "hover"}[action.kind]
    elif isinstance(action, LongPress):
        point_at(action.x, action.y, "long_press")
        out["label"] = f"long press {action.duration_ms} ms"
    elif isinstance(action, Type):
        if action.x is not None and action.y is not None:
            point_at(action.x, action.y, "type")
        out["label"] = "type: " + _short(action.text) + (" ⏎" if action.submit else "")
    elif isinstance(action, (Swipe, Drag)):
        point_at(action.x1, action.y1, action.kind)
        arrow(action.x1, action.y1, action.x2, action.y2, action.kind)
    elif isinstance(action, Scroll):
        x = 0.5 if action.x is None else action.x
        y = 0.5 if action.y is None else action.y
        dx, dy = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}[action.direction]
        half = action.amount / 2
        x2, y2 = min(1.0, max(0.0, x + dx * half)), min(1.0, max(0.0, y + dy * half))
        arrow(x, y, x2, y2, "scroll")
        out["label"] = f"scroll {action.direction}"
    elif isinstance(action, Key):
        out["label"] = f"key: {_short(action.key)}"
    elif isinstance(action, NavigateBack):
        out["label"] = "back"
    elif isinstance(action, NavigateHome):
        out["label"] = "home"
    elif isinstance(action, OpenApp):
        out["label"] = f"open app: {_short(action.app)}"
    elif isinstance(action, Wait):
        out["label"] = f"wait {action.seconds:g} s"
    elif isinstance(action, Answer):
        out["label"] = f"answer: {_short(action.text)}"
    elif isinstance(action, Finish):
        out["label"] = f"finish ({action.status})" + (f": {_short(action.message)}" if action.message else "")
    elif isinstance(action, (ClickElement, LongPressElement, TypeElement)):
        style = {"click_element": "click", "long_press_element": "long_press", "type_element": "type"}[action.kind]
        mark = next((m for m in marks or () if m.id == action.element), None)
        if mark is None:
            out["label"] = (f"element {action.element} (" + ("not on this screen" if marks is not None
                                                             else "no marks stored") + ")")
        else:
            x0, y0, x1, y1 = mark.box
            (a, b), (c, d) = _px(x0, y0, w, h), _px(x1, y1, w, h)
            out["boxes"].append({"x0": a, "y0": b, "x1": c, "y1": d, "style": style})
            inside = point is not None and x0 <= point[0] <= x1 and y0 <= point[1] <= y1
            point_at(*(point if inside else mark.center), style)
            out["label"] = _short(f"[{mark.id}] {mark.role}" + (f" \"{mark.name}\"" if mark.name else ""))
        if isinstance(action, TypeElement):
            out["label"] += " · type: " + _short(action.text) + (" ⏎" if action.submit else "")
        elif isinstance(action, LongPressElement):
            out["label"] += f" · long press {action.duration_ms} ms"
    return out


def marks_overlay(marks: Sequence[Mark] | None, image_size: tuple[int, int]) -> list[dict[str, Any]]:
    """Every mark of a screen in its pixel frame: ``[{"id", "role", "name", "states", "x0", "y0", "x1", "y1"}]``
    (``[]`` for no marks), for a layer that numbers the screen's elements as the model saw them.

    >>> marks_overlay([Mark(0, "button", "OK", (0.5, 0.5, 1.0, 1.0), ("disabled",))], (100, 50))
    [{'id': 0, 'role': 'button', 'name': 'OK', 'states': ['disabled'], 'x0': 50.0, 'y0': 25.0, 'x1': 100.0, 'y1': 50.0}]
    """
    w, h = check_image_size(image_size)
    out = []
    for m in marks or ():
        (a, b), (c, d) = _px(m.box[0], m.box[1], w, h), _px(m.box[2], m.box[3], w, h)
        out.append({"id": m.id, "role": m.role, "name": m.name, "states": list(m.states), "x0": a, "y0": b,
                    "x1": c, "y1": d})
    return out


_COLOURS = {"click": (255, 40, 40), "long_press": (255, 140, 0), "type": (40, 120, 255),
            "swipe": (160, 40, 255), "drag": (0, 170, 120), "scroll": (0, 150, 220)}


def draw(png_bytes: bytes, action: Action | ParseError | None, marks: Sequence[Mark] | None = None, *,
         show_marks: bool = False, point: tuple[float, float] | None = None) -> bytes:
    """Render :func:`overlay` onto an image (PNG or JPEG bytes) and return PNG bytes; ``show_marks`` also
    outlines every mark with its number (set-of-marks, as a marks-format model is prompted); ``point``: where
    the device carried an element action out (the step's ``tap_point``)."""
    img = Image.open(io.BytesIO(png_bytes)).convert("RGB")
    data = overlay(action, img.size, marks, point)
    d = ImageDraw.Draw(img)
    r = max(4, min(img.size) // 40)
    if show_marks:
        for m in marks_overlay(marks, img.size):
            d.rectangle([m["x0"], m["y0"], m["x1"], m["y1"]], outline=(255, 200, 0), width=1)
            tag = str(m["id"])
            box = d.textbbox((m["x0"] + 1, m["y0"] + 1), tag)
            d.rectangle([box[0] - 1, box[1] - 1, box[2] + 1, box[3] + 1], fill=(255, 200, 0))
            d.text((m["x0"] + 1, m["y0"] + 1), tag, fill=(0, 0, 0))
    for b in data["boxes"]:
        d.rectangle([b["x0"], b["y0"], b["x1"], b["y1"]], outline=_COLOURS.get(b["style"], (255, 0, 0)),
                    width=max(2, r // 3))
    for a in data["arrows"]:
        col = _COLOURS.get(a["style"], (255, 0, 0))
        d.line([(a["x1"], a["y1"]), (a["x2"], a["y2"])], fill=col, width=max(2, r // 2))
        # arrow head: a small triangle at the end, along the arrow's direction
        vx, vy = a["x2"] - a["x1"], a["y2"] - a["y1"]
        norm = max(1e-6, (vx * vx + vy * vy) ** 0.5)
        ux, uy = vx / norm, vy / norm
        tip = (a["x2"], a["y2"])
        base = (a["x2"] - ux * 2 * r, a["y2"] - uy * 2 * r)
        d.polygon([tip, (base[0] - uy * r, base[1] + ux * r), (base[0] + uy * r, base[1] - ux * r)], fill=col)
    for p in data["points"]:
        col = _COLOURS.get(p["style"], (255, 0, 0))
        d.ellipse([p["x"] - r, p["y"] - r, p["x"] + r, p["y"] + r], outline=col, width=max(2, r // 3))
        d.ellipse([p["x"] - 2, p["y"] - 2, p["x"] + 2, p["y"] + 2], fill=col)
    if data["label"]:
        box = d.textbbox((4, 4), data["label"])
        d.rectangle([box[0] - 3, box[1] - 3, box[2] + 3, box[3] + 3], fill=(0, 0, 0))
        d.text((4, 4), data["label"], fill=(255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
