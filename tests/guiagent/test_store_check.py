"""``guiagent store check RUN`` and the blob hash checks under the readers: each kind of damage is
made on a real store (files cut, swapped, deleted, planted; a writer killed mid-episode; an index page
scrambled), reported, and repaired where it can be; an export and the web UI never pass a damaged
blob on as the screenshot."""

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from guiagent.store import BlobDamaged, Store, StoreReader
from guiagent.store.check import check_store
from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
from tests.guiagent.test_datasets_hostile import noisy_png


def _run(tmp_path, episodes=2):
    run = tmp_path / "run"
    with Store.open(run) as s:
        rid = s.create_run("r", run_id="r")
        for e in range(episodes):
            s.write_trajectory(rid, Trajectory(f"ep{e}", TaskSpec("webapps", "t", e, "g"), tuple(
                Step(i, Observation(noisy_png(seed=10 * e + i), 60, 120), Click(0.5, 0.5), reward=1.0)
                for i in range(2)), success=1.0, final_observation=Observation(noisy_png(seed=99 + e), 60, 120)))
        s.set_run_status(rid, "finished")
    return run


def _blob(run, episode="ep0", step=0):
    with StoreReader(run) as r:
        ref = r.get_step(episode, step).screenshot_ref
        return ref, r.blob_path(ref)


def _cli(*args):
    from guiagent.cli.main import main

    return main(["store", "check", *args])


def _kinds(report):
    return sorted(f.kind for f in report.findings)


def test_a_clean_store_is_clean(tmp_path, capsys):
    run = _run(tmp_path)
    report = check_store(run)
    assert report.clean and report.findings == [] and (report.episodes, report.steps, report.blobs) == (2, 4, 6)
    assert _cli(str(run)) == 0
    out = capsys.readouterr().out
    assert "2 episodes, 4 steps, 6 blobs checked" in out and out.strip().endswith("clean")
    assert _cli(str(run), "--json") == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["clean"] is True


@pytest.mark.parametrize("damage,kind", [("truncate", "truncated_blob"), ("swap", "replaced_blob"),
                                         ("delete", "missing_blob")])
def test_a_damaged_blob_is_reported_then_its_episode_marked_damaged(tmp_path, capsys, damage, kind):
    run = _run(tmp_path)
    ref, path = _blob(run)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "swap":
        path.write_bytes(_blob(run, "ep1", 1)[1].read_bytes())
    else:
        path.unlink()
    report = check_store(run)
    assert _kinds(report) == [kind] and not report.clean
    (f,) = report.findings
    assert f.name == ref and f.episodes == ("ep0",) and "'ep0' (step 0)" in f.detail
    assert _cli(str(run)) == 1
    out = capsys.readouterr().out
    assert f"problem: {kind.replace('_', ' ')} {ref}" in out and "1 problem found" in out
    # --repair: the episode is marked, nothing is deleted; a later check is clean
    assert _cli(str(run), "--repair") == 1
    assert "marked damaged: 1 episode(s)" in capsys.readouterr().out
    with StoreReader(run) as r:
        s = r.get_summary("ep0")
        assert s.status == "aborted" and s.abort_reason.startswith("damaged: 1 screenshot blob")
        assert s.success == 0.0 and s.metadata["damaged"]["status"] == "completed"
        assert s.metadata["damaged"]["success"] == 1.0 and s.metadata["damaged"]["blobs"] == [ref]
        assert r.get_summary("ep1").status == "completed" and len(r.get_episode("ep0").steps) == 2
    again = check_store(run)
    assert again.clean and _kinds(again) == ["damaged_episode"]
    assert _cli(str(run)) == 0


def test_reads_check_every_blob_against_its_hash(tmp_path):
    run = _run(tmp_path)
    ref, path = _blob(run)
    path.write_bytes(path.read_bytes()[:-100])
    with StoreReader(run) as r, pytest.raises(BlobDamaged, match=f"screenshot blob {ref} is damaged.*truncated"):
        r.load_trajectory("ep0")


def test_orphans_and_temp_files_are_notes_and_old_temp_files_are_removed(tmp_path, capsys):
    run = _run(tmp_path)
    with Store.open(run) as s:
        orphan = s.put_blob(noisy_png(seed=500))  # a writer killed between the screenshot and its step
    shard = run / "blobs" / orphan[:2]
    old_tmp, new_tmp = shard / ".tmp-old", shard / ".tmp-new"
    old_tmp.write_bytes(b"half")
    new_tmp.write_bytes(b"half")
    os.utime(old_tmp, (time.time() - 3600, time.time() - 3600))
    report = check_store(run)
    assert report.clean and _kinds(report) == ["orphan_blob", "temp_file", "temp_file"]
    assert _cli(str(run), "--repair") == 0
    assert not old_tmp.exists() and new_tmp.exists() and (shard / f"{orphan}.png").exists()  # blobs are kept
    assert "temp file blobs/" in capsys.readouterr().out


def test_an_episode_left_open_by_a_killed_writer_is_reported_and_closed(tmp_path, capsys):
    run = _run(tmp_path)
    code = ("import os\nfrom guiagent.store import Store\nfrom guiagent.types import *\n"
            "from tests.guiagent.test_datasets_hostile import noisy_png\n"
            f"s = Store.open({str(run)!r})\n"
            "ep = s.begin_episode('r', TaskSpec('webapps', 't', 9, 'g'), episode_id='open')\n"
            "ep.add_step(Step(0, Observation(noisy_png(seed=7), 60, 120), Click(0.5, 0.5)))\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=os.getcwd())
    report = check_store(run)
    assert _kinds(report) == ["open_episode"] and "writer process" in report.findings[0].detail
    assert _cli(str(run), "--repair") == 1
    assert "-> closed (aborted)" in capsys.readouterr().out
    with StoreReader(run) as r:
        assert r.get_summary("open").status == "aborted"
    assert check_store(run).clean


def test_sqlites_own_check_is_reported(tmp_path, capsys):
    run = _run(tmp_path, episodes=30)
    con = sqlite3.connect(run / "store.sqlite")  # an index forgotten by the schema: its pages are never used
    con.execute("PRAGMA writable_schema = ON")
    con.execute("DELETE FROM sqlite_master WHERE name = 'episodes_run_started'")
    con.commit()
    con.close()
    report = check_store(run)
    assert _kinds(report) == ["integrity"] and "is never used" in report.findings[0].detail
    assert _cli(str(run)) == 1
    assert "SQLite integrity: *** in database main *** Page" in capsys.readouterr().out


def test_a_store_sqlite_cannot_read_is_a_problem_found(tmp_path, capsys):
    run = _run(tmp_path, episodes=30)
    con = sqlite3.connect(run / "store.sqlite")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'episodes_run_started'").fetchone()[0]
    page = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(run / "store.sqlite", "r+b") as f:  # scramble the cells of one index page
        f.seek((root - 1) * page + page // 2)
        f.write(bytes(range(256)) * (page // 2 // 256))
    report = check_store(run)
    assert _kinds(report) == ["unreadable"] and "malformed" in report.findings[0].detail
    assert _cli(str(run)) == 1 and "problem: unreadable" in capsys.readouterr().out


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert _cli(str(tmp_path / "nothing")) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "store.sqlite").write_bytes(b"")
    assert _cli(str(tmp_path / "empty")) == 1  # a store file that holds nothing: a problem found
    assert "an empty file (0 bytes)" in capsys.readouterr().out


# -- an export never passes a damaged blob on ----------------------------------------------------


@pytest.mark.parametrize("fmt", ["parquet", "hf"])
def test_an_export_with_a_damaged_blob_fails_naming_blob_and_episode(tmp_path, capsys, fmt):
    if fmt == "hf":
        pytest.importorskip("datasets")
    from guiagent.cli.export import main as export_main

    run = _run(tmp_path)
    ref, path = _blob(run, "ep1", 1)
    path.write_bytes(path.read_bytes()[:-50])
    capsys.readouterr()
    rc = export_main([str(run), "--format", fmt, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    lines = [ln for ln in err if ln.startswith("guiagent export:") and "exporting" not in ln]
    assert rc == 2 and len(lines) == 1, err
    assert f"episode 'ep1' step 1: screenshot blob {ref} is damaged" in lines[0] and "truncated" in lines[0], lines
    assert not (tmp_path / "out").exists()


# -- the web UI serves no damaged blob, and caches none ---------------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "swap"])
def test_the_web_ui_never_serves_a_damaged_blob_as_immutable(tmp_path, damage):
    from webui import AppConfig, create_app

    run = _run(tmp_path)
    ref, path = _blob(run)
    good_ref, good_path = _blob(run, "ep1", 0)
    client = create_app(AppConfig(runs=run, rescan_s=0)).test_client()
    ok = client.get(f"/img/r/{good_ref}")
    assert ok.status_code == 200 and ok.headers["ETag"] == f'"{good_ref}"' and "immutable" in ok.headers["Cache-Control"]
    assert ok.data == good_path.read_bytes()
    path.write_bytes(path.read_bytes()[:-100] if damage == "truncate" else good_path.read_bytes())
    r = client.get(f"/img/r/{ref}")
    assert r.status_code >= 500 and "ETag" not in r.headers and r.headers["Cache-Control"] == "no-store"
    assert ref in r.get_data(as_text=True) and "damaged" in r.get_data(as_text=True)
    r = client.get(f"/img/r/{ref}", headers={"If-None-Match": f'"{ref}"'})  # no 304 for a damaged blob either
    assert r.status_code >= 500 and "ETag" not in r.headers


def test_after_a_repair_an_export_leaves_the_damaged_episode_out(tmp_path, capsys):
    import pyarrow.parquet as pq

    from guiagent.cli.export import main as export_main

    run = _run(tmp_path)
    _, path = _blob(run, "ep1", 1)
    path.unlink()
    assert export_main([str(run), "--format", "parquet", "--out", str(tmp_path / "a")]) == 2
    assert _cli(str(run), "--repair") == 1
    capsys.readouterr()
    assert export_main([str(run), "--format", "parquet", "--out", str(tmp_path / "b"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["episodes"] == 1
    assert set(pq.read_table(tmp_path / "b" / "steps.parquet").column("episode_id").to_pylist()) == {"ep0"}
    assert "- episodes: 1" in (tmp_path / "b" / "README.md").read_text()
