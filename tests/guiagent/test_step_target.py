"""The typed step target (``guiagent.types.StepTarget``): checks, JSON round trip, swipe conventions."""

import json

import pytest

from guiagent.types import STEP_TARGET_KEY, StepTarget


def test_round_trip_through_json_is_lossless():
    t = StepTarget("click", boxes=[[0.1, 0.2, 0.3, 0.4], (0.0, 0.0, 1.0, 1.0)], point=[0.25, 0.3])
    assert t.boxes == ((0.1, 0.2, 0.3, 0.4), (0.0, 0.0, 1.0, 1.0)) and t.point == (0.25, 0.3)
    back = StepTarget.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back == t and STEP_TARGET_KEY == "target"
    s = StepTarget("swipe", point=(0.5, 0.75), point2=(0.5, 0.25), direction="down", convention="scroll")
    assert StepTarget.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert s.to_dict() == {"kind": "swipe", "point": [0.5, 0.75], "point2": [0.5, 0.25], "direction": "down",
                           "convention": "scroll"}
    for x in (StepTarget("back", button="back"), StepTarget("finish", status="failure"),
              StepTarget("type", text="Welsh cakes", point=(0.1, 0.9)), StepTarget("wait")):
        assert StepTarget.from_dict(x.to_dict()) == x


@pytest.mark.parametrize("direction,convention,finger", [
    ("down", "scroll", "up"), ("up", "scroll", "down"), ("left", "scroll", "right"), ("right", "scroll", "left"),
    ("down", "finger", "down"), ("left", "finger", "left"), (None, "finger", None),
])
def test_finger_direction_reads_the_convention(direction, convention, finger):
    assert StepTarget("swipe", direction=direction, convention=convention).finger_direction == finger


@pytest.mark.parametrize("kwargs,err", [
    ({"kind": ""}, ValueError),
    ({"kind": "click", "boxes": [[0.5, 0.5, 0.4, 0.6]]}, ValueError),   # corners swapped
    ({"kind": "click", "boxes": [[0, 0, 2.5, 1]]}, ValueError),         # more than a screen past it
    ({"kind": "click", "boxes": [[1.2, 0, 1.5, 1]]}, ValueError),       # wholly off the screen
    ({"kind": "click", "boxes": [[0, 0, 1]]}, ValueError),
    ({"kind": "click", "boxes": [["a", 0, 1, 1]]}, TypeError),
    ({"kind": "click", "boxes": "0,0,1,1"}, TypeError),
    ({"kind": "click", "point": (0.5,)}, ValueError),
    ({"kind": "click", "point": (2.0, 0.5)}, ValueError),
    ({"kind": "click", "point": (True, 0.5)}, ValueError),
    ({"kind": "swipe", "direction": "sideways"}, ValueError),
    ({"kind": "swipe", "direction": "up", "convention": "content"}, ValueError),
    ({"kind": "type", "text": 7}, TypeError),
])
def test_bad_targets_are_refused(kwargs, err):
    with pytest.raises(err):
        StepTarget(**kwargs)


def test_a_box_may_reach_past_the_screen():
    assert StepTarget("click", boxes=[[0.9, 0.95, 1.1, 1.04]]).boxes == ((0.9, 0.95, 1.1, 1.04),)


def test_from_dict_refuses_unknown_fields_and_non_objects():
    with pytest.raises(ValueError, match="unknown step target fields"):
        StepTarget.from_dict({"kind": "click", "bbox": [0, 0, 1, 1]})
    with pytest.raises(TypeError):
        StepTarget.from_dict(["click"])
