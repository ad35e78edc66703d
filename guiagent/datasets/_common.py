"""What every importer shares: errors, coordinate checks, image sizes and placeholders, the swipe
check against step instructions, bounded reading of files inside the data folder only, and the atomic
import."""

from __future__ import annotations

import errno
import functools
import io
import json
import os
import re
import shutil
import stat
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from PIL import Image, UnidentifiedImageError

from guiagent.store import Store
from guiagent.types import Trajectory

__all__ = ["DatasetError", "ImportResult", "ImportNotes", "SwipeCheck", "unit", "image_size", "write_atomically",
           "box_unit", "boxes_unit", "placeholder_png", "parse_size", "json_record", "MAX_SCREENSHOT_PIXELS",
           "MAX_RECORD_BYTES", "MAX_EPISODE_ID", "MAX_SCREENSHOT_BYTES", "SCREENSHOT_FORMATS",
           "check_episode_id", "read_inside", "lies_inside"]

#: the largest screenshot an import takes, in pixels (40 Mpx: an 8K screen is 33 Mpx, a phone 2-5 Mpx).
#: A larger image is refused with one line: decoding it later (the web UI, a model's processor) would
#: take gigabytes, and a header can declare any size (a 50000x50000 PNG is a few kilobytes).
MAX_SCREENSHOT_PIXELS = 40_000_000
#: the longest JSON record (a JSONL line, a JSON annotation file) an import reads: 64 MiB
MAX_RECORD_BYTES = 64 * 1024 * 1024
#: the largest screenshot file an import reads: 64 MiB (a phone screenshot is 0.1-5 MB). A larger file
#: is refused on its size, before it is read.
MAX_SCREENSHOT_BYTES = 64 * 1024 * 1024
#: the image formats a screenshot may have (those the store keeps and the web UI serves); Pillow's
#: other decoders (some run outside programs) are never reached
SCREENSHOT_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
#: the longest episode id an import writes, counted whole (a format's prefix such as ``guiodyssey-``
#: included). The web UI opens any id the store holds, ``/`` included; this keeps imported ids to
#: what fits a URL, a log line and a table cell.
MAX_EPISODE_ID = 256


class DatasetError(ValueError):
    """A recorded-data file that cannot be imported; the message names the file and record.

    Always one line: line breaks and other control characters a file put into a quoted value are
    escaped, so the message is what a user sees, whole, on one terminal line.
    """

    def __init__(self, message: object = "") -> None:
        text = str(message)
        if any(ord(c) < 32 or c == "\x7f" for c in text):
            text = "".join(c if (ord(c) >= 32 and c != "\x7f") else repr(c)[1:-1] for c in text)
        super().__init__(text)


def check_episode_id(eid: Any, where: str, prefix: str = "") -> str:
    """``prefix + eid``, the id an import writes, if it is non-empty text of at most
    :data:`MAX_EPISODE_ID` characters; :class:`DatasetError` (one line, before anything is written)
    otherwise."""
    if not isinstance(eid, str) or not eid:
        raise DatasetError(f"{where}: episode_id must be a non-empty text, got {_short(eid)}")
    full = prefix + eid
    if len(full) > MAX_EPISODE_ID:
        with_prefix = f" with the {prefix!r} prefix" if prefix else ""
        raise DatasetError(f"{where}: episode_id {_short(eid, 40)} is {len(full)} characters long{with_prefix}; "
                           f"an import takes at most {MAX_EPISODE_ID}")
    return full


@dataclass
class SwipeCheck:
    """Recorded swipes against their step instructions ("swipe up ..."), per axis.

    For each swipe step whose instruction names a finger direction with the verb *swipe* ("scroll"
    is left out: people say "scroll down" for both ways), the check counts whether the recorded
    action's finger path (``action``) and the step target (``target``, read by its convention) go the
    way the instruction says, and whether the two disagree with each other (``conflicts``, counted on
    every swipe step). ``{"action": {"vertical": [agree, disagree], ...}, ...}``.
    """

    action: dict[str, list[int]] = field(default_factory=lambda: {"vertical": [0, 0], "horizontal": [0, 0]})
    target: dict[str, list[int]] = field(default_factory=lambda: {"vertical": [0, 0], "horizontal": [0, 0]})
    conflicts: dict[str, int] = field(default_factory=lambda: {"vertical": 0, "horizontal": 0})
    swipes: int = 0

    _VERB = re.compile(r"\bswip(?:e|es|ed|ing)\b(?:\s+(?:the|on|to|towards?|screen|page|it|your|finger|a|bit|"
                       r"little))*\s+(up|down|left|right)(?:wards?)?\b", re.I)

    @classmethod
    def said(cls, instruction: str) -> str | None:
        """The finger direction a step instruction names ("swipe up on the screen" -> ``up``), else None."""
        m = cls._VERB.search(instruction or "")
        return m.group(1).lower() if m else None

    def add(self, action_finger: str | None, target_finger: str | None, instruction: str) -> None:
        if action_finger is None and target_finger is None:
            return
        self.swipes += 1
        ref = action_finger or target_finger
        axis = "vertical" if ref in ("up", "down") else "horizontal"
        if action_finger and target_finger and action_finger != target_finger:
            self.conflicts[axis] += 1
        said = self.said(instruction)
        if said is None:
            return
        axis = "vertical" if said in ("up", "down") else "horizontal"
        for counts, got in ((self.action, action_finger), (self.target, target_finger)):
            if got is not None and (got in ("up", "down")) == (axis == "vertical"):
                counts[axis][0 if got == said else 1] += 1

    def warnings(self, source: str, *, action_field: str = "the recorded swipe",
                 target_field: str = "the step target") -> list[str]:
        """One line for each axis where most checked swipes go against their instructions, and one for
        swipes whose action and target disagree."""
        out = []
        for axis, pair in (("vertical", "up/down"), ("horizontal", "left/right")):
            for what, counts in ((action_field, self.action), (target_field, self.target)):
                agree, disagree = counts[axis]
                if agree + disagree >= 5 and disagree > agree:
                    out.append(f"{source}: {what} goes against its step instruction ('swipe {pair}') on "
                               f"{disagree} of {agree + disagree} {axis} swipes: its {pair} look reversed")
            if self.conflicts[axis]:
                out.append(f"{source}: {self.conflicts[axis]} {axis} swipes: {action_field} and {target_field} "
                           "go opposite ways (the matcher scores against the target)")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"swipes": self.swipes, "action_vs_instruction": self.action,
                "target_vs_instruction": self.target, "action_vs_target": self.conflicts}


@dataclass
class ImportNotes:
    """What an importer has to say besides the episodes: warnings (one line each), the swipe check,
    placeholder screenshots used."""

    warnings: list[str] = field(default_factory=list)
    swipes: SwipeCheck = field(default_factory=SwipeCheck)
    placeholders: int = 0

    def warn(self, line: str) -> None:
        if line not in self.warnings:
            self.warnings.append(line)

    def to_dict(self) -> dict[str, Any]:
        return {"warnings": list(self.warnings), "swipe_check": self.swipes.to_dict(),
                "placeholder_screenshots": self.placeholders}


@dataclass(frozen=True)
class ImportResult:
    """What an import wrote: the run directory, the run id, how many episodes and steps, and the
    importer's notes (warnings, the swipe check, placeholders)."""

    out_dir: str
    run_id: str
    episodes: int
    steps: int
    format: str
    notes: ImportNotes = field(default_factory=ImportNotes)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "notes"}
        return {**d, **self.notes.to_dict()}


#: coordinates this far outside the screen are rounding of the recorder, clamped; further is an error
_SLACK = 0.02


def unit(value: Any, scale: float, where: str, what: str) -> float:
    """``value / scale`` as a normalised coordinate in [0, 1] (small overshoots clamped)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DatasetError(f"{where}: {what} must be a number, got {_short(value)}")
    if scale <= 0:
        raise DatasetError(f"{where}: screen size must be positive, got {scale!r}")
    try:
        v = float(value) / float(scale)
    except OverflowError:
        v = float("inf")
    if not (-_SLACK <= v <= 1.0 + _SLACK):
        raise DatasetError(f"{where}: {what}={_short(value)} lies outside the screen (size {scale:g})")
    return min(1.0, max(0.0, v))


def box_unit(box: Any, w: float, h: float, where: str) -> list[float] | None:
    """A pixel box ``[x0, y0, x1, y1]`` normalised to the screen; ``None`` for a box wholly off the
    screen. A box reaching past the screen (accessibility bounds of scrolling containers do) is kept as
    it is, cut at one screen beyond each edge: the matcher enlarges it about its own centre, as UI-S1
    does."""
    if not (isinstance(box, (list, tuple)) and len(box) == 4):
        raise DatasetError(f"{where}: a box must be [x0, y0, x1, y1], got {_short(box)}")
    for v in box:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (-1e9 < v < 1e9):
            raise DatasetError(f"{where}: a box holds numbers, got {_short(box)}")
    if w <= 0 or h <= 0:
        raise DatasetError(f"{where}: screen size must be positive, got {w}x{h}")
    x0, y0, x1, y1 = (float(v) / s for v, s in zip(box, (w, h, w, h)))
    if x1 < x0 or y1 < y0:
        raise DatasetError(f"{where}: box {_short(box)} has its corners swapped")
    if x1 < 0 or y1 < 0 or x0 > 1 or y0 > 1:
        return None
    return [min(2.0, max(-1.0, v)) for v in (x0, y0, x1, y1)]


def boxes_unit(boxes: Any, w: float, h: float, where: str) -> list[list[float]]:
    """One box or a list of boxes (UI-S1's ``bbox`` / ``candidate_bbox``), normalised; boxes wholly off
    the screen are left out."""
    if boxes is None:
        return []
    if isinstance(boxes, (list, tuple)) and len(boxes) == 4 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in boxes):
        boxes = [boxes]
    if not isinstance(boxes, (list, tuple)):
        raise DatasetError(f"{where}: boxes must be a list of [x0, y0, x1, y1], got {_short(boxes)}")
    out = [box_unit(b, w, h, where) for b in boxes]
    return [b for b in out if b is not None]


def _short(v: Any, n: int = 80) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def image_size(data: bytes, where: str, *, decode: bool = True) -> tuple[int, int]:
    """Width and height of screenshot bytes (PNG, JPEG, WebP, GIF or BMP, via Pillow); one clear error
    when the bytes are not such an image, declare more than :data:`MAX_SCREENSHOT_PIXELS` (judged from
    the header, before any pixel is decoded), or do not decode (a damaged or truncated file).

    ``decode=False`` reads the header only: for the import's own placeholders."""
    with warnings.catch_warnings():
        # our own limit below, in place of Pillow's warning (89 Mpx) and error (179 Mpx)
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(io.BytesIO(data), formats=SCREENSHOT_FORMATS)
        except Image.DecompressionBombError as e:
            raise DatasetError(f"{where}: the screenshot declares {_pixels_in(str(e))} pixels, more than the "
                               f"{MAX_SCREENSHOT_PIXELS // 1_000_000} Mpx a screenshot may have") from None
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
            raise DatasetError(f"{where}: the screenshot is not a readable image ({e})") from None
        with im:
            w, h = im.size
            if w * h > MAX_SCREENSHOT_PIXELS:
                raise DatasetError(f"{where}: the screenshot is {w}x{h} ({w * h / 1e6:.0f} Mpx), more than "
                                   f"the {MAX_SCREENSHOT_PIXELS // 1_000_000} Mpx a screenshot may have")
            if w <= 0 or h <= 0:
                raise DatasetError(f"{where}: the screenshot has no pixels ({w}x{h})")
            if decode:
                try:
                    im.load()  # every pixel: what the web UI and a model's processor will do with it
                except MemoryError:
                    raise
                except Exception as e:  # noqa: BLE001 - whatever a decoder raises on damaged bytes
                    raise DatasetError(f"{where}: the screenshot is damaged: its {im.format} data does not "
                                       f"decode ({str(e)[:200] or type(e).__name__})") from None
    return w, h


def _pixels_in(message: str) -> str:
    m = re.search(r"\((\d+) pixels\)", message)
    return f"{int(m.group(1)):,}" if m else "too many"


def parse_size(text: str, what: str = "size") -> tuple[int, int]:
    """``"1080x2400"`` -> ``(1080, 2400)``; :class:`DatasetError` otherwise."""
    m = re.fullmatch(r"\s*(\d{1,6})\s*[xX]\s*(\d{1,6})\s*", str(text))
    if not m or int(m.group(1)) <= 0 or int(m.group(2)) <= 0:
        raise DatasetError(f"{what} must be WIDTHxHEIGHT in pixels (e.g. 1080x2400), got {text!r}")
    w, h = int(m.group(1)), int(m.group(2))
    if w * h > MAX_SCREENSHOT_PIXELS:
        raise DatasetError(f"{what} {w}x{h} is more than the {MAX_SCREENSHOT_PIXELS // 1_000_000} Mpx a "
                           "screenshot may have")
    return w, h


@functools.lru_cache(maxsize=8)
def placeholder_png(w: int, h: int) -> bytes:
    """A blank grey PNG of ``w`` x ``h`` pixels: a placeholder screenshot (matching and the offline
    metrics read only its size; stored once per size, content-addressed)."""
    buf = io.BytesIO()
    Image.new("L", (w, h), 200).save(buf, format="PNG", optimize=False, compress_level=9)
    return buf.getvalue()


def json_record(raw: bytes, where: str, what: str = "") -> Any:
    """One JSON record from bytes: one line naming the problem for bytes that are not UTF-8, not JSON,
    or nested deeper than the parser goes (never a traceback)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(f"{where}: {what + ' is ' if what else ''}not UTF-8 text (byte {raw[e.start]:#04x} "
                           f"at offset {e.start})") from None
    try:
        return json.loads(text)
    except ValueError as e:  # JSONDecodeError, and integers longer than Python reads (4300 digits)
        raise DatasetError(f"{where}: {what + ' is ' if what else ''}not JSON ({str(e)[:200]})") from None
    except RecursionError:
        raise DatasetError(f"{where}: {what + ' is ' if what else ''}JSON nested too deeply to read") from None


def lies_inside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``root`` or under it, by their names alone (``..`` folded, links not
    followed, nothing on disk touched)."""
    p, r = os.path.abspath(path), os.path.abspath(root)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


#: how a file is opened: not through a last link (links are resolved and checked first), not waiting
#: on a pipe
_O_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
            | getattr(os, "O_CLOEXEC", 0))


def read_inside(path: Path, root: Path, where: str, *, what: str = "screenshot",
                limit: int = MAX_SCREENSHOT_BYTES) -> bytes | None:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes lying inside the folder
    ``root`` once links are followed; ``None`` where there is no file (nothing there, or a folder).

    Anything else is one :class:`DatasetError` naming ``where``, and nothing of it is read: a path
    that leads outside ``root`` (``..``, an absolute path, a link pointing outside), something not a
    regular file (a pipe, a device), a file larger than ``limit`` (judged by its size, and the read
    stops at the limit), a file that cannot be opened.
    """
    shown = _short(str(path), 160)
    outside = (f"{where}: {what} {shown} leads outside {_short(str(root), 160)}; an import reads files "
               "only from inside the folder it is given")
    if not lies_inside(path, root):
        raise DatasetError(outside)
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if not lies_inside(real, real_root):
        raise DatasetError(outside + f" (a link to {_short(real, 160)})")
    try:
        fd = os.open(real, _O_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            return None
        raise DatasetError(f"{where}: {what} {shown} cannot be read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return None
        if not stat.S_ISREG(st.st_mode):
            raise DatasetError(f"{where}: {what} {shown} is not a regular file")
        try:  # what was really opened (Linux): a link swapped in after the check above is caught here
            opened = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            opened = real
        if not lies_inside(opened, real_root):
            raise DatasetError(outside + f" (a link to {_short(opened, 160)})")
        if st.st_size > limit:
            raise DatasetError(f"{where}: {what} {shown} is {st.st_size:,} bytes, more than the "
                               f"{limit // 2**20} MiB an import reads")
        with os.fdopen(fd, "rb") as f:
            fd = -1  # closed with f
            try:
                data = f.read(limit + 1)
            except OSError as e:
                raise DatasetError(f"{where}: {what} {shown} cannot be read ({e.strerror or e})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise DatasetError(f"{where}: {what} {shown} is more than the {limit // 2**20} MiB an import reads")
    return data


def iter_lines(path: Path, limit: int = MAX_RECORD_BYTES) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of a text file, each line at most ``limit`` bytes (a longer one is one
    clear error, read no further than the limit)."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror or e})") from None
    with f:
        n = 0
        while True:
            line = f.readline(limit + 1)
            if not line:
                return
            n += 1
            if len(line) > limit:
                raise DatasetError(f"{path}: line {n} is longer than {limit // 2**20} MiB")
            yield n, line


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
    real_src = os.path.realpath(src)
    for p in found:  # all checked before the first is read
        if not lies_inside(os.path.realpath(p), real_src):
            raise DatasetError(f"{p}: a link to {_short(os.path.realpath(p), 160)}, outside {src}; an import "
                               "reads files only from inside the folder it is given")
    yield from found
