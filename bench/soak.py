"""Soak: a long eval on the Ray fleet under repeated faults; resources stay flat and nothing is lost.

    nice -n 10 python bench/soak.py --minutes 30                 # the figure in docs/fleet.md
    python bench/soak.py --minutes 3 --chromium-every 100 --worker-every 60   # a quick look

A random agent runs webapps episodes on a :class:`~emulators.pool.RayEnvPool` of
``--workers`` x ``--envs-per-worker`` slots (default 2 x 2 = 4), through
:func:`rl.rollout.run_rollout` with a real :class:`guiagent.store.Store`, in rounds of
``--episodes-per-round`` episodes until ``--minutes`` have passed. Faults, injected
between two steps (while no batch is in flight):

* every ``--chromium-every`` env steps one worker's shared Chromium is SIGKILLed (its slots'
  episodes end with a device error and are marked aborted; the next reset relaunches it);
* every ``--worker-every`` seconds one Ray worker process is SIGKILLed (its slots' episodes
  are marked aborted; the pool starts a replacement).

Workers take turns. After ``--warmup`` seconds (browsers launched, pages cached) the first
sample is taken; then one every ``--sample-every`` seconds and a last one in the final
half-interval, each between two steps and only while every worker's Chromium is up (a killed
one is relaunched at its slots' next reset), so samples are comparable. A sample sums over
this process and every descendant (Ray's GCS and raylet, the workers, Playwright, Chromium)
the resident memory (RSS, PSS, USS and anonymous memory), open file descriptors and the number
of processes, and breaks the anonymous memory down by kind of process (driver, gcs, raylet,
ray, worker, playwright, chromium): that is where a leak shows, whatever else runs on the
machine (see :func:`process_tree_figures`). ``--trace`` adds this process's malloc figures
and Ray's object refs; ``--trace-python`` also Python's allocations by line (tracemalloc).

At the end the store is checked: every requested episode is in it, completed or aborted
(none left in progress), the completed ones with exactly the steps the driver saw, and every
aborted one with its reason (20 completed episodes, a reservoir sample, are kept whole, screenshots
as their content hashes, and compared step by step; of the others the driver keeps only id, status
and length, so that its own bookkeeping does not grow the figures). Printed: one line per sample,
then one JSON object (last stdout line) with the samples at start, middle and end and every 10
minutes, the fault counts and the checks. Exit code 1 if an episode was lost or left unmarked,
or a figure grew past ``--max-growth`` (default 0.25: end more than 25 % above start, for RSS,
PSS, anonymous memory and file descriptors; process count must be back to within 10 % of the start).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import dataclasses
import gc
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import psutil  # noqa: E402  (Ray's own dependency)

from emulators.pool import RayEnvPool  # noqa: E402
from guiagent.store import Store, StoreReader  # noqa: E402
from guiagent.store.blobs import blob_hash  # noqa: E402
from guiagent.types import Observation, Trajectory  # noqa: E402
from rl.agents import RandomPolicy  # noqa: E402
from rl.rollout import EpisodeRequest, run_rollout  # noqa: E402

TASKS = ("open_app", "settings_turn_on", "settings_open_section", "go_home")


def process_tree_figures(root: int | None = None) -> dict[str, float]:
    """Memory (MB), open fds and process count of ``root`` (this process) and its descendants.

    RSS, PSS and USS, summed; and by kind of process (:func:`_kind`), the anonymous memory
    (heap, arenas, stacks: what a leak grows). USS and PSS also move when other processes on the
    machine start or stop mapping the same files: another job's Ray shares the pages of Ray's
    binaries and core library with ours, and our USS drops by their size. Anonymous memory is
    this process's own whatever runs beside it, so the growth by kind is read from it.
    """
    me = psutil.Process(root or os.getpid())
    procs = [me] + me.children(recursive=True)
    tot = {"rss": 0.0, "pss": 0.0, "uss": 0.0, "anon": 0.0}
    fds = n = 0
    by_kind: dict[str, float] = {}
    for p in procs:
        try:
            mem = _smaps_rollup(p.pid)
            fds += p.num_fds()
            kind = _kind(p, me)
        except (OSError, psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # ended between the listing and the reading
        n += 1
        for k in tot:
            tot[k] += mem[k]
        by_kind[kind] = by_kind.get(kind, 0.0) + mem["anon"]
    return {**{f"{k}_mb": round(v, 1) for k, v in tot.items()}, "fds": fds, "procs": n,
            **{f"anon_{k}_mb": round(v, 1) for k, v in sorted(by_kind.items())}}


def _smaps_rollup(pid: int) -> dict[str, float]:
    """RSS, PSS, USS (private clean + dirty) and anonymous memory of one process, in MB (Linux)."""
    kb: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if len(parts) == 2 and parts[1] == "kB":
                kb[name] = int(parts[0])
    return {"rss": kb["Rss"] / 1024, "pss": kb["Pss"] / 1024,
            "uss": (kb["Private_Clean"] + kb["Private_Dirty"]) / 1024, "anon": kb["Anonymous"] / 1024}


def _kind(p: psutil.Process, me: psutil.Process) -> str:
    """driver, gcs, raylet, ray (agents, log monitor, idle workers), worker (the env actors), playwright,
    chromium."""
    if p.pid == me.pid:
        return "driver"
    name, cmd = p.name(), " ".join(p.cmdline()[:3])
    if "chrom" in name or "chrom" in cmd:
        return "chromium"
    if name == "node" or "playwright" in cmd:
        return "playwright"
    if "EnvWorker" in name or "EnvWorker" in cmd:
        return "worker"
    if name in ("gcs_server", "raylet"):
        return name.removesuffix("_server")
    return "ray"


class DriverTrace:
    """``--trace``: where this process's own memory goes, to tell a leak from warm-up.

    At each sample: glibc malloc's in-use and free-but-held
    bytes (all arenas: C/C++ allocations, Ray's core worker included, and the fragmentation
    Python cannot see), the object refs Ray's core worker holds for this driver and the bytes in
    its in-process object store. With ``python=True`` (``--trace-python``) also Python's traced
    allocations (``tracemalloc``, which slows this process) and container objects alive; then
    :meth:`report` lists the allocation sites (file:line) and object types that grew most
    between the first and the last sample.
    """

    def __init__(self, python: bool = False, frames: int = 6):
        self.python = python
        if python:
            tracemalloc.start(frames)
        self.first: tuple | None = None
        self.last: tuple | None = None
        self._libc = ctypes.CDLL("libc.so.6")
        self._libc.mallinfo2.restype = _MallInfo2

    def sample(self) -> dict[str, float]:
        mi = self._libc.mallinfo2()
        row: dict[str, float] = {"malloc_used_mb": round((mi.uordblks + mi.hblkhd) / 2**20, 1),
                                 "malloc_free_mb": round(mi.fordblks / 2**20, 1)}
        if self.python:
            gc.collect()
            snap = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__),
                 tracemalloc.Filter(False, "<frozen importlib._bootstrap>")])
            types = collections.Counter(type(o).__name__ for o in gc.get_objects())
            self.last = (snap, types)
            if self.first is None:
                self.first = self.last
            row["py_traced_mb"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
            row["py_objects"] = sum(types.values())
        try:
            import ray
            cw = ray._private.worker.global_worker.core_worker
            row["ray_refs"] = len(cw.get_all_reference_counts())
            row["ray_memstore_kb"] = round(cw.get_local_memory_store_bytes_used() / 1024, 1)
        except AttributeError:  # not connected, or an internal API that moved: the figure is left out
            row["ray_refs"] = -1
        return row

    def report(self, top: int = 15) -> str:
        if not self.python:
            return ""
        if self.first is None or self.last is None or self.first is self.last:
            return "trace: fewer than two samples"
        (s0, t0), (s1, t1) = self.first, self.last
        lines = ["trace: Python allocations that grew most, first -> last sample (file:line):"]
        for d in s1.compare_to(s0, "lineno")[:top]:
            lines.append(f"  {d.size_diff / 1024:+10.1f} KiB {d.count_diff:+7d} blocks  {d.traceback[0]}")
        lines.append("trace: the top three with their call stacks:")
        for d in s1.compare_to(s0, "traceback")[:3]:
            lines.append(f"  {d.size_diff / 1024:+10.1f} KiB {d.count_diff:+7d} blocks")
            lines += [f"      {f}" for f in d.traceback.format()[-12:]]
        grew = sorted(((t1[k] - t0.get(k, 0), k) for k in t1), reverse=True)[:top]
        lines.append("trace: object types that grew most: " + ", ".join(f"{k} {n:+d}" for n, k in grew if n))
        return "\n".join(lines)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]


class FaultyRandom(RandomPolicy):
    """The random agent; between two steps it also injects the faults and takes the samples."""

    def __init__(self, pool: RayEnvPool, args: argparse.Namespace, t0: float):
        super().__init__(seed=args.seed)
        self.pool, self.args, self.t0 = pool, args, t0
        self.end_at = args.minutes * 60
        self.final_taken = False
        self.steps = 0
        self.next_chromium = None  # set at the first sample: no fault before the baseline
        self.next_worker = None
        self.next_sample = args.warmup
        self.samples: list[dict[str, float]] = []
        self.chromium_kills = 0
        self.worker_kills = 0
        self.turn = 0
        self.trace = DriverTrace(python=args.trace_python) if args.trace or args.trace_python else None

    def act_batch(self, contexts, pool):
        self.steps += len(contexts)
        now = time.monotonic() - self.t0
        if now >= self.end_at - self.args.sample_every / 2 and not self.final_taken:
            self.next_sample = now  # the end sample, while the episodes still run
        if now >= self.next_sample and all(self.pool.browser_pids()):  # comparable: every browser up
            self.final_taken = now >= self.end_at - self.args.sample_every / 2
            self.sample(now)
            if self.next_chromium is None:
                self.next_chromium = self.steps + self.args.chromium_every
                self.next_worker = now + self.args.worker_every
            self.next_sample = now + self.args.sample_every
        if self.next_chromium is not None and self.steps >= self.next_chromium:
            self.kill_chromium()
            self.next_chromium = self.steps + self.args.chromium_every
        if self.next_worker is not None and now >= self.next_worker:
            self.kill_worker()
            self.next_worker = now + self.args.worker_every
        return super().act_batch(contexts, pool)

    def sample(self, now: float) -> None:
        row = {"t_s": round(now, 1), "steps": self.steps, **process_tree_figures(),
               "chromium_kills": self.chromium_kills, "worker_kills": self.worker_kills,
               "replacements": self.pool.replacements, "load1": round(os.getloadavg()[0], 2)}
        if self.trace is not None:
            row.update(self.trace.sample())
        self.samples.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    def _victim(self) -> int:
        self.turn += 1
        return self.turn % self.pool.num_workers

    def kill_chromium(self) -> None:
        w = self._victim()
        pids = self.pool.browser_pids()[w]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                self.chromium_kills += 1
            except ProcessLookupError:
                pass

    def kill_worker(self) -> None:
        pid = self.pool.worker_pids()[self._victim()]
        os.kill(pid, signal.SIGKILL)
        self.worker_kills += 1


@dataclass(frozen=True)
class _Kept:
    episode_id: str
    status: str
    steps: int
    abort_reason: str | None


def without_pixels(traj: Trajectory) -> Trajectory:
    """``traj`` with each screenshot replaced by its content hash, as the store names its blob.

    Kept for the step-by-step check instead of the screenshots themselves: 20 trajectories' pixels
    are about 16 MB, which this process would otherwise gain over the first minutes of the run.
    """
    def strip(obs: Observation | None) -> Observation | None:
        if obs is None or obs.screenshot is None:
            return obs
        return dataclasses.replace(obs, screenshot=None, screenshot_ref=blob_hash(obs.screenshot))
    steps = tuple(dataclasses.replace(st, observation=strip(st.observation)) for st in traj.steps)
    return dataclasses.replace(traj, steps=steps, final_observation=strip(traj.final_observation))


def check_store(run_dir: Path, run_id: str, kept: list[_Kept], spread: list[Trajectory]) -> dict[str, object]:
    """Every episode the driver ran is in the store as the driver saw it; nothing in progress.

    ``spread``: whole trajectories (a sample, screenshots as content hashes: :func:`without_pixels`)
    compared with the store step by step.
    """
    con = sqlite3.connect(f"file:{run_dir / 'store.sqlite'}?mode=ro", uri=True)
    by_status = dict(con.execute("SELECT status, count(*) FROM episodes WHERE run_id=? GROUP BY status",
                                 (run_id,)).fetchall())
    unmarked = con.execute("SELECT count(*) FROM episodes WHERE run_id=? AND status='aborted' "
                           "AND (abort_reason IS NULL OR abort_reason='')", (run_id,)).fetchone()[0]
    stored_len = dict(con.execute("SELECT e.id, count(s.idx) FROM episodes e LEFT JOIN steps s "
                                  "ON s.episode_pk = e.pk WHERE e.run_id=? AND e.status='completed' "
                                  "GROUP BY e.id", (run_id,)).fetchall())
    con.close()
    lost = [t.episode_id for t in kept if t.status == "completed" and stored_len.get(t.episode_id) != t.steps]
    reader = StoreReader(run_dir)
    differing = [t.episode_id for t in spread
                 if reader.load_trajectory(t.episode_id, pixels=False).steps != t.steps]
    reader.close()
    return {"completed": by_status.get("completed", 0), "aborted": by_status.get("aborted", 0),
            "in_progress": by_status.get("in_progress", 0), "aborted_without_reason": unmarked,
            "completed_lost_or_short": len(lost), "compared_step_by_step": len(spread),
            "differing": len(differing)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="how long to run")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--envs-per-worker", type=int, default=2)
    ap.add_argument("--chromium-every", type=int, default=300, help="env steps between Chromium kills")
    ap.add_argument("--worker-every", type=float, default=180.0, help="seconds between Ray worker kills")
    ap.add_argument("--warmup", type=float, default=45.0, help="seconds before the first sample")
    ap.add_argument("--sample-every", type=float, default=60.0)
    ap.add_argument("--episodes-per-round", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=8, help="step budget of each episode")
    ap.add_argument("--max-growth", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace", action="store_true",
                    help="also sample this process's anonymous memory, malloc's in-use and free bytes and Ray's "
                         "object refs (cheap)")
    ap.add_argument("--trace-python", action="store_true",
                    help="--trace plus Python's allocations by line (tracemalloc) and objects by type, and print "
                         "what grew; slows this process, so not for the figures in the docs")
    ap.add_argument("--out", default=None, help="run folder (default: a temporary one, removed)")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.chromium_every <= 0 or args.worker_every <= 0:
        ap.error("--minutes, --chromium-every and --worker-every must be positive")

    tmp = None if args.out else tempfile.TemporaryDirectory(prefix="soak-")
    run_dir = Path(args.out or tmp.name)
    t0 = time.monotonic()
    deadline = t0 + args.minutes * 60
    pool = RayEnvPool("webapps", num_workers=args.workers, envs_per_worker=args.envs_per_worker,
                      step_timeout_s=60, max_replacements=10_000)
    store = Store.open(run_dir)
    run_id = store.create_run("soak", env="webapps", algo="eval", model="random")
    policy = FaultyRandom(pool, args, t0)
    kept: list[_Kept] = []
    spread: list[Trajectory] = []
    pick = random.Random(args.seed)
    rounds = 0
    try:
        while time.monotonic() < deadline:
            first = 1_000_000 + rounds * args.episodes_per_round  # held-out seeds, never repeated
            reqs = [EpisodeRequest(TASKS[i % len(TASKS)], first + i, "",
                                   args.max_steps) for i in range(args.episodes_per_round)]
            res = run_rollout(pool, policy, reqs, store=store, run_id=run_id, suite="webapps",
                              keep_turns=False)
            if len(res.trajectories) != len(reqs):
                print(f"round {rounds}: {len(reqs)} episodes requested, {len(res.trajectories)} came back",
                      file=sys.stderr)
            # only what the final check needs: holding every screenshot would grow this process
            kept += [_Kept(t.episode_id, t.status, len(t.steps), t.abort_reason) for t in res.trajectories]
            completed = [t for t in res.trajectories if t.status == "completed"]
            if completed:  # up to 20 kept whole (a reservoir sample), compared step by step
                if len(spread) < 20:
                    spread.append(without_pixels(completed[0]))
                elif (j := pick.randrange(rounds + 1)) < 20:
                    spread[j] = without_pixels(completed[0])
            rounds += 1
    finally:
        store.set_run_status(run_id, "finished")
        store.close()
        pool.close()
    checks = check_store(run_dir, run_id, kept, spread)
    requested = rounds * args.episodes_per_round
    s = policy.samples
    if len(s) < 2:
        print(f"error: only {len(s)} sample(s) taken: run longer than --warmup + --sample-every",
              file=sys.stderr)
        return 2
    start, middle, end = s[0], s[len(s) // 2], s[-1]
    # warm-up (caches filling, then flat) or a leak (no end to it): the figures every 10 minutes tell
    marks = [m * 60 for m in range(10, int(args.minutes) + 1, 10)]
    every_10_min = [min(s, key=lambda r, m=m: abs(r["t_s"] - m)) for m in marks]
    figures = ("rss_mb", "pss_mb", "uss_mb", "anon_mb", "fds", "procs")
    growth = {k: round(end[k] / start[k] - 1, 3) for k in figures}
    # Chromium's memory grows while it runs and drops when a killed one is relaunched: the range shows it
    span = {k: [min(r[k] for r in s), max(r[k] for r in s)] for k in figures}
    aborted_reasons: dict[str, int] = {}
    for t in kept:
        if t.status == "aborted":
            kind = ("worker died" if "worker died" in (t.abort_reason or "")
                    else "device error" if "device error" in (t.abort_reason or "") else "other")
            aborted_reasons[kind] = aborted_reasons.get(kind, 0) + 1
    ok = (checks["completed"] + checks["aborted"] == requested == len(kept)
          and checks["in_progress"] == 0 and checks["aborted_without_reason"] == 0
          and checks["completed_lost_or_short"] == 0 and checks["differing"] == 0
          and growth["rss_mb"] <= args.max_growth and growth["pss_mb"] <= args.max_growth
          and growth["anon_mb"] <= args.max_growth
          and growth["fds"] <= args.max_growth and abs(growth["procs"]) <= 0.10)
    summary = {
        "bench": "soak", "minutes": round((time.monotonic() - t0) / 60, 1), "slots": pool.num_slots,
        "episodes_requested": requested, "env_steps": policy.steps,
        "chromium_kills": policy.chromium_kills, "worker_kills": policy.worker_kills,
        "worker_replacements": pool.replacements, "aborted_by_reason": aborted_reasons, **checks,
        "start": start, "middle": middle, "end": end, "every_10_min": every_10_min, "growth": growth, "range": span, "samples": len(s),
        "ok": ok,
    }
    if policy.trace is not None and policy.trace.python:
        print(policy.trace.report(), file=sys.stderr)
    print(json.dumps(summary))
    if tmp is not None:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
