"""Our own exports read back: Parquet files and Hugging Face ``datasets`` folders.

The layout is :data:`guiagent.store.export.STEP_ROW_FIELDS`: one row per step, the
episode's fields repeated on each row, JSON fields as JSON text, the screenshot
bytes as stored. Rows of one episode are contiguous and in step order (the exporter
writes them so); they become the same :class:`~guiagent.types.Trajectory` (episode
id, task, steps with actions, rewards, reward parts, step metadata, mark tables and
screenshot bytes, success, status, agent, group, metadata): exporting the imported run
again gives the same rows, apart from ``run_id``. The final observation is not part
of the export and comes back as ``None``.

Every value is checked where it is read, and a bad one is one line naming the file and row: a reward,
latency or reward part that is not a finite number, a success outside [0, 1], a width or height
outside 1..65535, an integer outside 64 bits, a step or episode metadata (or task parameters, reward
parts) that is not a JSON object, an episode status other than ``completed`` or ``aborted``, a row
whose screenshot is missing though it names a stored one (an export made without pixels).

Memory: a Parquet file is read in row groups, each at most :data:`MAX_ROW_GROUP_BYTES` as its footer
declares them (checked before reading; Arrow holds a row group about three times over while it
decodes it), 16 rows at a time into Python. A ``datasets`` folder is read through its ``state.json``,
whose data files must be plain names of regular files in the folder (no path, no link, no pipe); each
Arrow file is mapped, not read, its record batches walked message by message (a compressed batch,
which would be inflated whole, is refused), 16 rows at a time, the mapped pages released after each
batch. Either way at most one episode is held whole (see :class:`~guiagent.datasets._common.EpisodeBudget`).
"""

from __future__ import annotations

import math
import mmap
import struct
from pathlib import Path
from typing import Any, Iterable, Iterator

from guiagent.datasets._common import (
    MAX_EPISODE_STEPS,
    DatasetError,
    EpisodeBudget,
    check_episode_id,
    image_size,
    iter_files,
    json_error,
    json_record,
    open_inside,
    open_source_file,
    read_inside,
    source_kind,
)
from guiagent.types import Observation, ParseError, Step, TaskSpec, Trajectory, action_from_dict

__all__ = ["read_parquet", "read_hf_dataset", "trajectories_from_rows", "MAX_ROW_GROUP_BYTES"]

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

#: the largest Parquet row group an import reads, as the file's footer declares it (uncompressed):
#: Arrow decodes a row group whole and holds it about three times over meanwhile (~400 MB for this).
#: ``guiagent export`` writes row groups of at most 32 MiB of screenshots.
MAX_ROW_GROUP_BYTES = 128 * 1024 * 1024
#: the largest Parquet footer (the file's metadata) an import reads
MAX_FOOTER_BYTES = 16 * 1024 * 1024
#: rows converted to Python at a time
_ROWS = 16
_INT64 = (-(2**63), 2**63 - 1)
#: a screenshot's width or height in pixels (a screen, not an image of any size)
_SIDE = (1, 65535)


def _json(text: Any, where: str, what: str, default: Any, *, mapping: bool = False) -> Any:
    if text is None:
        return default
    if not isinstance(text, str):
        raise DatasetError(f"{where}: {what} must be JSON text, got {type(text).__name__}")
    value = json_record(text.encode("utf-8", "surrogatepass"), where, what)
    if mapping and not isinstance(value, dict):
        raise DatasetError(f"{where}: {what} must be a JSON object, got {_kind(value)}")
    return value


def _kind(v: Any) -> str:
    return {list: "a list", str: "a text", bool: "true/false", int: "a number", float: "a number",
            type(None): "null"}.get(type(v), type(v).__name__)


def _int(r: dict[str, Any], key: str, where: str, lo: int, hi: int, default: int | None = None) -> int:
    v = r.get(key)
    if v is None and default is not None:
        return default
    if isinstance(v, str) and v.strip().isascii() and v.strip().lstrip("+-").isdigit() and len(v) < 30:
        v = int(v)  # an integer column written as text by another tool
    if isinstance(v, bool) or not isinstance(v, int):
        raise DatasetError(f"{where}: {key} must be a whole number, got {_short(v)}")
    if not lo <= v <= hi:
        raise DatasetError(f"{where}: {key} is {_short(v)}, outside {lo}..{hi}")
    return v


def _number(r: dict[str, Any], key: str, where: str, *, lo: float = -math.inf, hi: float = math.inf,
            default: float | None = None) -> float:
    v = r.get(key)
    if v is None and default is not None:
        return default
    if isinstance(v, str):
        try:
            v = float(v) if v.strip().isascii() else v
        except ValueError:
            pass
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise DatasetError(f"{where}: {key} must be a number, got {_short(v)}")
    f = float(v) if not isinstance(v, int) or abs(v) < 2**63 else math.inf
    if not math.isfinite(f):
        raise DatasetError(f"{where}: {key} is {_short(v)}, not a finite number")
    if not lo <= f <= hi:
        raise DatasetError(f"{where}: {key} is {f:g}, outside {lo:g}..{hi:g}")
    return f


def _text(r: dict[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
    v = r.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str):
        raise DatasetError(f"{where}: {key} must be text, got {_short(v)}")
    return v


def _short(v: Any, n: int = 80) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 128:
        return f"an integer of {v.bit_length()} bits"
    if isinstance(v, (bytes, bytearray)):
        return f"{len(v)} bytes"
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def _step(r: dict[str, Any], where: str) -> Step:
    shot = r["screenshot"]
    if isinstance(shot, dict):  # datasets.Image(decode=False) gives {"bytes", "path"}; a path is never opened
        shot = shot.get("bytes")
    ref = _text(r, "screenshot_ref", where)
    if shot is not None:
        if not isinstance(shot, (bytes, bytearray)):
            raise DatasetError(f"{where}: the screenshot must be image bytes, got {type(shot).__name__}")
        shot = bytes(shot)
        image_size(shot, where)  # an image, and not one that declares billions of pixels
    elif ref is not None:
        raise DatasetError(f"{where}: the screenshot is missing (null) though screenshot_ref names one: an export "
                           "made without its pixels cannot be imported (export the run again with them)")
    action = r.get("action")
    pe = r.get("parse_error")
    parts = _json(r.get("reward_parts"), where, "reward_parts", {}, mapping=True)
    for k, v in parts.items():
        _number(parts, k, f"{where}: reward_parts")
    milestones = r.get("milestones")
    if milestones is not None and not (isinstance(milestones, (list, tuple))
                                       and all(isinstance(m, bool) for m in milestones)):
        raise DatasetError(f"{where}: milestones must be a list of true/false, got {_short(milestones)}")
    try:
        obs = Observation(
            shot,
            _int(r, "width", where, *_SIDE),
            _int(r, "height", where, *_SIDE),
            screenshot_ref=None,
            tree=_text(r, "tree", where),
            url=_text(r, "url", where),
            last_action_error=_text(r, "last_action_error", where),
            # exports made before marks was a column, and screens without a mark table: None
            marks=None if r.get("marks") is None else _json(r["marks"], where, "marks", None),
        )
        return Step(
            index=_int(r, "step_index", where, 0, MAX_EPISODE_STEPS),
            observation=obs,
            action=None if action is None else action_from_dict(_json(action, where, "action", None, mapping=True)),
            response=_text(r, "response", where) or "",
            thought=_text(r, "thought", where) or "",
            parse_error=None if pe is None else ParseError.from_dict(_json(pe, where, "parse_error", {}, mapping=True)),
            action_error=_text(r, "action_error", where),
            reward=_number(r, "reward", where),
            reward_parts=parts,
            milestones=tuple(milestones or ()),
            terminated=bool(r.get("terminated")),
            truncated=bool(r.get("truncated")),
            policy_version=_int(r, "policy_version", where, *_INT64, default=0),
            latency_ms=_number(r, "latency_ms", where, lo=0.0, default=0.0),
            metadata=_json(r.get("step_metadata"), where, "step_metadata", {}, mapping=True),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(f"{where}: bad step row ({type(e).__name__}: {json_error(e)})") from None


def trajectories_from_rows(rows: Iterable[dict[str, Any]], source: str) -> Iterator[Trajectory]:
    """Group contiguous rows of one episode into a Trajectory each (one episode held at a time, at
    most :data:`~guiagent.datasets._common.MAX_EPISODE_STEPS` rows and
    :data:`~guiagent.datasets._common.MAX_EPISODE_SCREENSHOT_BYTES` of screenshots)."""
    cur: list[tuple[dict[str, Any], Step]] = []
    seen: set[str] = set()
    budget: EpisodeBudget | None = None

    def flush() -> Trajectory:
        try:
            return _flush()
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            if isinstance(e, DatasetError):
                raise
            raise DatasetError(f"{source}: episode {str(cur[0][0].get('episode_id'))[:80]!r}: bad episode fields "
                               f"({type(e).__name__}: {json_error(e)})") from None

    def _flush() -> Trajectory:
        r0 = cur[0][0]
        where = f"{source}: row {first_row[0]} (episode {r0['episode_id']})"
        steps = tuple(s for _, s in cur)
        if [s.index for s in steps] != list(range(len(steps))):
            raise DatasetError(f"{where}: step indices {_short([s.index for s in steps])} are not 0..n-1 in order")
        status = r0.get("episode_status")
        if status is not None and status not in ("completed", "aborted"):
            raise DatasetError(f"{where}: episode_status is {_short(status)}; an episode is completed or aborted")
        # exports made before max_steps was a column: the episode's length stands in
        spec = TaskSpec(
            _text(r0, "suite", where, required=True),
            _text(r0, "task_id", where, required=True),
            _int(r0, "seed", where, *_INT64),
            _text(r0, "goal", where, required=True),
            max_steps=_int(r0, "max_steps", where, 1, _INT64[1], default=max(len(steps), 1)),
            params=_json(r0.get("task_params"), where, "task_params", {}, mapping=True),
        )
        return Trajectory(
            r0["episode_id"],
            spec,
            steps,
            success=_number(r0, "success", where, lo=0.0, hi=1.0, default=0.0),
            status=status or "completed",
            abort_reason=_text(r0, "abort_reason", where),
            agent=_text(r0, "agent", where) or "",
            group_id=_text(r0, "group_id", where),
            metadata=_json(r0.get("episode_metadata"), where, "episode_metadata", {}, mapping=True),
        )

    first_row = [0]
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
        if not cur:
            first_row[0] = n
            budget = EpisodeBudget(f"{where} (episode {r['episode_id']})")
        step = _step(r, f"{where} (episode {r['episode_id']}, step {_short(r['step_index'], 24)})")
        assert budget is not None
        budget.step(step.observation.screenshot)
        cur.append((r, step))
    if cur:
        yield flush()


def read_parquet(src: str | Path, **_: Any) -> Iterator[Trajectory]:
    """Episodes of a Parquet export (a file, or a folder of ``*.parquet``), read a row group at a time
    (each at most :data:`MAX_ROW_GROUP_BYTES`, judged from the footer before reading)."""
    src = Path(src)
    try:  # a folder's files: only regular files inside it (a link is refused, as every import does)
        files = list(iter_files(src, ("*.parquet",)))
    except DatasetError as e:
        raise DatasetError(f"{src}: no Parquet file") if "no files matching" in str(e) else e from None
    for path in files:
        yield from trajectories_from_rows(_parquet_rows(path, src), str(path))


def _parquet_rows(path: Path, src: Path) -> Iterator[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open_source_file(path, src) as f:
        size = f.seek(0, 2)
        if size < 12:
            raise DatasetError(f"{path}: not a readable Parquet file ({size} bytes)")
        f.seek(size - 8)
        tail = f.read(8)
        footer = struct.unpack("<I", tail[:4])[0]
        if tail[4:] != b"PAR1":
            raise DatasetError(f"{path}: not a readable Parquet file (no PAR1 at its end)")
        if footer > min(MAX_FOOTER_BYTES, size - 12):
            raise DatasetError(f"{path}: its Parquet footer declares {footer:,} bytes, more than the file holds or "
                               f"the {MAX_FOOTER_BYTES // 2**20} MiB an import reads")
        f.seek(0)
        try:
            pf = pq.ParquetFile(f)
            md = pf.metadata
            for i in range(md.num_row_groups):
                rg = md.row_group(i)
                declared = max(rg.total_byte_size, sum(rg.column(c).total_uncompressed_size
                                                       for c in range(rg.num_columns)))
                if declared > MAX_ROW_GROUP_BYTES:
                    raise DatasetError(f"{path}: row group {i} declares {declared / 2**20:,.0f} MiB, more than the "
                                       f"{MAX_ROW_GROUP_BYTES // 2**20} MiB an import decodes at once (guiagent "
                                       "export writes smaller ones: export the run again)")
        except (pa.ArrowException, OSError) as e:
            raise DatasetError(f"{path}: not a readable Parquet file ({json_error(e)})") from None
        try:
            for batch in pf.iter_batches(batch_size=_ROWS):
                yield from batch.to_pylist()
        except (pa.ArrowException, OSError) as e:
            raise DatasetError(f"{path}: unreadable data ({json_error(e)})") from None


def read_hf_dataset(src: str | Path, **_: Any) -> Iterator[Trajectory]:
    """Episodes of a ``datasets`` folder written by ``export_hf_dataset`` (``save_to_disk``).

    Read here, not by ``datasets.load_from_disk``, which opens whatever ``state.json`` names (``..``,
    absolute paths, links: another dataset, a system file) and waits forever on a pipe: the data files
    ``state.json`` lists must be plain file names of regular files inside the folder."""
    src = Path(src)
    if source_kind(src) != "folder":
        raise DatasetError(f"{src}: a Hugging Face dataset is a folder (what save_to_disk wrote), not a file")
    files = _hf_data_files(src)
    for name in files:
        yield from trajectories_from_rows(_arrow_rows(src / name, src), str(src / name))


#: the most data files one ``state.json`` may list (``save_to_disk`` writes one per 500 MB)
MAX_DATA_FILES = 10_000


def _hf_data_files(src: Path) -> list[str]:
    where = f"{src}/state.json"
    raw = read_inside(src / "state.json", src, where, what="the file", limit=1 << 20)
    if raw is None:
        if (src / "dataset_dict.json").exists():
            raise DatasetError(f"{src}: a dataset of several splits (dataset_dict.json): give one split's folder")
        raise DatasetError(f"{src}: not a saved Hugging Face dataset (no state.json)")
    state = json_record(raw, where)
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not files:
        raise DatasetError(f"{where}: _data_files must be a non-empty list of {{\"filename\": ...}}")
    if len(files) > MAX_DATA_FILES:
        raise DatasetError(f"{where}: _data_files lists {len(files):,} files; an import reads at most {MAX_DATA_FILES:,}")
    names = []
    for i, entry in enumerate(files):
        name = entry.get("filename") if isinstance(entry, dict) else None
        at = f"{where}: _data_files[{i}]"
        if not isinstance(name, str) or not name:
            raise DatasetError(f"{at} must be {{\"filename\": a file name}}, got {_short(entry)}")
        if "/" in name or "\\" in name or "\x00" in name or name in (".", ".."):
            raise DatasetError(f"{at}: {_short(name, 160)} is not a file name in the folder (a data file is named "
                               "by its name alone: no folder, no '..', no absolute path); an import reads only "
                               "files inside the folder it is given")
        names.append(name)
    for name in names:  # every one judged before the first is read
        f = open_inside(src / name, src, where, what="the data file")
        if f is None:
            raise DatasetError(f"{where}: the data file {name!r} is not in {src}")
        f.close()
    return names


# Arrow IPC flatbuffer fields read to refuse a compressed record batch before Arrow inflates it whole:
# Message {version, header_type, header, bodyLength, custom_metadata}; RecordBatch {length, nodes,
# buffers, compression, ...}. A table starts with the offset back to its vtable (int32); the vtable
# holds the byte offset of each field in the table (uint16, 0: absent).
_SCHEMA, _RECORD_BATCH = 1, 3


def _fb_field(buf: bytes, table: int, index: int) -> int:
    """The position of field ``index`` of the flatbuffer table at ``table`` (0 when absent)."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    vsize = struct.unpack_from("<H", buf, vtable)[0]
    if 4 + 2 * index + 2 > vsize:
        return 0
    off = struct.unpack_from("<H", buf, vtable + 4 + 2 * index)[0]
    return table + off if off else 0


def _message_kind(metadata: bytes) -> tuple[int, bool]:
    """``(header type, compressed)`` of an Arrow IPC message's flatbuffer metadata."""
    try:
        root = struct.unpack_from("<I", metadata, 0)[0]
        at = _fb_field(metadata, root, 1)
        kind = metadata[at] if at else 0
        header = _fb_field(metadata, root, 2)
        if not header:
            return kind, False
        table = header + struct.unpack_from("<I", metadata, header)[0]
        return kind, kind == _RECORD_BATCH and _fb_field(metadata, table, 3) != 0
    except (struct.error, IndexError):
        return -1, False


def _arrow_rows(path: Path, src: Path) -> Iterator[dict[str, Any]]:
    import pyarrow as pa

    f = open_inside(path, src, str(path), what="the data file")
    if f is None:
        raise DatasetError(f"{path}: no such data file (it went away while the import ran)")
    with f:
        if f.seek(0, 2) == 0:
            raise DatasetError(f"{path}: the data file is empty")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # mapped: pages come and go, nothing is copied
    try:
        reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(pa.py_buffer(mm)))
        schema = None
        while True:
            try:
                msg = reader.read_next_message()
            except StopIteration:
                break
            except (pa.ArrowException, OSError, ValueError) as e:
                raise DatasetError(f"{path}: not an Arrow file save_to_disk writes ({_arrow_error(e)})") from None
            if msg is None:
                break
            kind, compressed = _message_kind(msg.metadata.to_pybytes())
            if schema is None:
                if kind != _SCHEMA:
                    raise DatasetError(f"{path}: not an Arrow file save_to_disk writes (no schema first)")
                schema = pa.ipc.read_schema(msg)
                continue
            if kind != _RECORD_BATCH:
                raise DatasetError(f"{path}: holds an Arrow message of a kind save_to_disk does not write ({kind})")
            if compressed:
                raise DatasetError(f"{path}: holds a compressed record batch (save_to_disk writes none; Arrow would "
                                   "inflate it whole before a row could be checked)")
            try:
                batch = pa.ipc.read_record_batch(msg, schema)
                batch.validate(full=True)  # offsets inside their buffers before any value is read
            except (pa.ArrowException, OSError, ValueError) as e:
                raise DatasetError(f"{path}: a damaged record batch ({_arrow_error(e)})") from None
            del msg
            for i in range(0, batch.num_rows, _ROWS):
                yield from batch.slice(i, _ROWS).to_pylist()
            del batch
            mm.madvise(mmap.MADV_DONTNEED)  # the batch's pages leave this process (the file keeps them)
    finally:
        reader = msg = batch = schema = None  # type: ignore[assignment]  # no buffer left on the map
        try:
            mm.close()
        except BufferError:  # a view still alive (an error's traceback): the map goes with it
            pass


def _arrow_error(e: BaseException) -> str:
    """Arrow's complaint without the numbers it read from the file (a length taken from a system file's
    bytes would print them)."""
    text = json_error(e)
    return "it does not parse as Arrow IPC" if any(c.isdigit() for c in text) else text
