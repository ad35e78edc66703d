"""GRPO and Dr. GRPO: group advantages over G episodes of one (task, seed).

* ``grpo``: episode rewards standardised within their group (mean and std), token-mean loss.
* ``dr_grpo``: the group mean only (no std), and a loss normalised by a constant length
  (``seq_mean_token_sum_norm``), which removes GRPO's length and difficulty biases.

``--advantage step`` gives each turn the group-normalised discounted return from its step on
instead of its episode's advantage; ``--neg-adv-min-scale`` scales negative advantages by the
group's success (:func:`rl.advantages.scale_negative_advantages`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rl import algorithms
from rl.advantages import (
    discounted_returns,
    group_stats,
    grpo_advantages,
    nonzero_variance_mask,
    scale_negative_advantages,
    step_group_advantages,
)
from rl.strategies.base import Batch, Strategy

if TYPE_CHECKING:
    from rl.loop import RolloutResult

__all__ = ["GRPO", "DrGRPO", "group_advantages"]


def group_advantages(result: "RolloutResult", *, normalize_std: bool, advantage: str = "episode",
                     gamma: float = 1.0, neg_adv_min_scale: float = 1.0, filter_zero_variance: bool = True
                     ) -> tuple[list[Any], torch.Tensor, dict[str, float]]:
    """Turns to learn from and their group advantages (one per turn), from the stored step rewards
    only (every reward part, the judge's included, is in them)."""
    trajs = [t for t in result.trajectories if t.status == "completed" and t.group_id]
    short = groups_short_by_aborts(result.trajectories)
    if not trajs:
        return [], torch.zeros(0), {"groups_kept": 0.0, "groups_short": float(short)}
    gids = {g: i for i, g in enumerate(sorted({t.group_id for t in trajs}))}
    ep_reward = torch.tensor([t.total_reward for t in trajs], dtype=torch.float64)
    ep_group = torch.tensor([gids[t.group_id] for t in trajs])
    ep_success = torch.tensor([t.success for t in trajs], dtype=torch.float64)
    keep = (nonzero_variance_mask(ep_reward, ep_group) if filter_zero_variance
            else torch.ones(len(trajs), dtype=torch.bool))
    ep_adv = grpo_advantages(ep_reward, ep_group, normalize_std=normalize_std)
    if neg_adv_min_scale < 1.0:
        group_success, _, _ = group_stats(ep_success, ep_group)
        ep_adv = scale_negative_advantages(ep_adv, group_success, min_scale=neg_adv_min_scale)
    by_episode = {t.episode_id: i for i, t in enumerate(trajs)}
    turns = [u for u in result.turns if u.episode_id in by_episode and keep[by_episode[u.episode_id]]]
    # The update sees groups in one order whichever env finished first (stable within a group).
    turns.sort(key=lambda u: u.group_id)
    if advantage == "episode":
        adv = torch.tensor([float(ep_adv[by_episode[u.episode_id]]) for u in turns])
    else:
        step_ret: dict[tuple[str, int], float] = {}
        for t in trajs:
            r = torch.tensor([[s.reward for s in t.steps]], dtype=torch.float64)
            g = discounted_returns(r, gamma=gamma)[0] if t.steps else r[0]
            for s, v in zip(t.steps, g.tolist()):
                step_ret[(t.episode_id, s.index)] = v
        rets = torch.tensor([step_ret[(u.episode_id, u.step_index)] for u in turns], dtype=torch.float64)
        grp = torch.tensor([gids[u.group_id] for u in turns])
        idx = torch.tensor([u.step_index for u in turns])
        adv = step_group_advantages(rets, grp, idx, normalize_std=normalize_std).float()
    kept_groups = {trajs[i].group_id for i in range(len(trajs)) if keep[i]}
    sizes = {g: sum(t.group_id == g for t in trajs) for g in gids}
    stats = {"groups_kept": float(len(kept_groups)), "groups": float(len(gids)),
             # groups of >= 2 completed episodes left out because their rewards were equal
             "groups_equal": float(sum(1 for g, n in sizes.items() if n >= 2 and g not in kept_groups)),
             # groups that aborted episodes left with fewer than 2 completed ones: nothing to compare
             "groups_short": float(short)}
    return turns, adv, stats


def groups_short_by_aborts(trajectories: Any) -> int:
    """Groups that aborted episodes left with fewer than 2 completed ones."""
    completed: dict[str, int] = {}
    aborted: set[str] = set()
    for t in trajectories:
        if t.group_id:
            completed[t.group_id] = completed.get(t.group_id, 0) + (t.status == "completed")
            if t.status == "aborted":
                aborted.add(t.group_id)
    return sum(1 for g in aborted if completed[g] < 2)


class GRPO(algorithms.GRPO, Strategy):
    """Std-normalised group advantages, token-mean loss."""

    def batch(self, result: "RolloutResult", policy: Any, iteration: int, store: Any = None) -> Batch:
        c = self.cfg.credit
        turns, adv, stats = group_advantages(result, normalize_std=self.normalize_std, advantage=c.advantage,
                                             gamma=c.gamma, neg_adv_min_scale=c.neg_adv_min_scale,
                                             filter_zero_variance=self.cfg.groups.filter_zero_variance)
        return self.finish(turns, adv, stats, result, iteration, store)


class DrGRPO(algorithms.DrGRPO, GRPO):
    """Group-mean advantages (no std), a loss normalised by a constant length."""
