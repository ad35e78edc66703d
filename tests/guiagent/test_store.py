"""Writer/reader round trips, visibility rules, blobs and input errors of guiagent.store."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from guiagent.store import (
    BlobNotFound, EpisodeClosed, EpisodeFilter, EpisodeNotFound, InvalidBlobRef, RunNotFound, Store,
    StoreError, StoreReader, blob_hash, check_hash,
)
from guiagent.types import Observation, TaskSpec
from tests.guiagent.test_store_fixtures import make_traj, png_bytes


@pytest.fixture()
def store(tmp_path):
    s = Store.open(tmp_path / "run")
    yield s
    s.close()


def test_write_trajectory_round_trips_exactly(store):
    run_id = store.create_run("demo", env="guiagent/webapps.todo", algo="grpo", model="tiny",
                              config={"lr": 1e-3, "group": 4})
    trajs = [make_traj(1), make_traj(2, steps=5, success=0.0, status="aborted"), make_traj(3, steps=0)]
    for t in trajs:
        store.write_trajectory(run_id, t)
    reader = StoreReader(store.run_dir)
    for t in trajs:
        assert reader.load_trajectory(t.episode_id) == t
        no_px = reader.load_trajectory(t.episode_id, pixels=False)
        for a, b in zip(no_px.steps, t.steps):
            assert a.observation.screenshot is None
            assert a.observation.screenshot_ref == blob_hash(b.observation.screenshot)
            assert reader.read_blob(a.observation.screenshot_ref) == b.observation.screenshot
    run = reader.get_run(run_id)
    assert (run.name, run.env, run.algo, run.model, run.config) == ("demo", "guiagent/webapps.todo", "grpo",
                                                                    "tiny", {"lr": 1e-3, "group": 4})
    assert (run.num_episodes, run.num_completed, run.num_aborted, run.num_success) == (3, 2, 1, 2)


def test_episode_writer_step_by_step_matches_write_trajectory(store):
    run_id = store.create_run("r")
    t = make_traj(7, steps=5, group_id="g1", policy_version=3, reward=0.5)
    with store.begin_episode(run_id, t.task, t.agent, group_id="g1", episode_id=t.episode_id,
                             metadata={"n": 7}) as ep:
        for s in t.steps:
            ep.add_step(s)
        ep.complete(t.success, t.final_observation, metadata={"tag": "t"})
    reader = StoreReader(store.run_dir)
    assert reader.load_trajectory(t.episode_id) == t
    d = reader.get_episode(t.episode_id)
    s = d.summary
    assert (s.num_steps, s.total_reward, s.num_parse_errors) == (5, pytest.approx(2.5), 1)
    assert (s.policy_version_min, s.policy_version_max, s.group_id, s.status) == (3, 3, "g1", "completed")
    assert s.ended_at >= s.started_at
    assert d.reward_totals == {"task": pytest.approx(2.5), "format": pytest.approx(0.4)}
    assert [r.screenshot_ref for r in d.steps] == [blob_hash(x.observation.screenshot) for x in t.steps]
    assert reader.get_step(t.episode_id, 2) == d.steps[2]
    assert d.final_observation.screenshot is None and d.final_observation.screenshot_ref is not None


def test_in_progress_episodes_are_invisible_to_every_read(store):
    run_id = store.create_run("r")
    t = make_traj(1)
    ep = store.begin_episode(run_id, t.task, "model", group_id="g", episode_id="hidden")
    ep.add_step(t.steps[0])
    store.add_judgement("hidden", "vlm", 1.0)  # judgements may arrive early; still hidden
    reader = StoreReader(store.run_dir)
    assert reader.count_episodes() == 0
    assert reader.list_episodes().items == ()
    assert reader.task_ids(run_id) == () and reader.distinct("group_id", run_id) == ()
    assert reader.judges() == () and reader.get_run(run_id).num_episodes == 0
    with pytest.raises(EpisodeNotFound):
        reader.get_episode("hidden")
    with pytest.raises(EpisodeNotFound):
        reader.load_trajectory("hidden")
    ep.complete(1.0)
    assert [e.episode_id for e in reader.list_episodes().items] == ["hidden"]
    assert reader.judges(run_id) == ("vlm",)


def test_context_manager_aborts_on_exception_and_on_missing_complete(store):
    run_id = store.create_run("r")
    t = make_traj(1)
    with pytest.raises(RuntimeError, match="device gone"):
        with store.begin_episode(run_id, t.task, episode_id="e1") as ep:
            ep.add_step(t.steps[0])
            raise RuntimeError("device gone")
    with store.begin_episode(run_id, t.task, episode_id="e2") as ep:
        ep.add_step(t.steps[0])
    reader = StoreReader(store.run_dir)
    e1, e2 = reader.get_summary("e1"), reader.get_summary("e2")
    assert (e1.status, e1.abort_reason, e1.num_steps) == ("aborted", "RuntimeError: device gone", 1)
    assert e2.status == "aborted" and "without complete" in e2.abort_reason
    with pytest.raises(EpisodeClosed):
        ep.add_step(t.steps[1])
    with pytest.raises(EpisodeClosed):
        ep.complete(1.0)


def test_explicit_abort_is_visible_with_reason(store):
    run_id = store.create_run("r")
    t = make_traj(1)
    ep = store.begin_episode(run_id, t.task, episode_id="a")
    ep.add_step(t.steps[0])
    ep.abort("emulator crashed", final_observation=Observation(png_bytes(5), 48, 32))
    traj = StoreReader(store.run_dir).load_trajectory("a")
    assert (traj.status, traj.abort_reason, len(traj.steps)) == ("aborted", "emulator crashed", 1)
    assert traj.final_observation.screenshot == png_bytes(5)


def test_bad_input_raises_typed_errors_and_writes_nothing(store):
    run_id = store.create_run("r")
    t = make_traj(1)
    with pytest.raises(RunNotFound):
        store.begin_episode("nope", t.task)
    with pytest.raises(StoreError, match="metadata is not JSON"):
        store.begin_episode(run_id, t.task, metadata={"x": object()})
    with pytest.raises(StoreError, match="config is not JSON"):
        store.create_run("bad", config={"f": print})
    ep = store.begin_episode(run_id, t.task, episode_id="x")
    ep.add_step(t.steps[1])
    with pytest.raises(StoreError, match="indices must increase"):
        ep.add_step(t.steps[0])
    with pytest.raises(StoreError, match="already exists"):
        store.begin_episode(run_id, t.task, episode_id="x")
    with pytest.raises(StoreError, match="already exists"):
        store.create_run("again", run_id=run_id)
    with pytest.raises(StoreError, match="run status"):
        store.set_run_status(run_id, "exploded")
    with pytest.raises(EpisodeNotFound):
        store.add_judgement("missing", "vlm", 0.5)
    with pytest.raises(StoreError, match="no step 9"):
        store.add_judgement("x", "vlm", 0.5, step=9)
    # a step that names a blob this run does not have is refused before anything is written
    ghost = Observation(None, 48, 32, screenshot_ref="ab" * 32)
    with pytest.raises(BlobNotFound):
        store.write_trajectory(run_id, dataclasses.replace(make_traj(2), final_observation=ghost))
    with pytest.raises(StoreError, match="TaskSpec"):
        store.begin_episode(run_id, {"suite": "x"})
    reader = StoreReader(store.run_dir)
    assert reader.count_episodes() == 0 and len(reader.list_runs()) == 1


def test_blobs_are_stored_once_by_content_hash(store, tmp_path):
    img = png_bytes(1)
    ref, written = store.blobs.put(img)
    path = store.blobs.path(ref)
    assert written and ref == blob_hash(img) and path.name == f"{ref}.png" and path.parent.name == ref[:2]
    mtime = path.stat().st_mtime_ns
    assert store.blobs.put(img) == (ref, False)
    assert path.stat().st_mtime_ns == mtime  # not rewritten
    run_id = store.create_run("r")
    trajs = [make_traj(n, steps=6, images=5) for n in range(4)]  # 24 screenshots, 5 distinct
    for t in trajs:
        store.write_trajectory(run_id, t)
    distinct = {img} | {s.observation.screenshot for t in trajs for s in t.steps} | {
        t.final_observation.screenshot for t in trajs}
    assert len(distinct) == 5 + 4  # img is one of the 5 step images; 4 distinct final screens
    assert store.blobs.count() == len(distinct)
    jpeg = b"\xff\xd8\xff\xe0" + b"jpegdata"
    assert store.blobs.path(store.put_blob(jpeg)).suffix == ".jpg"
    assert StoreReader(store.run_dir).read_blob(blob_hash(jpeg)) == jpeg


@pytest.mark.parametrize("bad", [
    "../../etc/passwd", "..", "/etc/passwd", "AB" * 32, "a" * 63, "a" * 65, "a" * 63 + "/", "g" * 64,
    ("0" * 62) + "/.", "..%2f" * 10, "", None, 123, "a" * 64 + "\x00",
])
def test_blob_refs_are_validated_strictly(store, bad):
    reader = StoreReader(store.run_dir)
    with pytest.raises(InvalidBlobRef):
        check_hash(bad)
    with pytest.raises(InvalidBlobRef):
        reader.blob_path(bad)
    with pytest.raises(InvalidBlobRef):
        reader.read_blob(bad)


def test_missing_blob_is_a_typed_error(store):
    with pytest.raises(BlobNotFound):
        StoreReader(store.run_dir).read_blob("0" * 64)


def test_reader_is_read_only_and_needs_a_store(store, tmp_path):
    store.create_run("r")
    reader = StoreReader(store.run_dir)
    with pytest.raises(sqlite3.OperationalError):
        reader._con.execute("DELETE FROM runs")
    assert len(reader.list_runs()) == 1
    with pytest.raises(StoreError, match="no trajectory store"):
        StoreReader(tmp_path / "empty")


def test_judgements_metrics_and_run_status(store):
    run_id = store.create_run("r")
    store.write_trajectory(run_id, make_traj(1))
    j1 = store.add_judgement("ep-000001", "vlm", 0.9, verdict={"cited": [1, 2]}, reason="looks done")
    j2 = store.add_judgement("ep-000001", "vlm", 0.1, step=2, reason="wrong field")
    store.log_metrics(run_id, 0, {"loss": 2.0, "reward": 0.1})
    store.log_metrics(run_id, 1, {"loss": 1.5})
    store.log_metrics(run_id, 1, {"loss": 1.25})  # a resumed run repeats iteration 1: replaced
    store.set_run_status(run_id, "finished")
    with pytest.raises(RunNotFound):
        store.log_metrics("nope", 0, {"loss": 1.0})
    reader = StoreReader(store.run_dir)
    js = reader.get_episode("ep-000001").judgements
    assert [(j.judgement_id, j.step, j.score, j.reason) for j in js] == [(j1, None, 0.9, "looks done"),
                                                                         (j2, 2, 0.1, "wrong field")]
    assert js[0].verdict == {"cited": [1, 2]}
    m = reader.metrics(run_id)
    assert [(p.iteration, p.value) for p in m["loss"]] == [(0, 2.0), (1, 1.25)]
    assert reader.metric_names(run_id) == ("loss", "reward")
    assert list(reader.metrics(run_id, ["reward"])) == ["reward"]
    assert reader.get_run(run_id).status == "finished"


def test_recover_aborts_stale_in_progress_episodes(store):
    run_id = store.create_run("r")
    t = make_traj(1)
    ep = store.begin_episode(run_id, t.task, episode_id="stale")
    ep.add_step(t.steps[0])
    assert store.recover(older_than=3600) == []  # its writer (this process) is alive and recent
    assert store.recover(older_than=0) == ["stale"]
    s = StoreReader(store.run_dir).get_summary("stale")
    assert s.status == "aborted" and s.abort_reason.startswith("recovered") and s.num_steps == 1
    with pytest.raises(EpisodeClosed):  # the original writer learns it was recovered
        ep.complete(1.0)


def test_episode_filter_rejects_bad_values():
    with pytest.raises(ValueError):
        EpisodeFilter(outcome="maybe")
    with pytest.raises(ValueError, match="never visible"):
        EpisodeFilter(status="in_progress")
    with pytest.raises(ValueError):
        EpisodeFilter(min_reward=2, max_reward=1)


def test_two_handles_in_one_process_and_task_spec_params(store):
    run_id = store.create_run("r")
    other = Store.open(store.run_dir)
    spec = TaskSpec("miniwob", "click-button", 4, "Click OK", max_steps=5, params={"label": "OK"})
    with other.begin_episode(run_id, spec, "oracle") as ep:
        ep.complete(1.0)
    other.close()
    (s,) = StoreReader(store.run_dir).list_episodes().items
    assert (s.suite, s.task_id, s.seed, s.params, s.max_steps, s.num_steps) == (
        "miniwob", "click-button", 4, {"label": "OK"}, 5, 0)


def test_step_credit_round_trips_replaces_per_iteration_and_skips_foreign_episodes(store):
    run_id = store.create_run("r")
    store.write_trajectory(run_id, make_traj(1))
    n = store.add_step_credit([("ep-000001", 0, 0.5, 0.25, 0.75, {"anchor_group_size": 2}),
                               ("ep-000001", 1, -0.5, None, None, {}),
                               ("elsewhere", 0, 1.0, None, None, {})], iteration=0, algo="ppo")
    assert n == 2  # a replayed demonstration from another store is not this store's to annotate
    store.add_step_credit([("ep-000001", 0, 0.125, 0.5, 0.75, {})], iteration=0, algo="ppo")  # replaced
    store.add_step_credit([("ep-000001", 0, 0.0, 0.5, 0.75, {})], iteration=2, algo="ppo")
    with pytest.raises(StoreError):
        store.add_step_credit([("ep-000001", 0, float("nan"), None, None, {})], iteration=3, algo="ppo")
    got = StoreReader(store.run_dir).step_credit("ep-000001")
    assert [(c.index, c.iteration, c.advantage, c.value, c.ret) for c in got] == [
        (0, 0, 0.125, 0.5, 0.75), (0, 2, 0.0, 0.5, 0.75), (1, 0, -0.5, None, None)]


def test_a_store_without_the_credit_table_reads_empty_and_gets_it_on_the_next_writable_open(store):
    run_id = store.create_run("r")
    store.write_trajectory(run_id, make_traj(1))
    run_dir = store.run_dir
    store.close()
    con = sqlite3.connect(run_dir / "store.sqlite")
    con.execute("DROP TABLE step_credit")
    con.commit()
    con.close()
    assert StoreReader(run_dir).step_credit("ep-000001") == ()
    again = Store.open(run_dir)
    assert again.add_step_credit([("ep-000001", 0, 1.0, None, None, {})], iteration=0, algo="gigpo") == 1
    again.close()
