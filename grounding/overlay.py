"""What to draw over a screenshot for an action: data for the web UI, pixels for docs.

:func:`overlay` returns JSON-able primitives in the screenshot's own pixel frame
(origin top left): ``points`` for taps and presses, ``arrows`` for swipes,
drags and scrolls, and a ``label`` for typed text, keys and the other actions.
The web UI draws them itself (SVG/canvas); :func:`draw` renders the same data
with PIL for documentation and debugging.

Scroll arrows point in the scroll ``direction`` (towards the content that comes
into view), start at the scroll point (or the screen centre) and are
``amount / 2`` of the screen long.
"""

from __future__ import annotations

import io
from typing import Any

from guiagent.types import (
    Action, Answer, Click, DoubleClick, Drag, Finish, Hover, Key, LongPress, NavigateBack, NavigateHome,
    OpenApp, ParseError, RightClick, Scroll, Swipe, Type, Wait,
)

from grounding.spec import check_image_size

__all__ = ["overlay", "draw"]

_LABEL_MAX = 80


def _px(x: float, y: float, w: int, h: int) -> list[float]:
    return [round(x * w, 1), round(y * h, 1)]


def _short(text: str) -> str:
    text = text.replace("\n", "⏎")
    return text if len(text) <= _LABEL_MAX else text[:_LABEL_MAX - 1] + "…"


def overlay(action: Action | ParseError | None, image_size: tuple[int, int]) -> dict[str, Any]:
    """Overlay primitives for ``action`` on a screenshot of ``image_size`` (width, height).

    Returns ``{"kind", "width", "height", "points": [{"x", "y", "style"}],
    "arrows": [{"x1", "y1", "x2", "y2", "style"}], "label": str | None}`` where
    ``style`` is the action kind (``click``, ``long_press``, ``type``, ``swipe``,
    ``drag``, ``scroll``; double clicks, right clicks and hovers use ``click`` plus a label).
    A :class:`ParseError` or ``None`` gives no shapes and a label.

    >>> overlay(Click(0.5, 0.25), (200, 400))["points"]
    [{'x': 100.0, 'y': 100.0, 'style': 'click'}]
    """
    w, h = check_image_size(image_size)
    out: dict[str, Any] = {"kind": None, "width": w, "height": h, "points": [], "arrows": [], "label": None}

    def point(x: float, y: float, style: str) -> None:
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
        point(action.x, action.y, "click")
    elif isinstance(action, (DoubleClick, RightClick, Hover)):
        # drawn as a click point (every viewer already styles it); the label tells them apart
        point(action.x, action.y, "click")
        out["label"] = {"double_click": "double click", "right_click": "right click",
                        "hover": "hover"}[action.kind]
    elif isinstance(action, LongPress):
        point(action.x, action.y, "long_press")
        out["label"] = f"long press {action.duration_ms} ms"
    elif isinstance(action, Type):
        if action.x is not None and action.y is not None:
            point(action.x, action.y, "type")
        out["label"] = "type: " + _short(action.text) + (" ⏎" if action.submit else "")
    elif isinstance(action, (Swipe, Drag)):
        point(action.x1, action.y1, action.kind)
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
    return out


_COLOURS = {"click": (255, 40, 40), "long_press": (255, 140, 0), "type": (40, 120, 255),
            "swipe": (160, 40, 255), "drag": (0, 170, 120), "scroll": (0, 150, 220)}


def draw(png_bytes: bytes, action: Action | ParseError | None) -> bytes:
    """Render :func:`overlay` onto an image (PNG or JPEG bytes) and return PNG bytes."""
    from PIL import Image, ImageDraw

    img = Image.open(io.BytesIO(png_bytes)).convert("RGB")
    data = overlay(action, img.size)
    d = ImageDraw.Draw(img)
    r = max(4, min(img.size) // 40)
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
