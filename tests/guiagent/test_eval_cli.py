"""`guiagent eval` end to end with every agent kind (real Chromium, real app server, real store)."""

import json
import subprocess
import sys

import pytest

from guiagent.store import EpisodeFilter, StoreReader

pytestmark = pytest.mark.browser


def _eval(*args):
    r = subprocess.run([sys.executable, "-m", "guiagent", "eval", *args, "--json"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_eval_oracle_stores_every_episode(tmp_path):
    out = _eval("--env", "webapps", "--agent", "oracle", "--episodes", "3", "--tasks", "open_app", "go_home",
                "--out", str(tmp_path))
    assert out["episodes"] == 3 and out["success_rate"] == 1.0 and out["run_dir"] == str(tmp_path)
    reader = StoreReader(tmp_path)
    assert reader.count_episodes(EpisodeFilter(run_id=out["run_id"], outcome="success")) == 3


def _eval_in_process(**kw):
    from rl.evaluate import EvalConfig, run_eval

    return run_eval(EvalConfig.build(**kw)).to_dict()


def test_eval_random_on_miniwob(tmp_path):
    out = _eval_in_process(env="guiagent/miniwob.click-button", agent="random", episodes=2, out=str(tmp_path))
    assert out["episodes"] == 2 and 0.0 <= out["success_rate"] <= 1.0
    assert set(out["per_task"]) == {"click-button"}


def test_eval_model_agent_with_the_tiny_model(tmp_path, tiny_model_dir):
    out = _eval_in_process(env="webapps", agent="model", model=tiny_model_dir, episodes=2, tasks=("open_app",),
                           max_steps=2, slots=2, out=str(tmp_path))
    assert out["episodes"] == 2 and out["aborted"] == 0
    reader = StoreReader(tmp_path)
    [ep, _] = reader.list_episodes(EpisodeFilter(run_id=out["run_id"])).items
    detail = reader.get_episode(ep.episode_id)
    # an untrained model's replies are stored raw, with their parse errors as data
    assert all(s.response for s in detail.steps)


@pytest.mark.slow  # ~10 s: kept out of the default suite's 12-minute budget
def test_eval_at_temperature_can_redraw_unparseable_replies(tmp_path, tiny_model_dir):
    out = _eval_in_process(env="webapps", agent="model", model=tiny_model_dir, episodes=2, tasks=("open_app",),
                           max_steps=2, slots=2, temperature=1.0, resample_unparseable=2, out=str(tmp_path))
    assert out["episodes"] == 2 and out["aborted"] == 0
    reader = StoreReader(tmp_path)
    steps = [s for e in reader.list_episodes(EpisodeFilter(run_id=out["run_id"])).items
             for s in reader.get_episode(e.episode_id).steps]
    # an untrained model at temperature 1: replies were set aside, at most two a step
    assert any(s.metadata.get("rejected_replies") for s in steps)
    assert all(len(s.metadata.get("rejected_replies", ())) <= 2 for s in steps)


def test_eval_rejects_a_negative_redraw_budget():
    from rl.evaluate import EvalConfig

    with pytest.raises(ValueError, match="resample-unparseable must be >= 0"):
        EvalConfig.build(agent="model", model="m", resample_unparseable=-1)


def _run_status(out):
    [run] = StoreReader(out).list_runs()
    return run.status


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_stores_the_eval_as_interrupted_not_failed(tmp_path, sig):
    """SIGINT (Ctrl+C) mid-run: exit 130, "interrupted" on stderr, and the stored run `interrupted`
    (it was `failed`, as if the eval had crashed). SIGTERM (kill, a container stopping) likewise, exit 143
    (it killed the process at once and the stored run stayed `running`)."""
    import signal
    import sqlite3
    import time

    out = tmp_path / "eval"
    argv = ["eval", "--agent", "random", "--episodes", "40", "--max-steps", "30", "--out", str(out)]
    # SIGINT as a terminal delivers it, whatever the test runner's own disposition (a job started in the
    # background of a non-interactive shell ignores SIGINT, and a child would inherit that)
    proc = subprocess.Popen([sys.executable, "-m", "guiagent", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline, steps = time.monotonic() + 90, 0
        while time.monotonic() < deadline and steps == 0 and proc.poll() is None:
            time.sleep(0.3)
            try:
                con = sqlite3.connect(f"{(out / 'store.sqlite').as_uri()}?mode=ro", uri=True)
                steps = con.execute("SELECT count(*) FROM steps").fetchone()[0]
                con.close()
            except sqlite3.Error:  # no store yet, or its schema still being created
                pass
        assert steps > 0, "no step in 90 s"
        proc.send_signal(getattr(signal, sig))
        assert proc.wait(60) == (130 if sig == "SIGINT" else 143)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.stderr.read().strip().splitlines()[-1] == ("guiagent eval: interrupted" if sig == "SIGINT" else
                                                           "guiagent eval: terminated (SIGTERM)")
    assert _run_status(out) == "interrupted"


def test_a_browser_that_cannot_start_fails_the_eval_in_one_line(tmp_path):
    """A --device chromium_path that is an executable but no browser: every slot fails to launch it. The
    eval reported "success 0.0% over 2 episodes (2 aborted)" with exit 0; now it fails (exit 1) with one
    last line that says why, no figures on stdout, and the stored run is `failed`."""
    import shutil

    not_a_browser = shutil.which("true")
    argv = ["eval", "--episodes", "2", "--slots", "2", "--device", "chromium_path", not_a_browser, "--out",
            str(tmp_path), "--json"]
    r = subprocess.run([sys.executable, "-m", "guiagent", *argv], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr[-3000:]
    assert r.stdout == ""
    assert r.stderr.strip().splitlines()[-1].startswith(
        "guiagent eval: no episode could start: all 2 failed at their reset (")
    assert _run_status(tmp_path) == "failed"
    # the slots' failures above it are a line each: no traceback, not Playwright's launch log
    assert "Traceback" not in r.stderr and "<launching>" not in r.stderr, r.stderr[-3000:]
    assert all(len(line) < 400 for line in r.stderr.splitlines()), r.stderr[-3000:]


def test_progress_lines_show_an_exception_in_one_line(capsys, monkeypatch):
    import logging

    from guiagent.logs import PACKAGES, show_progress

    loggers = [logging.getLogger(n) for n in PACKAGES]
    saved = [(lg.level, list(lg.handlers), lg.propagate) for lg in loggers]
    log = logging.getLogger("emulators.some_module")
    try:
        show_progress()
        try:
            raise ValueError("the page went away\nsecond line")
        except ValueError:
            log.exception("slot %d failed", 3)
        assert capsys.readouterr().err == "slot 3 failed: ValueError: the page went away\n"
        monkeypatch.setenv("GUIAGENT_TRACEBACKS", "1")
        try:
            raise ValueError("again")
        except ValueError:
            log.exception("slot %d failed", 4)
        err = capsys.readouterr().err
        assert err.startswith("slot 4 failed\nTraceback (most recent call last):") and "ValueError: again" in err
    finally:  # the project's loggers as they were (caplog in other tests listens at the root)
        for lg, (level, handlers, propagate) in zip(loggers, saved):
            lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.propagate = propagate
