"""Top-level packages guiagent installs besides itself, and the check that they are ours.

guiagent ships ``rl``, ``judge``, ``webui``, ``emulators`` and ``grounding`` as
top-level packages next to ``guiagent/``. Another installed package (or a folder on
``sys.path``, such as a script's own ``judge.py``) with one of those names would be
imported in their place and fail far from the cause. Each of ours carries the line
``__guiagent__ = True`` in its ``__init__.py``; :func:`check_packages` (run on
``import guiagent``) finds each name the way ``import`` would and reads that line in
the file it resolves to, without running foreign code.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

#: guiagent's own top-level packages besides ``guiagent``
PACKAGES: tuple[str, ...] = ("rl", "judge", "webui", "emulators", "grounding")

_MARKER = re.compile(r"^__guiagent__ = True\s*$", re.MULTILINE)


def _origin(name: str) -> str | None:
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None) if module is not None else importlib.util.find_spec(name)
    return getattr(spec, "origin", None) if spec is not None else None


def clash(name: str) -> str | None:
    """Where ``import name`` would load a package that is not guiagent's, or ``None`` if it is ours."""
    origin = _origin(name)
    if origin is None or not origin.endswith("__init__.py"):
        return origin or f"a namespace package or nothing at all (expected {name}/__init__.py)"
    try:
        text = Path(origin).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return origin
    return None if _MARKER.search(text) else origin


def check_packages(names: tuple[str, ...] = PACKAGES) -> None:
    """Raise one ``ImportError`` naming the first package that resolves to someone else's code."""
    here = Path(__file__).resolve().parent.parent
    for name in names:
        where = clash(name)
        if where is not None:
            raise ImportError(
                f"guiagent: the top-level package {name!r} resolves to {where}, which is not guiagent's "
                f"(guiagent ships its own {name!r} at {here / name}); another installed package or a "
                f"folder on sys.path has that name: uninstall or rename it, or take it off sys.path")
