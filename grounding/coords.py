"""Coordinate frames: normalised [0, 1], screenshot/device pixels, and model frames.

Actions (:mod:`guiagent.types`) hold coordinates normalised to [0, 1] of the
screenshot. Models speak other frames:

``relative1000``
    integers 0..1000 of the screenshot, independent of its size (UI-TARS-1, UI-TARS-2).
``relative999``
    integers 0..999 of the screenshot (MAI-UI divides by 999).
``smart_resize_pixels``
    absolute pixels of the image *after* Qwen2.5-VL's :func:`smart_resize`
    (Qwen2.5-VL agents, UI-TARS-1.5); values above 1000 are legitimate.
``pixels``
    plain pixels of the screenshot as captured.

Conventions
-----------
* A normalised ``x`` maps to the continuous pixel position ``x * width``; the
  right edge ``x = 1.0`` is position ``width``. :func:`to_device_pixel` floors to
  an integer pixel index and keeps the edge inside (``width - 1``).
* Model -> normalised is strict: a model coordinate must lie in
  ``[0, extent]`` of its frame, edges included (``1000`` in ``relative1000``,
  the resized width/height in ``smart_resize_pixels``). That inclusive edge is
  the only tolerance; anything else, negative values included, raises
  :class:`CoordinateError`, which parsers report as ``bad_coordinates``. Nothing
  is clamped silently.
* Normalised -> model rounds to the nearest integer (half to even, Python's
  ``round``), so a round trip is exact to half a model unit.

Example::

    >>> RELATIVE_1000.to_model(0.5, 0.25, (1080, 2400))
    (500, 250)
    >>> smart_resize(2400, 1080)
    (2408, 1092)
    >>> SMART_RESIZE.to_unit(546, 1204, (1080, 2400))
    (0.5, 0.5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

# smart_resize is the image processor's geometry (the policy's concern); it is named here too
from guiagent.policy.geometry import IMAGE_FACTOR, MAX_RATIO, MAX_TOKENS, MIN_TOKENS, smart_resize

__all__ = [
    "CoordinateError", "ModelFrame", "RELATIVE_1000", "SMART_RESIZE", "PIXELS", "FRAME_KINDS",
    "smart_resize", "to_pixels", "from_pixels", "to_device_pixel", "box_centre",
    "IMAGE_FACTOR", "MIN_TOKENS", "MAX_TOKENS", "MAX_RATIO",
]

FrameKind = Literal["relative1000", "relative999", "smart_resize_pixels", "pixels"]
FRAME_KINDS: tuple[str, ...] = ("relative1000", "relative999", "smart_resize_pixels", "pixels")
#: extent of the relative frames (the same on both axes)
_RELATIVE = {"relative1000": 1000, "relative999": 999}


class CoordinateError(ValueError):
    """A model coordinate lies outside its frame (or is not a finite number)."""


def _check_size(image_size: tuple[int, int]) -> tuple[int, int]:
    try:
        w, h = image_size
    except (TypeError, ValueError):
        raise ValueError(f"image_size must be (width, height), got {image_size!r}") from None
    if not (isinstance(w, int) and isinstance(h, int)) or w <= 0 or h <= 0:
        raise ValueError(f"image_size must be two positive integers (width, height), got {image_size!r}")
    return w, h


def to_pixels(x: float, y: float, image_size: tuple[int, int]) -> tuple[float, float]:
    """Normalised -> continuous pixel position in the screenshot (``x * width``)."""
    w, h = _check_size(image_size)
    return x * w, y * h


def to_device_pixel(x: float, y: float, image_size: tuple[int, int]) -> tuple[int, int]:
    """Normalised -> the integer pixel (column, row) to touch; ``1.0`` maps to the last pixel."""
    w, h = _check_size(image_size)
    return min(int(x * w), w - 1), min(int(y * h), h - 1)


def from_pixels(px: float, py: float, image_size: tuple[int, int]) -> tuple[float, float]:
    """Screenshot pixel position -> normalised; raises :class:`CoordinateError` outside ``[0, size]``."""
    return PIXELS.to_unit(px, py, image_size)


def box_centre(x1: float, y1: float, x2: float, y2: float) -> tuple[float, float]:
    """Centre of a box given by two corners (in any order)."""
    return (x1 + x2) / 2.0, (y1 + y2) / 2.0


@dataclass(frozen=True)
class ModelFrame:
    """A model's coordinate frame; converts normalised points to model numbers and back.

    ``kind`` is one of :data:`FRAME_KINDS`. ``factor``, ``min_pixels`` and
    ``max_pixels`` matter only for ``smart_resize_pixels`` and must match the
    image processor the model is served with.
    """

    kind: FrameKind = "relative1000"
    factor: int = IMAGE_FACTOR
    min_pixels: int | None = None
    max_pixels: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in FRAME_KINDS:
            raise ValueError(f"unknown frame {self.kind!r}; choose one of {FRAME_KINDS}")
        if self.factor <= 0:
            raise ValueError(f"factor must be positive, got {self.factor}")

    def extent(self, image_size: tuple[int, int]) -> tuple[int, int]:
        """``(width, height)`` of the frame for a screenshot of ``image_size`` (width, height)."""
        w, h = _check_size(image_size)
        if self.kind in _RELATIVE:
            return _RELATIVE[self.kind], _RELATIVE[self.kind]
        if self.kind == "pixels":
            return w, h
        rh, rw = smart_resize(h, w, self.factor, self.min_pixels, self.max_pixels)
        return rw, rh

    def to_model(self, x: float, y: float, image_size: tuple[int, int]) -> tuple[int, int]:
        """Normalised ``(x, y)`` -> integer model coordinates (nearest; the edge maps to the extent)."""
        ew, eh = self.extent(image_size)
        return round(x * ew), round(y * eh)

    def to_unit(self, mx: float, my: float, image_size: tuple[int, int]) -> tuple[float, float]:
        """Model coordinates -> normalised; raises :class:`CoordinateError` outside ``[0, extent]``."""
        ew, eh = self.extent(image_size)
        for name, value, limit in (("x", mx, ew), ("y", my, eh)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise CoordinateError(f"{name}={value!r} is not a finite number")
            if value < 0 or value > limit:
                raise CoordinateError(
                    f"{name}={value:g} is outside the {self.describe(image_size)} (0..{limit})"
                )
        return mx / ew, my / eh

    def describe(self, image_size: tuple[int, int] | None = None) -> str:
        """Human-readable frame name, with its extent when the image size is known."""
        if self.kind in _RELATIVE:
            return f"relative 0-{_RELATIVE[self.kind]} frame"
        if image_size is None:
            return f"{self.kind} frame"
        ew, eh = self.extent(image_size)
        return f"{self.kind} frame of {ew}x{eh}"


RELATIVE_1000 = ModelFrame("relative1000")
SMART_RESIZE = ModelFrame("smart_resize_pixels")
PIXELS = ModelFrame("pixels")
