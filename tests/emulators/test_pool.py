"""The environment pools against real Chromium and a real local Ray.

The suite used here is defined in this module (``tests.emulators.test_pool:SUITE``)
so the pool is tested on its own: a page with two buttons served over HTTP on
127.0.0.1 by each process that needs it (the test process for the in-process
pool, every Ray worker for the Ray pool). Press A, then B; the button positions
come from the seed.

Fault tests kill real processes: a Ray worker (SIGKILL, between and during
steps), a hung worker (a step that outlives the timeout) and a worker's Chromium.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from emulators.base import Device, StepInfo, Task
from emulators.browser import BrowserConfig, BrowserDevice
from emulators.pool import (
    ActionRequest, EnvOutput, InProcessPool, PoolRequestError, PoolStartError, RayEnvPool,
    ResetRequest, WorkerReplacementError, ensure_ray,
)
from emulators.suites import Suite
from guiagent.types import Action, Click, Finish, ParseError, Wait

pytestmark = [pytest.mark.browser, pytest.mark.ray]

SUITE_PATH = "tests.emulators.test_pool:SUITE"

# --- a two-button suite, served by whichever process builds its devices ------------------------

_PAGE = """<!doctype html><html><head><style>
body {{ margin: 0; font: 14px sans-serif; }} button {{ position: absolute; width: 60px; height: 40px; }}
</style></head><body data-a="0" data-b="0">
<button id="a" style="left:{ax}px; top:{ay}px" onclick="document.body.dataset.a = '1'">A</button>
<button id="b" style="left:{bx}px; top:{by}px"
  onclick="if (document.body.dataset.a === '1') document.body.dataset.b = '1'">B</button>
</body></html>"""


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        q = {k: int(v[0]) for k, v in parse_qs(urlsplit(self.path).query).items()}
        body = _PAGE.format(ax=q.get("ax", 10), ay=q.get("ay", 10), bx=q.get("bx", 200),
                            by=q.get("by", 150)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


_server_url: str | None = None
_server_lock = threading.Lock()


def _serve() -> str:
    global _server_url
    with _server_lock:
        if _server_url is None:
            server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            _server_url = f"http://127.0.0.1:{server.server_address[1]}/"
    return _server_url


class TwoButtons(Task):
    suite = "pooltest"
    task_id = "two_buttons"
    template = "Press A, then B"
    max_steps = 6

    @classmethod
    def sample_params(cls, rng: random.Random) -> dict:
        # A in the left half, B in the right half of the 320x240 screen
        return {"ax": rng.randrange(0, 90), "ay": rng.randrange(0, 190),
                "bx": rng.randrange(170, 250), "by": rng.randrange(0, 190)}

    def setup(self, device: Device) -> str:
        assert isinstance(device, BrowserDevice)
        p = self.params
        device.goto(f"{device.home_url}task?ax={p['ax']}&ay={p['ay']}&bx={p['bx']}&by={p['by']}")
        return self.goal

    def _state(self, device: Device) -> tuple[bool, bool]:
        js = "[document.body.dataset.a, document.body.dataset.b]"
        a, b = device.evaluate(js)  # type: ignore[attr-defined]
        return a == "1", b == "1"

    def evaluate(self, device: Device, answer: str | None = None) -> float:
        return float(self._state(device)[1])

    def milestones(self, device: Device) -> list[bool]:
        return list(self._state(device))

    def is_done(self, device: Device) -> bool:
        return self._state(device)[1]

    def oracle(self, device: Device) -> Action | None:
        a, b = self._state(device)
        if b:
            return Finish()
        center = device.center("#b" if a else "#a")  # type: ignore[attr-defined]
        return None if center is None else Click(*center)


class PoolTestSuite(Suite):
    name = "pooltest"

    def task_ids(self) -> list[str]:
        return ["two_buttons"]

    def task_class(self, task_id: str) -> type[Task]:
        if task_id != "two_buttons":
            raise KeyError(f"unknown task {task_id!r}; known: ['two_buttons']")
        return TwoButtons

    def make_device(self, browser=None, **options) -> Device:
        config = BrowserConfig(**{"viewport": (320, 240), "tree": "none", "settle_timeout_ms": 500,
                                  "reuse_context": True, "home_url": _serve(), **options})
        return BrowserDevice(config, browser=browser)


SUITE = PoolTestSuite


# --- helpers -------------------------------------------------------------------------------------


def _run_oracle(pool, slots: list[int], max_steps: int = 8) -> dict[int, list[EnvOutput]]:
    """Step every slot with its oracle until its episode ends; the outputs of each slot."""
    history: dict[int, list[EnvOutput]] = {s: [] for s in slots}
    active = list(slots)
    for _ in range(max_steps):
        if not active:
            break
        actions = pool.oracle_actions(active)
        assert all(a is not None for a in actions), actions
        outs = pool.step([ActionRequest(s, a) for s, a in zip(active, actions)])
        assert [o.slot for o in outs] == active
        for o in outs:
            history[o.slot].append(o)
        active = [o.slot for o in outs if not o.done]
    assert not active, f"slots {active} did not finish"
    return history


def _assert_solved(history: list[EnvOutput]) -> None:
    last = history[-1]
    assert last.worker_error is None and last.info.device_error is None
    assert last.terminated and not last.truncated and last.info.success == 1.0
    assert all(o.info.success is None for o in history[:-1])  # evaluated once, when the episode ends
    assert [o.info.milestones for o in history] == [(True, False), (True, True)]


def _pid_gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie of ours counts as gone
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1].startswith("Z"):
                    return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for the whole module (started here, so the pools do not own it)."""
    import ray
    started = ensure_ray(num_cpus=4)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_pool(ray_session):
    """Two workers with two slots each (worker 0: slots 0-1, worker 1: slots 2-3) and a short
    step timeout; the Ray tests share it, the fault tests kill its processes."""
    pool = RayEnvPool(SUITE_PATH, num_workers=2, envs_per_worker=2, step_timeout_s=5.0,
                      reset_timeout_s=40.0, max_replacements=10)
    yield pool
    pool.close()


def _reset_all(pool, seed: int) -> list[EnvOutput]:
    outs = pool.reset([ResetRequest(s, "two_buttons", seed=seed + s) for s in range(pool.num_slots)])
    assert all(o.worker_error is None for o in outs), [o.worker_error for o in outs]
    return outs


def _oracle_step(pool, slots: list[int]) -> list[EnvOutput]:
    return pool.step([ActionRequest(s, a) for s, a in zip(slots, pool.oracle_actions(slots))])


# --- in-process ----------------------------------------------------------------------------------


def test_in_process_pool_runs_oracle_episodes_and_rejects_bad_batches():
    with InProcessPool(SUITE_PATH, num_slots=2) as pool:
        assert pool.health() == [True]
        with pytest.raises(PoolRequestError, match="no running episode"):
            pool.step([ActionRequest(0, Click(0.5, 0.5))])
        with pytest.raises(PoolRequestError, match="unknown task"):
            pool.reset([ResetRequest(0, "nope", seed=0)])
        with pytest.raises(PoolRequestError, match="out of range"):
            pool.reset([ResetRequest(2, "two_buttons", seed=0)])
        with pytest.raises(PoolRequestError, match="twice"):
            pool.reset([ResetRequest(1, "two_buttons", seed=0), ResetRequest(1, "two_buttons", seed=1)])

        outs = pool.reset([ResetRequest(1, "two_buttons", seed=5), ResetRequest(0, "two_buttons", seed=7)])
        assert [o.slot for o in outs] == [1, 0]
        assert [o.spec.seed for o in outs] == [5, 7] and outs[0].spec.params != outs[1].spec.params
        # a reset's info holds the initial milestones only
        assert all(o.info == StepInfo(milestones=(False, False)) and not o.done for o in outs)
        assert outs[0].observation.size == (320, 240) and outs[0].observation.screenshot[:4] == b"\x89PNG"

        # a parse error executes nothing and comes back as data
        (bad,) = pool.step([ActionRequest(0, ParseError("malformed", "no action here"))])
        assert bad.observation.last_action_error and not bad.done and bad.info.parse_error is not None

        history = _run_oracle(pool, [0, 1])
        for s in (0, 1):
            _assert_solved(history[s])
        # the finished episode is over: stepping it again is a request error, a new reset reuses the device
        with pytest.raises(PoolRequestError):
            pool.step([ActionRequest(0, Click(0.5, 0.5))])
        (again,) = pool.reset([ResetRequest(0, "two_buttons", seed=7, max_steps=1)])
        assert again.spec.max_steps == 1 and again.spec.params == outs[1].spec.params
        (out,) = pool.step([ActionRequest(0, Click(0.99, 0.99))])
        assert out.truncated and not out.terminated and out.info.success == 0.0


def test_slots_side_by_side_give_the_episodes_of_slots_one_after_another():
    # the same seeds and oracle actions on both stepping modes: identical outputs, slot by slot
    runs = {}
    for concurrent in (True, False):
        with InProcessPool(SUITE_PATH, num_slots=2, concurrent=concurrent) as pool:
            outs = pool.reset([ResetRequest(s, "two_buttons", seed=20 + s) for s in range(2)])
            history = _run_oracle(pool, [0, 1])
            runs[concurrent] = (outs, history)
    for s in range(2):
        _assert_solved(runs[True][1][s])
        assert runs[True][0][s].observation.screenshot == runs[False][0][s].observation.screenshot
        for a, b in zip(runs[True][1][s], runs[False][1][s], strict=True):
            assert (a.observation.screenshot, a.info, a.terminated) == \
                (b.observation.screenshot, b.info, b.terminated)


def _step_and_reset_check(pool, seed: int) -> None:
    """Slot 0 steps while slot 1 resets, in one batch; then the roles swap; the outcomes are those of
    separate calls."""
    n = pool.num_slots
    # every slot's episode over (a one-step episode each), whatever ran before
    pool.reset([ResetRequest(s, "two_buttons", seed=seed, max_steps=1) for s in range(n)])
    assert all(o.truncated for o in pool.step([ActionRequest(s, Click(0.99, 0.99)) for s in range(n)]))
    with pytest.raises(PoolRequestError, match="twice"):
        pool.step_and_reset([], [ResetRequest(0, "two_buttons", seed=seed), ResetRequest(0, "two_buttons", seed=1)])
    with pytest.raises(PoolRequestError, match="no running episode"):  # checked before anything runs
        pool.step_and_reset([ActionRequest(0, Click(0.5, 0.5))], [ResetRequest(1, "two_buttons", seed=seed)])
    (first,) = pool.reset([ResetRequest(0, "two_buttons", seed=seed)])
    with pytest.raises(PoolRequestError, match="twice"):  # a slot cannot both step and reset
        pool.step_and_reset([ActionRequest(0, Click(0.5, 0.5))], [ResetRequest(0, "two_buttons", seed=seed)])
    # slot 0 takes its oracle step while the last slot resets
    (a,) = pool.oracle_actions([0])
    steps, resets = pool.step_and_reset([ActionRequest(0, a)], [ResetRequest(n - 1, "two_buttons", seed=seed + 1)])
    assert [o.slot for o in steps] == [0] and [o.slot for o in resets] == [n - 1]
    assert steps[0].info.milestones == (True, False) and not steps[0].done and steps[0].worker_error is None
    assert resets[0].spec.seed == seed + 1 and resets[0].info.milestones == (False, False)
    # slot 0 finishes while the last slot takes its first step: both episodes solved as with step()
    a0, a1 = pool.oracle_actions([0, n - 1])
    steps, resets = pool.step_and_reset([ActionRequest(0, a0), ActionRequest(n - 1, a1)], [])
    assert resets == [] and steps[0].terminated and steps[0].info.success == 1.0
    assert steps[1].info.milestones == (True, False)
    # the finished slot restarts in the batch of the other's last step
    (a,) = pool.oracle_actions([n - 1])
    steps, resets = pool.step_and_reset([ActionRequest(n - 1, a)], [ResetRequest(0, "two_buttons", seed=seed)])
    assert steps[0].terminated and steps[0].info.success == 1.0
    assert resets[0].observation.screenshot == first.observation.screenshot  # the same seed, the same screen
    with pytest.raises(PoolRequestError, match="no running episode"):
        pool.step_and_reset([ActionRequest(n - 1, Click(0.5, 0.5))], [])


def test_step_and_reset_steps_some_slots_while_others_start():
    with InProcessPool(SUITE_PATH, num_slots=2) as pool:
        _step_and_reset_check(pool, seed=40)


def test_a_mixed_pool_steps_one_suite_while_another_resets():
    from emulators.pool_mixed import MixedPool

    with InProcessPool(SUITE_PATH, num_slots=2) as a, InProcessPool(SUITE_PATH, num_slots=2) as b:
        pool = MixedPool({"a": a, "b": b})
        (first,) = pool.reset([ResetRequest(0, "a.two_buttons", seed=3)])
        with pytest.raises(PoolRequestError, match="twice"):
            pool.step_and_reset([ActionRequest(0, Click(0.5, 0.5))], [ResetRequest(0, "b.two_buttons", seed=3)])
        with pytest.raises(PoolRequestError, match="no pool for suite"):
            pool.step_and_reset([], [ResetRequest(1, "c.two_buttons", seed=3)])
        (act,) = pool.oracle_actions([0])
        steps, resets = pool.step_and_reset([ActionRequest(0, act)], [ResetRequest(1, "b.two_buttons", seed=3)])
        assert steps[0].info.milestones == (True, False) and resets[0].info.milestones == (False, False)
        assert resets[0].observation.screenshot == first.observation.screenshot  # same seed, same screen
        assert b._book.live == [False, True] and a._book.live == [True, False]  # each slot in its suite


def test_submitted_calls_come_back_as_they_end_and_a_slow_slot_holds_up_no_other():
    with InProcessPool(SUITE_PATH, num_slots=3) as pool:
        pool.reset([ResetRequest(s, "two_buttons", seed=60 + s) for s in range(3)])
        # slot 0 waits 1.5 s while slots 1 and 2 solve their episodes (A, then B: ~0.1 s a step)
        pool.submit([ActionRequest(0, Wait(1.5))])
        assert pool.in_flight == [0]
        for _ in range(2):
            pool.submit([ActionRequest(s, a) for s, a in zip([1, 2], pool.oracle_actions([1, 2]))])
            assert pool.in_flight == [0, 1, 2]
            got = {o.slot: o for o in pool.collect(least=2)}
            assert set(got) == {1, 2}, "the slow slot held up the others"
            assert pool.in_flight == [0]
        assert all(o.terminated and o.info.success == 1.0 for o in got.values())
        # a slot in flight takes no other request of any kind
        for call in (lambda: pool.step([ActionRequest(0, Click(0.5, 0.5))]),
                     lambda: pool.reset([ResetRequest(0, "two_buttons", seed=1)]),
                     lambda: pool.submit([ActionRequest(0, Click(0.5, 0.5))]),
                     lambda: pool.snapshot([0]), lambda: pool.oracle_actions([0])):
            with pytest.raises(PoolRequestError, match="in flight"):
                call()
        with pytest.raises(PoolRequestError, match="no running episode"):  # the usual checks still hold
            pool.submit([ActionRequest(1, Click(0.5, 0.5))])
        # a freed slot starts beside the one still in flight; collect more than are in flight: all of them
        pool.submit(resets=[ResetRequest(1, "two_buttons", seed=61)])
        rest = {o.slot: o for o in pool.collect(least=10)}
        assert set(rest) == {0, 1} and pool.in_flight == []
        assert not rest[0].done and rest[0].info.milestones == (False, False)  # the wait changed nothing
        assert rest[1].spec.seed == 61 and rest[1].info.milestones == (False, False)
        assert pool.collect(least=1) == []  # nothing in flight: nothing to wait for
        pool.step([ActionRequest(0, Click(0.99, 0.99))])  # slots come back to the usual calls


def test_submitted_calls_on_a_pool_whose_slots_run_one_after_another_all_come_back():
    # concurrent=False: nothing runs side by side, so submit runs the calls and collect hands all back
    with InProcessPool(SUITE_PATH, num_slots=2, concurrent=False) as pool:
        pool.submit(resets=[ResetRequest(s, "two_buttons", seed=70 + s) for s in range(2)])
        outs = pool.collect(least=1)
        assert sorted(o.slot for o in outs) == [0, 1] and pool.in_flight == []
        pool.submit([ActionRequest(0, Wait(0.2)), ActionRequest(1, Click(0.99, 0.99))])
        assert sorted(o.slot for o in pool.collect(least=1)) == [0, 1]


def test_a_browser_killed_under_calls_in_flight_ends_them_and_the_next_starts_relaunch_it():
    with InProcessPool(SUITE_PATH, num_slots=2) as pool:
        pool.reset([ResetRequest(s, "two_buttons", seed=85 + s) for s in range(2)])
        [pid] = pool._worker.browser_pids()
        pool.submit([ActionRequest(0, Wait(5)), ActionRequest(1, Wait(5))])
        os.kill(pid, signal.SIGKILL)
        t0 = time.perf_counter()
        outs = {o.slot: o for o in pool.collect(least=2)}
        assert time.perf_counter() - t0 < 4 and set(outs) == {0, 1} and pool.in_flight == []
        assert all(o.done and (o.worker_error or o.info.device_error) for o in outs.values())
        pool.submit(resets=[ResetRequest(s, "two_buttons", seed=85 + s) for s in range(2)])
        again = {o.slot: o for o in pool.collect(least=2)}
        assert not any(o.worker_error for o in again.values()) and pool._worker.browser_pids() != [pid]
        _run_oracle(pool, [0, 1])


def test_any_thread_may_call_a_pool_that_owns_its_thread():
    """The browser starts on the main thread (the first reset); another thread then submits,
    collects, steps and resets as the main thread would (an async trainer's rollout thread)."""
    with InProcessPool(SUITE_PATH, num_slots=2) as pool:
        pool.reset([ResetRequest(s, "two_buttons", seed=87 + s) for s in range(2)])
        pool.submit([ActionRequest(0, Wait(0.3))])
        got, errors = [], []

        def elsewhere():
            try:
                pool.submit([ActionRequest(1, Click(0.99, 0.99))])
                got.extend(pool.collect(least=2))
                got.extend(pool.reset([ResetRequest(0, "two_buttons", seed=90)]))
                got.extend(pool.step([ActionRequest(0, Click(0.99, 0.99))]))
            except Exception as e:
                errors.append(e)
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()
        assert not errors, errors
        assert sorted(o.slot for o in got[:2]) == [0, 1] and not any(o.worker_error for o in got), got
        assert pool.in_flight == []
        assert [o.slot for o in pool.step([ActionRequest(1, Click(0.99, 0.99))])] == [1]  # and back on this one


def test_calls_in_flight_are_collected_from_the_thread_that_runs_the_browser():
    """own_thread=False: calls run on the caller's thread, so calls in flight belong to the thread
    that launched the browser and another thread's submit or collect changes nothing."""
    with InProcessPool(SUITE_PATH, num_slots=2, own_thread=False) as pool:
        pool.reset([ResetRequest(s, "two_buttons", seed=87 + s) for s in range(2)])
        pool.submit([ActionRequest(0, Wait(0.3))])
        errors = []

        def elsewhere():
            for call in (lambda: pool.submit([ActionRequest(1, Click(0.99, 0.99))]), lambda: pool.collect(least=1)):
                try:
                    call()
                except RuntimeError as e:
                    errors.append(str(e))
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()
        assert len(errors) == 2 and all("thread that launched its browser" in e for e in errors)
        assert pool.in_flight == [0]  # nothing changed: slot 1 is free, slot 0 still in flight
        (out,) = pool.collect(least=1)
        assert out.slot == 0 and not out.done
        pool.step([ActionRequest(1, Click(0.99, 0.99))])


def test_flights_go_on_after_a_batch_call_restarted_the_browser():
    # the flight belongs to the old browser's Playwright: a batch call's restart starts a new one
    with InProcessPool(SUITE_PATH, num_slots=2) as pool:
        pool.reset([ResetRequest(s, "two_buttons", seed=88 + s) for s in range(2)])
        pool.submit([ActionRequest(0, Click(0.99, 0.99))])
        assert [o.slot for o in pool.collect(least=1)] == [0]
        [pid] = pool._worker.browser_pids()
        os.kill(pid, signal.SIGKILL)
        assert _pid_gone(pid)
        for _ in range(2):  # the batch call that meets the dead browser, then the one that restarts it
            outs = pool.reset([ResetRequest(s, "two_buttons", seed=88 + s) for s in range(2)])
        assert not any(o.worker_error for o in outs) and pool._worker.browser_pids() != [pid]
        pool.submit([ActionRequest(0, Click(0.99, 0.99))], resets=[ResetRequest(1, "two_buttons", seed=89)])
        back = {o.slot: o for o in pool.collect(least=2)}
        assert set(back) == {0, 1} and not any(o.worker_error for o in back.values())


def test_a_pool_closed_with_calls_in_flight_lets_them_end_first():
    pool = InProcessPool(SUITE_PATH, num_slots=2)
    pool.reset([ResetRequest(s, "two_buttons", seed=80 + s) for s in range(2)])
    pool.submit([ActionRequest(0, Wait(0.3)), ActionRequest(1, Wait(0.3))])
    pool.close()  # no error, no greenlet left waiting on a closed browser
    assert pool._worker._flight is None and pool._worker._browser is None


def test_failed_resets_come_back_as_worker_errors_for_their_slot_only():
    # an unreachable home page: the device reset raises DeviceError twice (the retry gets a fresh device)
    with InProcessPool(SUITE_PATH, num_slots=1, device_options={"home_url": "http://127.0.0.1:9/"}) as pool:
        (out,) = pool.reset([ResetRequest(0, "two_buttons", seed=0)])
        assert out.done and out.truncated and "reset failed twice" in out.worker_error
        assert out.observation.size == (1, 1) and out.observation.last_action_error
        with pytest.raises(PoolRequestError):
            pool.step([ActionRequest(0, Click(0.5, 0.5))])
    # no Chromium at all: a clear reason, not a crash of the pool
    no_chromium = {"chromium_path": "/nonexistent/chromium"}
    with InProcessPool(SUITE_PATH, num_slots=2, device_options=no_chromium) as pool:
        outs = pool.reset([ResetRequest(0, "two_buttons", seed=0), ResetRequest(1, "two_buttons", seed=1)])
        assert all(o.worker_error and "ChromiumNotFound" in o.worker_error for o in outs)


def test_unknown_suite_is_a_clear_error():
    with pytest.raises(KeyError, match="unknown suite"):
        InProcessPool("no-such-suite")


# --- Ray -----------------------------------------------------------------------------------------


def test_ray_pool_several_envs_per_worker_keeps_order_and_solves(ray_pool):
    pool = ray_pool
    assert pool.num_slots == 4 and pool.health() == [True, True]
    order = [3, 0, 2, 1]
    outs = pool.reset([ResetRequest(s, "two_buttons", seed=100 + s) for s in order])
    assert [o.slot for o in outs] == order
    assert [o.worker_id for o in outs] == [s // 2 for s in order]
    assert [o.spec.seed for o in outs] == [100 + s for s in order]
    assert all(o.worker_error is None and o.info.milestones == (False, False) for o in outs)
    # the two slots of one worker are two contexts in one browser; the workers are two processes
    browsers = pool.browser_pids()
    assert all(len(b) == 1 for b in browsers) and browsers[0] != browsers[1]
    assert len(set(pool.worker_pids())) == 2

    history = _run_oracle(pool, [2, 1, 3, 0])
    for s in range(4):
        _assert_solved(history[s])
    assert pool.replacements == 0


def test_ray_pool_batch_calls_leave_no_record_in_rays_task_table(ray_pool):
    """Ray's GCS keeps a record of every traced task (up to 100,000): a long run's env steps would
    grow it without need, so the workers' calls are not traced; other tasks still are."""
    import ray
    from ray._private import state

    @ray.remote(num_cpus=0)
    def traced() -> int:
        return 1

    _reset_all(ray_pool, seed=7)
    _oracle_step(ray_pool, [0, 1, 2, 3])
    assert ray.get(traced.remote()) == 1
    names: list[str] = []
    for _ in range(50):  # workers report their task events about once a second
        names = [e.task_info.name for e in state.state._get_all_task_events()]
        if any("traced" in n for n in names):
            break
        time.sleep(0.1)
    assert any("traced" in n for n in names), names
    assert not [n for n in names if "EnvWorker" in n], names


def test_ray_pool_step_and_reset_across_workers(ray_pool):
    # slot 0 (worker 0) steps while slot 3 (worker 1) resets: one batch over both workers
    _step_and_reset_check(ray_pool, seed=60)


def test_ray_pool_bad_batches_are_rejected_before_sending(ray_pool):
    with pytest.raises(PoolRequestError, match="unknown task"):
        ray_pool.reset([ResetRequest(0, "nope", seed=0)])
    with pytest.raises(PoolRequestError, match="out of range"):
        ray_pool.oracle_actions([5])


def test_ray_pool_needs_a_known_suite(ray_session):
    with pytest.raises(PoolStartError, match="did not start.*unknown suite"):
        RayEnvPool("no-such-suite", num_workers=1, start_timeout_s=30)


def test_sigkilled_worker_is_replaced_and_other_slots_go_on(ray_pool):
    pool = ray_pool
    _reset_all(pool, seed=1)
    first = _oracle_step(pool, [0, 1, 2, 3])
    assert all(o.info.milestones == (True, False) for o in first)

    # between steps: kill worker 1 (slots 2, 3) and see that its Chromium does not outlive it
    old_pid, (old_browser,) = pool.worker_pids()[1], pool.browser_pids()[1]
    replaced = pool.replacements
    actions = pool.oracle_actions([0, 1, 2, 3])
    os.kill(old_pid, signal.SIGKILL)
    assert _pid_gone(old_pid)
    assert pool.health() == [True, False]  # health reports; the next batch call replaces
    outs = pool.step([ActionRequest(s, a) for s, a in zip(range(4), actions)])
    for o in outs[:2]:  # worker 0 untouched
        assert o.worker_error is None and o.terminated and o.info.success == 1.0
    for o in outs[2:]:
        assert o.worker_error and "worker 1" in o.worker_error and o.truncated and o.worker_id == 1
        assert o.observation.size == (1, 1) and o.observation.last_action_error
    assert pool.replacements == replaced + 1
    assert _pid_gone(old_browser), "the killed worker's Chromium outlived it"
    with pytest.raises(PoolRequestError):  # the aborted episode is over
        pool.step([ActionRequest(2, Click(0.5, 0.5))])

    outs = pool.reset([ResetRequest(2, "two_buttons", seed=3), ResetRequest(3, "two_buttons", seed=4)])
    assert all(o.worker_error is None for o in outs) and outs[1].spec.seed == 4
    assert pool.worker_pids()[1] != old_pid and pool.health() == [True, True]
    history = _run_oracle(pool, [2, 3])
    _assert_solved(history[2])
    _assert_solved(history[3])

    # during a step: kill worker 0 while slot 0 waits inside its step
    _reset_all(pool, seed=10)
    victim = pool.worker_pids()[0]
    actions = [Wait(2.0), *pool.oracle_actions([1, 2, 3])]
    killer = threading.Timer(0.5, os.kill, (victim, signal.SIGKILL))
    killer.start()
    t0 = time.perf_counter()
    outs = pool.step([ActionRequest(s, a) for s, a in zip(range(4), actions)])
    killer.join()
    assert time.perf_counter() - t0 < 2.0  # the death was noticed, not waited out
    assert all(o.worker_error and "died" in o.worker_error for o in outs[:2])
    assert all(o.worker_error is None and o.info.milestones == (True, False) for o in outs[2:])
    outs = pool.reset([ResetRequest(0, "two_buttons", seed=10), ResetRequest(1, "two_buttons", seed=11)])
    assert all(o.worker_error is None for o in outs)
    history = _run_oracle(pool, [0, 1, 2, 3])
    _assert_solved(history[0])
    assert all(history[s][-1].info.success == 1.0 for s in (1, 2, 3))


def test_hung_worker_is_killed_after_the_timeout_and_replaced(ray_pool):
    pool = ray_pool
    _reset_all(pool, seed=20)
    hung_pid = pool.worker_pids()[1]
    replaced = pool.replacements
    actions = [*pool.oracle_actions([0, 1]), Wait(30), Click(0.5, 0.5)]
    t0 = time.perf_counter()
    outs = pool.step([ActionRequest(s, a) for s, a in zip(range(4), actions)])
    waited = time.perf_counter() - t0
    assert pool.step_timeout_s <= waited < pool.step_timeout_s + 3
    assert all(o.worker_error is None and o.info.milestones == (True, False) for o in outs[:2])
    assert all(o.worker_error and "did not answer" in o.worker_error for o in outs[2:])
    assert pool.replacements == replaced + 1 and _pid_gone(hung_pid)
    outs = pool.reset([ResetRequest(2, "two_buttons", seed=22), ResetRequest(3, "two_buttons", seed=23)])
    assert all(o.worker_error is None for o in outs)
    history = _run_oracle(pool, [0, 1, 2, 3])
    _assert_solved(history[3])


def test_ray_pool_hands_each_slots_calls_back_as_they_end(ray_pool):
    pool = ray_pool
    _reset_all(pool, seed=90)
    # slot 0 (worker 0) waits 4 s; slot 1 on the same worker and slots 2, 3 on the other solve their
    # episodes meanwhile (A, then B: two rounds of three steps, well under 4 s even on a loaded machine,
    # where 1.5 s was not)
    pool.submit([ActionRequest(0, Wait(4.0))])
    for _ in range(2):
        pool.submit([ActionRequest(s, a) for s, a in zip([1, 2, 3], pool.oracle_actions([1, 2, 3]))])
        got = {o.slot: o for o in pool.collect(least=3)}
        assert set(got) == {1, 2, 3}, "a slow slot held up the others"
        assert pool.in_flight == [0]
    assert all(o.terminated and o.info.success == 1.0 for o in got.values())
    with pytest.raises(PoolRequestError, match="in flight"):
        pool.step([ActionRequest(0, Click(0.5, 0.5))])
    with pytest.raises(PoolRequestError, match="in flight"):
        pool.oracle_actions([0])
    # a reset for the worker whose other slot is in flight goes with its next call
    pool.submit(resets=[ResetRequest(1, "two_buttons", seed=95)])
    rest = {o.slot: o for o in pool.collect(least=10)}
    assert set(rest) == {0, 1} and pool.in_flight == [] and not any(o.worker_error for o in rest.values())
    assert rest[1].spec.seed == 95 and not rest[0].done and rest[0].info.milestones == (False, False)
    _run_oracle(pool, [0, 1])  # slots come back to the usual calls


def test_ray_pool_slots_in_flight_on_a_worker_a_batch_call_replaced_come_back_with_its_reason(ray_pool):
    pool = ray_pool
    _reset_all(pool, seed=97)
    pool.submit([ActionRequest(0, Wait(2.0))])
    time.sleep(0.3)  # the worker's call for it came back (empty) and went out again
    pid, replaced = pool.worker_pids()[0], pool.replacements
    os.kill(pid, signal.SIGKILL)
    assert _pid_gone(pid)
    (out,) = pool.step([ActionRequest(1, Click(0.99, 0.99))])  # a batch call meets the dead worker
    assert "died" in out.worker_error and pool.replacements == replaced + 1
    t0 = time.perf_counter()
    (lost,) = pool.collect(least=1)
    assert time.perf_counter() - t0 < 1.0 and lost.slot == 0 and "died" in lost.worker_error
    assert pool.replacements == replaced + 1 and pool.in_flight == []  # the new worker was not replaced too
    outs = pool.reset([ResetRequest(s, "two_buttons", seed=97 + s) for s in (0, 1)])
    assert not any(o.worker_error for o in outs)


@pytest.mark.slow  # sleeps past the step timeout
def test_ray_pool_timeouts_count_only_the_time_the_pool_waits(ray_pool):
    pool = ray_pool
    _reset_all(pool, seed=98)
    pool.submit([ActionRequest(0, Wait(0.3))])
    time.sleep(pool.step_timeout_s + 1)  # the policy thinks; the worker's calls do not move meanwhile
    replaced = pool.replacements
    (out,) = pool.collect(least=1)
    assert out.slot == 0 and out.worker_error is None and pool.replacements == replaced


@pytest.mark.slow  # waits out the step timeout (the batch calls' own timeout is tested in the fast suite)
def test_ray_pool_replaces_a_worker_whose_submitted_call_passes_its_timeout(ray_pool):
    pool = ray_pool
    _reset_all(pool, seed=96)
    # a call past the step timeout: the worker is killed and replaced, its slots come back with the reason
    hung_pid, replaced = pool.worker_pids()[1], pool.replacements
    pool.submit([ActionRequest(2, Wait(30))])
    t0 = time.perf_counter()
    (late,) = pool.collect(least=1)
    assert pool.step_timeout_s - 0.5 <= time.perf_counter() - t0 < pool.step_timeout_s + 3
    assert late.slot == 2 and "did not answer" in late.worker_error and late.done
    assert pool.replacements == replaced + 1 and _pid_gone(hung_pid) and pool.in_flight == []
    outs = pool.reset([ResetRequest(2, "two_buttons", seed=22), ResetRequest(3, "two_buttons", seed=23)])
    assert all(o.worker_error is None for o in outs)


def test_killed_chromium_truncates_its_envs_and_the_next_reset_works(ray_pool):
    pool = ray_pool
    _reset_all(pool, seed=30)
    worker_pid = pool.worker_pids()[0]
    (browser_pid,) = pool.browser_pids()[0]
    os.kill(browser_pid, signal.SIGKILL)
    assert _pid_gone(browser_pid)
    outs = _oracle_step(pool, [0, 1, 2, 3])
    for o in outs[:2]:  # both contexts lived in the killed browser: truncated, not aborted
        assert o.worker_error is None and o.truncated and not o.terminated
        assert o.info.device_error and o.observation.size == (1, 1)
    assert all(o.worker_error is None and o.info.milestones == (True, False) for o in outs[2:])

    replaced = pool.replacements
    outs = pool.reset([ResetRequest(1, "two_buttons", seed=31), ResetRequest(0, "two_buttons", seed=30)])
    assert all(o.worker_error is None and o.info.milestones == (False, False) for o in outs)
    assert pool.worker_pids()[0] == worker_pid and pool.replacements == replaced  # same worker, new browser
    (new_browser,) = pool.browser_pids()[0]
    assert new_browser != browser_pid
    history = _run_oracle(pool, [0, 1, 2, 3])
    _assert_solved(history[0])
    _assert_solved(history[1])


def test_too_many_replacements_raise(ray_session):
    with RayEnvPool(SUITE_PATH, num_workers=1, max_replacements=1, step_timeout_s=20) as pool:
        os.kill(pool.worker_pids()[0], signal.SIGKILL)
        (out,) = pool.reset([ResetRequest(0, "two_buttons", seed=0)])
        assert out.worker_error and pool.replacements == 1
        os.kill(pool.worker_pids()[0], signal.SIGKILL)
        with pytest.raises(WorkerReplacementError, match="max_replacements=1"):
            pool.reset([ResetRequest(0, "two_buttons", seed=0)])


# --- a real suite --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["in_process", "ray"])
def test_miniwob_oracle_episodes_on_both_pools(ray_session, kind):
    tasks = {0: "click-button", 1: "click-checkboxes"}
    pool = (InProcessPool("miniwob", num_slots=2) if kind == "in_process"
            else RayEnvPool("miniwob", num_workers=1, envs_per_worker=2, step_timeout_s=30))
    with pool:
        outs = pool.reset([ResetRequest(s, t, seed=7) for s, t in tasks.items()])
        assert [o.spec.task_id for o in outs] == ["click-button", "click-checkboxes"]
        assert all(o.worker_error is None and o.observation.size == (160, 210) for o in outs)
        history = _run_oracle(pool, [0, 1])
        for s in tasks:
            last = history[s][-1]
            assert last.terminated and last.info.success == 1.0 and last.worker_error is None
