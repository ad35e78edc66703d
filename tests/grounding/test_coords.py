"""Coordinate frames and smart_resize (checked against transformers' and the installed qwen_vl_utils)."""

from __future__ import annotations

import importlib
import sys
import types

import pytest
# imported before the qwen_smart_resize fixture stubs torchvision (transformers looks for it)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as transformers_resize

from grounding.coords import (
    PIXELS, RELATIVE_1000, SMART_RESIZE, CoordinateError, ModelFrame, box_centre, from_pixels,
    smart_resize, to_device_pixel, to_pixels,
)

SIZES = [
    (1, 1), (10, 10), (27, 29), (28, 28), (56, 56), (100, 3000), (200, 40000), (720, 1280), (1280, 720),
    (1080, 1920), (1920, 1080), (2400, 1080), (1080, 2400), (2340, 1080), (3024, 4032), (4032, 3024),
    (7680, 4320), (14, 2800), (480, 320), (800, 1280), (2560, 1600), (999, 1001), (3000, 3000), (10000, 10000),
    # thin images: a side of at most factor / 2, where qwen_vl_utils and transformers part
    (1000, 10), (2000, 13), (10, 2000), (15, 1500), (3000, 16),
]
LIMITS = [
    (None, None), (3136, 12845056), (256 * 28 * 28, 1280 * 28 * 28), (4 * 28 * 28, 100 * 28 * 28),
    (3136, 2007040), (1003520, 1003520),
]


@pytest.fixture(scope="module")
def qwen_smart_resize():
    """``qwen_vl_utils.smart_resize`` without torchvision.

    qwen_vl_utils imports torchvision at module level for its video helpers, and
    torchvision must not be installed here, so stub modules stand in for it only
    while ``qwen_vl_utils.vision_process`` is imported; smart_resize itself never
    touches them. The stubs and the imported modules are removed afterwards so no
    other test sees a qwen_vl_utils loaded against fake torchvision.
    """
    tv = types.ModuleType("torchvision")
    tv.__version__ = "0.0.0-stub"
    tv_io = types.ModuleType("torchvision.io")
    tv_tr = types.ModuleType("torchvision.transforms")
    tv_tr.InterpolationMode = type("InterpolationMode", (), {"BICUBIC": 3, "BILINEAR": 2})
    tv.io, tv.transforms = tv_io, tv_tr
    stubs = {"torchvision": tv, "torchvision.io": tv_io, "torchvision.transforms": tv_tr}
    saved = {k: sys.modules.get(k) for k in [*stubs, "qwen_vl_utils", "qwen_vl_utils.vision_process"]}
    sys.modules.update(stubs)
    try:
        vp = importlib.import_module("qwen_vl_utils.vision_process")
        yield vp.smart_resize
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


@pytest.mark.parametrize("limits", LIMITS)
def test_smart_resize_matches_the_processors_and_qwen_vl_utils(qwen_smart_resize, limits):
    """transformers' formula (what the model sees) on every size; qwen_vl_utils' wherever no side is at most
    factor / 2 (there it keeps the side at factor: 13x2000 was (2772, 0) with a 50,176 cap)."""
    lo, hi = limits
    for h, w in SIZES:
        for factor in (28, 32):
            lo_, hi_ = lo if lo is not None else 4 * factor**2, hi if hi is not None else 16384 * factor**2
            try:
                expected = transformers_resize(h, w, factor, min_pixels=lo_, max_pixels=hi_)
            except ValueError:
                with pytest.raises(ValueError):
                    smart_resize(h, w, factor, min_pixels=lo, max_pixels=hi)
                continue
            got = smart_resize(h, w, factor, min_pixels=lo, max_pixels=hi)
            assert got == expected and min(got) >= factor, (h, w, factor, limits)
            theirs = qwen_smart_resize(h, w, factor, min_pixels=lo, max_pixels=hi)
            if min(h, w) * 2 > factor and min(theirs) > 0:  # half a factor rounds to 0 (half to even)
                assert got == theirs, (h, w, factor, limits)


def test_thin_images_resize_as_the_processor_not_as_qwen_vl_utils(qwen_smart_resize):
    # (height, width) 2000x13 under a 50,176 cap: the processor's (700, 28); qwen_vl_utils says (2772, 0)
    assert smart_resize(2000, 13, 28, 3136, 50176) == (700, 28)
    assert qwen_smart_resize(2000, 13, 28, min_pixels=3136, max_pixels=50176) == (2772, 0)
    assert smart_resize(1000, 10, 28, 3136, 50176) == (560, 28)
    assert qwen_smart_resize(1000, 10, 28, min_pixels=3136, max_pixels=50176) == (1008, 28)


def test_smart_resize_known_values():
    assert smart_resize(2400, 1080) == (2408, 1092)
    assert smart_resize(1, 1) == (56, 56)  # brought up to min_pixels
    h, w = smart_resize(7680, 4320, max_pixels=1280 * 28 * 28)
    assert h % 28 == 0 and w % 28 == 0 and h * w <= 1280 * 28 * 28
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 3000)
    with pytest.raises(ValueError):
        smart_resize(0, 10)
    # min_pixels above max_pixels: max_pixels is checked first, as in the processor
    assert smart_resize(100, 100, min_pixels=10_000, max_pixels=5_000) == (56, 56)
    assert smart_resize(40, 40, min_pixels=10_000, max_pixels=5_000) == (112, 112)


FRAMES = [RELATIVE_1000, SMART_RESIZE, PIXELS, ModelFrame("smart_resize_pixels", max_pixels=512 * 28 * 28)]
IMAGES = [(1080, 2400), (1280, 720), (375, 812), (320, 240), (3840, 2160), (160, 210)]


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: f"{f.kind}-{f.max_pixels}")
@pytest.mark.parametrize("size", IMAGES)
def test_round_trip_within_half_a_model_unit(frame, size):
    ew, eh = frame.extent(size)
    steps = 37
    for i in range(steps + 1):
        for j in (0, 5, 17, steps):
            x, y = i / steps, j / steps
            mx, my = frame.to_model(x, y, size)
            assert isinstance(mx, int) and isinstance(my, int)
            assert 0 <= mx <= ew and 0 <= my <= eh
            bx, by = frame.to_unit(mx, my, size)
            assert abs(bx - x) <= 0.5 / ew + 1e-12 and abs(by - y) <= 0.5 / eh + 1e-12
            # and so within one screenshot pixel whenever the frame is at least as fine as the screenshot
            if ew >= size[0]:
                assert abs(bx - x) * size[0] <= 1.0


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: f.kind)
def test_edges_are_inside_and_beyond_is_an_error(frame):
    size = (1080, 2400)
    ew, eh = frame.extent(size)
    assert frame.to_unit(ew, eh, size) == (1.0, 1.0)  # the documented tolerance: the edge itself
    assert frame.to_unit(0, 0, size) == (0.0, 0.0)
    for bad in [(ew + 1, 0), (0, eh + 0.5), (-1, 0), (0, -0.01), (float("nan"), 1), (float("inf"), 1)]:
        with pytest.raises(CoordinateError):
            frame.to_unit(*bad, size)
    with pytest.raises(CoordinateError):
        frame.to_unit("12", 3, size)


def test_uitars15_frame_accepts_values_above_1000():
    x, y = SMART_RESIZE.to_unit(1092, 2000, (1080, 2400))
    assert x == 1.0 and abs(y - 2000 / 2408) < 1e-12
    with pytest.raises(CoordinateError):
        RELATIVE_1000.to_unit(1092, 2000, (1080, 2400))


def test_pixel_helpers():
    assert to_pixels(0.5, 0.25, (200, 400)) == (100.0, 100.0)
    assert to_device_pixel(1.0, 1.0, (200, 400)) == (199, 399)
    assert to_device_pixel(0.0, 0.0, (200, 400)) == (0, 0)
    assert to_device_pixel(0.999, 0.5, (200, 400)) == (199, 200)
    assert from_pixels(200, 0, (200, 400)) == (1.0, 0.0)
    with pytest.raises(CoordinateError):
        from_pixels(201, 0, (200, 400))
    assert box_centre(10, 20, 30, 60) == (20.0, 40.0)
    with pytest.raises(ValueError):
        to_pixels(0.5, 0.5, (0, 10))
    with pytest.raises(ValueError):
        ModelFrame("percent")  # type: ignore[arg-type]
