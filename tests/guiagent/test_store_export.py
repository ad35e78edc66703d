"""Parquet and Hugging Face ``datasets`` exports of a run, loaded back and compared."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest
from PIL import Image

from guiagent.store import EpisodeFilter, Store, blob_hash, export_hf_dataset, export_parquet
from guiagent.types import action_from_dict
from tests.guiagent.test_store_fixtures import make_traj


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("export") / "run"
    trajs = [make_traj(0, steps=3), make_traj(1, steps=4, success=0.0), make_traj(2, steps=2, group_id="g"),
             make_traj(3, steps=0)]
    with Store.open(run_dir) as store:
        run_id = store.create_run("export")
        for t in trajs:
            store.write_trajectory(run_id, t)
        store.begin_episode(run_id, trajs[0].task).add_step(trajs[0].steps[0])  # hidden: never exported
    return run_dir, run_id, trajs


def _expected_rows(trajs, successful_only=False):
    return [(t, s) for t in trajs if not successful_only or t.success >= 0.5 for s in t.steps]


def _check_row(row, t, s, run_id):
    assert (row["run_id"], row["episode_id"], row["step_index"]) == (run_id, t.episode_id, s.index)
    assert (row["task_id"], row["seed"], row["goal"], row["group_id"]) == (t.task.task_id, t.task.seed,
                                                                          t.task.goal, t.group_id)
    assert row["success"] == t.success and row["num_steps"] == len(t.steps)
    assert row["screenshot_ref"] == blob_hash(s.observation.screenshot)
    assert (row["width"], row["height"], row["tree"], row["url"]) == (48, 32, s.observation.tree,
                                                                      s.observation.url)
    assert row["response"] == s.response and row["reward"] == s.reward
    assert json.loads(row["reward_parts"]) == dict(s.reward_parts)
    assert (None if row["action"] is None else action_from_dict(json.loads(row["action"]))) == s.action
    assert (row["parse_error"] is None) == (s.parse_error is None)
    assert list(row["milestones"]) == list(s.milestones) and row["terminated"] == s.terminated
    assert json.loads(row["task_params"]) == dict(t.task.params)
    assert json.loads(row["episode_metadata"]) == dict(t.metadata)


@pytest.mark.parametrize("successful_only", [False, True])
def test_parquet_round_trip(run, tmp_path, successful_only):
    run_dir, run_id, trajs = run
    out = tmp_path / "steps.parquet"
    n = export_parquet(run_dir, out, successful_only=successful_only, batch_rows=4)
    rows = pq.read_table(out).to_pylist()
    want = _expected_rows(trajs, successful_only)
    assert n == len(rows) == len(want)
    for row, (t, s) in zip(rows, want):
        _check_row(row, t, s, run_id)
        assert row["screenshot"] == s.observation.screenshot  # bytes as captured, not re-encoded


def test_parquet_without_pixels_and_with_a_filter(run, tmp_path):
    run_dir, _, trajs = run
    out = tmp_path / "g.parquet"
    assert export_parquet(run_dir, out, EpisodeFilter(group_id="g"), pixels=False) == 2
    rows = pq.read_table(out).to_pylist()
    assert [r["screenshot"] for r in rows] == [None, None]
    assert [r["screenshot_ref"] for r in rows] == [blob_hash(s.observation.screenshot) for s in trajs[2].steps]
    empty = tmp_path / "none.parquet"
    assert export_parquet(run_dir, empty, EpisodeFilter(task_id="nope")) == 0
    assert pq.read_table(empty).num_rows == 0 and "screenshot" in pq.read_schema(empty).names


def test_hf_dataset_round_trip(run, tmp_path):
    datasets = pytest.importorskip("datasets")
    run_dir, run_id, trajs = run
    out = tmp_path / "hf"
    assert export_hf_dataset(run_dir, out, successful_only=True) == 5
    ds = datasets.load_from_disk(str(out))
    assert isinstance(ds.features["screenshot"], datasets.Image)
    want = _expected_rows(trajs, successful_only=True)
    img = ds[0]["screenshot"]  # decodes to PIL
    assert img.size == (48, 32)
    raw = ds.cast_column("screenshot", datasets.Image(decode=False))
    for row, (t, s) in zip(raw, want):
        _check_row(row, t, s, run_id)
        assert row["screenshot"]["bytes"] == s.observation.screenshot
        assert Image.open(io.BytesIO(row["screenshot"]["bytes"])).size == (48, 32)
    assert len(raw) == len(want)


def test_hf_dataset_with_no_matching_episode_is_empty(run, tmp_path):
    datasets = pytest.importorskip("datasets")
    run_dir, _, _ = run
    assert export_hf_dataset(run_dir, tmp_path / "hf0", EpisodeFilter(task_id="nope")) == 0
    ds = datasets.load_from_disk(str(tmp_path / "hf0"))
    assert len(ds) == 0 and isinstance(ds.features["screenshot"], datasets.Image)


def test_hf_export_without_datasets_names_the_extra(run, tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "datasets", None)  # import now fails
    with pytest.raises(ImportError, match=r"pip install guiagent\[datasets\]"):
        export_hf_dataset(run[0], tmp_path / "hf")


def _marked(t, status="completed"):
    """``t`` with a mark table on every screen (empty on the first), step metadata and a cut last step."""
    from dataclasses import replace

    from guiagent.types import Mark

    marks = (Mark(0, "button", "Send \"now\"", (0.1, 0.2, 0.3, 0.4)), Mark(3, "textbox", "", (0.0, 0.5, 1.0, 1.0)))
    steps = tuple(replace(s, observation=replace(s.observation, marks=marks if i else ()),
                          metadata={"target": {"i": i}, "patched": i % 2 == 0}, truncated=i == len(t.steps) - 1)
                  for i, s in enumerate(t.steps))
    return replace(t, steps=steps, status=status, abort_reason="device died" if status == "aborted" else None)


@pytest.mark.parametrize("kind", ["parquet", "hf"])
def test_export_import_export_gives_the_same_rows(tmp_path, kind):
    """Importing an export and exporting the imported run again changes nothing but run_id: every
    column, the mark tables included (the import dropped them: every row's marks came back null)."""
    from guiagent.datasets import import_dataset
    from guiagent.store.export import STEP_ROW_FIELDS

    if kind == "hf":
        datasets = pytest.importorskip("datasets")
    trajs = [_marked(make_traj(0, steps=3)), make_traj(1, steps=4, success=0.0, group_id="g", policy_version=2),
             _marked(make_traj(2, steps=2, success=0.5), status="aborted"), make_traj(3, steps=2, pixels=False)]
    with Store.open(tmp_path / "src") as store:
        run_id = store.create_run("src")
        for t in trajs:
            store.write_trajectory(run_id, t)

    def export(run_dir, name):
        if kind == "parquet":
            export_parquet(run_dir, tmp_path / name / "steps.parquet")
            return pq.read_table(tmp_path / name / "steps.parquet").to_pylist()
        export_hf_dataset(run_dir, tmp_path / name)
        ds = datasets.load_from_disk(str(tmp_path / name))
        return list(ds.cast_column("screenshot", datasets.Image(decode=False)))

    first = export(tmp_path / "src", "x")
    assert sum(r["marks"] is not None for r in first) == 5 and first[0]["marks"] == "[]"
    import_dataset(kind, tmp_path / "x", tmp_path / "back")
    again = export(tmp_path / "back", "x2")
    assert len(again) == len(first) == sum(len(t.steps) for t in trajs)
    names = [name for name, _ in STEP_ROW_FIELDS if name != "run_id"]
    for a, b in zip(first, again):
        assert sorted(a) == sorted(b) == sorted(name for name, _ in STEP_ROW_FIELDS)
        assert {n: a[n] for n in names} == {n: b[n] for n in names}, (a["episode_id"], a["step_index"])
        assert a["run_id"] == run_id != b["run_id"]


def test_hf_export_raises_the_store_error_not_the_datasets_wrapper(run, tmp_path):
    """A blob missing from the store: export_parquet raised BlobNotFound, export_hf_dataset the
    DatasetGenerationError datasets wraps it in (which no caller of the store's errors catches)."""
    import shutil

    from guiagent.store import StoreError

    pytest.importorskip("datasets")
    damaged = tmp_path / "damaged"
    shutil.copytree(run[0], damaged)
    ref = blob_hash(run[2][1].steps[2].observation.screenshot)
    (damaged / "blobs" / ref[:2] / f"{ref}.png").unlink()
    with pytest.raises(StoreError, match=f"no blob {ref} under {damaged}") as parquet:
        export_parquet(damaged, tmp_path / "x.parquet")
    with pytest.raises(StoreError, match=f"no blob {ref} under {damaged}") as hf:
        export_hf_dataset(damaged, tmp_path / "hf")
    assert type(hf.value) is type(parquet.value) and str(hf.value) == str(parquet.value)
