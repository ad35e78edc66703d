"""What a command wrote in a folder, and what it did not: the rule every ``--overwrite`` applies.

A command that replaces its earlier output (``guiagent export --overwrite``, ``guiagent train --overwrite``)
deletes only what it wrote: it keeps a record of the entries it wrote, and an entry under the folder that
the record does not hold (a file, a link, or a folder none of its entries lies in) is *foreign*: the
command then refuses, naming it, and deletes nothing. :func:`entries` lists a folder the way the records
do; :func:`foreign` gives the entries a record does not cover.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

__all__ = ["SQLITE_COMPANIONS", "entries", "foreign", "shown"]

#: files SQLite keeps beside a database while it is open (a reader may create them after the writer ended)
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def entries(folder: str | os.PathLike[str], *, folders: bool = False) -> list[str]:
    """Every entry under ``folder`` that is not a folder (files, links, links to folders: never followed),
    as sorted relative POSIX paths; with ``folders``, the folders under it too."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        base = Path(dirpath)
        out += [(base / n).relative_to(folder).as_posix() for n in filenames]
        out += [(base / n).relative_to(folder).as_posix() for n in dirnames if folders or (base / n).is_symlink()]
    return sorted(out)


def foreign(folder: str | os.PathLike[str], written: Iterable[str], *, sqlite_companions: bool = False) -> list[str]:
    """The entries under ``folder`` (files, links and folders, relative, sorted) that ``written`` (relative
    POSIX paths the command wrote) does not cover: neither listed, nor a folder a listed entry lies in, nor
    (``sqlite_companions``) the ``-wal``/``-shm``/``-journal`` file of a listed one."""
    listed = {str(PurePosixPath(w)) for w in written}
    inside = {p.as_posix() for w in listed for p in PurePosixPath(w).parents if str(p) != "."}
    out = []
    for entry in entries(folder, folders=True):
        if entry in listed or entry in inside:
            continue
        if sqlite_companions and any(entry.endswith(s) and entry[:-len(s)] in listed for s in SQLITE_COMPANIONS):
            continue
        out.append(entry)
    return out


def shown(names: list[str], limit: int = 3) -> str:
    """``a, b, c and 4 more``: a few names of a list for a one-line message."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
