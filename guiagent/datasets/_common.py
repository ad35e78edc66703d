"""What every importer shares: errors, coordinate checks, image sizes and placeholders, the swipe
check against step instructions, bounded reading of files inside the data folder only, and the atomic
import."""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import functools
import io
import json
import os
import re
import shutil
import signal
import stat
import threading
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator

from PIL import Image, UnidentifiedImageError

from guiagent.store import Store, StoreError
from guiagent.store._proc import HOST, process_start, writer_alive
from guiagent.types import Trajectory

__all__ = ["DatasetError", "ImportResult", "ImportNotes", "SwipeCheck", "unit", "image_size", "write_atomically",
           "box_unit", "boxes_unit", "placeholder_png", "parse_size", "json_record", "MAX_SCREENSHOT_PIXELS",
           "MAX_RECORD_BYTES", "MAX_EPISODE_ID", "MAX_SCREENSHOT_BYTES", "SCREENSHOT_FORMATS",
           "check_episode_id", "read_inside", "lies_inside", "open_inside", "open_source_file", "source_kind",
           "kind_of", "iter_files", "iter_lines", "MAX_JSON_VALUES", "MAX_EPISODE_STEPS", "MAX_EPISODE_SCREENSHOT_BYTES",
           "EpisodeBudget", "clean_stale_staging", "json_error"]

#: the largest screenshot an import takes, in pixels (40 Mpx: an 8K screen is 33 Mpx, a phone 2-5 Mpx).
#: A larger image is refused with one line: decoding it later (the web UI, a model's processor) would
#: take gigabytes, and a header can declare any size (a 50000x50000 PNG is a few kilobytes).
MAX_SCREENSHOT_PIXELS = 40_000_000
#: the longest JSON record (a JSONL line, a JSON annotation file) an import reads: 64 MiB
MAX_RECORD_BYTES = 64 * 1024 * 1024
#: the most JSON values one record may hold, counted from its bytes (every ``,``, ``[`` and ``{``, in strings
#: too: an upper bound) before it is parsed. Python builds an object for each value (a list or dict of 56-230
#: bytes for 2-3 bytes of text: ``[[],[],...]`` would turn 64 MiB into 1.4 GB); a million of them stay
#: under ~100 MB. A UI-S1 line of 20 steps holds ~600, a GUI-Odyssey annotation a few thousand.
MAX_JSON_VALUES = 1_000_000
#: the most steps one imported episode may have, in every format (AndroidControl's longest episodes have
#: tens, GUI-Odyssey's about a hundred; an episode is held whole in memory until it is written)
MAX_EPISODE_STEPS = 10_000
#: the most screenshot bytes one imported episode may hold in all (its steps' files or cells, a
#: placeholder counted once): an episode is held whole in memory until it is written. A 40-step
#: AndroidControl episode of 1080x2400 PNGs holds 20-60 MB.
MAX_EPISODE_SCREENSHOT_BYTES = 256 * 1024 * 1024
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
        except UnidentifiedImageError:
            raise DatasetError(f"{where}: the screenshot is not a readable image (not {', '.join(SCREENSHOT_FORMATS)} "
                               "data)") from None
        except (OSError, ValueError, SyntaxError) as e:
            raise DatasetError(f"{where}: the screenshot is not a readable image ({json_error(e)})") from None
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
    nested deeper than the parser goes, or holding more than :data:`MAX_JSON_VALUES` values (counted
    before parsing), never a traceback."""
    values = raw.count(b",") + raw.count(b"[") + raw.count(b"{") + 1
    if values > MAX_JSON_VALUES:
        raise DatasetError(f"{where}: {what + ' ' if what else ''}holds up to {values:,} JSON values (its commas and "
                           f"brackets, counted before parsing); an import reads at most {MAX_JSON_VALUES:,} in one "
                           "record")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(f"{where}: {what + ' is ' if what else ''}not UTF-8 text (byte {raw[e.start]:#04x} "
                           f"at offset {e.start})") from None
    try:
        return json.loads(text)
    except ValueError as e:  # JSONDecodeError, and integers longer than Python reads (4300 digits)
        raise DatasetError(f"{where}: {what + ' is ' if what else ''}not JSON ({json_error(e)})") from None
    except RecursionError:
        raise DatasetError(f"{where}: {what + ' is ' if what else ''}JSON nested too deeply to read") from None


_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")


def json_error(e: BaseException) -> str:
    """Why a text did not parse, in our words: Python's own advice for long integers
    (``sys.set_int_max_str_digits()``) and object reprs (``<_io.BytesIO object at 0x...>``) never reach a
    user."""
    text = str(e)
    if "int_max_str_digits" in text or "integer string conversion" in text:
        return "a number of more than 4300 digits"
    return _OBJECT_REPR.sub("the data", text)[:200] or type(e).__name__


def lies_inside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``root`` or under it, by their names alone (``..`` folded, links not
    followed, nothing on disk touched)."""
    p, r = os.path.abspath(path), os.path.abspath(root)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (``a FIFO (named pipe)``, ``a character device``)."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
                        (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "not a regular file"


#: how a file is opened: never through a link at its last component (every other component under the
#: data folder is checked first), never waiting on a pipe (a FIFO swapped in after the check opens at once
#: and is refused on its type)
_O_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
            | getattr(os, "O_CLOEXEC", 0))

_NO_LINKS = ("an import reads only the regular files inside the folder it is given and follows no link, "
             "inside it or out")


def _link_target(path: str) -> str:
    try:
        return _short(os.readlink(path), 160)
    except OSError:
        return "?"


def _walk_inside(path: Path, root: Path, where: str, what: str) -> tuple[str, os.stat_result] | None:
    """``(the path under root's real path, its lstat)`` when ``path`` names a regular file inside ``root``
    reached through no link; ``None`` where there is nothing (or a folder); :class:`DatasetError` for a
    path leading outside ``root``, a link anywhere below ``root``, or something not a regular file."""
    shown = _short(str(path), 160)
    if not lies_inside(path, root):
        raise DatasetError(f"{where}: {what} {shown} leads outside {_short(str(root), 160)}; an import reads "
                           "files only from inside the folder it is given")
    real_root = os.path.realpath(root)  # the folder as the user named it: a link there is the user's choice
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    parts = [] if rel == "." else rel.split(os.sep)
    cur = real_root
    st = None
    for i, part in enumerate(parts):
        cur = os.path.join(cur, part)
        try:
            st = os.lstat(cur)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:
                return None
            raise DatasetError(f"{where}: {what} {shown} cannot be read ({e.strerror or e})") from None
        if stat.S_ISLNK(st.st_mode):
            at = "is" if i == len(parts) - 1 else f"lies under {_short(os.path.join(*parts[:i + 1]), 80)}, which is"
            raise DatasetError(f"{where}: {what} {shown} {at} a symbolic link (to {_link_target(cur)}); {_NO_LINKS}")
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            return None
    if st is None or stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        raise DatasetError(f"{where}: {what} {shown} is {kind_of(st.st_mode)}, not a regular file")
    return cur, st


def open_inside(path: Path, root: Path, where: str, *, what: str = "the file",
                limit: int | None = None) -> BinaryIO | None:
    """``path`` opened for reading when it is a regular file inside the folder ``root``, reached
    through no symbolic link below ``root`` and at most ``limit`` bytes (judged by its size before
    anything is read); ``None`` where there is no file (nothing there, or a folder).

    The one gate every importer reads its inputs through. Anything else is one :class:`DatasetError`
    naming ``where`` and the path, and nothing of it is opened: a path that leads outside ``root``
    (``..``, an absolute path), a link (to anywhere, inside ``root`` or out), something that is not a
    regular file (a FIFO, a device, a socket: judged with ``lstat`` before opening, so a pipe never
    blocks the import), a file larger than ``limit``. The opened descriptor is checked again (the
    same file, still regular, at the same real path), so nothing swapped in after the check is read.
    """
    found = _walk_inside(path, root, where, what)
    if found is None:
        return None
    real, st0 = found
    shown = _short(str(path), 160)
    try:
        fd = os.open(real, _O_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise DatasetError(f"{where}: {what} {shown} is a symbolic link; {_NO_LINKS}") from None
        raise DatasetError(f"{where}: {what} {shown} cannot be read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DatasetError(f"{where}: {what} {shown} is {kind_of(st.st_mode)}, not a regular file")
        try:  # what was really opened (Linux): a folder above swapped for a link after the check is caught
            opened = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            opened = real
        if (st.st_dev, st.st_ino) != (st0.st_dev, st0.st_ino) or opened != real:
            raise DatasetError(f"{where}: {what} {shown} changed while it was being opened (a link swapped in?); "
                               f"{_NO_LINKS}")
        if limit is not None and st.st_size > limit:
            raise DatasetError(f"{where}: {what} {shown} is {st.st_size:,} bytes, more than the "
                               f"{limit // 2**20} MiB an import reads")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return f


def read_inside(path: Path, root: Path, where: str, *, what: str = "screenshot",
                limit: int = MAX_SCREENSHOT_BYTES) -> bytes | None:
    """The bytes of ``path`` through :func:`open_inside` (a regular file inside ``root``, no link, at
    most ``limit`` bytes: the read stops at the limit); ``None`` where there is no file."""
    f = open_inside(path, root, where, what=what, limit=limit)
    if f is None:
        return None
    shown = _short(str(path), 160)
    with f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise DatasetError(f"{where}: {what} {shown} cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise DatasetError(f"{where}: {what} {shown} is more than the {limit // 2**20} MiB an import reads")
    return data


def source_kind(src: str | os.PathLike[str]) -> str:
    """``"file"`` or ``"folder"``: what the source an import was given is (the path as the user typed
    it, a link there followed); :class:`DatasetError` saying what it is otherwise (nothing there, a FIFO,
    a device such as ``/dev/null``)."""
    try:
        st = os.stat(src)
    except FileNotFoundError:
        raise DatasetError(f"{src}: no such file or folder") from None
    except OSError as e:
        raise DatasetError(f"{src}: cannot be read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        return "folder"
    if stat.S_ISREG(st.st_mode):
        return "file"
    raise DatasetError(f"{src} is {kind_of(st.st_mode)}, not a file or folder to import")


def open_source_file(path: Path, src: Path, *, limit: int | None = None) -> BinaryIO:
    """A data file :func:`iter_files` listed for the source ``src``, opened through :func:`open_inside`
    (the source file itself: its folder as the user named it)."""
    p, root = (Path(os.path.realpath(path)), Path(os.path.realpath(path)).parent) if path == src else (path, src)
    f = open_inside(p, root, str(path), what="the file", limit=limit)
    if f is None:
        raise DatasetError(f"{path}: no such file (it went away while the import ran)")
    return f


def iter_lines(path: Path, limit: int = MAX_RECORD_BYTES, *, src: Path | None = None) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of a text file, each line at most ``limit`` bytes (a longer one is one
    clear error, read no further than the limit). ``src``: the source the file was listed from
    (:func:`open_source_file`); by default the file alone."""
    f = open_source_file(Path(path), Path(src) if src is not None else Path(path))
    with f:
        n = 0
        while True:
            try:
                line = f.readline(limit + 1)
            except OSError as e:
                raise DatasetError(f"{path}: cannot read ({e.strerror or e})") from None
            if not line:
                return
            n += 1
            if len(line) > limit:
                raise DatasetError(f"{path}: line {n} is longer than {limit // 2**20} MiB")
            yield n, line


class EpisodeBudget:
    """An episode's size as a reader builds it: at most :data:`MAX_EPISODE_STEPS` steps and
    :data:`MAX_EPISODE_SCREENSHOT_BYTES` of screenshots (one bytes object counted once: a placeholder
    shared by many steps); past either, one :class:`DatasetError` before more is read."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.steps = 0
        self.bytes = 0
        self._seen: set[int] = set()

    def steps_declared(self, n: int) -> None:
        """A format that knows the count up front (a JSON list, a record's features): refused before any
        step is built."""
        if n > MAX_EPISODE_STEPS:
            raise DatasetError(f"{self.where}: the episode has {n:,} steps; an import takes at most "
                               f"{MAX_EPISODE_STEPS:,} in one episode")

    def step(self, screenshot: bytes | None = None) -> None:
        self.steps += 1
        if self.steps > MAX_EPISODE_STEPS:
            raise DatasetError(f"{self.where}: the episode has more than {MAX_EPISODE_STEPS:,} steps; an import "
                               f"takes at most that many in one episode")
        if screenshot is not None:
            self.screenshot(screenshot)

    def screenshot(self, data: bytes) -> None:
        if id(data) in self._seen:
            return
        self._seen.add(id(data))
        self.bytes += len(data)
        if self.bytes > MAX_EPISODE_SCREENSHOT_BYTES:
            raise DatasetError(f"{self.where}: the episode's screenshots hold more than "
                               f"{MAX_EPISODE_SCREENSHOT_BYTES // 2**20} MiB; an import holds at most that much of "
                               "one episode in memory")


#: the hidden folder an import builds its run in, beside ``--out``: ``.<out name>.importing-<hex>``
STAGING_INFIX = ".importing-"
#: inside a staging folder while its import runs: who builds it (host, pid, process start time)
STAGING_OWNER = ".import-owner.json"


def _staging_owner(folder: Path) -> tuple[str | None, int | None, int | None] | None:
    """The owner a staging folder records, ``None`` when it records none (or not readably)."""
    try:
        with open(folder / STAGING_OWNER, "rb") as f:  # our own small file: a link or pipe here is not ours
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            d = json.loads(f.read(4096))
        return str(d["host"]), int(d["pid"]), None if d.get("start") is None else int(d["start"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clean_stale_staging(parent: str | os.PathLike[str]) -> list[Path]:
    """Remove the staging folders in ``parent`` that imports killed on this host left behind (their
    recorded owner process is gone, or its pid now names a later process); returns those removed.
    A staging folder that records no owner, or one on another host, is left alone."""
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if not (entry.name.startswith(".") and STAGING_INFIX in entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        owner = _staging_owner(Path(entry.path))
        if owner is not None and writer_alive(*owner) is False:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def _removed_on_hangup(path: Path) -> Iterator[None]:
    """SIGHUP (a closed terminal) within the block raises, so the staging folder is removed as on any
    other error (SIGINT raises KeyboardInterrupt already; the command turns SIGTERM into one too).
    Main thread only; the handler before the block is put back."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGHUP"):
        yield
        return

    def on_hup(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt("hangup")

    try:
        previous = signal.signal(signal.SIGHUP, on_hup)
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous if previous is not None else signal.SIG_DFL)


def write_atomically(
    out_dir: str | os.PathLike[str],
    episodes: Callable[[], Iterable[Trajectory]],
    *,
    run_name: str,
    fmt: str,
    config: dict[str, Any],
) -> ImportResult:
    """Write ``episodes()`` as completed episodes of a new run in ``out_dir``, all or nothing.

    The store is built in a hidden sibling directory (``.<name>.importing-<hex>``, recording its owner
    process) and renamed into place at the end, so a bad record anywhere leaves nothing behind; so do
    Ctrl+C, SIGTERM (turned into an exception by the command) and SIGHUP. A staging folder that a
    killed import (SIGKILL) left is removed by the next import into the same folder once its owner is
    gone. An ``out_dir`` that exists and is not empty is refused (never clobbered).
    """
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DatasetError(f"{out} already exists and is not empty; choose a new --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_staging(out.parent)
    tmp = out.parent / f".{out.name}{STAGING_INFIX}{uuid.uuid4().hex[:8]}"
    n_ep = n_steps = 0
    try:
        with _removed_on_hangup(tmp):
            tmp.mkdir()
            (tmp / STAGING_OWNER).write_text(json.dumps({"host": HOST, "pid": os.getpid(),
                                                         "start": process_start(os.getpid())}))
            store = Store.open(tmp)
            try:
                run_id = store.create_run(run_name, env=fmt, algo="import", config=config)
                for traj in episodes():
                    try:
                        store.write_trajectory(run_id, traj)
                    except StoreError as e:  # the store's own check of a value the reader let through
                        msg = str(e).replace(str(tmp), str(out))
                        raise DatasetError(f"{config.get('source')}: episode {n_ep + 1} "
                                           f"({_short(traj.episode_id, 80)}): {msg}") from None
                    n_ep += 1
                    n_steps += traj.num_steps
                if n_ep == 0:
                    raise DatasetError(f"no episodes found in {config.get('source')}")
                store.set_run_status(run_id, "finished")
            finally:
                store.close()
            (tmp / STAGING_OWNER).unlink()
            if out.exists():
                out.rmdir()  # empty (checked above)
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ImportResult(str(out), run_id, n_ep, n_steps, fmt)


def iter_files(src: Path, patterns: tuple[str, ...]) -> Iterator[Path]:
    """``src`` itself (a file), or the regular files directly inside the folder ``src`` whose names match
    ``patterns``, sorted. Every entry is judged before the first is read, by ``lstat``: a matching link
    (to anywhere) or a matching FIFO, device or socket is one :class:`DatasetError` naming it; folders
    are passed over."""
    if source_kind(src) == "file":
        yield src
        return
    found = []
    try:
        entries = sorted(os.scandir(src), key=lambda e: e.name)
    except OSError as e:
        raise DatasetError(f"{src}: cannot be read ({e.strerror or e})") from None
    for entry in entries:
        if not any(fnmatch.fnmatchcase(entry.name, pat) for pat in patterns):
            continue
        p = Path(src) / entry.name
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue  # gone meanwhile
        if stat.S_ISLNK(mode):
            raise DatasetError(f"{p}: a symbolic link (to {_link_target(str(p))}); {_NO_LINKS}")
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            raise DatasetError(f"{p} is {kind_of(mode)}, not a regular file")
        found.append(p)
    if not found:
        raise DatasetError(f"{src}: no files matching {', '.join(patterns)}")
    yield from found
