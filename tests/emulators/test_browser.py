"""BrowserDevice against real Chromium and local pages served on 127.0.0.1."""

from __future__ import annotations

import io
import os
import re
import signal
import time

import pytest
from PIL import Image

from emulators.base import ActionError, DeviceError
from emulators.browser import BrowserConfig, BrowserDevice, launch_browser
from emulators import browser_support
from emulators.browser_support import ChromiumNotFound, find_chromium, normalise_key, url_allowed
from guiagent.types import (
    Click, DoubleClick, Drag, Hover, Key, LongPress, NavigateBack, NavigateHome, OpenApp, RightClick, Scroll,
    Swipe, Type, Wait,
)

pytestmark = pytest.mark.browser

W, H = 1280, 720


def px(x: float, y: float) -> tuple[float, float]:
    """Desktop CSS pixels -> normalised coordinates."""
    return (x / W, y / H)


@pytest.fixture(scope="module")
def desk(shared_browser, page_server):
    dev = BrowserDevice(BrowserConfig.desktop(home_url=page_server + "/static.html"), browser=shared_browser)
    yield dev
    dev.close()


@pytest.fixture(scope="module")
def phone(shared_browser, page_server):
    dev = BrowserDevice(BrowserConfig.phone(home_url=page_server + "/phone.html"), browser=shared_browser)
    yield dev
    dev.close()


def open_page(dev: BrowserDevice, base: str, name: str) -> None:
    dev.home_url = f"{base}/{name}"
    dev.reset()


# --- pure helpers -------------------------------------------------------------------------------

@pytest.mark.parametrize("given, expected", [
    ("enter", "Enter"), ("ENTER", "Enter"), ("Return", "Enter"), ("ctrl+a", "Control+a"),
    ("backspace", "Backspace"), ("Shift+Tab", "Shift+Tab"), ("esc", "Escape"), ("pgdn", "PageDown"),
    ("a", "a"), ("+", "+"), ("Shift++", "Shift++"), ("F5", "F5"), ("cmd+c", "Meta+c"),
    ("Hyper", None), ("ctrl+nope", None), ("", None),
])
def test_normalise_key(given, expected):
    assert normalise_key(given) == expected


def test_url_allowed_matches_origins_and_file_prefixes():
    allowed = ("http://127.0.0.1:8000", "file:///opt/pages/")
    assert url_allowed("http://127.0.0.1:8000/a?b", allowed)
    assert not url_allowed("http://127.0.0.1:80001/", allowed)
    assert not url_allowed("http://127.0.0.1:800/", allowed)
    assert not url_allowed("https://example.com/", allowed)
    assert url_allowed("file:///opt/pages/x.html", allowed)
    assert not url_allowed("file:///etc/passwd", allowed)
    assert url_allowed("about:blank", allowed) and url_allowed("data:text/html,hi", allowed)


def test_config_validation_and_presets():
    with pytest.raises(ValueError):
        BrowserConfig(viewport=(0, 10))
    with pytest.raises(ValueError):
        BrowserConfig(image_format="gif")  # type: ignore[arg-type]
    assert BrowserConfig.phone().viewport == (360, 640) and BrowserConfig.phone().mobile
    assert BrowserConfig(viewport=(160, 210), device_scale_factor=2).screen_size == (320, 420)
    # switches given as words on the command line (--device in_page_reset false)
    assert BrowserConfig(in_page_reset="false").in_page_reset is False  # type: ignore[arg-type]
    assert BrowserConfig(reuse_context="Yes").reuse_context is True  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="in_page_reset must be true or false"):
        BrowserConfig(in_page_reset="maybe")  # type: ignore[arg-type]
    # numbers, sizes and lists as the command line gives them (--device settle_timeout_ms 3000)
    cfg = BrowserConfig(settle_timeout_ms="3000", jpeg_quality=" 90", device_scale_factor="1.5",  # type: ignore[arg-type]
                        viewport="400x700", allowed_origins="http://a:1, http://b:2", target_boxes="no")  # type: ignore[arg-type]
    assert (cfg.settle_timeout_ms, cfg.jpeg_quality, cfg.device_scale_factor) == (3000, 90, 1.5)
    assert cfg.viewport == (400, 700) and cfg.allowed_origins == ("http://a:1", "http://b:2")
    assert cfg.target_boxes is False
    for bad, message in (({"settle_timeout_ms": "1.5s"}, "settle_timeout_ms must be an integer, got '1.5s'"),
                         ({"device_scale_factor": "nan"}, "device_scale_factor must be a number"),
                         ({"viewport": "400by700"}, "viewport must read WIDTHxHEIGHT"),
                         ({"viewport": (400.5, 700)}, "viewport must be two whole numbers"),
                         ({"jpeg_quality": "0"}, "jpeg_quality must lie in 1..100"),
                         ({"navigation_timeout_ms": 0}, "navigation_timeout_ms must be positive"),
                         ({"context_max_resets": True}, "context_max_resets must be a number")):
        with pytest.raises(ValueError, match=re.escape(message)):
            BrowserConfig(**bad)  # type: ignore[arg-type]


def test_missing_chromium_is_one_clear_error(monkeypatch, shared_browser):
    with pytest.raises(ChromiumNotFound, match="not an executable"):
        find_chromium("/nonexistent/chromium")
    monkeypatch.setenv("GUIAGENT_CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(ChromiumNotFound, match="GUIAGENT_CHROMIUM|not an executable"):
        launch_browser()
    # nothing configured, no system Chromium: Playwright's own bundle is the last resort
    monkeypatch.delenv("GUIAGENT_CHROMIUM")
    monkeypatch.setattr(browser_support, "_SYSTEM_CHROMIUMS", ())
    monkeypatch.setattr(browser_support, "_HEADLESS_SHELLS", ())
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        launch_browser().close()  # a machine where `playwright install chromium` was run
    except ChromiumNotFound as e:
        assert "apt-get install chromium" in str(e) and "GUIAGENT_CHROMIUM" in str(e)


def test_headless_prefers_a_headless_shell(monkeypatch, tmp_path):
    full, shell = tmp_path / "chromium", tmp_path / "chromium-headless-shell"
    for exe in (full, shell):
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.delenv("GUIAGENT_CHROMIUM", raising=False)
    monkeypatch.setattr(browser_support, "_SYSTEM_CHROMIUMS", (str(full),))
    monkeypatch.setattr(browser_support, "_HEADLESS_SHELLS", (str(tmp_path / "missing"), str(shell)))
    assert find_chromium(headless=True) == str(shell)
    assert find_chromium() == str(full)  # a headed browser needs the full one
    assert find_chromium(str(full), headless=True) == str(full)  # a configured one wins
    monkeypatch.setenv("GUIAGENT_CHROMIUM", str(full))
    assert find_chromium(headless=True) == str(full)


# --- observation ------------------------------------------------------------------------------

def test_observe_png_size_tree_url(desk, page_server):
    open_page(desk, page_server, "static.html")
    obs = desk.observe()
    img = Image.open(io.BytesIO(obs.screenshot))
    assert img.format == "PNG" and img.size == (W, H) == (obs.width, obs.height)
    assert 'button "Press me"' in obs.tree
    assert obs.url == page_server + "/static.html"
    # screenshot and tree were taken concurrently (fails loudly if Playwright's internals moved)
    assert BrowserDevice._overlap_ok


def test_jpeg_and_scale(shared_browser, page_server):
    cfg = BrowserConfig(viewport=(200, 100), device_scale_factor=2, image_format="jpeg", tree="none",
                        home_url=page_server + "/static.html")
    with BrowserDevice(cfg, browser=shared_browser) as dev:
        dev.reset()
        obs = dev.observe()
        img = Image.open(io.BytesIO(obs.screenshot))
        assert img.format == "JPEG" and img.size == (400, 200) == dev.size
        assert obs.tree is None


def test_locate_and_center(desk, page_server):
    open_page(desk, page_server, "static.html")
    x0, y0, x1, y1 = desk.locate("#btn")
    assert (x0, y0) == pytest.approx(px(100, 100), abs=1e-3)
    assert (x1, y1) == pytest.approx(px(300, 160), abs=1e-3)
    assert desk.center("text=Press me") == pytest.approx(px(200, 130), abs=1e-3)
    assert desk.locate("#does-not-exist") is None


def test_target_box_is_the_element_a_point_lands_on(desk, page_server):
    from guiagent.types import Click, LongPress, Type

    open_page(desk, page_server, "static.html")
    btn = desk.locate("#btn")
    assert desk.target_box(Click(*px(150, 110))) == pytest.approx(btn, abs=1e-4)   # a corner of the button
    assert desk.target_box(LongPress(*px(299, 159))) == pytest.approx(btn, abs=1e-4)
    assert desk.target_box(Click(*px(600, 500))) is None      # the page's body: a container, not a target
    assert desk.target_box(Type("hi")) is None



def test_target_boxes_off_reads_nothing_before_a_tap(shared_browser, page_server):
    """``target_boxes=False`` (online runs whose episodes are never replayed) skips the page round trip."""
    from guiagent.types import Click

    with BrowserDevice(BrowserConfig.desktop(home_url=page_server + "/static.html", target_boxes=False),
                       browser=shared_browser) as dev:
        dev.reset()
        calls = []
        real, real_js = dev.page.evaluate, dev._js
        # the device's own scripts go through _js (CDP), a suite's through page.evaluate: neither runs
        dev.page.evaluate = lambda *a, **k: calls.append(a[0][:40]) or real(*a, **k)  # type: ignore[method-assign]
        dev._js = lambda *a, **k: calls.append(a[0][:40]) or real_js(*a, **k)  # type: ignore[method-assign]
        try:
            assert dev.target_box(Click(*px(150, 110))) is None  # on the button, yet not read
        finally:
            dev.page.evaluate = real  # type: ignore[method-assign]
            del dev._js
        assert calls == []
        dev._js = lambda *a, **k: calls.append(a[0][:40]) or real_js(*a, **k)  # type: ignore[method-assign]
        try:  # the spy sees the device's scripts: a settle goes through it
            dev.settle()
        finally:
            del dev._js
        assert calls and calls[0].strip().startswith("async (remaining)")
        assert dev.locate("#btn") is not None  # the page is there: the box was not read, not missing


def test_device_scripts_through_cdp_as_page_evaluate(desk, shared_browser, page_server):
    """The device's own scripts (``_js``: CDP ``Runtime.evaluate``) give what ``page.evaluate`` gives for
    plain JSON, any text included; a script that throws raises Playwright's Error, as page.evaluate does."""
    from playwright.sync_api import Error as PlaywrightError

    from emulators.base import DeviceError

    with BrowserDevice(BrowserConfig.desktop(home_url=page_server + "/static.html"), browser=shared_browser) as new:
        with pytest.raises(DeviceError, match="no page yet"):  # never started: one clear error, no page to run in
            new._js("() => 1")
    desk.reset()
    arg = {"text": "é ü 中 \u2028 \u2029 </script> \"quotes\" \\ back", "n": [1, 2.5, -3, None, True, False], "empty": {}}
    script = "async (x) => { await new Promise(r => setTimeout(r, 1)); return x; }"
    assert desk._js(script, arg) == desk.page.evaluate(script, arg) == arg
    assert desk._js("() => undefined") is None
    with pytest.raises(PlaywrightError, match="boom"):
        desk._js("() => { throw new Error('boom') }")
    with pytest.raises(PlaywrightError, match="nope"):
        desk._js("async () => { throw new TypeError('nope') }")


def test_a_document_gone_under_the_check_after_a_capture_is_captured_again(desk, page_server):
    """The check after a capture finding no document (a navigation the page made just then) is a
    change like any other: the page settles and is captured again, no device error."""
    from playwright.sync_api import Error as PlaywrightError

    desk.reset()
    desk.goto(page_server + "/static.html")
    real_js, calls = desk._js, []

    def flaky(script, arg=None, budget_ms=0):
        calls.append(arg)
        if arg == [-2, None] and calls.count([-2, None]) == 1:
            raise PlaywrightError("Execution context was destroyed, most likely because of a navigation")
        return real_js(script, arg, budget_ms)

    desk._js = flaky  # type: ignore[method-assign]
    try:
        obs = desk.observe()
    finally:
        del desk._js
    assert calls.count([-2, None]) == 2  # checked again after the second capture
    assert obs.screenshot and obs.url.endswith("/static.html")


# --- settling -----------------------------------------------------------------------------------

def text_of(dev: BrowserDevice, sel: str) -> str:
    return dev.evaluate("(s) => document.querySelector(s).textContent", sel)


def test_static_page_settles_fast(desk, page_server):
    open_page(desk, page_server, "static.html")
    times = []
    for _ in range(5):
        t = time.perf_counter()
        desk.execute(Click(*px(200, 130)))
        times.append(time.perf_counter() - t)
    assert sorted(times)[2] < 0.15, times
    assert text_of(desk, "#out") == "clicked 5"


def test_delayed_update_is_observed(desk, page_server):
    open_page(desk, page_server, "delayed.html")
    t = time.perf_counter()
    desk.execute(Click(*px(100, 30)))
    assert time.perf_counter() - t >= 0.29
    assert "updated" in desk.observe().tree


def test_slow_fetch_is_awaited(desk, page_server):
    open_page(desk, page_server, "fetch.html")
    desk.execute(Click(*px(100, 30)))
    assert text_of(desk, "#out") == "loaded after 400 ms"


def test_finite_transition_is_awaited(desk, page_server):
    open_page(desk, page_server, "transition.html")
    desk.execute(Click(*px(100, 30)))
    assert desk.evaluate("document.getElementById('box').getBoundingClientRect().width") == 400


def test_infinite_animation_and_interval_hit_the_cap(shared_browser, page_server):
    """A spinner (infinite CSS animation) is ignored; an interval mutating the DOM every 20 ms
    never leaves a quiet window, so settling and observing stop at the cap, not later."""
    cfg = BrowserConfig(settle_timeout_ms=400, home_url=page_server + "/busy.html")
    with BrowserDevice(cfg, browser=shared_browser) as dev:
        dev.reset()
        t = time.perf_counter()
        dev.execute(Click(*px(100, 30)))
        obs = dev.observe()
        assert time.perf_counter() - t < 1.5
        assert "clicked" in obs.tree


# --- actions ------------------------------------------------------------------------------------

def test_type_focus_submit_and_errors(desk, page_server):
    open_page(desk, page_server, "input.html")
    with pytest.raises(ActionError, match="nothing is focused"):
        desk.execute(Type("hello"))
    desk.execute(Type("hello", *px(100, 165), submit=True))
    assert desk.evaluate("document.getElementById('name').value") == "hello"
    assert desk.evaluate("window.submitted") == "hello"
    desk.execute(Key("ctrl+a"))
    desk.execute(Key("backspace"))
    assert desk.evaluate("document.getElementById('name').value") == ""
    with pytest.raises(ActionError, match="unknown key.*Enter"):
        desk.execute(Key("Hyperdrive"))


def test_desktop_long_press_drag_scroll(desk, page_server):
    open_page(desk, page_server, "input.html")
    desk.execute(LongPress(*px(100, 50), duration_ms=600))
    assert desk.evaluate("window.held") >= 550
    desk.execute(Drag(*px(50, 50), *px(250, 60)))
    assert desk.evaluate("window.moves") >= 5 and desk.evaluate("window.lastX") == pytest.approx(250, abs=2)
    desk.execute(Scroll("down", amount=0.5))
    assert desk.evaluate("window.scrollY") == pytest.approx(360, abs=2)
    desk.execute(Scroll("up", amount=0.25))
    assert desk.evaluate("window.scrollY") == pytest.approx(180, abs=2)
    desk.execute(Scroll("right", amount=0.5))
    assert desk.evaluate("window.scrollX") == pytest.approx(640, abs=2)


def test_desktop_double_click_right_click_hover(desk, page_server):
    open_page(desk, page_server, "pointer.html")
    desk.execute(Hover(*px(200, 150)))
    assert desk.evaluate("window.events") == ["mouseover"]
    assert desk.evaluate("getComputedStyle(document.getElementById('menu')).display") == "block"
    desk.execute(DoubleClick(*px(200, 150)))
    events = desk.evaluate("window.events")
    assert events.count("click") == 2 and events[-1] == "dblclick"
    desk.execute(RightClick(*px(200, 150)))
    events = desk.evaluate("window.events")
    assert events[-3:] == ["mousedown:2", "contextmenu:2", "mouseup:2"]
    assert "click" not in events[-3:] and events.count("dblclick") == 1


def test_phone_double_tap_and_mouse_only_actions(phone, page_server):
    open_page(phone, page_server, "pointer.html")
    phone.execute(DoubleClick(200 / 360, 150 / 640))
    events = phone.evaluate("window.events")
    assert events.count("touchstart") == 2 and events.count("click") == 2
    with pytest.raises(ActionError, match="no right button; use LongPress"):
        phone.execute(RightClick(0.5, 0.3))
    with pytest.raises(ActionError, match="no pointer to hover"):
        phone.execute(Hover(0.5, 0.3))
    assert phone.evaluate("window.events") == events  # refused actions touched nothing


def test_phone_tap_long_press_swipe_scroll(phone, page_server):
    open_page(phone, page_server, "phone.html")
    obs = phone.observe()
    assert (obs.width, obs.height) == (360, 640)
    assert phone.evaluate("navigator.maxTouchPoints") > 0
    phone.execute(Click(100 / 360, 50 / 640))
    assert phone.evaluate("window.lastPointer") == "touch"
    assert "touchstart" in phone.evaluate("window.log")
    phone.execute(LongPress(100 / 360, 50 / 640, duration_ms=800))
    assert phone.evaluate("window.held") >= 750
    assert "contextmenu" in phone.evaluate("window.log")
    # a swipe upwards outside the touch-action:none box scrolls the page down
    phone.execute(Swipe(0.5, 0.8, 0.5, 0.4))
    assert phone.evaluate("window.scrollY") > 100
    y = phone.evaluate("window.scrollY")
    phone.execute(Scroll("down", amount=0.5))
    assert phone.evaluate("window.scrollY") >= y + 300


def test_back_home_wait_open_app(desk, page_server):
    open_page(desk, page_server, "links.html")
    with pytest.raises(ActionError, match="no earlier page"):
        desk.execute(NavigateBack())
    desk.execute(Click(*desk.center("#same")))
    assert desk.page.url.endswith("/static.html")
    desk.execute(NavigateBack())
    assert desk.page.url.endswith("/links.html")
    desk.execute(Click(*desk.center("#same")))
    desk.execute(NavigateHome())
    assert desk.page.url.endswith("/links.html")
    t = time.perf_counter()
    desk.execute(Wait(0.3))
    assert time.perf_counter() - t >= 0.3
    with pytest.raises(ActionError, match="no apps"):
        desk.execute(OpenApp("Contacts"))
    opened = []
    desk.open_app_handler = opened.append
    try:
        desk.execute(OpenApp("Contacts"))
    finally:
        desk.open_app_handler = None
    assert opened == ["Contacts"]


def test_new_window_loads_in_the_same_page(desk, page_server):
    open_page(desk, page_server, "links.html")
    desk.execute(Click(*desk.center("#blank")))
    assert desk.page.url.endswith("/static.html")
    assert len(desk.page.context.pages) == 1


def test_navigation_guard_blocks_other_origins_and_files(desk, page_server, other_server):
    _guard_checks(desk, page_server, other_server)


def test_navigation_guard_with_fixed_origins(shared_browser, page_server, other_server):
    # fixed allowed_origins: the driver passes the allowed origin's requests itself (a regex route)
    config = BrowserConfig.desktop(allowed_origins=(page_server + "/",))
    with BrowserDevice(config, browser=shared_browser) as dev:
        assert dev._route_pattern().match(other_server + "/static.html")
        assert not dev._route_pattern().match(page_server + "/static.html?x=1")
        assert dev._route_pattern().match(f"{page_server}0/static.html")  # a longer port is not the origin
        _guard_checks(dev, page_server, other_server)


def _guard_checks(desk, page_server, other_server):
    desk.home_url = f"{page_server}/links.html?other={other_server}/static.html"
    desk.reset()
    start = desk.page.url
    with pytest.raises(ActionError, match="blocked"):
        desk.execute(Click(*desk.center("#other")))
    assert desk.page.url == start
    desk.execute(Click(*desk.center("#file")))  # Chromium itself refuses file:// from http
    assert desk.page.url == start
    # the page still works after a blocked attempt
    desk.execute(Click(*desk.center("#same")))
    assert desk.page.url.endswith("/static.html")


def test_home_less_device_errors(shared_browser):
    with BrowserDevice(BrowserConfig(), browser=shared_browser) as dev:
        dev.reset()
        assert dev.page.url == "about:blank"
        with pytest.raises(ActionError, match="no home page"):
            dev.execute(NavigateHome())
        with pytest.raises(ActionError, match="nothing is focused"):
            dev.execute(Type("x"))


def test_reused_context_is_replaced_after_context_max_resets(shared_browser, page_server):
    """Playwright keeps every navigation's request and response for a context's life: a reused
    context is replaced every ``context_max_resets`` resets, so those records stay bounded."""
    config = BrowserConfig(home_url=page_server + "/static.html", reuse_context=True, context_max_resets=3)
    with BrowserDevice(config, browser=shared_browser) as dev:
        def records() -> int:  # Playwright's Request objects alive in this process
            objects = dev.page._impl_obj._connection._objects.values()
            return sum(type(o).__name__ == "Request" for o in objects)

        contexts, counts = [], []
        for _ in range(7):
            dev.reset()
            contexts.append(dev.page.context)
            counts.append(records())
        assert contexts[0] is contexts[2] and contexts[3] is not contexts[2] and contexts[3] is contexts[5]
        assert contexts[6] is not contexts[5]
        assert not any(c is contexts[0] for c in shared_browser.browser.contexts)  # the old ones are closed
        assert counts[2] > counts[0] and counts[3] <= counts[0] + 1, counts  # kept, then let go with the context
    with pytest.raises(ValueError, match="context_max_resets"):
        BrowserConfig(context_max_resets=0)


# --- faults -------------------------------------------------------------------------------------

def test_page_crash_raises_device_error_then_reset_recovers(shared_browser, page_server):
    with BrowserDevice(BrowserConfig(home_url=page_server + "/static.html"), browser=shared_browser) as dev:
        dev.reset()
        try:
            dev.page.goto("chrome://crash", timeout=5000)
        except Exception:
            pass  # the navigation aborts: its renderer died
        with pytest.raises(DeviceError):
            dev.execute(Click(0.1, 0.1))
        with pytest.raises(DeviceError):
            dev.observe()
        dev.reset()
        assert "Press me" in dev.observe().tree


def test_a_crash_not_yet_heard_of_fails_the_next_call_in_time(shared_browser, page_server):
    """A renderer that crashed before its crash event reached the device (a race a slow machine
    loses): the device's CDP calls on it are never answered, so the next action's must run out and
    say so, not hang; reset then opens a fresh page."""
    config = BrowserConfig(home_url=page_server + "/static.html", settle_timeout_ms=300, navigation_timeout_ms=1500)
    with BrowserDevice(config, browser=shared_browser) as dev:
        dev.reset()
        try:
            dev.page.goto("chrome://crash", timeout=5000)
        except Exception:
            pass
        # as if the crash event had not come yet, nor would during the call: only the call's own
        # timeout can end it
        dev._on_crash = lambda context: None  # type: ignore[method-assign]
        dev._dead = None
        t0 = time.monotonic()
        with pytest.raises(DeviceError, match="did not answer Runtime.evaluate"):
            dev.settle()  # the settle's script, on the page's CDP session (an action's input fails at once:
            #               Playwright rejects a crashed page's own calls)
        assert time.monotonic() - t0 < 10
        with pytest.raises(DeviceError):
            dev.execute(Click(0.1, 0.1))
        dev.reset()
        assert "Press me" in dev.observe().tree


def test_a_crash_during_the_devices_own_call_fails_it_at_once(page_server):
    """A renderer that dies while the device waits on its CDP session (here it runs out of memory under
    the settle after a tap): the call fails as soon as the crash is known, not when its timeout runs
    out; reset then opens a fresh page in the same browser."""
    driver = browser_support._thread_playwright()
    browser = driver.playwright.chromium.launch(
        executable_path=find_chromium(None, headless=True), headless=True,
        args=[*browser_support.CHROMIUM_ARGS, "--js-flags=--max-old-space-size=32"])
    handle = browser_support.BrowserHandle(driver.playwright, browser, _driver=driver)
    config = BrowserConfig(home_url=page_server + "/static.html", settle_timeout_ms=1500, navigation_timeout_ms=15000)
    try:
        with BrowserDevice(config, browser=handle) as dev:
            dev.reset()
            dev.evaluate("() => { setTimeout(() => { const a = []; "
                         "for (;;) a.push(new Array(1e5).fill(Math.random())); }, 100); }")
            t0 = time.monotonic()
            with pytest.raises(DeviceError, match="crashed"):
                dev.execute(Click(0.1, 0.1))
            assert time.monotonic() - t0 < 5  # not the settle's 1.5 s + 15 s
            dev.reset()
            assert "Press me" in dev.observe().tree
    finally:
        handle.close()


@pytest.mark.parametrize("call", ["observe", "execute", "evaluate"])
def test_a_hung_page_is_a_device_error_then_reset_recovers(shared_browser, page_server, call):
    """A page whose script never yields (an endless loop) answers nothing: neither the device's CDP
    calls (an observation's), nor Playwright's input (an action) or ``page.evaluate`` (a suite's
    check), which have no timeout of their own. Each runs out after ``navigation_timeout_ms``, the
    device is marked dead (refusing what comes next at once), and reset opens a fresh page."""
    config = BrowserConfig(home_url=page_server + "/static.html", settle_timeout_ms=300, navigation_timeout_ms=1500)
    with BrowserDevice(config, browser=shared_browser) as dev:
        dev.reset()
        dev.evaluate("() => { setTimeout(() => { for (;;) {} }, 50); }")
        time.sleep(0.2)
        t0 = time.monotonic()
        with pytest.raises(DeviceError, match="did not answer"):
            {"observe": dev.observe, "execute": lambda: dev.execute(Click(0.1, 0.1)),
             "evaluate": lambda: dev.evaluate("() => 1")}[call]()
        assert time.monotonic() - t0 < 10
        with pytest.raises(DeviceError, match="did not answer"):
            dev.execute(Click(0.1, 0.1))  # refused at once: the device is dead
        dev.reset()
        assert "Press me" in dev.observe().tree


def test_the_watchdog_gives_an_action_its_own_time_first():
    """What an action may take by itself comes before the watchdog's ``navigation_timeout_ms``: a
    hold, a Wait, typing, the settle inside it, and a page load under its own timeout."""
    from emulators.browser import _action_budget_ms

    c = BrowserConfig(settle_timeout_ms=1500, navigation_timeout_ms=15000)
    assert _action_budget_ms(Click(0.5, 0.5), c) == 1500
    assert _action_budget_ms(LongPress(0.5, 0.5, duration_ms=2000), c) == 3500
    assert _action_budget_ms(Wait(seconds=30), c) == 31500
    assert _action_budget_ms(Type(text="x" * 100), c) == 1500 + 2000
    for nav in (OpenApp("Contacts"), NavigateHome(), NavigateBack()):
        assert _action_budget_ms(nav, c) == 16500
    # a swipe's moves wait a frame each (one every 16 ms of it): 100 ms a move allowed
    assert _action_budget_ms(Swipe(0.5, 0.8, 0.5, 0.2, duration_ms=1600), c) == 1600 + 1500 + 100 * 100


def test_long_actions_on_a_live_page_outlast_the_watchdogs_margin(shared_browser, page_server):
    """A Wait, a long press and a slow swipe longer than ``navigation_timeout_ms`` are not a hung page."""
    config = BrowserConfig(home_url=page_server + "/static.html", settle_timeout_ms=300,
                           navigation_timeout_ms=1000, mobile=True, viewport=(360, 640))
    with BrowserDevice(config, browser=shared_browser) as dev:
        dev.reset()
        dev.execute(Wait(seconds=1.5))
        dev.execute(LongPress(0.5, 0.5, duration_ms=1500))
        dev.execute(Swipe(0.5, 0.8, 0.5, 0.2, duration_ms=1500))
        assert dev._dead is None and "Press me" in dev.observe().tree


def test_killed_browser_raises_device_error_then_reset_relaunches(page_server):
    dev = BrowserDevice(BrowserConfig(home_url=page_server + "/static.html"))  # owns its browser
    try:
        dev.reset()
        pid = dev._handle.pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(DeviceError):
            for _ in range(50):  # the disconnect reaches the driver asynchronously
                dev.execute(Click(0.1, 0.1))
                dev.observe()
        dev.reset()
        assert dev._handle.pid() not in (None, pid)
        assert "Press me" in dev.observe().tree
    finally:
        dev.close()


def test_shared_browser_death_is_reported(page_server):
    handle = launch_browser()
    dev = BrowserDevice(BrowserConfig(home_url=page_server + "/static.html"), browser=handle)
    try:
        dev.reset()
        os.kill(handle.pid(), signal.SIGKILL)
        with pytest.raises(DeviceError):
            for _ in range(50):
                dev.observe()
        with pytest.raises(DeviceError, match="shared browser"):
            dev.reset()
    finally:
        dev.close()
        handle.close()


def test_run_concurrently_overlaps_waits_keeps_order_and_reraises(shared_browser, page_server):
    from emulators.browser_support import run_concurrently
    devs = [BrowserDevice(BrowserConfig.desktop(home_url=page_server + "/static.html"), browser=shared_browser)
            for _ in range(2)]
    try:
        events: list[str] = []

        def job(i: int, ms: int):
            def run():
                events.append(f"start {i}")
                devs[i].reset()
                got = devs[i].evaluate(f"new Promise(r => setTimeout(() => r({i}), {ms}))")
                events.append(f"end {i}")
                return got
            return run

        # every job starts before the first one ends: the waits overlap; results stay in call order
        assert run_concurrently(shared_browser.browser, [job(0, 400), job(1, 10)]) == [0, 1]
        assert events == ["start 0", "start 1", "end 1", "end 0"]

        def boom():
            devs[1].evaluate("1")
            raise ValueError("slot 1 broke")
        events.clear()
        with pytest.raises(ValueError, match="slot 1 broke"):
            run_concurrently(shared_browser.browser, [boom, job(0, 100)])
        assert events == ["start 0", "end 0"]  # the other call still ran to its end
    finally:
        for d in devs:
            d.close()


def test_a_flight_hands_calls_back_as_they_end_and_keeps_the_others_going(shared_browser):
    from emulators.browser_support import Flight
    pages = [shared_browser.browser.new_page() for _ in range(3)]
    try:
        events: list[str] = []

        def job(i: int, ms: int):
            def run():
                events.append(f"start {i}")
                got = pages[i].evaluate(f"new Promise(r => setTimeout(() => r({i}), {ms}))")
                events.append(f"end {i}")
                return got
            return run

        flight = Flight(shared_browser.browser)
        # the first call to end comes back; the slow one is still in flight
        assert flight.collect([("slow", job(0, 600), None), ("fast", job(1, 10), None)], least=1) == [("fast", 1)]
        assert flight.keys() == ["slow"] and "slow" in flight and len(flight) == 1
        # a call started now ends before the one in flight since the last collect
        assert flight.collect([("again", job(1, 10), None)], least=1) == [("again", 1)]
        # "after": a call that waits for another starts the moment it ends
        got = flight.collect([("next", job(2, 10), "slow")], least=2)
        assert got == [("slow", 0), ("next", 2)] and len(flight) == 0
        assert events.index("end 0") < events.index("start 2")
        # least above the calls in flight: all of them; none in flight: nothing to wait for
        assert flight.collect([("a", job(0, 10), None)], least=5) == [("a", 0)]
        assert flight.collect([], least=1) == []

        def boom():
            pages[1].evaluate("1")
            raise ValueError("slot 1 broke")
        # a call's exception is its value; the others are not disturbed
        got = dict(flight.collect([("boom", boom, None), ("ok", job(0, 50), None)], least=2))
        assert isinstance(got["boom"], ValueError) and got["ok"] == 0
        # a call that never waits for Chromium ends while it starts: least=0 hands it back at once
        assert flight.collect([("now", lambda: 7, None)], least=0) == [("now", 7)]
    finally:
        for p in pages:
            p.close()


def test_a_flight_refuses_a_key_twice_and_a_wait_for_a_call_not_in_flight(shared_browser):
    from emulators.browser_support import Flight
    page = shared_browser.browser.new_page()
    try:
        flight = Flight(shared_browser.browser)
        flight.collect([("k", lambda: page.wait_for_timeout(200), None)], least=0)
        with pytest.raises(ValueError, match="already in flight"):
            flight.collect([("k", lambda: 1, None)])
        with pytest.raises(ValueError, match="not in flight"):
            flight.collect([("x", lambda: 1, "nobody")])
        with pytest.raises(ValueError, match="already in flight"):  # one key twice in one call
            flight.collect([("y", lambda: 1, None), ("y", lambda: 2, None)])
        assert flight.keys() == ["k"]  # nothing of a refused call started
        assert flight.collect([], least=1) == [("k", None)]
        with pytest.raises(TypeError, match="sync Playwright object"):
            Flight(object())
    finally:
        page.close()
