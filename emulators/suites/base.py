"""The :class:`Suite` interface: a family of tasks that share a device kind (see :mod:`emulators.suites`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from emulators.base import Device, GuiEnv, Task

__all__ = ["Suite"]


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

    def check_device_options(self, options: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` (one line) for device options :meth:`make_device` would refuse,
        starting nothing (the command line checks ``--device`` with it before any file is made).
        The default checks nothing: a suite whose devices need more than their options (Android's
        emulators) checks them in its own preflight."""

    def make_env(self, task_id: str, device: Device | None = None, **options: Any) -> GuiEnv:
        return GuiEnv(device if device is not None else self.make_device(**options), self.task_class(task_id))

    def env_ids(self) -> list[str]:
        return [f"guiagent/{self.name}.{t}" for t in self.task_ids()]

    def task_sets(self) -> dict[str, tuple[str, ...]]:
        """Named groups of this suite's task ids (training sets), by name; none by default."""
        return dict(getattr(self, "TASK_SETS", {}))

    def held_out_names(self) -> frozenset[str]:
        """The names of the targets this suite holds out of training, as goals and screens write them
        (what no training example may be made to ask for; :meth:`Task.target_split`); none by default."""
        return frozenset()

    def close(self) -> None:
        """Stop what the suite started (app servers)."""
