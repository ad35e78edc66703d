"""``guiagent export``: a real SQLite store exported through the command, read back with
``datasets`` and pyarrow; bad input gets one line and writes nothing."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import datasets
import pyarrow.parquet as pq
import pytest
from PIL import Image

from guiagent.cli.main import main
from guiagent.store import Store
from guiagent.types import action_from_dict
from tests.guiagent.test_store_fixtures import make_traj


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("export-cli") / "run"
    trajs = [make_traj(0, steps=3), make_traj(1, steps=4, success=0.0), make_traj(2, steps=2, group_id="g")]
    with Store.open(run_dir) as store:
        run_id = store.create_run("cli-export")
        for t in trajs:
            store.write_trajectory(run_id, t)
    return run_dir, run_id, trajs


def _run(args, capsys):
    code = main(["export", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_hf_round_trip_with_card(run, tmp_path, capsys):
    run_dir, run_id, trajs = run
    out = tmp_path / "ds"
    code, stdout, _ = _run([run_dir, "--format", "hf", "--out", out, "--json"], capsys)
    assert code == 0
    summary = json.loads(stdout.strip().splitlines()[-1])
    want = [(t, s) for t in trajs for s in t.steps]
    assert summary == {"out": str(out), "format": "hf", "rows": len(want), "episodes": 3}
    ds = datasets.load_from_disk(str(out))
    assert len(ds) == len(want) and isinstance(ds.features["screenshot"], datasets.Image)
    for row, (t, s) in zip(ds, want):
        assert (row["episode_id"], row["step_index"], row["run_id"]) == (t.episode_id, s.index, run_id)
        assert (None if row["action"] is None else action_from_dict(json.loads(row["action"]))) == s.action
        assert Image.open(io.BytesIO(s.observation.screenshot)).tobytes() == row["screenshot"].tobytes()
    card = (out / "README.md").read_text()
    assert card.startswith("---\ntags:")
    assert "- episodes: 3" in card and f"- steps (rows): {len(want)}" in card
    assert "- success rate: 66.7% (2/3" in card
    assert f"| {trajs[0].task.suite} | {trajs[0].task.task_id} |" in card
    assert "| `screenshot` | image |" in card and "| `action` | string |" in card
    assert "- agents: " in card and "episodes)" in card


def test_parquet_round_trip_successful_only(run, tmp_path, capsys):
    run_dir, _, trajs = run
    out = tmp_path / "pq"
    code, _, err = _run([run_dir, "--format", "parquet", "--out", out, "--successful-only"], capsys)
    assert code == 0 and "wrote" in err
    rows = pq.read_table(out / "steps.parquet").to_pylist()
    want = [(t, s) for t in trajs if t.success >= 0.5 for s in t.steps]
    assert [(r["episode_id"], r["step_index"]) for r in rows] == [(t.episode_id, s.index) for t, s in want]
    assert rows[0]["screenshot"] == want[0][1].observation.screenshot  # bytes as stored
    assert sorted(p.name for p in out.iterdir()) == [".guiagent-export.json", "README.md", "steps.parquet"]
    record = json.loads((out / ".guiagent-export.json").read_text())
    assert record["files"] == ["README.md", "steps.parquet"] and record["rows"] == len(rows)
    assert "success rate: 100.0%" in (out / "README.md").read_text()


@pytest.mark.parametrize("case, message", [
    ("missing_run", "no such run directory"),
    ("not_a_store", "no trajectory store"),
    ("out_not_empty", "exists and is not empty"),
    ("out_is_file", "is a file"),
    ("no_out", "--out DIR is required"),
    ("unknown_run_id", "cli-none"),
    ("nothing_matches", "no finished episodes match"),
])
def test_bad_input_one_line_nothing_written(run, tmp_path, capsys, case, message):
    run_dir, _, _ = run
    out = tmp_path / "out"
    args = [run_dir, "--format", "hf", "--out", out]
    if case == "missing_run":
        args[0] = tmp_path / "nope"
    elif case == "not_a_store":
        (tmp_path / "empty").mkdir()
        args[0] = tmp_path / "empty"
    elif case == "out_not_empty":
        out.mkdir()
        (out / "keep.txt").write_text("mine")
    elif case == "out_is_file":
        out.write_text("a file")
    elif case == "no_out":
        args = [run_dir]
    elif case == "unknown_run_id":
        args += ["--run-id", "cli-none"]
    elif case == "nothing_matches":
        args += ["--task-id", "no_such_task"]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, stdout, err = _run(args, capsys)
    assert code == 2 and stdout == ""
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written, nothing removed


def test_overwrite_replaces_an_earlier_export_and_leaves_no_temp(run, tmp_path, capsys):
    run_dir, _, _ = run
    out = tmp_path / "ds"
    assert _run([run_dir, "--format", "hf", "--out", out], capsys)[0] == 0
    assert _run([run_dir, "--format", "parquet", "--out", out, "--overwrite"], capsys)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == [".guiagent-export.json", "README.md", "steps.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
    assert _run([run_dir, "--format", "hf", "--out", out, "--overwrite"], capsys)[0] == 0  # and back
    assert len(datasets.load_from_disk(str(out))) > 0  # the record beside an hf dataset does not disturb it


def _listing(root, skip=None):
    """Every path under ``root`` with its bytes (``skip``: a folder left out, a store SQLite may touch)."""
    return sorted((str(p.relative_to(root)), p.read_bytes() if p.is_file() else b"") for p in root.rglob("*")
                  if skip is None or not p.is_relative_to(skip))


def test_overwrite_never_deletes_what_export_did_not_write(run, tmp_path, capsys):
    """`guiagent export runs/x --out runs --overwrite` deleted runs/ and every sibling run: an --out that
    contains the run is refused, and --overwrite replaces only a folder holding an earlier export
    and nothing else."""
    import shutil

    runs = tmp_path / "runs"
    shutil.copytree(run[0], runs / "x")
    shutil.copytree(run[0], runs / "y")
    before = _listing(tmp_path)
    code, _, err = _run([runs / "x", "--format", "parquet", "--out", runs, "--overwrite"], capsys)
    assert code == 2 and err.strip() == f"guiagent export: --out {runs} contains the run directory {runs / 'x'}: " \
                                       "give a folder outside it"
    mine = tmp_path / "mine"  # a folder of the user's, not an export
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    before = _listing(tmp_path)
    code, _, err = _run([runs / "x", "--format", "parquet", "--out", mine, "--overwrite"], capsys)
    assert code == 2 and "holds no .guiagent-export.json" in err and len(err.strip().splitlines()) == 1
    ex = tmp_path / "ex"  # an earlier export, with a file of the user's added since
    assert _run([runs / "x", "--format", "parquet", "--out", ex], capsys)[0] == 0
    (ex / "notes.txt").write_text("keep me too")
    before = _listing(tmp_path)
    code, _, err = _run([runs / "y", "--format", "parquet", "--out", ex, "--overwrite"], capsys)
    assert code == 2 and "did not write (notes.txt)" in err and len(err.strip().splitlines()) == 1
    assert _listing(tmp_path) == before  # nothing deleted, nothing written, no temporary folder left


def test_a_partly_damaged_store_is_one_line_and_leaves_the_earlier_export(run, tmp_path, capsys):
    """The checks read the runs and episodes tables; a damaged steps table is met only while exporting
    (sqlite3.DatabaseError): one line, exit 2, the earlier export in --out untouched."""
    import shutil
    import sqlite3

    damaged = tmp_path / "damaged"
    shutil.copytree(run[0], damaged)
    out = tmp_path / "ex"
    assert _run([damaged, "--format", "parquet", "--out", out], capsys)[0] == 0
    con = sqlite3.connect(damaged / "store.sqlite")
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    [root] = con.execute("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'steps'").fetchone()
    con.close()
    with open(damaged / "store.sqlite", "r+b") as f:  # the steps table's root page, overwritten
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)
    before = _listing(tmp_path, skip=damaged)
    code, stdout, err = _run([damaged, "--format", "parquet", "--out", out, "--overwrite"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and stdout == "" and "Traceback" not in err, err
    assert lines[-1] == f"guiagent export: {damaged}: the trajectory store is damaged (database disk image is " \
                        "malformed); nothing was written"
    assert _listing(tmp_path, skip=damaged) == before


def test_listed_by_the_dispatcher():
    out = subprocess.run([sys.executable, "-m", "guiagent", "--help"], capture_output=True, text=True, timeout=60,
                         check=True)
    assert "export" in out.stdout


def test_a_missing_blob_is_the_same_one_line_for_hf_and_parquet_and_leaves_nothing(run, tmp_path, capsys):
    """A blob deleted from the store: --format hf printed datasets' DatasetGenerationError traceback
    (the store's error was its cause), parquet one line. Both now print the same line, exit 2, and
    leave nothing behind, the folders created above --out included."""
    import shutil

    from guiagent.store import blob_hash

    damaged = tmp_path / "damaged"
    shutil.copytree(run[0], damaged)
    ref = blob_hash(run[2][1].steps[1].observation.screenshot)
    (damaged / "blobs" / ref[:2] / f"{ref}.png").unlink()
    before = _listing(tmp_path, skip=damaged)
    lines = {}
    for fmt in ("hf", "parquet"):
        code, stdout, err = _run([damaged, "--format", fmt, "--out", tmp_path / "na" / "nb" / "x"], capsys)
        assert code == 2 and stdout == "" and "Traceback" not in err, err
        lines[fmt] = err.strip().splitlines()[-1]
        assert _listing(tmp_path, skip=damaged) == before, fmt  # no temporary folder, no na/nb
    eid = run[2][1].episode_id
    assert lines["hf"] == lines["parquet"] == f"guiagent export: {damaged}: episode {eid!r} step 1: no blob {ref} " \
                                              f"under {damaged / 'blobs'}; nothing was written"


@pytest.mark.parametrize("cwd, out, message", [
    ("empty", ".", "--out . is the current folder or a folder above it"),
    ("empty", "..", "--out .. is the current folder or a folder above it"),
    ("here", "dangling", "--out dangling: dangling is a symbolic link whose target does not exist"),
    ("here", "dangling/sub", "--out dangling/sub: dangling is a symbolic link whose target does not exist"),
    ("here", "loop", "--out loop: loop is a symbolic link whose target does not exist"),
    ("here", "afile/sub", "--out afile/sub cannot be created: afile is a file, not a folder"),
    ("here", "afile/sub/deeper", "--out afile/sub/deeper cannot be created: afile is a file, not a folder"),
    ("here", "/", "--out / is the file system root"),
])
def test_out_the_export_cannot_replace_is_one_line_before_any_work(run, tmp_path, capsys, monkeypatch, cwd, out,
                                                                     message):
    """`--out .` failed with "[Errno 16] Device or resource busy" once the whole export was built, a
    dangling link with "[Errno 20] Not a directory", `afile/sub` with "[Errno 17] File exists": each
    is now one clear line, exit 2, before the export starts, and nothing is written."""
    import os

    here = tmp_path / "here"
    (here / "empty").mkdir(parents=True)
    (here / "afile").write_text("a file")
    os.symlink(tmp_path / "missing", here / "dangling")
    os.symlink("loop", here / "loop")
    monkeypatch.chdir(here if cwd == "here" else here / "empty")
    before = _listing(tmp_path)
    code, stdout, err = _run([run[0], "--format", "parquet", "--out", out], capsys)
    assert code == 2 and stdout == "" and err.startswith(f"guiagent export: {message}"), err
    assert len(err.strip().splitlines()) == 1 and "exporting" not in err and "Errno" not in err, err
    assert _listing(tmp_path) == before


def test_out_through_a_link_exports_into_its_folder_and_keeps_the_link(run, tmp_path, capsys):
    import os

    (tmp_path / "target").mkdir()
    os.symlink("target", tmp_path / "link")
    for overwrite in ([], ["--overwrite"]):
        assert _run([run[0], "--format", "parquet", "--out", tmp_path / "link", *overwrite], capsys)[0] == 0
        assert (tmp_path / "link").is_symlink() and os.readlink(tmp_path / "link") == "target"
        assert sorted(p.name for p in (tmp_path / "target").iterdir()) == [".guiagent-export.json", "README.md",
                                                                           "steps.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "target"]


@pytest.mark.parametrize("extra", ["sub", "sub/deeper", "steps.parquet.d"])
def test_overwrite_refuses_folders_the_export_did_not_write(run, tmp_path, capsys, extra):
    """`--overwrite` deleted an empty folder of the user's inside an earlier export: folders count as
    anything else the export did not write."""
    out = tmp_path / "ov"
    assert _run([run[0], "--format", "parquet", "--out", out], capsys)[0] == 0
    (out / extra).mkdir(parents=True)
    before = _listing(tmp_path)
    code, _, err = _run([run[0], "--format", "parquet", "--out", out, "--overwrite"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"holds files or folders guiagent export did not write ({extra.split('/')[0]}" in err
    assert _listing(tmp_path) == before


def test_card_size_category_is_the_hubs_bucket_for_the_row_count(run):
    """Every count from 100K up was written as 100K<n<1M; the Hub's buckets go on to n>1T."""
    from guiagent.cli.export import card, size_category
    from guiagent.store import EpisodeFilter

    bounds = [(0, "n<1K"), (999, "n<1K"), (1_000, "1K<n<10K"), (9_999, "1K<n<10K"), (10_000, "10K<n<100K"),
              (99_999, "10K<n<100K"), (100_000, "100K<n<1M"), (999_999, "100K<n<1M"), (10**6, "1M<n<10M"),
              (10**7 - 1, "1M<n<10M"), (10**7, "10M<n<100M"), (10**8, "100M<n<1B"), (10**9 - 1, "100M<n<1B"),
              (10**9, "1B<n<10B"), (10**10, "10B<n<100B"), (10**11, "100B<n<1T"), (10**12 - 1, "100B<n<1T"),
              (10**12, "n>1T"), (10**15, "n>1T")]
    assert [(n, size_category(n)) for n, _ in bounds] == bounds
    assert "size_categories:\n- 1M<n<10M\n---" in card(str(run[0]), "hf", EpisodeFilter(), 2_500_000)


def test_card_schema_table_has_a_meaning_for_every_column(run, tmp_path, capsys):
    """max_steps, step_metadata and marks had no meaning in the schema table (a blank cell)."""
    from guiagent.cli.export import COLUMN_DOCS
    from guiagent.store.export import STEP_ROW_FIELDS

    assert [name for name, _ in STEP_ROW_FIELDS if not COLUMN_DOCS.get(name)] == []
    assert _run([run[0], "--format", "parquet", "--out", tmp_path / "pq"], capsys)[0] == 0
    card = (tmp_path / "pq" / "README.md").read_text()
    table = [line for line in card.splitlines() if line.startswith("| `")]
    assert len(table) == len(STEP_ROW_FIELDS) and [line for line in table if line.endswith("|  |")] == []
    assert "| `marks` | string | the screen's numbered elements" in card and "size_categories:\n- n<1K" in card
