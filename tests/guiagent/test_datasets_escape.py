"""Imports stay in the folder they are given: a Hugging Face export's ``state.json`` naming files
elsewhere, links (to anywhere), FIFOs and devices are refused in one line before anything is opened;
a killed import leaves no staging folder behind (SIGTERM, SIGHUP) or has it removed by the next
import (SIGKILL)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guiagent.datasets import import_dataset
from guiagent.datasets._common import STAGING_INFIX, STAGING_OWNER, clean_stale_staging
from guiagent.store import Store, StoreReader
from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
from tests.guiagent.test_datasets import png

pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """Two real ``export_hf_dataset`` folders of one one-step episode each (made once: ~1 s each)."""
    from guiagent.store.export import export_hf_dataset

    base = tmp_path_factory.mktemp("hf")
    out = {}
    for name, episode in (("mine", "my-episode"), ("other", "someone-elses")):
        run = base / f"run-{name}"
        with Store.open(run) as s:
            rid = s.create_run("r")
            s.write_trajectory(rid, Trajectory(episode, TaskSpec("webapps", "t", 0, "g"), (
                Step(0, Observation(png(30, 60), 30, 60), Click(0.5, 0.5)),), success=1.0))
        export_hf_dataset(run, base / name)
        out[name] = base / name
    return out


def _hf_export(exports: dict[str, Path], tmp_path: Path, name: str) -> Path:
    """A copy of one of the module's exports in ``tmp_path``."""
    shutil.copytree(exports[name], tmp_path / name)
    return tmp_path / name


def _arrow(folder: Path) -> Path:
    (name,) = [e["filename"] for e in json.loads((folder / "state.json").read_text())["_data_files"]]
    return folder / name


def _point_state_at(folder: Path, filename: str) -> None:
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"] = [{"filename": filename}]
    (folder / "state.json").write_text(json.dumps(state))


def _cli(capsys, *args):
    from guiagent.cli.data import main

    rc = main(["import", *args])
    return rc, capsys.readouterr().err.strip().splitlines()


def _nothing_written(parent: Path) -> bool:
    return not (parent / "out").exists() and not list(parent.glob(f".*{STAGING_INFIX}*"))


@pytest.mark.parametrize("case", ["dotdot", "absolute", "link_outside", "link_inside", "link_system", "system"])
def test_hf_state_json_never_leads_out_of_the_folder(exports, tmp_path, capsys, case):
    """The probe: ``_data_files`` naming ``../other/x.arrow``, an absolute path or a symlinked ``.arrow``
    imported another dataset with exit 0; a system file was opened and its first bytes printed."""
    mine = _hf_export(exports, tmp_path, "mine")
    other = _hf_export(exports, tmp_path, "other")
    own, theirs = _arrow(mine).name, _arrow(other)
    if case == "dotdot":
        _point_state_at(mine, f"../other/{theirs.name}")
    elif case == "absolute":
        _point_state_at(mine, str(theirs))
    elif case == "system":
        _point_state_at(mine, "/etc/passwd")
    else:
        target = {"link_outside": theirs, "link_system": Path("/etc/passwd"),
                  "link_inside": mine / "copy.arrow"}[case]
        if case == "link_inside":
            target.write_bytes(_arrow(mine).read_bytes())
        (mine / "linked.arrow").symlink_to(target)
        _point_state_at(mine, "linked.arrow")
    rc, lines = _cli(capsys, "--format", "hf", str(mine), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1, lines
    assert "state.json" in lines[0] and "Traceback" not in lines[0], lines
    if case.startswith("link"):
        assert "linked.arrow" in lines[0] and "is a symbolic link" in lines[0], lines
    else:
        assert "is not a file name in the folder" in lines[0], lines
    assert "metadata bytes" not in lines[0] and "root:" not in lines[0]  # nothing of a file was read
    assert _nothing_written(tmp_path)
    # the folder as exported imports
    _point_state_at(mine, own if case != "link_inside" else "copy.arrow")
    rc, lines = _cli(capsys, "--format", "hf", str(mine), "--out", str(tmp_path / "out"))
    assert rc == 0, lines
    (ep,) = StoreReader(tmp_path / "out").list_episodes().items
    assert ep.episode_id == "my-episode"


def test_a_fifo_in_place_of_the_arrow_file_is_refused_without_blocking(exports, tmp_path):
    """The probe: the import blocked forever on a FIFO in place of the ``.arrow`` file."""
    mine = _hf_export(exports, tmp_path, "mine")
    arrow = _arrow(mine)
    arrow.unlink()
    os.mkfifo(arrow)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "guiagent", "data", "import", "--format", "hf", str(mine), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "is a FIFO (named pipe), not a regular file" in lines[0], lines
    assert time.monotonic() - t0 < 30 and _nothing_written(tmp_path)


@pytest.mark.parametrize("fmt", ["uis1", "androidcontrol", "parquet", "hf", "guiodyssey"])
@pytest.mark.parametrize("what", ["fifo", "dev_null"])
def test_a_fifo_or_device_as_the_source_says_what_it_is(tmp_path, capsys, fmt, what):
    """The probe: a FIFO or /dev/null given as the source was "no such file or directory"."""
    if what == "fifo":
        src = tmp_path / "src"
        os.mkfifo(src)
        said = "is a FIFO (named pipe), not a file or folder to import"
    else:
        src = Path(os.devnull)
        said = "is a character device, not a file or folder to import"
    rc, lines = _cli(capsys, "--format", fmt, str(src), "--out", str(tmp_path / "out"))
    assert rc == 2 and lines == [f"guiagent data import: {src} {said}"], lines
    assert _nothing_written(tmp_path)


@pytest.mark.parametrize("fmt", ["uis1", "androidcontrol", "parquet"])
def test_every_importer_refuses_a_fifo_among_its_files(tmp_path, capsys, fmt):
    """One gate for every importer: a FIFO with a data file's name in the source folder is named and
    refused by its type (lstat), never opened."""
    name = {"uis1": "a.jsonl", "androidcontrol": "android_control-0", "parquet": "a.parquet"}[fmt]
    os.mkfifo(tmp_path / name)
    rc, lines = _cli(capsys, "--format", fmt, str(tmp_path), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and f"{name} is a FIFO (named pipe), not a regular file" in lines[0], lines


def test_a_link_below_the_folder_is_refused_even_to_a_folder_inside_it(tmp_path, capsys):
    """GUI-Odyssey: a ``screenshots`` folder that is a link (here to a folder inside the source) is not
    followed: every component below the folder given is checked with lstat."""
    src = tmp_path / "src"
    (src / "annotations").mkdir(parents=True)
    (src / "real").mkdir()
    (src / "real" / "s.png").write_bytes(png(90, 160))
    (src / "screenshots").symlink_to(src / "real")
    ann = {"episode_id": "e", "task_info": {"instruction": "x"},
           "steps": [{"step": 0, "screenshot": "s.png", "action": "CLICK", "info": [[500, 500]]}]}
    (src / "annotations" / "e.json").write_text(json.dumps(ann))
    rc, lines = _cli(capsys, "--format", "guiodyssey", str(src), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1, lines
    assert "lies under 'screenshots', which is a symbolic link" in lines[0], lines
    # the folder given may itself be a link: the user named it
    (src / "screenshots").unlink()
    (src / "real").rename(src / "screenshots")
    (tmp_path / "link-to-src").symlink_to(src)
    rc, lines = _cli(capsys, "--format", "guiodyssey", str(tmp_path / "link-to-src"), "--out", str(tmp_path / "out"))
    assert rc == 0, lines


# -- a killed import leaves no staging folder -------------------------------------------------------


def _big_uis1(tmp_path: Path, episodes: int = 3000) -> Path:
    src = tmp_path / "big.jsonl"
    line = json.dumps({"goal": "g", "steps": [{"action_content": {"action": "wait", "time": 1}, "screenshot": None}] * 4})
    src.write_text((line + "\n") * episodes)
    return src


def _start_import(src: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "guiagent", "data", "import", "--format", "uis1", str(src),
                             "--out", str(out), "--placeholders", "60x120"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def _wait_for_staging(parent: Path, p: subprocess.Popen) -> Path:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [d for d in parent.glob(f".*{STAGING_INFIX}*") if (d / "store.sqlite").exists()]
        if found:
            return found[0]
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.02)
    raise AssertionError("no staging folder appeared")


@pytest.mark.parametrize("sig,rc", [(signal.SIGTERM, 143), pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow),
                                    pytest.param(signal.SIGHUP, 130, marks=pytest.mark.slow)])
def test_a_signalled_import_removes_its_staging_folder(tmp_path, sig, rc):
    src = _big_uis1(tmp_path)
    p = _start_import(src, tmp_path / "out")
    _wait_for_staging(tmp_path, p)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == rc, err
    assert "Traceback" not in err and _nothing_written(tmp_path), (err, list(tmp_path.iterdir()))


def test_a_staging_folder_left_by_a_killed_import_is_removed_by_the_next(tmp_path):
    src = _big_uis1(tmp_path)
    p = _start_import(src, tmp_path / "out")
    left = _wait_for_staging(tmp_path, p)
    p.kill()
    p.wait(timeout=30)
    assert left.is_dir() and (left / STAGING_OWNER).is_file()  # SIGKILL: nothing could clean up
    # a staging folder whose owner is alive (this process) and a hidden folder of the user's stay
    live = tmp_path / f".other{STAGING_INFIX}0000"
    live.mkdir()
    from guiagent.store._proc import HOST, process_start

    (live / STAGING_OWNER).write_text(json.dumps({"host": HOST, "pid": os.getpid(), "start": process_start(os.getpid())}))
    mine = tmp_path / f".notes{STAGING_INFIX}keep"
    mine.mkdir()
    small = tmp_path / "small.jsonl"
    small.write_text(src.read_text().splitlines()[0] + "\n")
    q = subprocess.run([sys.executable, "-m", "guiagent", "data", "import", "--format", "uis1", str(small), "--out",
                        str(tmp_path / "out2"), "--placeholders", "60x120"], capture_output=True, text=True, timeout=120)
    assert q.returncode == 0, q.stderr
    assert not left.exists() and live.is_dir() and mine.is_dir()
    assert not (tmp_path / "out2" / STAGING_OWNER).exists()
    assert clean_stale_staging(tmp_path) == []


def test_import_dataset_leaves_no_owner_record_in_the_run(tmp_path):
    src = _big_uis1(tmp_path, episodes=2)
    res = import_dataset("uis1", src, tmp_path / "out", placeholders="60x120")
    assert res.episodes == 2 and sorted(p.name for p in (tmp_path / "out").iterdir()) == ["blobs", "store.sqlite"]
