"""Progress bars: drawn on a real pseudo-terminal, silent on a pipe or a file."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from guiagent.progress import is_terminal, progress_bar


def _read_all(fd: int) -> str:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out.decode(errors="replace")


def test_bar_on_a_terminal_shows_count_rate_and_eta():
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a 120-column terminal
    with os.fdopen(slave, "w") as tty:
        assert is_terminal(tty)
        with progress_bar(4, "eval", "episode", stream=tty, mininterval=0) as bar:
            for _ in range(3):
                bar.update(1)
                bar.set_postfix(success="0.67")
            tty.flush()
            text = _read_all(master)  # while the bar is open: 3 of 4 done, the time left shown
    os.close(master)
    assert "eval" in text and "3/4" in text and "episode/s" in text and "success=0.67" in text
    assert "<" in text  # elapsed<remaining: the ETA


def test_silent_when_not_a_terminal():
    buf = io.StringIO()
    assert not is_terminal(buf)
    with progress_bar(4, "eval", "episode", stream=buf) as bar:
        bar.update(4)
    assert buf.getvalue() == ""


@pytest.mark.browser
def test_eval_draws_a_bar_on_a_terminal_and_keeps_stdout_json(tmp_path):
    """``guiagent eval`` with stderr on a pseudo-terminal: a bar there, the JSON line alone on stdout."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "guiagent", "eval", "--env", "webapps", "--agent", "oracle", "--tasks", "open_app",
         "--episodes", "3", "--out", str(tmp_path / "run"), "--json"],
        stdout=subprocess.PIPE, stderr=slave, text=True, env=env, cwd=repo)
    os.close(slave)
    chunks = []
    while proc.poll() is None or select.select([master], [], [], 0.1)[0]:
        if select.select([master], [], [], 0.2)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    stdout = proc.stdout.read()
    proc.wait(timeout=60)
    os.close(master)
    err = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, err[-2000:]
    assert "eval" in err and "3/3" in err and "episode/s" in err and "success=1.00" in err, err[-2000:]
    assert "success so far" not in err  # the bar replaces the periodic log lines
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 3 and summary["success_rate"] == 1.0
    assert "episode/s" not in stdout
