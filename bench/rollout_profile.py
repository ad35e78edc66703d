"""Where the rollout loop's time goes: timers around each phase of an env step, and cProfile.

    python bench/rollout_profile.py                         # 8 slots, random agent, both stepping modes
    python bench/rollout_profile.py --slots 8 --episodes-per-slot 4 --cprofile 25

Runs :func:`rl.rollout.run_rollout` with :class:`rl.agents.RandomPolicy` (no model) on
an :class:`~emulators.pool.InProcessPool` of the webapps suite, once with the slots stepped
one after another (``concurrent=False``) and once side by side (the default), alternating
``--repeats`` times so that both see the same machine load. Every step goes to a real
:class:`guiagent.store.Store` in a temp folder.

The timers wrap the device and task methods for the run (nothing in the library is
changed): ``reset`` (the whole slot reset: session state, start page, first observation),
``in-page reset`` (the start page rendered in the open document), ``page load``
(navigations: resets that load the page, taps on links), ``act`` (the action's input events), ``settle``
(waiting for the page to be quiet), ``observe`` (screenshot + ARIA tree), ``state check``
(the task reading the app's server-side state for milestones and success), ``session
reset`` (the task writing the episode's start state) and ``store`` (the rollout's own
store timer). Each phase shows its calls, milliseconds per call and its sum over slots as
a share of wall time: with slots side by side the shares add up to more than 100%
(they overlap). Each run also reports the CPU milliseconds an env step, summed over
every process of the rollout (this one, the Playwright driver, Chromium's browser,
renderer, GPU and utility processes: ``bench/cpu.py``). ``--cprofile N`` prints the N functions with most cumulative time of
the last side-by-side run. The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench.cpu import cpu_by_process  # noqa: E402
from emulators.browser import BrowserDevice  # noqa: E402
from emulators.pool import InProcessPool  # noqa: E402
from emulators.suites.webapps.server import LocalClient  # noqa: E402
from emulators.suites.webapps.tasks.base import WebTask  # noqa: E402
from guiagent.store import Store  # noqa: E402
from rl.agents import RandomPolicy  # noqa: E402
from rl.rollout import make_groups, run_rollout  # noqa: E402

#: phase -> (class, method) it times
PHASES = {
    "reset": (WebTask, "reset_device"),
    "in-page reset": (BrowserDevice, "reset_in_page"),
    "page load": (BrowserDevice, "_goto"),
    "session reset": (LocalClient, "reset"),
    "act": (BrowserDevice, "_perform"),
    "settle": (BrowserDevice, "_settle"),
    "observe": (BrowserDevice, "observe"),
    "state check": (WebTask, "state"),
}


class Timers:
    def __init__(self) -> None:
        self.calls = {p: 0 for p in PHASES}
        self.seconds = {p: 0.0 for p in PHASES}

    @contextlib.contextmanager
    def installed(self):
        originals = {}
        for phase, (cls, name) in PHASES.items():
            fn = getattr(cls, name)
            originals[phase] = fn

            def timed(*a, __fn=fn, __phase=phase, **k):
                t0 = time.perf_counter()
                try:
                    return __fn(*a, **k)
                finally:
                    self.calls[__phase] += 1
                    self.seconds[__phase] += time.perf_counter() - t0
            setattr(cls, name, functools.wraps(fn)(timed))
        try:
            yield self
        finally:
            for phase, (cls, name) in PHASES.items():
                setattr(cls, name, originals[phase])


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def requests(tasks: list[str], episodes: int, group_size: int, seed0: int):
    n_groups = max(1, episodes // group_size)
    return make_groups([tasks[i % len(tasks)] for i in range(n_groups)],
                       [seed0 + i for i in range(n_groups)], group_size)


def one_run(pool, store: Store, run_id: str, args, seed0: int, profile: cProfile.Profile | None) -> dict:
    timers = Timers()
    reqs = requests(args.tasks, args.episodes_per_slot * pool.num_slots, 2, seed0)
    cpu0 = cpu_by_process(os.getpid())
    with timers.installed():
        if profile is not None:
            profile.enable()
        res = run_rollout(pool, RandomPolicy(seed=seed0), reqs, store=store, run_id=run_id, suite="webapps")
        if profile is not None:
            profile.disable()
    cpu1 = cpu_by_process(os.getpid())
    steps = max(res.env_steps, 1)
    cpu = {k: round(1e3 * (cpu1.get(k, 0) - cpu0.get(k, 0)) / steps, 1) for k in sorted(set(cpu0) | set(cpu1))}
    wall = res.wall_seconds
    phases = {p: {"calls": timers.calls[p], "ms_per_call": round(1e3 * timers.seconds[p] / max(timers.calls[p], 1), 1),
                  "share": round(timers.seconds[p] / wall, 3)} for p in PHASES}
    phases["store"] = {"calls": None, "ms_per_call": None, "share": round(res.store_seconds / wall, 3)}
    return {"steps_per_s": round(res.steps_per_second, 2), "env_steps": res.env_steps,
            "episodes": len(res.trajectories), "resets": timers.calls["reset"], "wall_s": round(wall, 2),
            "env_share": round(res.env_seconds / wall, 3), "phases": phases,
            "cpu_ms_per_step": {k: v for k, v in cpu.items() if v}, "load_avg": load_avg()}


def show(label: str, r: dict) -> None:
    print(f"\n{label}: {r['steps_per_s']:.2f} steps/s ({r['env_steps']} steps, {r['resets']} resets, "
          f"{r['wall_s']:.1f} s, env {r['env_share']:.0%} of wall)  load {r['load_avg']}")
    print(f"  {'phase':<14} {'calls':>6} {'ms/call':>8} {'sum/wall':>9}")
    for p, v in r["phases"].items():
        calls = "" if v["calls"] is None else v["calls"]
        ms = "" if v["ms_per_call"] is None else f"{v['ms_per_call']:.1f}"
        print(f"  {p:<14} {calls:>6} {ms:>8} {v['share']:>9.1%}")
    cpu = r["cpu_ms_per_step"]
    print(f"  CPU a step: {sum(cpu.values()):.0f} ms (" + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items()) + ")")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--tasks", nargs="+", default=["open_app", "settings_turn_on"])
    ap.add_argument("--episodes-per-slot", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2, help="alternating runs per stepping mode")
    ap.add_argument("--cprofile", type=int, default=0, metavar="N", help="print the top N functions")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="guiagent-bench-profile-"))
    store = Store.open(tmp / "store")
    # own_thread=False: the devices' work runs on this thread, where the timers and cProfile see it
    pools = {mode: InProcessPool("webapps", num_slots=args.slots, concurrent=(mode == "side_by_side"), own_thread=False)
             for mode in ("one_after_another", "side_by_side")}
    out: dict[str, list[dict]] = {m: [] for m in pools}
    prof = cProfile.Profile() if args.cprofile else None
    try:
        for mode, pool in pools.items():  # warm-up: browser, contexts, first page loads
            run_id = store.create_run(f"profile-{mode}", env="webapps", algo="bench")
            run_rollout(pool, RandomPolicy(seed=0), requests(args.tasks, args.slots, 1, 10_000)[:args.slots],
                        store=store, run_id=run_id, suite="webapps")
        for rep in range(args.repeats):
            for mode, pool in pools.items():
                last = rep == args.repeats - 1 and mode == "side_by_side"
                r = one_run(pool, store, run_id, args, 100 + rep, prof if last else None)
                out[mode].append(r)
                show(f"{mode} #{rep + 1}, {args.slots} slots", r)
    finally:
        for pool in pools.values():
            pool.close()
        store.close()
    if prof is not None:
        print()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.cprofile)
    best = {m: max(r["steps_per_s"] for r in rs) for m, rs in out.items()}
    print(json.dumps({"bench": "rollout_profile", "slots": args.slots, "tasks": args.tasks, "runs": out,
                      "best_steps_per_s": best,
                      "ratio_side_by_side": round(best["side_by_side"] / max(best["one_after_another"], 1e-9), 2)}))


if __name__ == "__main__":
    main()
