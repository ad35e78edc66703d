"""The farm's healing loop: hung emulators restarted or replaced, spares kept warm.

Every ``interval_s`` the healer looks at each emulator of a farm (its ``endpoints.json``):

* **leased** ones (a rollout slot holds their ``flock``) are left alone unless the slot marked
  them unhealthy: probing them would put an input into someone's episode, and the slot's own
  device errors end its episode and send it to the next lease anyway;
* **free** ones (the spares, ClawGUI-style: the farm runs more emulators than slots) are probed
  (:mod:`emulators.android.health`: a screenshot and an input within a deadline), which also keeps
  them warm;
* an emulator marked unhealthy (``leases/<name>.unhealthy``, left by a slot or a lease's probe) or
  failing its probe is **healed**: the healer takes its lease (so no slot can pick it meanwhile),
  restarts its container, waits for a passing probe, and if none comes **replaces** the container
  (removed and created again from the same image, labels, environment and host config); then it
  clears the marker and lets the lease go, and the emulator is a spare again.

The Docker engine is driven through the Docker SDK for Python (``docker`` on PyPI), which talks to
the engine's HTTP API (a local socket, ``tcp://host:2375`` or ``ssh://user@host``); containers are
found by the labels ``guiagent farm up`` gives them (``guiagent.farm``, ``guiagent.emulator.index``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulators.android.farm import (
    EmulatorEndpoint,
    FarmError,
    load_endpoints,
    mark_unhealthy,
    try_lease,
    unhealthy_marker,
)
from emulators.android.health import Probe, probe_with_deadline

__all__ = ["DockerFarmEngine", "FarmHealer", "HealReport"]


class DockerFarmEngine:
    """The farm's containers through the Docker SDK: find one by emulator index, restart or replace it."""

    def __init__(self, project: str, docker_host: str | None = None, *, timeout_s: float = 60.0):
        try:
            import docker
        except ImportError:
            raise FarmError("the farm's healer needs the Docker SDK: pip install docker") from None
        self.project = project
        try:
            self.client = (docker.DockerClient(base_url=docker_host, version="auto", timeout=int(timeout_s))
                           if docker_host else docker.from_env(timeout=int(timeout_s)))
        except docker.errors.DockerException as e:
            where = docker_host or "the local socket"
            raise FarmError(f"no Docker engine reachable at {where} ({' '.join(str(e).split())[:200]}); "
                            "start dockerd on the farm host, or pass --docker-host") from None
        self._errors = docker.errors

    def container(self, endpoint: EmulatorEndpoint) -> Any:
        found = self.client.containers.list(all=True, filters={"label": [
            f"guiagent.farm={self.project}", f"guiagent.emulator.index={endpoint.index}"]})
        if not found:
            raise FarmError(f"no container of farm {self.project} runs {endpoint.name} "
                            "(was it started with `guiagent farm up`?)")
        return found[0]

    def restart(self, endpoint: EmulatorEndpoint) -> None:
        try:
            self.container(endpoint).restart(timeout=10)
        except self._errors.APIError as e:
            raise FarmError(f"restarting {endpoint.name}: {e.explanation or e}") from None

    def replace(self, endpoint: EmulatorEndpoint) -> str:
        """Remove the container and create it again from its own image, config and host config; the new id."""
        old = self.container(endpoint)
        attrs = old.attrs
        cfg, host_cfg = attrs.get("Config") or {}, attrs.get("HostConfig") or {}
        name = (attrs.get("Name") or old.name).lstrip("/")
        try:
            old.remove(force=True)
            created = self.client.api.create_container(
                image=cfg.get("Image"), name=name, labels=cfg.get("Labels") or {}, environment=cfg.get("Env"),
                healthcheck=cfg.get("Healthcheck"), host_config=host_cfg,
                ports=list(cfg.get("ExposedPorts") or {}) or None)
            self.client.api.start(created["Id"])
        except self._errors.APIError as e:
            raise FarmError(f"replacing {endpoint.name}: {e.explanation or e}") from None
        return created["Id"]

    def close(self) -> None:
        self.client.close()


@dataclass
class HealReport:
    """One pass of the healer: what it looked at and what it did (``to_dict``: the ``--json`` line)."""

    healthy: list[str] = field(default_factory=list)
    leased: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        parts = [f"{len(self.healthy)} healthy", f"{len(self.leased)} leased"]
        if self.restarted:
            parts.append(f"restarted {', '.join(self.restarted)}")
        if self.replaced:
            parts.append(f"replaced {', '.join(self.replaced)}")
        if self.failed:
            parts.append(f"still unhealthy {', '.join(self.failed)}")
        return "farm heal: " + "; ".join(parts)


class FarmHealer:
    """Heal the emulators of ``endpoints_file`` (see the module doc); :meth:`check_once` is one pass."""

    def __init__(self, endpoints_file: str | Path, engine: DockerFarmEngine, *, probe: Probe | None = None,
                 deadline_s: float = 10.0, restart_wait_s: float = 300.0, poll_s: float = 2.0,
                 log: Callable[[str], None] = print):
        self.endpoints_file = Path(endpoints_file)
        self.endpoints = load_endpoints(self.endpoints_file)
        self.lock_dir = self.endpoints_file.parent / "leases"
        self.engine = engine
        self.probe = probe or probe_with_deadline(deadline_s)
        self.restart_wait_s, self.poll_s, self.log = restart_wait_s, poll_s, log

    @classmethod
    def for_farm(cls, endpoints_file: str | Path, docker_host: str | None = None, **kw: Any) -> FarmHealer:
        project = json.loads(Path(endpoints_file).read_text()).get("project", "guiagent-farm")
        return cls(endpoints_file, DockerFarmEngine(project, docker_host), **kw)

    def check_once(self) -> HealReport:
        report = HealReport()
        for ep in self.endpoints:
            marker = unhealthy_marker(self.lock_dir, ep)
            lease = try_lease(ep, self.lock_dir)
            if lease is None:  # a slot holds it: its own errors send it elsewhere and mark this one
                if not marker.exists():
                    report.leased.append(ep.name)
                    continue
                # marked but still held (the slot is on its way out): heal it on a later pass
                report.failed[ep.name] = "marked unhealthy, still leased"
                continue
            try:
                why = marker.read_text().strip() if marker.exists() else self.probe(ep)
                if why is None:
                    report.healthy.append(ep.name)
                    continue
                report.reasons[ep.name] = why
                mark_unhealthy(self.lock_dir, ep, why)
                self.log(f"farm heal: {ep.name} unhealthy ({why}); restarting its container")
                self._heal(ep, report)
            finally:
                lease.release()
        return report

    def _heal(self, ep: EmulatorEndpoint, report: HealReport) -> None:
        try:
            self.engine.restart(ep)
            if self._wait_healthy(ep):
                report.restarted.append(ep.name)
                unhealthy_marker(self.lock_dir, ep).unlink(missing_ok=True)
                return
            self.log(f"farm heal: {ep.name} still unhealthy {self.restart_wait_s:.0f} s after a restart; "
                     "replacing its container")
            self.engine.replace(ep)
            if self._wait_healthy(ep):
                report.replaced.append(ep.name)
                unhealthy_marker(self.lock_dir, ep).unlink(missing_ok=True)
                return
            report.failed[ep.name] = f"still unhealthy {self.restart_wait_s:.0f} s after a new container"
        except FarmError as e:
            report.failed[ep.name] = str(e)

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
