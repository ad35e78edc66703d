"""What every importer shares: errors, coordinate checks, image sizes, and the atomic import."""

from __future__ import annotations

import io
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from guiagent.types import Trajectory

__all__ = ["DatasetError", "ImportResult", "unit", "image_size", "write_atomically", "box_unit"]


class DatasetError(ValueError):
    """A recorded-data file that cannot be imported; the message names the file and record."""


@dataclass(frozen=True)
class ImportResult:
    """What an import wrote: the run directory, the run id, how many episodes and steps."""

    out_dir: str
    run_id: str
    episodes: int
    steps: int
    format: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


#: coordinates this far outside the screen are rounding of the recorder, clamped; further is an error
_SLACK = 0.02


def unit(value: Any, scale: float, where: str, what: str) -> float:
    """``value / scale`` as a normalised coordinate in [0, 1] (small overshoots clamped)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DatasetError(f"{where}: {what} must be a number, got {value!r}")
    if scale <= 0:
        raise DatasetError(f"{where}: screen size must be positive, got {scale!r}")
    v = float(value) / float(scale)
    if not (-_SLACK <= v <= 1.0 + _SLACK):
        raise DatasetError(f"{where}: {what}={value!r} lies outside the screen (size {scale:g})")
    return min(1.0, max(0.0, v))


def box_unit(box: Any, w: float, h: float, where: str) -> list[float]:
    """A pixel box ``[x0, y0, x1, y1]`` normalised to the screen."""
    if not (isinstance(box, (list, tuple)) and len(box) == 4):
        raise DatasetError(f"{where}: a box must be [x0, y0, x1, y1], got {box!r}")
    x0, y0, x1, y1 = (unit(v, s, where, "box") for v, s in zip(box, (w, h, w, h)))
    if x1 < x0 or y1 < y0:
        raise DatasetError(f"{where}: box {box!r} has its corners swapped")
    return [x0, y0, x1, y1]


def image_size(data: bytes, where: str) -> tuple[int, int]:
    """Width and height of PNG/JPEG bytes (header only, via Pillow); a clear error when unreadable."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except (UnidentifiedImageError, OSError) as e:
        raise DatasetError(f"{where}: the screenshot is not a readable image ({e})") from None


def write_atomically(
    out_dir: str | os.PathLike[str],
    episodes: Callable[[], Iterable[Trajectory]],
    *,
    run_name: str,
    fmt: str,
    config: dict[str, Any],
) -> ImportResult:
    """Write ``episodes()`` as completed episodes of a new run in ``out_dir``, all or nothing.

    The store is built in a hidden sibling directory and renamed into place at the
    end, so a bad record anywhere leaves nothing behind; an ``out_dir`` that exists
    and is not empty is refused (never clobbered).
    """
    from guiagent.store import Store

    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DatasetError(f"{out} already exists and is not empty; choose a new --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.importing-{uuid.uuid4().hex[:8]}"
    n_ep = n_steps = 0
    try:
        store = Store.open(tmp)
        try:
            run_id = store.create_run(run_name, env=fmt, algo="import", config=config)
            for traj in episodes():
                store.write_trajectory(run_id, traj)
                n_ep += 1
                n_steps += traj.num_steps
            if n_ep == 0:
                raise DatasetError(f"no episodes found in {config.get('source')}")
            store.set_run_status(run_id, "finished")
        finally:
            store.close()
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ImportResult(str(out), run_id, n_ep, n_steps, fmt)


def iter_files(src: Path, patterns: tuple[str, ...]) -> Iterator[Path]:
    """``src`` itself, or the files under it matching ``patterns``, sorted."""
    if src.is_file():
        yield src
        return
    if not src.is_dir():
        raise DatasetError(f"{src}: no such file or directory")
    found = sorted({p for pat in patterns for p in src.glob(pat) if p.is_file()})
    if not found:
        raise DatasetError(f"{src}: no files matching {', '.join(patterns)}")
    yield from found
