"""A webapps reset shows its start page once, in a real Chromium: the first reset of a device
loads it; later ones render it in the open document (no page load) and show what a load shows.

The browser context of the device is watched for requests to the app server: a reset makes
one request for the episode's start page (the session's launcher, or the in-app page a task
starts on), a navigation on a fresh device (or with ``in_page_reset=False``), a ``fetch``
after that, and no other document load, whether it follows a fresh device, a finished
episode or the same seed again. An in-page reset after a messy episode (a form with typed and
selected text, the page scrolled, history, a pending timer) gives the same screenshot, tree,
url, history and server log as a page load, and the same screen after a Tab press.
"""

from __future__ import annotations

import dataclasses

import pytest

from emulators.base import GuiEnv
from emulators.suites.webapps import SUITE, TASKS
from guiagent.types import Click, Key, Scroll, Type

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def device(shared_browser):
    dev = SUITE.make_device(browser=shared_browser)
    yield dev
    dev.close()
    SUITE.close()


def _in_page(device, on: bool) -> None:
    device.config = dataclasses.replace(device.config, in_page_reset=on)


@pytest.mark.parametrize("task_id, start, in_page", [("open_app", "", True), ("settings_turn_on", "settings", True),
                                                     ("go_home", None, True), ("go_home", None, False)])
def test_each_reset_shows_one_page(shared_browser, task_id, start, in_page):
    # reset_by_restore off: the same seed again would restore its start, with no request at all
    # (tests/emulators/test_snapshot_webapps.py)
    device = SUITE.make_device(browser=shared_browser, tree="none", in_page_reset=in_page, reset_by_restore=False)
    env = GuiEnv(device, TASKS[task_id])
    server_url = SUITE.server_url
    seen: list[tuple[bool, str, str]] = []

    def on_request(request):
        if request.url.startswith(server_url):
            seen.append((request.is_navigation_request(), request.resource_type, request.url))

    try:
        for i, seed in enumerate((0, 1, 1)):
            seen.clear()
            if i == 1:  # the context exists from the first reset on (reused across resets)
                device.page.context.on("request", on_request)
            obs, _ = env.reset(seed=seed)
            sid = env.task.sid
            expected = start if start is not None else env.task.start_page()
            assert obs["url"] == f"{server_url}/s/{sid}/{expected}"
            # the session's launcher stays the device's home
            assert device.home_url == f"{server_url}/s/{sid}/"
            state_log = env.task.state()["log"]
            assert state_log == [expected], state_log  # the server saw that one page view
            if i == 0:
                continue
            navigations = [url for nav, _, url in seen if nav]
            documents = [url for _, kind, url in seen if kind == "document"]
            assert documents == navigations, (task_id, seed, seen)
            if in_page:
                assert seen == [(False, "fetch", obs["url"])], (task_id, seed, seen)
            else:
                assert seen == [(True, "document", obs["url"])], (task_id, seed, seen)  # css and js are inline
    finally:
        env.task.teardown(device)
        device.close()


def test_same_seed_same_session_url_other_device_other_url(device, shared_browser):
    env = GuiEnv(device, TASKS["open_app"])
    first = env.reset(seed=7)[0]["url"]
    assert env.reset(seed=7)[0]["url"] == first and env.reset(seed=8)[0]["url"] != first
    other = SUITE.make_device(browser=shared_browser, tree="none")
    try:
        env_b = GuiEnv(other, TASKS["open_app"])
        assert env_b.reset(seed=7)[0]["url"] != first
    finally:
        other.close()


_LEFTOVERS_JS = """() => ({active: document.activeElement === document.body, ranges: getSelection().rangeCount,
                           scroll: scrollY, history: history.length, title: document.title,
                           html: document.documentElement.outerHTML.length})"""


def _mess_up(device) -> None:
    """Leave what an agent might: a form with typed, selected text, the page scrolled, history
    entries, a dark theme's html class, a timer about to repaint the page."""
    env = GuiEnv(device, TASKS["contacts_add"])
    env.reset(seed=3)
    for action in (Click(0.1, 0.2), Scroll("down"), Type("Ann", x=0.5, y=0.3), Key("Control+a")):
        env.step(action)
    device.goto(env.task._client.base_url + f"/s/{env.task.sid}/contacts")
    device.evaluate("document.documentElement.classList.add('dark');"
                    "setTimeout(() => { document.body.style.background = 'red'; }, 300)")


def _start(device, task_id: str, seed: int, in_page: bool) -> tuple:
    env = GuiEnv(device, TASKS[task_id])
    _in_page(device, in_page)
    loads: list[str] = []
    on_load = lambda _p: loads.append("load")
    device.page.on("load", on_load)
    try:
        obs, _ = env.reset_typed(seed=seed)
    finally:
        _in_page(device, True)
        device.page.remove_listener("load", on_load)
    device.page.wait_for_timeout(350)  # a leaked timer would have fired by now
    screen = device.observe()
    state = (obs.screenshot, obs.tree, obs.url, env.task.state()["log"], device.evaluate(_LEFTOVERS_JS),
             screen.screenshot)
    env.step(Key("Tab"))  # keyboard focus starts where a fresh page starts it
    after_tab = device.observe().screenshot
    env.task.teardown(device)
    return bool(loads), state, after_tab


#: one start page by default (its app bar has the up arrow Tab reaches first); every task with -m slow
SAMPLE = ("settings_font_size",)


@pytest.mark.parametrize("task_id", [pytest.param(t, marks=() if t in SAMPLE else pytest.mark.slow)
                                     for t in sorted(TASKS)])
def test_in_page_reset_shows_what_a_page_load_shows(device, task_id):
    _mess_up(device)
    loaded, soft, soft_tab = _start(device, task_id, 11, in_page=True)
    assert not loaded, "the reset loaded a page"
    _mess_up(device)
    loaded, hard, hard_tab = _start(device, task_id, 11, in_page=False)
    assert loaded
    names = ("screenshot", "tree", "url", "server log", "page leftovers", "screenshot later")
    for name, a, b in zip(names, soft, hard):
        assert a == b, f"{task_id}: {name} differs after an in-page reset: {a if name != 'screenshot' else ''}"
    assert soft_tab == hard_tab, f"{task_id}: Tab focused something else after an in-page reset"


def test_reset_loads_the_page_when_the_app_cannot_render_it(device):
    env = GuiEnv(device, TASKS["open_app"])
    env.reset(seed=1)
    # not an app page: nothing to render in
    device.goto(SUITE.server_url + "/")
    loads: list[str] = []
    on_load = lambda _p: loads.append("load")
    device.page.on("load", on_load)
    obs, _ = env.reset(seed=2)
    assert loads == ["load"] and env.task.state()["log"] == [""]
    # an app page that no longer matches the apps' assets: the app fetched the start page, then
    # refused; the page is loaded for real and the server log holds one view, not two
    device.evaluate("document.head.appendChild(document.createElement('style')).textContent = 'p {}'")
    loads.clear()
    obs, _ = env.reset(seed=3)
    assert loads == ["load"] and env.task.state()["log"] == [""]
    assert obs["url"].endswith(f"/s/{env.task.sid}/")
    device.page.remove_listener("load", on_load)
    env.task.teardown(device)
