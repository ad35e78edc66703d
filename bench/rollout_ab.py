"""The rollout loop of two code trees side by side: env steps/s and CPU an env step, alternating runs.

    git archive main | tar -x -C /tmp/guiagent-before
    python bench/rollout_ab.py --before /tmp/guiagent-before            # this checkout is "after"
    python bench/rollout_ab.py --before /tmp/a --after /tmp/b --slots 8 --episodes-per-slot 8 --repeats 3
    python bench/rollout_ab.py --before /tmp/a --also mid=/tmp/m          # a third tree between them

Each run is a fresh process that imports the code of one tree (its own Chromium, app
server and driver) and runs :func:`rl.rollout.run_rollout` with
:class:`rl.agents.RandomPolicy` (no model) on an :class:`~emulators.pool.InProcessPool` of
the webapps suite, ``--slots`` slots, groups of 2 over the fixed-layout tasks
(``--tasks``), every step written to a real :class:`guiagent.store.Store` in a temp
folder, after one warm-up episode a slot. It reports env steps/s (steps / wall time of
``run_rollout``) and the CPU milliseconds an env step summed over every process of the
run (the run's Python, the Playwright driver, Chromium's browser, renderer, GPU and
utility processes: ``bench/cpu.py``). Runs alternate before / after ``--repeats`` times so
both see the same machine load, which is printed with each run. The last stdout line is
one JSON object with every run, the medians and their ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(tree: str, slots: int, episodes_per_slot: int, tasks: list[str], seed: int) -> None:
    """One timed run inside ``tree``'s code; prints one JSON line."""
    sys.path.insert(0, tree)
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_cpu", HERE / "cpu.py")
    cpu = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(cpu)  # type: ignore[union-attr]

    from emulators.pool import InProcessPool
    from guiagent.store import Store
    from rl.agents import RandomPolicy
    from rl.rollout import make_groups, run_rollout

    def requests(episodes: int, group_size: int, seed0: int):
        n = max(1, episodes // group_size)
        return make_groups([tasks[i % len(tasks)] for i in range(n)], [seed0 + i for i in range(n)], group_size)

    with tempfile.TemporaryDirectory(prefix="guiagent-bench-ab-") as tmp:
        store = Store.open(Path(tmp) / "store")
        run_id = store.create_run("bench-ab", env="webapps", algo="bench")
        with InProcessPool("webapps", num_slots=slots) as pool:
            run_rollout(pool, RandomPolicy(seed=0), requests(slots, 1, 10_000)[:slots], store=store, run_id=run_id,
                        suite="webapps")
            before = cpu.cpu_by_process(os.getpid())
            res = run_rollout(pool, RandomPolicy(seed=seed), requests(episodes_per_slot * slots, 2, seed), store=store,
                              run_id=run_id, suite="webapps")
            after = cpu.cpu_by_process(os.getpid())
        store.close()
    steps = max(res.env_steps, 1)
    by = {k: round(1e3 * (after.get(k, 0) - before.get(k, 0)) / steps, 1) for k in sorted(set(after) | set(before))}
    by = {k: v for k, v in by.items() if v}
    print(json.dumps({"steps_per_s": round(res.steps_per_second, 2), "env_steps": res.env_steps,
                      "episodes": len(res.trajectories), "wall_s": round(res.wall_seconds, 2),
                      "cpu_ms_per_step": round(sum(by.values()), 1), "cpu_by_process": by,
                      "load_avg": cpu.load_avg()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the code tree to compare against (e.g. an export of main)")
    ap.add_argument("--after", default=str(HERE.parent), help="default: this checkout")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=DIR",
                    help="more code trees, run between before and after in each round (repeatable)")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--episodes-per-slot", type=int, default=8)
    ap.add_argument("--tasks", nargs="+", default=["open_app", "settings_turn_on"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=100, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.slots, args.episodes_per_slot, args.tasks, args.seed)
        return
    trees = {"before": Path(args.before).resolve()}
    for spec in args.also:
        name, sep, tree = spec.partition("=")
        if not sep or not name or name in ("before", "after"):
            print(f"--also {spec!r}: give NAME=DIR with a name other than before/after", file=sys.stderr)
            sys.exit(2)
        trees[name] = Path(tree).resolve()
    trees["after"] = Path(args.after).resolve()
    for name, tree in trees.items():
        if not (tree / "emulators" / "pool.py").is_file():
            print(f"--{name} {tree}: not a guiagent code tree (no emulators/pool.py)", file=sys.stderr)
            sys.exit(2)
    if args.slots <= 0 or args.episodes_per_slot <= 0 or args.repeats <= 0:
        print("--slots, --episodes-per-slot and --repeats must be positive", file=sys.stderr)
        sys.exit(2)
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    t0 = time.perf_counter()
    for rep in range(args.repeats):
        for name, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": str(tree)}
            cmd = [sys.executable, str(Path(__file__).resolve()), "--before", str(trees["before"]), "--child",
                   str(tree), "--slots", str(args.slots), "--episodes-per-slot", str(args.episodes_per_slot),
                   "--seed", str(100 + rep), "--tasks", *args.tasks]
            out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=False)
            lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
            if out.returncode != 0 or not lines:
                print(f"{name} run {rep + 1} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
                sys.exit(1)
            r = json.loads(lines[-1])
            runs[name].append(r)
            parts = ", ".join(f"{k} {v:.0f}" for k, v in r["cpu_by_process"].items())
            print(f"{name:<8} run {rep + 1}: {r['steps_per_s']:6.2f} steps/s ({r['env_steps']} steps, "
                  f"{r['wall_s']:.1f} s), {r['cpu_ms_per_step']:5.0f} ms CPU a step ({parts})  "
                  f"load {r['load_avg']}", flush=True)
    med = {name: {"steps_per_s": statistics.median(r["steps_per_s"] for r in rs),
                  "cpu_ms_per_step": statistics.median(r["cpu_ms_per_step"] for r in rs)} for name, rs in runs.items()}
    speedup = med["after"]["steps_per_s"] / max(med["before"]["steps_per_s"], 1e-9)
    cpu_ratio = med["before"]["cpu_ms_per_step"] / max(med["after"]["cpu_ms_per_step"], 1e-9)
    for name, m in med.items():
        print(f"median {name:<8} {m['steps_per_s']:6.2f} steps/s, {m['cpu_ms_per_step']:5.0f} ms CPU a step")
    print(f"after vs before: x{speedup:.2f} steps/s, x{cpu_ratio:.2f} less CPU a step; "
          f"{time.perf_counter() - t0:.0f} s in all")
    print(json.dumps({"bench": "rollout_ab", "slots": args.slots, "episodes_per_slot": args.episodes_per_slot,
                      "tasks": args.tasks, "trees": {k: str(v) for k, v in trees.items()}, "runs": runs,
                      "median": med, "speedup_steps_per_s": round(speedup, 2),
                      "cpu_per_step_ratio": round(cpu_ratio, 2)}))


if __name__ == "__main__":
    main()
