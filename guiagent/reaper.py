"""Child processes end with the process that started them, however it ends (SIGKILL included).

A run starts helper processes: Ray's GCS, raylet, its agents and workers, Playwright's driver and
Chromium. A clean end (a finished run, Ctrl+C, SIGTERM) closes them; a SIGKILLed or crashed run cannot.
Ray's raylet and GCS die with it (Ray starts them with a parent-death signal), but their children do not:
Ray's dashboard and runtime-env agents, reparented, waited a minute or two on the dead GCS before they
gave up, and a worker's Chromium can outlive a worker that is gone.

:func:`watch` starts one small watchdog per process (this file, run by the same Python with no site
packages, so that it starts in ~20 ms and imports nothing of the project): it holds the read end of a
pipe whose write end only the watched process holds, and notes that process's descendants (pid and start
time, from ``/proc``) once a second. When the pipe reads end-of-file the watched process is gone; the
watchdog then SIGKILLs every descendant it noted that still runs (the same pid *and* start time: a pid
reused meanwhile by another process is left alone) and the descendants of those, and exits. It runs in a
session of its own, so a terminal's Ctrl+C for the job does not reach it. Linux only (``/proc``);
elsewhere :func:`watch` does nothing.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

__all__ = ["descendants", "watch"]

POLL_S = 1.0
"""how often the watchdog notes the watched process's descendants"""

_watchdog: subprocess.Popen | None = None
_watching_pid: int | None = None


def watch() -> int | None:
    """Start this process's watchdog (once per process; a forked child gets its own); returns its pid
    (None where it cannot run: no ``/proc``)."""
    global _watchdog, _watching_pid
    if _watching_pid == os.getpid() and _watchdog is not None:
        return _watchdog.pid
    if not os.path.isdir("/proc/self"):
        return None
    read, write = os.pipe()  # both ends non-inheritable: no other child of ours holds the write end
    try:
        _watchdog = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid())],
                                     stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True, close_fds=True)
    except OSError:
        os.close(write)
        return None
    finally:
        os.close(read)
    _watching_pid = os.getpid()
    _keep.append(write)  # held open for this process's life: its end is the watchdog's signal
    return _watchdog.pid


_keep: list[int] = []


def _table() -> dict[int, tuple[int, int]]:
    """Every process: pid -> (parent pid, start time in clock ticks since boot)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            # the command name (field 2) may hold spaces and parentheses: split after its last ')'
            fields = stat[stat.rindex(b")") + 2:].split()
            out[int(name)] = (int(fields[1]), int(fields[19]))
        except (OSError, ValueError, IndexError):
            continue
    return out


def descendants(pid: int, table: dict[int, tuple[int, int]] | None = None) -> dict[int, int]:
    """The processes below ``pid`` now (pid -> start time), children of children included."""
    table = _table() if table is None else table
    children: dict[int, list[int]] = {}
    for p, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(p)
    found: dict[int, int] = {}
    todo = list(children.get(pid, ()))
    while todo:
        p = todo.pop()
        if p in found or p not in table:
            continue
        found[p] = table[p][1]
        todo += children.get(p, ())
    return found


def _reap(noted: dict[int, int]) -> None:
    """SIGKILL every noted process still running (same pid and start time) and everything below them."""
    me = os.getpid()
    table = _table()
    doomed: dict[int, int] = {}
    for p, start in noted.items():
        if table.get(p, (None, None))[1] == start:
            doomed[p] = start
            doomed.update(descendants(p, table))
    for p in doomed:
        if p != me:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def _main(argv: list[str]) -> int:
    watched = int(argv[1])
    me = os.getpid()
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    noted: dict[int, int] = {}
    while True:
        ready, _, _ = select.select([0], [], [], POLL_S)
        if ready and not os.read(0, 4096):
            break  # end of file: the watched process is gone, however it ended
        table = _table()
        now = descendants(watched, table)
        now.pop(me, None)
        # forget those that ended (their pid may come back as someone else's), note the new ones
        noted = {p: s for p, s in noted.items() if table.get(p, (None, None))[1] == s}
        noted.update(now)
    _reap(noted)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
