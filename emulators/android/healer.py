"""The farm's healing loop: hung emulators restarted or replaced, spares kept warm.

Every ``interval_s`` the healer looks at each emulator of a farm (its ``endpoints.json``):

* **leased** ones (a rollout slot holds their ``flock``) are left alone unless the slot marked
  them unhealthy: probing them would put an input into someone's episode, and the slot's own
  device errors end its episode and send it to the next lease anyway;
* **free** ones (the spares, ClawGUI-style: ``guiagent farm up --spares K`` runs K more emulators than
  slots) are probed (:mod:`emulators.android.health`: a screenshot and an input within a deadline)
  and, when a slot used them since their last restore, put back into the farm's snapshot over gRPC
  (``leases/<name>.clean`` marks the restored ones; leases take those first). So a spare a slot
  rotates onto is answering and as the snapshot left it;
* an emulator marked unhealthy (``leases/<name>.unhealthy``, left by a slot or a lease's probe) or
  failing its probe is **healed**: the healer takes its lease (so no slot can pick it meanwhile),
  restarts its container, waits for a passing probe, and if none comes **replaces** the container
  (removed and created again from the same image, labels, environment and host config); then it
  clears the marker and lets the lease go, and the emulator is a spare again.

``guiagent farm up`` starts the loop as a background process (:func:`start_healer`, its pid and log
in the farm's state directory); ``guiagent farm down`` stops it (:func:`stop_healer`) before the
containers go, so it never restarts an emulator that is being removed.

The Docker engine is driven through the Docker SDK for Python (``docker`` on PyPI), which talks to
the engine's HTTP API (a local socket, ``tcp://host:2375`` or ``ssh://user@host``); containers are
found by the labels ``guiagent farm up`` gives them (``guiagent.farm``, ``guiagent.emulator.index``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from emulators.android.farm import (
    DockerFarmEngine,
    EmulatorEndpoint,
    FarmError,
    clean_marker,
    load_endpoints,
    mark_clean,
    mark_unhealthy,
    try_lease,
    unhealthy_marker,
)
from emulators.android.health import Probe, grpc_restore, probe_with_deadline

__all__ = ["DockerFarmEngine", "FarmHealer", "HealReport", "healer_pid", "start_healer", "stop_healer"]


@dataclass
class HealReport:
    """One pass of the healer: what it looked at and what it did (``to_dict``: the ``--json`` line)."""

    healthy: list[str] = field(default_factory=list)
    leased: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    """free emulators a slot had used, put back into the snapshot this pass"""
    restarted: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    spares: int = 0
    """spares the farm was started with (``farm up --spares``)"""
    warm: list[str] = field(default_factory=list)
    """free emulators that answer and are as the snapshot left them at the end of the pass"""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        parts = [f"{len(self.healthy)} healthy", f"{len(self.leased)} leased"]
        if self.restored:
            parts.append(f"restored {', '.join(self.restored)}")
        if self.restarted:
            parts.append(f"restarted {', '.join(self.restarted)}")
        if self.replaced:
            parts.append(f"replaced {', '.join(self.replaced)}")
        if self.failed:
            parts.append(f"still unhealthy {', '.join(self.failed)}")
        if self.spares:
            parts.append(f"{min(len(self.warm), self.spares)}/{self.spares} spares warm")
        return "farm heal: " + "; ".join(parts)


class FarmHealer:
    """Heal the emulators of ``endpoints_file`` (see the module doc); :meth:`check_once` is one pass."""

    def __init__(self, endpoints_file: str | Path, engine: DockerFarmEngine, *, probe: Probe | None = None,
                 restore: Probe | None = None, deadline_s: float = 10.0, restart_wait_s: float = 300.0,
                 poll_s: float = 2.0, log: Callable[[str], None] = print):
        self.endpoints_file = Path(endpoints_file)
        self.endpoints = load_endpoints(self.endpoints_file)
        meta = json.loads(self.endpoints_file.read_text())
        self.spares, snapshot = int(meta.get("spares", 0)), str(meta.get("snapshot", ""))
        self.lock_dir = self.endpoints_file.parent / "leases"
        self.engine = engine
        self.probe = probe or probe_with_deadline(deadline_s)
        # a used spare goes back into the snapshot (None: the farm has none to go back to)
        self.restore = restore or ((lambda ep: grpc_restore(ep, snapshot, deadline_s=max(deadline_s, 60.0)))
                                   if snapshot else None)
        self.restart_wait_s, self.poll_s, self.log = restart_wait_s, poll_s, log

    @classmethod
    def for_farm(cls, endpoints_file: str | Path, docker_host: str | None = None, **kw: Any) -> FarmHealer:
        project = json.loads(Path(endpoints_file).read_text()).get("project", "guiagent-farm")
        return cls(endpoints_file, DockerFarmEngine(project, docker_host), **kw)

    def check_once(self) -> HealReport:
        report = HealReport(spares=self.spares)
        for ep in self.endpoints:
            marker = unhealthy_marker(self.lock_dir, ep)
            lease = try_lease(ep, self.lock_dir, use=False)
            if lease is None:  # a slot holds it: its own errors send it elsewhere and mark this one
                if not marker.exists():
                    report.leased.append(ep.name)
                    continue
                # marked but still held (the slot is on its way out): heal it on a later pass
                report.failed[ep.name] = "marked unhealthy, still leased"
                continue
            try:
                why = marker.read_text().strip() if marker.exists() else self.probe(ep)
                if why is None and self.restore is not None and not clean_marker(self.lock_dir, ep).exists():
                    why = self.restore(ep) or self.probe(ep)  # a slot used it: back into the snapshot
                    if why is None:
                        report.restored.append(ep.name)
                        mark_clean(self.lock_dir, ep)
                if why is None:
                    report.healthy.append(ep.name)
                    if clean_marker(self.lock_dir, ep).exists() or self.restore is None:
                        report.warm.append(ep.name)
                    continue
                report.reasons[ep.name] = why
                mark_unhealthy(self.lock_dir, ep, why)
                self.log(f"farm heal: {ep.name} unhealthy ({why}); restarting its container")
                if self._heal(ep, report):
                    report.warm.append(ep.name)
            finally:
                lease.release()
        return report

    def _heal(self, ep: EmulatorEndpoint, report: HealReport) -> bool:
        """Restart, then replace, ``ep``'s container until it answers; whether it does. A container
        boots from the farm's snapshot, so a healed emulator is clean."""
        try:
            self.engine.restart(ep)
            if self._wait_healthy(ep):
                report.restarted.append(ep.name)
                self._healed(ep)
                return True
            self.log(f"farm heal: {ep.name} still unhealthy {self.restart_wait_s:.0f} s after a restart; "
                     "replacing its container")
            self.engine.replace(ep)
            if self._wait_healthy(ep):
                report.replaced.append(ep.name)
                self._healed(ep)
                return True
            report.failed[ep.name] = f"still unhealthy {self.restart_wait_s:.0f} s after a new container"
        except FarmError as e:
            report.failed[ep.name] = str(e)
        return False

    def _healed(self, ep: EmulatorEndpoint) -> None:
        unhealthy_marker(self.lock_dir, ep).unlink(missing_ok=True)
        mark_clean(self.lock_dir, ep)

    def _wait_healthy(self, ep: EmulatorEndpoint) -> bool:
        deadline = time.monotonic() + self.restart_wait_s
        while True:
            if self.probe(ep) is None:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_s)

    def run(self, interval_s: float = 30.0, *, passes: int | None = None) -> None:
        """Pass after pass, ``interval_s`` apart (``passes``: stop after that many; None: forever)."""
        n = 0
        while passes is None or n < passes:
            started = time.monotonic()
            self.log(self.check_once().line())
            n += 1
            if passes is None or n < passes:
                time.sleep(max(0.0, interval_s - (time.monotonic() - started)))


# -- the healing loop as a background process of the farm ------------------------------------------

def _pid_file(state_dir: str | Path) -> Path:
    return Path(state_dir) / "healer.pid"


def healer_pid(state_dir: str | Path) -> int | None:
    """The pid of the farm's running healer (started by :func:`start_healer`), else ``None``.

    The pid file holds the pid and the process's start time, so a recycled pid is never taken for it."""
    try:
        pid, started = _pid_file(state_dir).read_text().split()
        proc = psutil.Process(int(pid))
        if abs(proc.create_time() - float(started)) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE:
            return proc.pid
    except (OSError, ValueError, psutil.Error):
        pass
    return None


def start_healer(state_dir: str | Path, *, docker_host: str | None = None, interval_s: float = 30.0,
                 deadline_s: float = 10.0, restart_wait_s: float = 300.0) -> int:
    """Run ``guiagent farm heal`` on the farm in ``state_dir`` in the background (its own session, so it
    outlives the shell); its output goes to ``healer.log`` there. Returns its pid; one already running
    is left as it is."""
    state = Path(state_dir)
    running = healer_pid(state)
    if running is not None:
        return running
    argv = [sys.executable, "-m", "guiagent", "farm", "heal", "--endpoints", str(state / "endpoints.json"),
            "--interval-s", str(interval_s), "--deadline-s", str(deadline_s), "--restart-wait-s", str(restart_wait_s)]
    if docker_host:
        argv += ["--docker-host", docker_host]
    with open(state / "healer.log", "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=os.getcwd())
    tmp = _pid_file(state).with_suffix(".tmp")
    tmp.write_text(f"{proc.pid} {psutil.Process(proc.pid).create_time()}\n")
    tmp.replace(_pid_file(state))
    return proc.pid


def stop_healer(state_dir: str | Path, *, timeout_s: float = 10.0) -> int | None:
    """Stop the farm's background healer (SIGTERM, then SIGKILL after ``timeout_s``); its pid, or
    ``None`` when none ran."""
    pid = healer_pid(state_dir)
    if pid is not None:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except psutil.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)
    _pid_file(state_dir).unlink(missing_ok=True)
    return pid
