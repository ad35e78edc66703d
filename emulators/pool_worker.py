"""One pool worker: a device per slot (all sharing one browser when the suite allows).

:class:`EnvWorker` is a plain class: :class:`~emulators.pool.InProcessPool` calls it
directly and :class:`~emulators.pool.RayEnvPool` runs it as a Ray actor. Each
method takes and returns one typed batch.

Browser sharing: when the suite's ``make_device`` names a ``browser`` parameter
(or ``share_browser=True`` says that its ``**options`` take one), the worker
launches one Chromium and passes its
:class:`~emulators.browser.BrowserHandle`, so every slot is a context in that one
browser (cheaper than one browser per slot on few cores). If that browser dies,
the next reset of any slot relaunches it and rebuilds the slot's device.

Faults inside the worker stay per slot: a :class:`~emulators.base.DeviceError`
during a step truncates that episode (``GuiEnv`` reports it in
``info.device_error``); one during a reset is retried once on a fresh device and
then reported as ``worker_error``; any other exception from task or device code
becomes ``worker_error`` for its slot alone.

Playwright's sync API is bound to the thread that started it, so nothing here
touches the browser in ``__init__``: the browser starts on the first reset, in
the thread that runs every batch.

Concurrency: with a shared browser the slots of one batch run side by side
(:func:`~emulators.browser_support.run_concurrently`: a greenlet per slot on the
thread's Playwright event loop), so one slot's wait for Chromium (page load,
settle, screenshot) overlaps the others' work. ``concurrent=False`` (or devices
that share no browser) runs them one after another. Either way the outputs come
back in request order and each slot's episode is the same: slots share nothing
but the browser process.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from emulators.base import DeviceError, Device, GuiEnv, StepInfo
from emulators.browser_support import Flight, launch, run_concurrently
from emulators.pool_types import ActionRequest, EnvOutput, ResetRequest, SnapshotOutput, error_output
from emulators.snapshot import SnapshotError
from emulators.suites import Suite, get_suite
from guiagent.types import Action

__all__ = ["EnvWorker", "resolve_suite"]

log = logging.getLogger(__name__)


def resolve_suite(name: str) -> Suite:
    """A suite by registered name (``miniwob``) or by import path (``package.module:ATTR``).

    The import path form lets a project (or a test) run its own suite in the pool
    without registering it; ``ATTR`` is a :class:`Suite` or a zero-argument factory.
    """
    if ":" not in name:
        return get_suite(name)
    module, _, attr = name.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise KeyError(f"cannot load suite {name!r}: {e}") from e
    suite = obj() if callable(obj) and not isinstance(obj, Suite) else obj
    if not isinstance(suite, Suite):
        raise TypeError(f"{name!r} is a {type(suite).__name__}, not a Suite")
    return suite


@dataclass
class _Slot:
    """Mutable per-slot state inside one worker."""

    device: Device | None = None
    browser: Any = None  # the BrowserHandle the device was built on, when shared
    env: GuiEnv | None = None
    task_id: str | None = None
    live: bool = False


class EnvWorker:
    """Owns the slots ``first_slot .. first_slot + num_envs - 1`` of a pool.

    ``device_options`` go to ``suite.make_device``; ``chromium_path`` and
    ``headless`` among them also pick the shared browser. ``share_browser``:
    ``None`` shares one browser when ``make_device`` names a ``browser`` parameter;
    ``True``/``False`` force it on or off.
    """

    def __init__(self, suite: str, *, first_slot: int, num_envs: int, worker_id: int = 0,
                 device_options: dict[str, Any] | None = None, share_browser: bool | None = None,
                 concurrent: bool = True):
        self.suite_name = suite
        self.suite = resolve_suite(suite)
        self.first_slot = first_slot
        self.worker_id = worker_id
        self.device_options = dict(device_options or {})
        self._slots = {first_slot + i: _Slot() for i in range(num_envs)}
        if share_browser is None:
            # only a named parameter counts: a bare **options may belong to a non-browser device
            share_browser = "browser" in inspect.signature(self.suite.make_device).parameters
        self.shares_browser = share_browser
        self.concurrent = concurrent
        self._side_by_side = False  # inside a batch whose slots run side by side
        self._flight: Flight | None = None  # calls handed back as they end (flight_batch)
        self._flight_starts: dict[int, tuple[str, int]] = {}  # slot -> (task, seed) a start in flight builds
        self._flight_done: list[EnvOutput] = []  # flight calls a browser restart ended: the next flight_batch's
        self._browser: Any = None
        self._browser_thread: int | None = None  # the thread whose Playwright runs the shared browser

    # --- batches ------------------------------------------------------------------------------

    def reset_batch(self, requests: Sequence[ResetRequest]) -> list[EnvOutput]:
        """Reset each requested slot (side by side on a shared browser); outputs in request order."""
        return self.step_reset_batch([], requests)

    def step_batch(self, requests: Sequence[ActionRequest]) -> list[EnvOutput]:
        """Step each requested slot (side by side on a shared browser); outputs in request order."""
        return self._each(self._step_one, requests)

    def step_reset_batch(self, steps: Sequence[ActionRequest], resets: Sequence[ResetRequest]) -> list[EnvOutput]:
        """Step some slots and reset others in one batch, all side by side on a shared browser: the
        rollout loop starts the slots its last step freed while the others take their next step,
        instead of waiting for the slowest of each batch in turn. Outputs: the steps', then the resets',
        each in request order."""
        if self.shares_browser and self.concurrent and len(steps) + len(resets) > 1 and resets:
            try:  # the browser (and this thread's Playwright) start here, not in one slot's greenlet
                if self._browser is None or not self._browser.connected:
                    self._relaunch_browser()
            except Exception as e:  # each slot's reset reports it (and retries the launch)
                log.warning("launching the shared browser failed: %s", _one_line(e))
        # Where resets restore starts built before (webapps: Device.start_states), the first episode
        # of each (task, seed) starts before the rest of its group, which then restore its start
        # instead of all building the same one at once (emulators/snapshot.py).
        first, rest, seen = [], [], set()
        for r in resets:
            (rest if r.state is None and (r.task_id, r.seed) in seen else first).append(r)
            seen.add((r.task_id, r.seed))
        if rest and not any(getattr(s.device, "start_states", None) is not None for s in self._slots.values()):
            first, rest = list(resets), []
        calls = [(self._step_one, r) for r in steps] + [(self._reset_one, r) for r in first]
        out = {o.slot: o for o in self._run_calls(calls) + self._run_calls([(self._reset_one, r) for r in rest])}
        return [out[r.slot] for r in (*steps, *resets)]

    def mixed_batch(self, requests: Sequence[ActionRequest | ResetRequest]) -> list[EnvOutput]:
        """:meth:`step_reset_batch` over one list (what a pool sends a worker); outputs in request order."""
        steps = [r for r in requests if isinstance(r, ActionRequest)]
        out = {o.slot: o for o in self.step_reset_batch(steps, [r for r in requests if isinstance(r, ResetRequest)])}
        return [out[r.slot] for r in requests]

    def flight_batch(self, steps: Sequence[ActionRequest], resets: Sequence[ResetRequest], least: int,
                     timeout: float | None = None) -> list[EnvOutput]:
        """Start ``steps`` and ``resets`` beside the calls still in flight and hand back the outputs of
        the calls that ended: at least ``least`` (all, when fewer are in flight; 0: whatever ended
        while they started), in the order they ended. The others go on (:class:`~emulators.browser_support.Flight`):
        a rollout loop acts on the slots that are back while a slow page still settles.

        Only side by side on a shared browser from the thread that launched it; otherwise the new
        calls run now, one after another, and all their outputs come back. As in
        :meth:`step_reset_batch`, a start of a (task, seed) whose start is in flight waits for it,
        then restores what it built. ``timeout``: wait no longer than this for ``least`` (seconds;
        a Ray worker's calls in flight move on only while one of its actor calls runs)."""
        if self._flight is not None and len(self._flight) and self._browser_thread != threading.get_ident():
            raise RuntimeError("this worker's calls in flight run on the thread that launched its browser: "
                               "submit and collect from that thread")
        done, self._flight_done = self._flight_done, []  # flight calls a browser restart ended
        if resets and self.shares_browser and self.concurrent and (self._browser is None or not self._browser.connected):
            try:  # calls on a browser that went away end first, with their errors (_relaunch_browser)
                self._relaunch_browser()
            except Exception as e:  # each slot's reset reports it (and retries the launch)
                log.warning("launching the shared browser failed: %s", _one_line(e))
            done, self._flight_done = done + self._flight_done, []
            return done + self.step_reset_batch(steps, resets)
        if not self._flying_here():
            return done + self._drain() + self.step_reset_batch(steps, resets)
        if self._flight is None:
            self._flight = Flight(self._browser.browser)
        keeps_starts = any(getattr(s.device, "start_states", None) is not None for s in self._slots.values())
        building = {key: s for s, key in self._flight_starts.items()}
        calls = [(r.slot, functools.partial(self._guarded, r.slot, self._step_one, r), None) for r in steps]
        firsts = {}
        for r in resets:
            key = (r.task_id, r.seed)
            after = building.get(key) if r.state is None and keeps_starts else None
            if r.state is None and after is None:  # this start builds what later ones of its key restore
                firsts[r.slot] = key
                building[key] = r.slot
            calls.append((r.slot, functools.partial(self._guarded, r.slot, self._reset_one, r), after))
        self._flight_starts.update(firsts)
        try:
            ended = self._flight.collect(calls, least, timeout)
        except Exception as e:  # this thread's Playwright failed under the flight: its calls cannot end
            log.warning("calls in flight lost: %s", e)
            lost = sorted(set(self._flight.keys()) | {r.slot for r in (*steps, *resets)})
            self._flight, self._flight_starts = None, {}
            return done + self._landed([(slot, e) for slot in lost])
        return done + self._landed(ended)

    def _landed(self, ended: Sequence[tuple[int, Any]]) -> list[EnvOutput]:
        """The outputs of calls that ended (a call that raised past its guard: an error output)."""
        out = []
        for s, o in ended:
            self._flight_starts.pop(s, None)
            out.append(o if isinstance(o, EnvOutput) else error_output(s, f"{type(o).__name__}: {o}", self.worker_id))
        return out

    def _flying_here(self) -> bool:
        """Whether flight_batch runs side by side (see :meth:`_run_calls`)."""
        return bool(self.concurrent and self.shares_browser and self._browser is not None and self._browser.connected
                    and self._browser_thread == threading.get_ident())

    #: how long a drain (a close, a browser restart) waits for the calls in flight
    DRAIN_TIMEOUT_S = 10.0

    def _drain(self) -> list[EnvOutput]:
        """Every call in flight, run to its end (its output; errors as outputs); a call still running
        after DRAIN_TIMEOUT_S is given up (an error output) with its flight."""
        if self._flight is None or not len(self._flight):
            self._flight = None
            return []
        flight, self._flight = self._flight, None
        try:
            out = self._landed(flight.collect((), len(flight), self.DRAIN_TIMEOUT_S))
        except Exception as e:  # this thread's Playwright itself is gone: the calls cannot end
            log.warning("calls in flight lost with the browser: %s", e)
            return self._landed([(s, e) for s in flight.keys()])
        late = TimeoutError(f"the call did not end within {self.DRAIN_TIMEOUT_S:g} s of a close or a browser restart")
        return out + self._landed([(s, late) for s in flight.keys()])

    def snapshot_batch(self, slots: Sequence[int]) -> list[SnapshotOutput]:
        """Each slot's env state (:meth:`GuiEnv.snapshot`), or why not; episodes go on unchanged."""
        out = []
        for s in slots:
            slot = self._slot(s)
            if slot.env is None or not slot.live:
                out.append(SnapshotOutput(s, error="no running episode in this slot", worker_id=self.worker_id))
                continue
            try:
                out.append(SnapshotOutput(s, slot.env.snapshot(), worker_id=self.worker_id))
            except SnapshotError as e:
                out.append(SnapshotOutput(s, error=str(e) or type(e).__name__, worker_id=self.worker_id))
            except Exception as e:  # task or device code failed while capturing: no state, episode goes on
                log.exception("slot %d: snapshot failed", s)
                out.append(SnapshotOutput(s, error=f"{type(e).__name__}: {str(e).strip()[:500]}",
                                          worker_id=self.worker_id))
        return out

    def oracle_batch(self, slots: Sequence[int]) -> list[Action | None]:
        """The task oracle's next action per slot; ``None`` without a live episode or if it fails."""
        out: list[Action | None] = []
        for s in slots:
            slot = self._slot(s)
            if slot.env is None or not slot.live:
                out.append(None)
                continue
            try:
                out.append(slot.env.oracle_action())
            except Exception as e:  # a dead device or a stuck oracle: no action to offer
                log.warning("oracle of slot %d failed: %s", s, e)
                out.append(None)
        return out

    def ping(self) -> bool:
        return True

    def pid(self) -> int:
        """Process id of this worker (the pool's fault tests kill it)."""
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this worker runs on (``""`` outside Ray)."""
        import ray
        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""

    def browser_pids(self) -> list[int]:
        """Process ids of the shared Chromium's main process (empty before the first reset)."""
        if self._browser is None or not self._browser.connected:
            return []
        pid = self._browser.pid()
        return [pid] if pid is not None else []

    def task_ids(self) -> list[str]:
        return list(self.suite.task_ids())

    def close(self) -> None:
        """Close every device, the shared browser and the suite. Safe to call twice."""
        self._drain()  # calls in flight end first (or with the browser's error)
        for slot in self._slots.values():
            self._discard(slot)
        if self._browser is not None:
            self._browser.close()
            self._browser = None
        try:
            self.suite.close()
        except Exception as e:
            log.warning("closing suite %s: %s", self.suite_name, e)

    # --- one slot -----------------------------------------------------------------------------

    def _slot(self, s: int) -> _Slot:
        try:
            return self._slots[s]
        except KeyError:
            raise ValueError(f"slot {s} does not live on worker {self.worker_id} "
                             f"(slots {min(self._slots)}..{max(self._slots)})") from None

    def _each(self, fn: Any, requests: Sequence[Any]) -> list[EnvOutput]:
        return self._run_calls([(fn, r) for r in requests])

    def _run_calls(self, pairs: Sequence[tuple[Any, Any]]) -> list[EnvOutput]:
        """Each (function, request) of one batch, guarded; outputs in order."""
        if not pairs:
            return []
        calls = [functools.partial(self._guarded, r.slot, fn, r) for fn, r in pairs]
        # side by side only on the thread that launched the browser: its Playwright loop is that
        # thread's (an async trainer's held-out evaluation steps the pool from the main thread
        # while the rollout thread launched it; those calls then run one after another)
        if (self.concurrent and self.shares_browser and self._browser is not None and self._browser.connected
                and self._browser_thread == threading.get_ident()):
            self._side_by_side = True
            try:
                return run_concurrently(self._browser.browser, calls)
            finally:
                self._side_by_side = False
        return [c() for c in calls]

    def _guarded(self, s: int, fn: Any, request: Any) -> EnvOutput:
        slot = self._slot(s)
        try:
            return fn(slot, request)
        except Exception as e:  # task or device code failed: lose this episode only
            log.exception("slot %d failed", s)
            # the device may be what broke: the next reset starts from a fresh one
            self._discard(slot)
            return error_output(s, f"{type(e).__name__}: {str(e).strip()[:500]}", self.worker_id)

    def _reset_one(self, slot: _Slot, req: ResetRequest) -> EnvOutput:
        last: DeviceError | None = None
        for _attempt in range(2):
            try:
                if slot.device is None or self._stale(slot):
                    self._discard(slot)
                    slot.device, slot.browser = self._new_device()
                if slot.env is None or slot.task_id != req.task_id or slot.env.device is not slot.device:
                    self._teardown(slot)
                    slot.env = self.suite.make_env(req.task_id, device=slot.device)
                    slot.task_id = req.task_id
                if req.state is not None:  # a branch: the episode continues from the state
                    return self._restore_one(slot, req)
                slot.env.max_steps = req.max_steps or slot.env.task_cls.max_steps
                obs, info = slot.env.reset_typed(seed=req.seed, options={"targets": req.targets})
            except DeviceError as e:
                log.warning("slot %d: reset failed (%s); retrying on a fresh device", req.slot, e)
                last = e
                self._discard(slot)
                continue
            slot.live = True
            return EnvOutput(slot=req.slot, observation=obs, spec=info["task"],
                             info=StepInfo(milestones=tuple(info["milestones"])), worker_id=self.worker_id)
        return error_output(req.slot, f"reset failed twice on fresh devices: {last}", self.worker_id)

    def _restore_one(self, slot: _Slot, req: ResetRequest) -> EnvOutput:
        state = req.state
        assert state is not None
        try:
            obs = slot.env.restore(state)
        except SnapshotError as e:
            slot.live = False
            return error_output(req.slot, f"restore failed: {e}", self.worker_id)
        slot.live = not state.done
        return EnvOutput(slot=req.slot, observation=obs, spec=state.spec, terminated=state.done,
                         info=StepInfo(milestones=tuple(state.milestones)), worker_id=self.worker_id)

    def _step_one(self, slot: _Slot, req: ActionRequest) -> EnvOutput:
        if slot.env is None or not slot.live:
            return error_output(req.slot, "no running episode in this slot; reset it first", self.worker_id)
        obs, terminated, truncated, info = slot.env.step_typed(req.action)
        slot.live = not (terminated or truncated)
        return EnvOutput(slot=req.slot, observation=obs, terminated=bool(terminated),
                         truncated=bool(truncated), info=info, worker_id=self.worker_id)

    # --- devices ------------------------------------------------------------------------------

    def _new_device(self) -> tuple[Device, Any]:
        if not self.shares_browser:
            return self.suite.make_device(**self.device_options), None
        if self._browser is None or not self._browser.connected:
            if self._side_by_side or (self._flight is not None and len(self._flight)):
                # two slots must not relaunch it at once: the next batch relaunches it up front
                raise DeviceError("the shared browser went away during this batch")
            self._relaunch_browser()
        return self.suite.make_device(browser=self._browser, **self.device_options), self._browser

    def _relaunch_browser(self) -> None:
        # calls in flight on the old browser end now (with its errors) and go back with the next
        # flight_batch; the flight belongs to the old browser's Playwright, so a new one starts
        self._flight_done += self._drain()
        old, self._browser = self._browser, None
        if old is not None:
            # devices on the dead browser cannot recover: close them now (their live episodes
            # then truncate with a device error on the next step) and rebuild them on reset
            for slot in self._slots.values():
                if slot.browser is old and slot.device is not None:
                    slot.device.close()
            old.close()
        self._browser = launch(self.device_options.get("chromium_path"),
                               headless=self.device_options.get("headless", True))
        self._browser_thread = threading.get_ident()

    def _stale(self, slot: _Slot) -> bool:
        return self.shares_browser and (slot.browser is not self._browser or not slot.browser.connected)

    def _teardown(self, slot: _Slot) -> None:
        if slot.env is not None and slot.env.task is not None:
            try:
                slot.env.task.teardown(slot.env.device)
            except Exception as e:  # the old episode's leftovers cannot block a new one
                log.warning("teardown failed: %s", e)
        slot.env = None
        slot.live = False

    def _discard(self, slot: _Slot) -> None:
        self._teardown(slot)
        if slot.device is not None:
            try:
                slot.device.close()
            except Exception as e:
                log.warning("closing a device failed: %s", e)
        slot.device = None
        slot.browser = None
        slot.task_id = None


def _one_line(e: BaseException) -> str:
    """An error's first line (Playwright's launch errors go on with the browser's whole command line)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
