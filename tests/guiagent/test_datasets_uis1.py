"""Importing UI-S1's two layouts faithfully: every candidate box, the step instruction and ids, each
screenshot's own size, the swipe conventions, placeholders, and a lossless round trip through our
exports. Records are small synthetic ones with the published structure."""

import json

import pytest

from guiagent.datasets import import_dataset, read_dataset
from guiagent.datasets.uis1 import infer_screen
from guiagent.store import StoreReader
from guiagent.store.export import export_hf_dataset, export_parquet
from guiagent.types import Click, NavigateBack, Scroll, StepTarget, Swipe
from rl.match import match_action, step_target
from tests.guiagent.test_datasets import ac_example, png, write_tfrecord


def _eval_file(tmp_path, *, with_images=True):
    """Two episodes in the evaluation layout; the second on a 1440x3120 screen."""
    img = tmp_path / "images"
    img.mkdir(exist_ok=True)
    if with_images:
        for name, size in (("1_0", (1080, 2400)), ("1_1", (1080, 2400)), ("2_0", (1440, 3120)), ("2_1", (1440, 3120))):
            (img / f"{name}.png").write_bytes(png(*size))
    eps = [
        {"goal": "publish my art", "is_successful": True, "episode_id": 8193, "steps": [
            {"action_content": {"action": "click", "coordinate": [540, 2273]}, "screenshot": "/d/images/1_0.png",
             "step_instruction": "click on create tab",
             "check_options": {"action": "click", "candidate_bbox": [[456, 2211, 624, 2337], [0, 473, 1080, 2337]],
                               "coordinate": [540, 2273]}},
            {"action_content": {"action": "swipe", "coordinate": [540, 1800], "coordinate2": [540, 600]},
             "screenshot": "/d/images/1_1.png", "step_instruction": "swipe up to see more",
             "check_options": {"action": "swipe", "direction": "down"}}]},
        {"goal": "go back", "is_successful": True, "episode_id": 9000, "steps": [
            {"action_content": {"action": "click", "coordinate": [1300, 200]}, "screenshot": "/d/images/2_0.png",
             "step_instruction": "tap the icon",
             "check_options": {"action": "click", "candidate_bbox": [[1200, 100, 1400, 300]], "coordinate": [1300, 200]}},
            {"action_content": {"action": "system_button", "button": "Back"}, "screenshot": "/d/images/2_1.png",
             "step_instruction": "go back", "check_options": {"action": "system_button", "button": "Back"}}]},
    ]
    p = tmp_path / "android_control_evaluation_std.jsonl"
    p.write_text("".join(json.dumps(e) + "\n" for e in eps))
    return p


def test_evaluation_layout_keeps_everything_and_each_screens_size(tmp_path):
    src = _eval_file(tmp_path)
    a, b = list(read_dataset("uis1", src, images_dir=tmp_path / "images"))
    assert [s.observation.size for s in a.steps] == [(1080, 2400), (1080, 2400)]
    assert [s.observation.size for s in b.steps] == [(1440, 3120), (1440, 3120)]
    t0 = step_target(a.steps[0])
    assert len(t0.boxes) == 2 and t0.boxes[1] == pytest.approx((0.0, 473 / 2400, 1.0, 2337 / 2400), abs=1e-6)
    assert a.steps[0].metadata["step_instruction"] == "click on create tab"
    assert a.steps[0].metadata["episode_id"] == 8193 and a.metadata["episode_id"] == 8193
    assert a.task.params["episode_id"] == 8193
    # the finger path as written (convention finger), the target from check_options (a scroll direction)
    assert a.steps[1].action == Swipe(0.5, 0.75, 0.5, 0.25)
    assert step_target(a.steps[1]) == StepTarget("swipe", direction="down", convention="scroll")
    assert match_action(a.steps[1].action, step_target(a.steps[1]), size=(1080, 2400)).matched
    # the second box (a container) makes a tap far from the point match; the 1440 screen normalises by its own size
    assert match_action(Click(0.5, 0.5), t0, size=(1080, 2400)).matched
    assert step_target(b.steps[0]).point == pytest.approx((1300 / 1440, 200 / 3120))
    assert b.steps[1].action == NavigateBack() and step_target(b.steps[1]).button == "back"


def test_round_trip_through_the_store_and_both_exports_is_lossless(tmp_path):
    src = _eval_file(tmp_path)
    direct = {t.episode_id: t for t in read_dataset("uis1", src, images_dir=tmp_path / "images")}
    import_dataset("uis1", src, tmp_path / "run", images_dir=str(tmp_path / "images"))
    stored = {t.episode_id: t for t in StoreReader(tmp_path / "run").iter_trajectories()}
    assert stored.keys() == direct.keys()
    for k in direct:
        assert stored[k].steps == direct[k].steps and stored[k].task == direct[k].task
    export_parquet(tmp_path / "run", tmp_path / "x.parquet")
    import_dataset("parquet", tmp_path / "x.parquet", tmp_path / "back")
    exports = [tmp_path / "back"]
    try:
        import datasets  # noqa: F401

        export_hf_dataset(tmp_path / "run", tmp_path / "hf")
        import_dataset("hf", tmp_path / "hf", tmp_path / "back_hf")
        exports.append(tmp_path / "back_hf")
    except ImportError:
        pass
    for d in exports:
        back = {t.episode_id: t for t in StoreReader(d).iter_trajectories()}
        for k in direct:
            assert back[k].steps == direct[k].steps
            assert [step_target(s) for s in back[k].steps] == [step_target(s) for s in direct[k].steps]


def test_missing_screenshots_one_line_or_placeholders_of_each_episodes_size(tmp_path):
    src = _eval_file(tmp_path, with_images=False)
    from guiagent.datasets import DatasetError

    with pytest.raises(DatasetError, match=r"line 1 step 0: screenshot '/d/images/1_0.png' not found .*--placeholders"):
        list(read_dataset("uis1", src))
    a, b = list(read_dataset("uis1", src, placeholders="auto"))
    assert a.steps[0].observation.size == (1080, 2400) and b.steps[0].observation.size == (1440, 3120)
    assert a.steps[0].metadata["placeholder"] is True
    assert a.steps[0].observation.screenshot == a.steps[1].observation.screenshot  # one blank PNG per size
    fixed = list(read_dataset("uis1", src, placeholders="1440x3120"))
    assert {s.observation.size for t in fixed for s in t.steps} == {(1440, 3120)}


@pytest.mark.parametrize("steps,size", [
    ([{"action_content": {"action": "swipe", "coordinate": [720, 2340], "coordinate2": [720, 780]}}], (1440, 3120)),
    ([{"action_content": {"action": "swipe", "coordinate": [270, 1200], "coordinate2": [810, 1200]}}], (1080, 2400)),
    ([{"action_content": {"action": "click", "coordinate": [100, 3000]}}], (1440, 3120)),
    ([{"action_content": {"action": "click", "coordinate": [1084, 2000]}}], (1080, 2400)),  # within 2% of the edge
    ([{"action_content": {"action": "click", "coordinate": [500, 500]},
       "check_options": {"action": "click", "candidate_bbox": [[0, 0, 1440, 4553]], "coordinate": [500, 500]}}],
     (1080, 2400)),   # boxes are not evidence: accessibility bounds reach past the screen
])
def test_screen_size_inference(steps, size):
    assert infer_screen(steps, "x") == size


def test_screen_size_inference_refuses_what_fits_no_known_screen():
    from guiagent.datasets import DatasetError

    with pytest.raises(DatasetError, match="beyond every known screen"):
        infer_screen([{"action_content": {"action": "click", "coordinate": [2000, 100]}}], "x")


def test_training_layout_and_convention_overrides(tmp_path):
    steps = [{"action_content": {"action": "swipe", "coordinate": [540.0, 600.0], "coordinate2": [540.0, 1800.0]},
              "screenshot": "a.png"},
             {"action_content": {"action": "swipe", "direction": "down"}, "screenshot": "a.png"},
             {"action_content": {"action": "click", "coordinate": [540.0, 389.8], "bbox": [360, 327, 695, 466]},
              "screenshot": "a.png"}]
    src = tmp_path / "train.jsonl"
    src.write_text(json.dumps({"goal": "g", "is_successful": True, "steps": steps}) + "\n")
    (t,) = read_dataset("uis1", src, placeholders="1080x2400")
    # the training example writes the way the view scrolls: the finger path is reversed
    assert t.steps[0].action == Swipe(0.5, 0.75, 0.5, 0.25)
    assert step_target(t.steps[0]).finger_direction == "up" and t.steps[1].action == Scroll("down")
    (box,) = step_target(t.steps[2]).boxes
    assert box == pytest.approx((360 / 1080, 327 / 2400, 695 / 1080, 466 / 2400), abs=1e-6)
    (f,) = read_dataset("uis1", src, placeholders="1080x2400", swipe_convention="finger")
    assert f.steps[0].action == Swipe(0.5, 0.25, 0.5, 0.75) and step_target(f.steps[0]).finger_direction == "down"
    assert f.steps[1].action == Scroll("up")   # a finger moving down scrolls up


def test_androidcontrol_targets_and_its_scroll_check(tmp_path):
    acts = [{"action_type": "scroll", "direction": "down"}] * 6 + [{"action_type": "click", "x": 50, "y": 100}]
    from guiagent.datasets.tfrecord import Example

    raw = ac_example(3, acts, instr=False)
    ex = Example().FromString(raw)
    for _ in acts:
        ex.features.feature["step_instructions"].bytes_list.value.append(b"swipe down on the list")
    src = tmp_path / "android_control-s"
    write_tfrecord(src, [ex.SerializeToString()])
    res = import_dataset("androidcontrol", src, tmp_path / "run")
    t = next(StoreReader(tmp_path / "run").iter_trajectories(pixels=False))
    assert step_target(t.steps[0]) == StepTarget("scroll", direction="down", convention="scroll")
    assert step_target(t.steps[6]).point == (0.5, 0.5) and t.steps[6].metadata["episode_id"] == 3
    # "swipe down" with AndroidControl's "scroll down" (a finger moving up): said so
    assert res.notes.swipes.to_dict()["action_vs_instruction"]["vertical"] == [0, 6]
    assert any("look reversed" in w for w in res.notes.warnings)


def test_guiodyssey_targets_and_placeholders(tmp_path):
    (tmp_path / "annotations").mkdir()
    ann = {"episode_id": "e9", "device_info": {"w": 90, "h": 160, "device_name": "Pixel"},
           "task_info": {"instruction": "scroll"}, "steps": [
               {"step": 0, "screenshot": "gone.png", "action": "SCROLL", "info": [[500, 800], [500, 200]]},
               {"step": 1, "screenshot": "gone2.png", "action": "CLICK", "info": "BACK"}]}
    (tmp_path / "annotations" / "e9.json").write_text(json.dumps(ann))
    from guiagent.datasets import DatasetError

    with pytest.raises(DatasetError, match="not found"):
        list(read_dataset("guiodyssey", tmp_path))
    (t,) = read_dataset("guiodyssey", tmp_path, placeholders="auto")
    assert t.steps[0].observation.size == (90, 160) and t.steps[0].metadata["placeholder"] is True
    assert step_target(t.steps[0]) == StepTarget("swipe", point=(0.5, 0.8), point2=(0.5, 0.2), direction="up",
                                                 convention="finger")
    assert step_target(t.steps[1]).button == "back" and t.steps[1].metadata["episode_id"] == "e9"
