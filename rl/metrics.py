"""From a rollout to the learner's batch: which turns to learn from, their advantages, and the
rollout's metrics. The maths are the pure functions of :mod:`rl.advantages`; this module picks
the episodes and turns they apply to.
"""

from __future__ import annotations

from typing import Any

import torch

from rl.config import TrainConfig

__all__ = ["compute_advantages", "rollout_metrics", "no_update_reason"]


def compute_advantages(cfg: TrainConfig, result: Any) -> tuple[list[Any], torch.Tensor, dict[str, float]]:
    """Turns to learn from and their advantages (one per turn), from the stored step rewards only
    (every reward part, the judge's included, is in them)."""
    from rl.advantages import (
        discounted_returns, grpo_advantages, group_stats, nonzero_variance_mask, scale_negative_advantages,
        step_group_advantages,
    )

    trajs = [t for t in result.trajectories if t.status == "completed" and t.group_id]
    short = _groups_short_by_aborts(result.trajectories)
    if not trajs:
        return [], torch.zeros(0), {"groups_kept": 0.0, "groups_short": float(short)}
    gids = {g: i for i, g in enumerate(sorted({t.group_id for t in trajs}))}
    ep_reward = torch.tensor([t.total_reward for t in trajs], dtype=torch.float64)
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
            g = discounted_returns(r, gamma=cfg.gamma)[0] if t.steps else r[0]
            for s, v in zip(t.steps, g.tolist()):
                step_ret[(t.episode_id, s.index)] = v
        rets = torch.tensor([step_ret[(u.episode_id, u.step_index)] for u in turns], dtype=torch.float64)
        grp = torch.tensor([gids[u.group_id] for u in turns])
        idx = torch.tensor([u.step_index for u in turns])
        adv = step_group_advantages(rets, grp, idx, normalize_std=normalize).float()
    kept_groups = {trajs[i].group_id for i in range(len(trajs)) if keep[i]}
    sizes = {g: sum(t.group_id == g for t in trajs) for g in gids}
    stats = {"groups_kept": float(len(kept_groups)), "groups": float(len(gids)),
             # groups of >= 2 completed episodes left out because their rewards were equal
             "groups_equal": float(sum(1 for g, n in sizes.items() if n >= 2 and g not in kept_groups)),
             # groups that aborted episodes left with fewer than 2 completed ones: nothing to compare
             "groups_short": float(short)}
    return turns, adv, stats


def _groups_short_by_aborts(trajectories: Any) -> int:
    completed: dict[str, int] = {}
    aborted: set[str] = set()
    for t in trajectories:
        if t.group_id:
            completed[t.group_id] = completed.get(t.group_id, 0) + (t.status == "completed")
            if t.status == "aborted":
                aborted.add(t.group_id)
    return sum(1 for g in aborted if completed[g] < 2)


def no_update_reason(m: dict[str, float]) -> str:
    """Why an iteration made no update, from its metrics: aborted episodes are named as such,
    never counted among the groups whose episodes got equal rewards."""
    if m.get("critic_warmup"):
        ev = f" (explained variance {m['explained_variance']:.2f})" if "explained_variance" in m else ""
        return "critic warm-up, the actor waits" + ev
    reasons = []
    aborted, short = int(m.get("aborted", 0)), int(m.get("groups_short", 0))
    if aborted:
        left = f", leaving {short} group(s) with fewer than 2 completed episodes" if short else ""
        reasons.append(f"{aborted} episode(s) aborted{left}")
    equal = int(m.get("groups_equal", 0))
    if equal:
        reasons.append(f"{equal} group(s) got equal rewards")
    return "; ".join(reasons) or "no completed episode"


def rollout_metrics(result: Any, suites: Any = ()) -> dict[str, float]:
    """The rollout's metrics; ``suites``: a mixed run's suites, each also measured on its own."""
    trajs = [t for t in result.trajectories if t.status == "completed"]
    steps = [s for t in trajs for s in t.steps]
    m: dict[str, float] = {
        "success_rate": sum(t.success for t in trajs) / max(len(trajs), 1),
        "reward_mean": sum(t.total_reward for t in trajs) / max(len(trajs), 1),
        "episode_length": len(steps) / max(len(trajs), 1),
        "parse_error_rate": sum(s.parse_error is not None for s in steps) / max(len(steps), 1),
        "resampled_rate": sum(bool(s.metadata.get("rejected_replies")) for s in steps) / max(len(steps), 1),
        "aborted": float(result.aborted), "env_steps_per_s": result.steps_per_second,
        "rollout_seconds": result.wall_seconds,
    }
    for name in sorted({k for s in steps for k in s.reward_parts}):
        m[f"reward/{name}"] = sum(s.reward_parts.get(name, 0.0) for s in steps) / max(len(trajs), 1)
    m.update(suite_metrics(result.trajectories, suites))
    lps = [lp for u in result.turns for lp in u.old_logprobs]
    if lps:  # −E[log π(a)] over sampled tokens: a Monte-Carlo estimate of the policy's entropy
        m["entropy"] = -sum(lps) / len(lps)
    return m


def suite_metrics(trajectories: Any, suites: Any) -> dict[str, float]:
    """A mixed run's metrics per suite (``suite/<name>/episodes``, ``aborted``, and with completed
    episodes ``success_rate`` and ``reward_mean``); nothing for a run over one suite."""
    suites = [s.strip() for s in suites if s.strip()]
    if len(suites) < 2:
        return {}
    by: dict[str, list[Any]] = {s: [] for s in suites}
    for t in trajectories:
        # an episode aborted at its reset carries the run's env and the qualified task id
        suite = t.task.suite if "," not in t.task.suite else t.task.task_id.partition(".")[0]
        by.setdefault(suite, []).append(t)
    m: dict[str, float] = {}
    for suite, ts in by.items():
        done = [t for t in ts if t.status == "completed"]
        m[f"suite/{suite}/episodes"] = float(len(done))
        m[f"suite/{suite}/aborted"] = float(len(ts) - len(done))
        if done:
            m[f"suite/{suite}/success_rate"] = sum(t.success for t in done) / len(done)
            m[f"suite/{suite}/reward_mean"] = sum(t.total_reward for t in done) / len(done)
    return m
