"""Mixed fleets: one run over several suites (``--env webapps,miniwob``), per-suite sampling weights,
per-suite metrics in the store and the web UI's charts, per-suite Ray resources."""

from __future__ import annotations

import random

import pytest

from emulators.pool_mixed import MixedPool, suite_options, suite_resources
from emulators.pool_types import ActionRequest, PoolRequestError, ResetRequest
from emulators.suites import get_suite
from emulators.suites.mixed import MixedSuite, split_env, split_task
from rl.config import TrainConfig
from rl.produce import sample_tasks


def test_mixed_suite_names_tasks_by_suite():
    suite = get_suite("webapps, miniwob")
    assert isinstance(suite, MixedSuite) and suite.name == "webapps,miniwob"
    ids = suite.task_ids()
    assert "webapps.open_app" in ids and "miniwob.click-button" in ids
    assert suite.task_class("miniwob.click-button").suite == "miniwob"
    with pytest.raises(KeyError, match="unknown task 'webapps.nope'"):
        suite.task_class("webapps.nope")
    with pytest.raises(KeyError, match="unknown suite 'chess'"):
        get_suite("webapps,chess")
    assert split_env("webapps,,miniwob,webapps") == ["webapps", "miniwob"]
    assert split_task("miniwob.click-button") == ("miniwob", "click-button")
    assert get_suite("webapps,").name == "webapps"


def test_suite_weights_steer_sampling():
    tasks = ["webapps.open_app", "webapps.go_home", "miniwob.click-button"]
    rng = random.Random(0)
    picks = sample_tasks(rng, tasks, 3000, {"webapps": 1.0, "miniwob": 3.0})
    share = sum(p.startswith("miniwob.") for p in picks) / len(picks)
    assert 0.72 < share < 0.78  # 3 : 1 by suite, not 1 : 2 by task count
    # without weights: uniform over tasks, the same draws as before mixed fleets existed
    rng = random.Random(5)
    assert sample_tasks(random.Random(5), tasks, 4) == [rng.choice(tasks) for _ in range(4)]
    with pytest.raises(ValueError, match="--env-weights chess"):
        TrainConfig.build(env="webapps,miniwob", env_weights={"chess": 1.0})
    with pytest.raises(ValueError, match="weights are positive"):
        TrainConfig.build(env="webapps,miniwob", env_weights={"miniwob": 0.0})


def test_suite_resources_go_to_their_suites_workers_only():
    suites = ["androidworld", "webapps"]
    res = {"androidworld": 1.0, "big_mem": 0.5}
    assert suite_resources("androidworld", suites, res) == {"androidworld": 1.0, "big_mem": 0.5}
    assert suite_resources("webapps", suites, res) == {"big_mem": 0.5}
    opts = {"androidworld.farm": "runs/farm/endpoints.json", "headless": "true", "webapps.chromium_path": "/c"}
    assert suite_options("androidworld", suites, opts) == {"farm": "runs/farm/endpoints.json", "headless": "true"}
    assert suite_options("webapps", suites, opts) == {"headless": "true", "chromium_path": "/c"}


def test_per_suite_metrics_and_charts():
    from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
    from rl.metrics import rollout_metrics
    from rl.rollout import RolloutResult
    from webui.data import chart_groups

    obs = Observation(b"x", 2, 2)

    def traj(suite, r, status="completed"):
        return Trajectory(f"{suite}{r}{status}", TaskSpec(suite, "t", 0, "g"),
                          (Step(0, obs, Click(0.5, 0.5), reward=r),), success=float(r > 0), status=status)

    res = RolloutResult(trajectories=[traj("webapps", 1.0), traj("webapps", 0.0), traj("miniwob", 0.0, "aborted")],
                        aborted=1)
    m = rollout_metrics(res, suites=["webapps", "miniwob"])
    assert m["suite/webapps/success_rate"] == 0.5 and m["suite/webapps/episodes"] == 2.0
    assert m["suite/miniwob/episodes"] == 0.0 and m["suite/miniwob/aborted"] == 1.0
    assert "suite/miniwob/success_rate" not in m  # no completed episode: no point, rather than a fake 0
    assert not any(k.startswith("suite/") for k in rollout_metrics(res))  # one suite: nothing extra
    charts = {c["title"]: c["series"] for c in chart_groups(list(m))}
    assert charts["Success rate by suite"] == ["suite/webapps/success_rate"]
    assert charts["Episodes by suite"] == ["suite/miniwob/aborted", "suite/miniwob/episodes",
                                           "suite/webapps/aborted", "suite/webapps/episodes"]
    assert charts["Success rate"] == ["success_rate"]


def test_held_out_success_per_suite():
    """Each suite's share of successful episodes; an episode aborted at its reset (it carries the run's
    env and a qualified task id) counts as a failure of its suite, as in the overall success rate."""
    from guiagent.types import TaskSpec, Trajectory
    from rl.evaluate import success_by_suite, suite_of

    def traj(suite, task, success, status="completed"):
        return Trajectory(f"{suite}{task}{success}{status}", TaskSpec(suite, task, 0, "g"), (), success=success,
                          status=status)

    trajs = [traj("webapps", "open_app", 1.0), traj("webapps", "go_home", 0.0), traj("miniwob", "click-tab", 1.0),
             traj("webapps,miniwob", "miniwob.click-tab", 0.0, "aborted")]
    assert [suite_of(t) for t in trajs] == ["webapps", "webapps", "miniwob", "miniwob"]
    assert success_by_suite(trajs, ["webapps", "miniwob"]) == {"webapps": 0.5, "miniwob": 0.5}
    assert success_by_suite(trajs[:2], ["webapps", "miniwob"]) == {"webapps": 0.5}  # no episode: no figure
    assert success_by_suite(trajs, ["webapps"]) == {}  # one suite: the overall figure says it all


@pytest.mark.slow
def test_mixed_pool_routes_slots_to_their_suites_pools():
    """Real Chromium: a slot runs a webapps task, then a miniwob one, beside another slot."""
    from emulators.pool_mixed import open_pool

    with open_pool("webapps,miniwob", slots=2) as pool:
        assert isinstance(pool, MixedPool) and pool.num_slots == 2
        outs = pool.reset([ResetRequest(0, "webapps.open_app", 1), ResetRequest(1, "miniwob.click-button", 2)])
        assert [o.spec.suite for o in outs] == ["webapps", "miniwob"] and [o.slot for o in outs] == [0, 1]
        actions = pool.oracle_actions([1, 0])
        assert all(a is not None for a in actions)
        outs = pool.step([ActionRequest(1, actions[0]), ActionRequest(0, actions[1])])
        assert [o.slot for o in outs] == [1, 0] and all(o.worker_error is None for o in outs)
        out = pool.reset([ResetRequest(0, "miniwob.click-button", 3)])[0]
        assert out.spec.suite == "miniwob" and out.worker_error is None
        with pytest.raises(PoolRequestError, match="no pool for suite 'androidworld'"):
            pool.reset([ResetRequest(1, "androidworld.X", 0)])
        # slot 0 (miniwob) steps while slot 1 starts a webapps task: one batch of each suite's pool
        with pytest.raises(PoolRequestError, match="twice"):
            pool.step_and_reset([ActionRequest(0, actions[0])], [ResetRequest(0, "webapps.go_home", 4)])
        (a,) = pool.oracle_actions([0])
        steps, resets = pool.step_and_reset([ActionRequest(0, a)], [ResetRequest(1, "webapps.go_home", 4)])
        assert steps[0].slot == 0 and steps[0].worker_error is None and steps[0].info.success == 1.0
        assert resets[0].slot == 1 and resets[0].spec.suite == "webapps" and resets[0].spec.task_id == "go_home"
        assert pool.oracle_actions([1])[0] is not None  # slot 1 now follows its webapps episode


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_mixed_run_trains_and_shows_per_suite_curves(tiny_model_dir, tmp_path):
    """A tiny-budget webapps+miniwob run: metrics per suite in the store, and per-suite charts in the web UI."""
    from guiagent.store import StoreReader
    from rl.trainer import train
    from webui import AppConfig, create_app

    out = tmp_path / "runs" / "mixed"
    result = train(TrainConfig.build(env="webapps,miniwob", model=tiny_model_dir, tasks=("webapps.go_home",
                                                                                     "miniwob.click-button"),
                               env_weights={"webapps": 1.0, "miniwob": 1.0}, groups_per_iteration=2, group_size=2,
                               slots=2, pool="inprocess", iterations=2, eval_episodes=2, eval_every=1,
                               max_new_tokens=4, out=str(out), seed=1))
    assert result.iterations == 2
    reader = StoreReader(out)
    names = set(reader.metric_names(result.run_id))
    for it_metric in ("suite/webapps/episodes", "suite/miniwob/episodes"):
        assert it_metric in names
    points = reader.metrics(result.run_id, ["suite/webapps/episodes", "suite/miniwob/episodes"])
    assert sum(p.value for pts in points.values() for p in pts) == 2 * 2 * 2  # every episode counted once
    # held-out success per suite: before (iteration 0), after iteration 1 (--eval-every 1) and after the run
    assert set(result.suite_success_before) == set(result.suite_success_after) == {"webapps", "miniwob"}
    held = reader.metrics(result.run_id, ["suite/webapps/eval_success", "suite/miniwob/eval_success",
                                          "suite/webapps/eval_success_before"])
    assert [p.iteration for p in held["suite/webapps/eval_success"]] == [0, 1]
    assert [p.iteration for p in held["suite/webapps/eval_success_before"]] == [0]
    assert held["suite/miniwob/eval_success"][-1].value == result.suite_success_after["miniwob"]
    client = create_app(AppConfig(runs=str(tmp_path / "runs"), refresh_s=0.5)).test_client()
    key = next(r["key"] for r in client.get("/api/runs").get_json()["runs"] if r["run_id"] == result.run_id)
    charts = {c["title"]: c["series"] for c in client.get(f"/api/runs/{key}/metrics").get_json()["charts"]}
    assert charts["Episodes by suite"] == ["suite/miniwob/aborted", "suite/miniwob/episodes",
                                           "suite/webapps/aborted", "suite/webapps/episodes"]
    assert {"suite/webapps/eval_success", "suite/miniwob/eval_success_before"} <= set(charts["Success rate by suite"])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ray_places_each_suites_workers_by_its_resource():
    """A local Ray whose node offers one ``miniwob`` resource: the miniwob workers take it, the
    webapps workers do not ask for it (else one of them could not be placed)."""
    ray = pytest.importorskip("ray")
    from emulators.pool_mixed import open_pool

    ray.init(num_cpus=2, resources={"miniwob": 1}, include_dashboard=False, log_to_driver=False)
    try:
        with open_pool("webapps,miniwob", kind="ray", slots=1, workers=1,
                       worker_resources={"miniwob": 1}) as pool:
            assert ray.available_resources().get("miniwob", 0.0) == 0.0  # held by the miniwob worker
            outs = pool.reset([ResetRequest(0, "miniwob.click-button", 1)])
            assert outs[0].worker_error is None and outs[0].spec.suite == "miniwob"
            outs = pool.reset([ResetRequest(0, "webapps.go_home", 1)])
            assert outs[0].worker_error is None and outs[0].spec.suite == "webapps"
    finally:
        ray.shutdown()
