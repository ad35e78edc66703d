"""A real multi-node Ray cluster on this machine loses a worker node (every process of it SIGKILLed)
mid-rollout: the node's actors are recreated on the surviving nodes, the rollout completes, the next
one runs, no completed episode is lost and the lost node's running episodes are marked aborted.

The default variant is a head (hosting an actor) plus one worker node; ``-m slow`` runs the
head plus two worker nodes of ``scripts/node_loss.py``. Each node is a ``ray start`` in its own
network namespace when the tests run as root, else on its own loopback address."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.browser]

_spec = importlib.util.spec_from_file_location(
    "node_loss", Path(__file__).resolve().parents[2] / "scripts" / "node_loss.py")
node_loss = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(node_loss)


def _check(report: dict, nodes: int) -> None:
    assert report["nodes"] == nodes
    killed = report["killed_node"]
    assert killed is not None and killed.startswith("worker")
    assert report["killed_processes"] >= 3, "raylet, agents, the actor and its browser all went"
    assert killed in report["placement_before"] and killed not in report["placement_after"]
    assert report["alive_nodes"][killed] is False and report["alive_nodes"]["head"] is True
    assert report["replacements"] >= 1
    # every requested episode is accounted for; exactly the lost node's running ones are aborted
    assert report["episodes"] == report["requested"]
    assert report["aborted"] == report["in_flight_on_killed_node"] == report["stored_aborted"] >= 1
    assert all(r.startswith("worker died") for r in report["aborted_reasons"])
    assert report["completed_solved"] and report["stored_intact"]
    nxt = report["next_rollout"]
    assert nxt["episodes"] > 0 and nxt["aborted"] == 0 and nxt["solved"] == nxt["episodes"]
    assert report["stored_completed"] == report["completed"] + nxt["episodes"]
    assert report["ok"]


@pytest.mark.slow  # ~16 s; tests/rl/test_rollout_faults.py kills a worker in the default suite
def test_losing_a_worker_node_mid_rollout_loses_no_completed_episode(tmp_path):
    report = node_loss.run_node_loss(nodes=1, head_cpus=2, envs_per_worker=1, groups=1, kill_at=2,
                                     out=str(tmp_path), say=lambda m: None)
    _check(report, nodes=2)


@pytest.mark.slow
def test_head_and_two_worker_nodes_lose_one(tmp_path):
    report = node_loss.run_node_loss(nodes=2, envs_per_worker=2, groups=3, kill_at=2, out=str(tmp_path),
                                     say=lambda m: None)
    _check(report, nodes=3)
    assert len(set(report["placement_before"])) == 2, "SPREAD put one actor on each worker node"


@pytest.mark.slow
def test_training_goes_on_when_a_node_is_lost_mid_iteration(tiny_model_dir, tmp_path):
    """The trainer on the cluster (``--pool ray --ray-address``): a worker node with envs on it is
    killed during iteration 2's rollout; the run finishes every iteration, the lost episodes are
    marked aborted and the store holds every completed one."""
    import sqlite3
    import threading
    import time

    import psutil

    from emulators.local_cluster import LocalCluster
    from guiagent.store import EpisodeFilter, StoreReader
    from rl.config import TrainConfig
    from rl.trainer import train

    out = tmp_path / "run"
    killed: list[str] = []
    with LocalCluster(workers=2, cpus_per_worker=2) as cluster:
        def kill_when_iteration_two_runs() -> None:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and not killed:
                time.sleep(0.3)
                try:
                    con = sqlite3.connect(f"file:{out / 'store.sqlite'}?mode=ro", uri=True)
                    busy = con.execute("SELECT count(*) FROM episodes WHERE status='in_progress' "
                                       "AND group_id LIKE '%:i1r0-%'").fetchone()[0]
                    con.close()
                except sqlite3.Error:
                    continue
                if not busy:
                    continue
                for name in ("worker1", "worker2"):  # a node whose envs are running
                    procs = [psutil.Process(p) for p in cluster.processes(name) if psutil.pid_exists(p)]
                    if any("chrom" in p.name() for p in procs):
                        cluster.kill_node(name)
                        killed.append(name)
                        return

        killer = threading.Thread(target=kill_when_iteration_two_runs, daemon=True)
        killer.start()
        result = train(TrainConfig.build(model=tiny_model_dir, tasks=("go_home", "open_app"), iterations=3,
                                   groups_per_iteration=1, group_size=2, slots=2, workers=2, pool="ray",
                                   ray_address=cluster.address, max_new_tokens=8, eval_episodes=0,
                                   out=str(out), seed=2))
        killer.join(timeout=5)
        node_gone = bool(killed) and not psutil.pid_exists(cluster.nodes[killed[0]].proc.pid)
    assert killed, "a node with envs was killed during iteration 2"
    assert node_gone, "every process of the lost node was killed"
    assert result.iterations == 3
    reader = StoreReader(out)
    [run] = reader.list_runs()
    assert run.status == "finished"
    assert [m.iteration for m in reader.metrics(run.run_id)["success_rate"]] == [0, 1, 2]
    aborted = reader.list_episodes(EpisodeFilter(run_id=run.run_id, status="aborted"), limit=100).items
    assert aborted and all(e.abort_reason.startswith("worker died") for e in aborted)
    assert reader.count_episodes(EpisodeFilter(run_id=run.run_id, status="completed")) >= 6 - len(aborted)
