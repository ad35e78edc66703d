"""From a rollout to the learner's batch: which turns to learn from, their advantages, and the
rollout's metrics. The maths are the pure functions of :mod:`rl.advantages`; this module picks
the episodes and turns they apply to.
"""

from __future__ import annotations

from typing import Any

import torch

from rl.config import TrainConfig

__all__ = ["compute_advantages", "rollout_metrics"]


def compute_advantages(cfg: TrainConfig, result: Any, extra: dict[str, float] | None = None
                       ) -> tuple[list[Any], torch.Tensor, dict[str, float]]:
    """Turns to learn from and their advantages (one per turn).

    ``extra`` adds episode-level reward (e.g. the weighted judge score) by episode id.
    """
    extra = extra or {}
    from rl.advantages import (
        discounted_returns, grpo_advantages, group_stats, nonzero_variance_mask, scale_negative_advantages,
        step_group_advantages,
    )

    trajs = [t for t in result.trajectories if t.status == "completed" and t.group_id]
    if not trajs:
        return [], torch.zeros(0), {"groups_kept": 0.0}
    gids = {g: i for i, g in enumerate(sorted({t.group_id for t in trajs}))}
    ep_reward = torch.tensor([t.total_reward + extra.get(t.episode_id, 0.0) for t in trajs], dtype=torch.float64)
    ep_group = torch.tensor([gids[t.group_id] for t in trajs])
    ep_success = torch.tensor([t.success for t in trajs], dtype=torch.float64)
    keep = nonzero_variance_mask(ep_reward, ep_group) if cfg.filter_zero_variance else torch.ones(len(trajs), dtype=torch.bool)
    normalize = cfg.algo == "grpo"
    ep_adv = grpo_advantages(ep_reward, ep_group, normalize_std=normalize)
    if cfg.neg_adv_min_scale < 1.0:
        group_success, _, _ = group_stats(ep_success, ep_group)
        ep_adv = scale_negative_advantages(ep_adv, group_success, min_scale=cfg.neg_adv_min_scale)
    by_episode = {t.episode_id: i for i, t in enumerate(trajs)}
    turns = [u for u in result.turns if u.episode_id in by_episode and keep[by_episode[u.episode_id]]]
    # The update sees groups in one order whichever env finished first (stable within a group).
    turns.sort(key=lambda u: u.group_id)
    if cfg.advantage == "episode":
        adv = torch.tensor([float(ep_adv[by_episode[u.episode_id]]) for u in turns])
    else:
        step_ret: dict[tuple[str, int], float] = {}
        for t in trajs:
            r = torch.tensor([[s.reward for s in t.steps]], dtype=torch.float64)
            if t.steps:  # the judge's reward lands on the last step, as the task's does
                r[0, -1] += extra.get(t.episode_id, 0.0)
            g = discounted_returns(r, gamma=cfg.gamma)[0] if t.steps else r[0]
            for s, v in zip(t.steps, g.tolist()):
                step_ret[(t.episode_id, s.index)] = v
        rets = torch.tensor([step_ret[(u.episode_id, u.step_index)] for u in turns], dtype=torch.float64)
        grp = torch.tensor([gids[u.group_id] for u in turns])
        idx = torch.tensor([u.step_index for u in turns])
        adv = step_group_advantages(rets, grp, idx, normalize_std=normalize).float()
    stats = {"groups_kept": float(len({trajs[i].group_id for i in range(len(trajs)) if keep[i]})),
             "groups": float(len(gids))}
    return turns, adv, stats


def rollout_metrics(result: Any) -> dict[str, float]:
    trajs = [t for t in result.trajectories if t.status == "completed"]
    steps = [s for t in trajs for s in t.steps]
    m: dict[str, float] = {
        "success_rate": sum(t.success for t in trajs) / max(len(trajs), 1),
        "reward_mean": sum(t.total_reward for t in trajs) / max(len(trajs), 1),
        "episode_length": len(steps) / max(len(trajs), 1),
        "parse_error_rate": sum(s.parse_error is not None for s in steps) / max(len(steps), 1),
        "aborted": float(result.aborted), "env_steps_per_s": result.steps_per_second,
        "rollout_seconds": result.wall_seconds,
    }
    for name in sorted({k for s in steps for k in s.reward_parts}):
        m[f"reward/{name}"] = sum(s.reward_parts.get(name, 0.0) for s in steps) / max(len(trajs), 1)
    lps = [lp for u in result.turns for lp in u.old_logprobs]
    if lps:  # −E[log π(a)] over sampled tokens: a Monte-Carlo estimate of the policy's entropy
        m["entropy"] = -sum(lps) / len(lps)
    return m
