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
from typing import Any

from emulators.base import GuiEnv
from emulators.suites.base import Suite
from emulators.suites.mixed import MixedSuite, split_env

#: suite name -> module defining ``SUITE`` (a :class:`Suite` instance or a zero-argument factory)
SUITE_MODULES: dict[str, str] = {
    "webapps": "emulators.suites.webapps",
    "miniwob": "emulators.suites.miniwob",
    "androidworld": "emulators.android.suite",
}


def get_suite(name: str) -> Suite:
    """The suite ``name`` names; ``"webapps,miniwob"``: a :class:`~emulators.suites.mixed.MixedSuite` of them."""
    if "," in name:
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
