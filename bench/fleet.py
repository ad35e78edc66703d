"""Environment fleet throughput: RayEnvPool against InProcessPool, side by side.

A random-click agent steps every slot of a pool for a fixed time; finished
episodes are reset with new seeds (resets count in the wall time, not as steps).
For each layout ``WORKERSxENVS`` (slots = workers * envs per worker) the Ray pool
and an in-process pool with the same number of slots run one after the other.

Ray overhead per batch call = the driver's wall time of a ``step`` call minus the
slowest worker's own time inside ``GuiEnv.step_typed`` (the sum of ``info.elapsed_ms``
over its slots): serialisation, scheduling and transfer of the screenshots. The
bare actor round trip (``ping``) is reported too.

Run (about two minutes on 2 cores)::

    python bench/fleet.py
    python bench/fleet.py --layouts 1x1 2x2 --seconds 4 --suite miniwob --task click-button

Human-readable lines first; the last stdout line is one JSON object with the figures.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import tyro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from emulators.pool import ActionRequest, EnvOutput, InProcessPool, RayEnvPool, ResetRequest  # noqa: E402
from guiagent.types import Click  # noqa: E402

FALLBACK_SUITE = "tests.emulators.test_pool:SUITE"


@dataclass
class Args:
    """Fleet benchmark settings."""

    suite: str = "auto"
    """suite name or module:ATTR; ``auto`` = miniwob when installed, else the pool tests' two-button suite"""
    task: str | None = None
    """task id (default: click-button for miniwob, the first task otherwise)"""
    layouts: list[str] = field(default_factory=lambda: ["1x1", "1x2", "2x2", "2x4"])
    """Ray layouts WORKERSxENVS_PER_WORKER; the in-process pool gets the same slot counts"""
    seconds: float = 6.0
    """measured time per pool, after warm-up"""
    warmup_steps: int = 3
    """steps per slot before measuring (page caches, JIT)"""
    max_steps: int = 30
    """episode budget (a random clicker rarely finishes earlier)"""
    seed: int = 0
    """agent and task seeds"""


def pick_suite(args: Args) -> tuple[str, str]:
    from emulators.pool_worker import resolve_suite
    name = args.suite
    if name == "auto":
        try:
            suite = resolve_suite("miniwob")
            name = "miniwob"
        except Exception:
            name, suite = FALLBACK_SUITE, resolve_suite(FALLBACK_SUITE)
    else:
        suite = resolve_suite(name)
    ids = suite.task_ids()
    task = args.task or ("click-button" if "click-button" in ids else ids[0])
    return name, task


def measure(pool, task: str, args: Args, envs_per_worker: int) -> dict:
    """Random clicks on every slot for ``args.seconds``; steps/s, batch latency and overhead."""
    rng = random.Random(args.seed)
    slots = list(range(pool.num_slots))
    next_seed = iter(range(args.seed * 100_000, 10**9))

    def reset(which: list[int]) -> None:
        outs = pool.reset([ResetRequest(s, task, seed=next(next_seed), max_steps=args.max_steps)
                           for s in which])
        bad = [o.worker_error for o in outs if o.worker_error]
        if bad:
            raise RuntimeError(f"reset failed: {bad}")

    def step() -> tuple[list[EnvOutput], float]:
        t0 = time.perf_counter()
        outs = pool.step([ActionRequest(s, Click(rng.random(), rng.random())) for s in slots])
        wall = (time.perf_counter() - t0) * 1e3
        finished = [o.slot for o in outs if o.done]
        if finished:
            reset(finished)
        return outs, wall

    reset(slots)
    for _ in range(args.warmup_steps):
        step()
    steps = resets = errors = 0
    walls: list[float] = []
    overheads: list[float] = []
    t_end = time.perf_counter() + args.seconds
    t0 = time.perf_counter()
    while time.perf_counter() < t_end:
        outs, wall = step()
        steps += len(outs)
        resets += sum(o.done for o in outs)
        errors += sum(o.worker_error is not None for o in outs)
        per_worker: dict[int, float] = {}
        for o in outs:
            w = o.slot // envs_per_worker
            per_worker[w] = per_worker.get(w, 0.0) + o.info.elapsed_ms
        walls.append(wall)
        overheads.append(wall - max(per_worker.values()))
    elapsed = time.perf_counter() - t0
    return {
        "slots": pool.num_slots, "steps": steps, "steps_per_s": round(steps / elapsed, 2),
        "batch_ms_p50": round(statistics.median(walls), 2),
        "overhead_ms_p50": round(statistics.median(overheads), 2),
        "episodes_reset": resets, "worker_errors": errors,
    }


def ping_ms(pool: RayEnvPool, n: int = 50) -> float:
    import ray
    actor = pool._actors[0]
    ray.get(actor.ping.remote())
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        ray.get(actor.ping.remote())
        times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times), 3)


def main(args: Args) -> dict:
    from emulators.pool import ensure_ray
    suite, task = pick_suite(args)
    print(f"suite {suite}, task {task}, {args.seconds:.0f} s per pool, {os.cpu_count()} cores", flush=True)
    t0 = time.perf_counter()
    ensure_ray(num_cpus=max(2, os.cpu_count() or 2))
    ray_init_s = time.perf_counter() - t0
    print(f"ray.init {ray_init_s:.1f} s", flush=True)
    rows = []
    for layout in args.layouts:
        workers, envs = (int(x) for x in layout.lower().split("x"))
        t0 = time.perf_counter()
        with RayEnvPool(suite, num_workers=workers, envs_per_worker=envs, step_timeout_s=60) as pool:
            start_s = time.perf_counter() - t0
            ray_row = measure(pool, task, args, envs)
            ray_row.update(layout=layout, start_s=round(start_s, 2), ping_ms=ping_ms(pool))
        t0 = time.perf_counter()
        with InProcessPool(suite, num_slots=workers * envs) as pool:
            start_s = time.perf_counter() - t0
            local_row = measure(pool, task, args, workers * envs)
            local_row.update(start_s=round(start_s, 2))
        print(f"{ray_row['slots']} slots | ray {layout}: {ray_row['steps_per_s']:6.1f} steps/s, "
              f"batch p50 {ray_row['batch_ms_p50']:6.1f} ms, "
              f"overhead p50 {ray_row['overhead_ms_p50']:5.1f} ms, "
              f"ping {ray_row['ping_ms']:.2f} ms | in-process: {local_row['steps_per_s']:6.1f} steps/s, "
              f"batch p50 {local_row['batch_ms_p50']:6.1f} ms", flush=True)
        rows.append({"slots": ray_row["slots"], "ray": ray_row, "in_process": local_row})
    return {"bench": "fleet", "suite": suite, "task": task, "seconds_per_pool": args.seconds,
            "cores": os.cpu_count(), "ray_init_s": round(ray_init_s, 2), "rows": rows}


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    result = main(tyro.cli(Args))
    print(json.dumps(result))
