"""A full disk said in the run's words: what was being written, and where.

The operating system says ``[Errno 28] No space left on device`` (SQLite: ``database or disk is full``) and
no more. :func:`writing` wraps one thing a run writes (its checkpoint, its episodes, a model, the metrics):
a full disk inside it (ENOSPC; a quota, EDQUOT; the file size limit, EFBIG; SQLite's SQLITE_FULL) becomes
:class:`NoSpace`, whose message names that thing and its path::

    no space left on the device while writing the checkpoint to runs/grpo/checkpoint

A full disk is no fault of the input: the command exits 1 (not 2, the code for bad input) and the run is
stored ``interrupted``: free some space and resume it. The innermost :func:`writing` names the write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sqlite3
from collections.abc import Iterator

__all__ = ["FULL_ERRNOS", "NoSpace", "describe", "disk_full", "writing"]

#: the errors of a write that found no room: the device is full, the user's quota is, or the file size limit
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"

_WHY = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is used up",
        errno.EFBIG: "the file size limit was reached"}


def _code(e: BaseException) -> int | None:
    """The errno of a full disk that ``e`` carries, else None: an OSError's own; SQLite's SQLITE_FULL (as
    ENOSPC); a library written in Rust (safetensors) words an I/O error as ``... (os error 28)``."""
    if isinstance(e, NoSpace):
        return _code(e.cause) or errno.ENOSPC
    if isinstance(e, OSError):
        return e.errno if e.errno in FULL_ERRNOS else None
    if isinstance(e, sqlite3.OperationalError):
        full = getattr(e, "sqlite_errorcode", None) == _SQLITE_FULL or "database or disk is full" in str(e)
        return errno.ENOSPC if full else None
    if isinstance(e, Exception):
        m = _RUST_IO.search(str(e))
        return int(m.group(1)) if m and int(m.group(1)) in FULL_ERRNOS else None
    return None


_RUST_IO = re.compile(r"\(os error ([0-9]+)\)")


def disk_full(e: BaseException) -> bool:
    """``e`` says a write found no room (see :data:`FULL_ERRNOS`, and SQLite's SQLITE_FULL)."""
    return _code(e) is not None


class NoSpace(RuntimeError):
    """A write found no room on its device: a runtime failure (exit 1; the run is stored ``interrupted``)."""

    def __init__(self, what: str, where: str | os.PathLike[str] | None, cause: BaseException):
        self.what, self.where, self.cause = what, None if where is None else os.fspath(where), cause
        code = _code(cause) or errno.ENOSPC
        why = _WHY.get(code, _WHY[errno.ENOSPC])
        place = f" to {self.where}" if self.where else ""
        then = "raise the limit (ulimit -f)" if code == errno.EFBIG else "free some space"
        super().__init__(f"{why} while writing {what}{place}: {then}, then run it again (a run: --resume)")


@contextlib.contextmanager
def writing(what: str, where: str | os.PathLike[str] | None) -> Iterator[None]:
    """Within the block, a full disk raises :class:`NoSpace` naming ``what`` and ``where`` (an inner block's
    :class:`NoSpace` passes through: it knows better); every other error passes unchanged."""
    try:
        yield
    except NoSpace:
        raise
    except Exception as e:
        if disk_full(e):
            raise NoSpace(what, where, e) from e
        if _stream_writer_failed(e) and where is not None and _no_room(where):
            raise NoSpace(what, where, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))) from e
        raise


#: torch.save's zip writer words a failed write without its errno: ``basic_ios::clear: iostream error``, then,
#: on closing the archive, ``[enforce fail at inline_container.cc:...] . unexpected pos 1152 vs 1046``; older
#: releases ``PytorchStreamWriter failed writing file ...``
_TORCH_WRITE = re.compile(r"iostream error|unexpected pos \d+ vs \d+|PytorchStreamWriter failed writing|"
                          r"file write failed")
#: free bytes under which a write that failed without an errno is taken for a full disk
NO_ROOM_BYTES = 8 << 20


def _stream_writer_failed(e: BaseException) -> bool:
    """``e`` (or an error it was raised while handling) is torch's zip writer failing to write."""
    seen = 0
    cur: BaseException | None = e
    while cur is not None and seen < 8:
        if isinstance(cur, RuntimeError) and _TORCH_WRITE.search(str(cur)):
            return True
        cur, seen = cur.__cause__ or cur.__context__, seen + 1
    return False


def _no_room(where: str | os.PathLike[str]) -> bool:
    """The file system holding ``where`` (or its nearest existing parent) has under :data:`NO_ROOM_BYTES`
    free: a write that failed there without saying why found no room."""
    path = os.path.abspath(os.fspath(where))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < NO_ROOM_BYTES


def describe(e: BaseException) -> str | None:
    """The one line for a full disk that reached a command with no :func:`writing` around it (the file the
    operating system names, if it named one); None when ``e`` is not a full disk."""
    if isinstance(e, NoSpace):
        return str(e)
    if not disk_full(e):
        return None
    if isinstance(e, sqlite3.OperationalError):
        return str(NoSpace("the trajectory store", None, e))
    return str(NoSpace("a file", getattr(e, "filename", None) if isinstance(e, OSError) else None, e))
