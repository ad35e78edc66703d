"""A webapps reset loads its start page once: navigations to the app server counted in a real Chromium.

The browser context of the device is watched for requests to the app server; each
reset must make exactly one navigation request (the episode's start page: the
session's launcher, or the in-app page a task starts on) and no other document
load, whether it follows a fresh device, a finished episode or the same seed again.
"""

from __future__ import annotations

import pytest

from emulators.base import GuiEnv
from emulators.suites.webapps import SUITE, TASKS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def device(shared_browser):
    dev = SUITE.make_device(browser=shared_browser, tree="none")
    yield dev
    dev.close()
    SUITE.close()


@pytest.mark.parametrize("task_id, start", [("open_app", ""), ("settings_turn_on", "settings"),
                                            ("go_home", None)])
def test_each_reset_loads_one_page(device, task_id, start):
    env = GuiEnv(device, TASKS[task_id])
    env.reset_typed(seed=0)  # the context exists from here on (reused across resets)
    server_url = SUITE.server_url
    seen: list[tuple[bool, str, str]] = []

    def on_request(request):
        if request.url.startswith(server_url):
            seen.append((request.is_navigation_request(), request.resource_type, request.url))

    context = device.page.context
    context.on("request", on_request)
    try:
        for seed in (1, 2, 2):
            seen.clear()
            obs, _ = env.reset(seed=seed)
            navigations = [url for nav, _, url in seen if nav]
            documents = [url for _, kind, url in seen if kind == "document"]
            assert len(navigations) == 1 and documents == navigations, (task_id, seed, seen)
            sid = env.task.sid
            expected = start if start is not None else env.task.start_page()
            assert navigations[0] == f"{server_url}/s/{sid}/{expected}" == obs["url"]
            # the session's launcher stays the device's home
            assert device.home_url == f"{server_url}/s/{sid}/"
            state_log = env.task.state()["log"]
            assert state_log == [expected], state_log  # the server saw that one page view
    finally:
        context.remove_listener("request", on_request)
        env.task.teardown(device)


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
