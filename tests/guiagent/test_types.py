import pytest

from guiagent.types import (
    ACTION_TYPES, Answer, Click, DoubleClick, Drag, Finish, Hover, Key, LongPress, NavigateBack, NavigateHome,
    Observation, OpenApp, ParseError, RightClick, Scroll, Step, Swipe, TaskSpec, Trajectory, Type, Wait, action_from_dict,
    action_to_dict,
)

EXAMPLES = [
    Click(0.5, 0.25), DoubleClick(0.2, 0.3), RightClick(1.0, 0.0), Hover(0.7, 0.7),
    LongPress(0.1, 0.9, duration_ms=1200), Type("hello \"world\"\n", 0.2, 0.3, submit=True),
    Type("x"), Scroll("down"), Scroll("left", 0.5, 0.5, amount=0.3), Swipe(0.1, 0.2, 0.3, 0.4),
    Drag(0.0, 0.0, 1.0, 1.0), Key("Enter"), NavigateBack(), NavigateHome(), OpenApp("Contacts"),
    Wait(2.0), Answer("42"), Finish("failure", "cannot"),
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
