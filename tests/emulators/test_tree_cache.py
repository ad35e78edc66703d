"""BrowserConfig.tree_cache: an observation reuses the last ARIA tree only while the page has not
changed in any way the tree reads; after every kind of change the observation's tree is the one a
fresh read gives (real Chromium, pages served on 127.0.0.1)."""

from __future__ import annotations

import pytest

from emulators.browser import BrowserConfig, BrowserDevice
from guiagent.types import Click, Hover, Type

pytestmark = pytest.mark.browser

W, H = 1280, 720


@pytest.fixture()
def dev(shared_browser, page_server):
    d = BrowserDevice(BrowserConfig.desktop(home_url=page_server + "/tree_cache.html", reuse_context=True),
                      browser=shared_browser)
    d.reset()
    yield d
    d.close()


def fresh(dev: BrowserDevice) -> str:
    return dev.page.locator("body").aria_snapshot()


def counts(dev: BrowserDevice) -> tuple[int, int]:
    return dev.tree_reads, dev.tree_reuses


def empty_spot() -> Click:
    return Click(1100 / W, 650 / H)


def test_an_unchanged_page_reuses_its_tree_and_the_screenshot_is_still_taken(dev):
    # the pointer on the empty spot first: Chromium's own pointer events after a page's first layout
    # (a pointerover where the pointer is) arrive when they do, and a new element under the pointer
    # is a change (the tree is read again, rightly); the test is about the step after
    dev.execute(empty_spot())
    first = dev.observe()
    assert first.tree == fresh(dev)
    reads, reuses = counts(dev)
    dev.execute(empty_spot())
    again = dev.observe()
    assert counts(dev) == (reads, reuses + 1)
    assert again.tree == first.tree == fresh(dev)
    assert again.screenshot and again.screenshot[:8] == b"\x89PNG\r\n\x1a\n"


CHANGES = {
    # a script's property writes: no attribute changes, no events
    "input value": lambda d: d.evaluate("document.getElementById('name').value = 'typed by a script'"),
    "checked": lambda d: d.evaluate("document.getElementById('agree').checked = true"),
    "select value": lambda d: d.evaluate("document.getElementById('pick').value = 'b'"),
    "popover": lambda d: d.evaluate("document.getElementById('pop').showPopover()"),
    "shadow root": lambda d: d.evaluate("window.shadowButton.textContent = 'Shadow two'"),
    "dom": lambda d: d.evaluate("document.querySelector('h1').textContent = 'Changed'"),
    # the user's own input
    "typing": lambda d: (d.execute(Click(*d.center("#name"))), d.execute(Type("hello"))),
    "click a checkbox": lambda d: d.execute(Click(*d.center("#agree"))),
    "details": lambda d: d.execute(Click(*d.center("#more summary"))),
    "hover": lambda d: d.execute(Hover(*d.center(".menu span"))),
}


@pytest.mark.parametrize("kind", list(CHANGES))
def test_every_kind_of_change_reads_the_tree_again(dev, kind):
    before = dev.observe()
    dev.execute(empty_spot())
    assert dev.observe().tree == before.tree  # cached now
    reads = dev.tree_reads
    CHANGES[kind](dev)
    dev.settle()
    after = dev.observe()
    assert after.tree == fresh(dev), kind
    assert after.tree != before.tree, f"{kind}: the page's tree should have changed"
    assert dev.tree_reads > reads, kind


def test_a_new_document_with_the_same_url_is_read_again(dev, page_server):
    dev.observe()
    dev.evaluate("document.querySelector('h1').textContent = 'Changed'")
    dev.settle()
    changed = dev.observe()
    dev.goto(page_server + "/tree_cache.html")  # the same url, a fresh document
    reads = dev.tree_reads
    back = dev.observe()
    assert dev.tree_reads == reads + 1 and back.tree == fresh(dev) != changed.tree


def test_pages_with_subframes_and_a_device_without_the_cache_always_read(shared_browser, page_server):
    for cfg in (BrowserConfig.desktop(home_url=page_server + "/tree_cache_frame.html"),
                BrowserConfig.desktop(home_url=page_server + "/tree_cache.html", tree_cache=False)):
        d = BrowserDevice(cfg, browser=shared_browser)
        try:
            d.reset()
            for _ in range(3):
                d.execute(empty_spot())
                assert d.observe().tree == fresh(d)
            assert d.tree_reuses == 0 and d.tree_reads >= 3
        finally:
            d.close()


def test_the_cache_is_a_config_switch():
    assert BrowserConfig().tree_cache is True
    assert BrowserConfig(tree_cache="false").tree_cache is False  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tree_cache"):
        BrowserConfig(tree_cache="maybe")  # type: ignore[arg-type]


@pytest.mark.parametrize("suite_name, task_ids", [
    ("webapps", ["settings_turn_on", "notes_create", "open_app_shuffled", "files_open_folder"]),
    # the cache is the device's, not the suite's: MiniWoB++ pages again under -m slow (8 s here)
    pytest.param("miniwob", ["click-checkboxes", "enter-text", "use-autocomplete", "choose-list", "click-tab-2"],
                 marks=pytest.mark.slow),
])
def test_random_episodes_see_the_tree_a_fresh_read_gives_at_every_step(shared_browser, suite_name, task_ids):
    """A random agent's taps, typing and keys on real suite pages: the observation's tree is the page's
    own at every step, whether it was read or reused (and some were reused: taps on empty spots)."""
    import random

    from emulators.base import GuiEnv
    from emulators.suites import get_suite
    from guiagent.types import Key

    suite = get_suite(suite_name)
    device = suite.make_device(browser=shared_browser)
    rng = random.Random(7)
    try:
        for task_id in task_ids:
            env = GuiEnv(device, suite.task_class(task_id))
            for seed in (0, 1):
                env.reset_typed(seed=seed)
                for _ in range(6):
                    r = rng.random()
                    action = (Type("abc") if r < 0.15 else Key("Tab") if r < 0.25
                              else Click(rng.random(), rng.random()))
                    obs, term, trunc, _ = env.step_typed(action)
                    assert obs.tree == fresh(device), (task_id, seed, action)
                    if term or trunc:
                        break
        assert device.tree_reuses > 0 and device.tree_reads > 0
    finally:
        device.close()
