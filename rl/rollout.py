"""The rollout driver: groups of G episodes per (task, seed), run on an env pool with a policy.

One controller (this process) runs the loop; the pool's workers only step envs.
Each loop iteration gathers the observations of every busy slot, asks the policy
for one turn per slot in a single batch, sends the actions to the pool in a single
batch, records the steps (rewards composed online, :mod:`judge.compose`) and
appends them to the store. A slot whose episode ended takes the next queued
episode, so slots stay busy. A worker that died mid-call aborts the episodes it
held (marked in the store with the reason); the pool replaces it and the rollout
goes on.

Every step is tagged with the policy version that produced it. In async mode the
trainer keeps acting on batches up to ``max_lag`` versions old (see
:class:`AsyncRollout`).

With a judge (``judge=``, a :class:`judge.settings.RewardJudge`), an episode that
finishes is judged before its last step is stored: finished episodes go to the
judge in batches (all those waiting, whenever one of its worker threads is free)
while the freed slots start new episodes; when the verdicts come back (or the judge's timeout passes),
the weighted score joins the last step's ``reward_parts["judge"]`` and ``reward``,
the step is written, the verdict is stored as a judgement beside the rule outcome,
and the episode is completed. A missing verdict (timeout, garbage, rate limit,
spent budget) is recorded as missing with its reason; the episode keeps its rule
reward (``RolloutResult.judge_missing`` counts them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from emulators.pool import ActionRequest, EnvOutput, EnvPool, ResetRequest
from guiagent.types import Observation, ParseError, Step, TaskSpec, Trajectory
from judge.compose import OnlineRewarder, RewardConfig, combine
from rl.agents import TurnContext, TurnPolicy

if TYPE_CHECKING:
    from judge.settings import RewardJudge

__all__ = ["EpisodeRequest", "TrainTurn", "RolloutResult", "run_rollout", "make_groups", "AsyncRollout"]


@dataclass(frozen=True)
class EpisodeRequest:
    task_id: str
    seed: int
    group_id: str = ""
    max_steps: int | None = None
    member: int = 0
    """which of its group's G episodes this is (with ``group_id``, the key of its sampling stream)"""

    @property
    def key(self) -> str:
        return f"{self.group_id}#{self.member}" if self.group_id else f"{self.task_id}:{self.seed}#{self.member}"


@dataclass(frozen=True)
class TrainTurn:
    """One sampled turn, ready for the learner."""

    group_id: str
    episode_id: str
    step_index: int
    prompt: Any
    completion_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    reward: float
    policy_version: int
    parse_ok: bool


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


def step_metadata(target_box: Sequence[float] | None, rejected: Sequence[str] = ()) -> dict[str, Any]:
    """A live step's metadata: the target element's box when the env reports one, and the
    unparseable replies the policy set aside before the one it acted on (``--resample-unparseable``)."""
    meta: dict[str, Any] = {}
    if target_box:
        meta["target_box"] = list(target_box)
    if rejected:
        meta["rejected_replies"] = list(rejected)
    return meta


def make_groups(task_ids: Sequence[str], seeds: Sequence[int], group_size: int, *,
                max_steps: int | None = None, tag: str | None = None) -> list[EpisodeRequest]:
    """G episodes for every (task, seed) pair, sharing one group id.

    ``tag`` makes the group ids reproducible (``task:seed:tag-k``); without it they are random.
    """
    out = []
    for k, (task_id, seed) in enumerate(zip(task_ids, seeds)):
        gid = f"{task_id}:{seed}:{tag}-{k}" if tag is not None else f"{task_id}:{seed}:{uuid.uuid4().hex[:8]}"
        out += [EpisodeRequest(task_id, seed, gid, max_steps, member=m) for m in range(group_size)]
    return out


@dataclass
class _Live:
    req: EpisodeRequest
    spec: TaskSpec
    obs: Observation
    rewarder: OnlineRewarder
    writer: Any
    episode_id: str
    steps: list[Step] = field(default_factory=list)
    turns: list[TrainTurn] = field(default_factory=list)


@dataclass
class _Judging:
    """A batch of finished episodes waiting for their verdicts."""

    episodes: list[tuple[_Live, Trajectory]]
    future: Any
    deadline: float


def run_rollout(pool: EnvPool, policy: TurnPolicy, requests: Sequence[EpisodeRequest], *,
                rewards: RewardConfig | None = None, store: Any = None, run_id: str | None = None,
                suite: str = "",
                keep_turns: bool = True, on_episode: Callable[[Trajectory], None] | None = None,
                judge: "RewardJudge | None" = None) -> RolloutResult:
    """Run every requested episode on ``pool`` with ``policy`` (sync mode).

    ``store``/``run_id``: a :class:`guiagent.store.Store` to append steps to as they
    happen. ``judge``: judge each finished episode before its last step is stored
    (see the module docstring; :func:`judge.settings.make_judge` builds one).
    Returns the trajectories (in completion order) and the learner's turns.
    """
    cfg = rewards or RewardConfig()
    judged_cfg = dataclasses.replace(cfg, judge=judge.weight) if judge is not None else cfg
    judging: list[_Judging] = []             # batches in flight on the judge's threads
    waiting: list[tuple[_Live, Trajectory]] = []  # finished episodes not yet sent to the judge
    res = RolloutResult()
    t_wall = time.perf_counter()
    pending = list(requests)[::-1]
    live: dict[int, _Live] = {}
    retried: set[int] = set()

    def timed(attr: str, fn, *a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            setattr(res, attr, getattr(res, attr) + time.perf_counter() - t0)

    def start(slots: list[int]) -> None:
        reqs = []
        for s in slots:
            if not pending:
                break
            r = pending.pop()
            reqs.append((s, r))
        if not reqs:
            return
        outs = timed("env_seconds", pool.reset, [ResetRequest(s, r.task_id, r.seed, r.max_steps) for s, r in reqs])
        for (s, r), out in zip(reqs, outs):
            if out.worker_error is not None or out.spec is None:
                if id(r) not in retried:  # a fresh worker gets one more try at this episode
                    retried.add(id(r))
                    pending.append(r)
                else:  # recorded as aborted, never silently dropped
                    spec = TaskSpec(suite, r.task_id, r.seed, "", r.max_steps or 1)
                    if store is not None:
                        w = store.begin_episode(run_id, spec, policy.name, group_id=r.group_id or None)
                        w.abort(f"reset failed twice: {out.worker_error}", final_observation=out.observation)
                    res.trajectories.append(Trajectory(uuid.uuid4().hex, spec, (), status="aborted",
                                                       abort_reason=f"reset failed: {out.worker_error}",
                                                       agent=policy.name, group_id=r.group_id or None))
                    res.aborted += 1
                continue
            writer = None
            eid = uuid.uuid4().hex
            if store is not None:
                writer = timed("store_seconds", store.begin_episode, run_id, out.spec, policy.name,
                               group_id=r.group_id or None, episode_id=eid)
            rewarder = OnlineRewarder(cfg, out.info.milestones)  # Φ of the initial milestones
            live[s] = _Live(r, out.spec, out.observation, rewarder, writer, eid)

    def trajectory(ep: _Live, status: str, success: float, reason: str | None, final_obs: Observation
                   ) -> Trajectory:
        return Trajectory(ep.episode_id, ep.spec, tuple(ep.steps), success=success,
                          status="aborted" if status == "aborted" else "completed", abort_reason=reason,
                          final_observation=final_obs, agent=policy.name, group_id=ep.req.group_id or None,
                          metadata={"policy_versions": sorted({s.policy_version for s in ep.steps}),
                                    "member": ep.req.member})

    def finish(slot: int, status: str, success: float, reason: str | None, final_obs: Observation) -> None:
        ep = live.pop(slot)
        close(ep, trajectory(ep, status, success, reason, final_obs))

    def close(ep: _Live, traj: Trajectory) -> None:
        status, reason, success = traj.status, traj.abort_reason, traj.success
        final_obs = traj.final_observation
        if ep.writer is not None:
            if status == "aborted":
                timed("store_seconds", ep.writer.abort, reason or "aborted", final_observation=final_obs)
            else:
                timed("store_seconds", ep.writer.complete, success, final_observation=final_obs)
        res.trajectories.append(traj)
        if status == "aborted":
            res.aborted += 1
        elif keep_turns:
            res.turns.extend(ep.turns)
        if on_episode is not None:
            on_episode(traj)

    def with_verdict(ep: _Live, traj: Trajectory, verdict: Any) -> None:
        """The judged episode: its last step gets the judge's part, then it is stored and closed."""
        from judge.vlm import missing_kind, store_verdict

        assert judge is not None
        last = traj.steps[-1]
        usable = verdict.error is None and verdict.score is not None
        if usable and judge.mode == "reward":
            parts = {**last.reward_parts, "judge": float(verdict.score)}
            last = dataclasses.replace(last, reward_parts=parts, reward=combine(parts, judged_cfg))
            traj = dataclasses.replace(traj, steps=traj.steps[:-1] + (last,))
            ep.steps[-1] = last
            ep.turns = [dataclasses.replace(u, reward=last.reward) if u.step_index == last.index else u
                        for u in ep.turns]
        if not usable:
            kind = missing_kind(verdict.error) or "garbage"
            res.judge_missing += 1
            res.judge_missing_reasons[kind] = res.judge_missing_reasons.get(kind, 0) + 1
        res.verdicts[traj.episode_id] = verdict
        if ep.writer is not None:
            timed("store_seconds", ep.writer.add_step, last)
            timed("store_seconds", store_verdict, store, traj.episode_id, verdict, judge.name,
                  rule_success=traj.success, extra={"weight": judge.weight, "mode": judge.mode})
        close(ep, traj)

    def dispatch() -> None:
        """Send the waiting episodes as one batch when a judge worker is free.

        Never more batches than workers are in flight, so a batch starts when it is
        sent and its deadline (sent + timeout) is not eaten by a queue.
        """
        assert judge is not None
        if waiting and len(judging) < judge.settings.workers:
            batch = list(waiting)
            waiting.clear()
            judging.append(_Judging(batch, judge.submit([t for _, t in batch]),
                                    time.monotonic() + judge.timeout))

    def collect(block: bool) -> None:
        """Close the judged batches whose verdicts are in (or whose deadline passed)."""
        assert judge is not None
        for batch in list(judging):
            wait = max(0.0, batch.deadline - time.monotonic()) if block else 0.0
            verdicts = judge.collect(batch.future, len(batch.episodes), wait)
            if verdicts is None:
                if time.monotonic() < batch.deadline:
                    continue
                batch.future.cancel()
                late = judge.missing(f"timeout: no verdict within {judge.timeout:g} s")
                verdicts = [late] * len(batch.episodes)
            judging.remove(batch)
            for (ep, traj), verdict in zip(batch.episodes, verdicts):
                with_verdict(ep, traj, verdict)

    start(list(range(pool.num_slots)))
    while live:
        slots = sorted(live)
        ctxs = [TurnContext(live[s].spec, tuple(live[s].steps), live[s].obs, s, live[s].req.key) for s in slots]
        turns = timed("policy_seconds", policy.act_batch, ctxs, pool)
        outs: list[EnvOutput] = timed("env_seconds", pool.step,
                                      [ActionRequest(s, t.action) for s, t in zip(slots, turns)])
        freed: list[int] = []
        for s, turn, out in zip(slots, turns, outs):
            ep = live[s]
            res.env_steps += 1
            info = out.info
            parse_failed = isinstance(turn.action, ParseError)
            if out.worker_error is not None:
                finish(s, "aborted", 0.0, f"worker died: {out.worker_error}", out.observation)
                freed.append(s)
                continue
            device_error = info.device_error
            success = float(info.success or 0.0)  # the task's evaluation, once the episode ends
            reward, parts = ep.rewarder.step(
                task_reward=success, milestones=info.milestones, terminated=out.terminated,
                truncated=out.truncated, parse_failed=parse_failed,
                action_invalid=info.action_error is not None)
            step = Step(index=len(ep.steps), observation=ep.obs,
                        action=None if parse_failed else turn.action,  # type: ignore[arg-type]
                        response=turn.response, thought=turn.thought,
                        parse_error=turn.action if parse_failed else None,  # type: ignore[arg-type]
                        action_error=info.action_error, reward=reward, reward_parts=parts,
                        milestones=info.milestones, terminated=out.terminated, truncated=out.truncated,
                        policy_version=turn.policy_version, latency_ms=info.elapsed_ms,
                        metadata=step_metadata(info.target_box, turn.rejected))
            ep.steps.append(step)
            if keep_turns and turn.completion_ids:
                ep.turns.append(TrainTurn(ep.req.group_id, ep.episode_id, step.index, turn.prompt,
                                          tuple(turn.completion_ids), tuple(turn.logprobs), reward,
                                          turn.policy_version, not parse_failed))
            ended = device_error is None and (out.terminated or out.truncated)
            if ep.writer is not None and not (ended and judge is not None):  # a judged last step waits
                timed("store_seconds", ep.writer.add_step, step)
            ep.obs = out.observation
            if device_error is not None:
                finish(s, "aborted", 0.0, f"device error: {device_error}", out.observation)
                freed.append(s)
            elif ended:
                if judge is not None:
                    live.pop(s)
                    waiting.append((ep, trajectory(ep, "completed", success, None, out.observation)))
                else:
                    finish(s, "completed", success, None, out.observation)
                freed.append(s)
        if judging:  # the judge works on its own threads while the freed slots start new episodes
            collect(block=False)
        if waiting:
            dispatch()
        start(freed)
    t_judge = time.perf_counter()
    while judging or waiting:
        dispatch()
        collect(block=True)
    res.judge_seconds += time.perf_counter() - t_judge
    res.wall_seconds = time.perf_counter() - t_wall
    return res


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
