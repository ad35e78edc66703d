import json

import pytest

from guiagent.types import (
    ACTION_TYPES, Answer, Click, ClickElement, DoubleClick, Drag, ElementNotFound, Finish, Hover, Key, LongPress,
    LongPressElement, Mark, NavigateBack, NavigateHome, Observation, OpenApp, ParseError, RightClick, Scroll, Step,
    Swipe, TaskSpec, Trajectory, Type, TypeElement, Wait, action_from_dict, action_to_dict, element_at,
    resolve_element,
)

EXAMPLES = [
    Click(0.5, 0.25), DoubleClick(0.2, 0.3), RightClick(1.0, 0.0), Hover(0.7, 0.7),
    LongPress(0.1, 0.9, duration_ms=1200), Type("hello \"world\"\n", 0.2, 0.3, submit=True),
    Type("x"), Scroll("down"), Scroll("left", 0.5, 0.5, amount=0.3), Swipe(0.1, 0.2, 0.3, 0.4),
    Drag(0.0, 0.0, 1.0, 1.0), Key("Enter"), NavigateBack(), NavigateHome(), OpenApp("Contacts"),
    Wait(2.0), Answer("42"), Finish("failure", "cannot"), ClickElement(7), LongPressElement(0, duration_ms=600),
    TypeElement(3, "Ann \"Lee\"\n", submit=True),
]


def test_every_action_kind_has_an_example():
    assert {type(a) for a in EXAMPLES} == set(ACTION_TYPES)


@pytest.mark.parametrize("action", EXAMPLES, ids=lambda a: a.kind)
def test_action_json_round_trip(action):
    d = action_to_dict(action)
    assert d["kind"] == action.kind
    assert action_from_dict(d) == action


@pytest.mark.parametrize("bad", [
    {"kind": "click", "x": 1.5, "y": 0.5}, {"kind": "click", "x": -0.1, "y": 0.5},
    {"kind": "fly"}, {"kind": "click", "x": 0.5, "y": 0.5, "z": 1}, {"kind": "scroll", "direction": "sideways"},
    {"kind": "type", "text": "a", "x": 0.5}, {"kind": "key", "key": " "}, {"kind": "finish", "status": "maybe"},
    {"kind": "click_element"}, {"kind": "click_element", "element": -1}, {"kind": "click_element", "element": True},
    {"kind": "click_element", "element": "7"}, {"kind": "click_element", "element": 1.5},
    {"kind": "click_element", "element": 1, "x": 0.5}, {"kind": "type_element", "element": 1},
    {"kind": "type_element", "element": 1, "text": 5},
])
def test_bad_action_dicts_raise(bad):
    with pytest.raises((ValueError, TypeError)):
        action_from_dict(bad)


def test_actions_are_frozen():
    with pytest.raises(Exception):
        Click(0.1, 0.1).x = 0.2  # type: ignore[misc]


def test_trajectory_round_trip_with_pixels():
    obs = Observation(b"\x89PNG fake", 4, 3, tree="[button] OK", url="http://127.0.0.1/")
    spec = TaskSpec("webapps", "t", 7, "do it", 5, {"name": "Ann"})
    steps = (
        Step(0, obs, Click(0.5, 0.5), response="Action: click", thought="tap", reward=0.0,
             reward_parts={"progress": 0.25}, milestones=(True, False), policy_version=3),
        Step(1, obs, None, response="???", parse_error=ParseError("no_action", "nothing found", "???"),
             truncated=True),
    )
    traj = Trajectory("ep1", spec, steps, success=1.0, final_observation=obs, agent="oracle",
                      metadata={"k": 1})
    back = Trajectory.from_json(traj.to_json())
    assert back == traj
    assert back.total_reward == 0.0 and back.num_steps == 2
    slim = traj.to_dict(include_pixels=False)
    assert slim["steps"][0]["observation"]["screenshot"] is None


def test_parse_error_codes_are_checked():
    with pytest.raises(ValueError):
        ParseError("whatever", "x")
    assert str(ParseError("empty", "no text")) == "empty: no text"


def test_pointer_actions_round_trip_through_a_real_store(tmp_path):
    """DoubleClick / RightClick / Hover steps survive SQLite and come back as the same actions."""
    import dataclasses

    from guiagent.store import Store, StoreReader
    from tests.guiagent.test_store_fixtures import make_traj

    base = make_traj(7, steps=3)
    acts = (DoubleClick(0.2, 0.3), RightClick(1.0, 0.0), Hover(0.7, 0.7))
    steps = tuple(dataclasses.replace(s, action=a) for s, a in zip(base.steps, acts))
    traj = dataclasses.replace(base, steps=steps)
    store = Store.open(tmp_path / "run")
    try:
        store.write_trajectory(store.create_run("pointer"), traj)
    finally:
        store.close()
    back = StoreReader(tmp_path / "run").load_trajectory(traj.episode_id)
    assert back == traj and tuple(s.action for s in back.steps) == acts


# ----------------------------------------------------------------------------- marks

MARKS = (Mark(0, "link", "Contacts", (0.0, 0.1, 0.25, 0.2)), Mark(1, "link", "Files", (0.25, 0.1, 0.5, 0.2)),
         Mark(2, "textbox", "To", (0.05, 0.5, 0.95, 0.6)), Mark(3, "generic", "Card", (0.0, 0.4, 1.0, 0.7)))


def test_mark_checks_its_fields():
    assert Mark(1, "button", "", [0, 0, 1, 1]).box == (0.0, 0.0, 1.0, 1.0)
    for bad in [dict(id=-1), dict(id=True), dict(id=1.0), dict(box=(0, 0, 1)), dict(box=(0, 0, 1.5, 1)),
                dict(box=(0.5, 0, 0.4, 1)), dict(box="0 0 1 1"), dict(box=(0, 0, float("nan"), 1)),
                dict(box=(False, 0, 1, 1)), dict(role=None), dict(name=3)]:
        kw = {"id": 1, "role": "button", "name": "OK", "box": (0, 0, 1, 1), **bad}
        with pytest.raises((TypeError, ValueError)):
            Mark(**kw)
    with pytest.raises(ValueError, match="unknown mark fields"):
        Mark.from_dict({"id": 1, "role": "b", "name": "", "box": [0, 0, 1, 1], "onclick": "x"})


def test_mark_states_are_known_names_in_one_order_and_stored_only_when_some_hold():
    m = Mark(2, "tab", "Inbox", (0, 0, 1, 1), ["expanded", "selected"])
    assert m.states == ("selected", "expanded")  # MARK_STATES' order, whatever order they came in
    assert m.to_dict()["states"] == ["selected", "expanded"] and Mark.from_dict(m.to_dict()) == m
    assert "states" not in Mark(2, "tab", "Inbox", (0, 0, 1, 1)).to_dict()  # the JSON of a table before states
    assert Mark.from_dict({"id": 0, "role": "b", "name": "", "box": [0, 0, 1, 1]}).states == ()
    for bad in ("checked", ("on",), ("expanded", "collapsed"), ("checked", "mixed"), (1,)):
        with pytest.raises((TypeError, ValueError)):
            Mark(0, "checkbox", "x", (0, 0, 1, 1), bad)  # type: ignore[arg-type]
    for bad in ("checked", [3], {"checked": True}):
        with pytest.raises(ValueError, match="states"):
            Mark.from_dict({"id": 0, "role": "b", "name": "", "box": [0, 0, 1, 1], "states": bad})


def test_observation_marks_round_trip_and_old_dicts_still_load():
    obs = Observation(b"png", 4, 3, tree="t", marks=MARKS)
    d = obs.to_dict()
    assert d["marks"][1] == {"id": 1, "role": "link", "name": "Files", "box": [0.25, 0.1, 0.5, 0.2]}
    assert Observation.from_dict(d) == obs
    assert Observation.from_dict(json.loads(json.dumps(d))) == obs  # through JSON: lists become tuples
    # without marks the dict has exactly the keys it had before marks existed (stored runs, exports)
    plain = Observation(b"png", 4, 3)
    assert "marks" not in plain.to_dict() and plain.marks is None
    old = {"screenshot": None, "width": 4, "height": 3, "screenshot_ref": None, "tree": None, "url": None,
           "last_action_error": None}
    assert Observation.from_dict(old) == Observation(None, 4, 3)
    assert Observation(b"png", 4, 3, marks=()).to_dict()["marks"] == []  # an empty table is not "no table"
    with pytest.raises(ValueError, match="unique"):
        Observation(b"png", 4, 3, marks=(MARKS[0], MARKS[0]))
    with pytest.raises(TypeError):
        Observation(b"png", 4, 3, marks="[0] link")  # type: ignore[arg-type]


def test_trajectory_with_marks_and_element_actions_round_trips():
    obs = Observation(b"\x89PNG fake", 4, 3, marks=MARKS)
    spec = TaskSpec("webapps", "open_app", 7, "Open the Files app.", 3)
    traj = Trajectory("ep", spec, (Step(0, obs, ClickElement(1)), Step(1, obs, TypeElement(2, "Ann", submit=True))),
                      final_observation=obs)
    assert Trajectory.from_json(traj.to_json()) == traj


@pytest.mark.parametrize("action, expected", [
    (ClickElement(1), Click(0.375, 0.15)),
    (LongPressElement(0, duration_ms=1000), LongPress(0.125, 0.15, duration_ms=1000)),
    (TypeElement(2, "Ann", submit=True), Type("Ann", 0.5, 0.55, submit=True)),
    (Click(0.3, 0.3), Click(0.3, 0.3)),  # point actions pass through
    (Finish(), Finish()),
])
def test_resolve_element_lands_on_the_box_centre(action, expected):
    assert resolve_element(action, MARKS) == expected


def test_resolve_element_errors_say_what_exists():
    with pytest.raises(ElementNotFound, match="numbered 0-3"):
        resolve_element(ClickElement(9), MARKS)
    with pytest.raises(ElementNotFound, match="numbered 0, 2"):
        resolve_element(ClickElement(9), (MARKS[0], MARKS[2]))
    with pytest.raises(ElementNotFound, match="no numbered elements"):
        resolve_element(ClickElement(0), None)
    with pytest.raises(ElementNotFound, match="no numbered elements"):
        resolve_element(TypeElement(0, "x"), ())
    assert resolve_element(Click(0.5, 0.5), None) == Click(0.5, 0.5)


def test_element_at_picks_the_smallest_box_holding_the_point():
    assert element_at(MARKS, 0.5, 0.55).id == 2      # the text box, not the card around it
    assert element_at(MARKS, 0.02, 0.45).id == 3
    assert element_at(MARKS, 0.3, 0.15).id == 1
    assert element_at(MARKS, 0.9, 0.95) is None
    assert element_at(None, 0.5, 0.5) is None
