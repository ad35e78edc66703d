"""The webapps move between their pages without page loads, and show what page loads show.

Two phone devices in one real Chromium, the same episode and the same actions: one as the
suite makes it (links, redirects after a save, reloads and Back render the next page in the
open document), one with ``page_loads=True`` (every page change a page load, as a plain
multi-page site). After every step the screenshot, ARIA tree, url and history length agree,
and in the end the server logs the same page views; the first device made no document
request at all. A tap on a switch or a row shows the same screen right after the step as
later: the apps have no ``:active`` press shading, which Chromium keeps for a while after a
tap and clears on its own timer (whether a screenshot showed it depended on the load).
"""

from __future__ import annotations

import time

import pytest

from emulators.base import GuiEnv
from emulators.suites.webapps import SUITE, TASKS
from guiagent.types import Click, Key, NavigateBack, Scroll, Type

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def devices(shared_browser):
    in_page = SUITE.make_device(browser=shared_browser)
    loads = SUITE.make_device(browser=shared_browser, page_loads=True)
    yield in_page, loads
    in_page.close()
    loads.close()
    SUITE.close()


def _tap(selector: str):
    return lambda device: Click(*device.center(selector))


#: (what it does, the action from the device's page)
SCRIPT = [
    ("open Notes (a link)", _tap('a.app-icon[data-app="notes"]')),
    ("open a note", _tap("a.card")),
    ("type into its body", lambda d: Type(" and more", *d.center("textarea"))),
    ("save: the app goes Back to the list", _tap("button.save")),
    ("scroll the list", lambda d: Scroll("down", amount=0.3)),
    ("the up arrow to the launcher", _tap("a.up")),
    ("Back to the scrolled list", lambda d: NavigateBack()),
    ("Tab to the first link", lambda d: Key("Tab")),
]

_PAGE_JS = "() => ({history: history.length, scroll: scrollY, focus: document.activeElement.tagName})"


def _screen(env: GuiEnv, obs) -> tuple:
    sid = env.task.sid
    return (obs.screenshot, (obs.tree or "").replace(sid, "SID"), (obs.url or "").replace(sid, "SID"),
            obs.last_action_error, env.device.evaluate(_PAGE_JS))


def test_page_changes_render_in_the_document_and_match_page_loads(devices):
    in_page, loads = devices
    envs = [GuiEnv(in_page, TASKS["notes_create"]), GuiEnv(loads, TASKS["notes_create"])]
    screens = [_screen(e, e.reset_typed(seed=4)[0]) for e in envs]
    documents: list[str] = []

    def on_request(request):
        if request.resource_type == "document":
            documents.append(request.url)

    in_page.page.context.on("request", on_request)
    try:
        for what, make in SCRIPT:
            assert screens[0] == screens[1], f"before '{what}': the screens differ"
            screens = [_screen(e, e.step_typed(make(e.device))[0]) for e in envs]
        assert screens[0] == screens[1], "after the last step: the screens differ"
        assert documents == [], f"the in-page device loaded pages: {documents}"
        logs = [e.task.state()["log"] for e in envs]
        assert logs[0] == logs[1] and "notes" in logs[0], logs
    finally:
        in_page.page.context.remove_listener("request", on_request)
        for e in envs:
            e.task.teardown(e.device)


def test_a_tap_on_a_switch_shows_its_settled_screen_at_once(devices):
    """The screenshot a tap's step returns is the screen 300 ms later: no press state lingers
    in it (the apps used to shade ``.row:active``, which Chromium clears on its own timer
    after a tap, so the step's screenshot caught it or not depending on the load)."""
    envs = [GuiEnv(d, TASKS["settings_open_section"]) for d in devices]  # starts on Settings
    try:
        for e in envs:
            e.reset_typed(seed=0)
        start = envs[0].task.state()["settings"]
        for target in ('li.settings-row[data-key="dnd"] .switch', 'li.settings-row[data-key="wifi"] .text',
                       'li.settings-row[data-key="location"] .switch'):
            for e in envs:
                obs = e.step_typed(Click(*e.device.center(target)))[0]
                e.device.page.wait_for_timeout(300)
                assert obs.screenshot == e.device.observe().screenshot, f"tap on {target}: the screen changed after the step"
        states = [e.task.state()["settings"] for e in envs]  # the switches took the taps, the row did not
        flipped = {k: not v if k in ("dnd", "location") else v for k, v in start.items()}
        assert states[0] == states[1] == flipped, (start, states)
    finally:
        for e in envs:
            e.task.teardown(e.device)


def test_an_error_page_shows_as_a_load_shows_it_and_back_leaves_it(devices):
    envs = [GuiEnv(d, TASKS["open_app"]) for d in devices]
    try:
        for e in envs:
            e.reset_typed(seed=2)
            # a link to an item that is gone: the server answers 404 with its own page (no app assets)
            e.device.evaluate("(url) => { location.assign(url); }", e.device.home_url + "contacts/99999")
            e.device.settle()
            assert "Not Found" in e.device.page.content()
        screens = [_screen(e, e.device.observe()) for e in envs]
        assert screens[0] == screens[1]
        screens = [_screen(e, e.step_typed(NavigateBack())[0]) for e in envs]
        assert screens[0] == screens[1] and devices[0].locate('a.app-icon[data-app="notes"]')
    finally:
        for e in envs:
            e.task.teardown(e.device)


#: hides the caret (it blinks: whether a screenshot shows it depends on timing) in every document
_NO_CARET = ("const s = new CSSStyleSheet(); s.replaceSync('* { caret-color: transparent !important; }');"
             "document.adoptedStyleSheets = [s];")


@pytest.fixture(scope="module")
def caretless(shared_browser):
    in_page = SUITE.make_device(browser=shared_browser, init_script=_NO_CARET)
    loads = SUITE.make_device(browser=shared_browser, page_loads=True, init_script=_NO_CARET)
    yield in_page, loads
    in_page.close()
    loads.close()


def _settled_screen(env: GuiEnv) -> tuple:
    env.device.page.wait_for_timeout(200)  # a settled screen stays: waiting checks that too
    return _screen(env, env.device.observe())


@pytest.mark.slow
@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_every_task_matches_page_loads(caretless, task_id):
    """Random taps, typing, scrolls, keys and Back, then the oracle to the end, on both devices."""
    from rl.agents import RandomPolicy
    from guiagent.types import Swipe

    seed = sorted(TASKS).index(task_id)
    envs = [GuiEnv(d, TASKS[task_id]) for d in caretless]
    for e in envs:
        e.reset_typed(seed=seed)
    policies = [RandomPolicy(seed=seed), RandomPolicy(seed=seed)]
    try:
        for k in range(30):
            screens = [_settled_screen(e) for e in envs]
            assert screens[0] == screens[1], f"{task_id}: step {k}: the screens differ"
            if k < 8:  # a swipe's fling depends on timing: scroll instead
                actions = [p._one() for p in policies]
                actions = [Scroll("down") if isinstance(a, Swipe) else a for a in actions]
                if k == 3:
                    actions = [NavigateBack(), NavigateBack()]
            else:
                actions = [e.oracle_action() for e in envs]
            assert actions[0] == actions[1]
            if actions[0] is None:
                break
            outs = [e.step_typed(a) for e, a in zip(envs, actions)]
            assert outs[0][1:4] == outs[1][1:4], f"{task_id}: step {k}: reward or end differs"
            if outs[0][2] or outs[0][3]:
                break
        logs = [e.task.state()["log"] for e in envs]
        assert logs[0] == logs[1]
    finally:
        for e in envs:
            e.task.teardown(e.device)


def test_in_page_resets_count_toward_the_context_replacement(shared_browser):
    """A run of in-page resets still gets a new context every ``context_max_resets`` resets (the
    apps' requests are recorded for the context's life as well): the due reset loads the page."""
    device = SUITE.make_device(browser=shared_browser, context_max_resets=3)
    env = GuiEnv(device, TASKS["notes_create"])
    documents: list[str] = []
    try:
        contexts = []
        for seed in range(7):
            env.reset_typed(seed=seed)
            contexts.append(device.page.context)
            if seed == 1:
                device.page.context.on("request", lambda r: r.resource_type == "document"
                                       and documents.append(r.url))
        # reset 0 opens the context, 1 and 2 are in the page, 3 is due: a new context and a page load
        assert contexts[0] is contexts[2] and contexts[3] is not contexts[2] and contexts[3] is contexts[5]
        assert contexts[6] is not contexts[5]
        assert documents == [], f"in-page resets loaded pages: {documents}"
        env.task.teardown(device)
    finally:
        device.close()


def test_an_in_page_reset_settles_in_its_own_call(shared_browser):
    """An in-page reset runs the page's hook and the settle's poll in one page call: no separate
    settle, and the device is left as a settle leaves it (the next observation is the start's,
    the same as a fresh reset on another device shows)."""
    device = SUITE.make_device(browser=shared_browser, tree="none")
    other = SUITE.make_device(browser=shared_browser, tree="none")
    try:
        env = GuiEnv(device, TASKS["settings_turn_on"])
        env.reset_typed(seed=1)  # the first reset loads the page; the next are in the page
        env.step_typed(Click(0.5, 0.5))
        settles: list = []
        real = device._settle
        device._settle = lambda cap_ms=None: settles.append(cap_ms) or real(cap_ms)  # type: ignore[method-assign]
        resets = device._context_resets
        try:
            obs, _ = env.reset_typed(seed=2)
        finally:
            del device._settle
        assert device._context_resets == resets + 1, "the reset ran in the page"
        assert settles == [], "the hook's call settled the page: no second round trip"
        fresh, _ = GuiEnv(other, TASKS["settings_turn_on"]).reset_typed(seed=2)
        assert obs.screenshot == fresh.screenshot
    finally:
        device.close()
        other.close()


def test_a_reset_from_a_hung_page_starts_on_a_fresh_one(shared_browser):
    """An episode's reset on a page stuck in an endless script: the in-page reset gets no answer and
    gives way to a page load on a fresh context, and the episode starts as any other."""
    dev = SUITE.make_device(browser=shared_browser, navigation_timeout_ms=1500, settle_timeout_ms=300,
                            reset_by_restore=False)
    try:
        env = GuiEnv(dev, TASKS["open_app"])
        env.reset_typed(seed=0)
        dev.evaluate("() => { setTimeout(() => { for (;;) {} }, 50); }")
        time.sleep(0.2)  # the loop runs
        obs, _ = env.reset_typed(seed=1)
        assert dev._dead is None and obs.tree and "/s/" in obs.url
        env.step_typed(Click(0.5, 0.5))  # the fresh page answers
    finally:
        env.close()
