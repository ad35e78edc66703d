"""One coordinate frame per model: derived from its image processor, shared by prompt, SFT targets, parser.

A real tiny Qwen2.5-VL model is saved with non-default pixel limits and loaded back; the
action format built for it must resize exactly as its processor does.
"""

from __future__ import annotations

import io

import pytest
from PIL import Image

from guiagent.policy.geometry import ImageGeometry, image_geometry
from guiagent.policy.hf import image_processor_for, load_transformers
from guiagent.policy.tiny import TinyModelSpec, build_tiny_model
from guiagent.types import Click, Observation, ParseError, Step, TaskSpec, Trajectory

from grounding import get_format
from grounding.coords import smart_resize
from rl.agents import AgentSettings, format_for_policy
from rl.prompting import PromptConfig
from rl.sft import SFTConfig, load_examples

MAX_PIXELS = 28 * 28 * 64  # the library default is 28 * 28 * 16384
PHONE = (1080, 2400)


def _png(size: tuple[int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (200, 220, 240)).save(buf, format="PNG")
    return buf.getvalue()


def _processor_extent(processor, size: tuple[int, int]) -> tuple[int, int]:
    """(width, height) the processor really resizes a screenshot to, from its patch grid."""
    grid = processor(images=[Image.new("RGB", size)], return_tensors="pt")["image_grid_thw"][0]
    return int(grid[2]) * processor.patch_size, int(grid[1]) * processor.patch_size


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_limits")
    build_tiny_model(TinyModelSpec(max_pixels=MAX_PIXELS), out)
    return load_transformers(str(out), threads=1)


@pytest.mark.parametrize("patch", [14, 16])  # Qwen2.5-VL and Qwen3-VL patch sizes: factors 28 and 32
@pytest.mark.parametrize("size", [PHONE, (1280, 720), (360, 640), (3840, 2160), (10, 1000), (13, 2000), (2000, 10)])
def test_geometry_resizes_exactly_as_the_processor(patch, size):
    proc = image_processor_for(patch, 28 * 28 * 4, MAX_PIXELS)
    g = image_geometry(proc)
    assert g == ImageGeometry(patch, 2, 28 * 28 * 4, MAX_PIXELS) and g.factor == 2 * patch
    fmt = get_format("qwen_mobile").with_image_geometry(g.factor, g.min_pixels, g.max_pixels)
    assert fmt.frame.extent(size) == _processor_extent(proc, size)
    h, w = smart_resize(size[1], size[0], g.factor, g.min_pixels, g.max_pixels)
    assert (w, h) == _processor_extent(proc, size)


def test_image_geometry_rejects_what_is_not_a_qwen_processor():
    with pytest.raises(ValueError, match="no usable"):
        image_geometry(object())


def test_loaded_model_frame_is_its_processors(policy):
    g = policy.image_geometry()
    assert (g.patch_size, g.merge_size, g.max_pixels) == (14, 2, MAX_PIXELS)
    fmt = AgentSettings(action_format="qwen_mobile").format(policy)
    assert fmt.frame.extent(PHONE) == _processor_extent(policy.image_processor, PHONE) == (140, 308)
    assert get_format("qwen_mobile").frame.extent(PHONE) == (1092, 2408)  # what the default limits would say
    for name in ("uitars", "uitars2", "maiui", "json"):  # relative and normalised frames do not depend on it
        plain = get_format(name)
        assert format_for_policy(plain, policy) is plain


@pytest.mark.parametrize("name", ["qwen_mobile", "uitars15", "guiowl"])
def test_sft_targets_and_parsed_replies_land_on_the_same_point(policy, name):
    click = Click(0.3, 0.7)
    obs = Observation(screenshot=_png(PHONE), width=PHONE[0], height=PHONE[1])
    traj = Trajectory("ep-frame", TaskSpec("test", "tap", 0, "tap the button"), (Step(0, obs, click),))
    # the caller passes the plain format: load_examples puts the targets in the model's own frame
    (example,) = load_examples([traj], policy, get_format(name), PromptConfig(), SFTConfig())
    fmt = AgentSettings(action_format=name).format(policy)
    ew, eh = fmt.frame.extent(PHONE)
    assert example.target == fmt.format(click, PHONE)
    back = fmt.parse(example.target, PHONE)  # the parser the rollout uses for this model
    assert isinstance(back, Click)
    assert abs(back.x - click.x) <= 0.5 / ew and abs(back.y - click.y) <= 0.5 / eh
    # the default-limits frame reads the same text as another point (or none at all)
    wrong = get_format(name).parse(example.target, PHONE)
    assert isinstance(wrong, ParseError) or abs(wrong.x - click.x) > 0.1 or abs(wrong.y - click.y) > 0.1
    if name == "qwen_mobile":  # the prompt states the resolution the coordinates live in
        assert f"The screen's resolution is {ew}x{eh}." in example.chat[0]["content"]


def test_a_max_pixels_under_the_saved_min_pixels_caps_the_images(tmp_path):
    """A published Qwen3-VL processor keeps shortest_edge 65,536; loading it with a smaller max_pixels
    (a CPU run) capped nothing (small screens were scaled up to 65,536) and no agent could be built."""
    import json

    build_tiny_model(TinyModelSpec(max_pixels=MAX_PIXELS), tmp_path)
    cfg_path = tmp_path / "preprocessor_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("min_pixels", None), cfg.pop("max_pixels", None)
    cfg["size"] = {"shortest_edge": 65536, "longest_edge": 16777216}
    cfg_path.write_text(json.dumps(cfg))
    pol = load_transformers(str(tmp_path), threads=1, max_pixels=28 * 28 * 64)
    g = pol.image_geometry()
    assert (g.min_pixels, g.max_pixels) == (28 * 28 * 64, 28 * 28 * 64)
    for name in ("qwen_mobile", "qwen3_mobile"):
        fmt = AgentSettings(action_format=name).format(pol)
        w, h = _processor_extent(pol.image_processor, (360, 640))
        assert w * h <= 28 * 28 * 64
        if name == "qwen_mobile":
            assert fmt.frame.extent((360, 640)) == (w, h)
