"""One owner per run folder (guiagent.runlock): a second writer is refused in one line naming the holder;
a killed owner's lock is stale and taken over with a warning. Real processes and real flock locks."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from guiagent.runlock import RunInUse, RunLock, lock_path, run_lock

HOLD = textwrap.dedent("""
    import os, sys, time
    from guiagent.runlock import RunLock
    lock = RunLock(sys.argv[1], "guiagent train --resume " + sys.argv[1]).acquire()
    if sys.argv[2] == "fork":  # a child that inherits the locked descriptor and outlives its parent
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
    print("locked", flush=True)
    time.sleep(120)
""")


@contextlib.contextmanager
def holder(folder: Path, mode: str = "plain"):
    """A real process holding ``folder``'s lock (killed at the end of the block, with what it forked)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), mode], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    with holder(run) as proc:
        with pytest.raises(RunInUse) as e:
            RunLock(run, "guiagent eval --out run").acquire()
        msg = str(e.value)
        assert f"{run} is in use by pid {proc.pid} (guiagent train --resume {run}, since " in msg
        assert "one command writes a run folder at a time" in msg and "\n" not in msg
        assert not run.exists()  # the refused writer created nothing
    # the holder ended (however): the lock is free, and the next owner takes over its record with a warning
    with run_lock(run, "guiagent eval") as lock:
        assert lock.took_over is not None and lock.took_over.pid == proc.pid
    assert not lock_path(run).exists()


def test_one_process_cannot_hold_a_folder_twice_and_release_frees_it(tmp_path):
    run = tmp_path / "runs" / "new" / "x"
    first = RunLock(run, "guiagent train").acquire()
    assert lock_path(run) == tmp_path / "runs" / "new" / ".x.guiagent-lock"
    record = json.loads(lock_path(run).read_text())
    assert record["pid"] == os.getpid() and record["command"] == "guiagent train"
    with pytest.raises(RunInUse, match=f"in use by pid {os.getpid()} "):
        RunLock(run, "guiagent eval").acquire()
    first.release()
    # a clean release deletes the lock file and the folders made to hold it: nothing is left behind
    assert not (tmp_path / "runs").exists()
    with run_lock(run, "guiagent eval") as again:
        assert again.took_over is None  # released cleanly: nothing to take over


def test_a_link_and_its_target_share_one_lock(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with run_lock(tmp_path / "real", "guiagent train"), pytest.raises(RunInUse):
        RunLock(tmp_path / "link", "guiagent eval").acquire()


def test_a_killed_owner_leaves_a_stale_lock_that_is_taken_over_with_a_warning(tmp_path, caplog):
    run = tmp_path / "run"
    with holder(run) as proc:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert lock_path(run).is_file()  # left behind by the SIGKILL, with its record
    with caplog.at_level(logging.WARNING, logger="guiagent.runlock"), run_lock(run, "guiagent train") as lock:
        assert lock.took_over.pid == proc.pid
    assert f"taking over the run folder from pid {proc.pid} (guiagent train --resume" in caplog.text


def test_a_lock_held_by_a_leftover_child_of_a_dead_owner_is_stale(tmp_path, caplog):
    """The owner died, but a child it forked kept the locked descriptor (flock stays held): the recorded
    owner's pid is gone, so the lock is stale and replaced, not a run in use for ever."""
    run = tmp_path / "run"
    with holder(run, "fork") as proc:
        os.kill(proc.pid, signal.SIGKILL)  # the owner only; its child lives on, holding the lock
        proc.wait(10)
        with caplog.at_level(logging.WARNING, logger="guiagent.runlock"), run_lock(run, "guiagent train") as lock:
            assert json.loads(lock_path(run).read_text())["pid"] == os.getpid()
            with pytest.raises(RunInUse):  # and it is a real lock again
                RunLock(run, "guiagent eval").acquire()
        assert lock.took_over is None  # a fresh file: the stale one was replaced
        assert f"held by a leftover of pid {proc.pid} " in caplog.text


def test_a_lock_path_that_is_not_a_regular_file_is_one_line(tmp_path):
    from guiagent.config import ConfigError

    os.mkfifo(tmp_path / ".run.guiagent-lock")
    with pytest.raises(ConfigError, match="is not a regular file"):
        RunLock(tmp_path / "run", "guiagent train").acquire()


@pytest.mark.parametrize("argv", [
    ["eval", "--env", "webapps", "--agent", "random", "--episodes", "1", "--out", "{run}"],
    ["data", "import", "--format", "uis1", "{src}", "--out", "{run}"],
])
def test_a_command_writing_a_run_folder_in_use_is_refused_and_writes_nothing(tmp_path, capsys, argv):
    from guiagent.cli.main import main

    run, src = tmp_path / "run", tmp_path / "episodes.jsonl"
    src.write_text("{}\n")
    with holder(run) as proc:
        assert main([a.format(run=run, src=src) for a in argv]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"guiagent {argv[0]}: {run} is in use by pid {proc.pid} (guiagent train --resume")
        assert not run.exists() and sorted(p.name for p in tmp_path.iterdir()) == [".run.guiagent-lock",
                                                                                   "episodes.jsonl"]
