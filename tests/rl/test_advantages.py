"""Advantages against hand-computed values and plain-loop versions."""

import math
import random

import pytest
import torch

from rl.advantages import (
    awr_weights, discounted_returns, gae, group_stats, grpo_advantages, nonzero_variance_mask,
    scale_negative_advantages, semi_online_advantages, step_group_advantages,
)


def loop_grpo(rewards, groups, normalize_std=True, eps=1e-6):
    out = []
    for r, g in zip(rewards, groups):
        members = [x for x, h in zip(rewards, groups) if h == g]
        mu = sum(members) / len(members)
        var = sum((x - mu) ** 2 for x in members) / max(len(members) - 1, 1)
        a = r - mu
        out.append(a / (math.sqrt(var) + eps) if normalize_std else a)
    return out


def test_grpo_hand_computed():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    g = torch.tensor([7, 7, 7, 7])
    # mean 0.25, unbiased std sqrt(0.25) = 0.5
    assert grpo_advantages(r, g, eps=0).tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5])
    assert grpo_advantages(r, g, normalize_std=False).tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_grpo_zero_variance_group_is_zero_and_masked():
    r = torch.tensor([1.0, 1.0, 0.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    adv = grpo_advantages(r, g)
    assert adv[:2].tolist() == [0.0, 0.0]
    assert nonzero_variance_mask(r, g).tolist() == [False, False, True, True]


def test_grpo_matches_loop_on_random_uneven_groups():
    rng = random.Random(0)
    rewards = [rng.random() for _ in range(37)]
    groups = [rng.randrange(6) * 13 for _ in range(37)]
    for norm in (True, False):
        got = grpo_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor(groups), normalize_std=norm)
        assert got.tolist() == pytest.approx(loop_grpo(rewards, groups, norm), abs=1e-9)


def test_group_stats_singleton_group():
    mean, std, cnt = group_stats(torch.tensor([3.0]), torch.tensor([0]))
    assert (mean.item(), std.item(), cnt.item()) == (3.0, 0.0, 1.0)


def test_discounted_returns_hand_and_padding():
    r = torch.tensor([[0.0, 0.0, 1.0], [0.5, 1.0, 9.0]])
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    out = discounted_returns(r, m, gamma=0.9)
    assert out[0].tolist() == pytest.approx([0.81, 0.9, 1.0])
    assert out[1].tolist() == pytest.approx([0.5 + 0.9, 1.0, 0.0])  # padding reward 9 ignored


def loop_gae(rewards, values, gamma, lam, last_value=0.0):
    T = len(rewards)
    adv = [0.0] * T
    nxt_a, nxt_v = 0.0, last_value
    for t in reversed(range(T)):
        delta = rewards[t] + gamma * nxt_v - values[t]
        nxt_a = delta + gamma * lam * nxt_a
        adv[t] = nxt_a
        nxt_v = values[t]
    return adv


def test_gae_hand_computed():
    # T=2, gamma=1, lam=1: A_t = G_t - V_t
    adv, ret = gae(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.2, 0.5]]), torch.ones(1, 2), gamma=1.0, lam=1.0)
    assert adv[0].tolist() == pytest.approx([0.8, 0.5])
    assert ret[0].tolist() == pytest.approx([1.0, 1.0])


def test_gae_matches_loop_with_padding_and_bootstrap():
    rng = random.Random(1)
    B, T = 5, 7
    lens = [7, 3, 5, 1, 6]
    R = torch.zeros(B, T, dtype=torch.float64)
    V = torch.zeros(B, T, dtype=torch.float64)
    M = torch.zeros(B, T)
    boots = torch.tensor([rng.random() for _ in range(B)], dtype=torch.float64)
    for b, n in enumerate(lens):
        for t in range(n):
            R[b, t], V[b, t], M[b, t] = rng.random(), rng.random(), 1
        for t in range(n, T):  # garbage in padding must not leak
            R[b, t], V[b, t] = 100.0, -100.0
    adv, ret = gae(R, V, M, gamma=0.97, lam=0.9, last_values=boots)
    for b, n in enumerate(lens):
        want = loop_gae(R[b, :n].tolist(), V[b, :n].tolist(), 0.97, 0.9, boots[b].item())
        assert adv[b, :n].tolist() == pytest.approx(want, abs=1e-9)
        assert adv[b, n:].abs().sum() == 0
        assert ret[b, :n].tolist() == pytest.approx([a + v for a, v in zip(want, V[b, :n].tolist())])


def test_step_and_semi_online_advantages():
    # one group, two episodes of 2 steps each
    returns = torch.tensor([1.0, 1.0, 0.0, 0.5])
    ep = torch.tensor([1.0, 1.0, 0.0, 0.0])
    gid = torch.tensor([0, 0, 0, 0])
    idx = torch.tensor([0, 1, 0, 1])
    a_step = step_group_advantages(returns, gid, idx, normalize_std=False)
    assert a_step.tolist() == pytest.approx([0.5, 0.25, -0.5, -0.25])
    a = semi_online_advantages(returns, ep, gid, idx, step_weight=0.5, normalize_std=False)
    assert a.tolist() == pytest.approx([0.5 + 0.25, 0.5 + 0.125, -0.5 - 0.25, -0.5 - 0.125])
    # cohorts are (group, step) pairs whatever the numbers: no two pairs ever share one
    far = step_group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]), torch.tensor([1_000_003, 0]))
    assert far.tolist() == [0.0, 0.0]


def test_scale_negative_advantages():
    adv = torch.tensor([1.0, -1.0, -2.0])
    out = scale_negative_advantages(adv, torch.tensor([0.0, 0.0, 0.5]), min_scale=0.2)
    assert out.tolist() == pytest.approx([1.0, -0.2, -2.0 * (0.2 + 0.8 * 0.5)])
    assert scale_negative_advantages(adv, 1.0).tolist() == adv.tolist()


def test_awr_weights():
    w = awr_weights(torch.tensor([0.0, 1.0, 100.0]), beta=0.5, max_weight=10.0)
    assert w.tolist() == pytest.approx([1.0, math.exp(2.0), 10.0])


# ---- GiGPO, per-task normalisation, AEM ---------------------------------------------------------

from rl.advantages import (  # noqa: E402
    aem_modulation, anchor_groups, gigpo_advantages, normalize_per_key, tolerant_anchor_groups, whiten,
)


def test_anchor_groups_join_equal_states_within_an_episode_group_only():
    states = torch.tensor([0, 1, 0, 2, 1, 0])
    groups = torch.tensor([0, 0, 0, 0, 0, 1])  # the last turn saw state 0 too, but in another group
    assert anchor_groups(states, groups).tolist() == [0, 1, 0, 2, 1, 3]


def test_gigpo_hand_computed_shorter_path_gets_credit_where_grpo_sees_none():
    # One group, γ = 0.9. Episode A: s0 → s1 → done (rewards 0, 1); episode B takes a detour:
    # s0 → s2 → s1 → done (0, 0, 1). Both succeed, so the episode advantage is 0 for both (GRPO
    # has nothing to learn). Returns: A (0.9, 1.0), B (0.81, 0.9, 1.0). Anchor groups: s0 {A0, B0}
    # mean 0.855 → A0 +0.045, B0 −0.045; s1 {A1, B2} both 1.0 → 0; s2 {B1} alone → 0.
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    ret = discounted_returns(rewards, mask, gamma=0.9)
    step_ret = torch.tensor([ret[0, 0], ret[0, 1], ret[1, 0], ret[1, 1], ret[1, 2]])
    assert step_ret.tolist() == pytest.approx([0.9, 1.0, 0.81, 0.9, 1.0])
    turn_ep = torch.tensor([0, 0, 1, 1, 1])
    sg = anchor_groups(torch.tensor([0, 1, 0, 2, 1]), torch.zeros(5, dtype=torch.long))
    adv = gigpo_advantages(torch.tensor([1.0, 1.0], dtype=torch.float64), torch.tensor([0, 0]), turn_ep, step_ret, sg)
    assert adv.tolist() == pytest.approx([0.045, 0.0, -0.045, 0.0, 0.0], abs=1e-9)
    # ω scales the step part; a failed third episode adds the episode part A^E = R − mean
    adv2 = gigpo_advantages(torch.tensor([1.0, 1.0]), torch.tensor([0, 0]), turn_ep, step_ret, sg, step_weight=2.0)
    assert adv2[0].item() == pytest.approx(0.09)
    ep_r = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    turn_ep3 = torch.tensor([0, 0, 1, 1, 1, 2])
    step_ret3 = torch.cat([step_ret, torch.tensor([0.0], dtype=torch.float64)])
    sg3 = anchor_groups(torch.tensor([0, 1, 0, 2, 1, 0]), torch.zeros(6, dtype=torch.long))  # C acted on s0 and failed
    adv3 = gigpo_advantages(ep_r, torch.tensor([0, 0, 0]), turn_ep3, step_ret3, sg3)
    # s0 group now {0.9, 0.81, 0.0}: mean 0.57; A^E = (1/3, 1/3, −2/3)
    assert adv3.tolist() == pytest.approx([1 / 3 + 0.33, 1 / 3 + 0.0, 1 / 3 + 0.24, 1 / 3, 1 / 3, -2 / 3 - 0.57],
                                          abs=1e-9)


def loop_gigpo(ep_r, ep_g, turn_ep, step_ret, states, w, norm):
    """A plain-loop GiGPO after the reference code (episode-level, then anchor-state step groups)."""
    def normed(x, members):
        mu = sum(members) / len(members)
        sd = math.sqrt(sum((m - mu) ** 2 for m in members) / max(len(members) - 1, 1))
        return (x - mu) / (sd + 1e-6) if norm else x - mu
    out = []
    for i, e in enumerate(turn_ep):
        a_e = normed(ep_r[e], [r for r, g in zip(ep_r, ep_g) if g == ep_g[e]])
        same = [step_ret[j] for j in range(len(turn_ep)) if ep_g[turn_ep[j]] == ep_g[e] and states[j] == states[i]]
        out.append(a_e + w * normed(step_ret[i], same))
    return out


def test_gigpo_matches_loop_on_random_groups():
    rng = random.Random(4)
    ep_g = [rng.randrange(3) for _ in range(9)]
    ep_r = [float(rng.random() < 0.5) for _ in ep_g]
    turn_ep = [rng.randrange(9) for _ in range(40)]
    states = [rng.randrange(5) for _ in turn_ep]
    step_ret = [rng.random() for _ in turn_ep]
    tg = torch.tensor([ep_g[e] for e in turn_ep])
    sg = anchor_groups(torch.tensor(states), tg)
    for norm in (False, True):
        got = gigpo_advantages(torch.tensor(ep_r, dtype=torch.float64), torch.tensor(ep_g), torch.tensor(turn_ep),
                               torch.tensor(step_ret, dtype=torch.float64), sg, step_weight=0.7, normalize_std=norm)
        assert got.tolist() == pytest.approx(loop_gigpo(ep_r, ep_g, turn_ep, step_ret, states, 0.7, norm), abs=1e-9)


def test_tolerant_anchor_groups_join_screens_that_differ_in_a_clock_only():
    base = torch.zeros(10, 10)
    clock = base.clone()
    clock[0, 9] = 1.0  # one pixel of 100 (a clock digit)
    other = base.clone()
    other[4:7, 4:7] = 1.0  # 9 pixels: another screen
    thumbs = torch.stack([base, clock, other, base])
    groups = torch.tensor([0, 0, 0, 1])
    assert tolerant_anchor_groups(thumbs, groups, tol=0.01).tolist() == [0, 0, 1, 2]
    assert tolerant_anchor_groups(thumbs, groups, tol=0.0).tolist() == [0, 1, 2, 3]  # exact: the clock splits them
    # below the per-pixel threshold (anti-aliasing noise) nothing differs at all
    assert tolerant_anchor_groups(torch.stack([base, base + 0.05]), torch.tensor([0, 0]), tol=0.0).tolist() == [0, 0]


def test_per_task_normalisation_and_whitening_hand_computed():
    adv = torch.tensor([2.0, 0.0, 0.2, 0.0])
    keys = torch.tensor([0, 0, 1, 1])
    s = 1 / math.sqrt(2)
    # task 0: mean 1, unbiased std √2; task 1: mean 0.1, std 0.1·√2: both become ±1/√2
    assert normalize_per_key(adv, keys, eps=0.0).tolist() == pytest.approx([s, -s, s, -s])
    assert normalize_per_key(adv, keys, center=False, eps=0.0).tolist() == pytest.approx([2 / math.sqrt(2), 0, s * 2, 0])
    w = whiten(torch.tensor([1.0, 2.0, 3.0]), eps=0.0)
    assert w.tolist() == pytest.approx([-1.0, 0.0, 1.0])


def test_aem_modulation_hand_computed():
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    surprisal = torch.tensor([1.0, 3.0, 1.0, 3.0])  # mean 2, unbiased std √(4/3): u = ∓0.866
    g = torch.zeros(4, dtype=torch.long)
    u = 1 / math.sqrt(4 / 3)
    out = aem_modulation(adv, surprisal, g, alpha=0.5)
    # exploration (α > 0): the surprising good reply and the confident bad one weigh more
    assert out.tolist() == pytest.approx([1 - 0.5 * u, 1 + 0.5 * u, -(1 + 0.5 * u), -(1 - 0.5 * u)], abs=1e-5)
    assert aem_modulation(adv, surprisal, g, alpha=5.0).tolist() == pytest.approx([0.5, 2.0, -2.0, -0.5], abs=1e-5)
    assert aem_modulation(adv, surprisal, g, alpha=0.0).tolist() == adv.tolist()
    assert torch.equal(torch.sign(aem_modulation(adv, surprisal, g, alpha=-0.9)), torch.sign(adv))


def test_the_aem_docstring_says_what_the_code_does():
    """Its docstring's examples run as written, and its words name the same direction as the code: at
    α > 0 a confident bad reply is punished more, not more gently."""
    import doctest

    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(aem_modulation, globs={"torch": torch, "aem_modulation": aem_modulation}):
        runner.run(test)
    assert runner.tries >= 2 and runner.failures == 0
    doc = " ".join(aem_modulation.__doc__.split())
    assert "a confident bad one punished more" in doc and "confident bad ones more gently" not in doc
