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
