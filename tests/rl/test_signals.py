"""SIGINT and SIGTERM at every phase of a run: exit 130 / 143, the run stored `interrupted`, and every process
the run started (Ray's GCS, raylet, agents and workers, Playwright, Chromium) gone within seconds.

Real `guiagent train` / `guiagent eval` processes, real Ray, real Chromium. A phase is reached either by a fault
point (GUIAGENT_FAULT=<point>:term|int: the process signals itself there, guiagent/faults.py) or by a progress
line on stderr, on which the test sends the signal from outside. SIGINT goes to the whole process group, as a
terminal's Ctrl+C does (Ray's GCS and raylet run in that group); SIGTERM to the process alone, as `kill` does.
Each takes a trainer process (torch, a model, browsers): all under -m slow.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from guiagent.reaper import descendants
from guiagent.store import StoreReader

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(900)]

EXIT = {"int": 130, "term": 143}
LAST_LINE = {("train", "int"): "guiagent train: interrupted", ("train", "term"): "guiagent train: terminated (SIGTERM)",
             ("eval", "int"): "guiagent eval: interrupted", ("eval", "term"): "guiagent eval: terminated (SIGTERM)"}


def _tiny_train(tiny_model_dir, out, *extra):
    return [sys.executable, "-m", "guiagent", "train", "--model", tiny_model_dir, "--tasks", "go_home",
            "--groups-per-iteration", "1", "--group-size", "2", "--slots", "2", "--max-new-tokens", "8",
            "--eval-episodes", "0", "--iterations", "50", "--out", str(out), *extra]


def _warm_start_train(tmp_path, out, *extra):
    """A run that warm-starts (no --model): a small recipe in a config file, so that each part takes seconds."""
    cfg = tmp_path / "warm.yaml"
    cfg.write_text("env: webapps\ntasks: [go_home, open_app]\ngroups_per_iteration: 1\ngroup_size: 2\nslots: 2\n"
                   "pool: inprocess\nmax_new_tokens: 8\neval_episodes: 0\niterations: 2\nwarm_start_demos: 24\n"
                   "warm_start_steps: 400\n")
    return [sys.executable, "-m", "guiagent", "train", "--config", str(cfg), "--out", str(out), *extra]


class Watched:
    """A command run in a session of its own (SIGINT at its default, as in a terminal), its stderr read on a
    thread, and every process below it noted while it runs (pid and start time)."""

    def __init__(self, argv, fault: str | None = None):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if fault:
            env["GUIAGENT_FAULT"] = fault
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.lines: list[str] = []
        self.seen: dict[int, int] = {}
        self._stop = False
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._note, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def _note(self):
        while not self._stop and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.seen.update(descendants(self.proc.pid))
            time.sleep(0.2)

    def wait_for_line(self, prefix: str, timeout: float = 400) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(prefix) for line in self.lines):
                time.sleep(0.3)  # the phase the line announces is under way
                return
            assert self.proc.poll() is None, "\n".join(self.lines[-20:])
            time.sleep(0.1)
        raise AssertionError(f"no line {prefix!r} in {timeout} s:\n" + "\n".join(self.lines[-20:]))

    def signal(self, how: str) -> None:
        if how == "int":
            os.killpg(self.proc.pid, signal.SIGINT)  # the whole job, as a terminal's Ctrl+C
        else:
            self.proc.send_signal(signal.SIGTERM)  # the process alone, as `kill PID`

    def finish(self, timeout: float = 300) -> int:
        try:
            rc = self.proc.wait(timeout)
        finally:
            self._stop = True
        time.sleep(0.5)  # the reader thread takes the last lines
        return rc

    def orphans(self, within: float = 10.0) -> list[str]:
        """The noted processes still running (same pid and start time) after ``within`` seconds."""
        from guiagent.store._proc import process_start

        deadline = time.monotonic() + within
        while True:
            left = [p for p, start in self.seen.items() if process_start(p) == start]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        out = []
        for p in left:
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{p}/cmdline").read_bytes().replace(bytes(1), b" ")[:120]
                out.append(f"{p} {cmdline.decode(errors='replace')}")
        return out

    def kill(self):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for p in self.seen:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)


@contextlib.contextmanager
def watched(argv, fault=None):
    w = Watched(argv, fault)
    try:
        yield w
    finally:
        w.kill()


def _statuses(run_dir: Path) -> list[str]:
    return [r.status for r in StoreReader(run_dir).list_runs()]


def _check_ended(w: Watched, command: str, how: str) -> None:
    rc = w.finish()
    text = "\n".join(w.lines)
    assert rc == EXIT[how], text[-3000:]
    assert w.lines and w.lines[-1] == LAST_LINE[command, how], text[-3000:]
    assert "Traceback" not in text and "SIGTERM received" not in text and "logging.cc" not in text, text[-3000:]
    assert w.seen, "no child process was noted"
    assert w.orphans() == []


@pytest.mark.parametrize("how", ["term", "int"])
def test_a_signal_before_ray_starts(tiny_model_dir, tmp_path, how):
    """The run is recorded, the env pool (Ray) not yet started."""
    out = tmp_path / "run"
    with watched(_tiny_train(tiny_model_dir, out, "--pool", "ray"), fault=f"run_opened:{how}") as w:
        _check_ended(w, "train", how)
    assert _statuses(out) == ["interrupted"]


@pytest.mark.parametrize("how", ["term", "int"])
def test_a_signal_with_ray_up(tiny_model_dir, tmp_path, how):
    """SIGTERM once Ray was up died by SIGABRT (exit -6, a native stack dump from Ray's logging) and stored the run
    `failed`: ray.init had replaced the SIGTERM handler (SystemExit) and Ray's core worker installed a native crash
    handler for SIGTERM over it. A terminal's Ctrl+C reached Ray's GCS and raylet too (same process group)."""
    out = tmp_path / "run"
    with watched(_tiny_train(tiny_model_dir, out, "--pool", "ray"), fault=f"ray_up:{how}") as w:
        _check_ended(w, "train", how)
    assert _statuses(out) == ["interrupted"]


@pytest.mark.parametrize("how", ["term", "int"])
def test_a_signal_in_the_middle_of_a_checkpoint_write(tiny_model_dir, tmp_path, how):
    from rl.checkpoint import find_checkpoint

    out = tmp_path / "run"
    with watched(_tiny_train(tiny_model_dir, out, "--pool", "inprocess"), fault=f"checkpoint_write:{how}") as w:
        _check_ended(w, "train", how)
    assert _statuses(out) == ["interrupted"]
    assert find_checkpoint(out) is None  # the first save, torn in checkpoint.tmp: never taken for a checkpoint


@pytest.mark.parametrize("line, how", [
    ("warm start: recording", "term"),  # the oracle demonstrations, in Chromium
    ("warm start: SFT on", "int"),  # the warm start's fine-tuning
])
def test_a_signal_during_the_warm_start(tmp_path, line, how):
    out = tmp_path / "run"
    with watched(_warm_start_train(tmp_path, out)) as w:
        w.wait_for_line(line)
        w.signal(how)
        _check_ended(w, "train", how)
    assert _statuses(out) == ["interrupted"]  # the training run, recorded before its warm start
    assert set(_statuses(out / "demos")) <= {"interrupted", "finished"}


@pytest.mark.parametrize("how", ["term", "int"])
def test_a_signal_during_the_trainers_held_out_evaluation(tiny_model_dir, tmp_path, how):
    out = tmp_path / "run"
    argv = _tiny_train(tiny_model_dir, out, "--pool", "ray", "--eval-episodes", "6")
    with watched(argv) as w:
        w.wait_for_line("[1/6] success so far")
        w.signal(how)
        _check_ended(w, "train", how)
    assert _statuses(out) == ["interrupted"]
    assert _statuses(out / "eval-before") == ["interrupted"]


@pytest.mark.parametrize("how", ["term", "int"])
def test_a_signal_to_guiagent_eval_on_the_ray_pool(tmp_path, how):
    out = tmp_path / "eval"
    argv = [sys.executable, "-m", "guiagent", "eval", "--env", "webapps", "--agent", "random", "--episodes", "40",
            "--tasks", "go_home", "--pool", "ray", "--slots", "2", "--out", str(out)]
    with watched(argv, fault=f"ray_up:{how}") as w:
        _check_ended(w, "eval", how)
    assert _statuses(out) == ["interrupted"]


def test_ray_helpers_end_promptly_with_a_sigkilled_trainer(tiny_model_dir, tmp_path):
    """Ray's agents (reparented when the raylet died with the driver) waited on the dead GCS for one to two
    minutes; now the run's watchdog (guiagent/reaper.py) ends every process the run started within seconds."""
    out = tmp_path / "run"
    with watched(_tiny_train(tiny_model_dir, out, "--pool", "ray")) as w:
        w.wait_for_line("[1/50]")
        names = {Path(f"/proc/{p}/comm").read_text().strip() for p in w.seen if Path(f"/proc/{p}/comm").exists()}
        assert {"raylet", "gcs_server"} <= names and any(n.startswith("ray::") for n in names), names
        os.kill(w.proc.pid, signal.SIGKILL)
        assert w.finish() == -signal.SIGKILL
        t = time.monotonic()
        assert w.orphans(within=10.0) == []
        assert time.monotonic() - t < 10.0
