"""What an AndroidWorld run needs, checked before anything is created, one line per missing piece.

In the order a new user meets them on a bare host:

1. a starting policy: ``--model`` (AndroidWorld has no scripted solvers to record a warm start from),
   or ``--data`` demonstrations to warm-start a tiny model by SFT;
2. the ``adb`` client (android_world reaches every emulator through the local adb server);
3. the emulators: a farm (``--device farm endpoints.json``), a list (``--device console_ports
   5554,5556``) or one address (``--device console_port 5554``, the default); each must be listed
   by ``adb devices`` as a ``device`` and answer on its gRPC port, and there must be one per slot;
4. the ``android_world`` package, in its own environment.

:func:`check_androidworld` (``guiagent train``) raises :class:`AndroidSetupError` (a ``ValueError``)
with that line; :func:`check_androidworld_eval` (``guiagent eval``) does the same for an evaluation,
whose agent may need no model (``--agent random``) but never is the scripted oracle.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from emulators.android import farm as farm_lib
from emulators.android.farm import EmulatorEndpoint, FarmError
from emulators.android.suite import AndroidWorldMissing, _import, parse_console_ports
from emulators.suites.mixed import split_env

__all__ = ["AndroidSetupError", "adb_states", "check_androidworld", "check_androidworld_eval", "check_devices",
           "needs_model_message"]

START_HINT = ("start emulators with `guiagent farm up --emulators N` (docs/android.md) and pass "
              "--device farm runs/farm/endpoints.json")


class AndroidSetupError(ValueError):
    """One line: what is missing for an AndroidWorld run and how to get it."""


def needs_model_message(env: str) -> str:
    return (f"--env {env} needs a starting model: give --model (a local folder or hub id, e.g. "
            "Qwen/Qwen2.5-VL-3B-Instruct), or --data RUN_DIR with recorded demonstrations to warm-start a "
            "tiny model by SFT (AndroidWorld has no scripted solvers to record them from)")


def adb_states(adb: str, timeout_s: float = 30.0) -> dict[str, str]:
    """``adb devices`` as ``{serial: state}`` (starts the local adb server when none runs)."""
    try:
        r = subprocess.run([adb, "devices"], capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise AndroidSetupError(f"`{adb} devices` did not answer within {timeout_s:.0f} s "
                                "(a hung adb server? try `adb kill-server`)") from None
    if r.returncode != 0:
        raise AndroidSetupError(f"`{adb} devices` failed: {' '.join((r.stderr or r.stdout).split())[:200]}")
    out = {}
    for line in r.stdout.splitlines():
        serial, _, state = line.partition("\t")
        if state:
            out[serial.strip()] = state.strip()
    return out


def _endpoints(device: Mapping[str, str]) -> tuple[list[EmulatorEndpoint], str]:
    """The emulators the device options name, and how they were named (for the messages)."""
    if device.get("farm"):
        path = Path(device["farm"])
        if not path.is_file():
            raise AndroidSetupError(f"--device farm {path}: no farm there (`guiagent farm up --emulators N` on this "
                                    "host writes it, docs/android.md)")
        try:
            return farm_lib.load_endpoints(path), f"farm {path}"
        except FarmError as e:
            raise AndroidSetupError(f"--device farm {path}: {e}") from None
    try:
        if device.get("console_ports") or device.get("serials"):
            ports = parse_console_ports(device.get("console_ports"), device.get("serials"))
            return farm_lib.local_endpoints(ports), "--device console_ports/serials"
        console = int(device.get("console_port", 5554))
        grpc = int(device.get("grpc_port", 8554))
        return farm_lib.local_endpoints([console], [grpc]), ("the default address" if "console_port" not in device
                                                              else "--device console_port")
    except ValueError as e:
        raise AndroidSetupError(f"--device: {e}") from None


def check_androidworld(*, env: str, model: str, data: Sequence[str], resume: str | None,
                       device: Mapping[str, str], slots: int) -> None:
    """Raise :class:`AndroidSetupError` (one line) for the first missing piece of an AndroidWorld run.

    ``slots``: emulators the run drives at once (one per slot, never shared)."""
    if not model and not data and not resume:
        raise AndroidSetupError(needs_model_message(env))
    check_devices(device=device, slots=slots)


def check_androidworld_eval(*, env: str, agent: str, device: Mapping[str, str], slots: int) -> None:
    """:func:`check_androidworld` for ``guiagent eval``: an agent that can act on AndroidWorld (its
    tasks have no scripted solvers), then adb, the emulators and android_world. ``env`` of several
    suites (``androidworld,webapps``) with the oracle runs only the others' tasks: nothing to check."""
    if agent == "oracle":
        if len(split_env(env)) > 1:
            return
        raise AndroidSetupError(f"--env {env} has no scripted solvers (android_world ships none), so --agent oracle "
                                "has nothing to run: use --agent model --model DIR|HUB_ID|URL, or --agent random")
    check_devices(device=device, slots=slots)


def check_devices(*, device: Mapping[str, str], slots: int) -> None:
    """adb, ``slots`` ready emulators among those ``device`` names, and the android_world package."""
    adb = device.get("adb_path") or "adb"
    adb_exe = shutil.which(adb)
    if adb_exe is None:
        raise AndroidSetupError(f"no adb client ({adb} is not on PATH): install Android's platform tools "
                                "(apt-get install adb, or bash scripts/setup.sh --dev), or pass --device adb_path PATH")
    endpoints, named = _endpoints(device)
    states = adb_states(adb_exe)
    lock_dir = (Path(device["farm"]).parent / "leases" if device.get("farm")
                else Path(device.get("lease_dir") or farm_lib.default_lock_dir()))
    ready, problems = [], []
    for ep in endpoints:
        state = states.get(ep.local_serial)
        if state != "device":
            listed = ", ".join(f"{s} {st}" for s, st in sorted(states.items())) or "none"
            problems.append(f"{ep.local_serial} is {state}" if state else
                            f"no emulator reachable at {ep.local_serial} (adb devices lists: {listed})")
        elif not farm_lib.probe("127.0.0.1", ep.grpc_port):
            problems.append(f"{ep.local_serial} has no gRPC service on 127.0.0.1:{ep.grpc_port} "
                            "(start it with -grpc PORT, or give --device grpc_port)")
        elif farm_lib.unhealthy_marker(lock_dir, ep).exists():
            problems.append(f"{ep.local_serial} is marked unhealthy (run `guiagent farm heal`)")
        else:
            ready.append(ep)
    if not ready:
        raise AndroidSetupError(f"{problems[0]}; {START_HINT}, or point --device console_ports at yours"
                                if named == "the default address" else f"{named}: {problems[0]}")
    if len(ready) < slots:
        why = f"; {problems[0]}" if problems else ""
        raise AndroidSetupError(f"one emulator per slot: {slots} slots but {len(ready)} emulator(s) ready in {named}"
                                f"{why} (start more, e.g. `guiagent farm up --emulators {slots}`, or lower --slots)")

    try:
        _import("android_world.registry")
    except AndroidWorldMissing as e:
        raise AndroidSetupError(str(e)) from None
