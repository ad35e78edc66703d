"""Semi-online performance (SOP): recorded episodes replayed once each, without patches.

Progress is the share of recorded steps matched before the first mismatch; success, every step
matched. ``guiagent eval --mode semi-online`` reports both, overall and per task; how they rank
SFT checkpoints against online success: docs/results.md, "Semi-online RL".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from guiagent.types import Trajectory
from rl.agents import TurnPolicy
from rl.match import MatchConfig
from rl.patching import PatchConfig
from rl.replay import run_semi_online

__all__ = ["EpisodeOutcome", "SOPTaskResult", "SOPResult", "sop_from_outcomes", "semi_online_eval"]


@dataclass(frozen=True)
class EpisodeOutcome:
    """One recorded episode replayed without patches: how far the policy got."""

    task_id: str
    recorded_steps: int
    matched_prefix: int

    @property
    def progress(self) -> float:
        return self.matched_prefix / self.recorded_steps if self.recorded_steps else 0.0

    @property
    def success(self) -> bool:
        return self.recorded_steps > 0 and self.matched_prefix == self.recorded_steps


@dataclass(frozen=True)
class SOPTaskResult:
    task_id: str
    episodes: int
    progress: float
    success: float


@dataclass(frozen=True)
class SOPResult:
    """Semi-online performance: mean progress (share of recorded steps matched before the first
    mismatch) and success (every step matched), overall and per task (mean over episodes)."""

    episodes: int
    progress: float
    success: float
    per_task: Mapping[str, SOPTaskResult]
    outcomes: tuple[EpisodeOutcome, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "progress": self.progress, "success": self.success,
                "per_task": {k: v.__dict__ for k, v in self.per_task.items()}}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def sop_from_outcomes(outcomes: Sequence[EpisodeOutcome]) -> SOPResult:
    """Aggregate per-episode outcomes into an :class:`SOPResult` (pure)."""
    by_task: dict[str, list[EpisodeOutcome]] = {}
    for o in outcomes:
        by_task.setdefault(o.task_id, []).append(o)
    per = {k: SOPTaskResult(k, len(v), _mean([o.progress for o in v]), _mean([float(o.success) for o in v]))
           for k, v in sorted(by_task.items())}
    return SOPResult(len(outcomes), _mean([o.progress for o in outcomes]),
                     _mean([float(o.success) for o in outcomes]), per, tuple(outcomes))


def semi_online_eval(policy: TurnPolicy, episodes: Sequence[Trajectory], *, match: MatchConfig = MatchConfig(),
                     store: Any = None, run_id: str | None = None) -> SOPResult:
    """Replay each recorded episode once, without patches (the first mismatch ends it).

    Use a greedy policy for a reproducible figure.
    """
    res = run_semi_online(policy, episodes, group_size=1, patch=PatchConfig(mode="none", budget=0), match=match,
                          store=store, run_id=run_id, keep_turns=False)
    by_src = {t.metadata["recorded_episode"]: t for t in res.trajectories}
    return sop_from_outcomes([EpisodeOutcome(e.task.task_id, len(e.steps),
                                             int(by_src[e.episode_id].metadata["matched_prefix"]))
                              for e in episodes])
