"""The one rollout loop: episodes in slots, one policy batch a turn, steps recorded and stored.

:class:`RolloutLoop` runs requested episodes on a *side*: live envs of a pool
(:class:`rl.rollout.LiveSide`: online RL, evaluation) or recorded episodes replayed with the
policy's own history (:class:`rl.replay.ReplaySide`: semi-online RL, SOP). The loop owns what
both share; the side owns where screens and outcomes come from::

    start    the side starts episodes in free slots (a reset, or a recorded episode's first screen)
    step     one act_batch over every busy slot, then the side's step over the same slots; each
             outcome's step is recorded (the learner's turn beside it) and stored. A side with
             ``step_and_start`` (a live pool that has ``step_and_reset``) starts the free slots in
             the same batch, so a turn waits once for its slowest slot, not once for the steps and
             again for the resets; the slots a step frees start with the next turn's step
    judge    a finished episode goes to the judge (when there is one) before its last step is stored
    close    the episode is completed or aborted in the store; its slot starts the next request

On partial batches (``min_batch_share`` < 1, a side with ``submit``/``collect``: a live pool that
hands outputs back as they end) there are no turns: the policy acts on the slots whose outcome is
back as soon as that share of the slots in flight are back, and submits their steps (and the freed
slots' starts) while the others' pages still settle (:meth:`RolloutLoop.run_partial`); the calls in
flight move on while the loop waits for outcomes, not while the policy computes (one thread drives
an in-process pool's pages). Episodes, their steps and the store are the same; only which slots
share a policy batch changes.

Every phase runs under a named timer (``RolloutResult.*_seconds``). A step's reward lives on the
:class:`~guiagent.types.Step` only; a :class:`TrainTurn` names its step and never copies it, so
the judge's part, added to the last step, is what the learner sees.

With a judge (``judge=``, a :class:`judge.settings.RewardJudge`), finished episodes go to the
judge in batches (all those waiting, whenever one of its worker threads is free) while the freed
slots start new episodes; when the verdicts come back (or the judge's timeout passes), the
weighted score joins the last step's ``reward_parts["judge"]`` and ``reward``, the step is
written, the verdict is stored as a judgement beside the rule outcome, and the episode is
completed. A missing verdict (timeout, garbage, rate limit, spent budget) is recorded as
missing with its reason; the episode keeps its rule reward (``RolloutResult.judge_missing``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from guiagent.types import Observation, ParseError, Step, TaskSpec, Trajectory
from judge.compose import RewardConfig, combine
from judge.vlm import missing_kind, store_verdict
from rl.agents import PolicyTurn, TurnContext, TurnPolicy

if TYPE_CHECKING:
    from judge.settings import RewardJudge

__all__ = ["TrainTurn", "RolloutResult", "RolloutLoop", "Side", "Started", "StepOutcome", "Episode"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainTurn:
    """One sampled turn, ready for the learner. Its reward is its step's (``Step.reward``)."""

    group_id: str
    episode_id: str
    step_index: int
    prompt: Any
    completion_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    policy_version: int
    parse_ok: bool
    encoded: Any = None
    """the prompt as model inputs, as generation encoded it (None: the learner encodes ``prompt``)"""

    @property
    def inputs(self) -> Any:
        """What to score: the generation's encoding when there is one, else the chat."""
        return self.encoded if self.encoded is not None else self.prompt


@dataclass
class RolloutResult:
    trajectories: list[Trajectory] = field(default_factory=list)
    turns: list[TrainTurn] = field(default_factory=list)
    env_seconds: float = 0.0
    policy_seconds: float = 0.0
    store_seconds: float = 0.0
    wall_seconds: float = 0.0
    env_steps: int = 0
    aborted: int = 0
    verdicts: dict[str, Any] = field(default_factory=dict)
    """judge verdicts by episode id (:class:`judge.vlm.Verdict`), missing ones included"""
    judge_missing: int = 0
    """judged episodes whose verdict is missing (they kept their rule reward)"""
    judge_missing_reasons: dict[str, int] = field(default_factory=dict)
    """missing verdicts by reason: budget, rate_limit, timeout, garbage, backend, input"""
    judge_seconds: float = 0.0
    """time the rollout waited for verdicts after its last episode ended"""

    @property
    def steps_per_second(self) -> float:
        return self.env_steps / self.wall_seconds if self.wall_seconds else 0.0

    def extend(self, other: "RolloutResult") -> "RolloutResult":
        """Append another rollout's episodes, turns and timings (one iteration sampled in rounds)."""
        self.trajectories += other.trajectories
        self.turns += other.turns
        for name in ("env_seconds", "policy_seconds", "store_seconds", "wall_seconds", "env_steps", "aborted",
                     "judge_missing", "judge_seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.verdicts.update(other.verdicts)
        for k, n in other.judge_missing_reasons.items():
            self.judge_missing_reasons[k] = self.judge_missing_reasons.get(k, 0) + n
        return self

    def informative_groups(self) -> int:
        """Groups whose completed episodes got different rewards (the ones GRPO learns from)."""
        rewards: dict[str, set[float]] = {}
        for t in self.trajectories:
            if t.group_id and t.status == "completed":
                rewards.setdefault(t.group_id, set()).add(round(t.total_reward, 9))
        return sum(len(r) > 1 for r in rewards.values())

    def reward_of(self, turn: TrainTurn) -> float:
        """The stored reward of ``turn``'s step."""
        for t in self.trajectories:
            if t.episode_id == turn.episode_id:
                return t.steps[turn.step_index].reward
        raise KeyError(f"no episode {turn.episode_id} in this rollout")


@dataclass
class Started:
    """A side's answer to starting one request: the episode's spec, first screen and own state;
    or ``error`` (nothing to run: the loop tries again once when ``retry``, then records it aborted)."""

    spec: TaskSpec | None = None
    observation: Observation | None = None
    state: Any = None
    error: str | None = None
    retry: bool = False
    history: tuple[Step, ...] = ()
    """steps the policy has seen before this episode's first (a branch's trunk prefix)"""


@dataclass
class StepOutcome:
    """What one step did. ``step`` is stored (None: the worker died, nothing is recorded); ``seen``
    is what the policy's history gets (the step itself, or the recorded action a patch put in
    its place; None: nothing); ``end`` closes the episode (``completed`` or ``aborted``)."""

    step: Step | None
    seen: Step | None = None
    next_observation: Observation | None = None
    end: str = ""
    success: float = 0.0
    reason: str | None = None
    final_observation: Observation | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    """merged into the trajectory's metadata when the episode ends"""


@dataclass
class Episode:
    """One episode in flight in a slot."""

    req: Any
    spec: TaskSpec
    obs: Observation
    episode_id: str
    slot: int = 0
    state: Any = None
    writer: Any = None
    steps: list[Step] = field(default_factory=list)
    history: list[Step] = field(default_factory=list)
    turns: list[TrainTurn] = field(default_factory=list)


class Side(Protocol):
    """Where a rollout's screens and outcomes come from (see the module docstring)."""

    num_slots: int
    suite: str

    def agent_name(self, policy: Any) -> str: ...

    def start(self, requests: Sequence[tuple[int, Any]]) -> list[Started]: ...

    def step(self, episodes: Sequence[Episode], turns: Sequence[PolicyTurn]) -> list[StepOutcome]: ...

    # optional, for a loop on partial batches (``flies`` true): ``submit(episodes, turns, requests)``
    # starts steps and starts without waiting; ``collect(least)`` returns ``([(slot, StepOutcome)],
    # [((slot, request), Started)])`` of those that ended (rl.rollout.LiveSide has them)


@dataclass
class _Judging:
    """A batch of finished episodes waiting for their verdicts."""

    episodes: list[tuple[Episode, Trajectory]]
    future: Any
    deadline: float


_TURNS_NOTED: set[str] = set()


def _note_turns(side: Any) -> None:
    """Say once a process, per kind of pool, that a loop asked for partial batches takes turns."""
    kind = type(getattr(side, "pool", side)).__name__
    if kind not in _TURNS_NOTED:
        _TURNS_NOTED.add(kind)
        log.warning("min_batch_share < 1 asks for partial batches, but a %s hands back whole batches only "
                    "(it has no submit/collect): the rollout loop takes turns", kind)


class RolloutLoop:
    """Run requested episodes on ``side`` with ``policy`` (see the module docstring).

    ``store``/``run_id``: a :class:`guiagent.store.Store` to write episodes to as they run.
    ``keep_turns``: collect the learner's turns. ``on_episode``: called with each finished
    trajectory. ``judge``: judge each finished episode before its last step is stored; ``rewards``
    combines its score with the step's other parts.
    """

    def __init__(self, side: Side, policy: TurnPolicy, *, store: Any = None, run_id: str | None = None,
                 keep_turns: bool = True, on_episode: Callable[[Trajectory], None] | None = None,
                 judge: "RewardJudge | None" = None, rewards: RewardConfig | None = None,
                 min_batch_share: float = 1.0):
        if store is not None and run_id is None:
            raise ValueError("a store needs a run_id")
        if not 0.0 < min_batch_share <= 1.0:
            raise ValueError(f"min_batch_share must be in (0, 1], got {min_batch_share}")
        self.min_batch_share = min_batch_share
        self.side, self.policy, self.store, self.run_id = side, policy, store, run_id
        self.keep_turns, self.on_episode, self.judge = keep_turns, on_episode, judge
        rewards = rewards or RewardConfig()
        self.judged_rewards = dataclasses.replace(rewards, judge=judge.weight) if judge is not None else rewards
        self.agent = side.agent_name(policy)

    # ---- the loop ---------------------------------------------------------------------------------

    def run(self, requests: Sequence[Any]) -> RolloutResult:
        """Every request's episode, run to its end; the trajectories in the order they ended."""
        self.res = res = RolloutResult()
        t_wall = time.perf_counter()
        self.pending = list(requests)[::-1]
        self.live: dict[int, Episode] = {}
        self.retried: set[int] = set()
        self.judging: list[_Judging] = []                 # batches in flight on the judge's threads
        self.waiting: list[tuple[Episode, Trajectory]] = []  # finished episodes not yet sent
        both = getattr(self.side, "step_and_start", None)
        if not getattr(self.side, "starts_beside_steps", both is not None):
            both = None  # its step and start are two batches anyway: start the freed slots right after
        if self.min_batch_share < 1.0 and getattr(self.side, "flies", False):
            self.run_partial()
        elif self.min_batch_share < 1.0 and hasattr(self.side, "flies"):
            _note_turns(self.side)
        while self.live or self.pending:
            if both is not None and self.live:  # the free slots start in the batch of the others' step
                self.step(both)
            else:  # a step, then the free slots start (freed by it, or never started)
                if self.live:
                    self.step()
                self.start([s for s in range(self.side.num_slots) if s not in self.live])
            if self.judging:  # the judge works on its own threads while the freed slots start new episodes
                self.collect(block=False)
            if self.waiting:
                self.dispatch()
        t_judge = time.perf_counter()
        while self.judging or self.waiting:
            self.dispatch()
            self.collect(block=True)
        res.judge_seconds += time.perf_counter() - t_judge
        res.wall_seconds = time.perf_counter() - t_wall
        return res

    def run_partial(self) -> None:
        """The loop on partial batches: the policy acts on the slots whose outcome is back as soon as
        ``min_batch_share`` of the slots in flight are back; the others go on meanwhile (the side's
        ``submit``/``collect``). Slots freed start their next request in the same submission."""
        flying: dict[int, PolicyTurn | None] = {}  # slot -> the turn it steps (None: it starts)
        try:
            self._partial_turns(flying)
        except BaseException:
            if flying:  # the policy or the store failed: let the calls in flight end, so the pool is free
                try:
                    self.side.collect(len(flying))  # type: ignore[attr-defined]
                except Exception as e:  # the pool itself failed: nothing more to wait for
                    log.warning("the calls in flight could not end after the loop failed: %s", e)
            raise

    def _partial_turns(self, flying: dict[int, PolicyTurn | None]) -> None:
        while self.live or self.pending or flying:
            ready = [s for s in sorted(self.live) if s not in flying]
            reqs = self.take([s for s in range(self.side.num_slots) if s not in self.live and s not in flying])
            eps = [self.live[s] for s in ready]
            turns: Sequence[PolicyTurn] = []
            if eps:
                ctxs = [TurnContext(ep.spec, tuple(ep.history), ep.obs, s, ep.req.key) for s, ep in zip(ready, eps)]
                turns = self.timed("policy_seconds", self.policy.act_batch, ctxs, getattr(self.side, "pool", None))
            if eps or reqs:
                self.timed("env_seconds", self.side.submit, eps, turns, reqs)  # type: ignore[attr-defined]
            flying.update(zip(ready, turns))
            flying.update((s, None) for s, _ in reqs)
            if not flying:
                break
            least = max(1, math.ceil(self.min_batch_share * len(flying)))
            steps, starts = self.timed("env_seconds", self.side.collect, least)  # type: ignore[attr-defined]
            for s, out in steps:
                turn = flying.pop(s)
                assert turn is not None
                self.res.env_steps += 1
                self.record(s, self.live[s], turn, out)
            for (s, r), got in starts:
                flying.pop(s)
                self.begin([(s, r)], [got])
            if self.judging:
                self.collect(block=False)
            if self.waiting:
                self.dispatch()

    def timed(self, attr: str, fn: Callable[..., Any], *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            setattr(self.res, attr, getattr(self.res, attr) + time.perf_counter() - t0)

    # ---- start --------------------------------------------------------------------------------------

    def take(self, slots: Sequence[int]) -> list[tuple[int, Any]]:
        """The next pending requests, one for each of ``slots`` while any are left."""
        reqs = []
        for s in slots:
            if not self.pending:
                break
            reqs.append((s, self.pending.pop()))
        return reqs

    def start(self, slots: Sequence[int]) -> None:
        """Start the next requests in ``slots`` (a failed start is tried once more, then recorded aborted)."""
        reqs = self.take(slots)
        if reqs:
            self.begin(reqs, self.timed("env_seconds", self.side.start, reqs))

    def begin(self, reqs: Sequence[tuple[int, Any]], started: Sequence[Started]) -> None:
        """Open the episodes the side started (a failed start is tried once more, then recorded aborted)."""
        for (s, r), got in zip(reqs, started):
            if got.error is not None or got.spec is None or got.observation is None:
                if got.retry and id(r) not in self.retried:  # a fresh worker gets one more try at this episode
                    self.retried.add(id(r))
                    self.pending.append(r)
                else:
                    self._abort_unstarted(r, got)
                continue
            eid = uuid.uuid4().hex
            writer = None
            if self.store is not None:
                writer = self.timed("store_seconds", self.store.begin_episode, self.run_id, got.spec, self.agent,
                                    group_id=r.group_id or None, episode_id=eid)
            self.live[s] = Episode(r, got.spec, got.observation, eid, s, got.state, writer,
                                   history=list(got.history))

    def _abort_unstarted(self, r: Any, got: Started) -> None:
        """A request that could not start: recorded as aborted, never silently dropped."""
        spec = got.spec or TaskSpec(self.side.suite, r.task_id, r.seed, "", r.max_steps or 1)
        reason = f"reset failed: {got.error}"
        if self.store is not None:
            w = self.store.begin_episode(self.run_id, spec, self.agent, group_id=r.group_id or None)
            w.abort(f"reset failed twice: {got.error}", final_observation=got.observation)
        self.res.trajectories.append(Trajectory(uuid.uuid4().hex, spec, (), status="aborted", abort_reason=reason,
                                                agent=self.agent, group_id=r.group_id or None))
        self.res.aborted += 1

    # ---- step ---------------------------------------------------------------------------------------

    def step(self, step_and_start: Callable[..., Any] | None = None) -> None:
        """One turn of every busy slot. With ``step_and_start`` (the side's), the free slots start
        their next requests in the same batch as the others' step (one wait for the slowest slot a
        turn instead of two); the slots this step frees start with the next turn's."""
        slots = sorted(self.live)
        eps = [self.live[s] for s in slots]
        reqs = self.take([s for s in range(self.side.num_slots) if s not in self.live]) if step_and_start else []
        ctxs = [TurnContext(ep.spec, tuple(ep.history), ep.obs, s, ep.req.key) for s, ep in zip(slots, eps)]
        turns = self.timed("policy_seconds", self.policy.act_batch, ctxs, getattr(self.side, "pool", None))
        if reqs:
            outs, started = self.timed("env_seconds", step_and_start, eps, turns, reqs)
        else:
            outs, started = self.timed("env_seconds", self.side.step, eps, turns), []
        for s, ep, turn, out in zip(slots, eps, turns, outs):
            self.res.env_steps += 1
            self.record(s, ep, turn, out)
        if reqs:
            self.begin(reqs, started)

    def record(self, slot: int, ep: Episode, turn: PolicyTurn, out: StepOutcome) -> bool:
        """Record one outcome in the episode in ``slot`` (and the store); whether the episode ended."""
        step = out.step
        if step is None:  # the worker died: the turn has nowhere to go
            self.finish(slot, "aborted", 0.0, out.reason, out.final_observation, out.metadata)
            return True
        ep.steps.append(step)
        if out.seen is not None:
            ep.history.append(out.seen)
        if self.keep_turns and turn.completion_ids:
            ep.turns.append(TrainTurn(ep.req.group_id, ep.episode_id, step.index, turn.prompt,
                                      tuple(turn.completion_ids), tuple(turn.logprobs), turn.policy_version,
                                      not isinstance(turn.action, ParseError), turn.encoded))
        judged = out.end == "completed" and self.judge is not None
        if ep.writer is not None and not judged:  # a judged last step waits for its verdict
            self.timed("store_seconds", ep.writer.add_step, step)
        if out.next_observation is not None:
            ep.obs = out.next_observation
        if not out.end:
            return False
        if judged:
            self.live.pop(slot)
            self.waiting.append((ep, self.trajectory(ep, "completed", out.success, None, out.final_observation,
                                                     out.metadata)))
        else:
            self.finish(slot, out.end, out.success, out.reason, out.final_observation, out.metadata)
        return True

    # ---- close --------------------------------------------------------------------------------------

    def trajectory(self, ep: Episode, status: str, success: float, reason: str | None,
                   final_obs: Observation | None, metadata: dict[str, Any]) -> Trajectory:
        meta = {"policy_versions": sorted({s.policy_version for s in ep.steps}), **metadata}
        return Trajectory(ep.episode_id, ep.spec, tuple(ep.steps), success=success,
                          status="aborted" if status == "aborted" else "completed", abort_reason=reason,
                          final_observation=final_obs, agent=self.agent, group_id=ep.req.group_id or None,
                          metadata=meta)

    def finish(self, slot: int, status: str, success: float, reason: str | None, final_obs: Observation | None,
               metadata: dict[str, Any]) -> None:
        ep = self.live.pop(slot)
        self.close(ep, self.trajectory(ep, status, success, reason, final_obs, metadata))

    def close(self, ep: Episode, traj: Trajectory) -> None:
        """Complete or abort the episode in the store; hand the trajectory (and its turns) over."""
        if ep.writer is not None:
            if traj.status == "aborted":
                self.timed("store_seconds", ep.writer.abort, traj.abort_reason or "aborted",
                           final_observation=traj.final_observation, metadata=traj.metadata)
            else:
                self.timed("store_seconds", ep.writer.complete, traj.success,
                           final_observation=traj.final_observation, metadata=traj.metadata)
        self.res.trajectories.append(traj)
        if traj.status == "aborted":
            self.res.aborted += 1
        elif self.keep_turns:
            self.res.turns.extend(ep.turns)
        if self.on_episode is not None:
            self.on_episode(traj)

    # ---- judge --------------------------------------------------------------------------------------

    def with_verdict(self, ep: Episode, traj: Trajectory, verdict: Any) -> None:
        """The judged episode: its last step gets the judge's part, then it is stored and closed."""
        judge = self.judge
        assert judge is not None
        last = traj.steps[-1]
        usable = verdict.error is None and verdict.score is not None
        if usable and judge.mode == "reward":
            parts = {**last.reward_parts, "judge": float(verdict.score)}
            last = dataclasses.replace(last, reward_parts=parts, reward=combine(parts, self.judged_rewards))
            traj = dataclasses.replace(traj, steps=traj.steps[:-1] + (last,))
            ep.steps[-1] = last
        if not usable:
            kind = missing_kind(verdict.error) or "garbage"
            self.res.judge_missing += 1
            self.res.judge_missing_reasons[kind] = self.res.judge_missing_reasons.get(kind, 0) + 1
        self.res.verdicts[traj.episode_id] = verdict
        if ep.writer is not None:
            self.timed("store_seconds", ep.writer.add_step, last)
            self.timed("store_seconds", store_verdict, self.store, traj.episode_id, verdict, judge.name,
                       rule_success=traj.success, extra={"weight": judge.weight, "mode": judge.mode})
        self.close(ep, traj)

    def dispatch(self) -> None:
        """Send the waiting episodes as one batch when a judge worker is free.

        Never more batches than workers are in flight, so a batch starts when it is sent and its
        deadline (sent + timeout) is not eaten by a queue.
        """
        judge = self.judge
        assert judge is not None
        if self.waiting and len(self.judging) < judge.settings.workers:
            batch = list(self.waiting)
            self.waiting.clear()
            self.judging.append(_Judging(batch, judge.submit([t for _, t in batch]),
                                         time.monotonic() + judge.timeout))

    def collect(self, block: bool) -> None:
        """Close the judged batches whose verdicts are in (or whose deadline passed)."""
        judge = self.judge
        assert judge is not None
        for batch in list(self.judging):
            wait = max(0.0, batch.deadline - time.monotonic()) if block else 0.0
            verdicts = judge.collect(batch.future, len(batch.episodes), wait)
            if verdicts is None:
                if time.monotonic() < batch.deadline:
                    continue
                batch.future.cancel()
                late = judge.missing(f"timeout: no verdict within {judge.timeout:g} s")
                verdicts = [late] * len(batch.episodes)
            self.judging.remove(batch)
            for (ep, traj), verdict in zip(batch.episodes, verdicts):
                self.with_verdict(ep, traj, verdict)
