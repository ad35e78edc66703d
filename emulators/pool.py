"""The environment fleet: slots of GUI environments driven in typed batches.

Two pools with one interface (:class:`~emulators.pool_types.EnvPool`):

* :class:`InProcessPool` runs every slot in this process (eval, tests, training on
  one machine); with a shared browser the slots of a batch run side by side on its
  event loop (see :mod:`emulators.pool_worker`), otherwise one after another.
* :class:`RayEnvPool` runs ``num_workers`` Ray actors, each owning one browser (or
  device kind) with ``envs_per_worker`` slots; slot ``s`` lives on worker
  ``s // envs_per_worker``. A batch call sends each worker its share at once and
  blocks until every worker answered or ``step_timeout_s`` passed, so there is at
  most one batch in flight per worker (back-pressure comes from the caller).

Faults: a worker that dies (``RayActorError``) or hangs past the timeout (it is
killed) yields outputs with ``worker_error`` for its slots in that call; a
replacement actor starts at once and the next reset of those slots works. After
``max_replacements`` replacements the pool raises
:class:`~emulators.pool_types.WorkerReplacementError`.

Example::

    from emulators.pool import RayEnvPool, ResetRequest, ActionRequest
    pool = RayEnvPool("miniwob", num_workers=2, envs_per_worker=2)
    outs = pool.reset([ResetRequest(s, "click-button", seed=s) for s in range(pool.num_slots)])
    actions = pool.oracle_actions(range(pool.num_slots))
    outs = pool.step([ActionRequest(s, a) for s, a in enumerate(actions) if a is not None])
    pool.close()

See ``docs/fleet.md`` for local versus cluster use.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import math
import os
import queue
import re
import signal
import threading
import time
from typing import Any, Iterable, Iterator, Sequence

from emulators.pool_types import (
    ActionRequest, EnvOutput, EnvPool, PoolError, PoolRequestError, PoolStartError, ResetRequest,
    WorkerReplacementError, dead_observation, error_output, SnapshotOutput,
)
from emulators.pool_worker import EnvWorker, resolve_suite
from emulators.snapshot import EnvState
from guiagent.faults import fault
from guiagent.reaper import watch
from guiagent.types import Action

__all__ = [
    "ResetRequest", "ActionRequest", "EnvOutput", "SnapshotOutput", "EnvPool", "InProcessPool", "RayEnvPool",
    "PoolError", "PoolRequestError", "PoolStartError", "WorkerReplacementError", "dead_observation",
    "ensure_ray", "resolve_suite",
]

log = logging.getLogger(__name__)

#: tasks whose records the GCS of a Ray that :func:`ensure_ray` starts keeps (Ray's default: 100,000)
TASK_EVENTS_KEPT = 10_000


class _SlotBook:
    """Driver-side bookkeeping shared by both pools: checks batches before they are sent."""

    def __init__(self, num_slots: int, task_ids: Sequence[str]):
        if num_slots <= 0:
            raise ValueError(f"a pool needs at least one slot, got {num_slots}")
        self.num_slots = num_slots
        self.task_ids = frozenset(task_ids)
        self.live = [False] * num_slots

    def check_slots(self, slots: Sequence[int]) -> None:
        seen: set[int] = set()
        for s in slots:
            if not isinstance(s, int) or not (0 <= s < self.num_slots):
                raise PoolRequestError(
                    f"slot {s!r} is out of range: this pool has slots 0..{self.num_slots - 1}")
            if s in seen:
                raise PoolRequestError(f"slot {s} appears twice in one batch")
            seen.add(s)

    def check_reset(self, requests: Sequence[ResetRequest]) -> None:
        self.check_slots([r.slot for r in requests])
        for r in requests:
            if r.task_id not in self.task_ids:
                raise PoolRequestError(f"unknown task {r.task_id!r}; known: {sorted(self.task_ids)}")
            if r.max_steps is not None and r.max_steps <= 0:
                raise PoolRequestError(f"max_steps must be positive, got {r.max_steps}")
            if r.state is not None:
                if not isinstance(r.state, EnvState):
                    raise PoolRequestError(f"slot {r.slot}: a state to restore is an EnvState, "
                                           f"got {type(r.state).__name__}")
                if r.state.spec.task_id != r.task_id:
                    raise PoolRequestError(f"slot {r.slot}: a state of {r.state.spec.task_id!r} cannot start "
                                           f"{r.task_id!r}")

    def check_step(self, requests: Sequence[ActionRequest]) -> None:
        self.check_slots([r.slot for r in requests])
        idle = [r.slot for r in requests if not self.live[r.slot]]
        if idle:
            raise PoolRequestError(f"slots {idle} have no running episode (never reset, or the episode "
                                   "ended or was aborted): reset them before stepping")

    def check_step_reset(self, steps: Sequence[ActionRequest], resets: Sequence[ResetRequest]) -> None:
        self.check_slots([r.slot for r in (*steps, *resets)])
        self.check_step(steps)
        self.check_reset(resets)

    def record(self, outputs: Sequence[EnvOutput]) -> None:
        for o in outputs:
            self.live[o.slot] = not o.done


class _HomeThread:
    """One thread that runs every call of an in-process pool, whichever thread makes it.

    Playwright's sync API (and its greenlets) work only on the thread that started them: a pool
    used first from the main thread and then from an async trainer's rollout thread failed every
    reset there ("Cannot switch to a different thread"). The calls queue here and run one at a
    time; the caller waits for its result (a call made on this thread itself runs at once). A
    daemon thread: a call that hangs never holds the interpreter's exit.
    """

    def __init__(self, name: str):
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Any, *args: Any) -> Any:
        if threading.get_ident() == self._thread.ident or not self._thread.is_alive():
            return fn(*args)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._q.put((fut, fn, args))
        return fut.result()

    def _serve(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fut, fn, args = item
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # handed to the caller
                fut.set_exception(e)

    def stop(self) -> None:
        """End the thread after the calls queued before this one (they still run)."""
        self._q.put(None)


class InProcessPool:
    """Every slot in this process; same semantics as :class:`RayEnvPool`.

    All slots share one browser (one context each) when the suite allows it
    (``share_browser``: see :class:`RayEnvPool`); then the slots of one batch run side by
    side (``concurrent=False``: one after another, e.g. to debug one slot's trace).
    Worker faults cannot happen here; a reset that fails twice or an exception in
    task code still comes back as ``worker_error`` for its slot.

    Any thread may call the pool (one call at a time): with ``own_thread`` (the default) every
    call runs on a thread the pool owns, so devices bound to the thread that started them
    (Playwright's) work whichever thread calls, e.g. an async trainer's rollout thread after a
    first evaluation on the main thread. ``own_thread=False`` runs calls on the caller's thread
    (one thread only; a profiler then sees the devices' work).
    """

    def __init__(self, suite: str, num_slots: int = 1, device_options: dict | None = None, *,
                 share_browser: bool | None = None, concurrent: bool = True, own_thread: bool = True):
        self._home = _HomeThread(f"envpool-{suite}") if own_thread else None
        self._worker = EnvWorker(suite, first_slot=0, num_envs=num_slots, worker_id=0,
                                 device_options=device_options, share_browser=share_browser,
                                 concurrent=concurrent)
        self._book = _SlotBook(num_slots, self._worker.task_ids())
        self.num_slots = num_slots
        self.suite = suite
        self._flying: set[int] = set()     # slots submitted and not collected
        self._landed: list[EnvOutput] = []  # outputs that ended while their calls started

    def reset(self, requests: Sequence[ResetRequest]) -> list[EnvOutput]:
        self._book.check_reset(requests)
        self._not_flying(r.slot for r in requests)
        out = self._run(self._worker.reset_batch, list(requests))
        self._book.record(out)
        return out

    def step(self, requests: Sequence[ActionRequest]) -> list[EnvOutput]:
        self._book.check_step(requests)
        self._not_flying(r.slot for r in requests)
        out = self._run(self._worker.step_batch, list(requests))
        self._book.record(out)
        return out

    def step_and_reset(self, steps: Sequence[ActionRequest], resets: Sequence[ResetRequest]
                       ) -> tuple[list[EnvOutput], list[EnvOutput]]:
        """Step some slots and reset others in one batch, side by side (see :meth:`RayEnvPool.step_and_reset`)."""
        self._book.check_step_reset(steps, resets)
        self._not_flying(r.slot for r in (*steps, *resets))
        out = self._run(self._worker.step_reset_batch, list(steps), list(resets))
        self._book.record(out)
        return out[:len(steps)], out[len(steps):]

    # --- calls handed back as they end ---------------------------------------------------------

    def submit(self, steps: Sequence[ActionRequest] = (), resets: Sequence[ResetRequest] = ()) -> None:
        """Start steps and resets without waiting for them: :meth:`collect` hands back their outputs as
        they end, so a rollout loop acts on the slots that are back while a slow page still settles
        (``rollouts.min_batch_share``). Side by side on the shared browser; a pool whose slots cannot
        run side by side runs them here and :meth:`collect` hands all back. A slot in flight takes no
        other request until its output was collected."""
        steps, resets = list(steps), list(resets)
        self._book.check_step_reset(steps, resets)
        self._not_flying(r.slot for r in (*steps, *resets))
        slots = {r.slot for r in (*steps, *resets)}
        self._flying |= slots
        try:
            self._landed += self._run(self._worker.flight_batch, steps, resets, 0)
        except BaseException:
            self._flying -= slots
            raise

    def collect(self, least: int = 1) -> list[EnvOutput]:
        """The outputs of submitted calls that ended, in the order they ended: at least ``least``
        (all, when fewer are in flight), without waiting for the others."""
        got = self._landed + self._run(self._worker.flight_batch, [], [], max(0, least - len(self._landed)))
        self._landed = []
        for o in got:
            self._flying.discard(o.slot)
        self._book.record(got)
        return got

    def _not_flying(self, slots: Iterable[int]) -> None:
        busy = sorted(s for s in slots if s in self._flying)
        if busy:
            raise PoolRequestError(f"slots {busy} are in flight: collect their outputs first")

    @property
    def in_flight(self) -> list[int]:
        """Slots whose submitted call has not been collected."""
        return sorted(self._flying)

    def oracle_actions(self, slots: Sequence[int]) -> list[Action | None]:
        slots = list(slots)
        self._book.check_slots(slots)
        self._not_flying(slots)
        return self._run(self._worker.oracle_batch, slots)

    def snapshot(self, slots: Sequence[int]) -> list[SnapshotOutput]:
        """Each slot's env state (restore it with ``ResetRequest(state=...)`` in any slot), or why not."""
        slots = list(slots)
        self._book.check_slots(slots)
        self._not_flying(slots)
        return self._run(self._worker.snapshot_batch, slots)

    def health(self) -> list[bool]:
        return [self._run(self._worker.ping)]

    def close(self) -> None:
        try:
            self._run(self._worker.close)
        finally:
            if self._home is not None:
                self._home.stop()

    def _run(self, fn: Any, *args: Any) -> Any:
        return fn(*args) if self._home is None else self._home.call(fn, *args)

    def __enter__(self) -> "InProcessPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ensure_ray(address: str | None = None, *, num_cpus: int | None = None,
               runtime_env: dict | None = None) -> bool:
    """Connect to Ray unless already connected; return whether this call started it.

    ``address=None`` starts an embedded local Ray (no dashboard, worker logs kept
    out of this terminal), even when a ``ray start`` cluster runs on this machine;
    ``"auto"``, ``"host:port"`` or ``"ray://host:port"`` join a running cluster.
    Token auth is turned off unless ``RAY_AUTH_MODE`` says otherwise, so no token
    file is written under the home directory.
    """
    import ray
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Ray's processes (its GCS, raylet, agents and workers inherit this) install no crash handler of their
    # own for SIGTERM: ray.shutdown ends them with it, and the handler's stack dump is not a crash
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "logging_level": logging.WARNING}
    if runtime_env:
        kwargs["runtime_env"] = runtime_env
    if address is None:
        # "local", not None: ray.init(None) would join whatever cluster the last `ray start` on this
        # machine left in /tmp/ray/ray_current_cluster, even a dead one
        kwargs["address"] = "local"
        kwargs["num_cpus"] = num_cpus or max(2, os.cpu_count() or 2)
        # the GCS keeps a record of every task (~3.5 KB each) up to 100,000, then the ids of the
        # dropped ones up to a million: a long run's GCS would grow by hundreds of MB. The env
        # workers' calls are not recorded at all (RayEnvPool); this bounds the rest (no dashboard
        # here reads the table)
        kwargs["_system_config"] = {"task_events_max_num_task_in_gcs": TASK_EVENTS_KEPT,
                                    "task_events_max_dropped_task_attempts_tracked_per_job_in_gcs":
                                        TASK_EVENTS_KEPT}
    else:
        kwargs.pop("include_dashboard")
        kwargs["address"] = address
    with _signals_kept():
        ray.init(**kwargs)
    if address is None:
        watch()  # a SIGKILLed driver's Ray helpers (agents, workers, their browsers) end with it, not minutes later
    return True


@contextlib.contextmanager
def _signals_kept() -> Iterator[None]:
    """``ray.init`` in the block leaves this process's signal handling as it was, and the processes it starts
    out of a terminal's Ctrl+C.

    ``ray.init`` replaces the SIGTERM handler with one that raises ``SystemExit(15)`` (a run stopped by
    ``kill`` was stored ``failed``, not ``interrupted`` with exit 143), and Ray's core worker installs a
    native crash handler for SIGTERM over it, whose stack dump ended the process by SIGABRT (exit -6):
    both are put back as they were. The GCS and raylet run in this process's group, so a terminal's
    Ctrl+C reached them too and tore the cluster down under the run that was winding down: SIGINT is
    blocked while they start (they inherit the mask: the terminal's SIGINT stays pending in them; the pool
    ends them as it closes); one that arrives here meanwhile is delivered once the block ends."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    blocked = hasattr(signal, "pthread_sigmask")
    if blocked:
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if blocked:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


class RayEnvPool:
    """Slots spread over Ray actors: ``num_workers * envs_per_worker`` slots.

    Args:
        suite: a registered suite name (``miniwob``, ``webapps``) or ``module:ATTR``.
        num_workers: actors; each owns one browser (or device kind).
        envs_per_worker: slots per actor (browser contexts in that one browser).
        device_options: keyword arguments of ``suite.make_device``.
        address: ``None`` starts a local Ray if none is running; ``"auto"``,
            ``"host:port"`` or ``"ray://host:port"`` join a cluster.
        step_timeout_s: how long a batch call waits for a worker before it is
            declared hung, killed and replaced (resets get ``reset_timeout_s``).
        max_replacements: dead or hung workers replaced over the pool's life
            before :class:`WorkerReplacementError`.
        num_cpus_per_worker: Ray CPU resource each actor reserves.
        reset_timeout_s: timeout for resets (browser launch, page load);
            default ``2 * step_timeout_s``.
        runtime_env: Ray runtime environment of the actors (e.g. ``{"working_dir": "."}``
            on a cluster whose nodes lack the package).
        start_timeout_s: how long construction waits for every worker to answer.
        worker_resources: custom Ray resources each actor needs, e.g. ``{"androidworld": 1}`` to
            place AndroidWorld workers on farm hosts that advertise emulators (docs/android.md).
        share_browser: ``None`` (default) gives each worker one Chromium shared by its
            slots when ``suite.make_device`` names a ``browser`` parameter; ``True``
            forces passing ``browser=`` (a suite taking it through ``**options``),
            ``False`` lets every device start its own.
        scheduling_strategy: Ray's placement of the actors, e.g. ``"SPREAD"`` to put them on
            as many nodes as possible (a lost node then costs fewer slots); ``None`` is Ray's
            default (fill the driver's node first). Replacements follow it too, so a lost
            node's actors start again on the nodes that are left.
    """

    def __init__(self, suite: str, *, num_workers: int = 2, envs_per_worker: int = 1,
                 device_options: dict | None = None, address: str | None = None,
                 step_timeout_s: float = 60.0, max_replacements: int = 10,
                 num_cpus_per_worker: float = 0.5, reset_timeout_s: float | None = None,
                 runtime_env: dict | None = None, start_timeout_s: float = 60.0,
                 share_browser: bool | None = None, worker_resources: dict[str, float] | None = None,
                 scheduling_strategy: str | None = None):
        if num_workers <= 0 or envs_per_worker <= 0:
            raise ValueError("num_workers and envs_per_worker must be positive")
        import ray
        self.suite = suite
        self.num_workers = num_workers
        self.envs_per_worker = envs_per_worker
        self.num_slots = num_workers * envs_per_worker
        self.device_options = dict(device_options or {})
        self.share_browser = share_browser
        self.step_timeout_s = step_timeout_s
        self.reset_timeout_s = reset_timeout_s or 2 * step_timeout_s
        self.max_replacements = max_replacements
        self.replacements = 0
        self._closed = False
        # one call at a time: keeps one batch in flight per worker even if several threads drive the pool
        self._lock = threading.Lock()
        need = num_workers * num_cpus_per_worker
        self._owns_ray = ensure_ray(address, num_cpus=max(2, os.cpu_count() or 2, math.ceil(need)),
                                    runtime_env=runtime_env)
        have = ray.cluster_resources().get("CPU", 0.0)
        if have < need:
            if self._owns_ray:
                ray.shutdown()
            raise PoolStartError(f"{num_workers} workers x {num_cpus_per_worker} CPU need {need} CPUs but "
                                 f"the Ray cluster has {have}: lower num_cpus_per_worker or add nodes")
        extra = {"scheduling_strategy": scheduling_strategy} if scheduling_strategy else {}
        # enable_task_events=False: Ray's GCS otherwise keeps a record of every batch call (about 3.5 KB
        # each, up to 100,000 of them), so a long run's GCS grows by megabytes a minute; nothing here
        # reads Ray's task table (no dashboard), and actor deaths still reach us through RayActorError
        self._actor_cls = ray.remote(num_cpus=num_cpus_per_worker, max_restarts=0, max_concurrency=1,
                                     resources=dict(worker_resources or {}), enable_task_events=False,
                                     **extra)(EnvWorker)
        self._flying: set[int] = set()  # slots submitted and not collected
        self._queued: dict[int, list[Any]] = {}  # worker -> requests submitted, not yet sent to it
        self._sent: dict[int, tuple[int, float, float]] = {}  # slot -> (worker, deadline, timeout): sent, not back
        self._out: dict[int, tuple[Any, Any]] = {}  # worker -> (its call in flight, the actor it went to)
        self._flight_lost: list[EnvOutput] = []  # slots in flight on workers a batch call replaced
        self._away_since: float | None = None  # when collect last returned (deadlines pause meanwhile)
        self._actors = [self._start(w) for w in range(num_workers)]
        self._book = _SlotBook(self.num_slots, self._wait_started(start_timeout_s))
        fault("ray_up")  # tests: a signal once Ray and the pool's workers are up

    # --- public -------------------------------------------------------------------------------

    def reset(self, requests: Sequence[ResetRequest]) -> list[EnvOutput]:
        """Reset the requested slots, all workers in parallel; outputs in request order."""
        with self._lock:
            self._book.check_reset(requests)
            self._not_flying(r.slot for r in requests)
            out = self._run("reset_batch", list(requests), self.reset_timeout_s)
            self._book.record(out)
        return out

    def step(self, requests: Sequence[ActionRequest]) -> list[EnvOutput]:
        """Step the requested slots, all workers in parallel; outputs in request order."""
        with self._lock:
            self._book.check_step(requests)
            self._not_flying(r.slot for r in requests)
            out = self._run("step_batch", list(requests), self.step_timeout_s)
            self._book.record(out)
        return out

    def step_and_reset(self, steps: Sequence[ActionRequest], resets: Sequence[ResetRequest]
                       ) -> tuple[list[EnvOutput], list[EnvOutput]]:
        """Step the slots of ``steps`` and reset those of ``resets`` in one batch, all workers in
        parallel and a worker's slots side by side: the rollout loop starts the slots its last step
        freed while the others take their next step. Outputs: the steps' and the resets', each in
        request order; a slot may appear once in all."""
        with self._lock:
            self._book.check_step_reset(steps, resets)
            self._not_flying(r.slot for r in (*steps, *resets))
            out = self._run("mixed_batch", [*steps, *resets], max(self.step_timeout_s, self.reset_timeout_s))
            self._book.record(out)
        return out[:len(steps)], out[len(steps):]

    # --- calls handed back as they end ---------------------------------------------------------

    #: how long a worker's call waits for one of its slots in flight before it comes back empty (and
    #: is sent again): what a request for a worker whose other slots are still in flight may wait
    flight_poll_s = 0.05

    def submit(self, steps: Sequence[ActionRequest] = (), resets: Sequence[ResetRequest] = ()) -> None:
        """Start these steps and resets without waiting (see :meth:`InProcessPool.submit`). Each
        worker runs its slots' calls side by side and hands each back as it ends
        (:meth:`EnvWorker.flight_batch`); the pool keeps one actor call a worker going while any of
        its slots are in flight (a call comes back after ``flight_poll_s`` at most, and requests for
        that worker go with the next). A request's timeout counts from when it went to its worker."""
        steps, resets = list(steps), list(resets)
        with self._lock:
            self._book.check_step_reset(steps, resets)
            self._not_flying(r.slot for r in (*steps, *resets))
            if self._away_since is None:
                self._away_since = time.monotonic()
            for w, batch in self._group([*steps, *resets], lambda r: r.slot).items():
                self._queued.setdefault(w, []).extend(batch)
                self._flying.update(r.slot for r in batch)
                if w not in self._out:
                    self._send(w)

    def collect(self, least: int = 1) -> list[EnvOutput]:
        """The outputs of submitted calls that ended, at least ``least`` slots' (all, when fewer are in
        flight). A worker that died, or holds a call past its timeout, is replaced, as in a batch call,
        and its slots in flight come back with ``worker_error``. A request's timeout counts the time
        spent here (a worker's calls move on only while the pool waits for them)."""
        with self._lock:
            got, self._flight_lost = self._flight_lost, []
            want = min(least, len(self._flying))
            if self._away_since is not None:  # a worker's calls moved on only while the driver waited here
                away = time.monotonic() - self._away_since
                self._sent = {s: (w, d + away, t) for s, (w, d, t) in self._sent.items()}
            try:
                self._collect(got, want)
            finally:
                self._away_since = time.monotonic()
            for o in got:
                self._flying.discard(o.slot)
            self._book.record(got)
            return got

    def _collect(self, got: list[EnvOutput], want: int) -> None:
        """Land the workers' calls into ``got`` until it holds ``want`` outputs (or nothing is out)."""
        import ray
        while self._out:
            block = len(got) < want
            refs = {ref: w for w, (ref, _) in self._out.items()}
            wait_s = 0.0
            if block:
                earliest = min((d for _, d, _ in self._sent.values()), default=time.monotonic())
                wait_s = max(0.0, earliest - time.monotonic())
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=wait_s)
            if ready:  # and every other call that has ended by now
                ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in ready:
                got += self._land(refs[ref], ref)
            now = time.monotonic()
            overdue: dict[int, float] = {}
            for w, deadline, timeout in self._sent.values():
                if deadline <= now:
                    overdue.setdefault(w, timeout)
            for w, timeout in overdue.items():
                got += self._fail_worker(w, f"worker {w} did not answer within {timeout:.0f} s (a slot's "
                                            "call in flight); killed and replaced")
            if not ready and not overdue and not block:
                break
        got += self._flight_lost  # slots of workers a failure above replaced along the way
        self._flight_lost = []

    @property
    def in_flight(self) -> list[int]:
        """Slots whose submitted call has not been collected."""
        return sorted(self._flying)

    def _not_flying(self, slots: Iterable[int]) -> None:
        busy = sorted(s for s in slots if s in self._flying)
        if busy:
            raise PoolRequestError(f"slots {busy} are in flight: collect their outputs first")

    def _send(self, w: int) -> None:
        """Worker ``w``'s next call: the requests queued for it, and a wait for its slots in flight."""
        batch = self._queued.pop(w, [])
        now = time.monotonic()
        for r in batch:
            timeout = self.reset_timeout_s if isinstance(r, ResetRequest) else self.step_timeout_s
            self._sent[r.slot] = (w, now + timeout, timeout)
        actor = self._actors[w]
        ref = actor.flight_batch.remote([r for r in batch if isinstance(r, ActionRequest)],
                                        [r for r in batch if isinstance(r, ResetRequest)], 1, self.flight_poll_s)
        self._out[w] = (ref, actor)

    def _land(self, w: int, ref: Any) -> list[EnvOutput]:
        """The outputs of worker ``w``'s call ``ref`` that came back; its next call goes out if it has work."""
        import ray
        from ray.exceptions import RayActorError
        if self._out.get(w, (None,))[0] is not ref:  # the worker was replaced since: its slots came back then
            return []
        ref, actor = self._out.pop(w)
        try:
            outs = list(ray.get(ref))
        except RayActorError as e:
            return self._fail_worker(w, f"worker {w} died during a call: {type(e).__name__}: {_first_line(e)}", actor)
        except Exception as e:  # an error in the worker itself: its state is suspect
            return self._fail_worker(w, f"worker {w} failed in a call: {type(e).__name__}: {_first_line(e)}", actor)
        for o in outs:
            self._sent.pop(o.slot, None)
        if self._queued.get(w) or any(v[0] == w for v in self._sent.values()):
            self._send(w)
        return outs

    def _fail_worker(self, w: int, reason: str, actor: Any = None) -> list[EnvOutput]:
        """Every slot of worker ``w`` in flight (or queued for it) ends with ``reason``; the worker is
        replaced, unless a batch call replaced it since (the failed call went to an actor that is gone)."""
        log.warning("%s", reason)
        entry = self._out.pop(w, None)
        actor = actor if actor is not None else (entry[1] if entry is not None else self._actors[w])
        out = [error_output(s, reason, w) for s, v in list(self._sent.items()) if v[0] == w]
        for s in [s for s, v in self._sent.items() if v[0] == w]:
            del self._sent[s]
        out += [error_output(r.slot, reason, w) for r in self._queued.pop(w, [])]
        if actor is self._actors[w]:
            self._replace(w, reason)
        return out

    def oracle_actions(self, slots: Sequence[int]) -> list[Action | None]:
        """The task oracle's next action per slot (``None``: no live episode, oracle stuck, worker lost)."""
        import ray
        slots = list(slots)
        self._book.check_slots(slots)
        self._not_flying(slots)
        groups = self._group(slots, lambda s: s)
        with self._lock:
            refs = {w: self._actors[w].oracle_batch.remote(batch) for w, batch in groups.items()}
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.step_timeout_s)
            answers: dict[int, Action | None] = {}
            for w, ref in refs.items():
                try:
                    got = ray.get(ref, timeout=0)
                except Exception as e:  # dead or hung: the next step or reset reports and replaces it
                    log.warning("oracle call to worker %d failed: %s", w, _first_line(e) or type(e).__name__)
                    got = [None] * len(groups[w])
                answers.update(zip(groups[w], got))
        return [answers[s] for s in slots]

    def snapshot(self, slots: Sequence[int]) -> list[SnapshotOutput]:
        """Each slot's env state, all workers in parallel; a worker that fails or does not answer
        within the step timeout gives errors (its next step or reset reports and replaces it)."""
        import ray
        slots = list(slots)
        self._book.check_slots(slots)
        self._not_flying(slots)
        groups = self._group(slots, lambda s: s)
        with self._lock:
            refs = {w: self._actors[w].snapshot_batch.remote(batch) for w, batch in groups.items()}
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.step_timeout_s)
            got: dict[int, SnapshotOutput] = {}
            for w, ref in refs.items():
                try:
                    got.update((o.slot, o) for o in ray.get(ref, timeout=0))
                except Exception as e:
                    reason = f"worker {w} failed in snapshot: {_first_line(e) or type(e).__name__}"
                    log.warning("%s", reason)
                    got.update((s, SnapshotOutput(s, error=reason, worker_id=w)) for s in groups[w])
        return [got[s] for s in slots]

    def health(self, timeout_s: float = 2.0) -> list[bool]:
        """One cheap ping per worker; ``False`` for a dead worker or one busy past ``timeout_s``."""
        import ray
        refs = [a.ping.remote() for a in self._actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        ok = []
        for ref in refs:
            try:
                ok.append(ref in ready and ray.get(ref) is True)
            except Exception:
                ok.append(False)
        return ok

    def worker_pids(self, timeout_s: float = 10.0) -> list[int]:
        """Process id of each worker (for fault injection and monitoring)."""
        import ray
        return ray.get([a.pid.remote() for a in self._actors], timeout=timeout_s)

    def worker_nodes(self, timeout_s: float = 10.0) -> list[str]:
        """The Ray node id each worker runs on (where a lost node's actors went)."""
        import ray
        return ray.get([a.node_id.remote() for a in self._actors], timeout=timeout_s)

    def browser_pids(self, timeout_s: float = 10.0) -> list[list[int]]:
        """Each worker's shared Chromium process ids (empty before its first reset)."""
        import ray
        return ray.get([a.browser_pids.remote() for a in self._actors], timeout=timeout_s)

    def close(self) -> None:
        """Close every worker's devices, end the actors and, if this pool started Ray, Ray."""
        if self._closed:
            return
        self._closed = True
        import ray
        self._out.clear()
        if not ray.is_initialized():  # another pool that started Ray shut it down, and the actors with it
            return
        try:
            refs = [a.close.remote() for a in self._actors]
            ray.wait(refs, num_returns=len(refs), timeout=10)
        except Exception as e:  # actors already gone: nothing left to close
            log.warning("closing the pool's workers: %s", _first_line(e))
        for a in self._actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # already dead
                pass
        if self._owns_ray:
            ray.shutdown()

    def __enter__(self) -> "RayEnvPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals ----------------------------------------------------------------------------

    def _start(self, worker_id: int) -> Any:
        return self._actor_cls.remote(self.suite, first_slot=worker_id * self.envs_per_worker,
                                      num_envs=self.envs_per_worker, worker_id=worker_id,
                                      device_options=self.device_options, share_browser=self.share_browser)

    def _wait_started(self, timeout_s: float) -> list[str]:
        """Wait until every worker answers (so start-up faults surface here); the suite's task ids."""
        import ray
        refs = [a.task_ids.remote() for a in self._actors]
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        try:
            if pending:
                raise PoolStartError(
                    f"{len(pending)} of {len(refs)} workers did not start within {timeout_s:.0f} s; Ray has "
                    f"{ray.available_resources().get('CPU', 0)} CPUs free (each worker needs its "
                    "num_cpus_per_worker): lower it, close other pools or add nodes")
            return ray.get(refs[0])
        except PoolStartError:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise PoolStartError(f"the pool's workers did not start for suite {self.suite!r}: "
                                 f"{type(e).__name__}: {_first_line(e)}") from e

    def _group(self, items: Sequence[Any], slot_of: Any) -> dict[int, list[Any]]:
        groups: dict[int, list[Any]] = {}
        for item in items:
            groups.setdefault(slot_of(item) // self.envs_per_worker, []).append(item)
        return groups

    def _run(self, method: str, requests: list[Any], timeout_s: float) -> list[EnvOutput]:
        """Send each worker its share, wait for all (or the deadline), replace the failed ones."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError
        groups = self._group(requests, lambda r: r.slot)
        refs = {w: getattr(self._actors[w], method).remote(batch) for w, batch in groups.items()}
        t0 = time.perf_counter()
        _, pending = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        by_slot: dict[int, EnvOutput] = {}
        failed: dict[int, str] = {}
        for w, ref in refs.items():
            if ref in pending:
                failed[w] = (f"worker {w} did not answer {method} within {timeout_s:.0f} s "
                             f"(waited {time.perf_counter() - t0:.1f} s); killed and replaced")
                continue
            try:
                by_slot.update((o.slot, o) for o in ray.get(ref))
            except (RayActorError, GetTimeoutError) as e:
                failed[w] = f"worker {w} died during {method}: {type(e).__name__}: {_first_line(e)}"
            except Exception as e:  # an error in the worker itself: its state is suspect
                failed[w] = f"worker {w} failed in {method}: {type(e).__name__}: {_first_line(e)}"
        for w, reason in failed.items():
            log.warning("%s", reason)
            for r in groups[w]:
                by_slot[r.slot] = error_output(r.slot, reason, w)
        for w, reason in failed.items():
            self._replace(w, reason)
        return [by_slot[r.slot] for r in requests]

    def _replace(self, worker_id: int, reason: str) -> None:
        import ray
        # the worker's submitted calls die with it: their slots come back with the reason at the
        # next collect; requests queued for it go to the replacement
        self._out.pop(worker_id, None)
        for s in [s for s, v in self._sent.items() if v[0] == worker_id]:
            del self._sent[s]
            self._flight_lost.append(error_output(s, reason, worker_id))
        ray.kill(self._actors[worker_id], no_restart=True)
        if self.replacements >= self.max_replacements:
            raise WorkerReplacementError(
                f"worker {worker_id} failed ({reason}) after {self.replacements} replacements already "
                f"(max_replacements={self.max_replacements}); the fleet is unhealthy: check memory, "
                "Chromium and the suite's logs (Ray session logs: /tmp/ray/session_latest/logs)")
        self.replacements += 1
        self._actors[worker_id] = self._start(worker_id)
        if self._queued.get(worker_id):
            self._send(worker_id)


def _first_line(e: BaseException) -> str:
    """A one-line reason: the first line of Ray's message and, for a traceback, its last line."""
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(e)).splitlines() if ln.strip()]
    if not lines:
        return ""
    return lines[0] if len(lines) == 1 else f"{lines[0][:200]} ... {lines[-1][:300]}"
