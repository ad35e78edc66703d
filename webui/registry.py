"""Which runs the UI shows: run directories found under ``--runs``, read through StoreReader.

A *run directory* holds ``store.sqlite`` (and ``blobs/``); one directory may hold
several runs (the ``runs`` table). ``--runs DIR`` is either a run directory or a
folder whose children (or grandchildren) are run directories.

Every run gets a URL key. Keys are looked up in the discovered set, never joined
into a path, so no request can name a file. A key depends only on the run's own
directory and id, so it never changes when other runs (a copy of this one) appear:
``<directory key>~<run id>`` (the run id alone when ``--runs`` is the run
directory itself). Two directories never share a directory key (:func:`_label_key`).
A bare run id is also accepted while it is unique.

A run directory whose store cannot be read (corrupt, truncated, empty, still being
created, a newer schema) is listed as *broken* with the reason; it never takes the
other runs down. So is a folder the server may not look into (no read or search
permission): it may hold a run, and a run that silently vanished would be worse.
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from guiagent.store import EpisodeNotFound, StoreError, StoreReader
from guiagent.store.records import EpisodeSummary, RunInfo
from guiagent.store.schema import db_path

__all__ = ["RunRef", "BrokenRun", "RunRegistry", "discover_run_dirs", "discover", "NotFound"]

_STORE_FILE = db_path(".").name
#: a run directory whose folders are named with these alone keeps its path as its key ("/" as ".")
_KEY_SIMPLE = re.compile(r"[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*")
#: the bytes written as themselves in any other directory's key ("/" as ".", the rest as "_" and two hex digits)
_KEY_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


class NotFound(LookupError):
    """A run, episode, step or blob the request named does not exist (HTTP 404)."""


def discover_run_dirs(root: str | Path, depth: int = 2) -> tuple[Path, ...]:
    """Run directories at ``root`` itself, or ``depth`` levels below it, sorted by path.

    Hidden folders and ``blobs/`` are skipped; a run directory's own subfolders are
    not searched (a store does not nest stores).
    """
    return discover(root, depth)[0]


def discover(root: str | Path, depth: int = 2) -> tuple[tuple[Path, ...], tuple[tuple[Path, str], ...]]:
    """(run directories, folders that could not be looked into with the reason) at or under ``root``:
    :func:`discover_run_dirs`, and the folders a permission (or another OS error) hid from it."""
    root = Path(root).resolve()
    unreadable: list[tuple[Path, str]] = []
    try:
        if (root / _STORE_FILE).is_file():
            return (root,), ()
    except OSError as e:
        return (), ((root, _os_reason(e)),)
    found: list[Path] = []
    level = [root]
    for _ in range(depth):
        nxt: list[Path] = []
        for folder in level:
            try:
                children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError as e:
                unreadable.append((folder, _os_reason(e)))
                continue
            for child in children:
                if child.name == "blobs":
                    continue
                try:
                    is_run = (child / _STORE_FILE).is_file()
                except OSError as e:
                    unreadable.append((child, _os_reason(e)))
                    continue
                (found if is_run else nxt).append(child)
        level = nxt
    return tuple(sorted(found)), tuple(sorted(unreadable))


def _os_reason(e: OSError) -> str:
    return f"the server cannot read this folder ({e.strerror or type(e).__name__})"


@dataclass(frozen=True)
class RunRef:
    """One run as the UI addresses it."""

    key: str
    label: str
    """the run directory relative to ``--runs`` ("." when ``--runs`` is the run directory)"""
    run_dir: Path
    reader: StoreReader
    info: RunInfo


@dataclass(frozen=True)
class BrokenRun:
    """A run directory whose store cannot be read, and why (shown in the run list)."""

    label: str
    reason: str


def _label_key(label: str) -> str:
    """The directory part of a run key, one to one with the directory (two never share a key).

    ``/`` is written ``.``. A directory whose folder names hold only letters, digits, ``_`` and ``-``
    keeps that readable key (``evals/held-out`` -> ``evals.held-out``), which never starts with
    ``.``. Any other name (a ``.`` in it, a space, non-ASCII bytes) is written as ``.`` followed by
    the name with ``A-Za-z0-9-`` kept and every other byte as ``_`` and two hex digits (``x.y`` ->
    ``.x_2ey``, ``g/a b`` -> ``.g.a_20b``). Both are reversible, so ``runs/x/y`` (``x.y``) and
    ``runs/x.y`` (``.x_2ey``) differ. ``label``: the directory relative to ``--runs`` as
    :meth:`pathlib.PurePath.as_posix` gives it (undecodable bytes as surrogates).
    """
    if label == ".":
        return ""
    if _KEY_SIMPLE.fullmatch(label):
        return label.replace("/", ".")
    raw = label.encode("utf-8", "surrogateescape")
    return "." + "".join("." if b == 0x2F else chr(b) if chr(b) in _KEY_KEPT else f"_{b:02x}" for b in raw)


def _time(t: object) -> float:
    """A stored time to sort by; one another tool wrote as text (or not at all) sorts last."""
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) else -math.inf


def _reason(e: BaseException, run_dir: Path, label: str) -> str:
    """An error as one line, the absolute path shortened to the run's label."""
    return str(e).replace(str(run_dir), label).replace("\n", " ")[:300] or type(e).__name__


#: an empty (0-byte) store younger than this is taken to be one a writer is creating, not a broken one.
#: A writer's store is empty only between SQLite creating the file and the WAL switch writing its header
#: (microseconds): an empty file older than this is broken, and listed so.
CREATING_S = 2.0


def _being_created(run_dir: Path) -> bool:
    try:
        st = db_path(run_dir).stat()
    except OSError:
        return False
    return st.st_size == 0 and time.time() - st.st_mtime < CREATING_S


class RunRegistry:
    """The discovered runs, re-scanned at most every ``ttl_s`` seconds (new runs appear live)."""

    def __init__(self, root: str | Path, *, ttl_s: float = 5.0) -> None:
        self.root = Path(root).resolve()
        if not self.root.exists():
            raise FileNotFoundError(f"--runs {root}: no such directory")
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._readers: dict[Path, StoreReader] = {}
        self._refs: dict[str, RunRef] = {}
        self._by_id: dict[str, list[RunRef]] = {}
        self._broken: dict[Path, BrokenRun] = {}
        self._scanned = float("-inf")

    def _label(self, d: Path) -> str:
        """``d`` relative to the root, as text any page can show (undecodable bytes as ``\\xff``)."""
        label = "." if d == self.root else d.relative_to(self.root).as_posix()
        return label.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")

    def _drop(self, d: Path) -> None:
        reader = self._readers.pop(d, None)
        if reader is not None:
            try:
                reader.close()
            except sqlite3.Error:
                pass

    def refresh(self, force: bool = False) -> dict[str, RunRef]:
        """Re-read the run list (cheap: one query per run directory) and return key -> RunRef."""
        with self._lock:
            if not force and time.monotonic() - self._scanned < self.ttl_s:
                return self._refs
            dirs, unreadable = discover(self.root)
            for gone in set(self._readers) - set(dirs):
                self._drop(gone)
            refs: dict[str, RunRef] = {}
            # a folder it may not look into: listed, since it may hold a run (one that vanished silently
            # from the list would be read as deleted)
            broken: dict[Path, BrokenRun] = {d: BrokenRun(self._label(d), why) for d, why in unreadable}
            for d in dirs:
                label = self._label(d)
                try:
                    reader = self._readers.get(d) or StoreReader(d)
                    self._readers[d] = reader
                    infos = reader.list_runs()
                    reader.release()
                except (StoreError, sqlite3.Error, OSError, ValueError) as e:
                    # corrupt, truncated, empty or half-created: shown as broken, the rest stays up
                    self._drop(d)
                    if not _being_created(d):  # a store a writer is creating right now: next scan
                        broken[d] = BrokenRun(label, _reason(e, d, label))
                    continue
                prefix = _label_key("." if d == self.root else d.relative_to(self.root).as_posix())
                for info in infos:
                    key = f"{prefix}~{info.run_id}" if prefix else info.run_id
                    refs[key] = RunRef(key, label, d, reader, info)
            by_id: dict[str, list[RunRef]] = {}
            for ref in refs.values():
                by_id.setdefault(ref.info.run_id, []).append(ref)
            self._refs, self._by_id, self._broken = refs, by_id, broken
            self._scanned = time.monotonic()
            return refs

    def runs(self) -> list[RunRef]:
        """Every readable run, newest first."""
        return sorted(self.refresh().values(), key=lambda r: (-_time(r.info.created_at), r.key))

    def broken(self) -> list[BrokenRun]:
        """The run directories whose store cannot be read, by label."""
        self.refresh()
        return sorted(self._broken.values(), key=lambda b: b.label)

    def _lookup(self, key: str) -> RunRef | None:
        ref = self._refs.get(key)
        if ref is None:  # a bare run id, while it is unique
            same = self._by_id.get(key, [])
            ref = same[0] if len(same) == 1 else None
        return ref

    def run(self, key: str, *, fresh: bool = False) -> RunRef:
        """The run with this key (raises :class:`NotFound`).

        Its counts are at most ``ttl_s`` old unless ``fresh``: counting a big run's
        episodes costs tens of milliseconds, too much to repeat for every screenshot.
        """
        self.refresh()
        ref = self._lookup(key)
        if ref is None:
            self.refresh(force=True)  # created since the last scan?
            ref = self._lookup(key)
        if ref is None:
            raise NotFound(f"no run {key[:200]!r}")
        if fresh:
            try:
                ref = RunRef(ref.key, ref.label, ref.run_dir, ref.reader, ref.reader.get_run(ref.info.run_id))
            except StoreError:
                raise NotFound(f"no run {key[:200]!r}") from None
        return ref

    def key_of(self, run_dir: Path, run_id: str) -> str | None:
        for ref in self.refresh().values():
            if ref.run_dir == run_dir and ref.info.run_id == run_id:
                return ref.key
        return None

    def release(self) -> None:
        """Return this thread's store connections for reuse (called when a request ends)."""
        for reader in list(self._readers.values()):
            reader.release()

    def find_episode(self, episode_id: str) -> tuple[StoreReader, EpisodeSummary, str | None]:
        """The reader holding a visible episode, its summary and its run key (raises NotFound).

        Any id the store holds is found, however long and whatever it contains (``/``, ``..``): it is
        an SQL parameter, never part of a path."""
        if not isinstance(episode_id, str) or not episode_id:
            raise NotFound("no such episode")
        self.refresh()
        for d, reader in list(self._readers.items()):
            try:
                s = reader.get_summary(episode_id)
            except (EpisodeNotFound, StoreError, sqlite3.Error):
                continue  # not in this store (or this store just broke: the others still answer)
            key = self.key_of(d, s.run_id)
            if key is None:  # its run appeared after the last scan
                self.refresh(force=True)
                key = self.key_of(d, s.run_id)
            return reader, s, key
        raise NotFound(f"no episode {episode_id[:200]!r}")
