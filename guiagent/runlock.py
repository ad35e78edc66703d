"""One owner per run folder: the lock every command that writes a run takes for its whole life.

``guiagent train`` (new, ``--resume``, ``--overwrite``), ``guiagent eval --out``, ``guiagent sft --out`` and
``guiagent data import --out`` hold :func:`run_lock` on the folder they write while they run; a second
writer of the same folder is refused in one line (:class:`RunInUse`, exit status 2) that names the holder
(pid, host, command, since when), and writes nothing. Readers (the web UI, ``guiagent export``) take no
lock.

The lock is ``fcntl.flock`` on a small file beside the folder, ``.<name>.guiagent-lock`` in its parent
(the folder may not exist yet, and nothing is added inside it), held on an open descriptor for the
process's life: the kernel releases it when the process ends, however it ends, so a SIGKILLed owner leaves
no lock that stays taken. The file also holds the owner's record (JSON: host, pid, process start time,
command, since). A clean release deletes the file; a file found with a record in it was left by an owner
that died without releasing (SIGKILL, a crash, power loss): it is *stale*, taken over with one warning line
naming that owner. A lock held by a process other than its recorded owner (a leftover child that inherited
the descriptor after the owner died: the owner's pid is gone or now names a later process, told by the
process start time) is stale too, and replaced.

Linux and macOS (``fcntl``); on a file system without ``flock`` (some network mounts) the lock cannot be
taken and the command says so in one line.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from guiagent.config import ConfigError
from guiagent.store._proc import HOST, process_start, writer_alive

__all__ = ["LOCK_SUFFIX", "RunInUse", "RunLock", "lock_path", "run_lock"]

log = logging.getLogger(__name__)

#: the lock file of folder ``runs/x`` is ``runs/.x`` + this
LOCK_SUFFIX = ".guiagent-lock"
#: the most of a lock file read back (the owner record is a few hundred bytes)
_RECORD_MAX = 4096


class RunInUse(ConfigError):
    """Another process holds the run folder's lock: bad input to this command (one line, exit 2)."""


@dataclass(frozen=True)
class Owner:
    """Who holds (or held) a run folder's lock."""

    host: str | None
    pid: int | None
    start: int | None
    command: str
    since: str

    def describe(self) -> str:
        who = f"pid {self.pid}" if self.pid is not None else "a process"
        if self.host and self.host != HOST:
            who += f" on host {self.host}"
        return f"{who} ({self.command or 'a guiagent command'}, since {self.since or 'an unknown time'})"


def lock_path(folder: str | os.PathLike[str]) -> Path:
    """The lock file of ``folder``: ``.<name>.guiagent-lock`` beside it (its real path: two spellings of one
    folder, a link and its target, share one lock)."""
    real = Path(os.path.realpath(os.path.expanduser(os.fspath(folder))))
    if not real.name:  # the file system root: no folder beside it
        return real / LOCK_SUFFIX
    return real.parent / f".{real.name}{LOCK_SUFFIX}"


def _read_owner(fd: int) -> Owner | None:
    """The owner record in the lock file open on ``fd`` (None: empty, or not a record of ours)."""
    try:
        raw = os.pread(fd, _RECORD_MAX, 0)
        if not raw.strip():
            return None
        d = json.loads(raw.decode("utf-8"))
        if not isinstance(d, dict):
            return None
        pid, start = d.get("pid"), d.get("start")
        return Owner(host=str(d["host"]) if d.get("host") is not None else None,
                     pid=pid if type(pid) is int else None, start=start if type(start) is int else None,
                     command=str(d.get("command", ""))[:300], since=str(d.get("since", ""))[:40])
    except (OSError, ValueError, KeyError, UnicodeDecodeError):
        return None


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class RunLock:
    """The lock of one run folder; :meth:`acquire` takes it or raises :class:`RunInUse`, :meth:`release`
    gives it back (and deletes the lock file). ``command`` goes into the owner record (what a refused
    writer is told)."""

    def __init__(self, folder: str | os.PathLike[str], command: str):
        self.folder = str(folder)
        self.command = _printable(" ".join(command.split()))[:300]
        self.path = lock_path(folder)
        self.fd: int | None = None
        self._created: list[Path] = []  # folders made to hold the lock file: removed at release when empty
        self.took_over: Owner | None = None

    def acquire(self) -> RunLock:
        self._make_parents()
        for _ in range(5):  # a file replaced or deleted under us between open and flock: open it again
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_owner(fd)
                os.close(fd)
                if owner is not None and writer_alive(owner.host, owner.pid, owner.start) is False:
                    # the recorded owner is gone, yet the lock is held: a process that inherited its descriptor
                    # outlived it. That lock is stale: the file is replaced, so this writer locks a new one
                    log.warning("%s: the lock of %s is held by a leftover of %s, which has ended: taking it over",
                                self.path, self.folder, owner.describe())
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.path)
                    continue
                raise RunInUse(self._in_use(owner)) from None
            except OSError as e:
                os.close(fd)
                self._remove_parents()
                raise ConfigError(f"{self.folder}: cannot lock the run folder ({self.path}: "
                                  f"{e.strerror or e}); is it on a file system without file locks?") from None
            if not self._still_there(fd):
                os.close(fd)
                continue
            previous = _read_owner(fd)
            if previous is not None:  # its owner ended without releasing it (a kill, a crash)
                self.took_over = previous
                log.warning("%s: taking over the run folder from %s, which ended without releasing it",
                            self.folder, previous.describe())
            self.fd = fd
            self._write_record()
            return self
        raise RunInUse(f"{self.folder}: its lock file {self.path} keeps changing: another writer is starting; "
                       "try again")

    def _make_parents(self) -> None:
        missing = []
        for p in self.path.parents:
            if p.exists() or p.is_symlink():
                break
            missing.append(p)
        for p in reversed(missing):
            try:
                p.mkdir()
                self._created.append(p)
            except FileExistsError:
                pass
            except OSError as e:
                self._remove_parents()
                raise ConfigError(f"{self.folder}: cannot be created ({e.strerror or e})") from None

    def _remove_parents(self) -> None:
        for p in reversed(self._created):
            with contextlib.suppress(OSError):
                p.rmdir()
        self._created = []

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as e:
            self._remove_parents()
            raise ConfigError(f"{self.folder}: cannot lock the run folder ({self.path}: "
                              f"{e.strerror or e})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            self._remove_parents()
            raise ConfigError(f"{self.folder}: cannot lock the run folder ({self.path} is not a regular file)")
        return fd

    def _still_there(self, fd: int) -> bool:
        """The locked file is the one at the lock's path (not one a releasing owner or a takeover unlinked)."""
        try:
            here = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)

    def _in_use(self, owner: Owner | None) -> str:
        who = owner.describe() if owner is not None else "another process (its record is not written yet)"
        return (f"{self.folder} is in use by {who}: one command writes a run folder at a time; wait for it to "
                f"end or stop it (the lock: {self.path})")

    def _write_record(self) -> None:
        pid = os.getpid()
        record = {"host": HOST, "pid": pid, "start": process_start(pid), "command": self.command,
                  "folder": os.path.abspath(self.folder),
                  "since": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}
        data = (json.dumps(record) + "\n").encode()
        assert self.fd is not None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)  # one small write: a refused writer reads the whole record or none

    def release(self) -> None:
        """Delete the lock file, then let the lock go (in that order: a writer that opened the old file
        finds it unlinked and opens the path again). Idempotent."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            if self._still_there(fd):
                os.unlink(self.path)
        except OSError as e:
            if e.errno != errno.ENOENT:
                log.warning("%s: the lock file could not be removed (%s)", self.path, e.strerror or e)
        finally:
            os.close(fd)
        self._remove_parents()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def run_lock(folder: str | os.PathLike[str], command: str) -> Iterator[RunLock]:
    """Hold ``folder``'s lock within the block (:class:`RunInUse` when another process holds it)."""
    lock = RunLock(folder, command).acquire()
    try:
        yield lock
    finally:
        lock.release()
