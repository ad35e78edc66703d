"""Synthetic phone-screenshot-like PNGs for the policy and update benches (no browser needed)."""

from __future__ import annotations

import io
import random


def screen(i: int, w: int = 360, h: int = 640) -> bytes:
    """A screenshot-like PNG: status bar, header, a grid of app icons (distinct per ``i``)."""
    from PIL import Image, ImageDraw

    rng = random.Random(i)
    img = Image.new("RGB", (w, h), (246, 247, 249))
    d = ImageDraw.Draw(img)
    d.rectangle([0, 0, w, 24], fill=(30, 30, 30))
    d.rectangle([0, 24, w, 72], fill=(40 + 50 * i % 200, 90, 200))
    d.text((12, 40), f"Screen {i}", fill=(255, 255, 255))
    cell = w // 4
    for k in range(4 * max(1, (h - 96) // cell)):
        x, y = (k % 4) * cell + 12, 96 + (k // 4) * cell
        d.rounded_rectangle([x, y, x + cell - 24, y + cell - 36], 10,
                            fill=tuple(rng.randrange(40, 230) for _ in range(3)))
        d.text((x, y + cell - 32), f"app{k}", fill=(20, 20, 20))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
