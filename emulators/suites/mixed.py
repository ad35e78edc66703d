"""Several suites as one: ``--env webapps,miniwob`` (browsers), ``--env androidworld,webapps`` (a fleet
of emulators and browsers).

A :class:`MixedSuite` names its tasks ``<suite>.<task>`` (``webapps.open_app``,
``miniwob.click-button``: the env id without ``guiagent/``), so one task list, one sampling plan
and one store hold them all; each task class keeps its own suite (``TaskSpec.suite``), which is
how metrics are split per suite. Devices differ per suite, so a mixed run's environments live in a
:class:`~emulators.pool_mixed.MixedPool` (one pool per suite, each placed where its suite can run),
never in one device: :meth:`make_device` refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulators.base import Device, Task
from emulators.suites.base import Suite

__all__ = ["MixedSuite", "qualify", "split_env", "split_task"]


def split_env(env: str) -> list[str]:
    """``"webapps, miniwob"`` -> ``["webapps", "miniwob"]`` (order kept, repeats dropped)."""
    out: list[str] = []
    for name in env.split(","):
        name = name.strip()
        if name and name not in out:
            out.append(name)
    return out


def suite_options(suite: str, suites: Sequence[str], options: Mapping[str, Any]) -> dict[str, Any]:
    """The device options of ``suite`` in a run over ``suites``: ``<suite>.<key>`` keys for that suite
    only (``androidworld.farm``), unprefixed keys for every suite."""
    out: dict[str, Any] = {}
    for k, v in options.items():
        prefix, sep, key = k.partition(".")
        if sep and prefix in suites:
            if prefix == suite:
                out[key] = v
        else:
            out.setdefault(k, v)
    return out


def qualify(suite: str, task_id: str) -> str:
    return f"{suite}.{task_id}"


def split_task(task_id: str) -> tuple[str, str]:
    """``"webapps.open_app"`` -> ``("webapps", "open_app")``; ``ValueError`` without a suite part."""
    suite, sep, task = task_id.partition(".")
    if not sep or not task:
        raise ValueError(f"task {task_id!r} of a mixed run must read <suite>.<task> (e.g. webapps.open_app)")
    return suite, task


class MixedSuite(Suite):
    """The union of ``suites`` (already built :class:`Suite` objects, by name)."""

    def __init__(self, suites: dict[str, Suite]):
        if len(suites) < 2:
            raise ValueError("a mixed suite needs at least two suites")
        self.suites = suites
        self.name = ",".join(suites)

    def task_ids(self) -> list[str]:
        return [qualify(name, t) for name, s in self.suites.items() for t in s.task_ids()]

    def task_class(self, task_id: str) -> type[Task]:
        try:
            suite, task = split_task(task_id)
            return self.suites[suite].task_class(task)
        except (ValueError, KeyError) as e:
            raise KeyError(f"unknown task {task_id!r} in {self.name}: {e.args[0] if e.args else e}") from None

    def held_out_names(self) -> frozenset[str]:
        return frozenset().union(*(s.held_out_names() for s in self.suites.values()))

    def make_device(self, **options: Any) -> Device:
        raise TypeError(f"{self.name} mixes device kinds: run it on a MixedPool (emulators.pool_mixed), "
                        "one pool per suite")

    def close(self) -> None:
        for s in self.suites.values():
            s.close()
