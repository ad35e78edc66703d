"""Typed values the store returns, and the episode filter readers pass in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from guiagent.types import Action, Mark, Observation, ParseError

__all__ = [
    "RunInfo", "EpisodeSummary", "StepRecord", "StepCredit", "JudgementRecord", "EpisodeDetail", "MetricPoint",
    "EpisodeFilter", "EpisodePage", "TaskStats", "SORT_KEYS", "SUCCESS_THRESHOLD", "RunStatus", "SortKey",
]

#: an episode counts as a success (outcome filter, judge disagreement) when ``success >= 0.5``
SUCCESS_THRESHOLD = 0.5

#: ``interrupted``: its writer died (killed, crashed host) before it finished. A reader reports a
#: ``running`` run whose writer is gone as ``interrupted`` before any writer has recorded it so.
RunStatus = Literal["running", "finished", "failed", "interrupted"]
SortKey = Literal["started", "ended", "reward", "length", "success"]
#: sort key -> episodes column
SORT_KEYS: Mapping[str, str] = {
    "started": "started_at",
    "ended": "ended_at",
    "reward": "total_reward",
    "length": "num_steps",
    "success": "success",
}


@dataclass(frozen=True)
class RunInfo:
    """One run with counts over its visible (completed or aborted) episodes."""

    run_id: str
    name: str
    env: str
    algo: str
    model: str
    config: Mapping[str, Any]
    status: RunStatus
    created_at: float
    updated_at: float
    num_episodes: int = 0
    num_completed: int = 0
    num_aborted: int = 0
    num_success: int = 0
    mean_reward: float | None = None
    writer_host: str | None = None
    """host of the process that created (or last resumed) the run"""
    writer_pid: int | None = None
    heartbeat: float | None = None
    """time of the last write into the run"""


@dataclass(frozen=True)
class EpisodeSummary:
    """An episode without its steps: one row of the episode list.

    ``policy_version_min``/``_max`` span the policy versions of its steps (equal for
    an on-policy episode, ``None`` with no steps).
    """

    episode_id: str
    run_id: str
    group_id: str | None
    suite: str
    task_id: str
    seed: int
    goal: str
    max_steps: int
    params: Mapping[str, Any]
    agent: str
    policy_version_min: int | None
    policy_version_max: int | None
    status: Literal["completed", "aborted"]
    abort_reason: str | None
    success: float
    total_reward: float
    num_steps: int
    num_parse_errors: int
    started_at: float
    ended_at: float | None
    metadata: Mapping[str, Any]

    @property
    def succeeded(self) -> bool:
        return self.success >= SUCCESS_THRESHOLD


@dataclass(frozen=True)
class StepRecord:
    """One step as stored: the observation's fields flattened, pixels as a blob ref.

    ``screenshot_ref`` is the sha256 of the screenshot bytes (``None`` when the step
    had no screenshot); fetch them with ``StoreReader.read_blob`` or serve
    ``StoreReader.blob_path``.
    """

    episode_id: str
    index: int
    screenshot_ref: str | None
    width: int
    height: int
    tree: str | None
    url: str | None
    last_action_error: str | None
    response: str
    thought: str
    action: Action | None
    parse_error: ParseError | None
    action_error: str | None
    reward: float
    reward_parts: Mapping[str, float]
    milestones: tuple[bool, ...]
    terminated: bool
    truncated: bool
    policy_version: int
    latency_ms: float
    metadata: Mapping[str, Any] = field(default_factory=dict)
    marks: tuple[Mark, ...] | None = None
    """the observation's numbered elements (``Observation.marks``), ``None`` when it had none"""


@dataclass(frozen=True)
class JudgementRecord:
    """A judge's verdict on an episode (``step is None``) or on one step."""

    judgement_id: int
    episode_id: str
    step: int | None
    judge: str
    score: float | None
    verdict: Mapping[str, Any]
    reason: str
    created_at: float


@dataclass(frozen=True)
class StepCredit:
    """The credit a trainer gave one step in one iteration (``Store.add_step_credit``)."""

    episode_id: str
    index: int
    iteration: int
    algo: str
    advantage: float
    value: float | None
    ret: float | None
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EpisodeDetail:
    """One episode with its steps (no pixels), judgements and per-component reward totals."""

    summary: EpisodeSummary
    steps: tuple[StepRecord, ...]
    judgements: tuple[JudgementRecord, ...]
    reward_totals: Mapping[str, float]
    final_observation: Observation | None


@dataclass(frozen=True)
class TaskStats:
    """Per-task counts over the visible episodes of a run."""

    suite: str
    task_id: str
    num_episodes: int
    num_success: int
    mean_reward: float
    mean_length: float


@dataclass(frozen=True)
class MetricPoint:
    iteration: int
    value: float
    time: float


@dataclass(frozen=True)
class EpisodeFilter:
    """Which visible episodes to list or count. ``None`` means no constraint.

    ``outcome``: ``success`` is ``success >= SUCCESS_THRESHOLD``, ``failure`` the rest.
    ``policy_version``: episodes with a step of that version. ``disagreement``: True
    keeps episodes where some episode-level judgement (of ``judge`` if given)
    disagrees with the rule outcome (score >= threshold vs success >= threshold),
    False keeps judged episodes where none disagrees. ``judged`` keeps episodes with
    (True) or without (False) an episode-level judgement.
    """

    run_id: str | None = None
    task_id: str | None = None
    suite: str | None = None
    outcome: Literal["success", "failure"] | None = None
    status: Literal["completed", "aborted"] | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    policy_version: int | None = None
    agent: str | None = None
    group_id: str | None = None
    seed: int | None = None
    judge: str | None = None
    judged: bool | None = None
    disagreement: bool | None = None
    episode_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.outcome not in (None, "success", "failure"):
            raise ValueError(f"outcome must be 'success', 'failure' or None, got {self.outcome!r}")
        if self.status not in (None, "completed", "aborted"):
            raise ValueError(f"status must be 'completed', 'aborted' or None (in-progress episodes are "
                             f"never visible), got {self.status!r}")
        for lo, hi in (("min_reward", "max_reward"), ("min_length", "max_length")):
            a, b = getattr(self, lo), getattr(self, hi)
            if a is not None and b is not None and a > b:
                raise ValueError(f"{lo}={a} is greater than {hi}={b}")


@dataclass(frozen=True)
class EpisodePage:
    """One page of the episode list. ``next_cursor`` is ``None`` on the last page."""

    items: tuple[EpisodeSummary, ...]
    next_cursor: str | None = None
