"""A run directory's integrity: what ``guiagent store check RUN`` reports, and what ``--repair`` fixes.

Checked, in order:

* SQLite's own ``PRAGMA integrity_check`` of ``store.sqlite`` (a page, an index or a row the file no
  longer holds consistently);
* every screenshot blob a step or a final observation names: **missing** (no file under its name),
  **truncated** or **replaced** (its bytes no longer hash to its name: cut short, or other bytes);
* episodes **left open by a dead writer** (``in_progress``, their process gone or silent for
  :data:`~guiagent.store._proc.STALE_S`), and runs still ``running`` on the same evidence;
* what takes space only: **orphan blobs** (files no step names: a writer killed between writing a
  screenshot and its step leaves one, by design) and **temp files** of killed writers (``.tmp-*``).

The first three are problems (the command exits 1); the last are notes (reported, exit 0).
``repair=True`` fixes what can be fixed without deleting data: episodes whose blobs are missing or
damaged become ``aborted`` with ``abort_reason`` ``damaged: ...`` and success 0 (what they were, and
which blobs, kept in their metadata under ``damaged``), so no trainer, export or metric takes them
as they were; episodes and runs left open by dead writers are closed as
:meth:`Store.recover <guiagent.store.writer.Store.recover>` closes them (aborted, interrupted); temp
files older than a minute are removed. Orphan blobs are kept (a screenshot is data), and a store that
fails SQLite's own check is only reported (copy what reads, ``sqlite3 .recover``). An episode already
marked damaged counts as known, not as a problem again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guiagent.store._proc import STALE_S, writer_alive
from guiagent.store.blobs import BLOB_EXTENSIONS, TMP_PREFIX, looks_truncated
from guiagent.store.errors import StoreError
from guiagent.store.schema import BLOBS_DIR, connect_ro, db_path
from guiagent.store.writer import DAMAGED_PREFIX, Store

__all__ = ["Finding", "CheckReport", "check_store", "DAMAGED_PREFIX", "PROBLEM_KINDS", "NOTE_KINDS"]

#: the kinds that make a store unclean (exit 1), and those that are reported only
PROBLEM_KINDS = ("integrity", "missing_blob", "truncated_blob", "replaced_blob", "open_episode", "running_run",
                 "unreadable")
NOTE_KINDS = ("orphan_blob", "temp_file", "stray_file", "damaged_episode")
_BLOB_NAME = re.compile(r"([0-9a-f]{64})\.(" + "|".join(BLOB_EXTENSIONS) + ")")
#: temp files younger than this may belong to a writer at work: never removed
TEMP_AGE_S = 60.0
_CHUNK = 1 << 20


@dataclass
class Finding:
    """One thing found: its ``kind`` (:data:`PROBLEM_KINDS` or :data:`NOTE_KINDS`), what it names (a blob
    hash, an episode id, a file), a line saying what is wrong, the episodes it touches, and what
    ``--repair`` did about it (``None``: nothing)."""

    kind: str
    name: str
    detail: str
    episodes: tuple[str, ...] = ()
    repaired: str | None = None

    @property
    def problem(self) -> bool:
        return self.kind in PROBLEM_KINDS

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "detail": self.detail, "episodes": list(self.episodes),
                "repaired": self.repaired, "problem": self.problem}


@dataclass
class CheckReport:
    """What :func:`check_store` found in one run directory."""

    run_dir: str
    episodes: int = 0
    steps: int = 0
    blobs: int = 0
    integrity: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    repaired: bool = False

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    @property
    def clean(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.kind] = counts.get(f.kind, 0) + 1
        return {"run_dir": self.run_dir, "clean": self.clean, "episodes": self.episodes, "steps": self.steps,
                "blobs": self.blobs, "integrity": self.integrity or ["ok"], "counts": counts,
                "problems": len(self.problems), "repaired": self.repaired,
                "findings": [f.to_dict() for f in self.findings]}


def _hash_file(path: Path) -> tuple[str, bytes, int] | None:
    """``(sha256, first and last bytes, size)`` of a regular file (never through a link), ``None`` when it
    cannot be opened as one."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        h = hashlib.sha256()
        size, head, tail = 0, b"", b""
        while chunk := f.read(_CHUNK):
            if not head:
                head = chunk[:16]
            tail = (tail + chunk)[-16:]
            size += len(chunk)
            h.update(chunk)
    return h.hexdigest(), head + tail if size > 16 else head, size


def _looks_cut(sample: bytes, size: int) -> bool:
    """Whether a blob whose hash differs looks truncated (empty, or an image without its end), judged from
    its first and last bytes."""
    if size == 0:
        return True
    return looks_truncated(sample)


def check_store(run_dir: str | os.PathLike[str], *, repair: bool = False, stale_s: float = STALE_S,
                now: float | None = None) -> CheckReport:
    """Check ``run_dir`` (see the module docstring); with ``repair``, fix what can be fixed. Raises
    :class:`~guiagent.store.errors.StoreError` when there is no store at all (nothing to check); a store
    SQLite cannot open or read is a finding of kind ``unreadable``."""
    run_dir = Path(run_dir)
    path = db_path(run_dir)
    if not path.is_file():
        raise StoreError(f"no trajectory store at {path} (not a run folder)")
    report = CheckReport(str(run_dir))
    now = time.time() if now is None else now
    try:
        con = connect_ro(run_dir)
    except StoreError as e:
        report.findings.append(Finding("unreadable", DB_NAME_SHOWN, str(e)))
        return report
    try:
        rows = _read(con, report)
    except sqlite3.DatabaseError as e:
        report.findings.append(Finding("unreadable", DB_NAME_SHOWN, f"SQLite cannot read it ({e})"))
        return report
    finally:
        con.close()
    if rows is None:
        return report
    refs, marked, open_eps, running = rows
    bad_eps = _blobs(run_dir / BLOBS_DIR, refs, marked, report, now)
    for eid, host, pid, start, updated in open_eps:
        if updated < now - stale_s:
            report.findings.append(Finding("open_episode", eid, f"in progress with no write for {now - updated:.0f} s",
                                           (eid,)))
        elif writer_alive(host, pid, start) is False:
            report.findings.append(Finding("open_episode", eid, f"in progress, its writer process {pid} on {host} "
                                                                "is gone", (eid,)))
    for rid, host, pid, start, beat in running:
        if writer_alive(host, pid, start) is False or (beat is not None and beat < now - stale_s):
            report.findings.append(Finding("running_run", rid, f"still 'running', its writer process {pid} on {host} "
                                                                "is gone or silent"))
    if repair:
        _repair(run_dir, report, bad_eps, stale_s)
    return report


DB_NAME_SHOWN = "store.sqlite"


def _read(con: sqlite3.Connection, report: CheckReport):
    """SQLite's check, then what the tables name: ``(blob ref -> {episode id: [step indices]}, episodes
    already marked damaged, open episodes, running runs)``; ``None`` when the tables cannot be trusted."""
    result = [r[0] for r in con.execute("PRAGMA integrity_check(100)")]
    if result != ["ok"]:
        report.integrity = [" ".join(str(r).split()) for r in result]
        report.findings.append(Finding("integrity", DB_NAME_SHOWN, "; ".join(report.integrity[:3])
                                       + (f" (and {len(result) - 3} more)" if len(result) > 3 else "")))
        return None
    report.episodes = con.execute("SELECT count(*) FROM episodes").fetchone()[0]
    report.steps = con.execute("SELECT count(*) FROM steps").fetchone()[0]
    refs: dict[str, dict[str, list[int]]] = {}
    for eid, idx, ref in con.execute("SELECT e.id, s.idx, s.screenshot FROM steps s JOIN episodes e "
                                     "ON e.pk = s.episode_pk WHERE s.screenshot IS NOT NULL"):
        refs.setdefault(str(ref), {}).setdefault(eid, []).append(int(idx))
    for eid, final in con.execute("SELECT id, final_obs FROM episodes WHERE final_obs IS NOT NULL"):
        try:
            ref = json.loads(final).get("screenshot_ref")
        except (ValueError, AttributeError):
            ref = None
        if isinstance(ref, str):
            refs.setdefault(ref, {}).setdefault(eid, []).append(-1)  # -1: the final observation
    marked = {eid for (eid,) in con.execute("SELECT id FROM episodes WHERE status = 'aborted' AND abort_reason "
                                            "LIKE ?", (DAMAGED_PREFIX + "%",))}
    open_eps = con.execute("SELECT id, writer_host, writer_pid, writer_start, updated_at FROM episodes "
                           "WHERE status = 'in_progress'").fetchall()
    cols = {r[1] for r in con.execute("PRAGMA table_info(runs)")}
    running = (con.execute("SELECT id, writer_host, writer_pid, writer_start, heartbeat FROM runs "
                           "WHERE status = 'running'").fetchall() if "writer_pid" in cols else [])
    return refs, marked, open_eps, running


def _where(steps: dict[str, list[int]]) -> str:
    parts = []
    for eid, idx in list(steps.items())[:3]:
        shown = ", ".join("final observation" if i < 0 else f"step {i}" for i in sorted(idx)[:3])
        parts.append(f"{eid!r} ({shown})")
    more = f" and {len(steps) - 3} more episodes" if len(steps) > 3 else ""
    return "; ".join(parts) + more


def _blobs(root: Path, refs: dict[str, dict[str, list[int]]], marked: set[str], report: CheckReport,
           now: float) -> dict[str, list[str]]:
    """Walk ``blobs/``: every file hashed, then what the tables name and what no file holds. Returns
    episode id -> the bad blobs it names (those not already marked damaged)."""
    present: dict[str, str] = {}  # ref -> "ok" | "truncated" | "replaced"
    if root.is_dir() and not root.is_symlink():
        for shard in sorted(root.iterdir()):
            if shard.is_symlink() or not shard.is_dir():
                report.findings.append(Finding("stray_file", str(shard.relative_to(root.parent)),
                                               "not a shard folder of the blob store"))
                continue
            for p in sorted(shard.iterdir()):
                rel = str(p.relative_to(root.parent))
                if p.name.startswith(TMP_PREFIX):
                    try:
                        age = now - p.lstat().st_mtime
                    except OSError:
                        continue
                    report.findings.append(Finding("temp_file", rel, f"a blob a writer never finished ({age:.0f} s "
                                                                     "old)"))
                    continue
                m = _BLOB_NAME.fullmatch(p.name)
                got = _hash_file(p) if m and p.name[:2] == shard.name and not p.is_symlink() else None
                if got is None:
                    report.findings.append(Finding("stray_file", rel, "not a blob the store wrote (a name, a link or "
                                                                      "a file type it never writes)"))
                    continue
                ref = m.group(1)
                digest, sample, size = got
                report.blobs += 1
                present[ref] = "ok" if digest == ref else ("truncated" if _looks_cut(sample, size) else "replaced")
    bad_eps: dict[str, list[str]] = {}
    for ref, state in sorted(present.items()):
        steps = refs.get(ref)
        if steps is None:
            report.findings.append(Finding("orphan_blob", ref, "no step names it (a writer stopped between the "
                                                               "screenshot and its step)"))
            continue
        if state == "ok":
            continue
        _bad(report, bad_eps, marked, f"{state}_blob", ref,
             f"its bytes do not hash to its name ({'cut short' if state == 'truncated' else 'other bytes'}); "
             f"named by {_where(steps)}", steps)
    for ref, steps in sorted(refs.items()):
        if ref not in present:
            _bad(report, bad_eps, marked, "missing_blob", ref, f"no file; named by {_where(steps)}", steps)
    return bad_eps


def _bad(report: CheckReport, bad_eps: dict[str, list[str]], marked: set[str], kind: str, ref: str, detail: str,
         steps: dict[str, list[int]]) -> None:
    fresh = tuple(e for e in steps if e not in marked)
    if not fresh:  # every episode naming it is marked damaged already: known
        report.findings.append(Finding("damaged_episode", ref, f"{kind.replace('_', ' ')}, its episodes already "
                                                               "marked damaged", tuple(steps)))
        return
    report.findings.append(Finding(kind, ref, detail, fresh))
    for eid in fresh:
        bad_eps.setdefault(eid, []).append(ref)


def _repair(run_dir: Path, report: CheckReport, bad_eps: dict[str, list[str]], stale_s: float) -> None:
    store = Store.open(run_dir, recover=False)
    try:
        closed = set(store.recover(older_than=stale_s))
        for f in report.findings:
            if f.kind in ("open_episode", "running_run") and (f.kind == "running_run" or f.name in closed):
                f.repaired = "closed (aborted)" if f.kind == "open_episode" else "marked interrupted"
        marked = store.mark_damaged({eid: refs for eid, refs in bad_eps.items()})
        for f in report.findings:
            if f.kind in ("missing_blob", "truncated_blob", "replaced_blob"):
                done = [e for e in f.episodes if e in marked]
                if done:
                    f.repaired = f"marked damaged: {len(done)} episode(s)"
        removed = store.blobs.clean_temp(older_than=TEMP_AGE_S)
        if removed:
            for f in report.findings:
                if f.kind == "temp_file" and not (run_dir / f.name).exists():
                    f.repaired = "removed"
    finally:
        store.close()
    report.repaired = True
