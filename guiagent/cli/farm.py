"""``guiagent farm up|down|status``: Android emulator farms on a KVM host (docker compose).

Examples::

    guiagent farm up --emulators 4                       # start, wait for boot, write endpoints.json
    guiagent farm up --emulators 4 --dry-run             # print the compose file only
    guiagent farm up --emulators 8 --bind 0.0.0.0 --host farm1.lan   # serve other hosts
    guiagent farm status --json                          # containers + port probes
    guiagent farm status --endpoints runs/farm/endpoints.json        # a farm elsewhere, by address
    guiagent farm heal                                   # every 30 s: restart or replace hung emulators
    guiagent farm heal --once --json                     # one pass
    guiagent farm down
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from guiagent.cli._common import emit_json, log, validate_out_dir
from guiagent.config import ConfigError, parse_config

ACTIONS = ("up", "down", "status", "heal")


@dataclass
class FarmConfig:
    """Start, stop or inspect an Android emulator farm (one docker compose project per host)."""

    emulators: int = 1
    """number of emulators (each: console+adb ports from --console-base-port, gRPC from --grpc-base-port)"""
    host: str = "127.0.0.1"
    """address other machines use to reach this farm; written into endpoints.json"""
    bind: str = "127.0.0.1"
    """host interface the emulator ports are published on (0.0.0.0 to serve other hosts)"""
    image: str = "guiagent/android-emulator:latest"
    """emulator image (build it from docker/emulator, see docs/android.md)"""
    project: str = "guiagent-farm"
    """docker compose project name"""
    console_base_port: int = 5554
    """emulator i gets console base+2i and adb base+2i+1 (5554 makes the host's adb list emulator-5554...)"""
    grpc_base_port: int = 8554
    """emulator i gets its gRPC EmulatorController on base+i"""
    memory_gb: float = 6.0
    """memory limit per emulator container"""
    cpus: float = 4.0
    """CPU limit per emulator container"""
    state_dir: str = "runs/farm"
    """where compose.yaml and endpoints.json are written"""
    endpoints: str | None = None
    """status: read this endpoints.json instead of <state-dir>/endpoints.json (a farm on another host)"""
    docker_host: str | None = None
    """Docker engine to use (DOCKER_HOST form, e.g. ssh://user@farm1); default: the local one"""
    timeout_s: float = 900.0
    """up: how long to wait for every emulator to boot"""
    interval_s: float = 30.0
    """heal: seconds between two passes of the healing loop"""
    once: bool = False
    """heal: one pass, then exit (non-zero when an emulator stays unhealthy)"""
    deadline_s: float = 10.0
    """heal: a healthy emulator answers a screenshot and an input within this many seconds each"""
    restart_wait_s: float = 300.0
    """heal: how long a restarted (then a replaced) emulator has to pass its probe"""
    dry_run: bool = False
    """up: print the rendered compose file and exit"""
    json: bool = False
    """print one JSON object as the last stdout line"""

    def __post_init__(self) -> None:
        if self.emulators < 1:
            raise ValueError(f"--emulators must be >= 1, got {self.emulators}")
        if min(self.timeout_s, self.interval_s, self.deadline_s, self.restart_wait_s) <= 0:
            raise ValueError("--timeout-s, --interval-s, --deadline-s and --restart-wait-s must be positive")
        if not (self.memory_gb > 0 and self.cpus > 0):
            raise ValueError(f"--memory-gb and --cpus must be positive, got {self.memory_gb} and {self.cpus}")


    def spec(self):
        from emulators.android.farm import FarmSpec

        try:
            return FarmSpec(emulators=self.emulators, image=self.image, project=self.project, bind=self.bind,
                            host=self.host, console_base_port=self.console_base_port,
                            grpc_base_port=self.grpc_base_port, memory_gb=self.memory_gb, cpus=self.cpus)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def usage() -> str:
    return (__doc__ or "").strip() + "\n\nusage: guiagent farm {up,down,status} [options]  " \
        "(guiagent farm up --help for the options)"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    action, rest = argv[0], argv[1:]
    if action not in ACTIONS:
        print(f"guiagent farm: unknown action {action!r}; use one of {', '.join(ACTIONS)}", file=sys.stderr)
        return 2
    cfg = parse_config(FarmConfig, rest, prog=f"guiagent farm {action}")
    from emulators.android import farm

    spec = cfg.spec()
    state = Path(cfg.state_dir)
    if action == "up" and not cfg.dry_run:
        validate_out_dir(state, flag="--state-dir")  # before any container starts
    try:
        if action == "up":
            if cfg.dry_run:
                sys.stdout.write(farm.render_compose(spec))
                return 0
            from guiagent.progress import is_terminal, progress_bar
            # on a terminal a bar (booted emulators, rate, time left) replaces the per-poll lines
            with progress_bar(spec.emulators, "farm up", "emulator") as bar:
                def booted(n: int, total: int) -> None:
                    bar.update(n - bar.n)
                endpoints = farm.up(spec, state, timeout_s=cfg.timeout_s, docker_host=cfg.docker_host,
                                    log=bar.write if is_terminal() else log,
                                    progress=booted if is_terminal() else None)
            for ep in endpoints:
                print(f"{ep.name}: adb {ep.adb_serial} (on the farm host: {ep.local_serial})  "
                      f"grpc {ep.grpc_address}")
            print(f"farm up: {len(endpoints)} emulator(s) ready; endpoints in {state / 'endpoints.json'}")
            if cfg.json:
                emit_json({"project": spec.project, "endpoints_file": str(state / "endpoints.json"),
                           "emulators": [e.to_dict() for e in endpoints]})
            return 0
        if action == "down":
            farm.down(spec.project, state, docker_host=cfg.docker_host)
            print(f"farm down: project {spec.project} stopped")
            if cfg.json:
                emit_json({"project": spec.project, "stopped": True})
            return 0
        path = Path(cfg.endpoints) if cfg.endpoints else state / "endpoints.json"
        if action == "heal":
            return _heal(cfg, path)
        # status
        from_file = bool(cfg.endpoints) or path.is_file()
        endpoints = farm.load_endpoints(path) if from_file else farm.endpoints_for(spec)
        rows = farm.status(endpoints, compose_file=None if cfg.endpoints else state / "compose.yaml",
                           project=spec.project, docker_host=cfg.docker_host)
        for r in rows:
            print(f"{r.endpoint.name}: {r.state}/{r.health}  adb {r.endpoint.adb_serial} "
                  f"{'open' if r.adb_open else 'closed'}  grpc {r.endpoint.grpc_address} "
                  f"{'open' if r.grpc_open else 'closed'}")
        n_ready = sum(r.ready for r in rows)
        print(f"farm status: {n_ready}/{len(rows)} emulators reachable")
        if cfg.json:
            emit_json({"project": spec.project, "ready": n_ready, "emulators": [r.to_dict() for r in rows]})
        return 0 if n_ready == len(rows) else 1
    except farm.FarmError as e:
        print(f"guiagent farm {action}: {e}", file=sys.stderr)
        return 1


def _heal(cfg: FarmConfig, path: Path) -> int:
    from emulators.android import farm
    from emulators.android.healer import FarmHealer

    farm.load_endpoints(path)  # one line when there is no farm there
    healer = FarmHealer.for_farm(path, cfg.docker_host, deadline_s=cfg.deadline_s,
                                 restart_wait_s=cfg.restart_wait_s, log=log)
    try:
        if not cfg.once:
            healer.run(cfg.interval_s)
            return 0
        report = healer.check_once()
        print(report.line())
        if cfg.json:
            emit_json(report.to_dict())
        return 1 if report.failed else 0
    finally:
        healer.engine.close()
