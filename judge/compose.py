"""Rewards of whole episodes and of steps as they happen, from the named reward components.

The components and their weights (:class:`~guiagent.rewards.RewardConfig`, :func:`~guiagent.rewards.combine`,
:func:`~guiagent.rewards.reward_weights`) live in :mod:`guiagent.rewards`, where the web UI reads them too;
they are importable from here as before. This module adds the milestone shaping term (:mod:`judge.progress`):
:func:`episode_rewards` for a finished episode, :class:`OnlineRewarder` step by step.
"""

from __future__ import annotations

from typing import Sequence

from guiagent.rewards import PENALTY_PARTS, RewardConfig, combine, reward_weights, step_parts
from judge.progress import potential, shaping_rewards

__all__ = ["RewardConfig", "step_parts", "combine", "episode_rewards", "OnlineRewarder", "reward_weights",
           "PENALTY_PARTS"]


def episode_rewards(*, final_success: float, milestones_per_state: Sequence[Sequence[bool]],
                    parse_failed: Sequence[bool], action_invalid: Sequence[bool], terminated: bool = True,
                    cfg: RewardConfig, judge_score: float | None = None,
                    bootstrap_potential: float | None = None) -> list[tuple[float, dict[str, float]]]:
    """(reward, parts) for each of the T steps of an episode.

    ``milestones_per_state`` has T+1 entries (after reset, after each step). The
    episode ended after step T, ``terminated`` or truncated alike: the progress
    terms telescope to −Φ(s_0) either way (see :mod:`judge.progress`), so
    ``terminated`` no longer changes any reward; ``bootstrap_potential`` is for a
    learner that bootstraps a truncated episode with a critic.
    """
    T = len(parse_failed)
    if len(action_invalid) != T or len(milestones_per_state) != T + 1:
        raise ValueError("need T parse flags, T invalid flags and T+1 milestone lists")
    del terminated  # kept in the signature for callers; where the episode ended is what matters
    shaping = shaping_rewards(milestones_per_state, gamma=cfg.progress_gamma,
                              bootstrap_potential=bootstrap_potential)
    out = []
    for t in range(T):
        last = t == T - 1
        parts = step_parts(task=final_success if last else 0.0, progress=shaping[t],
                           parse_failed=parse_failed[t], action_invalid=action_invalid[t],
                           judge=judge_score if (last and judge_score is not None) else None, cfg=cfg)
        out.append((combine(parts, cfg), parts))
    return out


class OnlineRewarder:
    """Per-step rewards computed as the episode runs (for stores that append step by step).

    Holds the previous state's potential Φ; each :meth:`step` returns ``(reward, parts)``
    for the transition just taken. Matches :func:`episode_rewards` on whole episodes.
    """

    def __init__(self, cfg: RewardConfig, initial_milestones: Sequence[bool] = ()):
        self.cfg = cfg
        self._potential = potential
        self.phi = potential(initial_milestones)

    def step(self, *, task_reward: float, milestones: Sequence[bool], terminated: bool, truncated: bool,
             parse_failed: bool, action_invalid: bool, judge: float | None = None,
             bootstrap_potential: float | None = None) -> tuple[float, dict[str, float]]:
        cfg = self.cfg
        phi_next = self._potential(milestones)
        if terminated or truncated:  # the episode ends here: Φ = 0 (or a critic's bootstrap potential)
            phi_next = 0.0 if bootstrap_potential is None else float(bootstrap_potential)
        parts = step_parts(task=task_reward if (terminated or truncated) else 0.0,
                           progress=cfg.progress_gamma * phi_next - self.phi, parse_failed=parse_failed,
                           action_invalid=action_invalid, judge=judge, cfg=cfg)
        self.phi = phi_next
        return combine(parts, cfg), parts
