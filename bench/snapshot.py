"""Snapshots and reset by restore on webapps: what they cost, and the rollout loop beside a raw
Playwright loop in one run.

    python bench/snapshot.py                          # operations, then the loops (~3-4 min)
    python bench/snapshot.py --skip-loops --repeats 40
    python bench/snapshot.py --skip-ops --rounds 3 --group-size 2 4
    python bench/snapshot.py --skip-ops --tree none                     # observations without the tree
    python bench/snapshot.py --skip-ops --loops restore restore_no_tree_cache   # the tree cache on and off
    python bench/snapshot.py --skip-ops --loops restore restore_two_batches     # starts beside steps, or after
    python bench/snapshot.py --skip-ops --loops restore restore_lean restore_lean_png   # the lean step
    python bench/snapshot.py --skip-ops --loops restore_lean restore_lean_taps   # random gestures, or taps only
    python bench/snapshot.py --skip-ops --loops restore restore_partial restore_lean restore_lean_partial  # partial batches
    python bench/snapshot.py --skip-ops --loops ray_lean ray_lean_partial    # the same on a Ray pool
    python bench/snapshot.py --skip-ops --skip-loops --miniwob-survey    # which MiniWoB++ pages replay

**Operations** (one phone device of the webapps suite; CPU milliseconds a call summed over this
process, the Playwright driver and every Chromium process, from ``/proc``, and wall milliseconds,
``--repeats`` calls after one warm-up, two alternating rounds):

* ``reset (in page)``: ``settings_turn_on``'s reset as it was before start states: session state,
  start page rendered in the open document, settle, first observation;
* ``reset (restore start)``: the same reset restored from a start state (what the second and later
  episodes of a group get);
* ``snapshot``: ``GuiEnv.snapshot()`` half way through ``notes_create`` (a form with typed text);
* ``restore (same device)`` / ``restore (other device)``: ``GuiEnv.restore`` of that state on the
  device that took it and on another (another session);
* ``step``: a tap, settle and observation (the unit every loop pays).

**Loops**, ``--rounds`` alternating runs of each on a 2-core machine shared with other jobs (the
load average is printed with every figure):

* ``rollout``: :func:`rl.rollout.run_rollout` with the random agent (:class:`rl.agents.RandomPolicy`)
  on an :class:`~emulators.pool.InProcessPool` of ``--slots`` webapps slots (one Chromium, slots side
  by side), the 3-step tasks ``open_app`` and ``settings_turn_on`` (one reset every 1-3 steps),
  groups of ``--group-size``, a real store in a temp folder; with reset by restore (the default)
  and without (``reset_by_restore=false``: every reset in page);
  ``--loops`` picks the variants: also the tree cache off, the loop's steps and starts in two batches
  (as before), the lean step with an agent that only taps as the raw loops do
  (``RandomPolicy(actions="taps")``), and the lean step (``tree="none"``, ``target_boxes=False``, JPEG captures; and the same
  with PNG); and the loop on partial batches (``min_batch_share=0.5``: the policy acts on the slots
  that are back once half of those in flight are), with the default and the lean step; and the
  lean step on a ``RayEnvPool`` of one worker holding every slot, in turns and on partial batches;
* ``raw``: Playwright alone on ``--slots`` contexts of one Chromium (the same phone emulation, each
  on a session's launcher): a tap at a random point and ``page.screenshot()`` a step; no settling,
  no tree, no resets, no store. Two of them, right after each rollout: ``sequential_jpeg`` (one
  context after another, JPEG q80: how the loop's earlier 0.72-0.85x was measured) and
  ``side_by_side_png`` (the contexts side by side as the pool runs its slots, PNG as the env
  captures: the browser's own speed with the pool's concurrency); and ``sequential_jpeg_episodes``,
  the first with the rollout's episodes: each context loads its launcher again (``page.goto``) before
  every third of its taps, so its taps land on start pages as often as the rollout's do (the raw loops
  without it drift deep into the apps, where a random point is seldom a link).

Reported: steps/s of each, each rollout's ratio to the raw loops that ran right after it, and the CPU a
step, in all and by kind of process (python: this process with the webapps server and the store; driver:
Playwright's node process; browser, renderer, gpu, utility: Chromium's), and for each rollout how long a
step took (median, p90, max) and the share of the slots' time spent inside a step; for the in-process
loops and the raw ones, the page requests a step (``/s/...`` requests the app server answered: a link
followed, a form sent, an episode's start visited), what the browser rendered besides taps and
captures. The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench.cpu import cpu_by_process, load_avg  # noqa: E402
from bench.cpu import measure as _measure  # noqa: E402
from emulators.base import GuiEnv  # noqa: E402
from emulators.browser_support import launch, run_concurrently  # noqa: E402
from emulators.snapshot import START_STATES, StartStates  # noqa: E402
from emulators.suites.webapps import SUITE, TASKS  # noqa: E402
from guiagent.types import Click  # noqa: E402


def measure(fn: Callable[[], object], repeats: int) -> dict:
    return _measure(fn, repeats, with_load=True)


def operations(repeats: int) -> dict[str, list[dict]]:
    handle = launch()
    devs = [SUITE.make_device(browser=handle, reset_by_restore=False) for _ in range(3)]
    try:
        plain = GuiEnv(devs[0], TASKS["settings_turn_on"])
        restoring = GuiEnv(devs[1], TASKS["settings_turn_on"], start_states=StartStates())
        plain.reset_typed(seed=0)
        restoring.reset_typed(seed=0)
        form = GuiEnv(devs[2], TASKS["notes_create"])
        form.reset_typed(seed=4)
        for _ in range(3):
            form.step_typed(form.oracle_action())
        state = form.snapshot()
        other = GuiEnv(devs[1], TASKS["notes_create"])
        stepper = GuiEnv(devs[0], TASKS["settings_turn_on"])

        def step() -> None:
            if stepper.done or stepper.task is None or stepper.steps >= stepper.max_steps - 1:
                stepper.reset_typed(seed=0)
            stepper.step_typed(Click(0.5, 0.95))  # an empty spot: nothing changes but the settle and capture

        ops: dict[str, Callable[[], object]] = {
            "reset (in page)": lambda: plain.reset_typed(seed=0),
            "reset (restore start)": lambda: restoring.reset_typed(seed=0),
            "snapshot": form.snapshot,
            "restore (same device)": lambda: form.restore(state),
            "restore (other device)": lambda: other.restore(state),
            "step": step,
        }
        out: dict[str, list[dict]] = {name: [] for name in ops}
        for rnd in range(2):
            for name, fn in ops.items():
                r = measure(fn, repeats)
                out[name].append(r)
                print(f"round {rnd + 1} {name:<24} {r['cpu_ms']:6.1f} ms CPU {r['wall_ms']:6.1f} ms wall  "
                      f"{r['by_process']}  load {r['load_avg']}", flush=True)
        return out
    finally:
        for d in devs:
            d.close()
        handle.close()


def by_process(cpu0: dict[str, float], cpu1: dict[str, float], steps: int) -> dict[str, float]:
    """CPU ms a step by kind of process (python, the Playwright driver, Chromium's browser, renderer and
    GPU processes) between two :func:`bench.cpu.cpu_by_process` readings."""
    return {k: round(1e3 * (cpu1[k] - cpu0.get(k, 0.0)) / max(steps, 1), 1) for k in sorted(cpu1)}


class PageRequests:
    """Requests for the apps' pages (``/s/<session>/...``) the app server in this process answered:
    the pages a run made the browser render (a link followed, a form sent, an episode's start
    visited), beside its taps and captures. A Ray pool's server lives in its worker: not counted."""

    def __init__(self) -> None:
        from emulators.suites.webapps.server import shared_server

        server, _ = shared_server()
        wsgi = server._server  # werkzeug's server: every request goes through its ``app``
        inner, lock = wsgi.app, threading.Lock()
        self.count = 0

        def app(environ: dict, start_response: Any) -> Any:
            if str(environ.get("PATH_INFO", "")).startswith("/s/"):
                with lock:
                    self.count += 1
            return inner(environ, start_response)

        wsgi.app = app


class RawLoop:
    """Playwright alone: ``n`` phone contexts of one Chromium on the apps, a tap and a screenshot a step."""

    def __init__(self, n: int):
        from emulators.browser import MOBILE_USER_AGENT
        from emulators.suites.webapps.server import shared_server
        from emulators.suites.webapps.world import make_world

        server, client = shared_server()
        self.handle = launch()
        self.pages: list[Any] = []
        self.starts: list[str] = []  # each context's session launcher
        for i in range(n):
            ctx = self.handle.browser.new_context(viewport={"width": 360, "height": 640}, is_mobile=True,
                                                  has_touch=True, device_scale_factor=1, user_agent=MOBILE_USER_AGENT)
            page = ctx.new_page()
            url = server.session_url(client.create(make_world(i)))
            page.goto(url, wait_until="load")
            self.pages.append(page)
            self.starts.append(url)
        self.taps = [0] * n
        self.rng = random.Random(0)

    #: the raw loops: one context after another with JPEG screenshots (how the loop's earlier
    #: 0.72-0.85x was measured), the contexts side by side with PNG (the pool's way and format), and
    #: the first with episodes: each context back on its launcher (``page.goto``) after every
    #: ``EPISODE`` of its taps, as a raw Playwright loop of 3-step episodes would go
    MODES = {"sequential_jpeg": (False, {"type": "jpeg", "quality": 80}, 0), "side_by_side_png": (True, {}, 0),
             "sequential_jpeg_episodes": (False, {"type": "jpeg", "quality": 80}, 3)}

    def run(self, steps: int, mode: str) -> dict:
        side_by_side, shot, episode = self.MODES[mode]
        n = len(self.pages)
        batches = max(1, steps // n)
        self.taps, loads = [0] * n, [0]  # with episodes, every run starts each context's episode anew

        def one(i: int) -> None:
            page = self.pages[i]
            if episode and self.taps[i] % episode == 0:  # an episode's start: its first page loaded
                page.goto(self.starts[i], wait_until="load")
                loads[0] += 1
            self.taps[i] += 1
            page.touchscreen.tap(self.rng.uniform(5, 355), self.rng.uniform(40, 635))
            page.screenshot(**shot)

        cpu0, t0 = cpu_by_process(os.getpid()), time.perf_counter()
        for _ in range(batches):
            calls = [functools.partial(one, i) for i in range(n)]
            if side_by_side:
                run_concurrently(self.handle.browser, calls)
            else:
                for call in calls:
                    call()
        wall = time.perf_counter() - t0
        cpu1 = cpu_by_process(os.getpid())
        cpu = sum(cpu1.values()) - sum(cpu0.values())
        return {"loop": "raw", "mode": mode, "env_steps": batches * n, "starts_loaded": loads[0], "wall_s": round(wall, 3),
                "steps_per_s": round(batches * n / wall, 2), "cpu_ms_per_step": round(1e3 * cpu / (batches * n), 1),
                "cpu_ms_by_process": by_process(cpu0, cpu1, batches * n), "load_avg": load_avg()}

    def close(self) -> None:
        self.handle.close()


#: the rollout loops --loops picks from: name -> device options
LOOP_MODES: dict[str, dict[str, Any]] = {
    "restore": {"reset_by_restore": True},
    "in_page": {"reset_by_restore": False},
    "restore_no_tree_cache": {"reset_by_restore": True, "tree_cache": False},
    # the loop as before one batch a turn: the turn's step, then the freed slots' resets, each a batch
    "restore_two_batches": {"reset_by_restore": True, "_two_batches": True},
    # the lean step: no ARIA tree, no target box read before a tap, JPEG captures (the raw
    # sequential loop's format)
    "restore_lean": {"reset_by_restore": True, "tree": "none", "target_boxes": False, "image_format": "jpeg"},
    "restore_lean_png": {"reset_by_restore": True, "tree": "none", "target_boxes": False},
    # the lean step without the turn's barrier: each slot its own loop (a measurement, not a mode of
    # the trainer: a policy acting on one screen at a time, slots side by side in one thread)
    "restore_lean_per_slot": {"reset_by_restore": True, "tree": "none", "target_boxes": False,
                              "image_format": "jpeg", "_per_slot": True},
    # the lean step with an agent that only taps (RandomPolicy(actions="taps")): the raw loops' own
    # actions, so the ratio is the loop's cost (resets, checks, store) and not a swipe's 300 ms
    "restore_lean_taps": {"reset_by_restore": True, "tree": "none", "target_boxes": False,
                          "image_format": "jpeg", "_actions": "taps"},
    # the loop on partial batches (rollouts.min_batch_share 0.5): the policy acts on the slots that
    # are back once half the slots in flight are; the default step, and the lean step
    "restore_partial": {"reset_by_restore": True, "_share": 0.5},
    "restore_lean_partial": {"reset_by_restore": True, "tree": "none", "target_boxes": False,
                             "image_format": "jpeg", "_share": 0.5},
    "restore_lean_taps_partial": {"reset_by_restore": True, "tree": "none", "target_boxes": False,
                                  "image_format": "jpeg", "_actions": "taps", "_share": 0.5},
    # restore_lean_partial with the pool's calls on the caller's thread (InProcessPool(own_thread=False)),
    # beside it: what the pool's own thread (any thread may call it) costs a step
    "restore_lean_partial_caller_thread": {"reset_by_restore": True, "tree": "none", "target_boxes": False,
                                           "image_format": "jpeg", "_share": 0.5, "_own_thread": False},
    # the lean step on a RayEnvPool of one worker holding every slot (one Chromium in the actor's
    # process), in turns and on partial batches
    "ray_lean": {"reset_by_restore": True, "tree": "none", "target_boxes": False, "image_format": "jpeg",
                 "_ray": True},
    "ray_lean_partial": {"reset_by_restore": True, "tree": "none", "target_boxes": False, "image_format": "jpeg",
                         "_ray": True, "_share": 0.5},
}


class SlotView:
    """One slot of an in-process pool as a pool of one slot (for :func:`per_slot_rollout`)."""

    def __init__(self, pool: Any, slot: int):
        self.pool, self.slot, self.num_slots, self.suite = pool, slot, 1, pool.suite

    def reset(self, requests: list) -> list:
        return self.pool.reset([dataclasses.replace(r, slot=self.slot) for r in requests])

    def step(self, requests: list) -> list:
        return self.pool.step([dataclasses.replace(r, slot=self.slot) for r in requests])


def per_slot_rollout(pool: Any, seed: int, requests: list, actions: str = "mixed", **kw: Any) -> Any:
    """The loop without its turn's barrier: every slot runs its own :class:`rl.loop.RolloutLoop` over
    its share of the requests (its own random agent), the slots side by side in greenlets
    (:func:`~emulators.browser_support.run_concurrently`), so a slot whose page settles slowly holds up
    no other. The ceiling of a loop that acts on partial batches."""
    from rl.agents import RandomPolicy
    from rl.loop import RolloutLoop, RolloutResult
    from rl.rollout import LiveSide

    n = pool.num_slots
    if pool._worker._browser is None:  # the worker starts its browser with its first reset
        raise RuntimeError("per_slot_rollout: run the pool once first (its browser starts with a reset)")
    loops = [RolloutLoop(LiveSide(SlotView(pool, s), None, kw.get("suite", "")), RandomPolicy(seed + s, actions),
                         store=kw.get("store"), run_id=kw.get("run_id")) for s in range(n)]
    t0 = time.perf_counter()
    parts = run_concurrently(pool._worker._browser.browser,
                             [functools.partial(loop.run, requests[s::n]) for s, loop in enumerate(loops)])
    res = RolloutResult()
    for part in parts:
        res.extend(part)
    res.wall_seconds = time.perf_counter() - t0
    return res


def rollout(pool: Any, policy: Any, requests: list, *, two_batches: bool = False, per_slot: bool = False,
            seed: int = 0, actions: str = "mixed", **kw: Any) -> Any:
    """``run_rollout``; ``two_batches``: with the loop's step and starts in separate batches of the pool;
    ``per_slot``: :func:`per_slot_rollout` (random agents of ``actions``)."""
    from rl.loop import RolloutLoop
    from rl.rollout import LiveSide, run_rollout

    if per_slot:
        kw.pop("min_batch_share", None)
        return per_slot_rollout(pool, seed, requests, actions, **kw)
    if not two_batches:
        return run_rollout(pool, policy, requests, **kw)

    class TwoBatches(LiveSide):
        step_and_start = None  # the loop then steps, and starts the freed slots after it

    return RolloutLoop(TwoBatches(pool, None, kw.pop("suite", "")), policy, **kw).run(requests)


def step_latency(res: Any, slots: int) -> dict[str, float]:
    """How long an env step took (the store's ``latency_ms``: action, settle, observation and checks)
    and the share of the run's slot time spent inside one: the rest is resets, the loop's own work
    and waiting for a turn's slowest slot."""
    lats = sorted(s.latency_ms for t in res.trajectories for s in t.steps if s.latency_ms is not None)
    if not lats:
        return {"step_ms_median": 0.0, "step_ms_p90": 0.0, "step_ms_max": 0.0, "slot_busy_share": 0.0}
    return {"step_ms_median": round(statistics.median(lats), 1), "step_ms_p90": round(lats[int(0.9 * len(lats))], 1),
            "step_ms_max": round(lats[-1], 1),
            "slot_busy_share": round(sum(lats) / 1e3 / (slots * max(res.wall_seconds, 1e-9)), 3)}


def tree_counts(pool: Any) -> tuple[int, int]:
    """(trees read, trees reused) over a pool's devices so far (a Ray pool's are in its worker: 0, 0;
    so are its start states: START_STATES counts this process's)."""
    if not hasattr(pool, "_worker"):
        return 0, 0
    devs = [s.device for s in pool._worker._slots.values() if s.device is not None]
    return sum(getattr(d, "tree_reads", 0) for d in devs), sum(getattr(d, "tree_reuses", 0) for d in devs)


def loops(slots: int, rounds: int, episodes_per_slot: int, group_sizes: list[int], tree: str = "aria",
          modes: tuple[str, ...] = ("restore", "in_page")) -> list[dict]:
    from emulators.pool import InProcessPool
    from guiagent.store import Store
    from rl.agents import RandomPolicy
    from rl.rollout import make_groups, run_rollout

    tasks = ["open_app", "settings_turn_on"]
    tmp = Path(tempfile.mkdtemp(prefix="guiagent-bench-snapshot-"))
    store = Store.open(tmp / "store")
    def pool_for(mode: str) -> Any:
        options = {"tree": tree, **{k: v for k, v in LOOP_MODES[mode].items() if not k.startswith("_")}}
        if LOOP_MODES[mode].get("_ray"):
            from emulators.pool import RayEnvPool
            return RayEnvPool("webapps", num_workers=1, envs_per_worker=slots, device_options=options)
        # the per-slot loops drive the pool's browser from this thread (run_concurrently)
        return InProcessPool("webapps", num_slots=slots, device_options=options,
                             own_thread=LOOP_MODES[mode].get("_own_thread", not LOOP_MODES[mode].get("_per_slot")))

    pools = {mode: pool_for(mode) for mode in modes}
    raw = RawLoop(slots)
    pages = PageRequests()
    results: list[dict] = []
    seed = 0
    try:
        for mode, pool in pools.items():  # warm-up: browsers, contexts and first pages
            run_id = store.create_run(f"bench-snapshot-{mode}", env="webapps", algo="bench")
            run_rollout(pool, RandomPolicy(seed=0), make_groups([tasks[0]] * slots, list(range(90_000, 90_000 + slots)),
                                                                1), store=store, run_id=run_id, suite="webapps")
        for m in RawLoop.MODES:
            raw.run(slots * 2, m)
        for rnd in range(rounds):
            for g in group_sizes:
                n_groups = max(1, episodes_per_slot * slots // g)
                for mode, pool in pools.items():
                    seed += 1000
                    picks = [tasks[i % len(tasks)] for i in range(n_groups)]
                    requests = make_groups(picks, [seed + i for i in range(n_groups)], g)
                    run_id = store.create_run(f"bench-snapshot-{mode}-{rnd}-{g}", env="webapps", algo="bench")
                    hits0, misses0 = START_STATES.hits, START_STATES.misses
                    cpu0 = cpu_by_process(os.getpid())
                    trees0 = tree_counts(pool)
                    pages0 = pages.count
                    actions = LOOP_MODES[mode].get("_actions", "mixed")
                    res = rollout(pool, RandomPolicy(seed, actions), requests, store=store, run_id=run_id,
                                  suite="webapps", two_batches=LOOP_MODES[mode].get("_two_batches", False),
                                  per_slot=LOOP_MODES[mode].get("_per_slot", False), seed=seed, actions=actions,
                                  min_batch_share=LOOP_MODES[mode].get("_share", 1.0))
                    cpu1 = cpu_by_process(os.getpid())
                    trees1 = tree_counts(pool)
                    steps = max(res.env_steps, 1)
                    page_requests = (None if LOOP_MODES[mode].get("_ray")
                                     else round((pages.count - pages0) / steps, 3))
                    r = {"loop": "rollout", "reset": mode, "group_size": g, "round": rnd + 1,
                         "episodes": len(res.trajectories), "aborted": res.aborted, "env_steps": res.env_steps,
                         "wall_s": round(res.wall_seconds, 3), "steps_per_s": round(res.steps_per_second, 2),
                         "cpu_ms_per_step": round(1e3 * (sum(cpu1.values()) - sum(cpu0.values())) / steps, 1),
                         "cpu_ms_by_process": by_process(cpu0, cpu1, steps),
                         "steps_per_episode": round(res.env_steps / max(len(res.trajectories), 1), 2),
                         "start_hits": START_STATES.hits - hits0, "start_misses": START_STATES.misses - misses0,
                         "trees_read": trees1[0] - trees0[0], "trees_reused": trees1[1] - trees0[1],
                         "page_requests_per_step": page_requests,
                         **step_latency(res, slots), "load_avg": load_avg()}
                    results.append(r)
                    print(f"round {rnd + 1} G={g} rollout ({mode:<7}) {r['steps_per_s']:6.2f} steps/s "
                          f"{r['cpu_ms_per_step']:6.1f} ms CPU a step ({r['env_steps']} steps, "
                          f"{r['steps_per_episode']} an episode, starts restored {r['start_hits']}/"
                          f"{r['start_hits'] + r['start_misses']}, trees read {r['trees_read']} reused "
                          f"{r['trees_reused']}, page requests a step {r['page_requests_per_step']})  "
                          f"load {r['load_avg']}", flush=True)
                    print(f"    CPU ms a step by process: {r['cpu_ms_by_process']}; a step's wall ms median "
                          f"{r['step_ms_median']}, p90 {r['step_ms_p90']}, max {r['step_ms_max']}; slots inside a step "
                          f"{r['slot_busy_share']:.0%} of the run", flush=True)
                    r["ratio_vs_raw"] = {}
                    for m in RawLoop.MODES:
                        pages0 = pages.count
                        rr = raw.run(res.env_steps, m)
                        rr["page_requests_per_step"] = round((pages.count - pages0) / max(rr["env_steps"], 1), 3)
                        rr.update(round=rnd + 1, group_size=g, beside=mode)
                        r["ratio_vs_raw"][m] = round(r["steps_per_s"] / rr["steps_per_s"], 3)
                        results.append(rr)
                        print(f"round {rnd + 1} G={g}   raw {m:<17} {rr['steps_per_s']:6.2f} steps/s "
                              f"{rr['cpu_ms_per_step']:6.1f} ms CPU a step  -> rollout / raw "
                              f"{r['ratio_vs_raw'][m]:.3f}, page requests a step {rr['page_requests_per_step']}  "
                              f"load {rr['load_avg']}", flush=True)
                        print(f"    CPU ms a step by process: {rr['cpu_ms_by_process']}", flush=True)
    finally:
        raw.close()
        for pool in reversed(list(pools.values())):  # the first Ray pool started Ray: it closes last
            pool.close()
        store.close()
    return results


def miniwob_survey(seeds: int, steps: int) -> dict[str, list[str]]:
    """Each MiniWoB++ page: a random agent's ``steps`` actions, snapshotted and restored on another
    device (replayed, then checked against the captured screen)."""
    from emulators.base import SnapshotError
    from emulators.suites.miniwob import SUITE as MINIWOB

    handle = launch()
    d1, d2 = (MINIWOB.make_device(browser=handle, tree="none") for _ in range(2))
    out: dict[str, list[str]] = {}
    try:
        for task_id in MINIWOB.task_ids():
            cls = MINIWOB.task_class(task_id)
            got = []
            for seed in range(seeds):
                a, b = GuiEnv(d1, cls), GuiEnv(d2, cls)
                if not a.can_snapshot:
                    got.append("cannot snapshot")
                    continue
                a.action_space.seed(seed)
                a.reset_typed(seed=seed)
                for _ in range(steps):
                    if a.done:
                        break
                    a.step_typed(a.action_space.sample())
                try:
                    b.restore(a.snapshot())
                    got.append("same" if b.device.observe().screenshot == a.snapshot().observation.screenshot
                               else "differs")
                except SnapshotError:
                    got.append("refused")
            out[task_id] = got
            if set(got) != {"same"}:
                print(f"miniwob {task_id}: {got}", flush=True)
    finally:
        d1.close(), d2.close()
        handle.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--episodes-per-slot", type=int, default=4)
    ap.add_argument("--group-size", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--tree", choices=["aria", "none"], default="aria",
                    help="the loops' devices: ARIA tree in each observation (the default) or screenshots only")
    ap.add_argument("--loops", nargs="+", choices=list(LOOP_MODES), default=["restore", "in_page"],
                    help="the rollout loops to run: reset by restore, in page, reset by restore without the "
                         "tree cache (BrowserConfig.tree_cache off), reset by restore with a turn's step and "
                         "starts in two batches (the loop before it started freed slots beside the others' step)")
    ap.add_argument("--skip-ops", action="store_true")
    ap.add_argument("--skip-loops", action="store_true")
    ap.add_argument("--miniwob-survey", action="store_true", help="replay every MiniWoB++ page (~5 min)")
    args = ap.parse_args()
    for name in ("repeats", "rounds", "slots", "episodes_per_slot"):
        if getattr(args, name) < 1:
            print(f"bench/snapshot.py: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            sys.exit(2)
    if any(g < 1 for g in args.group_size):
        print("bench/snapshot.py: --group-size must be >= 1", file=sys.stderr)
        sys.exit(2)
    print(f"load {load_avg()}", flush=True)
    out: dict[str, Any] = {"bench": "snapshot"}
    if not args.skip_ops:
        ops = operations(args.repeats)
        out["operations"] = {k: {"cpu_ms": statistics.median(r["cpu_ms"] for r in v),
                                 "wall_ms": statistics.median(r["wall_ms"] for r in v), "rounds": v}
                             for k, v in ops.items()}
    if not args.skip_loops:
        res = loops(args.slots, args.rounds, args.episodes_per_slot, args.group_size, args.tree, tuple(args.loops))
        out["loops"] = res
        out["tree"] = args.tree
        summary: dict[str, Any] = {}
        for g in args.group_size:
            for mode in args.loops:
                rows = [r for r in res if r["loop"] == "rollout" and r["reset"] == mode and r["group_size"] == g]
                summary[f"G{g}_{mode}"] = {
                    "steps_per_s": [r["steps_per_s"] for r in rows],
                    **{f"vs_{m}": [r["ratio_vs_raw"][m] for r in rows] for m in RawLoop.MODES}}
        out["ratio_vs_raw"] = summary
        for k, v in summary.items():
            print(f"{k}: rollout {v['steps_per_s']} steps/s; / raw " + "; ".join(
                f"{m} {v['vs_' + m]}" for m in RawLoop.MODES))
    if args.miniwob_survey:
        survey = miniwob_survey(2, 3)
        out["miniwob_survey"] = {"pages": len(survey),
                                 "same": sorted(k for k, v in survey.items() if set(v) == {"same"}),
                                 "other": {k: v for k, v in survey.items() if set(v) != {"same"}}}
        print(f"miniwob: {len(out['miniwob_survey']['same'])} of {len(survey)} pages came back the same on every seed")
    SUITE.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
