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

``gymnasium.make`` keyword arguments: ``render_mode`` (``"rgb_array"``, ``"rgb_array_list"``,
``"human"`` where there is a display), ``max_steps`` (episode limit; default the task's: each
task has its own, so ``env.spec.max_episode_steps`` is None), ``share_browser`` (default true:
all browser envs of the process share one Chromium, one context each) and any option
of the suite's ``make_device`` (``tree="none"``, ``scale=2``...). The env owns the
device it made: ``env.close()`` closes it. To drive a device you built, construct
:class:`~emulators.base.GuiEnv` directly. Tasks whose first screen is not the same on two
resets of one seed (pages that move with time) are registered ``nondeterministic``.
Vector envs work in every multiprocessing context: a forked worker starts its own Chromium
and app server. See docs/gymnasium.md.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import sys
import threading
from typing import Any, Iterable

import gymnasium
from gymnasium.wrappers import HumanRendering

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
                 share_browser: bool = True, **device_options: Any) -> gymnasium.Env:
    """The ``gymnasium.make`` entry point: a :class:`GuiEnv` (owning a new device) for one task.

    Browser suites put every env of the process in one shared Chromium (one context
    each: faster to start and lighter than a browser per env) unless
    ``share_browser=False`` or a ``chromium_path``/``headless`` option asks for a
    browser of its own. ``gymnasium.make`` deep-copies its keyword arguments, so a
    live browser handle cannot be passed in; this sharing stands in for it.

    ``render_mode``: ``"rgb_array"`` (``render()`` returns the last frame), ``"rgb_array_list"``
    (``gymnasium.make`` wraps the env in ``RenderCollection``) or ``"human"``: the env in
    Gymnasium's ``HumanRendering``, a pygame window showing each frame, which needs pygame and a
    display; without one it raises ``RuntimeError`` here, before a device is made.
    """
    if render_mode == "human":
        _check_human_rendering()
    s = get_suite(suite)
    cls = s.task_class(task_id)
    if (suite in BROWSER_SUITES and share_browser and "browser" not in device_options
            and not {"chromium_path", "headless"} & set(device_options)):
        device_options["browser"] = shared_browser()
    env = GuiEnv(s.make_device(**device_options), cls, max_steps=max_steps,
                 render_mode="rgb_array" if render_mode == "human" else render_mode)
    return HumanRendering(env) if render_mode == "human" else env


#: what ``gymnasium.make`` reads off the entry point: the env's modes, and ``human`` done here
#: (``rgb_array_list`` Gymnasium adds itself from ``rgb_array``)
make_gym_env.metadata = {**GuiEnv.metadata,  # type: ignore[attr-defined]
                         "render_modes": [*GuiEnv.metadata["render_modes"], "human"]}


def _check_human_rendering() -> None:
    """Raise, with what to do, where ``render_mode="human"`` cannot show a window."""
    if importlib.util.find_spec("pygame") is None:
        raise gymnasium.error.DependencyNotInstalled(
            'render_mode="human" shows the frames in a pygame window: pip install pygame '
            '(or use render_mode="rgb_array" and env.render())')
    display = any(os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER"))
    if sys.platform.startswith("linux") and not display:
        raise RuntimeError(
            'render_mode="human" opens a window, and there is no display here (DISPLAY and WAYLAND_DISPLAY '
            'are unset): use render_mode="rgb_array" (env.render() returns the frame) or "rgb_array_list", '
            "or set SDL_VIDEODRIVER=offscreen to run it without showing the window")


_BROWSER: Any = None
_BROWSER_LOCK = threading.Lock()


def shared_browser() -> Any:
    """The process's shared Chromium for envs made by ``gymnasium.make`` (launched on first use,
    relaunched if it died, closed at exit). Use it from the thread that launched it.

    A forked child (a ``fork`` context's vector-env worker) launches its own: the parent's
    browser is driven through the parent's Playwright connection, which the child cannot use
    (:func:`_forget_in_forked_child`)."""
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


def _forget_in_forked_child() -> None:
    """After ``os.fork``, in the child: drop the parent's shared browser and its thread's Playwright
    driver, without closing them (they are the parent's, still running there).

    The child's copies talk to the parent's Playwright driver over pipes both processes now hold;
    a browser, a context or a driver started through them answers the wrong process. Forgetting
    them makes the child's first env launch a driver and a Chromium of its own. The same goes for
    a browser device launching its own Chromium (``share_browser=False``): it starts on the
    thread's driver, which :mod:`emulators.browser_support` forgets in the child.
    """
    global _BROWSER, _BROWSER_LOCK
    _BROWSER, _BROWSER_LOCK = None, threading.Lock()  # a lock another thread held at the fork stays held
    # the thread's Playwright driver: emulators.browser_support forgets it in the child itself


os.register_at_fork(after_in_child=_forget_in_forked_child)


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
            # a task class that says its resets are not reproducible (MiniWoB pages that move with time)
            nondeterministic = bool(getattr(suite.task_class(task_id), "nondeterministic", False))
            gymnasium.register(id=env_id, entry_point=ENTRY_POINT, nondeterministic=nondeterministic,
                               kwargs={"suite": name, "task_id": task_id})
    return ids
