"""Progress bars for long commands: a ``tqdm`` bar on stderr only when stderr is a terminal.

Commands print their results on stdout (``--json`` puts one JSON object on its last
line); progress goes to stderr and, when stderr is a pipe or a file (CI logs, a
redirect), the bar stays silent and the caller's periodic log lines stand in for it.
tqdm (a core dependency) draws the rate and the time left.

Example::

    with progress_bar(total=40, desc="eval", unit="episode") as bar:
        for ...:
            bar.update(1)
            bar.set_postfix(success="0.62")
"""

from __future__ import annotations

import sys
from typing import IO, Any

from tqdm import tqdm

__all__ = ["progress_bar", "is_terminal"]


def is_terminal(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (default stderr) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False


def progress_bar(total: int | None, desc: str, unit: str = "it", *, stream: IO[str] | None = None,
                 enabled: bool | None = None, **options: Any) -> Any:
    """A ``tqdm`` bar on ``stream`` (stderr), disabled unless it is a terminal (or ``enabled`` says so).

    The bar shows count/total, ``unit``/s and the time left; a disabled bar accepts the
    same calls and prints nothing. ``options`` go to ``tqdm`` (``initial=``, ``leave=``...).
    """
    stream = sys.stderr if stream is None else stream
    on = is_terminal(stream) if enabled is None else enabled
    return tqdm(total=total, desc=desc, unit=unit, file=stream, disable=not on, dynamic_ncols=True,
                smoothing=0.1, **options)
