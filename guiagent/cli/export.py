"""``guiagent export RUN_DIR --format parquet|hf --out DIR``: a run's steps as a dataset.

One row per step (the columns of :data:`guiagent.store.export.STEP_ROW_FIELDS`),
written by :mod:`guiagent.store.export`:

* ``--format hf``: a Hugging Face ``datasets`` folder (``datasets.load_from_disk(DIR)``;
  the ``screenshot`` column is a ``datasets.Image``), needs ``pip install guiagent[datasets]``;
* ``--format parquet``: ``DIR/steps.parquet`` (``pyarrow.parquet.read_table``).

Both get a dataset card, ``DIR/README.md``: tasks, agents, success rate, episode and
step counts, the schema. Everything is checked before anything is written, the export
is built in a temporary folder next to ``DIR`` and moved into place at the end.

``DIR`` must lie outside the run directory, and the run directory outside ``DIR``; it is
replaced as a whole, so it cannot be the current folder or one above it, the file system
root, a mount point, a dangling link or a path through a file. A link to a folder exports
into that folder (the link stays). An existing non-empty ``DIR`` is refused unless
``--overwrite`` is given, and ``--overwrite`` only replaces an earlier export: a folder
whose record ``DIR/.guiagent-export.json`` lists every file in it, with no folder but
those its files lie in. Anything else in it (a run, a file or an empty folder of yours)
is never deleted; a failed export removes the folders it created above ``DIR``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from guiagent.cli._common import emit_json, fail, log
from guiagent.config import parse_config
from guiagent.store.errors import StoreError
from guiagent.store.export import STEP_ROW_FIELDS, export_hf_dataset, export_parquet, exported_episodes
from guiagent.store.reader import StoreReader
from guiagent.store.records import SUCCESS_THRESHOLD, EpisodeFilter
from guiagent.written import entries, foreign
from guiagent.written import shown as shown_names

PARQUET_FILE = "steps.parquet"
#: written last into every export: the files the export wrote (``--overwrite`` deletes these only)
RECORD_FILE = ".guiagent-export.json"

#: what each exported column holds (the dataset card's schema table)
COLUMN_DOCS: dict[str, str] = {
    "run_id": "run the episode belongs to", "episode_id": "episode id", "group_id": "GRPO group (null outside one)",
    "suite": "task suite", "task_id": "task template id", "seed": "seed that fixed the task's parameters",
    "goal": "the instruction the agent got", "max_steps": "the episode's step budget",
    "task_params": "task parameters (JSON)",
    "agent": "agent that acted (oracle, random, model name)", "episode_status": "completed or aborted",
    "abort_reason": "why an aborted episode stopped", "success": "task success of the episode, 0..1",
    "total_reward": "sum of the episode's rewards", "num_steps": "steps in the episode",
    "episode_metadata": "episode metadata (JSON)", "step_index": "0-based step number",
    "screenshot": "the screen the agent saw, image bytes as captured (PNG/JPEG)",
    "screenshot_ref": "content hash of the screenshot blob", "width": "screenshot width, pixels",
    "height": "screenshot height, pixels", "tree": "UI tree text (accessibility snapshot)",
    "url": "page or app location", "last_action_error": "why the previous action failed",
    "response": "the model's raw output", "thought": "the model's reasoning text",
    "action": "the action taken (JSON, guiagent.types.action_to_dict)", "action_kind": "the action's kind",
    "parse_error": "why the output did not parse (JSON)", "action_error": "why the action could not be carried out",
    "reward": "the step's reward", "reward_parts": "reward components (JSON)",
    "milestones": "task milestones reached after the step", "terminated": "the episode ended here",
    "truncated": "the episode was cut here (step limit, device error)",
    "policy_version": "policy version that produced the action", "latency_ms": "time to produce the action",
    "step_metadata": "step metadata (JSON: a recorded step's target, semi-online flags)",
    "marks": "the screen's numbered elements, null when the device built none "
             "(JSON list of {id, role, name, box}; box normalised x0, y0, x1, y1)",
}

#: the Hub's ``size_categories`` (upper bound exclusive, label), smallest first; past the last: ``n>1T``
SIZE_CATEGORIES: tuple[tuple[int, str], ...] = (
    (1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"),
    (10_000_000_000, "1B<n<10B"), (100_000_000_000, "10B<n<100B"), (1_000_000_000_000, "100B<n<1T"),
)


def size_category(rows: int) -> str:
    """The dataset card's ``size_categories`` entry for ``rows`` rows."""
    return next((label for bound, label in SIZE_CATEGORIES if rows < bound), "n>1T")


@dataclass
class ExportConfig:
    """Export a run directory's finished episodes, one row per step, as a dataset."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """run directory holding the trajectory store (what guiagent eval/train --out wrote)"""
    out: str = ""
    """output folder (created; must not exist or be empty unless --overwrite)"""
    format: Literal["parquet", "hf"] = "hf"
    """hf: a datasets.load_from_disk folder; parquet: OUT/steps.parquet"""
    overwrite: bool = False
    """replace a non-empty OUT"""
    successful_only: bool = False
    """only episodes that succeeded"""
    run_id: str | None = None
    """only this run of the store"""
    task_id: str | None = None
    """only this task"""
    json: bool = False
    """print a JSON summary as the last stdout line"""


class ExportError(Exception):
    """Bad input: one line for the user; nothing was written."""


def _check(cfg: ExportConfig):
    """Validate everything that can be checked before writing; returns the episode filter, the count
    and ``--out`` resolved (see :func:`_out_path`)."""
    if not cfg.out:
        raise ExportError("--out DIR is required")
    run_dir = Path(cfg.run_dir)
    if not run_dir.is_dir():
        raise ExportError(f"{cfg.run_dir}: no such run directory")
    out = _out_path(cfg.out)
    if out == run_dir.resolve() or run_dir.resolve() in out.parents:
        raise ExportError("--out must lie outside the run directory")
    if out in run_dir.resolve().parents:
        raise ExportError(f"--out {cfg.out} contains the run directory {cfg.run_dir}: give a folder outside it")
    if out.is_dir() and any(out.iterdir()):
        if not cfg.overwrite:
            raise ExportError(f"--out {cfg.out} exists and is not empty (pass --overwrite to replace an earlier "
                              "export there)")
        _check_replaceable(out, cfg.out)
    if cfg.format == "hf":
        try:
            import datasets  # noqa: F401
        except ImportError:
            raise ExportError("--format hf needs the 'datasets' package: pip install 'guiagent[datasets]'") from None
    f = EpisodeFilter(run_id=cfg.run_id, task_id=cfg.task_id, outcome="success" if cfg.successful_only else None)
    try:
        with StoreReader(run_dir) as reader:
            if cfg.run_id is not None:
                reader.get_run(cfg.run_id)
            n = sum(1 for _ in exported_episodes(reader, f))  # episodes marked damaged are left out
    except StoreError as e:
        raise ExportError(f"{cfg.run_dir}: {e.args[0] if e.args else e}") from None
    except sqlite3.DatabaseError as e:
        raise ExportError(f"{cfg.run_dir}: the trajectory store is damaged ({' '.join(str(e).split())})") from None
    if n == 0:
        raise ExportError(f"{cfg.run_dir}: no finished episodes match; nothing to export")
    return f, n, out


def _out_path(shown: str) -> Path:
    """``--out`` as an absolute path with no links, ``.`` or ``..`` left: checked to be a folder, or
    creatable as one, that the export can replace with a rename (its folder above is writable)."""
    if "\x00" in shown:
        raise ExportError(f"--out {shown!r}: a path cannot contain NUL")
    given = Path(shown)
    for p in (given, *given.parents):
        if p.is_symlink() and not p.exists():
            raise ExportError(f"--out {shown}: {p} is a symbolic link whose target does not exist; give a folder")
    try:
        out = given.resolve()
        cwd = Path.cwd().resolve()
    except (OSError, RuntimeError) as e:  # a link loop; a current folder that was deleted
        raise ExportError(f"--out {shown}: cannot be resolved ({' '.join(str(e).split())})") from None
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {shown} is a file, not a folder")
    if out == out.parent:
        raise ExportError(f"--out {shown} is the file system root: give a folder to create or replace")
    if out == cwd or out in cwd.parents:
        raise ExportError(f"--out {shown} is the current folder or a folder above it (the export replaces --out "
                          "as a whole): give a folder beside or below it")
    if out.is_dir() and os.path.ismount(out):
        raise ExportError(f"--out {shown} is a mount point (the export replaces --out as a whole): give a folder "
                          "inside it")
    for p in given.parents:  # as given, so the message names the path the user typed
        if p.exists():
            if not p.is_dir():
                raise ExportError(f"--out {shown} cannot be created: {p} is a file, not a folder")
            break
    above = out.parent
    while not above.exists():
        above = above.parent
    if not above.is_dir():
        raise ExportError(f"--out {shown} cannot be created: {above} is a file, not a folder")
    for folder in (above, out) if out.is_dir() else (above,):  # renamed away: written in, and out of its folder
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ExportError(f"--out {shown} cannot be written: {folder} is not writable")
    return out


def _created_parents(out: Path) -> list[Path]:
    """The folders above ``out`` that do not exist yet, deepest first (what ``mkdir(parents=True)`` makes)."""
    missing = []
    for p in out.parents:
        if p.exists():
            break
        missing.append(p)
    return missing


def _check_replaceable(out: Path, shown: str) -> None:
    """``--overwrite`` replaces ``out`` only when it holds an earlier export and nothing else."""
    path = out / RECORD_FILE
    if not path.exists() and not path.is_symlink():
        raise ExportError(f"--out {shown} holds no {RECORD_FILE}, so guiagent export did not write it; "
                          "--overwrite only replaces an earlier export: give another --out")
    listed = None
    try:
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= 16 << 20:
            record = json.loads(path.read_text(encoding="utf-8"))
            files = record.get("files") if isinstance(record, dict) else None
            if isinstance(files, list) and all(isinstance(f, str) for f in files):
                listed = set(files)
    except (OSError, ValueError, RecursionError):
        listed = None
    if listed is None:  # there, but not the record an export keeps (a list of the files it wrote)
        raise ExportError(f"--out {shown} holds a {RECORD_FILE} that is not the record guiagent export keeps "
                          "(a JSON list of the files it wrote), so nothing there is known to be an earlier "
                          "export; --overwrite only replaces one: give another --out")
    # the folders an export writes are those its files lie in; any other (an empty one included) is not ours
    not_ours = foreign(out, {f for f in listed if isinstance(f, str)} | {RECORD_FILE})
    if not_ours:
        raise ExportError(f"--out {shown} holds files or folders guiagent export did not write "
                          f"({shown_names(not_ours)}); --overwrite never deletes those: move them or give "
                          "another --out")


def card(run_dir: str, fmt: str, filt, rows: int) -> str:
    """The dataset card (README.md): YAML metadata, then tasks, agents, outcomes and the schema."""
    per_task: dict[tuple[str, str], list[float]] = defaultdict(list)
    agents: Counter[str] = Counter()
    runs: dict[str, str] = {}
    with StoreReader(run_dir) as reader:
        for s in exported_episodes(reader, filt):
            per_task[(s.suite, s.task_id)].append(s.success)
            agents[s.agent] += 1
            runs.setdefault(s.run_id, "")
        for run in reader.list_runs():
            if run.run_id in runs:
                runs[run.run_id] = run.name
    episodes = sum(len(v) for v in per_task.values())
    wins = sum(x >= SUCCESS_THRESHOLD for v in per_task.values() for x in v)
    suites = sorted({suite for suite, _ in per_task})
    size = size_category(rows)
    types = {"str": "string", "int": "int64", "float": "float64", "bool": "bool",
             "image": "image" if fmt == "hf" else "binary", "bools": "list<bool>"}
    lines = [
        "---",
        "tags:", "- guiagent", "- gui-agents", "- trajectories",
        *(f"- {s}" for s in suites),
        f"size_categories:\n- {size}",
        "---", "",
        f"# GUI agent trajectories: {', '.join(suites)}", "",
        f"Exported by `guiagent export --format {fmt}` from the run directory `{Path(run_dir).name}`: "
        "one row per step of every finished episode"
        + (" that succeeded" if filt.outcome == "success" else "") + ".", "",
        f"- episodes: {episodes}",
        f"- steps (rows): {rows}",
        f"- success rate: {wins / episodes:.1%} ({wins}/{episodes}; success >= {SUCCESS_THRESHOLD})",
        f"- agents: {', '.join(f'{a} ({n} episodes)' for a, n in agents.most_common())}",
        f"- runs: {', '.join(f'{name or rid} ({rid})' for rid, name in sorted(runs.items()))}", "",
        "## Loading", "",
        "```python",
        *(["import datasets", "ds = datasets.load_from_disk(\"<this folder>\")",
           "ds[0][\"screenshot\"]  # a PIL image"] if fmt == "hf" else
          ["import pyarrow.parquet as pq", f"table = pq.read_table(\"<this folder>/{PARQUET_FILE}\")"]),
        "```", "",
        "## Tasks", "",
        "| suite | task | episodes | success rate |", "|---|---|---|---|",
        *(f"| {suite} | {task} | {len(v)} | {sum(x >= SUCCESS_THRESHOLD for x in v) / len(v):.0%} |"
          for (suite, task), v in sorted(per_task.items())),
        "", "## Schema", "",
        "| column | type | meaning |", "|---|---|---|",
        *(f"| `{name}` | {types[kind]} | {COLUMN_DOCS.get(name, '')} |" for name, kind in STEP_ROW_FIELDS),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    cfg = parse_config(ExportConfig, argv, prog="guiagent export")
    try:
        filt, episodes, out = _check(cfg)
    except ExportError as e:
        return fail("export", e)

    made = _created_parents(out)  # removed again if the export fails: nothing is left behind
    done = False
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        rows = _export(cfg, filt, out)
        done = True
    except ExportError as e:
        return fail("export", e)
    finally:
        if not done:
            for p in made:  # deepest first; only what mkdir made, and only while empty
                try:
                    p.rmdir()
                except OSError:
                    break
    log(f"wrote {rows} rows to {Path(cfg.out)}")
    if cfg.json:
        emit_json({"out": str(Path(cfg.out)), "format": cfg.format, "rows": rows, "episodes": episodes})
    return 0


def _export(cfg: ExportConfig, filt: EpisodeFilter, out: Path) -> int:
    """Build the export in a temporary folder beside ``out``, then move it into place; returns the rows."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    try:
        log(f"exporting {cfg.run_dir} as {cfg.format} ...")
        ds = tmp / "ds"
        try:
            if cfg.format == "hf":
                rows = export_hf_dataset(cfg.run_dir, ds, filt)
            else:
                ds.mkdir()
                rows = export_parquet(cfg.run_dir, ds / PARQUET_FILE, filt)
            (ds / "README.md").write_text(card(cfg.run_dir, cfg.format, filt, rows))
        except sqlite3.DatabaseError as e:  # a store damaged past the pages the checks read
            raise ExportError(f"{cfg.run_dir}: the trajectory store is damaged ({' '.join(str(e).split())}); "
                              f"nothing was written") from None
        except StoreError as e:  # a blob missing from the store (either format: the same line)
            raise ExportError(f"{cfg.run_dir}: {e.args[0] if e.args else e}; nothing was written") from None
        (ds / RECORD_FILE).write_text(json.dumps({"format": cfg.format, "source": str(Path(cfg.run_dir).resolve()),
                                                  "rows": rows, "files": entries(ds)}, indent=1))
        if out.exists():  # checked above: empty, or an earlier export (--overwrite); kept until the new one is in
            out.rename(tmp / "old")
        try:
            ds.rename(out)
        except OSError:
            if (tmp / "old").exists():
                (tmp / "old").rename(out)
            raise
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
