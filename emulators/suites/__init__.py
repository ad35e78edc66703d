"""Task suites and the env-id table.

A suite bundles task classes with the device they run on. Suites are looked up by
name (``webapps``, ``miniwob``, ``androidworld``) and imported lazily, so a
missing optional dependency only matters for the suite that needs it.

Env ids read ``guiagent/<suite>.<task_id>``; :func:`make` builds a
:class:`~emulators.base.GuiEnv` from one, and the same ids are registered with
Gymnasium (:mod:`emulators.suites.registration`, ``gymnasium.make``).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any

from emulators.base import Device, GuiEnv, Task

#: suite name -> module defining ``SUITE`` (a :class:`Suite` instance or a zero-argument factory)
SUITE_MODULES: dict[str, str] = {
    "webapps": "emulators.suites.webapps",
    "miniwob": "emulators.suites.miniwob",
    "androidworld": "emulators.android.suite",
}


class Suite(ABC):
    """A family of tasks that share a device kind."""

    name: str = ""

    @abstractmethod
    def task_ids(self) -> list[str]:
        """Every task id, sorted."""

    @abstractmethod
    def task_class(self, task_id: str) -> type[Task]:
        """The task class for ``task_id``; ``KeyError`` with the known ids if unknown."""

    @abstractmethod
    def make_device(self, **options: Any) -> Device:
        """A fresh device able to run every task of the suite."""

    def make_env(self, task_id: str, device: Device | None = None, **options: Any) -> GuiEnv:
        return GuiEnv(device if device is not None else self.make_device(**options), self.task_class(task_id))

    def env_ids(self) -> list[str]:
        return [f"guiagent/{self.name}.{t}" for t in self.task_ids()]

    def task_sets(self) -> dict[str, tuple[str, ...]]:
        """Named groups of this suite's task ids (training sets), by name; none by default."""
        return dict(getattr(self, "TASK_SETS", {}))

    def close(self) -> None:
        """Stop what the suite started (app servers)."""


def get_suite(name: str) -> Suite:
    """The suite ``name`` names; ``"webapps,miniwob"``: a :class:`~emulators.suites.mixed.MixedSuite` of them."""
    if "," in name:
        from emulators.suites.mixed import MixedSuite, split_env

        names = split_env(name)
        if len(names) > 1:
            return MixedSuite({n: get_suite(n) for n in names})
        name = names[0] if names else name
    try:
        module = SUITE_MODULES[name]
    except KeyError:
        raise KeyError(f"unknown suite {name!r}; known: {sorted(SUITE_MODULES)}") from None
    suite = importlib.import_module(module).SUITE
    return suite() if callable(suite) and not isinstance(suite, Suite) else suite


def parse_env_id(env_id: str) -> tuple[str, str]:
    """``guiagent/webapps.contacts_add`` -> ``("webapps", "contacts_add")``."""
    body = env_id.removeprefix("guiagent/")
    suite, sep, task = body.partition(".")
    if not sep or not task:
        raise ValueError(f"env id {env_id!r} is not of the form guiagent/<suite>.<task>")
    return suite, task


def make(env_id: str, **options: Any) -> GuiEnv:
    suite, task = parse_env_id(env_id)
    return get_suite(suite).make_env(task, **options)
