"""The rollout driver on a real in-process pool (real Chromium, real app server, real SQLite store)."""

import pytest

from emulators.pool import InProcessPool
from guiagent.store import EpisodeFilter, Store, StoreReader
from guiagent.types import ParseError, Wait
from judge.compose import RewardConfig, combine
from rl.agents import OraclePolicy, RandomPolicy, load_agent
from rl.rollout import make_groups, run_rollout

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def pool():
    p = InProcessPool("webapps", num_slots=2)
    yield p
    p.close()


def test_oracle_groups_are_solved_and_stored(pool, tmp_path):
    store = Store.open(tmp_path)
    run = store.create_run("t", env="webapps")
    reqs = make_groups(["open_app", "settings_turn_on"], [3, 4], group_size=2)
    res = run_rollout(pool, OraclePolicy(), reqs, store=store, run_id=run, suite="webapps",
                      rewards=RewardConfig(progress=1.0))
    store.close()
    assert len(res.trajectories) == 4 and res.aborted == 0
    assert all(t.success == 1.0 and t.status == "completed" for t in res.trajectories)
    # a group shares task and seed, hence the goal
    by_group = {}
    for t in res.trajectories:
        by_group.setdefault(t.group_id, set()).add((t.task.task_id, t.task.seed, t.task.goal))
    assert len(by_group) == 2 and all(len(v) == 1 for v in by_group.values())
    # every step carries its reward parts; the task reward lands on the last step only
    for t in res.trajectories:
        assert [s.reward_parts["task"] for s in t.steps][-1] == 1.0
        assert sum(s.reward_parts["task"] for s in t.steps[:-1]) == 0.0
        # potential-based shaping telescopes to -Φ(s0) on a terminated episode
        assert sum(s.reward_parts["progress"] for s in t.steps) == pytest.approx(0.0, abs=1e-9)
    reader = StoreReader(tmp_path)
    assert reader.count_episodes(EpisodeFilter(run_id=run)) == 4
    back = reader.load_trajectory(res.trajectories[0].episode_id)
    assert back.steps == res.trajectories[0].steps
    assert res.env_steps == sum(t.num_steps for t in res.trajectories)


def test_random_policy_hits_step_budget_and_keeps_slots_busy(pool):
    reqs = make_groups(["open_app"] * 3, [1, 2, 3], group_size=1, max_steps=2)
    res = run_rollout(pool, RandomPolicy(seed=0), reqs)
    assert len(res.trajectories) == 3
    assert all(t.num_steps <= 2 for t in res.trajectories)
    assert all(s.truncated or s.terminated for t in res.trajectories for s in t.steps[-1:])


class _Counting:
    """The pool, with its batch calls counted by kind (each is one wait for the slowest slot)."""

    def __init__(self, pool):
        self.pool, self.num_slots, self.calls = pool, pool.num_slots, []

    def reset(self, requests):
        self.calls.append(("reset", len(requests)))
        return self.pool.reset(requests)

    def step(self, requests):
        self.calls.append(("step", len(requests)))
        return self.pool.step(requests)

    def step_and_reset(self, steps, resets):
        self.calls.append(("step_and_reset", len(steps), len(resets)))
        return self.pool.step_and_reset(steps, resets)

    def __getattr__(self, name):
        return getattr(self.pool, name)


def test_freed_slots_start_in_the_batch_of_the_others_step(pool, tmp_path):
    # 2 slots, 6 episodes: after the first start, each episode starts in the batch in which the other
    # slot steps, so no batch waits on resets alone while an episode is running
    counting = _Counting(pool)
    store = Store.open(tmp_path)
    run = store.create_run("t", env="webapps")
    # the oracle solves each in 2 steps; the first is cut after 1, so that the slots end apart from then on
    reqs = make_groups(["open_app"], [7], group_size=1, max_steps=1)
    reqs += make_groups(["settings_turn_on", "go_home", "open_app", "settings_open_section", "go_home"],
                        [8, 9, 10, 11, 12], group_size=1)
    res = run_rollout(counting, OraclePolicy(), reqs, store=store, run_id=run, suite="webapps")
    store.close()
    assert len(res.trajectories) == 6 and res.aborted == 0
    assert all(t.success == 1.0 for t in res.trajectories)  # open_app is done at the tap, before the finish
    assert sorted(t.num_steps for t in res.trajectories) == [1, 2, 2, 2, 2, 2]
    assert sorted((t.task.task_id, t.task.seed) for t in res.trajectories) == \
        sorted((r.task_id, r.seed) for r in reqs)
    assert counting.calls[0] == ("reset", 2)
    mixed = [c for c in counting.calls if c[0] == "step_and_reset"]
    assert mixed == [("step_and_reset", 1, 1)] * 4
    assert [c for c in counting.calls if c[0] == "reset"] == [("reset", 2)]  # no reset batch of its own
    assert res.env_steps == sum(t.num_steps for t in res.trajectories)
    reader = StoreReader(tmp_path)
    assert reader.count_episodes(EpisodeFilter(run_id=run)) == 6


def test_a_pool_without_step_and_reset_starts_freed_slots_right_after_the_step(pool):
    # such a pool (a project's own EnvPool) gets the step, then the freed slots' resets, in the same turn
    class Plain(_Counting):
        step_and_reset = None

    plain = Plain(pool)
    reqs = make_groups(["open_app"], [7], group_size=1, max_steps=1)
    reqs += make_groups(["settings_turn_on", "go_home", "open_app"], [8, 9, 10], group_size=1)
    res = run_rollout(plain, OraclePolicy(), reqs)
    assert len(res.trajectories) == 4 and res.aborted == 0
    assert [c[0] for c in plain.calls[:4]] == ["reset", "step", "reset", "step"]  # slot 0 restarts at once
    assert plain.calls[2] == ("reset", 1)


class _OneSlowEpisode(OraclePolicy):
    """The oracle, except that the episode of seed ``slow`` waits every turn (a slow gesture's
    stand-in); each act_batch call records its episodes' seeds."""

    def __init__(self, slow: int, seconds: float):
        self.slow, self.seconds, self.calls = slow, seconds, []

    def act_batch(self, contexts, pool):
        from rl.agents import _scripted
        self.calls.append(sorted(c.spec.seed for c in contexts))
        others = [c for c in contexts if c.spec.seed != self.slow]
        it = iter(super().act_batch(others, pool) if others else [])
        return [_scripted(Wait(self.seconds)) if c.spec.seed == self.slow else next(it) for c in contexts]


def test_a_loop_on_partial_batches_acts_on_the_slots_that_are_back(pool, tmp_path):
    # one episode waits 1 s a turn for 2 turns; on partial batches the other slot solves episodes
    # meanwhile, each stored whole; with a turn's barrier every turn waits for the slow one
    store = Store.open(tmp_path)
    runs = {}
    for share in (1.0, 0.5):
        run = store.create_run(f"t{share}", env="webapps")
        policy = _OneSlowEpisode(30, 1.0)
        reqs = make_groups(["open_app"], [30], group_size=1, max_steps=2)
        reqs += make_groups(["settings_turn_on", "go_home", "open_app"], [31, 32, 33], group_size=1)
        res = run_rollout(pool, policy, reqs, store=store, run_id=run, suite="webapps", min_batch_share=share)
        runs[share] = (res, policy.calls, run)
    store.close()
    reader = StoreReader(tmp_path)
    for share, (res, calls, run) in runs.items():
        assert len(res.trajectories) == 4 and res.aborted == 0
        by_seed = {t.task.seed: t for t in res.trajectories}
        assert by_seed[30].num_steps == 2 and by_seed[30].steps[-1].truncated  # the waiting episode, cut at 2
        assert all(by_seed[s].success == 1.0 for s in (31, 32, 33))
        assert res.env_steps == sum(t.num_steps for t in res.trajectories)
        assert reader.count_episodes(EpisodeFilter(run_id=run)) == 4
        for t in res.trajectories:
            assert reader.load_trajectory(t.episode_id).steps == t.steps
            assert [s.index for s in t.steps] == list(range(t.num_steps))

    def alone_while_slow(calls):  # turns taken without the slow episode before its last turn
        last = max(i for i, c in enumerate(calls) if 30 in c)
        return sum(30 not in c for c in calls[:last])
    # the barrier: every turn holds the slow episode while it lives; partial: the other slot goes on alone
    assert alone_while_slow(runs[1.0][1]) == 0 and all(len(c) == 2 for c in runs[1.0][1][:2])
    assert alone_while_slow(runs[0.5][1]) >= 2, runs[0.5][1]


def test_a_policy_that_fails_on_partial_batches_leaves_the_pool_free(pool):
    class Failing(_OneSlowEpisode):
        def act_batch(self, contexts, pool):
            if self.calls and all(c.spec.seed != self.slow for c in contexts):  # the slow step is in flight
                raise RuntimeError("the policy server went away")
            return super().act_batch(contexts, pool)

    reqs = make_groups(["open_app", "settings_turn_on"], [40, 41], group_size=1)
    with pytest.raises(RuntimeError, match="went away"):
        run_rollout(pool, Failing(40, 0.5), reqs, min_batch_share=0.5)
    assert pool.in_flight == []  # the slow step in flight ended before the error went up
    res = run_rollout(pool, OraclePolicy(), make_groups(["open_app"], [42], group_size=1), min_batch_share=0.5)
    assert len(res.trajectories) == 1 and res.trajectories[0].success == 1.0


def test_a_pool_without_submit_takes_turns_and_says_so_once(pool, caplog):
    import rl.loop

    class Whole(_Counting):  # a pool that hands back whole batches only (as MixedPool does)
        submit = None

    rl.loop._TURNS_NOTED.discard("Whole")
    whole = Whole(pool)
    for seed in (50, 51):
        res = run_rollout(whole, OraclePolicy(), make_groups(["open_app"], [seed], group_size=2), min_batch_share=0.5)
        assert len(res.trajectories) == 2 and all(t.success == 1.0 for t in res.trajectories)
    assert any(c[0] == "step_and_reset" or c[0] == "step" for c in whole.calls)  # turns, as without the option
    notes = [r.getMessage() for r in caplog.records if "takes turns" in r.getMessage()]
    assert len(notes) == 1 and "a Whole hands back whole batches only" in notes[0]


def test_the_loop_refuses_a_share_outside_0_to_1(pool):
    for bad in (0.0, -1.0, 1.5):
        with pytest.raises(ValueError, match="min_batch_share"):
            run_rollout(pool, OraclePolicy(), [], min_batch_share=bad)


def test_requests_whose_starts_fail_are_all_recorded_aborted():
    # no browser to start: every start fails (and its retry), none is dropped
    with InProcessPool("webapps", num_slots=2, device_options={"chromium_path": "/nonexistent/chromium"}) as dead:
        reqs = make_groups(["open_app"] * 3, [1, 2, 3], group_size=1)
        res = run_rollout(dead, RandomPolicy(seed=0), reqs)
    assert len(res.trajectories) == 3 and res.aborted == 3
    assert all(t.status == "aborted" and "reset failed" in t.abort_reason for t in res.trajectories)


def test_model_agent_turns_carry_tokens_and_logprobs(pool, tiny_model_dir):
    policy = load_agent(tiny_model_dir, temperature=1.0, max_new_tokens=12, keep_chats=True)
    reqs = make_groups(["go_home"], [5], group_size=2, max_steps=2)
    res = run_rollout(pool, policy, reqs)
    assert len(res.trajectories) == 2
    assert res.turns, "a model's turns are kept for the learner"
    for u in res.turns:
        assert len(u.completion_ids) == len(u.old_logprobs) > 0
        assert u.prompt is not None
    steps = [s for t in res.trajectories for s in t.steps]
    # an untrained model's text rarely parses: a typed error and a penalty, never a crash
    for s in steps:
        if s.parse_error is not None:
            assert isinstance(s.parse_error, ParseError) and s.reward_parts["parse"] < 0


def test_replies_set_aside_are_stored_with_the_step_and_counted(pool, tiny_model_dir, tmp_path):
    from rl.metrics import rollout_metrics

    policy = load_agent(tiny_model_dir, temperature=1.0, max_new_tokens=10, keep_chats=True, resample_unparseable=2)
    policy.seed = 4
    store = Store.open(tmp_path)
    run = store.create_run("t", env="webapps")
    res = run_rollout(pool, policy, make_groups(["go_home"], [5], group_size=2, max_steps=2, tag="r"),
                      store=store, run_id=run, suite="webapps")
    store.close()
    steps = [s for t in res.trajectories for s in t.steps]
    redrawn = [s for s in steps if s.metadata.get("rejected_replies")]
    assert redrawn, "an untrained model's replies rarely parse: some were drawn again"
    for s in redrawn:  # at most the budget set aside; a step still unparseable used it all
        assert 1 <= len(s.metadata["rejected_replies"]) <= 2
        assert s.parse_error is None or len(s.metadata["rejected_replies"]) == 2
    assert rollout_metrics(res)["resampled_rate"] == pytest.approx(len(redrawn) / len(steps))
    reader = StoreReader(tmp_path)
    for t in res.trajectories:
        assert reader.load_trajectory(t.episode_id).steps == t.steps
    # the learner gets the reply each step acted on: parseable exactly when the step's reply parsed
    acted = {(t.episode_id, s.index): s.parse_error is None for t in res.trajectories for s in t.steps}
    assert len(res.turns) == len(steps)
    assert all(u.parse_ok == acted[(u.episode_id, u.step_index)] for u in res.turns)


def test_seeded_replies_do_not_depend_on_batching_or_order(pool, tiny_model_dir):
    """Each turn samples from its own stream (seed, episode key, turn): the same requests run in
    another order — other batches, other slots — give every episode the same replies."""
    policy = load_agent(tiny_model_dir, temperature=1.0, max_new_tokens=10)
    reqs = make_groups(["go_home", "open_app"], [5, 6], group_size=3, max_steps=2, tag="t")

    def replies(requests, seed):
        policy.seed = seed
        res = run_rollout(pool, policy, requests)
        return {(t.group_id, t.metadata["member"]): tuple(s.response for s in t.steps) for t in res.trajectories}

    a, b = replies(reqs, 7), replies(reqs[::-1], 7)
    assert len(a) == 6 and a == b
    assert replies(reqs, 8) != a
    assert len(set(a.values())) > 1  # the members of a group sample differently


# -- the judge in the rollout ------------------------------------------------------------------------
# A real OpenAI-compatible judge server on 127.0.0.1 (tests/judge/judge_server.py) whose served model
# name picks its behaviour: a fixed verdict, garbage, HTTP 429, or an answer after the timeout.


@pytest.fixture(scope="module")
def judge_server(tiny_model_dir):
    from guiagent.policy.hf import load_transformers
    from tests.judge.judge_server import start_judge_server

    srv, _ = start_judge_server(load_transformers(tiny_model_dir, device="cpu"))
    yield srv
    srv.shutdown()
    srv.server_close()


def _judge(srv, monkeypatch, tmp_path, served, **kw):
    from judge.settings import JudgeSettings, make_judge
    from tests.judge.judge_server import API_KEY

    monkeypatch.setenv("GUIAGENT_JUDGE_KEY", API_KEY)
    kw.setdefault("weight", 0.5)
    settings = JudgeSettings(model=srv.url, served_model=served, api_key_env="GUIAGENT_JUDGE_KEY", retries=0,
                             timeout=kw.pop("timeout", 5.0), **kw)
    return make_judge(settings, tmp_path)


def _stored(tmp_path, episode_id):
    reader = StoreReader(tmp_path)
    try:
        return reader.load_trajectory(episode_id, pixels=False), reader.judgements(episode_id)
    finally:
        reader.close()


def _judged_oracle_rollout(pool, run_dir, judge, *, seed: int, group_size: int):
    """One group of oracle ``go_home`` episodes judged inside the rollout, stored in ``run_dir``."""
    store = Store.open(run_dir)
    run = store.create_run("judged", env="webapps")
    try:
        return run_rollout(pool, OraclePolicy(), make_groups(["go_home"], [seed], group_size=group_size),
                           store=store, run_id=run, suite="webapps", judge=judge)
    finally:
        store.close()
        judge.close()


def test_judge_score_enters_the_last_steps_reward_parts_before_it_is_stored(pool, tmp_path, judge_server,
                                                                          monkeypatch):
    judge = _judge(judge_server, monkeypatch, tmp_path, "verdict-success", weight=0.5)
    res = _judged_oracle_rollout(pool, tmp_path, judge, seed=7, group_size=3)
    assert len(res.trajectories) == 3 and res.judge_missing == 0 and len(res.verdicts) == 3
    for t in res.trajectories:
        last = t.steps[-1]
        assert last.reward_parts["judge"] == pytest.approx(0.9)
        assert last.reward == pytest.approx(last.reward_parts["task"] + 0.5 * 0.9)
        assert all("judge" not in s.reward_parts for s in t.steps[:-1])
        # one source of truth: what the store holds is what the learner reads
        back, judgements = _stored(tmp_path, t.episode_id)
        assert back.steps[-1].reward_parts == last.reward_parts
        assert back.total_reward == pytest.approx(t.total_reward)
        [j] = judgements
        assert j.score == pytest.approx(0.9) and j.reason == "the switch shows On } as asked"
        assert j.verdict["rule_success"] == t.success == 1.0 and j.verdict["missing"] == ""
        assert j.verdict["weight"] == 0.5 and j.verdict["mode"] == "reward"
    # the learner's turns carry the same final reward (the oracle has none; a model policy would)
    assert judge_server.judge_calls["verdict-success"] >= 1


@pytest.mark.parametrize("served, kind, extra", [
    ("garbage", "garbage", {}),
    ("ratelimit", "rate_limit", {}),
    ("hang", "timeout", {"timeout": 0.5}),
    ("verdict-success", "budget", {"budget": 0}),
])
def test_a_missing_verdict_is_recorded_and_the_episode_keeps_its_rule_reward(pool, tmp_path, judge_server,
                                                                            monkeypatch, served, kind, extra):
    judge = _judge(judge_server, monkeypatch, tmp_path, served, **extra)
    res = _judged_oracle_rollout(pool, tmp_path, judge, seed=8, group_size=2)
    assert len(res.trajectories) == 2 and res.aborted == 0
    assert res.judge_missing == 2 and res.judge_missing_reasons == {kind: 2}
    for t in res.trajectories:
        assert all("judge" not in s.reward_parts for s in t.steps)
        # the rule reward, unchanged: each step's reward is its rule parts combined, the task's 1 at the end
        rule = [combine(s.reward_parts, RewardConfig()) for s in t.steps]
        assert [s.reward for s in t.steps] == pytest.approx(rule)
        assert t.steps[-1].reward_parts["task"] == 1.0 and t.total_reward == pytest.approx(1.0 + sum(
            s.reward_parts["parse"] + s.reward_parts["invalid"] for s in t.steps))
        back, [j] = _stored(tmp_path, t.episode_id)
        assert back.total_reward == pytest.approx(t.total_reward)
        assert j.score is None and j.reason.startswith(f"judge missing ({kind})")
        assert j.verdict["missing"] == kind and j.verdict["rule_success"] == 1.0


def test_log_mode_stores_verdicts_without_a_reward_part(pool, tmp_path, judge_server, monkeypatch):
    judge = _judge(judge_server, monkeypatch, tmp_path, "verdict-failure", weight=0.0, mode="log")
    res = run_rollout(pool, OraclePolicy(), make_groups(["go_home"], [9], group_size=2), judge=judge)
    judge.close()
    from judge.calibration import judge_metrics, rollout_judge_metrics

    assert all("judge" not in s.reward_parts for t in res.trajectories for s in t.steps)
    assert [v.success for v in res.verdicts.values()] == [False, False]
    # the oracle succeeded, the judge says failure: agreement 0, no judge positives (precision undefined)
    m = judge_metrics(res.verdicts, {t.episode_id: t.success for t in res.trajectories}, res.judge_missing)
    assert rollout_judge_metrics(res) == m
    assert m == {"judge/missing": 0.0, "judge/judged": 2.0, "judge/agreement": 0.0, "judge/recall": 0.0,
                 "judge/kappa": 0.0}  # p_o = 0 = p_e: no better than chance


def test_learner_turns_and_advantages_read_the_judged_rewards(pool, tiny_model_dir, judge_server, monkeypatch,
                                                              tmp_path):
    from rl.config import TrainConfig
    from rl.strategies import make_strategy

    judge = _judge(judge_server, monkeypatch, tmp_path, "verdict-success", weight=0.5)
    policy = load_agent(tiny_model_dir, temperature=1.0, max_new_tokens=8, keep_chats=True)
    try:
        res = run_rollout(pool, policy, make_groups(["go_home"], [6], group_size=2, max_steps=1), judge=judge)
    finally:
        judge.close()
    assert len(res.turns) == 2 and res.judge_missing == 0
    for t in res.trajectories:
        [turn] = [u for u in res.turns if u.episode_id == t.episode_id]
        assert t.steps[-1].reward_parts["judge"] == pytest.approx(0.9)
        assert res.reward_of(turn) == t.steps[-1].reward == pytest.approx(t.total_reward)
    # the trainer's advantages, given no extra reward, see the judge's part through the stored rewards
    turns, adv, _ = make_strategy(TrainConfig.build(filter_zero_variance=False), ".", None).batch(res, None, 0)
    assert len(turns) == 2 and adv.shape == (2,)


@pytest.mark.slow  # a tiny model's iteration; the loop itself is tested above in the fast suite
def test_the_trainer_runs_its_rollouts_on_partial_batches(tiny_model_dir, tmp_path, monkeypatch):
    from rl.config import TrainConfig
    from rl.loop import RolloutLoop
    from rl.trainer import train

    shares = []
    original = RolloutLoop.run_partial

    def spy(self):
        shares.append(self.min_batch_share)
        return original(self)
    monkeypatch.setattr(RolloutLoop, "run_partial", spy)
    out = tmp_path / "run"
    result = train(TrainConfig.build(model=tiny_model_dir, tasks=("settings_dark_theme",), iterations=1,
                                     groups_per_iteration=2, group_size=2, slots=2, pool="inprocess",
                                     max_new_tokens=8, eval_episodes=0, filter_zero_variance=False,
                                     horizon_schedule="0:2", min_batch_share=0.5, out=str(out), seed=1))
    assert shares == [0.5] and result.iterations == 1
    reader = StoreReader(out)
    [run] = reader.list_runs()
    eps = reader.list_episodes(EpisodeFilter(run_id=run.run_id), limit=50).items
    assert len(eps) == 4 and result.env_steps == sum(e.num_steps for e in eps)
    assert all(e.status == "completed" for e in eps)
