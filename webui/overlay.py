"""SVG shapes for an action drawn over its screenshot, in the screenshot's own pixel frame.

:func:`guiagent.overlay.overlay` says *what* to draw (points, arrows, a label, in
pixels); this module decides *how*: radii, stroke widths, arrow heads and where the
label box goes, all relative to the screenshot size, so that an SVG with
``viewBox="0 0 width height"`` laid over the ``<img>`` scales with it.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from guiagent.overlay import marks_overlay, overlay
from guiagent.types import Action, Mark, ParseError

__all__ = ["overlay_shapes", "mark_shapes"]


def _label_box(text: str, w: int, h: int, near: tuple[float, float] | None, unit: float) -> dict[str, Any]:
    fs = max(10.0, round(unit * 0.045, 1))
    pad = fs * 0.45
    max_chars = max(4, int((w * 0.92 - 2 * pad) / (fs * 0.6)))
    if len(text) > max_chars:
        text = text[:max_chars - 1] + "…"
    bw = min(w * 0.96, len(text) * fs * 0.6 + 2 * pad)
    bh = fs + 2 * pad
    if near is None:
        x, y = (w - bw) / 2, h - bh - h * 0.03
    else:  # under the point, or above it near the bottom edge; kept inside the frame
        x = min(max(near[0] - bw / 2, 2.0), w - bw - 2)
        y = near[1] + unit * 0.07
        if y + bh > h - 2:
            y = near[1] - unit * 0.07 - bh
    x, y = round(x, 1), round(max(2.0, y), 1)
    return {"type": "label", "x": x, "y": y, "width": round(bw, 1), "height": round(bh, 1),
            "tx": round(x + pad, 1), "ty": round(y + pad + fs * 0.82, 1), "font_size": fs, "text": text}


def overlay_shapes(action: Action | ParseError | None, width: int, height: int,
                   marks: Sequence[Mark] | None = None, point: tuple[float, float] | None = None) -> dict[str, Any]:
    """``{"kind", "width", "height", "label", "shapes": [...]}`` for one step.

    Shapes: ``rect`` (x, y, width, height: an element action's target), ``circle`` (cx, cy, r,
    style, ring: bool), ``line`` (x1, y1, x2, y2), ``polygon`` (points as "x,y x,y ..." text) and
    ``label`` (box x, y, width, height; text anchor tx, ty; font_size; text). ``style`` is the
    action kind; the stroke width is ``stroke``. ``marks``: the step's mark table, which places an
    element action on its element; ``point``: where the device carried an element action out (the step's
    ``tap_point``), drawn there rather than at the element's centre.
    """
    data = overlay(action, (int(width), int(height)), marks, point)
    w, h = data["width"], data["height"]
    unit = float(min(w, h))
    r = max(7.0, round(unit * 0.05, 1))
    stroke = max(2.0, round(unit * 0.011, 1))
    shapes: list[dict[str, Any]] = []
    for b in data["boxes"]:
        shapes.append({"type": "rect", "x": b["x0"], "y": b["y0"], "width": round(b["x1"] - b["x0"], 1),
                       "height": round(b["y1"] - b["y0"], 1), "style": b["style"]})
    for a in data["arrows"]:
        x1, y1, x2, y2 = a["x1"], a["y1"], a["x2"], a["y2"]
        length = math.hypot(x2 - x1, y2 - y1)
        if length < 1e-6:
            continue
        ux, uy = (x2 - x1) / length, (y2 - y1) / length
        head = min(length * 0.45, r * 1.3)
        bx, by = x2 - ux * head, y2 - uy * head
        half = head * 0.6
        pts = [(x2, y2), (bx - uy * half, by + ux * half), (bx + uy * half, by - ux * half)]
        shapes.append({"type": "line", "x1": x1, "y1": y1, "x2": round(bx, 1), "y2": round(by, 1),
                       "style": a["style"]})
        shapes.append({"type": "polygon", "points": " ".join(f"{px:.1f},{py:.1f}" for px, py in pts),
                       "style": a["style"]})
    for p in data["points"]:
        if p["style"] == "long_press":  # an outer dashed ring says "held"
            shapes.append({"type": "circle", "cx": p["x"], "cy": p["y"], "r": round(r * 1.7, 1),
                           "style": "long_press", "ring": True})
        shapes.append({"type": "circle", "cx": p["x"], "cy": p["y"], "r": r, "style": p["style"],
                       "ring": False})
        shapes.append({"type": "dot", "cx": p["x"], "cy": p["y"], "r": round(max(2.0, r * 0.22), 1),
                       "style": p["style"]})
    if data["label"]:
        near = (data["points"][0]["x"], data["points"][0]["y"]) if data["points"] else None
        if data["arrows"] and near is None:
            a = data["arrows"][0]
            near = (a["x1"], a["y1"])
        shapes.append(_label_box(data["label"], w, h, near, unit))
    return {"kind": data["kind"], "width": w, "height": h, "label": data["label"], "stroke": stroke,
            "shapes": shapes}


def mark_shapes(marks: Sequence[Mark] | None, width: int, height: int) -> dict[str, Any] | None:
    """The layer numbering a screen's marks: ``{"width", "height", "stroke", "marks": [{"id", "x", "y",
    "width", "height", "tag": {x, y, width, height, tx, ty, font_size}, "title"}]}``, or ``None`` when the
    step has no mark table. ``title`` (``[id] role states "name"``) is for a tooltip; like every string
    from a page or a model, the template escapes it."""
    if marks is None:
        return None
    w, h = int(width), int(height)
    unit = float(min(w, h))
    fs = max(8.0, round(unit * 0.03, 1))
    out = []
    for m in marks_overlay(marks, (w, h)):
        text = str(m["id"])
        tw, th = len(text) * fs * 0.62 + fs * 0.4, fs * 1.2
        tx = min(max(m["x0"], 0.0), w - tw)
        ty = min(max(m["y0"], 0.0), h - th)
        out.append({"id": m["id"], "x": m["x0"], "y": m["y0"], "width": round(m["x1"] - m["x0"], 1),
                    "height": round(m["y1"] - m["y0"], 1),
                    "tag": {"x": round(tx, 1), "y": round(ty, 1), "width": round(tw, 1), "height": round(th, 1),
                            "tx": round(tx + fs * 0.2, 1), "ty": round(ty + fs * 0.95, 1), "font_size": fs},
                    "title": f"[{m['id']}] {m['role']}" + "".join(" " + s for s in m["states"])
                             + (f" \"{m['name']}\"" if m["name"] else "")})
    return {"width": w, "height": h, "stroke": max(1.0, round(unit * 0.004, 1)), "marks": out}
