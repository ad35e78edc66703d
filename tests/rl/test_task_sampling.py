"""--task-sampling learnability: an online iteration draws its groups' tasks by p(1 - p), p each task's
success over the run's earlier online rollouts as the store holds them."""

from __future__ import annotations

import logging
import random
import sqlite3
from collections import Counter

import pytest

from guiagent.config import ConfigError
from guiagent.store import EpisodeFilter, Store, StoreReader
from guiagent.types import TaskSpec
from rl.config import TrainConfig
from rl.produce import learnability_weights, sample_tasks
from rl.rollout import make_groups


def _outcomes(task, iteration, successes, failures, *, suite="webapps", rnd=0):
    gid = make_groups([task], [7], 1, tag=f"i{iteration}r{rnd}")[0].group_id
    return [(gid, suite, task, 1.0)] * successes + [(gid, suite, task, 0.0)] * failures


def test_weights_follow_how_often_each_task_was_solved_before():
    tasks = ["always", "never", "half", "unseen"]
    outcomes = (_outcomes("always", 0, 12, 0) + _outcomes("never", 0, 0, 12) + _outcomes("half", 0, 6, 6)
                + [("", "webapps", "never", 1.0)] * 50  # held-out episodes (no online group): not counted
                + [(None, "webapps", "never", 1.0)] * 50
                + _outcomes("never", 1, 9, 0)  # the iteration being drawn, and later: not counted
                + [("half:7:i0r0-0@2", "webapps", "half", 1.0), ("half:7:i0r0-0@2", "webapps", "half", 0.0)]
                + [("half:7:i0r0-0:trunk", "webapps", "half", 1.0)] * 9)  # branches count, a trunk's id does not
    w = learnability_weights(outcomes, tasks, 1, floor=0.1, decay=0.8)
    assert w["half"] == pytest.approx(0.25) and w["unseen"] == pytest.approx(0.25)  # p = 1/2: the most
    assert w["always"] == pytest.approx(13 / 196) and w["never"] == pytest.approx(13 / 196)
    # the floor: a task solved every time is still drawn, at a tenth of the rate of one solved half the time
    w = learnability_weights(_outcomes("always", 0, 200, 0), tasks, 1, floor=0.1)
    assert w["always"] == pytest.approx(0.025) and w["half"] == pytest.approx(0.25)


def test_earlier_iterations_count_less_by_the_decay():
    tasks = ["t"]
    old_wins, new_losses = _outcomes("t", 0, 10, 0), _outcomes("t", 2, 0, 10)
    # at iteration 3: the losses of iteration 2 weigh 1, the wins of iteration 0 weigh 0.5^2
    p = (1 + 10 * 0.25) / (2 + 10 * 0.25 + 10)
    w = learnability_weights(old_wins + new_losses, tasks, 3, decay=0.5, floor=0.01)["t"]
    assert w == pytest.approx(p * (1 - p))
    # decay 0: the last iteration alone
    assert learnability_weights(old_wins + new_losses, tasks, 3, decay=0.0, floor=0.01)["t"] == pytest.approx(11 / 144)
    assert learnability_weights(old_wins, tasks, 1, decay=0.0, floor=0.01)["t"] == pytest.approx(11 / 144)


def test_a_mixed_runs_tasks_read_suite_dot_task():
    tasks = ["webapps.open_app", "miniwob.click-button"]
    outcomes = _outcomes("click-button", 0, 60, 0, suite="miniwob") + _outcomes("open_app", 0, 5, 5)
    w = learnability_weights(outcomes, tasks, 1, floor=0.1)
    assert w["miniwob.click-button"] == pytest.approx(0.025) and w["webapps.open_app"] == pytest.approx(0.25)


def test_draws_follow_the_weights_and_uniform_draws_are_unchanged():
    tasks = ["a", "b", "c"]
    picks = Counter(sample_tasks(random.Random(0), tasks, 6000, None, {"a": 0.25, "b": 0.025, "c": 0.125}))
    assert picks["a"] / 6000 == pytest.approx(0.25 / 0.4, abs=0.03)
    assert picks["b"] / 6000 == pytest.approx(0.025 / 0.4, abs=0.015)
    # within a suite by the task weights, the suite by its own weight
    mixed = ["webapps.x", "webapps.y", "miniwob.z"]
    picks = Counter(sample_tasks(random.Random(1), mixed, 4000, {"webapps": 1.0, "miniwob": 1.0},
                                 {"webapps.x": 0.25, "webapps.y": 0.025, "miniwob.z": 0.01}))
    assert picks["miniwob.z"] / 4000 == pytest.approx(0.5, abs=0.04)
    assert picks["webapps.x"] / (picks["webapps.x"] + picks["webapps.y"]) == pytest.approx(0.25 / 0.275, abs=0.03)
    rng = random.Random(5)
    assert sample_tasks(random.Random(5), tasks, 9) == [rng.choice(tasks) for _ in range(9)]
    assert sample_tasks(random.Random(5), tasks, 9, None, dict.fromkeys(tasks, 0.25)) == sample_tasks(
        random.Random(5), tasks, 9)  # equal weights: the uniform draws


def test_the_store_gives_each_online_episodes_group_and_outcome(tmp_path):
    def play(store, run, req, success):
        spec = TaskSpec("webapps", req.task_id, req.seed, "goal", 3)
        store.begin_episode(run, spec, group_id=req.group_id, metadata=req.metadata).complete(success)

    with Store.open(tmp_path) as store:
        run = store.create_run("r")
        reqs = make_groups(["open_app", "go_home"], [3, 4], 2, tag="i0r0")
        play(store, run, reqs[0], 0.0)  # a killed run's play of member 0, played again below on resume
        for req, success in zip(reqs, (1.0, 0.0, 0.0, 0.0)):
            play(store, run, req, success)
        store.begin_episode(run, TaskSpec("webapps", "open_app", 9, "goal", 3), group_id="open_app:9:i0r0-5")  # open
        store.begin_episode(run, TaskSpec("webapps", "open_app", 9, "goal", 3)).complete(1.0)  # held out: no group
        other = store.create_run("other")
        play(store, other, make_groups(["go_home"], [1], 1, tag="i0r0")[0], 1.0)
        got = store.grouped_outcomes(run)
    assert got == [("open_app:3:i0r0-0", "webapps", "open_app", 1.0), ("open_app:3:i0r0-0", "webapps", "open_app", 0.0),
                   ("go_home:4:i0r0-1", "webapps", "go_home", 0.0), ("go_home:4:i0r0-1", "webapps", "go_home", 0.0)]
    w = learnability_weights(got, ["open_app", "go_home"], 1, floor=0.1)
    assert w["open_app"] == pytest.approx(0.25) and w["go_home"] == pytest.approx(1 / 4 * 3 / 4)


def test_a_run_draws_each_iterations_tasks_by_its_earlier_rollouts(tiny_model_dir, tmp_path, caplog):
    """A real run (tiny model, webapps in process): iteration 1's groups are the draws that the weights from
    iteration 0's stored outcomes give, from the iteration's own generator."""
    from rl.trainer import train

    out, tasks = tmp_path / "run", ("go_home", "open_app", "settings_turn_on")
    cfg = TrainConfig.build(model=tiny_model_dir, tasks=tasks, iterations=2, groups_per_iteration=3, group_size=2,
                            slots=2, pool="inprocess", max_new_tokens=8, eval_episodes=0, filter_zero_variance=False,
                            horizon_schedule="0:1", task_sampling="learnability", task_sampling_floor=0.2,
                            out=str(out), seed=0)
    with caplog.at_level(logging.INFO, logger="rl.produce"):
        train(cfg)
    assert "iteration 1 draws its tasks by learnability" in caplog.text
    with StoreReader(out) as reader:
        [run] = reader.list_runs()
        eps = reader.list_episodes(EpisodeFilter(run_id=run.run_id), limit=100).items
    outcomes = [(e.group_id, e.suite, e.task_id, e.success) for e in eps]
    with sqlite3.connect(f"file:{out / 'store.sqlite'}?mode=ro", uri=True) as con:  # each play names its member
        members = con.execute("SELECT json_extract(metadata, '$.member') FROM episodes WHERE group_id != ''").fetchall()
    assert sorted(m for (m,) in members) == [0] * 6 + [1] * 6 and len(eps) == 12

    def drawn(iteration):
        groups = {e.group_id for e in eps if e.group_id and f":i{iteration}r0-" in e.group_id}
        return [g.split(":")[0] for g in sorted(groups, key=lambda g: int(g.rsplit("-", 1)[1]))]

    # iteration 0 knows no outcome: every task at p = 1/2, drawn as a uniform run draws
    assert drawn(0) == sample_tasks(random.Random(0 * 7919 + 0), list(tasks), 3)
    weights = learnability_weights(outcomes, list(tasks), 1, floor=0.2, decay=0.8)
    assert weights["settings_turn_on"] == max(weights.values()) > min(weights.values())  # iteration 0 did not draw it
    assert drawn(1) == sample_tasks(random.Random(0 * 7919 + 1), list(tasks), 3, None, weights)


@pytest.mark.parametrize(("kwargs", "flag"), [
    (dict(model="m", task_sampling_floor=0.2), "--task-sampling-floor"),  # uniform draws have no floor
    (dict(model="m", task_sampling_decay=0.5), "--task-sampling-decay"),
    (dict(model="m", mode="semi-online", data=("x",), task_sampling="learnability"), "--task-sampling"),
])
def test_a_learnability_setting_the_run_does_not_use_is_refused(kwargs, flag):
    with pytest.raises(ConfigError) as e:
        TrainConfig.build(**kwargs)
    assert str(e.value).startswith(flag + " ")


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(task_sampling="most"), "task_sampling"),
    (dict(task_sampling="learnability", task_sampling_floor=0.0), "task.sampling.floor"),
    (dict(task_sampling="learnability", task_sampling_floor=float("nan")), "task.sampling.floor"),
    (dict(task_sampling="learnability", task_sampling_decay=1.0), "task.sampling.decay"),
])
def test_bad_learnability_settings_are_refused(kwargs, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        TrainConfig.build(model="m", **kwargs)
