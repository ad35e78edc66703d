"""Named reward components and their weights: what a step stores and how its reward is summed.

Every component is stored per step (``Step.reward_parts``) so the web UI and the
trainer read the same numbers; ``Step.reward`` is their weighted sum.

Components produced by the rollout loop:

``task``      the task's own evaluation, on the step that ends the episode (0 before)
``progress``  potential-based milestone shaping (:mod:`judge.progress`)
``parse``     penalty when the model's text did not parse (a negative number)
``invalid``   penalty when the device rejected the action (off-screen, nothing focused, ...)
``step``      a per-step cost (0 by default)
``judge``     a VLM judge's score on the final step, when a judge is configured
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["RewardConfig", "step_parts", "combine", "reward_weights", "PENALTY_PARTS"]

#: components that count as they are (weight 1): signed penalties
PENALTY_PARTS = ("parse", "invalid", "step")


@dataclass(frozen=True)
class RewardConfig:
    """Weights and penalties of the reward components."""

    task: float = 1.0
    """weight of the task's own success in [0, 1]"""
    progress: float = 0.0
    """weight of potential-based milestone shaping (0 turns it off)"""
    progress_gamma: float = 1.0
    """γ of the shaping term F = γΦ(s') − Φ(s)"""
    progress_terminal_zero: bool = True
    """Φ = 0 where an episode ends, terminated or truncated (always: see judge.progress); kept so that
    stored configs load, False is refused"""
    parse_penalty: float = -0.1
    """reward added on a step whose model output did not parse"""
    invalid_penalty: float = -0.05
    """reward added on a step whose action the device rejected"""
    step_penalty: float = 0.0
    """reward added on every step (a small negative value favours short episodes)"""
    judge: float = 0.0
    """weight of the VLM judge's score on the final step in :func:`combine`; a rollout with a judge
    (``run_rollout(judge=...)``) sets it from ``JudgeSettings.weight``, so configs leave it at 0"""

    def __post_init__(self) -> None:
        if self.parse_penalty > 0 or self.invalid_penalty > 0 or self.step_penalty > 0:
            raise ValueError("penalties must be <= 0 (they are added to the reward)")
        if not 0.0 < self.progress_gamma <= 1.0:
            raise ValueError("progress_gamma must lie in (0, 1]")
        if not self.progress_terminal_zero:
            raise ValueError("progress_terminal_zero=False kept the potential of the last state, which "
                             "pays an agent for stalling at a milestone; remove the setting (Φ is 0 where "
                             "episodes end)")

    def weights(self) -> dict[str, float]:
        """Each stored component's weight in :func:`combine` (penalties count as they are: 1)."""
        return {"task": self.task, "progress": self.progress, "judge": self.judge,
                **{p: 1.0 for p in PENALTY_PARTS}}


def step_parts(*, task: float = 0.0, progress: float = 0.0, parse_failed: bool = False,
               action_invalid: bool = False, judge: float | None = None,
               cfg: RewardConfig) -> dict[str, float]:
    """The raw (unweighted) components of one step, penalties already signed."""
    parts = {
        "task": float(task),
        "progress": float(progress),
        "parse": cfg.parse_penalty if parse_failed else 0.0,
        "invalid": cfg.invalid_penalty if action_invalid else 0.0,
        "step": cfg.step_penalty,
    }
    if judge is not None:
        parts["judge"] = float(judge)
    return parts


def combine(parts: Mapping[str, float], cfg: RewardConfig) -> float:
    """Weighted sum: task and progress and judge carry weights; penalties count as they are."""
    return (cfg.task * parts.get("task", 0.0) + cfg.progress * parts.get("progress", 0.0)
            + cfg.judge * parts.get("judge", 0.0) + parts.get("parse", 0.0)
            + parts.get("invalid", 0.0) + parts.get("step", 0.0))


def reward_weights(config: Mapping[str, Any] | None) -> dict[str, float]:
    """The weight of each stored reward component, from a run's stored config (a plain mapping).

    Reads the ``rewards`` section (:class:`RewardConfig` fields; missing ones take
    their defaults) and, when the config has a ``judge`` section
    (:class:`judge.settings.JudgeSettings`) with a model, the judge's weight from
    it (0 in ``log`` mode). Penalties (``parse``, ``invalid``, ``step``) weigh 1.
    What the web UI shows beside every reward part; never raises on odd input.
    """
    cfg = config if isinstance(config, Mapping) else {}
    section = cfg.get("rewards") if isinstance(cfg.get("rewards"), Mapping) else {}
    defaults = RewardConfig()

    def number(value: Any, default: float) -> float:
        try:
            return float(value)
        except (TypeError, ValueError):
            return default

    out = {"task": number(section.get("task"), defaults.task),
           "progress": number(section.get("progress"), defaults.progress),
           "judge": number(section.get("judge"), defaults.judge),
           **{p: 1.0 for p in PENALTY_PARTS}}
    judge = cfg.get("judge")
    if isinstance(judge, Mapping) and judge.get("model"):
        out["judge"] = 0.0 if judge.get("mode") == "log" else number(judge.get("weight"), 0.0)
    return out
