"""``guiagent judge eval`` end to end: stored episodes, a real judge server on 127.0.0.1, a JSON report."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from guiagent.store import Store
from guiagent.types import Click, Finish, Observation, Step, TaskSpec, Trajectory

ROOT = Path(__file__).resolve().parents[2]


def _png(shade: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (shade, shade, shade)).save(buf, format="PNG")
    return buf.getvalue()


def _store(run_dir: Path, outcomes: list[float]) -> list[str]:
    ids = []
    with Store.open(run_dir) as store:
        run = store.create_run("eval", env="webapps", config={"rewards": {"task": 1.0}})
        for n, success in enumerate(outcomes):
            steps = (Step(0, Observation(_png(200), 64, 48), Click(0.5, 0.5), reward=0.0),
                     Step(1, Observation(_png(40 + n), 64, 48), Finish(), reward=success,
                          reward_parts={"task": success}))
            traj = Trajectory(f"ep{n}", TaskSpec("webapps", "wifi", n, f"Turn on Wi-Fi ({n})"), steps,
                              success=success, final_observation=Observation(_png(10), 64, 48))
            ids.append(store.write_trajectory(run, traj))
    return ids


def _cli(*args: str) -> subprocess.CompletedProcess:
    from tests.judge.judge_server import API_KEY

    env = {**os.environ, "PYTHONPATH": str(ROOT), "GUIAGENT_JUDGE_KEY": API_KEY}
    return subprocess.run([sys.executable, "-m", "guiagent", "judge", "eval", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=240)


def test_judge_eval_writes_a_report_with_figures_and_disagreements(judge_server, tmp_path):
    _store(tmp_path / "runs" / "a", [1.0, 1.0, 0.0, 0.0, 1.0])
    out = tmp_path / "report.json"
    r = _cli("--runs", str(tmp_path / "runs"), "--judge-model", judge_server.url, "--served-model",
             "verdict-success", "--api-key-env", "GUIAGENT_JUDGE_KEY", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    # the judge says success everywhere: TP=3, FP=2 -> agreement .6, precision .6, recall 1, κ = 0
    c = report["calibration"]
    assert (report["episodes"], report["judged"], report["missing"]) == (5, 5, 0)
    assert (c["tp"], c["fp"], c["tn"], c["fn"]) == (3, 2, 0, 0)
    assert c["agreement"] == pytest.approx(0.6) and c["precision"] == pytest.approx(0.6)
    assert c["recall"] == 1.0 and c["kappa"] == pytest.approx(0.0)
    assert sorted(d["episode_id"] for d in report["disagreements"]) == ["ep2", "ep3"]
    d = report["disagreements"][0]
    assert d["rule_success"] == 0.0 and d["judge_success"] is True
    assert d["judge_reason"] == "the switch shows On } as asked"
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["disagreements"] == 2 and summary["report"] == str(out)


def test_a_judge_that_never_answers_fails_the_command(tmp_path):
    """No verdict at all because the server is down (connection refused): exit 1 with one line naming the
    failure, not figures of nothing with exit 0; the report is still written for the record."""
    import socket

    _store(tmp_path / "runs" / "a", [1.0, 0.0])
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "report.json"
    r = _cli("--runs", str(tmp_path / "runs"), "--judge-model", f"http://127.0.0.1:{port}/v1", "--served-model",
             "x", "--timeout", "2", "--out", str(out))
    assert r.returncode == 1, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("guiagent judge eval: no verdict on any of the 2 episodes: the judge failed on each "
                           "(2 backend; the first: backend error: "), line
    assert "Connection refused" in line and line.endswith(f"report: {out}") and r.stdout == ""
    assert json.loads(out.read_text())["missing_reasons"] == {"backend": 2}


def test_judge_eval_records_garbage_as_missing(judge_server, tmp_path):
    _store(tmp_path, [1.0, 0.0])
    r = _cli("--runs", str(tmp_path), "--judge-model", judge_server.url, "--served-model", "garbage",
             "--api-key-env", "GUIAGENT_JUDGE_KEY")
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "judge_eval.json").read_text())
    assert report["missing"] == 2 and report["missing_reasons"] == {"garbage": 2}
    assert report["calibration"]["agreement"] is None and "agreement undefined" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["--runs", "/nonexistent/runs", "--judge-model", "m"], "does not exist"),
    (["--runs", "{tmp}", "--judge-model", "m"], "no run directory"),
    (["--runs", "{tmp}"], "--judge-model is required"),
    (["--runs", "{tmp}", "--judge-model", "m", "--votes", "3"], "temperature"),
])
def test_bad_input_is_one_clear_line(tmp_path, args, message):
    r = _cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "judge_eval.json").exists()
