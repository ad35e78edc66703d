"""Is a store writer still alive? Host name, PID and the process's start time.

A PID alone is not an identity: after a crash the number may be reused by an
unrelated process. On Linux the start time in ``/proc/<pid>/stat`` (clock ticks
since boot) tells the original process from a newcomer with the same PID; elsewhere
only the PID is checked.
"""

from __future__ import annotations

import os
import socket

__all__ = ["HOST", "STALE_S", "process_start", "writer_alive"]

HOST = socket.gethostname()
#: a running run with no write for this long counts as interrupted (see ``Store.recover``)
STALE_S = 3600.0


def process_start(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (Linux), else ``None``."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read()
        # the command name (field 2) may hold spaces and parentheses: split after its last ')'
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    except OSError:
        return False
    return True


def writer_alive(host: str | None, pid: int | None, start: int | None) -> bool | None:
    """``False`` when the writer ran on this host and its process is gone (or its PID now
    belongs to a later process); ``True`` when it is running here; ``None`` when it cannot
    be told from here (another host, or no writer recorded)."""
    if host is None or pid is None or host != HOST:
        return None
    if pid <= 0 or not _pid_alive(pid):
        return False
    if start is not None:
        now = process_start(pid)
        if now is not None and now != start:
            return False
    return True
