"""Our own exports read back: Parquet files and Hugging Face ``datasets`` folders.

The layout is :data:`guiagent.store.export.STEP_ROW_FIELDS`: one row per step, the
episode's fields repeated on each row, JSON fields as JSON text, the screenshot
bytes as stored. Rows of one episode are contiguous and in step order (the exporter
writes them so); they become the same :class:`~guiagent.types.Trajectory` (episode
id, task, steps with actions, rewards, reward parts, step metadata, mark tables and
screenshot bytes, success, status, agent, group, metadata): exporting the imported run
again gives the same rows, apart from ``run_id``. The final observation is not part
of the export and comes back as ``None``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from guiagent.datasets._common import DatasetError, check_episode_id, image_size, iter_files
from guiagent.types import Observation, ParseError, Step, TaskSpec, Trajectory, action_from_dict

__all__ = ["read_parquet", "read_hf_dataset", "trajectories_from_rows"]

_NEEDED = (
    "episode_id",
    "suite",
    "task_id",
    "seed",
    "goal",
    "step_index",
    "screenshot",
    "width",
    "height",
    "action",
    "reward",
)


def _json(text: Any, where: str, what: str, default: Any) -> Any:
    if text is None:
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError) as e:  # JSONDecodeError, over-long integers
        raise DatasetError(f"{where}: {what} is not JSON ({str(e)[:200]})") from None
    except RecursionError:
        raise DatasetError(f"{where}: {what} is JSON nested too deeply to read") from None


def _step(r: dict[str, Any], where: str) -> Step:
    shot = r["screenshot"]
    if isinstance(shot, dict):  # datasets.Image(decode=False) gives {"bytes", "path"}
        shot = shot.get("bytes")
    if shot is not None:
        if not isinstance(shot, (bytes, bytearray)):
            raise DatasetError(f"{where}: the screenshot must be image bytes, got {type(shot).__name__}")
        image_size(bytes(shot), where)  # an image, and not one that declares billions of pixels
    try:
        action = (
            None if r.get("action") is None else action_from_dict(_json(r["action"], where, "action", None))
        )
        pe = r.get("parse_error")
        obs = Observation(
            shot,
            int(r["width"]),
            int(r["height"]),
            screenshot_ref=None if shot is not None else r.get("screenshot_ref"),
            tree=r.get("tree"),
            url=r.get("url"),
            last_action_error=r.get("last_action_error"),
            # exports made before marks was a column, and screens without a mark table: None
            marks=None if r.get("marks") is None else _json(r["marks"], where, "marks", None),
        )
        return Step(
            index=int(r["step_index"]),
            observation=obs,
            action=action,
            response=r.get("response") or "",
            thought=r.get("thought") or "",
            parse_error=None if pe is None else ParseError.from_dict(_json(pe, where, "parse_error", {})),
            action_error=r.get("action_error"),
            reward=float(r["reward"]),
            reward_parts=_json(r.get("reward_parts"), where, "reward_parts", {}),
            milestones=tuple(bool(m) for m in (r.get("milestones") or ())),
            terminated=bool(r.get("terminated")),
            truncated=bool(r.get("truncated")),
            policy_version=int(r.get("policy_version") or 0),
            latency_ms=float(r.get("latency_ms") or 0.0),
            metadata=_json(r.get("step_metadata"), where, "step_metadata", {}),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(f"{where}: bad step row ({type(e).__name__}: {str(e)[:200]})") from None


def trajectories_from_rows(rows: Iterable[dict[str, Any]], source: str) -> Iterator[Trajectory]:
    """Group contiguous rows of one episode into a Trajectory each."""
    cur: list[tuple[dict[str, Any], Step]] = []
    seen: set[str] = set()

    def flush() -> Trajectory:
        try:
            return _flush()
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            if isinstance(e, DatasetError):
                raise
            raise DatasetError(f"{source}: episode {str(cur[0][0].get('episode_id'))[:80]!r}: bad episode fields "
                               f"({type(e).__name__}: {str(e)[:200]})") from None

    def _flush() -> Trajectory:
        r0 = cur[0][0]
        where = f"{source}: episode {r0['episode_id']}"
        steps = tuple(s for _, s in cur)
        if [s.index for s in steps] != list(range(len(steps))):
            raise DatasetError(f"{where}: step indices {[s.index for s in steps]} are not 0..n-1 in order")
        # exports made before max_steps was a column: the episode's length stands in
        spec = TaskSpec(
            r0["suite"],
            r0["task_id"],
            int(r0["seed"]),
            r0["goal"],
            max_steps=int(r0.get("max_steps") or max(len(steps), 1)),
            params=_json(r0.get("task_params"), where, "task_params", {}),
        )
        return Trajectory(
            r0["episode_id"],
            spec,
            steps,
            success=float(r0.get("success") or 0.0),
            status=r0.get("episode_status") or "completed",
            abort_reason=r0.get("abort_reason"),
            agent=r0.get("agent") or "",
            group_id=r0.get("group_id"),
            metadata=_json(r0.get("episode_metadata"), where, "episode_metadata", {}),
        )

    for n, r in enumerate(rows):
        where = f"{source}: row {n}"
        if not isinstance(r, dict):
            raise DatasetError(f"{where}: not a row of named columns")
        missing = [k for k in _NEEDED if k not in r]
        if missing:
            raise DatasetError(f"{where}: missing columns {missing} (not a guiagent export?)")
        check_episode_id(r["episode_id"], where)  # non-empty text, at most MAX_EPISODE_ID characters
        if cur and r["episode_id"] != cur[0][0]["episode_id"]:
            seen.add(cur[0][0]["episode_id"])
            yield flush()
            cur = []
        if r["episode_id"] in seen:
            raise DatasetError(f"{where}: episode {r['episode_id']} appears in two separate runs of rows")
        cur.append((r, _step(r, f"{where} (episode {r['episode_id']}, step {r['step_index']})")))
    if cur:
        yield flush()


def read_parquet(src: str | Path, **_: Any) -> Iterator[Trajectory]:
    """Episodes of a Parquet export (a file, or a folder of ``*.parquet``), read in batches."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = Path(src)
    if not (src.is_file() or src.is_dir()):
        raise DatasetError(f"{src}: no Parquet file")
    try:  # a folder's files: only those inside it (a link to elsewhere is refused, as every import does)
        files = list(iter_files(src, ("*.parquet",)))
    except DatasetError as e:
        raise DatasetError(f"{src}: no Parquet file") if "no files matching" in str(e) else e from None
    for path in files:
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as e:
            raise DatasetError(f"{path}: not a readable Parquet file ({e})") from None

        yield from trajectories_from_rows(_parquet_rows(pf, path), str(path))


def _parquet_rows(pf: Any, path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow as pa

    try:
        for batch in pf.iter_batches(batch_size=256):
            yield from batch.to_pylist()
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{path}: unreadable data ({e})") from None


def read_hf_dataset(src: str | Path, **_: Any) -> Iterator[Trajectory]:
    """Episodes of a ``datasets`` folder written by ``export_hf_dataset`` (``save_to_disk``)."""
    try:
        import datasets
    except ImportError as e:
        raise DatasetError(
            "reading a Hugging Face dataset needs 'datasets': pip install guiagent[datasets]"
        ) from e
    try:
        ds = datasets.load_from_disk(str(src))
    except (FileNotFoundError, ValueError, OSError) as e:
        raise DatasetError(f"{src}: not a saved Hugging Face dataset ({e})") from None
    if "screenshot" in ds.column_names:
        ds = ds.cast_column("screenshot", datasets.Image(decode=False))  # the stored bytes, not a PIL image
    yield from trajectories_from_rows(iter(ds), str(src))
