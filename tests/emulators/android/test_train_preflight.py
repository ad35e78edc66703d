"""`guiagent train --env androidworld` explains itself: one line, exit code 2 and nothing written for
each missing piece (a starting model, adb, the emulators, the farm, android_world).

The real adb client and a private adb server run here; an emulator is a fake adbd (it answers the
server's CNXN with a device banner, so ``adb devices`` lists it) plus a fake gRPC EmulatorController.
One case runs the CLI as a subprocess; the others call its entry point in this process (same code
path, without paying for a new interpreter and torch each time)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent import futures

import pytest

from guiagent.cli.main import main as cli_main

from .conftest import ROOT, free_port
from .fake_adbd import FakeAdbd, free_emulator_adb_port, start_adb_and_wait

try:
    import android_world  # noqa: F401
    HAVE_AW = True
except ImportError:
    HAVE_AW = False

ADB = shutil.which("adb")
needs_adb = pytest.mark.skipif(ADB is None, reason="the adb client is not installed (bash scripts/setup.sh --dev)")


@pytest.fixture()
def adb_server(monkeypatch):
    """A private adb server (the real client) for this test; ``ANDROID_ADB_SERVER_PORT`` points at it."""
    port = free_port()
    env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(port)}
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
    yield env
    subprocess.run([ADB, "kill-server"], env=env, capture_output=True, check=False, timeout=30)


@pytest.fixture()
def emulator(adb_server):
    """A fake emulator the adb server lists as a device, with a gRPC service: ``(console, grpc)`` ports."""
    grpc = pytest.importorskip("grpc")
    pytest.importorskip("android_env")
    from emulators.android.grpc import load_protos

    from .test_grpc import FakeEmulator

    adb_port = free_emulator_adb_port()
    if adb_port is None:
        pytest.skip("no free emulator port in 5555..5585")
    adbd = FakeAdbd(adb_port)
    _, pb_grpc = load_protos()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_EmulatorControllerServicer_to_server(FakeEmulator(), server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    if not start_adb_and_wait(ADB, adb_server, adbd.serial):
        pytest.skip(f"the adb server did not list the fake {adbd.serial}")
    yield adb_port - 1, grpc_port
    server.stop(0)
    adbd.close()


def train(capsys, tmp_path, *args: str) -> str:
    """Run ``guiagent train --env androidworld ARGS``; assert exit code 2, one line, nothing written."""
    out = tmp_path / "run"
    rc = cli_main(["train", "--env", "androidworld", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    assert err.startswith("guiagent train: ")
    return err.strip().removeprefix("guiagent train: ")


def test_without_model_it_asks_for_one_or_demonstrations(capsys, tmp_path):
    line = train(capsys, tmp_path)
    assert line.startswith("--env androidworld needs a starting model: give --model")
    assert "--data RUN_DIR with recorded demonstrations" in line


def test_no_adb(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    line = train(capsys, tmp_path, "--model", "org/model")
    assert line.startswith("no adb client (adb is not on PATH): install Android's platform tools")


@needs_adb
def test_no_farm(capsys, tmp_path, adb_server):
    line = train(capsys, tmp_path, "--model", "org/model", "--device", "farm", str(tmp_path / "farm/endpoints.json"))
    assert line == (f"--device farm {tmp_path / 'farm/endpoints.json'}: no farm there (`guiagent farm up "
                    "--emulators N` on this host writes it, docs/android.md)")


@needs_adb
def test_no_emulator_at_the_default_address(capsys, tmp_path, adb_server):
    line = train(capsys, tmp_path, "--model", "org/model", "--device", "console_port", "5990")
    assert line.startswith("--device console_port: no emulator reachable at emulator-5990 (adb devices lists: ")


@needs_adb
def test_farm_whose_emulators_do_not_answer(capsys, tmp_path, adb_server):
    from emulators.android import farm
    path = farm.write_endpoints(farm.FarmSpec(emulators=2, console_base_port=5990, grpc_base_port=9990),
                                tmp_path / "farm" / "endpoints.json")
    line = train(capsys, tmp_path, "--model", "org/model", "--device", "farm", str(path))
    assert line.startswith(f"farm {path}: no emulator reachable at emulator-5990")


@needs_adb
def test_one_emulator_per_slot(capsys, tmp_path, emulator):
    console, grpc_port = emulator
    line = train(capsys, tmp_path, "--model", "org/model", "--pool", "inprocess", "--slots", "2",
                 "--device", "console_port", str(console), "grpc_port", str(grpc_port))
    assert line.startswith("one emulator per slot: 2 slots but 1 emulator(s) ready in --device console_port")


@needs_adb
def test_an_emulator_without_grpc(capsys, tmp_path, emulator):
    console, _ = emulator
    closed = free_port()
    line = train(capsys, tmp_path, "--model", "org/model", "--pool", "inprocess", "--slots", "1",
                 "--device", "console_port", str(console), "grpc_port", str(closed))
    assert line == (f"--device console_port: emulator-{console} has no gRPC service on 127.0.0.1:{closed} "
                    "(start it with -grpc PORT, or give --device grpc_port)")


@needs_adb
@pytest.mark.skipif(HAVE_AW, reason="android_world is installed here")
def test_everything_but_android_world_through_the_cli(tmp_path, emulator, adb_server):
    """The last missing piece, in a fresh process: the line says how to install it in its own environment."""
    console, grpc_port = emulator
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "guiagent", "train", "--env", "androidworld", "--model", "org/model",
                           "--pool", "inprocess", "--slots", "1", "--device", "console_port", str(console),
                           "grpc_port", str(grpc_port), "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, check=False, timeout=300,
                          env={**adb_server, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("guiagent train: androidworld suite needs the android_world package (not on PyPI; "
                                  "it pins its own numpy and protobuf, so give it its own environment): python3.11 "
                                  "-m venv .venv-aw")
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
    assert proc.stdout == ""
