"""Lose a whole Ray node mid-rollout, and watch the fleet carry on.

    python scripts/node_loss.py                     # head + 2 worker nodes; ~1-2 min on a quiet machine
    python scripts/node_loss.py --isolation loopback --json

What it does, printing each step:

1. starts a real multi-node Ray cluster on this machine (:class:`emulators.local_cluster.LocalCluster`:
   a head and ``--nodes`` worker nodes, each a ``ray start``, each worker node in its own network
   namespace when run as root, else on its own loopback address);
2. starts a :class:`~emulators.pool.RayEnvPool` of webapps envs on it, one actor per worker node
   (``scheduling_strategy="SPREAD"``), ``--envs-per-worker`` slots each;
3. runs a rollout of the tasks' oracle, G=2 episodes per (task, seed), written to a real store; at
   the ``--kill-at``-th policy call it SIGKILLs every process of the worker node hosting the first actor
   (raylet, agents, the actor, its Playwright and Chromium);
4. checks: the rollout completed; the actor was recreated on a surviving node; the episodes that
   were running on the killed node are marked aborted in the store with the reason; every other
   episode completed (and was solved) and is stored step for step as the driver saw it;
5. runs the next iteration's rollout on what is left of the cluster: all of it completes.

The last stdout line with ``--json`` is one JSON object; exit code 1 if a check failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from emulators.local_cluster import LocalCluster  # noqa: E402
from emulators.pool import RayEnvPool  # noqa: E402
from guiagent.store import EpisodeFilter, Store, StoreReader  # noqa: E402
from rl.agents import OraclePolicy  # noqa: E402
from rl.rollout import make_groups, run_rollout  # noqa: E402

TASKS = ("settings_open_section", "open_app", "settings_turn_on")


class NodeKillingOracle(OraclePolicy):
    """The oracle, except that before its ``at``-th call it kills the node hosting the first actor
    placed on a worker node."""

    def __init__(self, cluster: LocalCluster, pool: RayEnvPool, at: int, say: Any):
        self.cluster, self.pool, self.at, self.say = cluster, pool, at, say
        self.calls = 0
        self.killed_node: str | None = None
        self.killed_pids: list[int] = []
        self.in_flight: list[int] = []  # slots of actor 0 with a running episode when the node died

    def act_batch(self, contexts, pool):
        self.calls += 1
        if self.calls == self.at:
            where = [self.cluster.node_of(n) for n in self.pool.worker_nodes()]
            # losing the head ends the cluster: the first actor on a worker node goes
            victim = next(w for w, name in enumerate(where) if name != "head")
            self.killed_node = where[victim]
            per = self.pool.envs_per_worker
            self.in_flight = [c.slot for c in contexts if c.slot // per == victim]
            self.killed_pids = self.cluster.kill_node(self.killed_node)
            self.say(f"killed {self.killed_node}: {len(self.killed_pids)} processes (SIGKILL), with "
                     f"{len(self.in_flight)} episode(s) running on it")
        return super().act_batch(contexts, pool)


def run_node_loss(*, nodes: int = 2, envs_per_worker: int = 2, isolation: str = "auto", kill_at: int = 2,
                  head_cpus: int = 0, groups: int = 3, next_rollout: bool = True,
                  out: str | None = None, say: Any = print) -> dict[str, Any]:
    """Start the cluster, lose a node mid-rollout, check everything; the report as a dict.

    ``head_cpus`` > 0 lets the head host actors too (with ``nodes=1``: a two-node cluster whose
    lost worker node's actor moves to the head, the cheap variant the default tests run).
    """
    t0 = time.monotonic()
    tmp = None if out else tempfile.TemporaryDirectory(prefix="node-loss-")
    run_dir = Path(out or tmp.name)
    cluster = LocalCluster(workers=nodes, cpus_per_worker=2, head_cpus=head_cpus, isolation=isolation)
    pool = None
    try:
        cluster.start()
        say(f"cluster up in {time.monotonic() - t0:.1f} s: head at {cluster.address}, "
            f"{nodes} worker nodes ({cluster.isolation}: "
            + ", ".join(f"{n.name} {n.ip}" for n in cluster.nodes.values() if n.name != "head") + ")")
        actors = nodes + (1 if head_cpus >= 2 else 0)
        pool = RayEnvPool("webapps", num_workers=actors, envs_per_worker=envs_per_worker,
                          address=cluster.address,
                          num_cpus_per_worker=1, scheduling_strategy="SPREAD", step_timeout_s=60,
                          start_timeout_s=180)
        before = [cluster.node_of(n) for n in pool.worker_nodes()]
        say(f"pool: {pool.num_slots} slots on actors placed on {before}")
        store = Store.open(run_dir)
        run = store.create_run("node-loss", env="webapps")
        reqs = make_groups(list(TASKS[:groups]), [1, 2, 3][:groups], group_size=2, tag="i0")
        policy = NodeKillingOracle(cluster, pool, kill_at, say)
        t1 = time.monotonic()
        res = run_rollout(pool, policy, reqs, store=store, run_id=run, suite="webapps")
        rollout_s = time.monotonic() - t1
        after = [cluster.node_of(n) for n in pool.worker_nodes()]
        say(f"rollout done in {rollout_s:.1f} s: {len(res.trajectories)} episodes, {res.aborted} aborted; "
            f"actors now on {after}; {pool.replacements} replacement(s)")
        # the next iteration, on what is left of the cluster
        nxt = make_groups(list(TASKS[:groups]), [4, 5, 6][:groups], group_size=2, tag="i1")
        res2 = run_rollout(pool, OraclePolicy(), nxt if next_rollout else [],
                           store=store, run_id=run, suite="webapps")
        say(f"next rollout: {len(res2.trajectories)} episodes, {res2.aborted} aborted")
        store.close()

        reader = StoreReader(run_dir)
        completed = [t for t in res.trajectories if t.status == "completed"]
        aborted = [t for t in res.trajectories if t.status == "aborted"]
        stored_aborted = reader.list_episodes(EpisodeFilter(run_id=run, status="aborted"), limit=1000).items
        intact = all(reader.load_trajectory(t.episode_id).steps == t.steps for t in completed + [
            t for t in res2.trajectories if t.status == "completed"])
        alive = cluster.alive_nodes()
        report = {
            "isolation": cluster.isolation, "nodes": 1 + nodes, "slots": pool.num_slots,
            "placement_before": before, "placement_after": after, "killed_node": policy.killed_node,
            "killed_processes": len(policy.killed_pids), "in_flight_on_killed_node": len(policy.in_flight),
            "episodes": len(res.trajectories), "requested": len(reqs), "completed": len(completed),
            "aborted": len(aborted),
            "aborted_reasons": sorted({(t.abort_reason or "")[:60] for t in aborted}),
            "stored_aborted": len(stored_aborted),
            "stored_completed": reader.count_episodes(EpisodeFilter(run_id=run, status="completed")),
            "completed_solved": all(t.success == 1.0 for t in completed),
            "stored_intact": intact, "replacements": pool.replacements,
            "next_rollout": {"episodes": len(res2.trajectories), "aborted": res2.aborted,
                             "solved": sum(t.success == 1.0 for t in res2.trajectories)},
            "alive_nodes": alive, "rollout_seconds": round(rollout_s, 1),
        }
        reader.close()
        report["ok"] = bool(
            policy.killed_node is not None and policy.killed_node not in after
            and not alive[policy.killed_node]
            and report["episodes"] == report["requested"]
            and report["aborted"] == report["in_flight_on_killed_node"] == report["stored_aborted"] > 0
            and all("worker died" in (t.abort_reason or "") or "did not answer" in (t.abort_reason or "")
                    for t in aborted)
            and report["stored_completed"] == report["completed"] + len(res2.trajectories) - res2.aborted
            and report["completed_solved"] and intact
            and res2.aborted == 0 and report["next_rollout"]["solved"] == len(res2.trajectories))
        return report
    finally:
        if pool is not None:
            pool.close()
        cluster.stop()
        if tmp is not None:
            tmp.cleanup()
        report_time = time.monotonic() - t0
        say(f"total {report_time:.1f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2, help="worker nodes (besides the head)")
    ap.add_argument("--head-cpus", type=int, default=0,
                    help="CPUs of the head (2 or more: it hosts an actor)")
    ap.add_argument("--envs-per-worker", type=int, default=2)
    ap.add_argument("--isolation", choices=("auto", "netns", "loopback"), default="auto")
    ap.add_argument("--kill-at", type=int, default=2, help="policy call before which the node dies")
    ap.add_argument("--json", action="store_true", help="end with one JSON line")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else (lambda m: print(m, flush=True))
    try:
        report = run_node_loss(nodes=args.nodes, envs_per_worker=args.envs_per_worker,
                               isolation=args.isolation,
                               kill_at=args.kill_at, head_cpus=args.head_cpus, say=say)
    except Exception as e:  # one line, no traceback
        print(f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"  {k:26} {v}")
        print("OK: no completed episode lost; the lost node's episodes are marked aborted" if report["ok"]
              else "FAILED: see above")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
