"""Dead writers, schema migration, corrupt stores and run ids (guiagent.store).

Real SQLite files and real child processes: a writer that exits without finishing its
run, a ``guiagent eval`` killed with SIGKILL mid-episode, a version-1 store migrated in
place, and stores that are empty, truncated or not SQLite at all.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guiagent.store import Store, StoreError, StoreReader
from guiagent.store.schema import SCHEMA_VERSION, db_path
from tests.guiagent.test_store_fixtures import make_traj

ROOT = Path(__file__).resolve().parents[2]
V1_SQL = Path(__file__).with_name("store_v1.sql").read_text()


def _run_status(run_dir: Path, run_id: str) -> str:
    """The status column as stored (not as a reader reports it)."""
    con = sqlite3.connect(f"{db_path(run_dir).as_uri()}?mode=ro", uri=True)
    try:
        return con.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    finally:
        con.close()


def _child(run_dir: Path, code: str) -> None:
    """Run ``code`` in a child Python that has ``store`` open on ``run_dir``, and let it exit."""
    prog = f"from guiagent.store import Store\nstore = Store.open({str(run_dir)!r})\n{code}\n"
    subprocess.run([sys.executable, "-c", prog], cwd=ROOT, check=True, timeout=60,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_a_run_whose_writer_exited_reads_interrupted_and_open_records_it(tmp_path):
    run_dir = tmp_path / "run"
    _child(run_dir, "store.create_run('left', run_id='left')\n"
                    "store.create_run('done', run_id='done')\nstore.set_run_status('done', 'finished')\n"
                    "from tests.guiagent.test_store_fixtures import make_traj\n"
                    "w = store.begin_episode('left', make_traj(0).task, agent='x', episode_id='half')\n"
                    "w.add_step(make_traj(0).steps[0])")
    reader = StoreReader(run_dir)
    assert {r.run_id: r.status for r in reader.list_runs()} == {"left": "interrupted", "done": "finished"}
    assert _run_status(run_dir, "left") == "running"  # the reader wrote nothing
    assert reader.count_episodes() == 0  # the half episode is still hidden
    with Store.open(run_dir) as store:  # any writer that opens the store cleans up
        assert store.recovered == ["half"]
    assert _run_status(run_dir, "left") == "interrupted" and _run_status(run_dir, "done") == "finished"
    s = reader.get_summary("half")
    assert (s.status, s.num_steps) == ("aborted", 1) and "is gone" in s.abort_reason


def test_a_live_writer_is_left_alone_and_resuming_claims_the_run(tmp_path):
    run_dir = tmp_path / "run"
    with Store.open(run_dir) as mine:
        mine.create_run("live", run_id="live")
        with Store.open(run_dir) as other:
            assert other.recovered == [] and other.recover() == []
        assert StoreReader(run_dir).get_run("live").status == "running"
    _child(run_dir, "store.set_run_status('live', 'running')")  # resumed by a process that then died
    assert StoreReader(run_dir).get_run("live").status == "interrupted"
    with Store.open(run_dir) as s:
        s.set_run_status("live", "running")  # resumed again, by this live process
    assert StoreReader(run_dir).get_run("live").status == "running"


def test_a_silent_run_is_interrupted_after_the_stale_time(tmp_path):
    run_dir = tmp_path / "run"
    with Store.open(run_dir) as s:
        s.create_run("remote", run_id="remote")
    con = sqlite3.connect(db_path(run_dir))  # as if written from another host, two hours ago
    con.execute("UPDATE runs SET writer_host = 'elsewhere', heartbeat = ?", (time.time() - 7200,))
    con.commit()
    con.close()
    assert StoreReader(run_dir).get_run("remote").status == "interrupted"
    with Store.open(run_dir, recover=False) as s:
        assert s.recover(older_than=10**6) == []  # younger than the limit: left alone
    assert _run_status(run_dir, "remote") == "running"
    Store.open(run_dir).close()
    assert _run_status(run_dir, "remote") == "interrupted"


def test_killed_eval_shows_interrupted_and_its_episode_aborted(tmp_path):
    """``guiagent eval`` killed with SIGKILL mid-episode: the run reads interrupted at once,
    and the next writer to open the store aborts the half episode and records the run."""
    out = tmp_path / "eval"
    proc = subprocess.Popen([sys.executable, "-m", "guiagent", "eval", "--agent", "random", "--episodes", "40",
                             "--max-steps", "30", "--out", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        deadline, steps = time.monotonic() + 90, 0
        while time.monotonic() < deadline and steps == 0 and proc.poll() is None:
            time.sleep(0.3)
            if db_path(out).is_file():
                try:
                    con = sqlite3.connect(f"{db_path(out).as_uri()}?mode=ro", uri=True)
                    steps = con.execute("SELECT count(*) FROM steps s JOIN episodes e ON e.pk = s.episode_pk "
                                        "WHERE e.status = 'in_progress'").fetchone()[0]
                    con.close()
                except sqlite3.Error:  # schema still being created
                    pass
        assert steps > 0, proc.stderr.read1().decode() if proc.poll() is not None else "no step in 90 s"
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    run = StoreReader(out).list_runs()[0]
    assert run.status == "interrupted"  # at once, without any writer
    with Store.open(out) as store:
        assert len(store.recovered) == 1
        aborted = store.recovered[0]
    reader = StoreReader(out)
    assert _run_status(out, run.run_id) == "interrupted"
    s = reader.get_summary(aborted)
    assert s.status == "aborted" and s.num_steps >= 1 and s.abort_reason.startswith("recovered:")


def test_version_1_store_is_migrated_in_place(tmp_path):
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    con = sqlite3.connect(db_path(run_dir))
    con.executescript(V1_SQL)
    con.execute("INSERT INTO runs (id, name, status, created_at, updated_at) VALUES "
                "('r1', 'old run', 'finished', 1.0, 2.0), ('r2', 'old live', 'running', 1.0, ?)", (time.time(),))
    con.execute("INSERT INTO episodes (id, run_id, suite, task_id, seed, goal, max_steps, status, started_at, "
                "updated_at, success, total_reward, num_steps) VALUES "
                "('e1', 'r1', 'webapps', 't', 1, 'g', 5, 'completed', 1.5, 1.5, 1.0, 1.0, 0)")
    con.execute("INSERT INTO metrics VALUES ('r1', 'loss', 0, 0.5, 1.0)")
    con.execute("PRAGMA user_version = 1")
    con.commit()
    con.close()

    reader = StoreReader(run_dir)  # a reader opens an old store as it is
    assert {r.run_id: r.status for r in reader.list_runs()} == {"r1": "finished", "r2": "running"}
    with Store.open(run_dir) as s:
        rid = s.create_run("new", run_id="r3")
        s.write_trajectory(rid, make_traj(1))
        s.set_run_status("r2", "interrupted")
    con = sqlite3.connect(db_path(run_dir))
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    con.close()
    reader = StoreReader(run_dir)
    runs = {r.run_id: r for r in reader.list_runs()}
    assert runs["r1"].num_episodes == 1 and runs["r1"].name == "old run" and runs["r2"].status == "interrupted"
    assert reader.metrics("r1")["loss"][0].value == 0.5 and reader.get_summary("e1").success == 1.0
    assert runs["r3"].num_episodes == 1


@pytest.mark.parametrize("content,why", [
    (b"", "is an empty file (0 bytes), not a trajectory store"),
    (b"not a database at all, just text" * 10, "not a readable trajectory store"),
    (b"SQLite format 3\x00" + b"\x00" * 84, "not a readable trajectory store"),
    ("truncated", "not a readable trajectory store"),
])
def test_broken_stores_are_one_clear_error(tmp_path, content, why):
    run_dir = tmp_path / "run"
    if content == "truncated":
        with Store.open(run_dir) as s:
            rid = s.create_run("x")
            for n in range(30):
                s.write_trajectory(rid, make_traj(n))
        for p in (db_path(run_dir).with_name("store.sqlite-wal"), db_path(run_dir).with_name("store.sqlite-shm")):
            p.unlink(missing_ok=True)
        data = db_path(run_dir).read_bytes()
        db_path(run_dir).write_bytes(data[:4096 * 2])
    else:
        run_dir.mkdir()
        db_path(run_dir).write_bytes(content)
    with pytest.raises(StoreError):
        StoreReader(run_dir).list_runs()
    try:
        StoreReader(run_dir).list_runs()
    except StoreError as e:
        assert why in str(e) and "\n" not in str(e)
    if content != b"":  # an empty file is a store being created: a writer may create it
        with pytest.raises(StoreError, match="store"):
            Store.open(run_dir).close()


@pytest.mark.parametrize("run_id,ok", [
    ("abc", True), ("run-1.2_x", True), ("a" * 128, True), ("", False), ("a/b", False), ("..", False),
    ("a..b", False), (".hidden", False), ("-flag", False), ("a" * 129, False), ("a b", False), ("a\x00", False),
    ("é", False), (7, False),
])
def test_run_ids_are_validated(tmp_path, run_id, ok):
    with Store.open(tmp_path / "run") as s:
        if ok:
            assert s.create_run("n", run_id=run_id) == run_id
            assert StoreReader(tmp_path / "run").get_run(run_id).run_id == run_id
        else:
            with pytest.raises(StoreError, match="invalid run id"):
                s.create_run("n", run_id=run_id)


def test_regular_file_as_run_directory_is_a_store_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="cannot create the run directory"):
        Store.open(f)
    assert f.read_text() == "x"
