"""Crash safety and concurrency of guiagent.store with real child processes.

A child writes episodes in a loop and is killed with SIGKILL (mid-episode, and
mid-way through writing a blob); two children write into one run at once.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from guiagent.store import EpisodeFilter, Store, StoreReader, blob_hash
from guiagent.store.schema import db_path
from tests.guiagent.test_store_fixtures import make_traj

ROOT = Path(__file__).resolve().parents[2]


def _spawn(run_dir: Path, run_id: str, mode: str, tag: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.guiagent.test_store_fixtures", str(run_dir), run_id,
                             mode, tag], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_line(proc: subprocess.Popen, prefix: str, timeout: float = 30.0) -> list[str]:
    """Read the child's stdout until a line starts with ``prefix``; return the lines read."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"child exited early: {proc.stderr.read()}")
        lines.append(line.strip())
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"no {prefix!r} line within {timeout} s")


def _check_intact(run_dir: Path) -> list[str]:
    """Every visible episode equals what the child meant to write; return their ids."""
    con = sqlite3.connect(f"{db_path(run_dir).as_uri()}?mode=ro", uri=True)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    reader = StoreReader(run_dir)
    ids = [s.episode_id for s in reader.iter_episodes()]
    for eid in ids:
        n = int(eid.rsplit("-", 1)[1])
        expected = make_traj(n)
        got = reader.load_trajectory(eid)
        assert got.status == "completed" and got.steps == expected.steps
        assert got.final_observation == expected.final_observation and got.metadata == expected.metadata
    reader.close()
    return ids


def _in_progress(run_dir: Path) -> list[tuple[str, int]]:
    con = sqlite3.connect(f"{db_path(run_dir).as_uri()}?mode=ro", uri=True)
    rows = con.execute("SELECT e.id, count(s.idx) FROM episodes e LEFT JOIN steps s ON s.episode_pk = e.pk "
                       "WHERE e.status = 'in_progress' GROUP BY e.pk").fetchall()
    con.close()
    return rows


def test_sigkill_mid_episode_loses_only_the_open_episode(tmp_path):
    run_dir = tmp_path / "run"
    with Store.open(run_dir) as store:
        run_id = store.create_run("crash")
    proc = _spawn(run_dir, run_id, "loop", "a")
    _wait_line(proc, "opened")
    lines = _wait_line(proc, "inside 3")  # episode 3 has two steps written, not complete
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    completed = [ln for ln in lines if ln.startswith("completed")]
    assert completed == ["completed 0", "completed 1", "completed 2"]

    ids = _check_intact(run_dir)
    assert ids == ["a-ep-000000", "a-ep-000001", "a-ep-000002"]  # no partial episode visible
    assert _in_progress(run_dir) == [("a-ep-000003", 2)]  # its steps are there, hidden

    with Store.open(run_dir) as store:  # a new writer cleans up after the dead one when it opens
        assert store.recovered == ["a-ep-000003"]
        assert store.recover(older_than=3600) == []
    reader = StoreReader(run_dir)
    s = reader.get_summary("a-ep-000003")
    assert (s.status, s.num_steps) == ("aborted", 2) and "is gone" in s.abort_reason
    assert reader.count_episodes() == 4 and reader.count_episodes(EpisodeFilter(status="completed")) == 3


def test_sigkill_mid_blob_write_leaves_no_torn_blob(tmp_path):
    run_dir = tmp_path / "run"
    with Store.open(run_dir) as store:
        run_id = store.create_run("crash")
    proc = _spawn(run_dir, run_id, "bigblob", "a")
    _wait_line(proc, "bigblob")  # the child now hashes and writes a 128 MiB blob
    deadline, tmp_seen = time.monotonic() + 20, None
    while time.monotonic() < deadline and tmp_seen is None:
        tmp_seen = next(iter((run_dir / "blobs").glob("*/.tmp-*")), None)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert tmp_seen is not None, "the child finished the blob before it could be killed mid-write"

    assert _check_intact(run_dir) == ["a-ep-000000", "a-ep-000001"]
    # No published blob is torn: every file's name is the hash of its content.
    for p in (run_dir / "blobs").glob("*/*"):
        if not p.name.startswith(".tmp-"):
            assert blob_hash(p.read_bytes()) == p.stem
    with Store.open(run_dir) as store:
        assert store.recovered == ["a-ep-000002"]  # its writer is gone
        store.recover(older_than=0)
    assert list((run_dir / "blobs").glob("*/.tmp-*")) == []  # temp files cleaned by recover


def test_two_writer_processes_share_one_run(tmp_path):
    run_dir = tmp_path / "run"
    with Store.open(run_dir) as store:
        run_id = store.create_run("concurrent")
    procs = [_spawn(run_dir, run_id, "count", tag) for tag in ("a", "b")]
    for p in procs:
        _wait_line(p, "opened")
    (run_dir / "go").touch()
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.splitlines()[-1] == "completed 39"
    reader = StoreReader(run_dir)
    assert reader.count_episodes() == 80
    for tag in ("a", "b"):
        for n in (0, 13, 39):
            got = reader.load_trajectory(f"{tag}-ep-{n:06d}")
            assert got.steps == make_traj(n, images=7).steps
    # the writers really overlapped: by start time, their episodes interleave
    order = [s.episode_id[0] for s in reader.iter_episodes()]
    assert sum(a != b for a, b in zip(order, order[1:])) >= 5, order
    step_images = {s.observation.screenshot for n in range(40) for s in make_traj(n, images=7).steps}
    finals = 40  # both children write the same 40 final screens
    assert Store.open(run_dir).blobs.count() == len(step_images) + finals
    assert list((run_dir / "blobs").glob("*/.tmp-*")) == []
