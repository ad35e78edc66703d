"""Branched rollouts (--branch-at): G continuations restored from the very same env state."""

import json

import pytest

from emulators.pool import ActionRequest, InProcessPool, ResetRequest
from emulators.pool_types import PoolRequestError
from guiagent.store import EpisodeFilter, Store, StoreReader
from guiagent.types import Click
from rl.agents import OraclePolicy, PolicyTurn, RandomPolicy
from rl.branch import BranchError, BranchPoint, choose_points, run_branched, surprisal
from rl.config import TrainConfig
from rl.rollout import EpisodeRequest, make_groups
from rl.settings import BranchSettings

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def pool():
    p = InProcessPool("webapps", num_slots=4)
    yield p
    p.close()


def test_a_state_restored_in_another_slot_continues_the_same_episode(pool):
    pool.reset([ResetRequest(0, "settings_dark_theme", 5)])
    first = pool.step([ActionRequest(0, pool.oracle_actions([0])[0])])[0]
    snap = pool.snapshot([0])[0]
    assert snap.error is None and snap.state.steps == 1
    got = pool.reset([ResetRequest(1, "settings_dark_theme", 5, state=snap.state)])[0]
    assert got.worker_error is None and got.spec == snap.state.spec
    assert got.observation.screenshot == first.observation.screenshot
    assert got.info.milestones == first.info.milestones
    # the same action in both slots: the same screen and milestones, to the end
    acts = pool.oracle_actions([0, 1])
    assert acts[0] == acts[1]
    a, b = pool.step([ActionRequest(0, acts[0]), ActionRequest(1, acts[1])])
    assert a.observation.screenshot == b.observation.screenshot and a.info.milestones == b.info.milestones
    # a slot without an episode has no state; a state of another task is refused before anything runs
    pool.reset([ResetRequest(2, "open_app", 1)])
    pool.step([ActionRequest(2, Click(0.5, 0.5))])  # open_app: the first tap may or may not end it
    assert pool.snapshot([3])[0].error == "no running episode in this slot"
    with pytest.raises(PoolRequestError, match="cannot start"):
        pool.reset([ResetRequest(3, "open_app", 5, state=snap.state)])


def _turn(lps):
    return PolicyTurn("r", Click(0.5, 0.5), None, 0, logprobs=tuple(lps))


def test_uncertain_picks_the_least_certain_states_of_completed_trunks():
    assert surprisal(_turn([-1.0, -3.0])) == pytest.approx(2.0) and surprisal(_turn([])) == 0.0
    req = EpisodeRequest("t", 0, "g:trunk")
    pts = [BranchPoint(req, "e1", i, None, (), s) for i, s in enumerate([0.1, 2.0, 0.5, 1.9])]
    pts.append(BranchPoint(req, "aborted", 0, None, (), 9.0))
    assert [p.step for p in choose_points(pts, {"e1"}, "uncertain", 2)] == [1, 3]
    assert [p.step for p in choose_points(pts, {"e1"}, "every", 1)] == [0, 1, 2, 3]


def test_no_branch_point_after_an_unparseable_reply():
    from guiagent.types import Observation, ParseError, Step

    obs = Observation(screenshot=b"", width=1, height=1)
    good = Step(index=0, observation=obs, action=Click(0.5, 0.5), response="ok")
    bad = Step(index=1, observation=obs, action=None, response="{x", parse_error=ParseError("malformed", "bad"))
    req = EpisodeRequest("t", 0, "g:trunk")
    histories = [(), (good,), (good, bad), (good, bad, good)]
    pts = [BranchPoint(req, "e1", i, None, h, s) for i, (h, s) in enumerate(zip(histories, [0.1, 0.2, 5.0, 6.0]))]
    assert [p.step for p in choose_points(pts, {"e1"}, "every", 1)] == [0, 1]
    # the most uncertain states are the ones after the garbage: still not chosen
    assert [p.step for p in choose_points(pts, {"e1"}, "uncertain", 1)] == [1]


@pytest.mark.parametrize("share", [1.0, pytest.param(0.5, marks=pytest.mark.slow)])  # in turns, on partial batches
def test_every_branches_g_siblings_from_each_trunk_state_and_stores_the_tree(pool, tmp_path, share):
    store = Store.open(tmp_path / "run")
    run = store.create_run("branch")
    reqs = make_groups(["settings_dark_theme", "open_app"], [7, 8], 1, tag="t")
    res = run_branched(pool, OraclePolicy(), reqs, BranchSettings("every"), group_size=3, store=store,
                       run_id=run, min_batch_share=share)
    trunks = [t for t in res.trajectories if t.metadata.get("branch_of", "") == ""]
    branches = [t for t in res.trajectories if t.metadata.get("branch_of")]
    assert len(trunks) == 2 and all(t.status == "completed" and t.success == 1.0 for t in trunks)
    by_id = {t.episode_id: t for t in trunks}
    # one group of 3 per trunk step, each starting from the trunk's screen before that step
    assert len(branches) == 3 * sum(len(t.steps) for t in trunks)
    for b in branches:
        trunk = by_id[b.metadata["branch_of"]]
        k = b.metadata["branch_step"]
        assert b.group_id == f"{reqs[0 if trunk.task.task_id == 'settings_dark_theme' else 1].group_id}@{k}"
        assert b.steps[0].observation.screenshot == trunk.steps[k].observation.screenshot
        assert len(b.steps) == len(trunk.steps) - k and b.success == 1.0  # the oracle finishes from anywhere
    # the learner gets the branches' turns only (the oracle has none), and every env step is counted
    assert res.env_steps == sum(len(t.steps) for t in res.trajectories)
    # the tree is in the store: each branch names its trunk and its step
    store.close()
    stored = StoreReader(tmp_path / "run").list_episodes(EpisodeFilter(run_id=run), limit=500).items
    assert len(stored) == len(res.trajectories)
    kids = [e for e in stored if e.metadata.get("branch_of") in by_id]
    assert len(kids) == len(branches) and {e.metadata["branch_step"] for e in kids} == {0, 1, 2}


def test_a_branch_prompt_equals_the_plain_rollout_prompt_for_the_same_history(pool):
    """A branch continues its trunk's step numbering: each of its turns sees the history a plain
    rollout would show for the same steps ("Step 1", "Step 2", ... with no restart at the branch)."""
    import dataclasses

    from grounding import get_format
    from rl.prompting import build_chat

    fmt = get_format("json")

    class Recording(OraclePolicy):
        """The oracle, least certain at the trunk's second step (where --branch-at uncertain branches)."""

        def __init__(self):
            self.seen = []

        def act_batch(self, contexts, p):
            self.seen += [(c.key, [s.index for s in c.history],
                           [part["text"] for part in build_chat(c.spec.goal, c.history, c.observation, fmt)[1]["content"]
                            if part["type"] == "text"]) for c in contexts]
            return [dataclasses.replace(t, logprobs=(-5.0,) if len(c.history) == 1 else (-0.1,))
                    for c, t in zip(contexts, super().act_batch(contexts, p))]

    policy = Recording()
    res = run_branched(pool, policy, make_groups(["settings_dark_theme"], [7], 1, tag="n"),
                       BranchSettings("uncertain", branch_points=1), group_size=1)
    [trunk] = [t for t in res.trajectories if t.group_id is None]
    [branch] = [t for t in res.trajectories if t.metadata.get("branch_of")]
    assert len(trunk.steps) == 3 and branch.metadata["branch_step"] == 1 and len(branch.steps) == 2
    trunk_turns = {len(idx): text for key, idx, text in policy.seen if ":trunk" in key}
    branch_turns = [(idx, text) for key, idx, text in policy.seen if ":trunk" not in key]
    assert [len(idx) for idx, _ in branch_turns] == [1, 2]  # the second holds the branch's own first step
    for idx, text in branch_turns:
        assert idx == list(range(len(idx)))  # numbered on from the trunk's steps
        assert text == trunk_turns[len(idx)]  # the oracle takes the trunk's actions: the very same prompt
    # the stored branch keeps its own step indices (from 0) and names the trunk step it starts at
    assert [s.index for s in branch.steps] == [0, 1]


def test_first_restores_one_captured_start_per_group(pool):
    reqs = make_groups(["settings_turn_on"], [3], 1, tag="f")
    res = run_branched(pool, RandomPolicy(0), reqs, BranchSettings("first"), group_size=4)
    assert len(res.trajectories) == 4 and {t.group_id for t in res.trajectories} == {reqs[0].group_id + "@0"}
    shots = {t.steps[0].observation.screenshot for t in res.trajectories}
    assert len(shots) == 1 and all(t.metadata["branch_of"] is None for t in res.trajectories)


def test_no_state_to_branch_from_is_one_clear_error():
    class NoSnapshots(InProcessPool):
        def snapshot(self, slots):
            from emulators.pool_types import SnapshotOutput
            return [SnapshotOutput(s, error="this env cannot snapshot") for s in slots]

    p = NoSnapshots("webapps", num_slots=1)
    try:
        with pytest.raises(BranchError, match="cannot snapshot"):
            run_branched(p, RandomPolicy(0), make_groups(["go_home"], [1], 1), BranchSettings("first"), group_size=2)
    finally:
        p.close()


def test_config_refuses_branching_where_it_cannot_apply():
    assert TrainConfig.build(branch_at="uncertain", branch_points=2, algo="gigpo", model="m").branch.branch_points == 2
    with pytest.raises(ValueError, match="--algo awr has none"):
        TrainConfig.build(branch_at="every", algo="awr", model="m")
    with pytest.raises(ValueError, match="replays recorded ones"):
        TrainConfig.build(branch_at="every", mode="semi-online", data=["x"], model="m")
    # a staged run replays in its first stage: refused, also where it is what --mode auto became (no
    # --model), and on the embedded default of a suite whose recipe is staged
    with pytest.raises(ValueError, match=r"^TrainConfig: --branch-at branches live episodes; --mode staged replays"):
        TrainConfig.build(branch_at="first", mode="staged", data=["x"], model="m")
    with pytest.raises(ValueError, match=r"--mode staged \(--mode auto, without --model\) replays .*--mode online$"):
        TrainConfig.build(branch_at="every")
    from guiagent.cli.train import parse_args

    with pytest.raises(ValueError, match="--branch-at branches live episodes; --mode staged"):
        parse_args(["--env", "miniwob", "--branch-at", "every"])
    assert TrainConfig.build(branch_at="every", mode="online").mode == "online"  # the warm start, then online
    with pytest.raises(ValueError, match="--branch-points"):
        TrainConfig.build(branch_at="uncertain", branch_points=0)


@pytest.mark.parametrize("algo", ["dr_grpo", pytest.param("gigpo", marks=pytest.mark.slow)])
def test_the_trainer_learns_from_branches(tiny_model_dir, tmp_path, algo):
    from rl.trainer import train

    out = tmp_path / "run"
    result = train(TrainConfig.build(model=tiny_model_dir, tasks=("settings_dark_theme",), iterations=1, algo=algo,
                                     groups_per_iteration=1, group_size=2, slots=2, pool="inprocess", max_new_tokens=8,
                                     eval_episodes=0, filter_zero_variance=False, branch_at="every", horizon_schedule="0:2",
                                     out=str(out), seed=1))
    reader = StoreReader(out)
    [run] = reader.list_runs()
    eps = reader.list_episodes(EpisodeFilter(run_id=run.run_id), limit=50).items
    trunks = [e for e in eps if e.group_id.endswith(":trunk")]
    kids = [e for e in eps if e.metadata.get("branch_of")]
    assert len(trunks) == 1 and trunks[0].num_steps >= 1
    # G branches from each of the trunk's states up to its first unparseable reply, a group each
    steps = reader.get_episode(trunks[0].episode_id).steps
    points = next((i + 1 for i, st in enumerate(steps) if st.parse_error is not None), len(steps))
    assert len(kids) == 2 * points and len({e.group_id for e in kids}) == points
    assert sorted({e.metadata["branch_step"] for e in kids}) == list(range(points))
    assert result.last["groups"] == points
    # the trunk's steps are env steps too: what --max-env-steps counts
    assert result.env_steps == sum(e.num_steps for e in eps) == result.last["env_steps_total"]


def test_an_env_step_budget_ends_the_run_after_the_iteration_that_reaches_it(tiny_model_dir, tmp_path):
    from rl.trainer import train

    out = tmp_path / "run"
    result = train(TrainConfig.build(model=tiny_model_dir, tasks=("settings_dark_theme",), iterations=4,
                                     max_env_steps=1, groups_per_iteration=1, group_size=2, slots=2, pool="inprocess",
                                     max_new_tokens=8, eval_episodes=0, filter_zero_variance=False,
                                     horizon_schedule="0:2", out=str(out), seed=1))
    assert result.iterations == 1 and result.budget_reached and result.stopped_by is None
    reader = StoreReader(out)
    [run] = reader.list_runs()
    eps = reader.list_episodes(EpisodeFilter(run_id=run.run_id), limit=50).items
    assert result.env_steps == sum(e.num_steps for e in eps) >= 2 == len(eps)
    assert json.loads((out / "checkpoint" / "trainer_state.json").read_text())["state"]["env_steps"] == result.env_steps
    with pytest.raises(ValueError, match="--max-env-steps"):
        TrainConfig.build(max_env_steps=-1)


@pytest.mark.ray
@pytest.mark.slow  # ~11 s (the suite's 12-minute budget)
def test_branches_cross_ray_workers_and_a_killed_worker_loses_only_its_branches(tmp_path):
    """A state captured in one worker process is restored in another (states are plain data); a
    worker killed while it holds branches aborts those and the rest of the round goes on."""
    import os
    import signal

    from emulators.pool import RayEnvPool

    pool = RayEnvPool("webapps", num_workers=2, envs_per_worker=1, step_timeout_s=30)
    try:
        pool.reset([ResetRequest(0, "settings_dark_theme", 4)])
        pool.step([ActionRequest(0, pool.oracle_actions([0])[0])])
        snap = pool.snapshot([0])[0]
        assert snap.error is None and snap.worker_id == 0
        got = pool.reset([ResetRequest(1, "settings_dark_theme", 4, state=snap.state)])[0]
        assert got.worker_id == 1 and got.observation.screenshot == snap.state.observation.screenshot

        class Killing(OraclePolicy):
            calls = 0

            def act_batch(self, contexts, p):
                Killing.calls += 1
                if Killing.calls == 4:  # the first branches' turn: worker 1 holds one of them
                    os.kill(pool.worker_pids()[1], signal.SIGKILL)
                return super().act_batch(contexts, p)

        res = run_branched(pool, Killing(), make_groups(["settings_dark_theme"], [5], 1), BranchSettings("every"),
                           group_size=2)
        aborted = [t for t in res.trajectories if t.status == "aborted"]
        assert aborted and all("worker died" in t.abort_reason for t in aborted)
        assert len(res.trajectories) == 1 + 2 * 3  # the trunk and every branch accounted for
    finally:
        pool.close()
