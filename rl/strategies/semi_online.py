"""Semi-online iterations (after UI-S1): step + episode group advantages of replayed episodes.

A replayed episode's turns are the policy's own replies at recorded screens (patched steps are
never trained on); each got a step reward from the matcher (:mod:`rl.replay`). Step returns stop
accumulating at a mismatch; the step-level groups are (group, recorded step), the episode-level
groups the G samples of a recorded episode. Whether the group advantages are divided by their
std follows the run's online algorithm (``grpo``: yes; ``dr_grpo``: no).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rl import algorithms
from rl.advantages import semi_online_advantages, semi_online_returns
from rl.algorithms import algorithm
from rl.strategies.base import Batch, Strategy

if TYPE_CHECKING:
    from rl.config import TrainConfig
    from rl.loop import RolloutResult

__all__ = ["SemiOnline", "semi_online_turn_advantages", "semi_informative_groups"]


def semi_online_turn_advantages(result: "RolloutResult", *, gamma: float = 0.5, step_weight: float = 1.0,
                                episode_weight: float = 1.0, normalize_std: bool = True) -> torch.Tensor:
    """UI-S1's advantages for ``result.turns`` (``[N]``, in the same order).

    Step returns stop accumulating at mismatches (:func:`rl.advantages.semi_online_returns`);
    step-level groups are (group, recorded step index), episode-level groups the G
    samples of a recorded episode, with the episode's total step reward, each episode counted
    once however many turns it has.
    """
    by_ep = {t.episode_id: t for t in result.trajectories}
    eps = sorted({t.episode_id for t in result.turns})
    if not eps:
        return torch.zeros(0)
    T = max(len(by_ep[e].steps) for e in eps)
    rew = torch.zeros(len(eps), T, dtype=torch.float64)
    matched = torch.zeros(len(eps), T, dtype=torch.bool)
    mask = torch.zeros(len(eps), T, dtype=torch.bool)
    for b, e in enumerate(eps):
        for st in by_ep[e].steps:
            rew[b, st.index] = st.reward
            matched[b, st.index] = bool(st.metadata.get("matched", False))
            mask[b, st.index] = True
    ret = semi_online_returns(rew, matched, mask, gamma=gamma)
    ep_total = (rew * mask).sum(1)
    row = {e: b for b, e in enumerate(eps)}
    gids = {g: i for i, g in enumerate(sorted({t.group_id for t in result.turns}))}
    idx = torch.tensor([row[t.episode_id] for t in result.turns])
    steps = torch.tensor([t.step_index for t in result.turns])
    rec_steps = torch.tensor([by_ep[t.episode_id].steps[t.step_index].metadata.get("recorded_index", t.step_index)
                              for t in result.turns])
    return semi_online_advantages(ret[idx, steps], ep_total[idx], torch.tensor([gids[t.group_id] for t in result.turns]),
                                  rec_steps, step_weight=step_weight, episode_weight=episode_weight,
                                  normalize_std=normalize_std, turn_episode=idx).to(torch.float32)


def semi_informative_groups(result: "RolloutResult") -> int:
    """Groups of a semi-online rollout whose samples got different step rewards somewhere (the ones
    its step- and episode-level group advantages learn from)."""
    seen: dict[str, set[tuple[float, ...]]] = {}
    for t in result.trajectories:
        if t.group_id:
            seen.setdefault(t.group_id, set()).add(tuple(round(st.reward, 9) for st in t.steps))
    return sum(len(v) > 1 for v in seen.values())


class SemiOnline(algorithms.SemiOnline, Strategy):
    """The credit of a semi-online iteration; its loss, shaping and defaults are the online algorithm's."""

    def __init__(self, cfg: "TrainConfig", out: Any, state: Any, settings: Any = None):
        super().__init__(cfg, out, state, settings)
        online = algorithm(cfg.algo)
        self.normalize_std = online.normalize_std
        self.default_adv_norm = online.default_adv_norm
        self.default_loss_agg = online.default_loss_agg

    def informative_groups(self, result: "RolloutResult") -> int:
        return semi_informative_groups(result)

    def batch(self, result: "RolloutResult", policy: Any, iteration: int, store: Any = None) -> Batch:
        semi = self.cfg.semi
        adv = semi_online_turn_advantages(result, gamma=semi.gamma, step_weight=semi.step_weight,
                                          episode_weight=semi.episode_weight, normalize_std=self.normalize_std)
        trajs = result.trajectories
        steps = [st for t in trajs for st in t.steps]
        n = max(len(trajs), 1)
        stats = {
            "semi_online": 1.0,
            "semi/match_rate": sum(bool(st.metadata.get("matched")) for st in steps) / max(len(steps), 1),
            "semi/progress": sum(t.metadata.get("progress", 0.0) for t in trajs) / n,
            "semi/patches": sum(t.metadata.get("patches", 0) for t in trajs) / n,
        }
        turns = list(result.turns)
        groups = {t.group_id for t in trajs}
        if self.cfg.groups.filter_zero_variance and turns:
            # as online: a group whose samples all replied alike has no advantage anywhere; its turns
            # would only cost update time (and dilute the loss's mean)
            live = {u.group_id for u, a in zip(turns, adv.tolist()) if abs(a) > 1e-9}
            keep = torch.tensor([u.group_id in live for u in turns], dtype=torch.bool)
            turns, adv = [u for u, k in zip(turns, keep.tolist()) if k], adv[keep]
        kept = {u.group_id for u in turns}
        stats.update({"groups": float(len(groups)), "groups_kept": float(len(kept)),
                      "groups_equal": float(len(groups - kept))})
        return self.finish(turns, adv, stats, result, iteration, store)
