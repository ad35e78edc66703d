"""Progress lines of the library go through :mod:`logging`; commands show them on stderr.

Library modules log to ``logging.getLogger(__name__)`` under the project's top-level
packages; :func:`show_progress` attaches one plain stderr handler to those loggers, so
stdout stays machine-readable with ``--json`` and other libraries' loggers are untouched.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["PACKAGES", "show_progress"]

PACKAGES = ("guiagent", "rl", "judge", "emulators", "grounding", "webui")


def show_progress(level: int = logging.INFO) -> None:
    """Print the project's log records at ``level`` and above on stderr, message text only."""
    for name in PACKAGES:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        if not any(getattr(h, "_guiagent", False) for h in logger.handlers):
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
            handler._guiagent = True  # type: ignore[attr-defined]
            logger.addHandler(handler)
        logger.propagate = False
