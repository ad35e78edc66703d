"""`guiagent eval --env androidworld` explains itself as `train` does: one line, exit code 2 and
nothing written for an agent that cannot act there (the oracle), no adb, no farm, fewer emulators than
slots, and android_world missing. Same stand-ins as test_train_preflight.py: the real adb client and a
private adb server, a fake emulator adbd and a fake gRPC EmulatorController."""

from __future__ import annotations

import pytest

from guiagent.cli.main import main as cli_main

from .test_train_preflight import HAVE_AW, adb_server, emulator, needs_adb  # noqa: F401 (fixtures)


def evaluate(capsys, tmp_path, *args: str) -> str:
    """Run ``guiagent eval --env androidworld ARGS``; assert exit code 2, one line, nothing written."""
    out = tmp_path / "eval"
    rc = cli_main(["eval", "--env", "androidworld", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    assert err.startswith("guiagent eval: ")
    return err.strip().removeprefix("guiagent eval: ")


def test_the_oracle_has_nothing_to_run(capsys, tmp_path):
    assert evaluate(capsys, tmp_path, "--agent", "oracle") == (
        "--env androidworld has no scripted solvers (android_world ships none), so --agent oracle has nothing to "
        "run: use --agent model --model DIR|HUB_ID|URL, or --agent random")


def test_no_adb(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    line = evaluate(capsys, tmp_path, "--agent", "random")
    assert line.startswith("no adb client (adb is not on PATH): install Android's platform tools")


@needs_adb
def test_no_farm(capsys, tmp_path, adb_server):  # noqa: F811
    path = tmp_path / "farm" / "endpoints.json"
    line = evaluate(capsys, tmp_path, "--agent", "model", "--model", "org/model", "--device", "farm", str(path))
    assert line.startswith(f"--device farm {path}: no farm there")


@needs_adb
def test_one_emulator_per_slot_and_then_android_world(capsys, tmp_path, emulator):  # noqa: F811
    console, grpc_port = emulator
    device = ["--device", "console_port", str(console), "grpc_port", str(grpc_port)]
    line = evaluate(capsys, tmp_path, "--agent", "random", "--slots", "2", *device)
    assert line.startswith("one emulator per slot: 2 slots but 1 emulator(s) ready in --device console_port")
    if HAVE_AW:
        pytest.skip("android_world is installed here")
    line = evaluate(capsys, tmp_path, "--agent", "random", "--slots", "1", *device)
    assert line.startswith("androidworld suite needs the android_world package (not on PyPI")


@pytest.mark.skipif(HAVE_AW, reason="android_world is installed here")
def test_a_mixed_oracle_eval_skips_the_emulator_checks(capsys, tmp_path, monkeypatch):
    """androidworld,webapps with the oracle runs only webapps' tasks: no adb or emulator is asked for
    (android_world missing is then the suite's own one line)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    out = tmp_path / "eval"
    rc = cli_main(["eval", "--env", "androidworld,webapps", "--agent", "oracle", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert err.startswith("guiagent eval: --env androidworld,webapps: androidworld suite needs the android_world")
