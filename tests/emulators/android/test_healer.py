"""The farm that heals: health probes over a real gRPC channel to fake emulators, leases that skip
unhealthy emulators, and the healing loop restarting or replacing a hung emulator's container through
the Docker SDK against a fake Docker Engine API on 127.0.0.1."""

from __future__ import annotations

import json
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


@pytest.fixture()
def emulators():
    """Three fake emulators on real gRPC servers, and their endpoints file."""
    servicers, servers, endpoints = [], [], []
    for i in range(3):
        s = HangingEmulator()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_EmulatorControllerServicer_to_server(s, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servicers.append(s)
        servers.append(server)
        endpoints.append(EmulatorEndpoint(i, f"emulator-{i}", "127.0.0.1", 5554 + 2 * i, 5555 + 2 * i, port))
    yield servicers, endpoints
    for s, server in zip(servicers, servers, strict=True):
        s.healthy.set()
        server.stop(0)


def write_farm(tmp_path, endpoints, project="aw-farm"):
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps({"project": project, "host": "127.0.0.1",
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
