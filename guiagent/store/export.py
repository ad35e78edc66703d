"""Export a run directory to Parquet or a Hugging Face ``datasets`` Dataset.

Both produce one row per step: the episode's fields, the step's fields, and the
screenshot bytes exactly as stored (no re-encoding). Episodes with no steps
produce no rows. JSON-valued fields (action, parse_error, reward_parts, params,
metadata, step_metadata) are JSON strings, so the schema does not depend on the data.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from guiagent.store.errors import BlobDamaged, BlobNotFound
from guiagent.store.reader import StoreReader
from guiagent.store.records import EpisodeFilter, EpisodeSummary
from guiagent.store.writer import DAMAGED_PREFIX

__all__ = ["export_parquet", "export_hf_dataset", "exported_episodes", "STEP_ROW_FIELDS", "ROW_GROUP_SCREENSHOT_BYTES"]

#: a Parquet row group closes once its screenshots reach this many bytes (an import decodes a row
#: group whole: :data:`guiagent.datasets.exported.MAX_ROW_GROUP_BYTES`)
ROW_GROUP_SCREENSHOT_BYTES = 32 * 1024 * 1024

#: (name, kind) of each exported column; kinds map to Arrow and ``datasets`` types below
STEP_ROW_FIELDS: tuple[tuple[str, str], ...] = (
    ("run_id", "str"), ("episode_id", "str"), ("group_id", "str"), ("suite", "str"), ("task_id", "str"),
    ("seed", "int"), ("goal", "str"), ("max_steps", "int"), ("task_params", "str"), ("agent", "str"),
    ("episode_status", "str"),
    ("abort_reason", "str"), ("success", "float"), ("total_reward", "float"), ("num_steps", "int"),
    ("episode_metadata", "str"), ("step_index", "int"), ("screenshot", "image"), ("screenshot_ref", "str"),
    ("width", "int"), ("height", "int"), ("tree", "str"), ("url", "str"), ("last_action_error", "str"),
    ("response", "str"), ("thought", "str"), ("action", "str"), ("action_kind", "str"),
    ("parse_error", "str"), ("action_error", "str"), ("reward", "float"), ("reward_parts", "str"),
    ("milestones", "bools"), ("terminated", "bool"), ("truncated", "bool"), ("policy_version", "int"),
    ("latency_ms", "float"), ("step_metadata", "str"), ("marks", "str"),
)


def _filter(filter: EpisodeFilter | None, successful_only: bool) -> EpisodeFilter:
    f = filter or EpisodeFilter()
    return dataclasses.replace(f, outcome="success") if successful_only else f


def exported_episodes(reader: StoreReader, filter: EpisodeFilter) -> Iterator[EpisodeSummary]:
    """The episodes an export writes: the visible ones ``filter`` matches, less those ``guiagent store
    check --repair`` marked damaged (their screenshots are missing or altered on disk)."""
    for s in reader.iter_episodes(filter):
        if s.status == "aborted" and (s.abort_reason or "").startswith(DAMAGED_PREFIX):
            continue
        yield s


def iter_step_rows(run_dir: str | os.PathLike[str], filter: EpisodeFilter | None = None, *,
                   successful_only: bool = False, pixels: bool = True) -> Iterator[dict[str, Any]]:
    """One dict per step of every matching visible episode, oldest episode first."""
    reader = StoreReader(run_dir)
    try:
        for summary in exported_episodes(reader, _filter(filter, successful_only)):
            detail = reader.get_episode(summary.episode_id)
            s = detail.summary
            head = {
                "run_id": s.run_id, "episode_id": s.episode_id, "group_id": s.group_id, "suite": s.suite,
                "task_id": s.task_id, "seed": s.seed, "goal": s.goal, "max_steps": s.max_steps,
                "task_params": json.dumps(dict(s.params)),
                "agent": s.agent, "episode_status": s.status, "abort_reason": s.abort_reason,
                "success": s.success, "total_reward": s.total_reward, "num_steps": s.num_steps,
                "episode_metadata": json.dumps(dict(s.metadata)),
            }
            for st in detail.steps:
                shot = _screenshot(reader, s.episode_id, st.index, st.screenshot_ref) if pixels else None
                yield {
                    **head, "step_index": st.index, "screenshot": shot, "screenshot_ref": st.screenshot_ref,
                    "width": st.width, "height": st.height, "tree": st.tree, "url": st.url,
                    "last_action_error": st.last_action_error, "response": st.response, "thought": st.thought,
                    "action": None if st.action is None else json.dumps(st.action.to_dict()),
                    "action_kind": None if st.action is None else st.action.kind,
                    "parse_error": None if st.parse_error is None else json.dumps(st.parse_error.to_dict()),
                    "action_error": st.action_error, "reward": st.reward,
                    "reward_parts": json.dumps(dict(st.reward_parts)), "milestones": list(st.milestones),
                    "terminated": st.terminated, "truncated": st.truncated,
                    "policy_version": st.policy_version, "latency_ms": st.latency_ms,
                    "step_metadata": json.dumps(dict(st.metadata)),
                    "marks": None if st.marks is None else json.dumps([m.to_dict() for m in st.marks]),
                }
    finally:
        reader.close()


def _screenshot(reader: StoreReader, episode_id: str, index: int, ref: str | None) -> bytes | None:
    """A step's screenshot, checked against its hash; a missing or damaged blob is a
    :class:`~guiagent.store.errors.StoreError` naming the blob, the episode and the step."""
    if ref is None:
        return None
    try:
        return reader.read_blob(ref)
    except (BlobDamaged, BlobNotFound) as e:
        raise type(e)(f"episode {episode_id!r} step {index}: {e}") from None


def export_parquet(run_dir: str | os.PathLike[str], out_path: str | os.PathLike[str],
                   filter: EpisodeFilter | None = None, *, successful_only: bool = False,
                   pixels: bool = True, batch_rows: int = 256) -> int:
    """Write one Parquet row per step to ``out_path``; return the number of rows.

    ``filter`` selects episodes like the episode list does; ``successful_only``
    narrows it to successes; ``pixels=False`` leaves the screenshot column null
    (``screenshot_ref`` still names the blob). Written in row groups of ``batch_rows``
    rows or :data:`ROW_GROUP_SCREENSHOT_BYTES` of screenshots, whichever comes first, so memory stays
    flat for large runs and an import reads the file back within its bound. Every screenshot is
    checked against its hash: a missing or damaged blob fails the export naming blob, episode and step.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
             "image": pa.binary(), "bools": pa.list_(pa.bool_())}
    schema = pa.schema([(name, types[kind]) for name, kind in STEP_ROW_FIELDS])
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".tmp")
    n, batch, size = 0, [], 0
    with pq.ParquetWriter(tmp, schema) as writer:
        for row in iter_step_rows(run_dir, filter, successful_only=successful_only, pixels=pixels):
            batch.append(row)
            size += len(row["screenshot"] or b"")
            if len(batch) >= batch_rows or size >= ROW_GROUP_SCREENSHOT_BYTES:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                n, batch, size = n + len(batch), [], 0
        if batch or n == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    os.replace(tmp, out_path)  # a half-written export never sits under the final name
    return n


def export_hf_dataset(run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                      filter: EpisodeFilter | None = None, *, successful_only: bool = False) -> int:
    """Save a ``datasets.Dataset`` (one row per step) to ``out_dir``; return the number of rows.

    The ``screenshot`` column has the ``datasets.Image()`` feature and holds the
    stored bytes unchanged. Load it back with ``datasets.load_from_disk(out_dir)``.
    Needs the optional extra: ``pip install guiagent[datasets]``. An error met while reading the
    store (:class:`~guiagent.store.errors.StoreError`, ``sqlite3.DatabaseError``, ``OSError``) is
    raised as itself, as :func:`export_parquet` raises it, not wrapped by ``datasets``.
    """
    try:
        import datasets
    except ImportError as e:
        raise ImportError("export_hf_dataset needs the 'datasets' package: "
                          "pip install guiagent[datasets]") from e

    types = {"str": datasets.Value("string"), "int": datasets.Value("int64"),
             "float": datasets.Value("float64"), "bool": datasets.Value("bool"), "image": datasets.Image(),
             "bools": datasets.Sequence(datasets.Value("bool"))}
    features = datasets.Features({name: types[kind] for name, kind in STEP_ROW_FIELDS})
    run_dir = os.fspath(run_dir)  # as given: an error names the store as export_parquet's does
    f = _filter(filter, successful_only)

    raised: list[Exception] = []

    def rows() -> Iterator[dict[str, Any]]:
        try:
            for row in iter_step_rows(run_dir, f):
                shot = row["screenshot"]
                yield {**row, "screenshot": None if shot is None else {"bytes": shot, "path": None}}
        except Exception as e:  # kept: datasets wraps it in a DatasetGenerationError
            raised.append(e)
            raise

    if next(iter_step_rows(run_dir, f, pixels=False), None) is None:
        # from_generator refuses an empty split; an empty export is still a valid dataset
        # (and one explicit shard: with zero shards load_from_disk fails)
        ds = datasets.Dataset.from_dict({name: [] for name in features}, features=features)
        ds.save_to_disk(str(out_dir), num_shards=1)
        return 0
    with tempfile.TemporaryDirectory(prefix="guiagent-hf-") as cache:
        # A private cache: the generator's rows are built once here, not in ~/.cache.
        try:
            ds = datasets.Dataset.from_generator(rows, features=features, cache_dir=cache)
        except Exception:  # a DatasetGenerationError, its cause the generator's error
            if raised:  # the store's own error (a missing blob, a damaged table), as export_parquet raises it
                raise raised[0] from None
            raise
        ds.save_to_disk(str(out_dir))
        return len(ds)
