"""Progress lines of the library go through :mod:`logging`; commands show them on stderr.

Library modules log to ``logging.getLogger(__name__)`` under the project's top-level
packages; :func:`show_progress` attaches one plain stderr handler to those loggers, so
stdout stays machine-readable with ``--json`` and other libraries' loggers are untouched.
A record that carries an exception (``log.exception``: a slot whose task code or device
failed) shows the exception's type and first line, not its traceback: no traceback reaches
a user of a command. ``GUIAGENT_TRACEBACKS=1`` in the environment shows them (debugging).
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["PACKAGES", "show_progress"]

PACKAGES = ("guiagent", "rl", "judge", "emulators", "grounding", "webui")


class _Plain(logging.Formatter):
    """The message; an exception as ``: Type: first line`` (its traceback with ``GUIAGENT_TRACEBACKS=1``)."""

    def format(self, record: logging.LogRecord) -> str:
        if not record.exc_info or os.environ.get("GUIAGENT_TRACEBACKS") == "1":
            return super().format(record)
        err = record.exc_info[1]
        text = record.getMessage()
        if err is not None:
            first = (str(err).strip().splitlines() or [""])[0][:300]
            text += f": {type(err).__name__}" + (f": {first}" if first else "")
        return text


def show_progress(level: int = logging.INFO) -> None:
    """Print the project's log records at ``level`` and above on stderr, message text only."""
    for name in PACKAGES:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        ours = [h for h in logger.handlers if getattr(h, "_guiagent", False)]
        for h in ours:  # a second command in one process: today's stderr (a test's capture may be closed,
            h.stream = sys.stderr  # type: ignore[attr-defined]  # so not setStream, which flushes the old one)
        if not ours:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(_Plain("%(message)s"))
            handler._guiagent = True  # type: ignore[attr-defined]
            logger.addHandler(handler)
        logger.propagate = False
