"""The farm that heals: health probes over a real gRPC channel to fake emulators, leases that skip
unhealthy emulators, the healing loop restarting or replacing a hung emulator's container through
the Docker SDK against a fake Docker Engine API on 127.0.0.1, spares restored to the farm's snapshot
over the emulator's own gRPC SnapshotService, and the loop as the farm's background process."""

from __future__ import annotations

import json
import os
import socket
import threading
from concurrent import futures

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("android_env")
pytest.importorskip("docker")

from emulators.android import farm
from emulators.android.farm import EmulatorEndpoint, FarmError
from emulators.android.grpc import load_protos
from emulators.android.healer import DockerFarmEngine, FarmHealer
from emulators.android.health import grpc_probe, probe_with_deadline
from guiagent.cli.main import main as cli_main

from .fake_docker import FakeDockerEngine
from .test_grpc import FakeEmulator

pb, pb_grpc = load_protos()
from android_env.proto import snapshot_service_pb2 as spb
from android_env.proto import snapshot_service_pb2_grpc as spb_grpc

DEADLINE = 0.4


class HangingEmulator(FakeEmulator):
    """A fake emulator whose screenshots can hang (booted, but its display pipeline stuck)."""

    def __init__(self) -> None:
        super().__init__()
        self.healthy = threading.Event()
        self.healthy.set()

    def getScreenshot(self, request, context):
        if not self.healthy.wait(timeout=5):
            context.abort(grpc.StatusCode.UNAVAILABLE, "still hung")
        return super().getScreenshot(request, context)


class FakeSnapshots(spb_grpc.SnapshotServiceServicer):
    """The emulator's SnapshotService: loads the snapshots it has, says why for the others."""

    def __init__(self) -> None:
        self.have = {"guiagent_ready"}
        self.loaded: list[str] = []

    def LoadSnapshot(self, request, context):
        if request.snapshot_id not in self.have:
            return spb.SnapshotPackage(snapshot_id=request.snapshot_id, success=False,
                                       err=f"snapshot {request.snapshot_id} does not exist".encode())
        self.loaded.append(request.snapshot_id)
        return spb.SnapshotPackage(snapshot_id=request.snapshot_id, success=True)


@pytest.fixture()
def emulators():
    """Three fake emulators on real gRPC servers, and their endpoints file."""
    servicers, servers, endpoints = [], [], []
    for i in range(3):
        s = HangingEmulator()
        s.snapshots = FakeSnapshots()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_EmulatorControllerServicer_to_server(s, server)
        spb_grpc.add_SnapshotServiceServicer_to_server(s.snapshots, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servicers.append(s)
        servers.append(server)
        endpoints.append(EmulatorEndpoint(i, f"emulator-{i}", "127.0.0.1", 5554 + 2 * i, 5555 + 2 * i, port))
    yield servicers, endpoints
    for s, server in zip(servicers, servers, strict=True):
        s.healthy.set()
        server.stop(0)


def write_farm(tmp_path, endpoints, project="aw-farm", **meta):
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps({"project": project, "host": "127.0.0.1", **meta,
                                "emulators": [e.to_dict() for e in endpoints]}))
    return path


@pytest.fixture()
def engine(emulators):
    """A fake Docker engine with one farm container per emulator; a restart un-hangs the emulator."""
    servicers, endpoints = emulators
    eng = FakeDockerEngine()
    for ep in endpoints:
        eng.add(f"aw-farm-{ep.name}-1", {"guiagent.farm": "aw-farm", "guiagent.emulator.index": str(ep.index),
                                         "com.docker.compose.service": ep.name})

    def index(c):
        return int(c["Config"]["Labels"]["guiagent.emulator.index"])

    eng.on_restart = lambda c: servicers[index(c)].healthy.set()
    yield eng
    eng.close()


def test_probe_needs_a_screenshot_and_an_input_within_the_deadline(emulators):
    servicers, endpoints = emulators
    assert grpc_probe(endpoints[0], deadline_s=DEADLINE) is None
    assert servicers[0].keys == [("keypress", "Shift", "")]  # the input reached the device
    servicers[1].healthy.clear()
    why = grpc_probe(endpoints[1], deadline_s=DEADLINE)
    assert why.startswith(f"grpc: getScreenshot at {endpoints[1].grpc_address}: DEADLINE_EXCEEDED")
    closed = EmulatorEndpoint(9, "emulator-9", "127.0.0.1", 5572, 5573, endpoints[0].grpc_port + 1000)
    assert "no emulator gRPC service" in grpc_probe(closed, deadline_s=DEADLINE)


def test_lease_skips_a_hung_emulator_and_marks_it(emulators, tmp_path):
    servicers, endpoints = emulators
    servicers[0].healthy.clear()
    lease = farm.lease_from(endpoints, tmp_path, probe=probe_with_deadline(DEADLINE))
    assert lease.endpoint.name == "emulator-1"
    assert "DEADLINE_EXCEEDED" in farm.unhealthy_marker(tmp_path, endpoints[0]).read_text()
    # a marked emulator is skipped without a probe; the other free one is leased
    second = farm.lease_from(endpoints, tmp_path)
    assert second.endpoint.name == "emulator-2"
    with pytest.raises(FarmError, match="2 of 3 leased, 1 unhealthy"):
        farm.lease_from(endpoints, tmp_path)
    lease.release(), second.release()


def test_healer_restarts_a_hung_emulator_and_a_slot_leases_it_again(emulators, engine, tmp_path):
    servicers, endpoints = emulators
    path = write_farm(tmp_path, endpoints)
    lock_dir = tmp_path / "leases"
    # a slot on emulator-0 finds it hung mid-episode: marks it, lets it go, leases a spare
    slot = farm.lease_endpoint(path)
    assert slot.endpoint.name == "emulator-0"
    servicers[0].healthy.clear()
    slot.mark_unhealthy("grpc: getScreenshot: DEADLINE_EXCEEDED")
    slot.release()
    slot = farm.lease_endpoint(path, probe=probe_with_deadline(DEADLINE))
    assert slot.endpoint.name == "emulator-1"

    healer = FarmHealer(path, DockerFarmEngine("aw-farm", engine.url), deadline_s=DEADLINE, restart_wait_s=2,
                        poll_s=0.05, log=lambda m: None)
    report = healer.check_once()
    assert report.restarted == ["emulator-0"] and report.replaced == [] and not report.failed
    assert report.leased == ["emulator-1"] and report.healthy == ["emulator-2"]
    assert engine.by_name("aw-farm-emulator-0-1")["RestartCount"] == 1
    assert not farm.unhealthy_marker(lock_dir, endpoints[0]).exists()
    # emulator-0 is a spare again: the next slot gets it
    other = farm.lease_endpoint(path, probe=probe_with_deadline(DEADLINE))
    assert other.endpoint.name == "emulator-0"
    slot.release(), other.release()
    healer.engine.close()


def test_healer_replaces_a_container_a_restart_does_not_heal(emulators, engine, tmp_path):
    servicers, endpoints = emulators
    path = write_farm(tmp_path, endpoints)
    engine.on_restart = lambda c: None  # restarting does not help this one
    engine.on_create = lambda c: servicers[int(c["Config"]["Labels"]["guiagent.emulator.index"])].healthy.set()
    servicers[2].healthy.clear()
    old = engine.by_name("aw-farm-emulator-2-1")
    healer = FarmHealer(path, DockerFarmEngine("aw-farm", engine.url), deadline_s=DEADLINE, restart_wait_s=0.6,
                        poll_s=0.05, log=lambda m: None)
    report = healer.check_once()
    assert report.replaced == ["emulator-2"] and report.restarted == [] and not report.failed
    new = engine.by_name("aw-farm-emulator-2-1")
    assert new["Id"] != old["Id"] and new["State"]["Running"]
    assert new["Config"]["Labels"] == old["Config"]["Labels"] and new["HostConfig"]["Devices"] == old["HostConfig"]["Devices"]
    assert ("DELETE", f"/containers/{old['Id']}") in engine.calls
    healer.engine.close()


def test_cli_heal_once_through_the_docker_sdk(emulators, engine, tmp_path, capsys):
    servicers, endpoints = emulators
    path = write_farm(tmp_path, endpoints)
    servicers[1].healthy.clear()
    rc = cli_main(["farm", "heal", "--once", "--json", "--endpoints", str(path), "--docker-host", engine.url,
                   "--deadline-s", str(DEADLINE), "--restart-wait-s", "5"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["restarted"] == ["emulator-1"] and sorted(report["healthy"]) == ["emulator-0", "emulator-2"]
    assert out.splitlines()[0] == "farm heal: 2 healthy; 0 leased; restarted emulator-1"
    assert "emulator-1 unhealthy (grpc: getScreenshot" in err


def test_cli_heal_without_an_engine_is_one_line(tmp_path, capsys):
    path = write_farm(tmp_path, [EmulatorEndpoint(0, "emulator-0", "127.0.0.1", 5554, 5555, 8554)])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    rc = cli_main(["farm", "heal", "--once", "--endpoints", str(path), "--docker-host", f"tcp://127.0.0.1:{dead}"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith(f"guiagent farm heal: no Docker engine reachable at tcp://127.0.0.1:{dead}")
    assert len(err.strip().splitlines()) == 1
    assert cli_main(["farm", "heal", "--once", "--endpoints", str(tmp_path / "none.json")]) == 1
    assert capsys.readouterr().err.startswith(f"guiagent farm heal: no endpoints file at {tmp_path / 'none.json'}")


def test_spares_are_restored_to_the_snapshot_after_use_and_leased_first(emulators, engine, tmp_path):
    """ClawGUI-style rotation: a spare a slot used goes back into the farm's snapshot (gRPC LoadSnapshot)
    before it is a warm spare again, and leases take warm spares before used emulators."""
    servicers, endpoints = emulators
    path = write_farm(tmp_path, endpoints, snapshot="guiagent_ready", slots=2, spares=1)
    lock_dir = tmp_path / "leases"
    for ep in endpoints:  # as `farm up` leaves them: booted from the snapshot
        farm.mark_clean(lock_dir, ep)
    slot = farm.lease_endpoint(path)
    assert slot.endpoint.name == "emulator-0" and not farm.clean_marker(lock_dir, endpoints[0]).exists()
    slot.release()  # the slot's run ended: emulator-0 is free but holds what the episodes left
    assert farm.lease_holder(lock_dir, endpoints[0]) is None
    other = farm.lease_endpoint(path)
    assert other.endpoint.name == "emulator-1"  # a warm spare before the used one
    assert farm.lease_holder(lock_dir, endpoints[1]) == os.getpid()

    healer = FarmHealer(path, DockerFarmEngine("aw-farm", engine.url), deadline_s=DEADLINE, restart_wait_s=2,
                        poll_s=0.05, log=lambda m: None)
    report = healer.check_once()
    assert report.restored == ["emulator-0"] and servicers[0].snapshots.loaded == ["guiagent_ready"]
    assert servicers[2].snapshots.loaded == []  # untouched spares are not restored again
    assert report.leased == ["emulator-1"] and sorted(report.warm) == ["emulator-0", "emulator-2"]
    assert report.line() == "farm heal: 2 healthy; 1 leased; restored emulator-0; 1/1 spares warm"
    assert farm.clean_marker(lock_dir, endpoints[0]).exists()
    # a snapshot that no longer loads: the emulator is healed by a restart, which boots it from the image
    third = farm.lease_endpoint(path)
    third.release()
    servicers[third.endpoint.index].snapshots.have.clear()
    report = healer.check_once()
    assert report.restarted == [third.endpoint.name] and "does not exist" in report.reasons[third.endpoint.name]
    assert farm.clean_marker(lock_dir, third.endpoint).exists()
    other.release()
    healer.engine.close()


def test_the_farms_background_healer_heals_and_stops(emulators, engine, tmp_path, capsys):
    """`farm up` starts `guiagent farm heal` as a background process (pid file, log); it heals a hung
    emulator on its own; `farm status` names it; stopping it leaves no process behind."""
    import time

    import psutil

    from emulators.android.healer import healer_pid, start_healer, stop_healer

    servicers, endpoints = emulators
    write_farm(tmp_path, endpoints)
    servicers[2].healthy.clear()
    pid = start_healer(tmp_path, docker_host=engine.url, interval_s=0.3, deadline_s=DEADLINE, restart_wait_s=5)
    try:
        assert healer_pid(tmp_path) == pid and start_healer(tmp_path) == pid  # one healer per farm
        log = tmp_path / "healer.log"
        deadline = time.monotonic() + 60
        while "restarted emulator-2" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert engine.by_name("aw-farm-emulator-2-1")["RestartCount"] == 1
        assert cli_main(["farm", "status", "--state-dir", str(tmp_path), "--json"]) == 1  # ports closed: fakes
        status = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert status["healer_pid"] == pid
    finally:
        assert stop_healer(tmp_path) == pid
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert healer_pid(tmp_path) is None and stop_healer(tmp_path) is None
    text = log.read_text()
    assert "emulator-2 unhealthy (grpc: getScreenshot" in text
    assert "farm heal: 2 healthy; 0 leased; restarted emulator-2" in text


def test_farm_state_restarts_and_boot_waits_go_through_the_sdk(emulators, engine, tmp_path):
    """What `farm up` waits for, what `farm status` shows and the restart a failed tear-down asks for:
    container state and health read through the Docker SDK (the fake engine's JSON), not CLI output."""
    servicers, endpoints = emulators
    compose = tmp_path / "compose.yaml"
    compose.write_text("# a farm started here\n")
    engine.by_name("aw-farm-emulator-1-1")["State"]["Health"]["Status"] = "unhealthy"
    rows = farm.status(endpoints, compose_file=compose, project="aw-farm", docker_host=engine.url)
    assert [(r.state, r.health) for r in rows] == [("running", "healthy"), ("running", "unhealthy"),
                                                   ("running", "healthy")]
    assert [r.ready for r in rows] == [False, False, False]  # no adb port behind the fakes

    sdk = DockerFarmEngine("aw-farm", engine.url)
    booting = engine.by_name("aw-farm-emulator-1-1")
    booting["State"]["Health"]["Status"] = "starting"
    seen = []

    def progress(n, total):
        seen.append(n)
        booting["State"]["Health"]["Status"] = "healthy"  # booted by the next look

    sdk.wait_healthy(endpoints, timeout_s=10, poll_s=0.01, progress=progress)
    assert seen == [2, 3]
    engine.by_name("aw-farm-emulator-2-1")["State"] = {"Status": "exited", "Running": False}
    with pytest.raises(FarmError, match=r"emulator container\(s\) exited: emulator-2 \(docker compose -p aw-farm"):
        sdk.wait_healthy(endpoints, timeout_s=10, poll_s=0.01)
    sdk.close()

    restart = farm.restart_hook(endpoints[0], "aw-farm", docker_host=engine.url, timeout_s=5, poll_s=0.01)
    restart()
    assert engine.by_name("aw-farm-emulator-0-1")["RestartCount"] == 1
    with pytest.raises(FarmError, match="no container of farm other runs emulator-0"):
        farm.restart_hook(endpoints[0], "other", docker_host=engine.url)()


def test_farm_up_reports_boots_to_the_progress_callback(tmp_path, monkeypatch):
    """`farm up` waits through the Docker SDK (the fake engine's JSON) and reports each poll's booted count
    to the progress callback (the CLI's bar) instead of log lines; only `docker compose up` is stood in for."""
    import subprocess

    eng = FakeDockerEngine()
    spec = farm.FarmSpec(emulators=2)
    for i in range(2):
        eng.add(f"{spec.project}-emulator-{i}-1", {"guiagent.farm": spec.project, "guiagent.emulator.index": str(i),
                                                   "com.docker.compose.service": f"emulator-{i}"})
        eng.by_name(f"{spec.project}-emulator-{i}-1")["State"]["Health"]["Status"] = "starting"
    monkeypatch.setattr(farm, "_compose", lambda *a, **k: subprocess.CompletedProcess([], 0, "", ""))
    seen, logs = [], []

    def progress(n, total):
        seen.append((n, total))
        if n < total:  # one more emulator has booted by the next look
            eng.by_name(f"{spec.project}-emulator-{n}-1")["State"]["Health"]["Status"] = "healthy"

    try:
        endpoints = farm.up(spec, tmp_path, poll_s=0, docker_host=eng.url, log=logs.append, progress=progress)
    finally:
        eng.close()
    assert seen == [(0, 2), (1, 2), (2, 2)] and len(endpoints) == 2
    assert not any("booted" in line for line in logs)  # the bar stands in for the per-poll lines
    assert (tmp_path / "endpoints.json").is_file()
