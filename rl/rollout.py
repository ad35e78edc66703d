"""Online rollouts: groups of G episodes per (task, seed), run on an env pool with a policy.

One controller (this process) runs the loop (:class:`rl.loop.RolloutLoop`); the pool's workers
only step envs. :class:`LiveSide` is the loop's side over a pool: it resets slots, steps them in
one batch, composes each step's reward as the episode runs (:mod:`judge.compose`) and reports
what ended. A worker that died mid-call aborts the episodes it held (marked in the store with
the reason); the pool replaces it and the rollout goes on. A slot whose episode ended takes the
next queued episode, so slots stay busy.

Every step is tagged with the policy version that produced it. In async mode the trainer keeps
acting on batches up to ``max_lag`` versions old (see :class:`AsyncRollout`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from emulators.pool import ActionRequest, EnvPool, ResetRequest
from guiagent.types import ParseError, Step
from judge.compose import OnlineRewarder, RewardConfig
from rl.agents import PolicyTurn, TurnPolicy
from rl.loop import Episode, RolloutLoop, RolloutResult, Started, StepOutcome, TrainTurn

if TYPE_CHECKING:
    from judge.settings import RewardJudge

__all__ = ["EpisodeRequest", "TrainTurn", "RolloutResult", "LiveSide", "run_rollout", "make_groups",
           "AsyncRollout", "step_metadata"]


@dataclass(frozen=True)
class EpisodeRequest:
    task_id: str
    seed: int
    group_id: str = ""
    max_steps: int | None = None
    member: int = 0
    """which of its group's G episodes this is (with ``group_id``, the key of its sampling stream)"""
    state: Any = None
    """an :class:`~emulators.snapshot.EnvState` to continue instead of a reset (a branch: ``rl.branch``)"""
    prefix: tuple[Step, ...] = ()
    """the steps before ``state`` (the policy's history in the continuation)"""
    targets: str = "all"
    """which targets the episode may have: all, seen (none held out of training), unseen (a held-out
    one) or renamed (seen, shown under made-up names); :meth:`emulators.base.Task.sample_targets`"""

    @property
    def key(self) -> str:
        return f"{self.group_id}#{self.member}" if self.group_id else f"{self.task_id}:{self.seed}#{self.member}"

    @property
    def metadata(self) -> dict[str, Any]:
        """What the episode's trajectory metadata records about the request."""
        return {"member": self.member}


def step_metadata(target_box: Sequence[float] | None, rejected: Sequence[str] = (),
                  tap_point: Sequence[float] | None = None) -> dict[str, Any]:
    """A live step's metadata: the target element's box when the env reports one, the point an element
    action was carried out at when the device says (the web UI draws it there), and the unparseable replies
    the policy set aside before the one it acted on (``--resample-unparseable``)."""
    meta: dict[str, Any] = {}
    if target_box:
        meta["target_box"] = list(target_box)
    if tap_point:
        meta["tap_point"] = [round(float(v), 5) for v in tap_point]
    if rejected:
        meta["rejected_replies"] = list(rejected)
    return meta


def make_groups(task_ids: Sequence[str], seeds: Sequence[int], group_size: int, *,
                max_steps: int | None = None, tag: str | None = None, targets: str = "all") -> list[EpisodeRequest]:
    """G episodes for every (task, seed) pair, sharing one group id.

    ``tag`` makes the group ids reproducible (``task:seed:tag-k``); without it they are random.
    ``targets``: which targets the episodes may have (``seen``: none held out of training).
    """
    out = []
    for k, (task_id, seed) in enumerate(zip(task_ids, seeds)):
        gid = f"{task_id}:{seed}:{tag}-{k}" if tag is not None else f"{task_id}:{seed}:{uuid.uuid4().hex[:8]}"
        out += [EpisodeRequest(task_id, seed, gid, max_steps, member=m, targets=targets) for m in range(group_size)]
    return out


class LiveSide:
    """The rollout loop's side over an env pool: resets, steps, rewards composed online."""

    def __init__(self, pool: EnvPool, rewards: RewardConfig | None = None, suite: str = ""):
        self.pool, self.rewards, self.suite = pool, rewards or RewardConfig(), suite
        self.num_slots = pool.num_slots
        self._flying: dict[int, Any] = {}  # submitted slots: (episode, turn) of a step, or a start's request

    def agent_name(self, policy: Any) -> str:
        return policy.name

    def start(self, requests: Sequence[tuple[int, EpisodeRequest]]) -> list[Started]:
        """Reset each slot, or restore the state a branch request carries (``rl.branch``)."""
        return self._started(requests, self.pool.reset(self._resets(requests)))

    def step(self, episodes: Sequence[Episode], turns: Sequence[PolicyTurn]) -> list[StepOutcome]:
        self.before_step(episodes, turns)
        outs = self.pool.step([ActionRequest(ep.slot, t.action) for ep, t in zip(episodes, turns)])
        return [self._outcome(ep, turn, out) for ep, turn, out in zip(episodes, turns, outs)]

    @property
    def starts_beside_steps(self) -> bool:
        """Whether :meth:`step_and_start` is one batch of the pool (it has ``step_and_reset``); the
        loop starts freed slots beside the others' step only then (a pool without it steps, then resets)."""
        return callable(getattr(self.pool, "step_and_reset", None))

    def step_and_start(self, episodes: Sequence[Episode], turns: Sequence[PolicyTurn],
                       requests: Sequence[tuple[int, EpisodeRequest]]) -> tuple[list[StepOutcome], list[Started]]:
        """:meth:`step` and :meth:`start` in one batch of the pool where it can (``step_and_reset``):
        the slots that start wait for the same slowest slot as those that step, not for their own."""
        both = getattr(self.pool, "step_and_reset", None)
        if both is None or not episodes or not requests:
            return (self.step(episodes, turns) if episodes else []), (self.start(requests) if requests else [])
        self.before_step(episodes, turns)
        outs, resets = both([ActionRequest(ep.slot, t.action) for ep, t in zip(episodes, turns)],
                            self._resets(requests))
        return ([self._outcome(ep, turn, out) for ep, turn, out in zip(episodes, turns, outs)],
                self._started(requests, resets))

    @property
    def flies(self) -> bool:
        """Whether the pool hands outputs back as they end (``submit``/``collect``): the loop can then act
        on partial batches (``min_batch_share``)."""
        return callable(getattr(self.pool, "submit", None)) and callable(getattr(self.pool, "collect", None))

    def submit(self, episodes: Sequence[Episode], turns: Sequence[PolicyTurn],
               requests: Sequence[tuple[int, EpisodeRequest]]) -> None:
        """Start these steps and starts without waiting for them (:meth:`collect` hands them back)."""
        if episodes:
            self.before_step(episodes, turns)
        self.pool.submit([ActionRequest(ep.slot, t.action) for ep, t in zip(episodes, turns)],  # type: ignore[attr-defined]
                         self._resets(requests))
        for ep, t in zip(episodes, turns):
            self._flying[ep.slot] = (ep, t)
        for s, r in requests:
            self._flying[s] = r

    def collect(self, least: int) -> tuple[list[tuple[int, StepOutcome]], list[tuple[tuple[int, EpisodeRequest], Started]]]:
        """The submitted steps and starts that ended (at least ``least``): each step's outcome by slot,
        each start's request and what it started."""
        steps, starts = [], []
        for out in self.pool.collect(least):  # type: ignore[attr-defined]
            what = self._flying.pop(out.slot)
            if isinstance(what, tuple):
                ep, turn = what
                steps.append((out.slot, self._outcome(ep, turn, out)))
            else:
                req = (out.slot, what)
                starts.append((req, self._started([req], [out])[0]))
        return steps, starts

    def before_step(self, episodes: Sequence[Episode], turns: Sequence[PolicyTurn]) -> None:
        """Called with each batch's episodes and turns before they are stepped (``rl.branch`` captures states)."""

    @staticmethod
    def _resets(requests: Sequence[tuple[int, EpisodeRequest]]) -> list[ResetRequest]:
        return [ResetRequest(s, r.task_id, r.seed, r.max_steps, state=r.state, targets=r.targets)
                for s, r in requests]

    def _started(self, requests: Sequence[tuple[int, EpisodeRequest]], outs: Sequence[Any]) -> list[Started]:
        return [Started(error=str(out.worker_error), observation=out.observation, retry=True)
                if out.worker_error is not None or out.spec is None
                else Started(out.spec, out.observation, OnlineRewarder(self.rewards, out.info.milestones),
                             history=r.prefix)
                for (_, r), out in zip(requests, outs)]

    @staticmethod
    def _outcome(ep: Episode, turn: PolicyTurn, out: Any) -> StepOutcome:
        meta = dict(ep.req.metadata)
        if out.worker_error is not None:
            return StepOutcome(None, end="aborted", reason=f"worker died: {out.worker_error}",
                               final_observation=out.observation, metadata=meta)
        info = out.info
        parse_failed = isinstance(turn.action, ParseError)
        success = float(info.success or 0.0)  # the task's evaluation, once the episode ends
        reward, parts = ep.state.step(task_reward=success, milestones=info.milestones, terminated=out.terminated,
                                      truncated=out.truncated, parse_failed=parse_failed,
                                      action_invalid=info.action_error is not None)
        step = Step(index=len(ep.steps), observation=ep.obs,
                    action=None if parse_failed else turn.action,  # type: ignore[arg-type]
                    response=turn.response, thought=turn.thought,
                    parse_error=turn.action if parse_failed else None,  # type: ignore[arg-type]
                    action_error=info.action_error, reward=reward, reward_parts=parts, milestones=info.milestones,
                    terminated=out.terminated, truncated=out.truncated, policy_version=turn.policy_version,
                    latency_ms=info.elapsed_ms, metadata=step_metadata(info.target_box, turn.rejected, info.tap_point))
        # the policy's history numbers on from what it already holds (a branch's trunk prefix), so a
        # branch's prompts read as a plain rollout's would at that step; the stored step keeps its own index
        seen = step if step.index == len(ep.history) else dataclasses.replace(step, index=len(ep.history))
        res = StepOutcome(step, seen=seen, next_observation=out.observation, final_observation=out.observation,
                          metadata=meta)
        if info.device_error is not None:
            res.end, res.reason = "aborted", f"device error: {info.device_error}"
        elif out.terminated or out.truncated:
            res.end, res.success = "completed", success
        return res


def run_rollout(pool: EnvPool, policy: TurnPolicy, requests: Sequence[EpisodeRequest], *,
                rewards: RewardConfig | None = None, store: Any = None, run_id: str | None = None,
                suite: str = "", keep_turns: bool = True, on_episode: Callable[[Any], None] | None = None,
                judge: "RewardJudge | None" = None, min_batch_share: float = 1.0) -> RolloutResult:
    """Run every requested episode on ``pool`` with ``policy`` (sync mode).

    ``store``/``run_id``: a :class:`guiagent.store.Store` to append steps to as they happen.
    ``judge``: judge each finished episode before its last step is stored (:mod:`rl.loop`;
    :func:`judge.settings.make_judge` builds one). ``min_batch_share`` < 1: act on partial batches
    (:class:`rl.loop.RolloutLoop`). Returns the trajectories (in completion order) and the learner's turns.
    """
    loop = RolloutLoop(LiveSide(pool, rewards, suite), policy, store=store, run_id=run_id, keep_turns=keep_turns,
                       on_episode=on_episode, judge=judge, rewards=rewards, min_batch_share=min_batch_share)
    return loop.run(requests)


class AsyncRollout:
    """Rollouts in a background thread, at most ``max_lag`` policy versions behind the learner.

    ``produce(iteration) -> RolloutResult`` runs in the thread (it acts with the
    rollout-side policy, whose version is stamped on every step); the learner calls
    :meth:`get` for the next result and, after each update, :meth:`set_version`.
    A result produced by a policy more than ``max_lag`` versions older than the
    learner's is dropped (counted in ``dropped``) and the next one is awaited. The
    queue holds at most ``max_lag + 1`` results: back-pressure on the producer.

    The data cursor: :attr:`cursor` is the iteration whose result :meth:`get` returns
    next (one past the last returned, dropped ones skipped), so it runs ahead of the
    learner's iteration count by the number of drops. A resumed run passes the saved
    cursor as ``start_iteration`` and continues with the data that comes next.

    The producer holds :attr:`pool_lock` while it produces; the learner takes it
    (:meth:`paused`) to use the same pool in between, e.g. for a held-out evaluation.
    """

    def __init__(self, produce: Callable[[int], RolloutResult], *, max_lag: int = 1, start_iteration: int = 0):
        self.produce = produce
        self.max_lag = max_lag
        self.learner_version = 0
        self.dropped = 0
        self._q: queue.Queue = queue.Queue(maxsize=max_lag + 1)
        self._stop = threading.Event()
        self._it = start_iteration
        self.cursor = start_iteration
        """the data iteration of the next result :meth:`get` returns (see the class docstring)"""
        self.pool_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="rollout", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self.pool_lock:
                if self._stop.is_set():
                    return
                try:
                    item: Any = (self._it, self.produce(self._it))
                except BaseException as e:  # surfaced to the learner
                    item = e
            self._it += 1
            while not self._stop.is_set():
                try:
                    self._q.put(item, timeout=0.2)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return

    def set_version(self, version: int) -> None:
        self.learner_version = version

    def get(self, timeout: float | None = None) -> RolloutResult:
        while True:
            got = self._q.get(timeout=timeout)
            if isinstance(got, BaseException):
                raise got
            iteration, item = got
            self.cursor = iteration + 1
            versions = [s.policy_version for t in item.trajectories for s in t.steps]
            if versions and self.learner_version - min(versions) > self.max_lag:
                self.dropped += 1
                continue
            return item

    @contextlib.contextmanager
    def paused(self):
        """Hold the producer between two rollouts (the one in flight finishes first)."""
        with self.pool_lock:
            yield

    def close(self, timeout: float = 600.0) -> None:
        """Stop producing; wait for the rollout in flight, so the pool is free afterwards."""
        self._stop.set()
        self._thread.join(timeout=timeout)
