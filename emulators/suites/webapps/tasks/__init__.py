"""Every task template of the webapps suite, by id."""

from __future__ import annotations

from importlib import import_module

from .base import WebTask

_MODULES = ("easy", "contacts", "messages", "calendar", "notes", "system", "expenses", "clock", "todo",
            "composite", "shuffled")


def _collect() -> dict[str, type[WebTask]]:
    out: dict[str, type[WebTask]] = {}
    for name in _MODULES:
        try:
            module = import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            continue
        for cls in module.TASKS:
            if cls.task_id in out:
                raise ValueError(f"duplicate webapps task id {cls.task_id!r}")
            out[cls.task_id] = cls
    return dict(sorted(out.items()))


TASKS: dict[str, type[WebTask]] = _collect()

__all__ = ["TASKS", "WebTask"]
