"""Element actions in the matcher: by id on the same mark table, by the mark's box holding the
recorded point, and point actions against a recorded element action."""

from __future__ import annotations

import pytest

from guiagent.types import (
    Click, ClickElement, LongPressElement, Mark, Observation, Step, StepTarget, TypeElement,
)
from rl.match import match_action, step_target

SIZE = (360, 640)
MARKS = (Mark(0, "link", "Contacts", (0.0, 0.1, 0.25, 0.2)), Mark(1, "link", "Messages", (0.25, 0.1, 0.5, 0.2)),
         Mark(2, "link", "Wide row", (0.0, 0.5, 1.0, 0.6)), Mark(3, "link", "Same box", (0.0, 0.1, 0.25, 0.2)))


def _recorded(action) -> StepTarget:
    return step_target(Step(0, Observation(None, *SIZE, marks=MARKS), action))


def test_a_recorded_element_action_keeps_its_id():
    t = _recorded(ClickElement(1))
    assert (t.kind, t.element, t.boxes, t.point) == ("click", 1, ((0.25, 0.1, 0.5, 0.2),), (0.375, 0.15))
    assert StepTarget.from_dict(t.to_dict()) == t
    assert _recorded(LongPressElement(2)).element == 2
    with pytest.raises(ValueError):
        StepTarget("click", element=-1)


@pytest.mark.parametrize("pred, target, matched, exact", [
    (ClickElement(1), ClickElement(1), True, True),     # by id
    (ClickElement(0), ClickElement(1), False, False),   # another element of the same screen
    (ClickElement(3), ClickElement(0), True, True),     # a mark with the very same box is the same element
    (Click(0.3, 0.12), ClickElement(1), True, False),   # a tap inside the recorded element's box
    (Click(0.9, 0.9), ClickElement(1), False, False),
    (LongPressElement(1), LongPressElement(1), True, True),
    (ClickElement(1), LongPressElement(1), False, False),  # the kind still counts
])
def test_element_predictions_against_element_recordings(pred, target, matched, exact):
    r = match_action(pred, _recorded(target), size=SIZE, marks=MARKS)
    assert (r.matched, r.exact) == (matched, exact), r


def test_by_box_the_mark_holds_the_recorded_point():
    far_tap = StepTarget("click", point=(0.95, 0.55))  # a point-only recording (AndroidControl's kind)
    r = match_action(ClickElement(2), far_tap, size=SIZE, marks=MARKS)
    assert r.matched and "holds the recorded point" in r.reason  # the row's centre is far, its box is not
    assert not match_action(ClickElement(0), far_tap, size=SIZE, marks=MARKS).matched
    boxed = StepTarget("click", boxes=((0.25, 0.1, 0.5, 0.2),), point=(0.3, 0.15))
    assert match_action(ClickElement(1), boxed, size=SIZE, marks=MARKS).matched  # centre inside the box
    assert not match_action(ClickElement(2), boxed, size=SIZE, marks=MARKS).matched


def test_an_id_the_screen_does_not_hold_never_matches():
    r = match_action(ClickElement(9), _recorded(ClickElement(1)), size=SIZE, marks=MARKS)
    assert not r.matched and "names no element" in r.reason
    assert not match_action(ClickElement(1), _recorded(ClickElement(1)), size=SIZE, marks=None).matched


def test_typing_into_an_element_compares_the_text():
    t = _recorded(TypeElement(2, "hello"))
    assert t.kind == "type" and t.element == 2
    assert match_action(TypeElement(2, "hello"), t, size=SIZE, marks=MARKS).matched
    assert not match_action(TypeElement(2, "bye"), t, size=SIZE, marks=MARKS).matched
