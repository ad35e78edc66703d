"""A real multi-node Ray cluster on this one machine: a head and worker nodes, each a ``ray start``.

For the node-loss test and ``scripts/node_loss.py``: every node is its own ``ray start --block``
process tree (GCS or raylet, agents, its workers and their Chromiums), so killing a node means
SIGKILLing every process of that tree, as when a machine drops out of a real cluster.

Isolation (``isolation=``):

* ``"netns"`` (default when running as root with ``ip netns`` available): each worker node runs
  in its own Linux network namespace with its own address on a private bridge
  (``10.R.0.2``, ``10.R.0.3``, ...); the head and the driver stay in this machine's namespace
  on the bridge's address ``10.R.0.1``, as on a cluster's head machine. Nodes talk only over
  that bridge; killing a node also kills whatever else runs in its namespace.
* ``"loopback"``: each node on its own loopback address (head ``127.0.0.1``, workers
  ``127.0.0.2``, ...), for machines where namespaces are not available (no root).

Example::

    from emulators.local_cluster import LocalCluster
    with LocalCluster(workers=2, cpus_per_worker=2) as cluster:
        pool = RayEnvPool("webapps", address=cluster.address, scheduling_strategy="SPREAD", ...)
        ...
        cluster.kill_node(cluster.node_of(pool.worker_nodes()[0]))

Ray's node health check is tightened (``RAY_health_check_*``: a dead node is declared within
about 2.5 s instead of the ~20 s of Ray's defaults), so a lost node's actors are reported
dead, and their replacements placed on the surviving nodes, within a batch call or two.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["LocalCluster", "ClusterNode", "ClusterError", "netns_available"]

log = logging.getLogger(__name__)

#: how fast the GCS declares a silent node dead (Ray's defaults: 3 s x 5 failures after a 5 s delay)
FAST_HEALTH_CHECK = {"RAY_health_check_initial_delay_ms": "5000", "RAY_health_check_period_ms": "1000",
                     "RAY_health_check_timeout_ms": "2000", "RAY_health_check_failure_threshold": "3"}


class ClusterError(RuntimeError):
    """The local cluster could not be started (ports, namespaces, Ray)."""


@dataclass
class ClusterNode:
    name: str
    ip: str
    proc: subprocess.Popen
    netns: str | None = None
    node_id: str = ""
    killed: list[int] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def netns_available() -> bool:
    """Whether this process may create network namespaces and veth pairs (root with iproute2)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"gaprobe{os.getpid() % 100000}"
    ok = subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ok


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise ClusterError(f"`ip {' '.join(args)}` failed: {r.stderr.strip()}")


class LocalCluster:
    """A head plus ``workers`` worker nodes on this machine (see the module docstring).

    Args:
        workers: worker nodes.
        cpus_per_worker: Ray CPUs each worker node offers (the head offers ``head_cpus``,
            default 0: env actors run on worker nodes only).
        isolation: ``"netns"``, ``"loopback"`` or ``"auto"`` (netns when available).
        object_store_mb: each node's object store (Ray's minimum is about 75 MB).
        start_timeout_s: how long to wait for every node to join.
    """

    def __init__(self, workers: int = 2, *, cpus_per_worker: int = 2, head_cpus: int = 0,
                 isolation: str = "auto", object_store_mb: int = 100, start_timeout_s: float = 180.0):
        if workers < 1:
            raise ValueError("a cluster needs at least one worker node")
        if isolation not in ("auto", "netns", "loopback"):
            raise ValueError(f"isolation must be auto, netns or loopback, not {isolation!r}")
        if isolation == "auto":
            isolation = "netns" if netns_available() else "loopback"
        self.isolation = isolation
        self.workers = workers
        self.cpus_per_worker = cpus_per_worker
        self.head_cpus = head_cpus
        self.object_store_mb = object_store_mb
        self.start_timeout_s = start_timeout_s
        self.tag = uuid.uuid4().hex[:6]
        self.nodes: dict[str, ClusterNode] = {}
        self.address = ""
        # short: Ray's socket paths under it are limited to ~107 characters
        self._temp = Path(tempfile.mkdtemp(prefix="gac-", dir="/tmp"))
        self._bridge: str | None = None
        self._keep_logs = False
        self._subnet = 16 + int(self.tag, 16) % 200  # 10.<subnet>.0.0/24, unlikely to clash

    # ---- life cycle -----------------------------------------------------------------------------

    def start(self) -> "LocalCluster":
        try:
            head_ip = self._network()
            port = _free_port(head_ip)
            self.address = f"{head_ip}:{port}"
            # one node at a time, each retried once: a raylet gives up when its agents take more than 15 s
            # to start (a fixed limit in Ray), which two nodes importing at once on a busy machine exceed
            head = ["--head", f"--port={port}", f"--num-cpus={self.head_cpus}", "--include-dashboard=false"]
            self._start_node("head", head_ip, None, head)
            for i in range(self.workers):
                name = f"worker{i + 1}"
                ip = self._worker_ip(i)
                ns = self._namespace(name, ip, i) if self.isolation == "netns" else None
                self._start_node(name, ip, ns, [f"--address={self.address}",
                                                f"--num-cpus={self.cpus_per_worker}"])
        except BaseException:
            self._keep_logs = True
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every node; remove namespaces, bridge and the temp folder (kept, with the nodes' logs,
        when the start failed). Safe to call twice."""
        for node in list(self.nodes.values())[::-1]:
            if node.alive or node.netns:
                self._kill_tree(node)
        self.nodes.clear()
        if self._bridge:
            subprocess.run(["ip", "link", "del", self._bridge], capture_output=True)
            self._bridge = None
        if not self._keep_logs:
            shutil.rmtree(self._temp, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- faults ---------------------------------------------------------------------------------

    def kill_node(self, name: str) -> list[int]:
        """SIGKILL every process of node ``name`` (its whole tree and, with netns, its namespace)."""
        if name == "head":
            raise ValueError("killing the head ends the cluster; pick a worker node")
        node = self.nodes[name]
        return self._kill_tree(node)

    def node_of(self, node_id: str) -> str:
        """The name (``head``, ``worker1``...) of the node with Ray node id ``node_id``."""
        self._refresh_ids()
        for node in self.nodes.values():
            if node.node_id == node_id:
                return node.name
        raise KeyError(f"no node of this cluster has Ray node id {node_id}")

    def alive_nodes(self) -> dict[str, bool]:
        """Ray's view: node name -> alive (as the GCS sees it)."""
        import ray

        by_id = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
        self._refresh_ids()
        return {node.name: bool(by_id.get(node.node_id)) for node in self.nodes.values()}

    def processes(self, name: str) -> list[int]:
        """Process ids of node ``name`` (its tree, and its namespace's processes)."""
        node = self.nodes[name]
        return sorted(self._pids(node))

    # ---- internals ------------------------------------------------------------------------------

    def _network(self) -> str:
        if self.isolation == "loopback":
            return "127.0.0.1"
        self._bridge = f"gabr{self.tag}"
        _ip("link", "add", self._bridge, "type", "bridge")
        _ip("addr", "add", f"10.{self._subnet}.0.1/24", "dev", self._bridge)
        _ip("link", "set", self._bridge, "up")
        return f"10.{self._subnet}.0.1"

    def _worker_ip(self, i: int) -> str:
        return f"10.{self._subnet}.0.{i + 2}" if self.isolation == "netns" else f"127.0.0.{i + 2}"

    def _namespace(self, name: str, ip: str, i: int) -> str:
        ns, host_end, node_end = f"ga{self.tag}{name}", f"ga{self.tag}h{i}", f"ga{self.tag}n{i}"
        _ip("netns", "add", ns)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
        _ip("link", "set", host_end, "master", self._bridge, "up")
        _ip("link", "set", node_end, "netns", ns)
        _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", node_end)
        _ip("-n", ns, "link", "set", node_end, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def _launch(self, name: str, ip: str, netns: str | None, extra: list[str]) -> None:
        ray_bin = str(Path(sys.executable).with_name("ray"))
        if not Path(ray_bin).exists():
            ray_bin = shutil.which("ray") or "ray"
        cmd = [ray_bin, "start", "--block", f"--node-ip-address={ip}", f"--node-name={name}",
               "--disable-usage-stats", f"--object-store-memory={self.object_store_mb * 2**20}",
               f"--temp-dir={self._temp / name}", *extra]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", **FAST_HEALTH_CHECK}
        # a temp folder per node: two raylets starting at once in one session folder race for the
        # same socket file names
        (self._temp / name).mkdir(exist_ok=True)
        log_file = open(self._temp / f"{name}.log", "wb")
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        log_file.close()
        self.nodes[name] = ClusterNode(name, ip, proc, netns)

    def _start_node(self, name: str, ip: str, netns: str | None, extra: list[str]) -> None:
        for attempt in range(2):
            self._launch(name, ip, netns, extra)
            try:
                self._wait_started(name)
                return
            except ClusterError as e:
                if attempt == 1:
                    raise
                log.warning("%s did not start (%s); retrying once", name, str(e)[-200:])
                self._kill_tree(self.nodes[name], keep_namespace=True)

    def _wait_started(self, name: str) -> None:
        """Wait until ``ray start --block`` of ``name`` says its node is up (it has joined the GCS)."""
        node, log_path = self.nodes[name], self._temp / f"{name}.log"
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if not node.alive:
                text = log_path.read_text(errors="replace")
                tail = [ln for ln in text.splitlines() if ln and not ln[0].isspace()]
                raise ClusterError(f"`ray start` of {name} exited ({node.proc.returncode}): "
                                   f"{' | '.join(tail[-2:])[-400:]} (logs in {self._temp})")
            if "block forever" in log_path.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise ClusterError(f"{name} did not start within {self.start_timeout_s:.0f} s (logs in {self._temp})")

    def _refresh_ids(self) -> None:
        import ray

        for n in ray.nodes():
            node = self.nodes.get(n.get("NodeName", ""))
            if node is not None and (n["Alive"] or not node.node_id):
                node.node_id = n["NodeID"]

    def _pids(self, node: ClusterNode) -> set[int]:
        pids: set[int] = set()
        try:
            root = psutil.Process(node.proc.pid)
            pids = {root.pid} | {p.pid for p in root.children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
        if node.netns:
            r = subprocess.run(["ip", "netns", "pids", node.netns], capture_output=True, text=True)
            pids |= {int(p) for p in r.stdout.split()}
        return pids

    def _kill_tree(self, node: ClusterNode, keep_namespace: bool = False) -> list[int]:
        killed: list[int] = []
        for _ in range(3):  # a process may fork while the first sweep runs
            pids = self._pids(node)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        try:
            node.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if node.netns and not keep_namespace:
            subprocess.run(["ip", "netns", "del", node.netns], capture_output=True)
        node.killed = sorted(set(killed))
        return node.killed


def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]
