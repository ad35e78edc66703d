"""Potential-based progress shaping and reward composition.

Hand-computed cases, plus Hypothesis properties: shaping telescopes to −Φ(s_0) at the
end of every episode (terminated or truncated), a successful Finish never earns less
than running out of steps at the same milestones, and on small random MDPs shaping
leaves the ranking of every deterministic policy unchanged (Ng, Harada & Russell 1999).
"""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judge.compose import OnlineRewarder, RewardConfig, combine, episode_rewards, reward_weights, step_parts
from judge.progress import potential, shaping_rewards


@pytest.mark.parametrize("ms, ordered, want", [
    ([], False, 0.0), ([True, False, True, False], False, 0.5), ([True, False, True, False], True, 0.25),
    ([True, True], True, 1.0), ([False, True], True, 0.0),
])
def test_potential(ms, ordered, want):
    assert potential(ms, ordered=ordered) == want


def test_shaping_telescopes_to_minus_initial_potential():
    # 3 steps; start with one of 4 milestones reached.
    states = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    f = shaping_rewards(states, gamma=1.0)
    assert f == pytest.approx([0.25, 0.0, -0.5])
    assert sum(f) == pytest.approx(-0.25)  # = -Φ(s0): independent of the path taken
    other = shaping_rewards([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    assert sum(other) == pytest.approx(-0.25)


def test_shaping_with_discount_hand_computed():
    # Φ: 0, 0.5, (end) 0 -> F = [0.9*0.5 - 0, 0.9*0 - 0.5]
    f = shaping_rewards([[0, 0], [1, 0], [1, 1]], gamma=0.9)
    assert f == pytest.approx([0.45, -0.5])


def test_a_truncated_episode_does_not_keep_its_last_potential():
    # one step reaching half the milestones, then out of steps: the half is not paid for
    assert shaping_rewards([[0, 0], [1, 0]]) == pytest.approx([0.0])


def test_a_critic_bootstrap_potential_replaces_the_end_potential():
    assert shaping_rewards([[0, 0], [1, 0]], bootstrap_potential=0.5) == pytest.approx([0.5])
    assert shaping_rewards([[1, 1]]) == []  # no steps, nothing to shape


def test_combine_and_episode_rewards():
    cfg = RewardConfig(task=1.0, progress=0.5, parse_penalty=-0.2, invalid_penalty=-0.1, step_penalty=-0.01)
    parts = step_parts(task=1.0, progress=0.5, parse_failed=True, cfg=cfg)
    assert parts == {"task": 1.0, "progress": 0.5, "parse": -0.2, "invalid": 0.0, "step": -0.01}
    assert combine(parts, cfg) == pytest.approx(1.0 + 0.25 - 0.2 - 0.01)
    out = episode_rewards(final_success=1.0, milestones_per_state=[[0, 0], [1, 0], [1, 1]],
                          parse_failed=[True, False], action_invalid=[False, True], terminated=True, cfg=cfg)
    assert [p["task"] for _, p in out] == [0.0, 1.0]
    assert out[0][0] == pytest.approx(0.5 * 0.5 - 0.2 - 0.01)
    assert out[1][0] == pytest.approx(1.0 + 0.5 * (0.0 - 0.5) - 0.1 - 0.01)
    judged = episode_rewards(final_success=0.0, milestones_per_state=[[0], [0]], parse_failed=[False],
                             action_invalid=[False], cfg=RewardConfig(judge=0.5), judge_score=0.8)
    assert judged == [(pytest.approx(0.4), {"task": 0.0, "progress": 0.0, "parse": -0.1 * 0, "invalid": 0.0,
                                            "step": 0.0, "judge": 0.8})]


@pytest.mark.parametrize("kwargs, message", [
    ({"parse_penalty": 0.5}, "penalties"), ({"progress_terminal_zero": False}, "stalling"),
    ({"progress_gamma": 0.0}, "progress_gamma"),
])
def test_reward_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RewardConfig(**kwargs)


def test_online_rewarder_matches_whole_episode_terminated_and_truncated():
    cfg = RewardConfig(progress=1.0, parse_penalty=-0.2, invalid_penalty=-0.1)
    ms = [[0, 0, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1]]
    parse = [False, True, False]
    inval = [True, False, False]
    for terminated in (True, False):
        whole = episode_rewards(final_success=1.0, milestones_per_state=ms, parse_failed=parse,
                                action_invalid=inval, terminated=terminated, cfg=cfg)
        rw = OnlineRewarder(cfg, ms[0])
        online = [rw.step(task_reward=1.0 if t == 2 else 0.0, milestones=ms[t + 1],
                          terminated=terminated and t == 2, truncated=not terminated and t == 2,
                          parse_failed=parse[t], action_invalid=inval[t])
                  for t in range(3)]
        assert [r for r, _ in online] == pytest.approx([r for r, _ in whole])
        assert [p for _, p in online] == [p for _, p in whole]


@pytest.mark.parametrize("config, want", [
    (None, {"task": 1.0, "progress": 0.0, "judge": 0.0, "parse": 1.0, "invalid": 1.0, "step": 1.0}),
    ({"rewards": {"task": 2, "progress": 0.5}}, {"task": 2.0, "progress": 0.5, "judge": 0.0}),
    ({"rewards": {"judge": 0.3}}, {"judge": 0.3}),
    ({"rewards": {}, "judge": {"model": "http://x/v1", "weight": 0.7, "mode": "reward"}}, {"judge": 0.7}),
    ({"rewards": {"judge": 0.3}, "judge": {"model": "m", "weight": 0.7, "mode": "log"}}, {"judge": 0.0}),
    ({"rewards": {"task": "bad"}, "judge": {"model": None, "weight": 0.7}}, {"task": 1.0, "judge": 0.0}),
    ({"rewards": [1, 2]}, {"task": 1.0}),
])
def test_reward_weights_from_a_stored_config(config, want):
    got = reward_weights(config)
    assert {k: got[k] for k in want} == want


# -- properties ------------------------------------------------------------------------------------

milestone_runs = st.integers(1, 4).flatmap(
    lambda m: st.lists(st.lists(st.booleans(), min_size=m, max_size=m), min_size=2, max_size=9))


@settings(max_examples=200, deadline=None)
@given(milestone_runs, st.floats(0.01, 1.0), st.booleans())
def test_shaping_telescopes_to_minus_phi0_for_any_episode(ms, gamma, ordered):
    f = shaping_rewards(ms, gamma=gamma, ordered=ordered)
    discounted = sum(gamma ** t * x for t, x in enumerate(f))
    assert discounted == pytest.approx(-potential(ms[0], ordered=ordered), abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(milestone_runs, st.floats(0.0, 5.0), st.floats(0.0, 2.0), st.floats(0.0, 1.0),
       st.data())
def test_a_successful_finish_never_earns_less_than_running_out_of_steps(ms, w_progress, w_task,
                                                                        truncated_success, data):
    """Same milestones, same penalties: finishing (task success 1) ≥ truncation (any evaluation ≤ 1)."""
    T = len(ms) - 1
    parse = data.draw(st.lists(st.booleans(), min_size=T, max_size=T))
    invalid = data.draw(st.lists(st.booleans(), min_size=T, max_size=T))
    cfg = RewardConfig(task=w_task, progress=w_progress, step_penalty=-0.01)
    finished = episode_rewards(final_success=1.0, milestones_per_state=ms, parse_failed=parse,
                               action_invalid=invalid, terminated=True, cfg=cfg)
    truncated = episode_rewards(final_success=truncated_success, milestones_per_state=ms, parse_failed=parse,
                                action_invalid=invalid, terminated=False, cfg=cfg)
    assert sum(r for r, _ in finished) >= sum(r for r, _ in truncated) - 1e-12
    # and the progress terms of both are the same constant, −Φ(s_0)
    for out in (finished, truncated):
        assert sum(p["progress"] for _, p in out) == pytest.approx(-potential(ms[0]), abs=1e-9)


def _expected_returns(P, R_end, terminal, milestones, H, gamma, cfg):
    """Exact expected return of every deterministic stationary policy of a tabular MDP.

    ``P[s][a]``: next-state probabilities; an episode starts in state 0 and ends when it enters a
    terminal state or after ``H`` steps (truncated); the task reward is ``R_end[s]`` of the state
    it ends in. Returns are composed by :func:`episode_rewards` (discounted by ``gamma``).
    """
    S, A = len(P), len(P[0])
    out = {}
    for policy in itertools.product(range(A), repeat=S):
        total = 0.0
        stack = [((0,), 1.0)]
        while stack:
            states, prob = stack.pop()
            s = states[-1]
            ended = len(states) > 1 and (terminal[s] or len(states) - 1 == H)
            if ended:
                T = len(states) - 1
                rewards = episode_rewards(final_success=R_end[s],
                                          milestones_per_state=[milestones[x] for x in states],
                                          parse_failed=[False] * T, action_invalid=[False] * T,
                                          terminated=terminal[s], cfg=cfg)
                total += prob * sum(gamma ** t * r for t, (r, _) in enumerate(rewards))
                continue
            for s2, p in enumerate(P[s][policy[s]]):
                if p > 0:
                    stack.append((states + (s2,), prob * p))
        out[policy] = total
    return out


@st.composite
def tabular_mdps(draw):
    S, A = draw(st.integers(2, 4)), draw(st.integers(1, 2))
    P = []
    for _ in range(S):
        row = []
        for _ in range(A):
            w = draw(st.lists(st.integers(0, 3), min_size=S, max_size=S).filter(lambda x: sum(x) > 0))
            row.append([x / sum(w) for x in w])
        P.append(row)
    R_end = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=S, max_size=S))
    terminal = [False] + draw(st.lists(st.booleans(), min_size=S - 1, max_size=S - 1))
    M = draw(st.integers(1, 3))
    milestones = draw(st.lists(st.lists(st.booleans(), min_size=M, max_size=M), min_size=S, max_size=S))
    return P, R_end, terminal, milestones, draw(st.integers(1, 4))


@settings(max_examples=60, deadline=None)
@given(tabular_mdps(), st.floats(0.5, 1.0), st.floats(0.1, 5.0))
def test_shaping_keeps_the_ranking_of_policies_on_random_mdps(mdp, gamma, w_progress):
    P, R_end, terminal, milestones, H = mdp
    plain = _expected_returns(P, R_end, terminal, milestones, H, gamma,
                              RewardConfig(progress=0.0, progress_gamma=gamma))
    shaped = _expected_returns(P, R_end, terminal, milestones, H, gamma,
                               RewardConfig(progress=w_progress, progress_gamma=gamma))
    # every policy's return moves by the same constant, −w Φ(s_0) ...
    shift = -w_progress * potential(milestones[0])
    for pi in plain:
        assert shaped[pi] == pytest.approx(plain[pi] + shift, abs=1e-9)
    # ... so every pair of policies is ordered the same way (ties stay ties)
    def order(values, a, b):
        d = values[a] - values[b]
        return 0 if abs(d) < 1e-9 else (1 if d > 0 else -1)
    for a, b in itertools.combinations(plain, 2):
        assert order(plain, a, b) == order(shaped, a, b)
    assert not any(math.isnan(v) for v in shaped.values())
