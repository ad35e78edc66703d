"""The matcher (rl.match) on records shaped like UI-S1's two AndroidControl files: a table of cases.

Each truth below has the structure of a step of UI-S1's ``android_control_evaluation_std.jsonl``
(``action_content`` + ``check_options`` + ``step_instruction``) or of its
``android_control_train_example.jsonl`` (``action_content`` only), with made-up values. The records
are imported with the real importer (placeholder screenshots of the given size), and each case
states by hand what our default rules and the ``uis1`` preset say: ``(kind match, match)``. The uis1
column is also checked against :func:`rl.match_parity.uis1_reference` (UI-S1's semantics, box bug
fixed), except where a case names the documented deviation.
"""

import json

import pytest

from guiagent.datasets import read_dataset
from guiagent.types import (
    Answer,
    Click,
    Finish,
    Key,
    LongPress,
    NavigateBack,
    NavigateHome,
    OpenApp,
    ParseError,
    Scroll,
    StepTarget,
    Swipe,
    Type,
    Wait,
)
from rl.match import MatchConfig, MatchResult, match_action, step_target, uis1_step_reward
from rl.match_parity import to_uis1, uis1_reference

S = (1080, 2400)
L = (1440, 3120)

# truth id -> (layout, screen, step record)
TRUTHS = {
    "two_boxes": ("eval", S, {"action": "click", "candidate_bbox": [[456, 2211, 624, 2337], [0, 473, 1080, 2337]],
                              "coordinate": [540, 2273]}),
    "one_box": ("eval", S, {"action": "click", "candidate_bbox": [[886, 162, 1038, 278]], "coordinate": [962, 220]}),
    "no_box": ("eval", S, {"action": "click", "candidate_bbox": [], "coordinate": [540, 1200]}),
    "three_boxes": ("eval", S, {"action": "click", "coordinate": [100, 100],
                                "candidate_bbox": [[50, 50, 150, 150], [300, 300, 400, 400], [700, 1700, 900, 1900]]}),
    "off_screen_box": ("eval", S, {"action": "click", "candidate_bbox": [[1000, 2300, 1200, 2500]],
                                   "coordinate": [1050, 2350]}),
    "long_press": ("eval", S, {"action": "long_press", "candidate_bbox": [[100, 1000, 500, 1200]],
                               "coordinate": [300, 1100]}),
    "open_4_boxes": ("eval", S, {"action": "open", "text": "Zoho Meeting",
                                 "candidate_bbox": [[0, 0, 10, 10], [10, 10, 20, 20], [20, 20, 30, 30], [0, 0, 1080, 2400]]}),
    "swipe_down": ("eval", S, {"action": "swipe", "direction": "down"}),
    "swipe_right": ("eval", S, {"action": "swipe", "direction": "right"}),
    "back": ("eval", S, {"action": "system_button", "button": "Back"}),
    "home": ("eval", S, {"action": "system_button", "button": "Home"}),
    "wait": ("eval", S, {"action": "wait", "time": 2}),
    "type": ("eval", S, {"action": "type", "text": "Sculpture art"}),
    "big_screen": ("eval", L, {"action": "click", "candidate_bbox": [[1200, 100, 1400, 300]], "coordinate": [1300, 200]}),
    "train_click": ("train", S, {"action": "click", "coordinate": [540.0, 389.8], "bbox": [360, 327, 695, 466]}),
    "train_swipe": ("train", S, {"action": "swipe", "coordinate": [540.0, 600.0], "coordinate2": [540.0, 1800.0]}),
    "terminate": ("train", S, {"action": "terminate", "status": "success"}),
    "enter": ("train", S, {"action": "system_button", "button": "Enter"}),
    "train_open": ("train", S, {"action": "open", "text": "Kitchen Stories"}),
    "answer": ("train", S, {"action": "answer", "text": "42 apples"}),
    "key": ("train", S, {"action": "key", "text": "Tab"}),
}

T, F = True, False
BBOX_NOT_READ = "UI-S1's matcher reads candidate_bbox only, not the training example's bbox"

# (truth id, pred, default (kind, match), uis1 preset (kind, match), deviation of the preset from UI-S1 or "")
CASES = [
    # two candidate boxes, the second nearly the whole screen: any tap in it hits (UI-S1 compared it in pixels)
    ("two_boxes", Click(540 / 1080, 2273 / 2400), (T, T), (T, T), ""),
    ("two_boxes", Click(0.5, 0.5), (T, T), (T, T), ""),
    ("two_boxes", Click(0.5, 0.93), (T, T), (T, T), ""),
    ("two_boxes", Click(0.5, 0.1), (T, F), (T, F), ""),
    ("two_boxes", LongPress(0.5, 0.5), (F, F), (F, F), ""),
    # one box: inside, inside the 1.2x enlargement, beyond it
    ("one_box", Click(962 / 1080, 220 / 2400), (T, T), (T, T), ""),
    ("one_box", Click(0.891, 0.092), (T, T), (T, T), ""),
    ("one_box", Click((1038 + 0.08 * 152) / 1080, 220 / 2400), (T, T), (T, T), ""),
    ("one_box", Click((1038 + 0.2 * 152) / 1080, 220 / 2400), (T, F), (T, F), ""),
    ("one_box", Click(0.5, 0.5), (T, F), (T, F), ""),
    ("one_box", LongPress(962 / 1080, 220 / 2400), (F, F), (F, F), ""),
    ("one_box", Wait(1.0), (F, F), (F, F), ""),
    # no box: the point within 0.04
    ("no_box", Click(0.5, 0.5), (T, T), (T, T), ""),
    ("no_box", Click(0.53, 0.5), (T, T), (T, T), ""),
    ("no_box", Click(0.5, 0.47), (T, T), (T, T), ""),
    ("no_box", Click(0.55, 0.5), (T, F), (T, F), ""),
    ("no_box", Click(0.5, 0.56), (T, F), (T, F), ""),
    # any of three boxes
    ("three_boxes", Click(800 / 1080, 1800 / 2400), (T, T), (T, T), ""),
    ("three_boxes", Click(350 / 1080, 350 / 2400), (T, T), (T, T), ""),
    ("three_boxes", Click(0.6, 0.5), (T, F), (T, F), ""),
    # a box reaching past the screen is clipped to it
    ("off_screen_box", Click(0.99, 0.99), (T, T), (T, T), ""),
    ("off_screen_box", Click(0.5, 0.99), (T, F), (T, F), ""),
    # long press
    ("long_press", LongPress(480 / 1080, 1190 / 2400), (T, T), (T, T), ""),
    ("long_press", LongPress(0.9, 0.9), (T, F), (T, F), ""),
    ("long_press", Click(300 / 1080, 1100 / 2400), (F, F), (F, F), ""),
    # open with exactly four candidate boxes (UI-S1 crashes here): by the app's name
    ("open_4_boxes", OpenApp("Zoho Meeting"), (T, T), (T, T), ""),
    ("open_4_boxes", OpenApp("zoho"), (T, T), (T, T), ""),
    ("open_4_boxes", OpenApp("Zoho Meetng"), (T, T), (T, F), ""),
    ("open_4_boxes", OpenApp("Gmail"), (T, F), (T, F), ""),
    ("open_4_boxes", Click(0.5, 0.5), (F, F), (F, F), ""),
    ("open_4_boxes", Type("Zoho Meeting"), (F, F), (F, F), ""),
    # vertical swipe: AndroidControl's "scroll down" is a finger moving up, both rules agree
    ("swipe_down", Swipe(0.5, 0.75, 0.5, 0.25), (T, T), (T, T), ""),
    ("swipe_down", Swipe(0.5, 0.25, 0.5, 0.75), (T, F), (T, F), ""),
    ("swipe_down", Scroll("down"), (T, T), (T, T), ""),
    ("swipe_down", Swipe(0.25, 0.5, 0.75, 0.5), (T, F), (T, F), ""),
    ("swipe_down", Click(0.5, 0.5), (F, F), (F, F), ""),
    # horizontal swipe: "scroll right" is a finger moving left; UI-S1 flips only the vertical axis
    ("swipe_right", Swipe(0.75, 0.5, 0.25, 0.5), (T, T), (T, F), ""),
    ("swipe_right", Swipe(0.25, 0.5, 0.75, 0.5), (T, F), (T, T), ""),
    ("swipe_right", Scroll("right"), (T, T), (T, F), ""),
    ("swipe_right", Swipe(0.5, 0.75, 0.5, 0.25), (T, F), (T, F), ""),
    # system buttons: another button has the right kind (0.55, not 0.19)
    ("back", NavigateBack(), (T, T), (T, T), ""),
    ("back", NavigateHome(), (T, F), (T, F), ""),
    ("back", Key("Enter"), (T, F), (T, F), ""),
    ("back", Click(0.1, 0.95), (F, F), (F, F), ""),
    ("home", NavigateHome(), (T, T), (T, T), ""),
    ("home", NavigateBack(), (T, F), (T, F), ""),
    ("enter", Key("Enter"), (T, T), (T, T), ""),
    ("enter", Key("enter"), (T, T), (T, T), ""),
    ("enter", NavigateBack(), (T, F), (T, F), ""),
    ("enter", Key("Tab"), (T, F), (F, F), ""),
    # wait
    ("wait", Wait(2.0), (T, T), (T, T), ""),
    ("wait", Wait(5.0), (T, T), (T, T), ""),
    ("wait", Finish("success"), (F, F), (F, F), ""),
    ("wait", Click(0.5, 0.5), (F, F), (F, F), ""),
    # typed text: containment (UI-S1), plus a difflib ratio >= 0.8 by default; an empty text
    ("type", Type("Sculpture art"), (T, T), (T, T), ""),
    ("type", Type("sculpture"), (T, T), (T, T), ""),
    ("type", Type("Sculpture arts"), (T, T), (T, T), ""),
    ("type", Type("Sculptre art"), (T, T), (T, F), ""),
    ("type", Type("pizza"), (T, F), (T, F), ""),
    ("type", Type(""), (T, F), (T, T), ""),
    ("type", Answer("Sculpture art"), (F, F), (F, F), ""),
    ("type", OpenApp("Sculpture art"), (F, F), (F, F), ""),
    # a bigger screen (1440x3120) in the same file
    ("big_screen", Click(1300 / 1440, 200 / 3120), (T, T), (T, T), ""),
    ("big_screen", Click(1390 / 1440, 290 / 3120), (T, T), (T, T), ""),
    ("big_screen", Click(0.5, 0.5), (T, F), (T, F), ""),
    # the training example: bbox, swipes written the way the view scrolls, terminate
    ("train_click", Click(540 / 1080, 389.8 / 2400), (T, T), (T, T), ""),
    ("train_click", Click(380 / 1080, 340 / 2400), (T, T), (T, T), BBOX_NOT_READ),
    ("train_click", Click(0.5, 0.9), (T, F), (T, F), ""),
    ("train_swipe", Swipe(0.5, 0.75, 0.5, 0.25), (T, T), (T, T), ""),
    ("train_swipe", Swipe(0.5, 0.25, 0.5, 0.75), (T, F), (T, F), ""),
    ("train_swipe", Scroll("down"), (T, T), (T, T), ""),
    ("terminate", Finish("success"), (T, T), (T, T), ""),
    ("terminate", Finish("failure"), (T, F), (T, T), ""),
    ("terminate", Wait(1.0), (F, F), (F, F), ""),
    ("train_open", OpenApp("Kitchen Stories"), (T, T), (T, T), ""),
    ("train_open", OpenApp("kitchen"), (T, T), (T, T), ""),
    # answer and key truths: UI-S1 wants a typed text for both
    ("answer", Answer("42 apples"), (T, T), (F, F), ""),
    ("answer", Type("42 apples"), (F, F), (T, T), ""),
    ("key", Key("Tab"), (T, T), (F, F), ""),
    ("key", Key("Tabs"), (T, F), (F, F), ""),
    ("key", Type("Tab"), (F, F), (T, T), ""),
]


def _line(truth_id):
    layout, size, rec = TRUTHS[truth_id]
    step = {"screenshot": f"/nowhere/{truth_id}.png", "step_instruction": f"do {truth_id}"}
    if layout == "eval":
        content = dict(rec)
        if rec["action"] == "swipe":  # the evaluation file's action_content: the finger path
            content = {"action": "swipe", "coordinate": [540, 1800], "coordinate2": [540, 600]} \
                if rec["direction"] == "down" else {"action": "swipe", "coordinate": [270, 1200], "coordinate2": [810, 1200]}
        content.pop("candidate_bbox", None)
        step.update(action_content=content, check_options=rec)
    else:
        step["action_content"] = rec
    return {"goal": f"goal {truth_id}", "is_successful": True, "episode_id": len(truth_id), "steps": [step]}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Every truth imported by the uis1 importer (placeholder screenshots), by truth id: (step, raw truth)."""
    d = tmp_path_factory.mktemp("uis1")
    out = {}
    for size in (S, L):
        ids = [k for k, v in TRUTHS.items() if v[1] == size]
        p = d / f"f{size[0]}.jsonl"
        p.write_text("".join(json.dumps(_line(k)) + "\n" for k in ids))
        trajs = list(read_dataset("uis1", p, placeholders=f"{size[0]}x{size[1]}"))
        for k, t in zip(ids, trajs):
            assert t.steps[0].observation.size == size
            out[k] = t.steps[0]
    return out


def test_the_table_is_large():
    assert len(CASES) >= 60 and {c[0] for c in CASES} == set(TRUTHS)


@pytest.mark.parametrize("truth_id,pred,default,uis1,deviation", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_matcher_table(imported, truth_id, pred, default, uis1, deviation):
    step = imported[truth_id]
    target = step_target(step)
    size = step.observation.size
    d = match_action(pred, target, size=size)
    assert (d.kind_match, d.matched) == default, d.reason
    u = match_action(pred, target, size=size, config=MatchConfig.preset("uis1"))
    assert (u.kind_match, u.matched) == uis1, u.reason
    # UI-S1's own semantics (box bug fixed) on the raw record agree with the preset
    truth = TRUTHS[truth_id][2]
    ref = uis1_reference(to_uis1(pred, *size), truth, *size)
    assert (ref == uis1) != bool(deviation), (ref, uis1, deviation)


def test_the_box_bug_and_the_crash_of_the_published_matcher():
    """With the bug kept, a list of boxes stays in pixels: a tap anywhere counts as inside; four boxes crash."""
    w, h = S
    truth = TRUTHS["one_box"][2]
    far = to_uis1(Click(0.1, 0.9), w, h)
    assert uis1_reference(far, truth, w, h) == (True, False)
    assert uis1_reference(far, truth, w, h, fix_boxes=False) == (True, False)  # one box of far-off pixels
    top = {"action": "click", "candidate_bbox": [[0, 0, 1080, 200], [10, 10, 20, 20]], "coordinate": [540, 100]}
    tap = to_uis1(Click(0.05, 0.9), w, h)
    assert uis1_reference(tap, top, w, h) == (True, False)
    assert uis1_reference(tap, top, w, h, fix_boxes=False) == (True, True)  # a pixel box from (0, 0) holds every tap
    with pytest.raises(TypeError):
        uis1_reference(to_uis1(OpenApp("x"), w, h), TRUTHS["open_4_boxes"][2], w, h, fix_boxes=False)
    assert uis1_reference(to_uis1(OpenApp("Zoho"), w, h), TRUTHS["open_4_boxes"][2], w, h) == (True, True)


def test_imported_targets_hold_all_boxes_the_point_and_the_instruction(imported):
    step = imported["three_boxes"]
    t = step_target(step)
    assert len(t.boxes) == 3 and t.point == pytest.approx((100 / 1080, 100 / 2400))
    assert step.metadata["step_instruction"] == "do three_boxes" and step.metadata["episode_id"] == len("three_boxes")
    assert step.metadata["placeholder"] is True
    assert step_target(imported["swipe_right"]) == StepTarget("swipe", direction="right", convention="scroll")
    # the evaluation file's action_content is the finger path, as written
    assert imported["swipe_down"].action == Swipe(0.5, 0.75, 0.5, 0.25)
    # the training example's coordinates run the way the view scrolls: the finger path is reversed
    assert imported["train_swipe"].action == Swipe(0.5, 0.75, 0.5, 0.25)
    assert step_target(imported["enter"]) == StepTarget("key", text="Enter", button="enter")


@pytest.mark.parametrize("fmt_ok,parsed,kind,match,score", [
    (T, T, T, T, 1.0), (T, T, T, F, 0.55), (T, T, F, F, 0.19), (F, T, T, T, 0.9), (F, T, F, F, 0.09),
    (F, F, F, F, 0.0), (T, F, F, F, 0.1),
])
def test_uis1_step_reward_by_hand(fmt_ok, parsed, kind, match, score):
    assert uis1_step_reward(fmt_ok, parsed, MatchResult(match, kind, False, "")) == pytest.approx(score)


def test_options_one_at_a_time(imported):
    back = step_target(imported["back"])
    assert not match_action(NavigateHome(), back, size=S, config=MatchConfig(button_kind=False)).kind_match
    done = step_target(imported["terminate"])
    assert match_action(Finish("failure"), done, size=S, config=MatchConfig(finish_status=False)).matched
    typed = step_target(imported["type"])
    for rule, want in (("exact", F), ("containment", F), ("similarity", T), ("either", T)):
        assert match_action(Type("Sculptre art"), typed, size=S, config=MatchConfig(text_rule=rule)).matched is want
    assert match_action(Type("sculp"), typed, size=S, config=MatchConfig(text_rule="similarity")).matched is F
    assert match_action(Type(""), typed, size=S, config=MatchConfig(text_rule="containment", empty_text=True)).matched
    assert not match_action(ParseError("malformed", "x"), typed, size=S).kind_match
    with pytest.raises(ValueError):
        MatchConfig.preset("nope")
    with pytest.raises(ValueError):
        MatchConfig(text_rule="fuzzy")
    assert MatchConfig.preset("uis1").name() == "uis1" and MatchConfig().name() == "default"
    assert MatchConfig(box_enlarge=1.0).name() == "custom"


def test_distance_is_to_the_nearest_box(imported):
    t = step_target(imported["three_boxes"])
    r = match_action(Click(0.5, 0.2), t, size=S)
    assert not r.matched and r.distance is not None and 0 < r.distance < 0.2


def test_element_actions_resolve_on_the_marks():
    from guiagent.types import ClickElement, Mark

    marks = (Mark(3, "button", "OK", (0.4, 0.4, 0.6, 0.5)),)
    t = StepTarget("click", boxes=((0.4, 0.4, 0.6, 0.5),), point=(0.5, 0.45))
    assert match_action(ClickElement(3), t, size=S, marks=marks).matched
    r = match_action(ClickElement(9), t, size=S, marks=marks)
    assert not r.matched and not r.kind_match and "no element" in r.reason


def test_parity_run_on_a_small_evaluation_shaped_file(tmp_path):
    """The parity machinery bench/uis1_parity.py runs: every difference of the uis1 preset is a named one,
    and the default differs from UI-S1 only on horizontal swipes and texts."""
    from rl.match_parity import compare, pair_records

    ids = [k for k, v in TRUTHS.items() if v[0] == "eval" and v[1] == S]
    lines = [_line(k) for k in ids]
    p = tmp_path / "e.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    trajs = list(read_dataset("uis1", p, placeholders="auto"))
    reports = compare(pair_records(trajs, lines), {"default": MatchConfig(), "uis1": MatchConfig.preset("uis1")},
                      point_only=True)
    edge = "tap on the edge of an enlarged box: floating-point rounding decides"
    assert all(set(r) == {edge} for r in reports["uis1"].reasons.values()), reports["uis1"].reasons
    d = reports["default"].to_dict()
    assert all(set(r) == {edge} for k, r in d["reasons"].items() if k not in ("swipe (horizontal)", "type", "open"))
    assert d["per_kind"]["click"]["agree"] == 1.0 and d["per_kind"]["swipe (vertical)"]["agree"] == 1.0
    assert d["per_kind"]["swipe (horizontal)"]["agree"] == pytest.approx(4 / 6, abs=1e-4)   # wait, finish, 2 of 4 swipes
    assert "open" in d["per_kind"] and d["per_kind"]["swipe (all)"]["probes"] == 12
    assert reports["point only"].rate("click") < 1.0   # taps in a candidate box far from the point
