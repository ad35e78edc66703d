"""Losses against hand-computed values and plain-loop versions."""

import math

import pytest
import torch

from rl.losses import AdaptiveKL, aggregate, entropy_from_logits, kl_estimate, ppo_clip_loss, value_loss


def test_aggregations_hand_computed():
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(v, m, "token_mean").item() == pytest.approx(10 / 4)
    assert aggregate(v, m, "seq_mean_token_mean").item() == pytest.approx((2.0 + 4.0) / 2)
    assert aggregate(v, m, "seq_mean_token_sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate(v, m, "seq_mean_token_sum_norm", max_len=5).item() == pytest.approx(10 / (2 * 5))
    g = torch.tensor([0, 1])
    assert aggregate(v, m, "group_token_mean", group_ids=g).item() == pytest.approx((2.0 + 4.0) / 2)
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(v, m, "nope")


def test_kl_estimators():
    logp = torch.tensor([math.log(0.5)])
    ref = torch.tensor([math.log(0.25)])
    d = math.log(2)
    assert kl_estimate(logp, ref, "k1").item() == pytest.approx(d)
    assert kl_estimate(logp, ref, "k2").item() == pytest.approx(0.5 * d * d)
    assert kl_estimate(logp, ref, "k3").item() == pytest.approx(0.5 - math.log(0.5) - 1)
    assert kl_estimate(ref, ref, "k3").item() == 0.0


def test_k3_and_the_ratio_are_guarded_as_verl_guards_them():
    """verl's low_var_kl: the log-ratio clamped to ±20, the estimate to 10; its policy loss clamps
    the log-ratio to ±20 before exp, so no token makes the loss inf."""
    logp = torch.tensor([-5.0, 15.0, -15.0, -0.5]).requires_grad_()
    got = kl_estimate(logp, torch.zeros(4), "k3")
    assert got.tolist() == pytest.approx([10.0, 10.0, 10.0, math.exp(0.5) - 0.5 - 1])
    got.sum().backward()
    assert logp.grad[:3].tolist() == [0.0, 0.0, 0.0] and logp.grad[3].item() != 0.0
    # a float32 token whose log-prob moved by 200 with a negative advantage: finite
    lp = torch.tensor([[200.0, 0.1]], requires_grad=True)
    loss, stats = ppo_clip_loss(lp, torch.zeros(1, 2), torch.tensor([-1.0]), torch.ones(1, 2))
    assert math.isfinite(loss.item()) and math.isfinite(stats.ratio_mean)
    loss.backward()
    assert torch.isfinite(lp.grad).all()


def loop_ppo(logp, old, adv, lo, hi):
    per = []
    for lp, o, a in zip(logp, old, adv):
        r = math.exp(lp - o)
        per.append(-min(r * a, min(max(r, 1 - lo), 1 + hi) * a))
    return per


def test_ppo_clip_hand_computed_asymmetric():
    # ratios 1.5, 0.5, 1.1 ; advantages +1, -1, +1 ; eps_low 0.2, eps_high 0.28
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]])).requires_grad_()
    adv = torch.tensor([[1.0, -1.0, 1.0]])
    mask = torch.ones(1, 3)
    loss, st = ppo_clip_loss(logp, old, adv, mask, clip_eps_low=0.2, clip_eps_high=0.28)
    # token 0: -min(1.5, 1.28) = -1.28 ; token 1: -min(-0.5, -0.8) = 0.8 ; token 2: -1.1
    assert loss.item() == pytest.approx((-1.28 + 0.8 - 1.1) / 3)
    assert st.clip_frac == pytest.approx(2 / 3)
    loss.backward()
    # clipped tokens get no gradient; the unclipped one gets -A * ratio / n
    assert logp.grad[0, 0].item() == 0.0 and logp.grad[0, 1].item() == 0.0
    assert logp.grad[0, 2].item() == pytest.approx(-1.1 / 3)


def test_ppo_matches_loop_and_sequence_advantages():
    torch.manual_seed(0)
    logp = torch.randn(4, 6) * 0.3
    old = logp + torch.randn(4, 6) * 0.2
    adv_seq = torch.randn(4)
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0
    loss, _ = ppo_clip_loss(logp, old, adv_seq, mask, clip_eps_low=0.1, clip_eps_high=0.3, agg="token_mean")
    total, n = 0.0, 0
    for b in range(4):
        k = int(mask[b].sum())
        total += sum(loop_ppo(logp[b, :k].tolist(), old[b, :k].tolist(), [adv_seq[b].item()] * k, 0.1, 0.3))
        n += k
    assert loss.item() == pytest.approx(total / n, rel=1e-5)


def test_ppo_kl_term_and_dual_clip():
    logp = torch.log(torch.tensor([[4.0]]))
    old = torch.zeros(1, 1)
    adv = torch.tensor([-1.0])
    ref = torch.zeros(1, 1)
    loss, st = ppo_clip_loss(logp, old, adv, torch.ones(1, 1), ref_logp=ref, kl_coef=0.1, kl_kind="k1")
    # ratio 4 > 1+eps with A<0: -min(-4, -1.2) = 4 ; plus 0.1 * log 4
    assert loss.item() == pytest.approx(4.0 + 0.1 * math.log(4))
    assert st.kl == pytest.approx(math.log(4))
    loss_dc, _ = ppo_clip_loss(logp, old, adv, torch.ones(1, 1), dual_clip=3.0)
    assert loss_dc.item() == pytest.approx(3.0)


def test_on_policy_ratio_one_gives_minus_mean_advantage():
    logp = torch.randn(3, 5)
    adv = torch.tensor([1.0, -2.0, 0.5])
    loss, st = ppo_clip_loss(logp, logp.clone(), adv, torch.ones(3, 5), agg="seq_mean_token_mean")
    assert loss.item() == pytest.approx(-adv.mean().item(), rel=1e-6)
    assert st.clip_frac == 0.0 and st.ratio_mean == pytest.approx(1.0)


def test_entropy_and_value_loss():
    assert entropy_from_logits(torch.zeros(4)).item() == pytest.approx(math.log(4))
    v = torch.tensor([[1.0, 0.0]])
    old = torch.tensor([[0.5, 0.0]])
    R = torch.tensor([[0.0, 1.0]])
    # token 0: max((1-0)^2, (0.7-0)^2) = 1 ; token 1: 1 ; 0.5 * mean = 0.5
    assert value_loss(v, old, R, torch.ones(1, 2), clip_eps=0.2).item() == pytest.approx(0.5)


def test_adaptive_kl_moves_towards_target():
    ctl = AdaptiveKL(init_coef=0.1, target=0.01, horizon=100)
    assert ctl.update(0.05, 10) > 0.1
    ctl2 = AdaptiveKL(init_coef=0.1, target=0.01, horizon=100)
    assert ctl2.update(0.0, 10) < 0.1


# ---- train-inference mismatch: k3 KL and truncated importance sampling -----------------------------

def test_mismatch_kl_by_hand():
    from rl.losses import mismatch_kl

    learner = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, 0.0, 0.0]])
    rollout = torch.tensor([[-1.0, -1.5, -0.7], [-1.2, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    # d = rollout - learner: 0, 0.5, -0.2, -0.2; k3 = e^-d + d - 1
    k3 = [0.0, math.exp(-0.5) + 0.5 - 1, math.exp(0.2) - 0.2 - 1, math.exp(0.2) - 0.2 - 1]
    assert float(mismatch_kl(learner, rollout, mask)) == pytest.approx(sum(k3) / 4, rel=1e-6)
    assert float(mismatch_kl(learner, learner, mask)) == 0.0


def test_tis_weights_by_hand():
    from rl.losses import tis_weights

    learner = torch.tensor([[-1.0, -0.5, -3.0, -0.1]])
    rollout = torch.tensor([[-1.0, -2.0, -2.0, -9.0]])
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    w, st = tis_weights(learner, rollout, mask, cap=2.0)
    # ratios: e^0 = 1, e^1.5 = 4.48 -> capped 2, e^-1 = 0.368; padding -> 1
    torch.testing.assert_close(w, torch.tensor([[1.0, 2.0, math.exp(-1.0), 1.0]]))
    assert st.tis_clip_frac == pytest.approx(1 / 3)
    assert st.tis_weight_mean == pytest.approx((1 + 2 + math.exp(-1)) / 3, rel=1e-6)
    d = [0.0, -1.5, 1.0]  # rollout - learner
    assert st.mismatch_kl == pytest.approx(sum(math.exp(-x) + x - 1 for x in d) / 3, rel=1e-6)
    with pytest.raises(ValueError, match="cap"):
        tis_weights(learner, rollout, mask, cap=0.0)


def test_tis_advantages_weight_the_pg_loss_per_token():
    """ppo_clip_loss on TIS-weighted advantages equals Σ w·ℓ_token / n computed by hand."""
    from rl.losses import ppo_clip_loss, tis_advantages

    logp = torch.tensor([[-1.0, -0.4, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -0.5, -1.5]])  # learner re-scored, so the ratio is the learner's own
    adv = torch.tensor([0.5])
    w = torch.tensor([[1.0, 2.0, 0.25]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    loss, st = ppo_clip_loss(logp, old, tis_advantages(adv, w), mask, clip_eps_low=0.2, clip_eps_high=0.2)
    rho = [1.0, math.exp(0.1), math.exp(-0.5)]
    per_tok = [-min(r * 0.5, min(max(r, 0.8), 1.2) * 0.5) for r in rho]
    expected = (1.0 * per_tok[0] + 2.0 * per_tok[1] + 0.25 * per_tok[2]) / 3
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert st.clip_frac == 0.0  # ratio 0.61 with A > 0 is not clipped; weights do not change clipping
    loss.backward()
    # d loss / d logp_t = -w_t * A * rho_t / 3 where unclipped
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5 / 3, -2 * 0.5 * rho[1] / 3, -0.25 * 0.5 * rho[2] / 3]]))


def test_awr_loss_kl_term_to_the_reference_is_added_with_its_gradient():
    from rl.losses import awr_loss, kl_estimate

    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0], [-0.5, -3.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    w = torch.tensor([2.0, 1.0])
    plain = awr_loss(logp, w, mask)[0].detach()
    loss, st = awr_loss(logp, w, mask, ref_logp=ref, kl_coef=0.5)
    k3 = kl_estimate(logp.detach(), ref)
    kl = float((k3[0, 0] + k3[0, 1] + k3[1, 0]) / 3)  # the padded token counts nowhere
    assert st.kl == pytest.approx(kl) and st.pg_loss == pytest.approx(float(plain))
    assert float(loss) == pytest.approx(float(plain) + 0.5 * kl)
    loss.backward()
    # d/d logp of k3 = 1 - exp(ref - logp): toward the reference's log-prob
    d = logp.detach() - ref
    expected = (-w[:, None] + 0.5 * (1 - torch.exp(-d))) / 3 * mask
    torch.testing.assert_close(logp.grad, expected)
    # the KL measured without a coefficient moves nothing: the loss is the regression's
    measured, st0 = awr_loss(logp.detach(), w, mask, ref_logp=ref, kl_coef=0.0)
    assert float(measured) == pytest.approx(float(plain)) and st0.kl == pytest.approx(kl)


def test_awr_loss_hand_computed_and_weights_are_constants():
    from rl.advantages import awr_weights
    from rl.losses import awr_loss

    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0]])
    w = torch.tensor([2.0, 1.0], requires_grad=True)
    loss, st = awr_loss(logp, w, mask)
    assert loss.item() == pytest.approx((2 * 1 + 2 * 2 + 1 * 0.5) / 3)
    loss.backward()
    assert w.grad is None and logp.grad[0, 0].item() == pytest.approx(-2 / 3)
    # AWR weights exp(A/β) capped: A = (0, ln 2, 10), β = 1
    assert awr_weights(torch.tensor([0.0, math.log(2.0), 10.0]), beta=1.0, max_weight=20.0).tolist() == \
        pytest.approx([1.0, 2.0, 20.0])
