"""The coordinate frame of a backend's image processor (a backend concern: the processor is the model's).

:func:`image_processor_for` builds a Qwen2-VL image processor (PIL, no torchvision);
:func:`image_geometry` reads the frame back from any such processor; :func:`smart_resize`
is the processor's resize rule (``grounding.coords`` and the judge's token estimate use it).

Action formats that speak pixels of the resized image take these numbers
(``ActionFormat.with_image_geometry``), so prompt, SFT targets and parser share the
model's own frame; :func:`rl.agents.format_for_policy` applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["ImageGeometry", "image_geometry", "image_processor_for", "smart_resize", "IMAGE_FACTOR",
           "MIN_TOKENS", "MAX_TOKENS", "MAX_RATIO"]

#: Qwen2.5-VL: 14-pixel patches merged 2x2, so resized sides are multiples of 28
IMAGE_FACTOR = 28
#: default pixel budget, in merged tokens (qwen_vl_utils IMAGE_MIN/MAX_TOKEN_NUM)
MIN_TOKENS = 4
MAX_TOKENS = 16384
#: the largest aspect ratio smart_resize accepts
MAX_RATIO = 200


@dataclass(frozen=True)
class ImageGeometry:
    """How a Qwen-VL image processor resizes screenshots: the one coordinate frame a model has.

    Sides become multiples of ``factor = patch_size * merge_size`` and the area is
    brought into ``[min_pixels, max_pixels]`` (Qwen's ``smart_resize``). Action formats
    that speak pixels of the resized image must use exactly these numbers, in the
    prompt, in SFT targets and in the parser; otherwise every point lands elsewhere.
    """

    patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int

    def __post_init__(self) -> None:
        # min_pixels above max_pixels is allowed, as the processor allows it: its resize checks
        # max_pixels first (a published Qwen3-VL processor has shortest_edge 65,536, and a
        # max_pixels given below that still resizes; see load_pretrained)
        if min(self.patch_size, self.merge_size, self.min_pixels, self.max_pixels) <= 0:
            raise ValueError(f"invalid image geometry {self}")

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


def image_geometry(processor: Any) -> ImageGeometry:
    """The :class:`ImageGeometry` of a Qwen2-VL-style image processor (transformers).

    Reads ``patch_size``, ``merge_size`` and the pixel limits, which transformers keeps
    in ``size["shortest_edge"]`` / ``size["longest_edge"]`` (older versions: ``min_pixels``
    / ``max_pixels`` attributes). Raises ``ValueError`` when the processor has none of them.
    """
    size = getattr(processor, "size", None)

    def limit(key: str, attr: str) -> Any:
        value = getattr(processor, attr, None)
        if value is None and size is not None:
            value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
        return value

    values = {"patch_size": getattr(processor, "patch_size", None),
              "merge_size": getattr(processor, "merge_size", None),
              "min_pixels": limit("shortest_edge", "min_pixels"),
              "max_pixels": limit("longest_edge", "max_pixels")}
    missing = [k for k, v in values.items() if not isinstance(v, int) or isinstance(v, bool)]
    if missing:
        raise ValueError(f"the image processor {type(processor).__name__} has no usable {missing}; "
                         "is it a Qwen-VL image processor?")
    return ImageGeometry(**values)


def image_processor_for(patch_size: int = 14, min_pixels: int = 28 * 28 * 4, max_pixels: int = 28 * 28 * 256):
    """A Qwen2-VL PIL image processor with the given patch size and pixel limits."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(patch_size=patch_size, merge_size=2, temporal_patch_size=2,
                                    min_pixels=min_pixels, max_pixels=max_pixels)


def smart_resize(
    height: int,
    width: int,
    factor: int = IMAGE_FACTOR,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> tuple[int, int]:
    """``(height, width)`` of the image the Qwen-VL processor actually sees.

    Both sides become multiples of ``factor``; the area is brought into
    ``[min_pixels, max_pixels]`` keeping the aspect ratio as close as possible.
    Defaults follow ``qwen_vl_utils`` (``4 * factor**2`` and ``16384 * factor**2``
    pixels). The formula is transformers' (``Qwen2VLImageProcessor``, which Qwen2.5-VL and
    Qwen3-VL use, and vLLM through it), Python's half-to-even ``round`` included, because that
    is the image the model sees: ``qwen_vl_utils.smart_resize`` (Qwen's cookbooks) differs
    from it on images with a side of at most ``factor / 2`` (it keeps that side at ``factor`` and
    so can overshoot the area; transformers lets it round to 0 and scales the image up to
    ``min_pixels``). Tested against both on a table of sizes and against the processor's grid.
    As in the processor, ``max_pixels`` is checked first, so ``min_pixels > max_pixels`` is
    not an error.

    Raises ``ValueError`` for non-positive sizes or an aspect ratio above 200.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got height={height} width={width}")
    max_pixels = max_pixels if max_pixels is not None else MAX_TOKENS * factor**2
    min_pixels = min_pixels if min_pixels is not None else MIN_TOKENS * factor**2
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {MAX_RATIO}, got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar
