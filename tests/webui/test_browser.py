"""Real Chromium against the real server: keyboard replay, compare view, charts, no script injection."""

from __future__ import annotations

import threading

import pytest
from werkzeug.serving import make_server

pytestmark = pytest.mark.browser



@pytest.fixture(scope="module")
def base_url(app):
    server = make_server("127.0.0.1", 0, app, threaded=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    t.join(5)


@pytest.fixture(scope="module")
def browser():
    # The project's launcher shares this thread's Playwright driver with other suites' browsers
    # (a second sync_playwright() in one thread fails while another is running).
    from emulators.browser import BrowserConfig, launch_browser

    handle = launch_browser(BrowserConfig())
    yield handle.browser
    handle.close()


@pytest.fixture()
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.problems = []  # console errors (CSP violations included), alerts, page errors
    pg.on("console", lambda m: pg.problems.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.problems.append(str(e)))
    pg.on("dialog", lambda d: (pg.problems.append("dialog: " + d.message), d.dismiss()))
    yield pg
    ctx.close()


def _visible(page, root=""):
    """(counter text, data-step and class of the visible overlay) of a player."""
    counter = page.locator(f"{root} .step-counter").first.text_content()
    svg = page.locator(f"{root} .steps > .step:not([hidden]) svg.overlay")
    if svg.count() == 0:
        return counter, None, None
    return counter, svg.get_attribute("data-step"), svg.get_attribute("class")


def test_replay_steps_with_the_keyboard(page, base_url):
    page.goto(f"{base_url}/episodes/ep-rich")
    assert _visible(page) == ("Step 1 / 9", "0", "overlay overlay-click")
    page.wait_for_function("() => document.querySelector('.step:not([hidden]) .shot img')"
                           ".naturalWidth === 360")
    page.keyboard.press("ArrowRight")
    assert _visible(page) == ("Step 2 / 9", "1", "overlay overlay-long_press")
    # the overlay is laid exactly over the screenshot, scaled with it
    box_img = page.locator(".step:not([hidden]) .shot img").bounding_box()
    box_svg = page.locator(".step:not([hidden]) svg.overlay").bounding_box()
    assert box_svg == pytest.approx(box_img, abs=1.0)
    page.keyboard.press("ArrowRight")
    counter, idx, cls = _visible(page)
    assert (counter, idx) == ("Step 3 / 9", "2")
    # typed <script> text is shown as text, never run
    assert "<script>" in page.locator(".step:not([hidden]) .thought").text_content()
    page.keyboard.press("End")  # the screen after the last step
    assert _visible(page) == ("Final screen", None, None)
    assert page.locator(".step.final:not([hidden]) img").count() == 1
    page.keyboard.press("ArrowRight")  # stays at the end
    assert _visible(page)[0] == "Final screen"
    page.keyboard.press("ArrowLeft")
    assert _visible(page)[:2] == ("Step 9 / 9", "8")
    page.keyboard.press("Home")
    assert _visible(page)[0] == "Step 1 / 9"
    page.locator(".filmstrip .thumb").nth(5).click()
    assert _visible(page)[:2] == ("Step 6 / 9", "5")
    assert page.url.endswith("?step=5")
    page.locator(".nav-prev").click()
    assert _visible(page)[0] == "Step 5 / 9"
    assert page.problems == []


def test_compare_view_steps_together_and_apart(page, base_url):
    page.goto(f"{base_url}/compare?a=ep-rich&b=ep-sib")
    a, b = '.side[data-side="a"]', '.side[data-side="b"]'
    assert _visible(page, a)[0] == "Step 1 / 9" and _visible(page, b)[0] == "Step 1 / 3"
    page.wait_for_function("() => Array.from(document.querySelectorAll('.step:not([hidden]) .shot img'))"
                           ".every(i => i.naturalWidth === 360)")
    page.keyboard.press("ArrowRight")
    assert _visible(page, a)[0] == "Step 2 / 9" and _visible(page, b)[0] == "Step 2 / 3"
    page.keyboard.press("End")
    assert _visible(page, a)[0] == "Final screen" and _visible(page, b)[0] == "ended after 3 steps"
    page.keyboard.press("ArrowLeft")
    assert _visible(page, a)[0] == "Step 9 / 9" and _visible(page, b)[0] == "ended after 3 steps"
    page.locator("#link-steps").uncheck()
    page.locator(f"{b} .nav-first").click()  # unlinked: only b moves
    assert _visible(page, a)[0] == "Step 9 / 9" and _visible(page, b)[0] == "Step 1 / 3"
    page.keyboard.press("ArrowRight")  # the keyboard follows the side last used
    assert _visible(page, a)[0] == "Step 9 / 9" and _visible(page, b)[0] == "Step 2 / 3"
    page.keyboard.press("End")
    assert _visible(page, b)[0] == "Step 3 / 3"  # alone, b stops at its own last step
    assert page.problems == []


def test_runs_page_draws_charts(page, base_url):
    page.goto(f"{base_url}/")
    train = page.locator('.run-card[data-run="train~trainrun0001"]')
    evals = page.locator('.run-card[data-run="evals.held-out~evalrun0001"]')
    train.locator("svg.chart").first.wait_for()
    titles = train.locator(".chart-title").all_text_contents()
    assert titles[:4] == ["Success rate", "Reward components", "Episode length", "Parse errors"]
    assert train.locator('polyline.series[data-name="reward/task"]').count() == 1
    # the held-out points (before, during, after; seen and unseen targets) on the success chart, named
    success = train.locator("figure.chart-box").first
    assert success.locator('polyline.series[data-name="eval_success_unseen"]').count() == 1
    assert success.locator("circle title").all_text_contents()[:3] == [
        "held-out @ 0: 0.4", "held-out @ 5: 0.6", "held-out @ 10: 0.8"]
    assert success.locator(".legend").text_content() == "held-outheld-out, unseen targetstraining rollouts"
    evals.locator("svg.chart.bars").wait_for()
    assert evals.locator("rect.bar").count() == 3
    assert page.problems == []


def test_runs_page_refreshes_while_a_run_is_live(page, tmp_path):
    from guiagent.store import Store
    from webui import AppConfig, create_app

    from tests.webui.conftest import short_trajectory

    with Store.open(tmp_path / "live") as s:
        rid = s.create_run("live-run", algo="grpo", run_id="liverun")
        s.write_trajectory(rid, short_trajectory("l-0", "todo_add", 1, 1.0, 2))
        s.log_metrics(rid, 0, {"success_rate": 0.2})
        app = create_app(AppConfig(runs=tmp_path, refresh_s=0.3, rescan_s=0.1))
        server = make_server("127.0.0.1", 0, app, threaded=True)
        t = threading.Thread(target=server.serve_forever, daemon=True)
        t.start()
        try:
            page.goto(f"http://127.0.0.1:{server.server_port}/")
            card = page.locator('.run-card[data-run="live~liverun"]')
            card.locator("polyline.series").wait_for(state="attached")
            assert card.locator(".run-episodes").text_content() == "1"
            s.write_trajectory(rid, short_trajectory("l-1", "todo_add", 2, 0.0, 3))
            s.log_metrics(rid, 1, {"success_rate": 0.4})
            page.wait_for_function("() => document.querySelector('.run-card .run-episodes')"
                                   ".textContent === '2'")
            page.wait_for_function("() => document.querySelectorAll('.run-card svg.chart circle')"
                                   ".length === 2")
            s.set_run_status(rid, "finished")
            page.wait_for_function("() => document.querySelector('.run-card .run-status .badge').textContent"
                                   " === 'finished'")
            assert card.get_attribute("data-status") == "finished"
        finally:
            server.shutdown()
            t.join(5)
    assert page.problems == []
