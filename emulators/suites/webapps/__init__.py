"""The ``webapps`` suite: phone-style web apps served on 127.0.0.1 with server-side state.

Nine apps (contacts, messages, calendar, notes, settings, files, expenses, clock,
tasks) behind a launcher, rendered by a local Flask server (:mod:`.server`); each
episode gets its own session of app data generated from the task's seed
(:mod:`.world`), and tasks (:mod:`.tasks`) evaluate from that server-side state.
See docs/webapps.md.

Example::

    from emulators.suites.webapps import SUITE
    env = SUITE.make_env("settings_turn_on")
    obs, info = env.reset(seed=0)
    while True:
        obs, reward, terminated, truncated, info = env.step(env.oracle_action())
        if terminated or truncated:
            break
    env.close(); SUITE.close()
"""

from __future__ import annotations

import os

from collections.abc import Mapping
from typing import Any

from emulators.base import parse_flag
from emulators.snapshot import START_STATES
from emulators.suites.base import Suite

from . import snapshot as _snapshot
from .tasks import TASKS, WebTask
from .world import held_out_names

# WebTask's snapshot methods (session state + the page) live in .snapshot beside the server code
# they depend on; the task modules hold the tasks' data
_snapshot.install(WebTask)

__all__ = ["SUITE", "WebAppsSuite", "TASKS", "WebTask", "AppServer", "AppClient", "SHUFFLED_TASKS", "TASK_SETS"]

#: the easy tasks whose target each episode moves (docs/webapps.md, "Shuffled layouts")
SHUFFLED_TASKS: tuple[str, ...] = tuple(sorted(t for t, cls in TASKS.items() if cls.shuffle))
#: named training task sets of this suite (``Suite.task_sets``): ``fixed-easy`` keeps every target in its
#: place, ``shuffled`` moves it, ``goal-conditioned`` is both (the route from fixed to shuffled layouts)
TASK_SETS: dict[str, tuple[str, ...]] = {
    "fixed-easy": tuple(t.removesuffix("_shuffled") for t in SHUFFLED_TASKS),
    "shuffled": SHUFFLED_TASKS,
    "goal-conditioned": tuple(sorted({*SHUFFLED_TASKS, *(t.removesuffix("_shuffled") for t in SHUFFLED_TASKS)})),
}


class WebAppsSuite(Suite):
    """The webapps tasks on a phone-sized :class:`~emulators.browser.BrowserDevice`."""

    name = "webapps"
    TASK_SETS = TASK_SETS

    def task_ids(self) -> list[str]:
        return sorted(TASKS)

    def held_out_names(self) -> frozenset[str]:
        return held_out_names()

    def task_class(self, task_id: str) -> type[WebTask]:
        try:
            return TASKS[task_id]
        except KeyError:
            raise KeyError(f"unknown webapps task {task_id!r}; known: {', '.join(sorted(TASKS))}") from None

    @property
    def server_url(self) -> str:
        """Base url of the app server (started on first use)."""
        from .server import shared_server  # lazy: Flask and httpx (0.3 s), see __getattr__
        return shared_server()[0].url

    def make_device(self, *, browser: Any = None, page_loads: bool | str = False,
                    reset_by_restore: bool | str = True, **options: Any):
        """A phone-preset :class:`BrowserDevice` allowed to reach the app server only.

        ``options``: ``browser`` (a shared :class:`~emulators.browser_support.BrowserHandle`)
        and any :class:`~emulators.browser.BrowserConfig` field as an override
        (``tree="none"``, ``image_format="jpeg"``...). Contexts are reused across
        resets by default: the apps keep no state in the browser. The apps render their
        pages in the open document (resets, links, redirects, Back: see docs/webapps.md);
        ``page_loads=True`` makes every one of them a page load instead (same screens, more CPU
        a page change: docs/benchmarks.md). ``reset_by_restore`` (on by default): envs on the
        device restore a start this process built before (the same task and parameters: the
        episodes of a group) instead of building it again (:class:`~emulators.snapshot.StartStates`;
        the same screen, session and milestones for less CPU: docs/gymnasium.md).
        """
        # lazy: the browser device (asyncio, ~35 ms); `import emulators` lists tasks without it
        from emulators.browser import BrowserConfig, BrowserDevice

        from .server import shared_server  # lazy: Flask and httpx, see __getattr__
        server = shared_server()[0]
        page_loads = parse_flag("page_loads", page_loads)
        reset_by_restore = parse_flag("reset_by_restore", reset_by_restore)
        if page_loads:
            options["in_page_reset"] = False
            options["init_script"] = "window.__webappsPageLoads = true;\n" + options.get("init_script", "")
        options.setdefault("reuse_context", True)
        # generous settling cap: on a loaded machine a save-then-navigate can outlast the default
        options.setdefault("settle_timeout_ms", 4000)
        config = BrowserConfig.phone(allowed_origins=(server.url,), home_url=server.url + "/", **options)
        device = BrowserDevice(config, browser=browser)
        if reset_by_restore and not page_loads:
            device.start_states = START_STATES
        return device

    def check_device_options(self, options: Mapping[str, Any]) -> None:
        # lazy: the browser device (asyncio, ~35 ms); `import emulators` lists tasks without it
        from emulators.browser import BrowserConfig, check_config_options

        for flag in ("page_loads", "reset_by_restore"):
            if flag in options:
                parse_flag(flag, options[flag])
        origin = "http://127.0.0.1:1"  # the app server's, which is not started for a check
        check_config_options(lambda **o: BrowserConfig.phone(allowed_origins=(origin,), home_url=origin + "/", **o),
                             options, suite=self.name, extra=("page_loads", "reset_by_restore"),
                             fixed=("allowed_origins", "home_url"))
        check_chromium_path(options)

    def close(self) -> None:
        """Stop the app server (a later episode starts it again)."""
        from .server import stop_shared_server  # lazy: Flask and httpx, see __getattr__
        stop_shared_server()


def check_chromium_path(options: Mapping[str, Any]) -> None:
    """A ``chromium_path`` option that names no executable file: ``ValueError`` (one line) now, before
    any file is made, rather than a launch failure in every slot of the run (the browser suites'
    option check; starts nothing). Without the option, ``$GUIAGENT_CHROMIUM`` (what a launch then
    takes) is checked the same way; its error has ``from_environment`` set."""
    path = options.get("chromium_path")
    name = "chromium_path"
    if not path:  # then $GUIAGENT_CHROMIUM, when set, is the one a launch takes
        path, name = os.environ.get("GUIAGENT_CHROMIUM"), "GUIAGENT_CHROMIUM"
    if not path:
        return
    # lazy: the browser pieces (playwright's greenlet); `import emulators` lists tasks without them
    from emulators.browser_support import ChromiumNotFound, find_chromium

    try:
        find_chromium(str(path))
    except ChromiumNotFound as e:
        err = ValueError(f"{name}: {e}")
        err.from_environment = name != "chromium_path"  # type: ignore[attr-defined]  # not an option's fault
        raise err from None


SUITE = WebAppsSuite()


def __getattr__(name: str) -> Any:
    # the server pulls in Flask and httpx (~0.4 s): imported on first use, so listing the
    # task ids (Gymnasium registration on ``import emulators``) stays cheap
    if name in ("AppServer", "AppClient", "shared_server", "stop_shared_server"):
        from . import server  # lazy: Flask and httpx (0.3 s)
        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
