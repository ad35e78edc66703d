"""Recorded trajectories as a data source: importers of published GUI-agent datasets.

Each format has its own module with a ``read_*(src, **options)`` generator of
:class:`~guiagent.types.Trajectory` (typed actions, coordinates normalised to the
screenshot, each step's typed :class:`~guiagent.types.StepTarget` in its metadata
under ``"target"``, plus what else the source says of the step: its instruction, ids).
:func:`import_dataset` writes them into a new run directory of the trajectory store,
all or nothing, and returns the importer's notes (warnings, the swipe check).

Formats: ``androidcontrol`` (TFRecord), ``uis1`` (UI-S1's JSONL), ``guiodyssey``
(JSON annotations + screenshots), ``parquet`` and ``hf`` (our own exports).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator

from guiagent.datasets._common import (
    DatasetError,
    ImportNotes,
    ImportResult,
    check_episode_id,
    json_error,
    parse_size,
    source_kind,
    write_atomically,
)
from guiagent.datasets.androidcontrol import read_androidcontrol
from guiagent.datasets.exported import read_hf_dataset, read_parquet
from guiagent.datasets.guiodyssey import read_guiodyssey
from guiagent.datasets.uis1 import read_uis1
from guiagent.types import Trajectory

__all__ = ["FORMATS", "SWIPE_CONVENTIONS", "DatasetError", "ImportNotes", "ImportResult", "read_dataset",
           "import_dataset"]


def _reader(fmt: str) -> Callable[..., Iterator[Trajectory]]:
    if fmt == "androidcontrol":
        return read_androidcontrol
    if fmt == "uis1":
        return read_uis1
    if fmt == "guiodyssey":
        return read_guiodyssey
    if fmt == "parquet":
        return read_parquet
    if fmt == "hf":
        return read_hf_dataset
    raise DatasetError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")


#: format name -> one line on what it reads
FORMATS: dict[str, str] = {
    "androidcontrol": "AndroidControl TFRecord files (GZIP or plain) of tf.train.Example episodes",
    "uis1": "UI-S1's JSONL (one episode a line, screenshots as paths)",
    "guiodyssey": "GUI-Odyssey: annotations/*.json + screenshots/",
    "parquet": "a guiagent Parquet export (guiagent.store.export.export_parquet)",
    "hf": "a guiagent Hugging Face datasets export (export_hf_dataset)",
}


#: how each format writes a swipe (``auto``: UI-S1's two files differ; see guiagent.datasets.uis1)
SWIPE_CONVENTIONS: dict[str, str] = {
    "androidcontrol": "scroll",
    "uis1": "auto",
    "guiodyssey": "finger",
    "parquet": "finger",
    "hf": "finger",
}


def read_dataset(fmt: str, src: str | os.PathLike[str], **options: Any) -> Iterator[Trajectory]:
    """The episodes of ``src`` in format ``fmt`` (raises :class:`DatasetError` on bad data, and only that)."""
    source_kind(src)  # nothing there, a FIFO, a device: said at once
    return _guarded(_reader(fmt)(src, **options), str(src))


def _guarded(episodes: Iterator[Trajectory], src: str) -> Iterator[Trajectory]:
    """Whatever a reader raises on a malformed record reaches the caller as one :class:`DatasetError`
    (the readers check what they read; this is the net under them)."""
    n = 0
    seen: dict[str, int] = {}
    try:
        for t in episodes:
            check_episode_id(t.episode_id, f"{src}: episode {n + 1}")  # every format's ids, prefix and all
            if t.episode_id in seen:  # the readers say where; this is the net (exports split over files)
                raise DatasetError(f"{src}: episode {n + 1}: episode id {t.episode_id[:80]!r} is also the id "
                                   f"of episode {seen[t.episode_id]}; an id may name one episode only")
            seen[t.episode_id] = n + 1
            yield t
            n += 1
    except DatasetError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError, RecursionError,
            UnicodeError) as e:
        raise DatasetError(f"{src}: episode {n + 1} cannot be read ({type(e).__name__}: {json_error(e)})") from None


def import_dataset(
    fmt: str,
    src: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    run_name: str | None = None,
    images_dir: str | None = None,
    placeholders: str | None = None,
    swipe_convention: str | None = None,
) -> ImportResult:
    """Import every episode of ``src`` into a new store at ``out_dir`` (completed episodes of one run).

    Nothing is left behind on a bad record; an existing non-empty ``out_dir`` is refused.
    ``placeholders`` (``WxH`` or ``auto``, uis1 and guiodyssey): blank screenshots stand in for missing
    files; ``swipe_convention`` (uis1): ``finger``, ``scroll`` or ``auto``. The result's ``notes`` hold
    the importer's warnings and its check of swipes against step instructions.
    """
    reader = _reader(fmt)
    source_kind(src)  # nothing there, a FIFO, a device (/dev/null): said at once, before anything is written
    opts: dict[str, Any] = {"images_dir": images_dir} if images_dir else {}
    if placeholders:
        if fmt not in ("uis1", "guiodyssey"):
            raise DatasetError(f"--placeholders is for formats whose screenshots are separate files (uis1, "
                               f"guiodyssey), not {fmt}")
        if placeholders != "auto":
            parse_size(placeholders, "--placeholders")
        opts["placeholders"] = placeholders
    if swipe_convention:
        if fmt != "uis1":
            raise DatasetError(f"--swipe-convention is for uis1 files; {fmt} declares its own "
                               f"({SWIPE_CONVENTIONS[fmt]})")
        if swipe_convention not in ("auto", "finger", "scroll"):
            raise DatasetError(f"--swipe-convention must be auto, finger or scroll, got {swipe_convention!r}")
        opts["swipe_convention"] = swipe_convention
    notes = ImportNotes()
    res = write_atomically(
        out_dir,
        lambda: _guarded(reader(src, notes=notes, **opts), str(src)),
        run_name=run_name or f"import:{fmt}",
        fmt=fmt,
        config={"format": fmt, "source": str(src), **opts},
    )
    return ImportResult(res.out_dir, res.run_id, res.episodes, res.steps, res.format, notes)
