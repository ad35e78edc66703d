"""Typed batches of the environment pool and the errors it raises.

Every call into a pool takes one list of requests and returns one list of
:class:`EnvOutput` in the same order (one controller, coarse workers, typed
batches). Kept apart from :mod:`emulators.pool` so that Ray workers and the
driver share these classes without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from emulators.base import StepInfo
from emulators.snapshot import EnvState
from emulators.base import dead_observation as _dead_frame
from guiagent.types import Action, Observation, ParseError, TaskSpec

__all__ = [
    "ResetRequest", "ActionRequest", "EnvOutput", "SnapshotOutput", "EnvPool", "PoolError", "PoolRequestError",
    "WorkerReplacementError", "PoolStartError", "dead_observation",
]


@dataclass(frozen=True)
class ResetRequest:
    """Start an episode of ``task_id`` with ``seed`` in ``slot``.

    ``max_steps`` overrides the task's step budget; ``targets`` restricts the episode to targets training
    may use (``seen``) or to held-out ones (``unseen``). ``state`` (an
    :class:`~emulators.snapshot.EnvState` of the same task, from :meth:`EnvPool.snapshot` of any
    slot) continues that episode here instead of starting a fresh one: a branch of it.
    """

    slot: int
    task_id: str
    seed: int
    max_steps: int | None = None
    state: EnvState | None = None
    targets: str = "all"
    """which targets the episode may have: all, seen, unseen or renamed
    (:meth:`emulators.base.Task.sample_targets`)"""


@dataclass(frozen=True)
class ActionRequest:
    """Carry out ``action`` in ``slot`` (a :class:`ParseError` executes nothing and is reported back)."""

    slot: int
    action: Action | ParseError


@dataclass(frozen=True)
class EnvOutput:
    """What one slot returns from a reset or a step.

    ``info`` is the step's typed diagnostics (:class:`~emulators.base.StepInfo`): its
    ``success`` (the task's evaluation once the episode ends) and ``milestones`` are the
    only copies; after a reset it holds the initial milestones only.
    ``worker_error`` is set when the worker died or hung during this call, or the
    environment failed in a way that leaves no usable episode (a reset that failed
    twice, an exception in task code): the episode in this slot must be marked
    aborted. The observation is then a 1x1 black frame carrying the reason in
    ``last_action_error``, and ``truncated`` is true so that plain loops stop too.
    The slot works again after a new reset.
    """

    slot: int
    observation: Observation
    spec: TaskSpec | None = None
    terminated: bool = False
    truncated: bool = False
    info: StepInfo = StepInfo()
    worker_error: str | None = None
    worker_id: int = 0

    @property
    def done(self) -> bool:
        """The episode in this slot ended (terminated, truncated or aborted)."""
        return self.terminated or self.truncated or self.worker_error is not None


@dataclass(frozen=True)
class SnapshotOutput:
    """One slot's state (:meth:`EnvPool.snapshot`), or ``error``: why none was taken (the env
    cannot snapshot, no running episode, a dead worker); the episode in the slot goes on either way."""

    slot: int
    state: EnvState | None = None
    error: str | None = None
    worker_id: int = 0


class EnvPool(Protocol):
    """A fixed set of environment slots driven in batches (see ``docs/fleet.md``)."""

    num_slots: int

    def reset(self, requests: Sequence[ResetRequest]) -> list[EnvOutput]: ...

    def step(self, requests: Sequence[ActionRequest]) -> list[EnvOutput]: ...

    # optional: ``step_and_reset(steps, resets) -> (step outputs, reset outputs)``, one batch doing
    # both side by side; the rollout loop uses it where a pool has it (InProcessPool, RayEnvPool)

    def oracle_actions(self, slots: Sequence[int]) -> list[Action | None]: ...

    def snapshot(self, slots: Sequence[int]) -> list[SnapshotOutput]: ...

    def health(self) -> list[bool]: ...

    def close(self) -> None: ...


class PoolError(RuntimeError):
    """Base class of the pool's own errors."""


class PoolRequestError(PoolError, ValueError):
    """A batch the pool cannot run: unknown slot or task, a slot twice, a step without a live episode.

    Raised before anything is sent to a worker, so nothing is lost.
    """


class WorkerReplacementError(PoolError):
    """Workers died more often than ``max_replacements`` allows; the fleet is not healthy."""


class PoolStartError(PoolError):
    """The workers could not be started (missing Chromium, unknown suite, too few Ray CPUs...)."""


def dead_observation(reason: str) -> Observation:
    """A 1x1 black frame standing in for the screen of a dead worker."""
    return _dead_frame(reason, what="worker")


def error_output(slot: int, reason: str, worker_id: int) -> EnvOutput:
    """The output of a slot whose episode was lost."""
    return EnvOutput(slot=slot, observation=dead_observation(reason), truncated=True,
                     worker_error=reason, worker_id=worker_id)
