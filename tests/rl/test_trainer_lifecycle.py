"""A training run's life as a user lives it: one owner per run folder, resume to the run's own budget,
--overwrite that never deletes a user's file. Real `guiagent train` processes, real Chromium, real stores."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guiagent.runlock import lock_path
from guiagent.store import EpisodeFilter, StoreReader

pytestmark = pytest.mark.browser

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def _tiny_cfg(tiny_model_dir, out, **kw):
    from rl.trainer import TrainConfig

    base = dict(model=tiny_model_dir, tasks=("go_home",), iterations=1, groups_per_iteration=1, group_size=2,
                slots=2, pool="inprocess", max_new_tokens=8, eval_episodes=0, filter_zero_variance=False,
                out=str(out), seed=1)
    return TrainConfig.build(**{**base, **kw})


def _train(*args):
    return [sys.executable, "-m", "guiagent", "train", *args]


def _kill_group(proc):
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def _wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout} s")


def _lock_holder(run: Path) -> int | None:
    try:
        return json.loads(lock_path(run).read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def _completed(run: Path) -> int:
    reader = StoreReader(run)
    [r] = reader.list_runs()
    return reader.count_episodes(EpisodeFilter(run_id=r.run_id, status="completed"))


def _set_budget(run: Path, *, saved: int, at: int) -> None:
    """The run as one started with ``--iterations saved`` and killed after its iteration ``at`` looks on disk."""
    import dataclasses

    from rl.checkpoint import STATE_FILE, load_config, save_config
    from rl.config import TrainConfig

    save_config(run, dataclasses.replace(load_config(TrainConfig, run), iterations=saved))
    state_file = run / "checkpoint" / STATE_FILE
    raw = json.loads(state_file.read_text())
    raw["state"]["iteration"] = at
    state_file.write_text(json.dumps(raw))


def test_a_resume_takes_the_runs_saved_total_unless_iterations_is_given(tiny_model_dir, tmp_path):
    """`train --resume` alone took the class default, 8, as its total; now the run's saved one (checked here
    without training: the end-to-end run is the slow test below)."""
    import dataclasses

    from guiagent.cli.train import _gives_iterations
    from rl.checkpoint import load_config, save_config
    from rl.config import TrainConfig
    from rl.plan import resolve_run

    run = tmp_path / "run"
    run.mkdir()
    save_config(run, _tiny_cfg(tiny_model_dir, run, iterations=4))
    bare = TrainConfig.build(resume=str(run))  # what `train --resume run` parses: the class default's 8
    assert bare.iterations == 8 and not _gives_iterations(["--resume", str(run)])
    plan = resolve_run(bare, iterations_given=False)
    saved = load_config(TrainConfig, run)
    assert plan.new_total is None and plan.checkpoint is None
    assert plan.cfg == dataclasses.replace(saved, resume=str(run), out=str(run))  # the run's own config
    given = dataclasses.replace(bare, iterations=20)
    assert _gives_iterations(["--resume", str(run), "--iterations", "20"]) and _gives_iterations(["--iterations=20"])
    plan = resolve_run(given, iterations_given=True)
    assert plan.new_total == 20 and plan.cfg.iterations == 20 and plan.cfg.seed == 1
    assert load_config(TrainConfig, run).iterations == 4  # not before the resume is under way
    plan.save_total()  # by the trainer, once the checkpoint is restored
    assert load_config(TrainConfig, run).iterations == 20  # saved: a later bare resume goes on to 20
    assert load_config(TrainConfig, run).seed == 1  # the other saved settings stay the run's own
    (tmp_path / "more.yaml").write_text("iterations: 30\n")
    assert _gives_iterations(["--resume", str(run), "--config", str(tmp_path / "more.yaml")])
    (tmp_path / "other.yaml").write_text("seed: 3\n")
    assert not _gives_iterations(["--resume", str(run), f"--config={tmp_path / 'other.yaml'}"])


@pytest.mark.slow  # ~20 s on a quiet machine (98 s at load 7): three resumes of a real run
def test_resume_without_iterations_trains_to_the_runs_saved_total(tiny_model_dir, tmp_path, capsys):
    """A run started with --iterations 4 and killed after its third: `train --resume` alone trained on to the
    class default, 8 (and a run saved with 20 and killed at 12 would have stopped at once); now it goes on to
    4. An --iterations given on a resume still wins, and is saved for the next resume."""
    from guiagent.cli.main import main
    from rl.trainer import train

    run = tmp_path / "run"
    train(_tiny_cfg(tiny_model_dir, run))
    _set_budget(run, saved=4, at=3)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["iterations"] == 4
    assert "iterations: 4" in (run / "config.yaml").read_text()
    # an explicit total on a resume overrides the saved one, and a later bare resume keeps to it
    assert main(["train", "--resume", str(run), "--iterations", "5", "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["iterations"] == 5
    assert "iterations: 5" in (run / "config.yaml").read_text()
    assert main(["train", "--resume", str(run), "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["iterations"] == 5  # nothing more to do
    # the other saved settings stay the run's own
    assert "seed: 1" in (run / "config.yaml").read_text() and not lock_path(run).exists()


@pytest.mark.slow  # ~60-90 s on a quiet machine: three real trainer processes
@pytest.mark.timeout(1200)
def test_two_resumes_of_one_run_one_is_refused_and_a_killed_owner_is_taken_over(tiny_model_dir, tmp_path):
    """Two `guiagent train --resume` on one run folder both trained, both wrote checkpoint/ and model/, and
    stored their rollouts twice (42 -> 50 completed episodes). Now the second meets one line naming the
    first (exit 2, nothing written) and the episodes are the first's alone; a SIGKILLed owner's lock is
    stale: the next resume takes it over with a warning and finishes the run."""
    from rl.trainer import train

    run = tmp_path / "run"
    train(_tiny_cfg(tiny_model_dir, run))  # one iteration: 2 completed episodes
    assert _completed(run) == 2
    first = subprocess.Popen(_train("--resume", str(run), "--iterations", "3"), env=ENV, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(lambda: _lock_holder(run) == first.pid, 60, "lock taken by the first resume")
        second = subprocess.run(_train("--resume", str(run), "--iterations", "3"), env=ENV, capture_output=True,
                                text=True, timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        [line] = second.stderr.strip().splitlines()
        assert line.startswith(f"guiagent train: {run} is in use by pid {first.pid} (guiagent train --resume {run} "
                               "--iterations 3, since ")
        assert first.wait(300) == 0, first.stderr.read()[-2000:]
    finally:
        _kill_group(first)
    assert _completed(run) == 3 * 2  # each iteration's group once: not doubled
    assert not lock_path(run).exists()

    owner = subprocess.Popen(_train("--resume", str(run), "--iterations", "5"), env=ENV, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(lambda: _lock_holder(run) == owner.pid, 60, "lock taken by the resume")
        for line in owner.stderr:  # an iteration under way, then the owner is SIGKILLed (with its browser)
            if line.startswith("[4/5]"):
                break
        _kill_group(owner)
    finally:
        _kill_group(owner)
    assert lock_path(run).is_file()  # left behind, with the dead owner's record
    last = subprocess.run(_train("--resume", str(run), "--json"), env=ENV, capture_output=True, text=True, timeout=300)
    assert last.returncode == 0, last.stderr[-2000:]
    assert f"taking over the run folder from pid {owner.pid} (guiagent train --resume" in last.stderr
    assert json.loads(last.stdout.strip().splitlines()[-1])["iterations"] == 5
    reader = StoreReader(run)
    [r] = reader.list_runs()
    assert r.status == "finished" and not lock_path(run).exists()


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*")) if "store.sqlite" not in p.name}


def test_overwrite_refuses_a_run_folder_holding_a_users_file_and_deletes_nothing(tiny_model_dir, tmp_path, capsys):
    """`train --overwrite` deleted a user's file inside a folder the earlier run wrote (base/mynotes.txt) without
    a word, where `export --overwrite` refuses. Now the run records what it wrote, and --overwrite refuses
    (one line naming the file, exit 2, nothing deleted) while its folders hold anything else; a folder no
    run wrote (the user's wandb/) likewise. Once they are gone, --overwrite replaces the run."""
    from guiagent.cli.main import main
    from rl.trainer import train

    out = tmp_path / "run"
    train(_tiny_cfg(tiny_model_dir, out, iterations=0))
    (out / "model" / "mynotes.txt").write_text("mine")
    (out / "model" / "drafts").mkdir()
    (out / "notes.txt").write_text("mine, beside the run: never touched")
    before = _tree(out)
    argv = ["train", "--overwrite", "--model", tiny_model_dir, "--tasks", "go_home", "--iterations", "0",
            "--eval-episodes", "0", "--seed", "2", "--out", str(out)]
    capsys.readouterr()
    assert main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == (f"guiagent train: --out {out}: --overwrite deletes what the earlier run wrote, and its folders "
                    "hold what it did not write (model/drafts, model/mynotes.txt): nothing was deleted; move those "
                    "away, or give another --out")
    assert _tree(out) == before
    (out / "model" / "mynotes.txt").unlink()
    (out / "model" / "drafts").rmdir()
    (out / "wandb").mkdir()  # an output folder's name, but no session of the run wrote it
    (out / "wandb" / "settings").write_text("mine")
    before = _tree(out)
    assert main(argv) == 2
    assert "hold what it did not write (wandb)" in capsys.readouterr().err
    assert _tree(out) == before
    (out / "wandb" / "settings").unlink()
    (out / "wandb").rmdir()
    assert main(argv) == 0, capsys.readouterr().err
    assert "seed: 2" in (out / "config.yaml").read_text() and (out / "notes.txt").is_file()
    # the new run's own record: a store reader's -shm/-wal beside a store it wrote is not a stranger
    from rl.checkpoint import not_written

    assert not_written(out) == []


@contextlib.contextmanager
def _small_disk(path: Path, size: str):
    """A tmpfs of ``size`` at ``path``: a real file system that fills up (mounting needs root; skipped otherwise)."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(bytes(1 << 20))
                f.flush()
    return filler


@pytest.mark.slow  # ~40-60 s: a trainer filling a disk, and its resume
@pytest.mark.timeout(1200)
def test_a_full_disk_ends_the_run_in_one_line_saying_what_was_written_and_where(tiny_model_dir, tmp_path):
    """A full disk exited 2 (the code for bad input) with "[Errno 28] No space left on device" and no word of
    what was being written. Now: exit 1, one line naming the write and its path, the run stored `interrupted`,
    the store whole (SQLite's integrity check, no episode left in progress or scored from the fault), and
    once there is room again the run resumes and finishes."""
    import sqlite3

    with _small_disk(tmp_path / "disk", "80m") as disk:
        run = disk / "run"
        proc = subprocess.Popen(_train("--model", tiny_model_dir, "--tasks", "go_home", "--groups-per-iteration", "1",
                                       "--group-size", "2", "--slots", "2", "--max-new-tokens", "8", "--pool",
                                       "inprocess", "--eval-episodes", "0", "--iterations", "50", "--out", str(run)),
                                env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            lines = []
            for line in proc.stderr:
                lines.append(line.rstrip("\n"))
                if line.startswith("[1/50]"):
                    break
            filler = _fill(disk)
            lines += proc.stderr.read().splitlines()
            assert proc.wait(300) == 1, "\n".join(lines[-20:])
        finally:
            _kill_group(proc)
        last = lines[-1]
        assert last.startswith("guiagent train: no space left on the device while writing "), last
        assert f" to {run}" in last and last.endswith(": free some space, then run it again (a run: --resume)"), last
        assert "Errno" not in last and not any("Traceback" in x for x in lines)
        filler.unlink()
        with sqlite3.connect(run / "store.sqlite") as con:
            assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        reader = StoreReader(run)
        [r] = reader.list_runs()
        assert r.status == "interrupted"
        resumed = subprocess.run(_train("--resume", str(run), "--iterations", "2", "--json"), env=ENV,
                                 capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        reader = StoreReader(run)
        [r] = reader.list_runs()
        assert r.status == "finished"
        episodes = reader.list_episodes(EpisodeFilter(run_id=r.run_id), limit=1000).items
        aborted = [e for e in episodes if e.status == "aborted"]
        assert all(e.success == 0.0 for e in aborted)  # an episode the full disk cut is never scored
        assert reader.count_episodes(EpisodeFilter(run_id=r.run_id, status="completed")) >= 2 * 2


@pytest.mark.slow  # ~10-20 s: a tiny model built into a disk too small for it
def test_a_full_disk_under_a_command_with_no_word_for_the_write_names_the_file(tmp_path, capsys):
    from guiagent.cli.main import main

    with _small_disk(tmp_path / "disk", "2m") as disk:
        assert main(["model", "init", "--size", "tiny", "--out", str(disk / "m")]) == 1
        last = capsys.readouterr().err.strip().splitlines()[-1]
        # the library words it its own way (safetensors: "... (os error 28)"): exit 1 all the same, not a traceback
        assert last.startswith("guiagent model: no space left on the device while writing a file"), last


def test_torch_saves_full_disk_in_its_own_words_is_a_full_disk(tmp_path):
    """torch.save on a full disk says no errno: ``basic_ios::clear: iostream error``, then ``[enforce fail at
    inline_container.cc:...] unexpected pos ...`` (found by the fault soak: a checkpoint's optimizer state
    met the full disk and a traceback reached the user). Inside a write, on a file system with no room, it is
    the one line of a full disk; the same error where there is room passes unchanged."""
    import torch

    from guiagent.writing import NoSpace, writing

    with _small_disk(tmp_path / "disk", "24m") as disk:
        filler = _fill(disk)
        target = disk / "checkpoint.tmp"
        target.mkdir()
        with pytest.raises(NoSpace, match=r"^no space left on the device while writing the checkpoint to "):
            with writing("the checkpoint", target):
                torch.save({"optimizer": torch.zeros(1 << 18)}, target / "optim.pt")
        filler.unlink()
        (target / "optim.pt").unlink(missing_ok=True)
        with pytest.raises(RuntimeError) as got:  # room again: torch's words alone say nothing of a full disk
            with writing("the checkpoint", target):
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1152 vs 1046")
        assert not isinstance(got.value, NoSpace)
