"""Run discovery: one run directory, a folder of them (one or two levels deep), keys, new runs."""

from __future__ import annotations

import hashlib

import pytest

from guiagent.store import Store
from webui.registry import NotFound, RunRegistry, discover_run_dirs


def _make(run_dir, name, run_id=None):
    with Store.open(run_dir) as s:
        return s.create_run(name, run_id=run_id)


def test_discovery_depths(tmp_path):
    _make(tmp_path / "a", "a")
    _make(tmp_path / "group" / "b", "b")
    _make(tmp_path / "x" / "y" / "too-deep", "c")
    (tmp_path / ".hidden").mkdir()
    _make(tmp_path / ".hidden" / "h", "h")
    assert discover_run_dirs(tmp_path) == (tmp_path / "a", tmp_path / "group" / "b")
    assert discover_run_dirs(tmp_path / "a") == (tmp_path / "a",)  # DIR is itself a run directory
    assert discover_run_dirs(tmp_path / "a" / "blobs") == ()


def test_keys_name_directory_and_run_and_stay_stable_when_a_copy_appears(tmp_path):
    _make(tmp_path / "one", "first", run_id="same")
    _make(tmp_path / "two", "third", run_id="unique")
    reg = RunRegistry(tmp_path, ttl_s=0)
    assert reg.run("same").key == "one~same"  # a bare run id works while it is unique
    _make(tmp_path / "two", "second", run_id="same")  # a copy of run "same" appears
    _make(tmp_path / "g" / "a b", "spaced", run_id="r")
    keys = {r.key: (r.label, r.info.name) for r in reg.runs()}
    assert keys == {"one~same": ("one", "first"), "two~same": ("two", "second"), "two~unique": ("two", "third"),
                    f"g.a_b_{hashlib.sha1(b'g/a b').hexdigest()[:6]}~r": ("g/a b", "spaced")}
    assert reg.run("two~same").info.name == "second" and reg.run("unique").key == "two~unique"
    for bad in ("same", "../one", "one/../two~same", ""):
        with pytest.raises(NotFound):
            reg.run(bad)


def test_new_runs_and_directories_appear_without_restart(tmp_path):
    _make(tmp_path / "a", "a", run_id="ra")
    reg = RunRegistry(tmp_path, ttl_s=3600)
    assert [r.key for r in reg.runs()] == ["a~ra"]
    _make(tmp_path / "b", "b", run_id="rb")
    assert reg.run("rb").info.name == "b"  # an unknown key forces a re-scan


def test_missing_root_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        RunRegistry(tmp_path / "nope")


def test_registry_never_writes(tmp_path):
    _make(tmp_path / "a", "a", run_id="ra")
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "a").rglob("*") if p.is_file()}
    reg = RunRegistry(tmp_path)
    reg.run("ra")
    with pytest.raises(NotFound):
        reg.find_episode("nope")
    after = {p: p.stat().st_mtime_ns for p in (tmp_path / "a").rglob("*") if p.is_file() and p in before}
    assert after == before
