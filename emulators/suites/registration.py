"""Gymnasium registration: every task of every suite as ``guiagent/<suite>.<task_id>``.

``import emulators`` registers the ``webapps`` and ``miniwob`` tasks (listing them
imports neither Flask nor a browser). AndroidWorld's task list needs the
``android_world`` package, so its ids are registered on request only::

    import gymnasium, emulators
    env = gymnasium.make("guiagent/webapps.open_app")                 # the suite makes the device
    env = gymnasium.make("guiagent/miniwob.click-button", scale=2)    # options go to make_device
    # AndroidWorld: the module prefix makes gymnasium import (and so register) it first
    env = gymnasium.make("emulators.suites.androidworld_envs:guiagent/androidworld.ContactsAddContact",
                         endpoint=...)

``gymnasium.make`` keyword arguments: ``render_mode`` (``"rgb_array"``),
``max_steps`` (episode limit; default the task's), ``share_browser`` (default true:
all browser envs of the process share one Chromium, one context each) and any option
of the suite's ``make_device`` (``tree="none"``, ``scale=2``...). The env owns the
device it made: ``env.close()`` closes it. To drive a device you built, construct
:class:`~emulators.base.GuiEnv` directly. See docs/gymnasium.md.
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any, Iterable

import gymnasium

from emulators.base import GuiEnv
from emulators.suites import get_suite

__all__ = ["register_envs", "make_gym_env", "shared_browser", "DEFAULT_SUITES"]

log = logging.getLogger(__name__)

#: suites registered on ``import emulators`` (their task lists need no optional package)
DEFAULT_SUITES = ("webapps", "miniwob")

#: suites whose devices are browser pages
BROWSER_SUITES = ("webapps", "miniwob")

ENTRY_POINT = "emulators.suites.registration:make_gym_env"


def make_gym_env(*, suite: str, task_id: str, render_mode: str | None = None, max_steps: int | None = None,
                 share_browser: bool = True, **device_options: Any) -> GuiEnv:
    """The ``gymnasium.make`` entry point: a :class:`GuiEnv` (owning a new device) for one task.

    Browser suites put every env of the process in one shared Chromium (one context
    each: faster to start and lighter than a browser per env) unless
    ``share_browser=False`` or a ``chromium_path``/``headless`` option asks for a
    browser of its own. ``gymnasium.make`` deep-copies its keyword arguments, so a
    live browser handle cannot be passed in; this sharing stands in for it.
    """
    s = get_suite(suite)
    cls = s.task_class(task_id)
    if (suite in BROWSER_SUITES and share_browser and "browser" not in device_options
            and not {"chromium_path", "headless"} & set(device_options)):
        device_options["browser"] = shared_browser()
    return GuiEnv(s.make_device(**device_options), cls, max_steps=max_steps, render_mode=render_mode)


_BROWSER: Any = None
_BROWSER_LOCK = threading.Lock()


def shared_browser() -> Any:
    """The process's shared Chromium for envs made by ``gymnasium.make`` (launched on first use,
    relaunched if it died, closed at exit). Use it from the thread that launched it."""
    global _BROWSER
    with _BROWSER_LOCK:
        if _BROWSER is None or not _BROWSER.connected:
            # lazy: the browser device (asyncio, ~35 ms); `import emulators` lists tasks without it
            from emulators.browser import launch_browser
            _BROWSER = launch_browser()
            atexit.register(_close_shared_browser)
        return _BROWSER


def _close_shared_browser() -> None:
    global _BROWSER
    handle, _BROWSER = _BROWSER, None
    if handle is not None:
        try:
            handle.close()
        except Exception:  # already gone at interpreter exit
            pass


def register_envs(suites: Iterable[str] = DEFAULT_SUITES, *, skip_unavailable: bool = False) -> list[str]:
    """Register every task id of ``suites`` with Gymnasium; returns the ids (already registered ones too).

    Idempotent. A suite that cannot list its tasks (a missing optional package) raises
    the suite's own error naming what to install, or is left out with
    ``skip_unavailable`` (what ``import emulators`` does, so the import never fails).
    """
    ids: list[str] = []
    for name in suites:
        try:
            suite = get_suite(name)
            task_ids = suite.task_ids()
        except Exception as e:
            if not skip_unavailable:
                raise
            log.debug("gymnasium: suite %s not registered: %s", name, e)
            continue
        for task_id in task_ids:
            env_id = f"guiagent/{name}.{task_id}"
            ids.append(env_id)
            if env_id in gymnasium.registry:
                continue
            gymnasium.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"suite": name, "task_id": task_id})
    return ids
