"""The learner's update: optimiser steps over a batch of turns, in mini- and micro-batches, with the
strategy's loss (PPO-clip, or AWR's weighted regression).

With ``--rescore on`` (a strategy whose loss has a ratio) the learner first re-scores every turn
(no grad): those log-probs are the PPO ratio's old ones, and the rollout engine's own (vLLM's, or
any sampler's) only enter through truncated importance sampling weights
``min(π_learner / π_rollout, C)`` on the advantages (``--tis-cap``; 0: none) and the stored
``mismatch_kl``.
"""

from __future__ import annotations

import random
import zlib
from typing import TYPE_CHECKING, Any

import torch

from rl.critic import encoded
from rl.losses import mismatch_kl, tis_advantages, tis_weights

if TYPE_CHECKING:
    from rl.settings import UpdateSettings
    from rl.strategies import Strategy

__all__ = ["update", "rescore", "score_turns"]


def update(strategy: "Strategy", settings: "UpdateSettings", policy: Any, ref: Any, opt: torch.optim.Optimizer,
           turns: list[Any], adv: torch.Tensor, *, rng: random.Random | None = None) -> dict[str, float]:
    """Steps over ``turns`` with ``strategy``'s loss: ``settings.epochs`` shuffled passes, one optimiser
    step per mini-batch, each mini-batch in micro-batches with gradient accumulation.

    Within a mini-batch the turns of one group at one step (a group's samples of one screen) go
    into the same micro-batch, where they share their prompt's forward pass (see
    ``TransformersPolicy.score_encoded``); the mini-batch's gradient does not depend on how it is
    cut into micro-batches (except under ``group_token_mean``, whose micro-batches are left as
    the shuffle made them).

    ``rng`` shuffles the turns (a seeded one makes the update reproducible); ``ref`` is the
    reference policy of the KL term (None, or ``settings.kl_coef`` 0: no KL term).
    """
    rng = rng or random.Random(0)
    s = settings
    params = [p for p in policy.parameters() if p.requires_grad]
    out = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "grad_norm": 0.0, "approx_kl_old": 0.0, "optimizer_steps": 0.0,
           "early_stopped": 0.0, "update_entropy": 0.0}
    n_mb = 0
    learner_old = None
    if s.rescore == "on" and strategy.ratio:
        learner_old, stats = rescore(policy, turns, s.micro_batch_size, tis_cap=s.tis_cap)
        out.update(stats)
    order = list(range(len(turns)))
    mini = s.mini_batch_size or len(turns)
    aggregate_by_group = strategy.loss_agg == "group_token_mean"
    for _ in range(s.epochs):
        if out["early_stopped"]:
            break
        rng.shuffle(order)
        for m in range(0, len(order), mini):
            part = order[m:m + mini]
            if s.micro_batch_size < len(part) and not aggregate_by_group:
                part = _cluster(part, turns)
            opt.zero_grad(set_to_none=True)
            loss_sum, kl_old, n = _accumulate(strategy, s, policy, ref, turns, adv, part, learner_old, out)
            n_mb += n
            if s.max_kl_old and kl_old > s.max_kl_old:  # this mini-batch left the trust region
                opt.zero_grad(set_to_none=True)
                out["early_stopped"] = 1.0
                break
            gn = torch.nn.utils.clip_grad_norm_(params, s.max_grad_norm)
            opt.step()
            out["loss"] += loss_sum
            out["grad_norm"] += float(gn)
            out["optimizer_steps"] += 1
    for k in ("clip_frac", "kl", "approx_kl_old", "update_entropy"):
        out[k] /= max(n_mb, 1)
    for k in ("loss", "grad_norm"):  # means over the optimiser steps
        out[k] /= max(out["optimizer_steps"], 1)
    # what this loss does not compute is not reported as zeros (charts of flat zeros read as measurements):
    # a weighted regression (AWR) has no ratio to clip, a run without a KL term no KL
    if not strategy.ratio:
        del out["clip_frac"], out["approx_kl_old"]
    if ref is None or not s.kl_coef:
        del out["kl"]
    if not s.entropy_coef:
        del out["update_entropy"]
    if out["optimizer_steps"]:
        policy.mark_updated()  # one new policy version per update: what rollouts are tagged and lag-checked with
    return out


def _accumulate(strategy: "Strategy", s: "UpdateSettings", policy: Any, ref: Any, turns: list[Any],
                adv: torch.Tensor, part: list[int], learner_old: list[tuple[float, ...]] | None,
                out: dict[str, float]) -> tuple[float, float, int]:
    """One mini-batch's gradient, accumulated over its micro-batches: (its loss, its approximate KL
    to the sampling policy, the number of micro-batches). Adds the loss statistics to ``out``."""
    part_tokens = sum(len(turns[j].completion_ids) for j in part)
    loss_sum = kl_old = 0.0
    n = 0
    for i in range(0, len(part), s.micro_batch_size):
        idx = part[i:i + s.micro_batch_size]
        mb = [turns[j] for j in idx]
        comps = [list(u.completion_ids) for u in mb]
        sb = score_turns(policy, mb, comps, grad=True, entropy=s.entropy_coef > 0)
        old = _place(sb.mask, [u.old_logprobs for u in mb], sb.logprobs.dtype)
        adv_mb = adv[idx].to(device=sb.logprobs.device, dtype=sb.logprobs.dtype)  # advantages are made on CPU
        if learner_old is not None:  # the learner's own old log-probs; TIS on the advantages
            rollout_old = old
            old = _place(sb.mask, [learner_old[j] for j in idx], sb.logprobs.dtype)
            if s.tis_cap > 0:
                w, _ = tis_weights(old, rollout_old, sb.mask, cap=s.tis_cap)
                adv_mb = tis_advantages(adv_mb, w)
        ref_lp = None
        if ref is not None and s.kl_coef > 0:
            ref_lp = score_turns(ref, mb, comps, grad=False).logprobs.detach()
        group_ids = torch.tensor([_group_index(u.group_id) for u in mb], device=sb.mask.device)
        loss, st = strategy.loss(sb.logprobs, old, adv_mb, sb.mask, ref_logp=ref_lp, kl_coef=s.kl_coef,
                                 group_ids=group_ids)
        if s.entropy_coef > 0:  # the bonus: a flatter next-token distribution lowers the loss
            ent = strategy.mean_entropy(sb.extra["entropy"], sb.mask, group_ids=group_ids)
            loss = loss - s.entropy_coef * ent
            out["update_entropy"] += float(ent.detach())
        # Each micro-batch's share of the mini-batch, so accumulation equals one big batch.
        share = (int(sb.mask.sum()) / max(part_tokens, 1)) if strategy.loss_agg == "token_mean" else len(mb) / len(part)
        (loss * share).backward()
        loss_sum += float(loss.detach()) * share
        out["clip_frac"] += st.clip_frac
        out["kl"] += st.kl
        out["approx_kl_old"] += st.approx_kl_old
        kl_old += st.approx_kl_old * len(mb) / len(part)
        n += 1
    return loss_sum, kl_old, n


def rescore(policy: Any, turns: list[Any], micro_batch_size: int, *,
            tis_cap: float = 0.0) -> tuple[list[tuple[float, ...]], dict[str, float]]:
    """The learner's log-probs of each turn's sampled tokens (no grad), and how far the rollout's own
    (``turn.old_logprobs``) are from them over all tokens: ``mismatch_kl`` (k3 estimate of
    KL(π_rollout ‖ π_learner)), ``mismatch_max_abs`` (largest |Δ log p| of a token) and, with a cap,
    ``tis_clip_frac`` / ``tis_weight_mean`` of the truncated importance weights."""
    perm = list(range(len(turns)))
    if micro_batch_size < len(turns):
        perm = _cluster(perm, turns)
    rows: list[tuple[float, ...]] = []
    kl = clip = wmean = max_abs = sum_abs = 0.0
    tokens = 0
    for i in range(0, len(turns), micro_batch_size):
        mb = [turns[j] for j in perm[i:i + micro_batch_size]]
        sb = score_turns(policy, mb, [list(u.completion_ids) for u in mb], grad=False)
        lp = sb.logprobs.detach().float()
        for b in range(len(mb)):
            rows.append(tuple(lp[b, sb.mask[b]].tolist()))
        roll = _place(sb.mask, [u.old_logprobs for u in mb], lp.dtype)
        n = int(sb.mask.sum())
        if n == 0:
            continue
        kl += float(mismatch_kl(lp, roll, sb.mask)) * n
        max_abs = max(max_abs, float(((lp - roll).abs() * sb.mask).max()))
        sum_abs += float(((lp - roll).abs() * sb.mask).sum())
        if tis_cap > 0:
            _, st = tis_weights(lp, roll, sb.mask, cap=tis_cap)
            clip += st.tis_clip_frac * n
            wmean += st.tis_weight_mean * n
        tokens += n
    back = [()] * len(turns)  # rows in the turns' order
    for j, r in zip(perm, rows):
        back[j] = r
    rows = back
    stats = {"mismatch_kl": kl / max(tokens, 1), "mismatch_max_abs": max_abs, "mismatch_mean_abs": sum_abs / max(tokens, 1)}
    if tis_cap > 0:
        stats.update(tis_clip_frac=clip / max(tokens, 1), tis_weight_mean=wmean / max(tokens, 1))
    return rows, stats


def score_turns(policy: Any, turns: list[Any], completions: list[list[int]], *, grad: bool,
                entropy: bool = False) -> Any:
    """Teacher-forced log-probs of ``turns``' completions under ``policy``: from each turn's encoding
    where generation kept one (so a turn is encoded once, however often it is scored), else its chat.
    ``entropy``: also each token's next-token entropy (``extra["entropy"]``; asked for only then, so
    a policy that cannot give it is called as before)."""
    kw = {"entropy": True} if entropy else {}
    if hasattr(policy, "score_encoded") and hasattr(policy, "encoder"):
        return policy.score_encoded([encoded(policy, u.inputs) for u in turns], completions, grad=grad, **kw)
    return policy.score_batch([u.prompt for u in turns], completions, grad=grad, **kw)


def _cluster(idx: list[int], turns: list[Any]) -> list[int]:
    """``idx`` with the turns of one group at one step side by side, clusters in order of first appearance."""
    def key(j: int) -> tuple[Any, Any]:
        return getattr(turns[j], "group_id", j), getattr(turns[j], "step_index", 0)

    first: dict[tuple[Any, Any], int] = {}
    for pos, j in enumerate(idx):
        first.setdefault(key(j), pos)
    return sorted(idx, key=lambda j: first[key(j)])


def _place(mask: torch.Tensor, rows: list[tuple[float, ...]], dtype: torch.dtype) -> torch.Tensor:
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    for b, r in enumerate(rows):
        idx = mask[b].nonzero().flatten()
        if len(idx) != len(r):
            raise RuntimeError(f"{len(r)} behaviour log-probs for {len(idx)} completion tokens")
        out[b, idx] = torch.tensor(r, dtype=dtype, device=mask.device)
    return out


def _group_index(group_id: str) -> int:
    """A stable integer id of a group (``hash`` of a str changes between processes)."""
    return zlib.crc32(group_id.encode()) & 0x7FFFFFFF
