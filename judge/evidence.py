"""Which screenshots the judge sees: the final screens plus the steps where the screen changed most.

A long trajectory has more screens than a judge call can carry. SmartSnap
(self-verifying agents that submit a few decisive snapshots as evidence) and
WebJudge of Online-Mind2Web (key screenshots chosen before the verdict) both judge
from a small set of *key* screens rather than all of them. Here the set is chosen
without a model call:

1. the last ``final_k`` step screens (where success usually shows), newest first;
2. then the steps whose screen differs most from the screen before it (a dialog
   opened, a page loaded, a value changed), largest change first;

each added only while the estimated visual tokens stay within ``token_budget``
and at most ``max_screens`` are taken. The final screen (after the last action) is
always shown and its cost is charged first. :func:`select_evidence` is a pure
function of per-step numbers; :func:`screen_change` and :func:`image_tokens`
compute those numbers from screenshots.
"""

from __future__ import annotations

import io
import math
from typing import Sequence

from PIL import Image, UnidentifiedImageError

from guiagent.policy.geometry import smart_resize

__all__ = ["select_evidence", "screen_change", "image_tokens", "TOKEN_PATCH"]

#: Qwen2.5-VL / Qwen3-VL: one visual token per 28x28 pixels after resizing
TOKEN_PATCH = 28


def select_evidence(change: Sequence[float], cost: Sequence[int], *, final_k: int, max_screens: int,
                    token_budget: int, final_cost: int = 0) -> tuple[int, ...]:
    """Positions (into ``change``/``cost``) of the step screens to show, in trajectory order.

    ``change[i]``: how much screen ``i`` differs from screen ``i-1`` (position 0: its
    change from nothing, usually 0); ``cost[i]``: its visual tokens (a step with no
    screenshot has cost < 0 and is never chosen). ``final_cost`` is charged first for
    the final screen, which is always shown. The last ``final_k`` screens come
    first, then the largest changes (ties: the later step); a screen that does not
    fit is skipped and smaller ones may still fit.

    >>> select_evidence([0, .9, .1, .5, 0], [10] * 5, final_k=1, max_screens=3, token_budget=40)
    (1, 3, 4)
    """
    if len(change) != len(cost):
        raise ValueError(f"got {len(change)} change scores but {len(cost)} costs")
    if final_k < 0 or max_screens < 0 or token_budget < 0:
        raise ValueError("final_k, max_screens and token_budget must be >= 0")
    left = token_budget - max(0, final_cost)
    chosen: list[int] = []
    has_screen = [i for i in range(len(cost)) if cost[i] >= 0]
    recent = has_screen[::-1][:final_k]
    by_change = sorted((i for i in has_screen if i not in recent),
                       key=lambda i: (-_finite(change[i]), -i))
    for i in [*recent, *by_change]:
        if len(chosen) >= max_screens:
            break
        if cost[i] <= left:
            chosen.append(i)
            left -= cost[i]
    return tuple(sorted(chosen))


def _finite(x: float) -> float:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else 0.0


def image_tokens(width: int, height: int, max_pixels: int) -> int:
    """Visual tokens of a ``width`` x ``height`` screenshot sent downscaled to at most ``max_pixels``."""
    if width <= 0 or height <= 0:
        return 0
    try:
        h, w = smart_resize(height, width, max_pixels=max(max_pixels, 4 * TOKEN_PATCH ** 2))
    except ValueError:  # an extreme aspect ratio: estimate from the area alone
        return max(1, min(width * height, max_pixels) // TOKEN_PATCH ** 2)
    return (h // TOKEN_PATCH) * (w // TOKEN_PATCH)


def screen_change(before: bytes | None, after: bytes | None, *, side: int = 32) -> float:
    """How different two screenshots look, in [0, 1]: mean absolute difference of small grey thumbnails.

    Either side missing or unreadable counts as a full change (1.0) when the other
    is present, 0.0 when both are missing; a thumbnail of ``side`` x ``side``
    ignores compression noise and a blinking caret.
    """
    if before is None and after is None:
        return 0.0
    a, b = _thumb(before, side), _thumb(after, side)
    if a is None or b is None:
        return 1.0
    return sum(abs(x - y) for x, y in zip(a, b)) / (255.0 * len(a))


def _thumb(data: bytes | None, side: int) -> list[int] | None:
    if data is None:
        return None
    try:
        with Image.open(io.BytesIO(data)) as im:
            return list(im.convert("L").resize((side, side), Image.Resampling.BILINEAR).tobytes())
    except (UnidentifiedImageError, OSError, ValueError):
        return None
