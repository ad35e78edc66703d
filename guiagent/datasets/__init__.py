"""Recorded trajectories as a data source: importers of published GUI-agent datasets.

Each format has its own module with a ``read_*(src, **options)`` generator of
:class:`~guiagent.types.Trajectory` (typed actions, coordinates normalised to the
screenshot, the target element's box as step metadata ``target_box`` when the
data gives one). :func:`import_dataset` writes them into a new run directory of
the trajectory store, all or nothing.

Formats: ``androidcontrol`` (TFRecord), ``uis1`` (UI-S1's JSONL), ``guiodyssey``
(JSON annotations + screenshots), ``parquet`` and ``hf`` (our own exports).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator

from guiagent.datasets._common import DatasetError, ImportResult, write_atomically
from guiagent.types import Trajectory

__all__ = ["FORMATS", "DatasetError", "ImportResult", "read_dataset", "import_dataset"]


def _reader(fmt: str) -> Callable[..., Iterator[Trajectory]]:
    if fmt == "androidcontrol":
        from guiagent.datasets.androidcontrol import read_androidcontrol

        return read_androidcontrol
    if fmt == "uis1":
        from guiagent.datasets.uis1 import read_uis1

        return read_uis1
    if fmt == "guiodyssey":
        from guiagent.datasets.guiodyssey import read_guiodyssey

        return read_guiodyssey
    if fmt == "parquet":
        from guiagent.datasets.exported import read_parquet

        return read_parquet
    if fmt == "hf":
        from guiagent.datasets.exported import read_hf_dataset

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


def read_dataset(fmt: str, src: str | os.PathLike[str], **options: Any) -> Iterator[Trajectory]:
    """The episodes of ``src`` in format ``fmt`` (raises :class:`DatasetError` on bad data)."""
    if not Path(src).exists():
        raise DatasetError(f"{src}: no such file or directory")
    return _reader(fmt)(src, **options)


def import_dataset(
    fmt: str,
    src: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    run_name: str | None = None,
    images_dir: str | None = None,
) -> ImportResult:
    """Import every episode of ``src`` into a new store at ``out_dir`` (completed episodes of one run).

    Nothing is left behind on a bad record; an existing non-empty ``out_dir`` is refused.
    """
    reader = _reader(fmt)
    if not Path(src).exists():
        raise DatasetError(f"{src}: no such file or directory")
    opts = {"images_dir": images_dir} if images_dir else {}
    return write_atomically(
        out_dir,
        lambda: reader(src, **opts),
        run_name=run_name or f"import:{fmt}",
        fmt=fmt,
        config={"format": fmt, "source": str(src), **opts},
    )
