"""Policy-gradient losses: pure functions over tensors.

Shapes: ``B`` sequences (completions), ``L`` completion tokens (right-padded),
``mask`` ``[B, L]`` is 1 on real completion tokens. Log-probs are per token.

References: PPO (Schulman et al., 2017); clip-higher and token-level aggregation
(DAPO, Yu et al., 2025); Dr. GRPO's constant-length normalisation (Liu et al.,
2025); KL estimators k1/k2/k3 (Schulman, "Approximating KL divergence", 2020).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "AGGREGATIONS", "aggregate", "kl_estimate", "ppo_clip_loss", "PolicyLossStats", "entropy_from_logits",
    "value_loss", "AdaptiveKL", "awr_loss",
]

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm",
                "group_token_mean")


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str = "token_mean", *,
              max_len: int | None = None, group_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Reduce a ``[B, L]`` per-token loss to a scalar.

    * ``token_mean``: Σ over all tokens / number of tokens (DAPO; long sequences weigh more).
    * ``seq_mean_token_mean``: mean over sequences of each sequence's token mean (original GRPO).
    * ``seq_mean_token_sum``: mean over sequences of each sequence's token sum.
    * ``seq_mean_token_sum_norm``: Σ over all tokens / (B · max_len) (Dr. GRPO: a constant
      normaliser, so no length bias); ``max_len`` defaults to ``L``.
    * ``group_token_mean``: token mean within each group (``group_ids`` ``[B]``), then the mean
      over groups (each prompt counts the same whatever its completions' lengths).
    """
    m = mask.to(values.dtype)
    if mode == "token_mean":
        return (values * m).sum() / m.sum().clamp(min=1)
    if mode == "seq_mean_token_mean":
        per_seq = (values * m).sum(-1) / m.sum(-1).clamp(min=1)
        return per_seq.mean()
    if mode == "seq_mean_token_sum":
        return (values * m).sum(-1).mean()
    if mode == "seq_mean_token_sum_norm":
        L = max_len if max_len is not None else values.shape[-1]
        return (values * m).sum() / (values.shape[0] * L)
    if mode == "group_token_mean":
        if group_ids is None:
            raise ValueError("group_token_mean needs group_ids [B]")
        _, inv = torch.unique(group_ids, return_inverse=True)
        g = int(inv.max().item()) + 1
        tok_sum = torch.zeros(g, dtype=values.dtype, device=values.device).index_add(0, inv, (values * m).sum(-1))
        tok_cnt = torch.zeros(g, dtype=values.dtype, device=values.device).index_add(0, inv, m.sum(-1))
        return (tok_sum / tok_cnt.clamp(min=1)).mean()
    raise ValueError(f"unknown aggregation {mode!r}; choose one of {AGGREGATIONS}")


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from samples of π.

    * ``k1``: ``log π − log π_ref`` (unbiased, high variance, can be negative)
    * ``k2``: ``½ (log π − log π_ref)²``
    * ``k3``: ``exp(log π_ref − log π) − (log π_ref − log π) − 1`` (unbiased, ≥ 0; GRPO's choice),
      with verl's guards (its ``low_var_kl``): the log-ratio clamped to ±20, the estimate to at
      most 10, so one token the policy has moved far from the reference (``exp(15)`` ≈ 3.3e6)
      neither dominates the loss nor overflows; beyond them the token gives no KL gradient
    """
    d = logp - ref_logp
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * d * d
    if kind == "k3":
        d = d.clamp(-20.0, 20.0)
        return (torch.exp(-d) + d - 1.0).clamp(max=10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; choose k1, k2 or k3")


@dataclass(frozen=True)
class PolicyLossStats:
    """Diagnostics of one loss evaluation (floats, detached)."""

    pg_loss: float
    kl: float
    clip_frac: float
    approx_kl_old: float
    ratio_mean: float


def ppo_clip_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                  clip_eps_low: float = 0.2, clip_eps_high: float = 0.2, agg: str = "token_mean",
                  ref_logp: torch.Tensor | None = None, kl_coef: float = 0.0, kl_kind: str = "k3",
                  max_len: int | None = None, group_ids: torch.Tensor | None = None,
                  dual_clip: float | None = None) -> tuple[torch.Tensor, PolicyLossStats]:
    """PPO-clip surrogate with asymmetric bounds and an optional KL term.

    ``ρ = exp(log π − log π_old)`` (the log-ratio clamped to ±20); per token
    ``ℓ = −min(ρ A, clip(ρ, 1 − ε_low, 1 + ε_high) A) + β · KL(π ‖ π_ref)``,
    then :func:`aggregate`. ``clip_eps_high > clip_eps_low`` is DAPO's clip-higher.
    ``dual_clip`` (c > 1) bounds the loss of negative advantages at ``−c A``.

    Args:
        logp, old_logp: ``[B, L]`` log-probs of the sampled tokens under the current
            policy (with grad) and the behaviour policy.
        advantages: ``[B]`` (one per sequence) or ``[B, L]``.
        mask: ``[B, L]``.
        ref_logp: ``[B, L]`` reference-policy log-probs, for ``kl_coef > 0``.
    Returns:
        ``(loss, stats)``.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)
    # clamped as verl clamps it: a token whose log-prob moved by hundreds (a float32 exp overflows
    # past ~88) must not make the loss inf; the clip bounds it anyway wherever its advantage is > 0
    log_ratio = (logp - old_logp).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high) * advantages
    per_tok = -torch.min(surr1, surr2)
    if dual_clip is not None:
        per_tok = torch.where(advantages < 0, torch.min(per_tok, -dual_clip * advantages), per_tok)
    pg = aggregate(per_tok, mask, agg, max_len=max_len, group_ids=group_ids)
    kl_val = torch.zeros((), dtype=logp.dtype, device=logp.device)
    loss = pg
    if ref_logp is not None:
        kl_tok = kl_estimate(logp, ref_logp, kl_kind)
        kl_val = aggregate(kl_tok, mask, agg, max_len=max_len, group_ids=group_ids)
        if kl_coef:
            loss = pg + kl_coef * kl_val
    with torch.no_grad():
        m = mask.to(logp.dtype)
        n = m.sum().clamp(min=1)
        clipped = ((ratio < 1 - clip_eps_low) & (advantages < 0)) | ((ratio > 1 + clip_eps_high) & (advantages > 0))
        stats = PolicyLossStats(
            pg_loss=float(pg.detach()), kl=float(kl_val.detach()),
            clip_frac=float((clipped.to(logp.dtype) * m).sum() / n),
            approx_kl_old=float(((ratio - 1) - log_ratio).mul(m).sum() / n),
            ratio_mean=float((ratio * m).sum() / n),
        )
    return loss, stats


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """``[..., V]`` logits → ``[...]`` entropy of the softmax, in nats."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, *,
               clip_eps: float | None = 0.2) -> torch.Tensor:
    """Critic loss ``½ max((V − R)², (clip(V, V_old ± ε) − R)²)``, masked token/turn mean.

    All ``[B, T]``. ``clip_eps=None`` gives the plain squared error.
    """
    err = (values - returns) ** 2
    if clip_eps is not None:
        v_clip = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
        err = torch.max(err, (v_clip - returns) ** 2)
    return 0.5 * aggregate(err, mask, "token_mean")


def awr_loss(logp: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor, *, agg: str = "token_mean",
             max_len: int | None = None, ref_logp: torch.Tensor | None = None, kl_coef: float = 0.0,
             kl_kind: str = "k3") -> tuple[torch.Tensor, PolicyLossStats]:
    """Advantage-weighted regression's actor loss ``ℓ = −w · log π(a|s) + β · KL(π ‖ π_ref)`` per token,
    then :func:`aggregate`.

    ``w = min(exp(A/β), w_max)`` (:func:`rl.advantages.awr_weights`) is one weight per turn
    (``[B]``) or per token (``[B, L]``); it is a constant (no gradient flows into it). Unlike
    PPO there is no ratio to the behaviour policy, so the same loss trains on demonstrations
    and on the replay of older policies' turns (off-policy).

    The KL term (``ref_logp`` given and ``kl_coef`` > 0) is :func:`kl_estimate` on the batch's own
    tokens. Those are the replay buffer's (older policies' samples, or demonstrations), not samples of
    π, so it is an anchor that holds π's log-probs of those tokens near the reference's rather than an
    unbiased estimate of the KL; on a turn the reference already writes, it keeps what the regression
    on other turns would take away.

    Args:
        logp: ``[B, L]`` log-probs of the taken tokens (with grad).
        weights: ``[B]`` or ``[B, L]``, ≥ 0.
        mask: ``[B, L]``.
        ref_logp: ``[B, L]`` reference-policy log-probs, for ``kl_coef > 0``.
    """
    if weights.dim() == 1:
        weights = weights[:, None].expand_as(logp)
    pg = aggregate(-weights.detach() * logp, mask, agg, max_len=max_len)
    loss, kl_val = pg, 0.0
    if ref_logp is not None:
        kl = aggregate(kl_estimate(logp, ref_logp, kl_kind), mask, agg, max_len=max_len)
        kl_val = float(kl.detach())
        if kl_coef:
            loss = pg + kl_coef * kl
    stats = PolicyLossStats(pg_loss=float(pg.detach()), kl=kl_val, clip_frac=0.0, approx_kl_old=0.0, ratio_mean=1.0)
    return loss, stats


class AdaptiveKL:
    """Adaptive KL coefficient (Ziegler et al., 2019): a soft trust region around π_ref.

    After each update, ``β ← β · (1 + clip((KL − target)/target, −0.2, 0.2) · n/horizon)``.
    """

    def __init__(self, init_coef: float = 0.05, target: float = 0.02, horizon: int = 10_000):
        self.value, self.target, self.horizon = init_coef, target, horizon

    def update(self, current_kl: float, n_steps: int) -> float:
        err = max(-0.2, min(0.2, current_kl / self.target - 1.0))
        self.value *= 1.0 + err * n_steps / self.horizon
        return self.value


# ---- train-inference mismatch (a separate rollout engine such as vLLM) ---------------------------

__all__ += ["mismatch_kl", "TISStats", "tis_weights", "tis_advantages"]


def mismatch_kl(learner_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked token mean of KL(π_rollout ‖ π_learner), k3 estimator over tokens sampled by the rollout engine.

    ``d = log π_rollout − log π_learner``; per token ``exp(−d) + d − 1`` (≥ 0, 0 when they agree).
    All ``[B, L]``; returns a scalar. Logged as ``mismatch_kl``: how far the engine's numerics
    (bf16 kernels, another attention implementation) are from the learner's.
    """
    per_tok = kl_estimate(rollout_logp, learner_logp, "k3")
    return aggregate(per_tok, mask, "token_mean")


@dataclass(frozen=True)
class TISStats:
    """``mismatch_kl``: see :func:`mismatch_kl`; ``tis_clip_frac``: share of tokens whose weight hit
    the cap; ``tis_weight_mean``: mean weight after the cap."""

    mismatch_kl: float
    tis_clip_frac: float
    tis_weight_mean: float


def tis_weights(learner_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, *,
                cap: float = 2.0) -> tuple[torch.Tensor, TISStats]:
    """Truncated importance sampling weights ``w = min(π_learner_old / π_rollout, C)`` per token.

    The rollout engine samples from π_rollout, slightly different from the learner's π_learner_old
    (same weights, other numerics); ``w`` corrects the policy gradient for it and the cap ``C``
    bounds its variance (Yao et al., 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"). Both inputs ``[B, L]`` are detached log-probs: ``learner_logp`` from
    the learner re-scoring the rollout before the update, ``rollout_logp`` as the engine reported
    them. Returns ``w`` ``[B, L]`` (1 on padding) and :class:`TISStats`.
    """
    if cap <= 0:
        raise ValueError(f"the TIS cap must be positive, got {cap}")
    with torch.no_grad():
        raw = torch.exp(learner_logp.detach() - rollout_logp.detach())
        w = torch.clamp(raw, max=cap)
        m = mask.bool()
        w = torch.where(m, w, torch.ones_like(w))
        n = m.sum().clamp(min=1)
        stats = TISStats(mismatch_kl=float(mismatch_kl(learner_logp.detach(), rollout_logp.detach(), mask)),
                         tis_clip_frac=float(((raw > cap) & m).sum() / n),
                         tis_weight_mean=float((w * m).sum() / n))
    return w, stats


def tis_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Advantages ``[B]`` or ``[B, L]`` times TIS weights ``[B, L]`` → ``[B, L]``.

    Passing these to :func:`ppo_clip_loss` (with ``old_logp`` the learner's own re-scored
    log-probs) applies TIS to the policy-gradient term: since ``w ≥ 0``,
    ``−min(ρ·wA, clip(ρ)·wA) = −w·min(ρA, clip(ρ)A)`` token by token, and the clip fraction is
    unchanged. The KL term is not weighted.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(weights)
    return advantages * weights.detach()
