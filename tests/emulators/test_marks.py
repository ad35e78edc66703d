"""Marks in the browser: built from Chromium's AX tree and DOM snapshot (real Chromium on a local page),
element actions resolved by the device, and the suites' oracles solving their tasks through element
actions alone (so every mark's box is where its element is)."""

from __future__ import annotations

import pytest

from emulators.base import GuiEnv, Task
from emulators.browser import BrowserConfig, BrowserDevice
from emulators.browser_support import build_marks
from grounding.marks import to_element_action
from guiagent.types import (
    ELEMENT_ACTION_TYPES, Click, ClickElement, Finish, LongPressElement, Mark, TypeElement,
)


# ----------------------------------------------------------------------------- build_marks on CDP JSON


def _ax(node_id, role, name="", backend=None, children=(), ignored=False):
    n = {"nodeId": str(node_id), "role": {"value": role}, "name": {"value": name},
         "childIds": [str(c) for c in children], "ignored": ignored}
    if backend is not None:
        n["backendDOMNodeId"] = backend
    return n


def _snap(rects, clickable=(), scroll=(0, 0)):
    """A DOMSnapshot reply: ``rects`` maps backend id -> (x, y, w, h) in document pixels."""
    ids = list(rects)
    return {"documents": [{
        "nodes": {"backendNodeId": ids, "isClickable": {"index": [ids.index(b) for b in clickable]}},
        "layout": {"nodeIndex": list(range(len(ids))), "bounds": [list(rects[b]) for b in ids]},
        "scrollOffsetX": scroll[0], "scrollOffsetY": scroll[1]}], "strings": []}


def test_build_marks_keeps_visible_interactive_and_named_nodes_in_document_order():
    ax = [
        _ax(1, "RootWebArea", "page", 1, children=(2, 3, 4, 5, 6, 7, 8, 9)),
        _ax(2, "heading", "Title", 2),
        _ax(3, "link", "Home", 3, children=(31,)),
        _ax(31, "image", "home icon", 31),          # inside the link: part of its mark
        _ax(4, "button", "Hidden", 4, ignored=True),
        _ax(5, "button", "Off screen", 5),
        _ax(6, "generic", "", 6, children=(61, 62)),  # a clickable row around its checkbox
        _ax(61, "checkbox", "Remember", 61),
        _ax(62, "StaticText", "Remember", 62),
        _ax(7, "generic", "", 7, children=(71,)),     # a span taking clicks: named after its text
        _ax(71, "StaticText", "  read   more ", 71),
        _ax(8, "tab", "Tab 1", 8, children=(81,)),    # a tab's link with the same name and box
        _ax(81, "link", "Tab 1", 81),
        _ax(9, "generic", "", 9),                     # a page-wide click handler: not a target
        _ax(10, "paragraph", "not a child of anything"),  # unreachable from the root: never listed
    ]
    snap = _snap({1: (0, 0, 100, 200), 2: (0, 0, 100, 10), 3: (0, 10, 50, 10), 31: (0, 10, 10, 10),
                  4: (0, 20, 50, 10), 5: (0, 300, 50, 10), 6: (0, 40, 100, 20), 61: (2, 42, 10, 10),
                  62: (14, 42, 50, 10), 7: (0, 70, 40, 10), 71: (0, 70, 40, 10), 8: (0, 90, 30, 10),
                  81: (1, 90, 28, 10), 9: (0, 0, 100, 200)},
                 clickable=(1, 6, 7, 9, 81))
    marks = build_marks(ax, snap, (100, 200))
    assert [(m.id, m.role, m.name) for m in marks] == [
        (0, "heading", "Title"), (1, "link", "Home"), (2, "checkbox", "Remember"),
        (3, "clickable", "read more"), (4, "tab", "Tab 1")]
    assert marks[1].box == (0.0, 0.05, 0.5, 0.1)


def test_build_marks_subtracts_the_scroll_and_clips_to_the_viewport():
    ax = [_ax(1, "RootWebArea", "", 1, children=(2, 3, 4)), _ax(2, "button", "a", 2), _ax(3, "button", "b", 3),
          _ax(4, "button", "c", 4)]
    snap = _snap({1: (0, 0, 100, 1000), 2: (10, 500, 20, 20), 3: (90, 590, 20, 40), 4: (0, 0, 10, 10)},
                 scroll=(0, 500))
    marks = build_marks(ax, snap, (100, 100))
    assert [(m.name, m.box) for m in marks] == [("a", (0.1, 0.0, 0.3, 0.2)), ("b", (0.9, 0.9, 1.0, 1.0))]


@pytest.mark.parametrize("ax, snap", [
    ([], _snap({})),
    ([_ax(1, "RootWebArea", "", 1)], {"documents": []}),
    ([_ax(1, "RootWebArea", "", 1, children=(2,)), _ax(2, "button", "x", 2, children=(1,))],  # a cycle
     _snap({1: (0, 0, 10, 10), 2: (0, 0, 5, 5)})),
    ([_ax(1, "RootWebArea", "", 1, children=(2, 99)), {"nodeId": "2", "role": 5, "name": None}],
     _snap({1: (0, 0, 10, 10)})),
])
def test_build_marks_survives_odd_replies(ax, snap):
    marks = build_marks(ax, snap, (10, 10))
    assert all(isinstance(m, Mark) for m in marks)


def test_build_marks_reads_states_and_no_node_gets_two_that_contradict():
    def prop(name, value):
        return {"name": name, "value": {"type": "tristate", "value": value}}

    ax = [_ax(1, "RootWebArea", "page", 1, children=(2, 3, 4)), _ax(2, "checkbox", "Both", 2),
          _ax(3, "button", "Odd", 3), _ax(4, "tab", "Open", 4)]
    ax[1]["properties"] = [prop("checked", "true"), prop("pressed", "mixed")]  # a page may say both
    ax[2]["properties"] = [7, {"name": "expanded", "value": "yes"}, prop("disabled", "maybe")]  # odd shapes: none
    ax[3]["properties"] = [prop("selected", True), {"name": "expanded", "value": {"type": "boolean", "value": True}}]
    marks = build_marks(ax, _snap({1: (0, 0, 10, 10), 2: (0, 0, 5, 2), 3: (0, 3, 5, 2), 4: (0, 6, 5, 2)}), (10, 10))
    assert [(m.name, m.states) for m in marks] == [("Both", ("checked",)), ("Odd", ()), ("Open", ("selected", "expanded"))]


# ----------------------------------------------------------------------------- a real page


@pytest.fixture()
def marked(shared_browser, page_server):
    dev = _device(shared_browser, page_server, "marks.html")
    dev.reset()
    yield dev
    dev.close()


def _by_name(marks):
    return {m.name: m for m in marks}


def _device(browser, server, page, **config):
    """A device on one of the test pages (marks on unless ``config`` says otherwise)."""
    return BrowserDevice(BrowserConfig(viewport=(400, 600), home_url=f"{server}/{page}", **{"marks": True, **config}),
                         browser=browser)


def _page_task(name, hit):
    """A task on a test page, done when the page's ``out`` element reads ``hit``."""
    class _Page(Task):
        suite, task_id, template = "test", name, f"press {name}"

        @classmethod
        def sample_params(cls, rng):
            return {}

        def setup(self, device):
            return self.goal

        def evaluate(self, device, answer=None):
            return float(device.evaluate("() => document.getElementById('out').textContent") == hit)

        def oracle(self, device):
            return Finish()

    return _Page


def test_page_marks(marked):
    obs = marked.observe()
    assert [(m.role, m.name) for m in obs.marks] == [
        ("heading", "Marks page"), ("button", "Send"), ("link", "Inbox"), ("textbox", "Recipient"),
        ("checkbox", "Remember me"), ("clickable", "a span with a listener"), ("radio", "Pick row"),
        ("button", "New")]  # not: display:none, visibility:hidden, aria-hidden, below the fold, the row
    assert [m.id for m in obs.marks] == list(range(8))
    assert marked.observe().marks == obs.marks  # the same screen numbers the same way
    assert _by_name(obs.marks)["Send"].box == pytest.approx((10 / 400, 50 / 600, 130 / 400, 90 / 600), abs=1e-4)


@pytest.mark.parametrize("name, hit", [("Send", "hit b1"), ("Inbox", "hit l1"),
                                       ("a span with a listener", "hit s1"), ("New", "hit fab")])
def test_element_actions_land_on_their_element(marked, name, hit):
    m = _by_name(marked.observe().marks)[name]
    marked.execute(ClickElement(m.id))
    assert marked.evaluate("() => document.getElementById('out').textContent") == hit


def test_after_scrolling_marks_follow_the_page(marked):
    marked.evaluate("() => window.scrollTo(0, 1100)")
    marked.settle()
    marks = _by_name(marked.observe().marks)
    assert set(marks) == {"Far below", "New"}  # the fixed button stays, the rest scrolled away
    assert marks["Far below"].box == pytest.approx((10 / 400, 100 / 600, 130 / 400, 140 / 600), abs=1e-4)
    marked.execute(ClickElement(marks["Far below"].id))
    assert marked.evaluate("() => document.getElementById('out').textContent") == "hit far"


def test_type_and_long_press_on_elements(marked):
    marks = _by_name(marked.observe().marks)
    marked.execute(TypeElement(marks["Recipient"].id, "Ann"))
    assert marked.evaluate("() => document.getElementById('t1').value") == "Ann"
    marked.execute(LongPressElement(marks["Send"].id, duration_ms=100))  # a held mouse press still clicks
    assert marked.evaluate("() => document.getElementById('out').textContent") == "hit b1"


def test_unknown_element_is_an_action_error_and_the_episode_goes_on(shared_browser, page_server):
    env = GuiEnv(_device(shared_browser, page_server, "marks.html"), _page_task("marks", "hit b1"), max_steps=5)
    try:
        obs, _ = env.reset_typed(seed=0)
        obs, term, trunc, info = env.step_typed(ClickElement(99))
        assert "no element 99 on this screen; its elements are numbered 0-7" in obs.last_action_error
        assert info.action_error and not term and not trunc
        send = _by_name(obs.marks)["Send"]
        obs, term, trunc, info = env.step_typed(ClickElement(send.id))
        assert info.action_error is None and info.target_box == send.box  # the mark's own box is recorded
        obs, term, trunc, info = env.step_typed(Finish())
        assert term and info.success == 1.0
    finally:
        env.close()


def test_marks_are_off_by_default_and_element_actions_then_fail(shared_browser, page_server):
    dev = _device(shared_browser, page_server, "marks.html", marks=False)
    try:
        dev.reset()
        assert dev.observe().marks is None
        from emulators.base import ActionError
        with pytest.raises(ActionError, match="marks are off"):
            dev.execute(ClickElement(0))
        assert len(dev.marks()) == 8  # suites and checks may still ask for them
    finally:
        dev.close()
    assert BrowserConfig(marks="true").marks is True  # from the command line (--device marks true)
    with pytest.raises(ValueError, match="marks must be true or false"):
        BrowserConfig(marks="maybe")


# ----------------------------------------------------------------------------- suites through element actions


def _solve_with_elements(env, seed):
    """Run the oracle with each point action turned into the element action on the mark it lands on."""
    obs, info = env.reset(seed=seed)
    obs, elements = info["observation"], 0
    for _ in range(env.max_steps):
        action = to_element_action(env.oracle_action(), obs.marks)
        elements += isinstance(action, ELEMENT_ACTION_TYPES)
        assert not isinstance(action, Click), f"a tap on no mark: {action}"
        _, reward, term, trunc, info = env.step(action)
        obs = info["observation"]
        assert info["step"].action_error is None, info["step"].action_error
        if term or trunc:
            return reward, elements
    return 0.0, elements


@pytest.mark.parametrize("task", ["open_app", "files_open_folder", "contacts_delete", "settings_device_name"])
def test_webapps_oracles_solve_through_element_actions(task):
    from emulators.suites import get_suite

    suite = get_suite("webapps")
    env = suite.make_env(task, device=suite.make_device(marks=True))
    try:
        for seed in (0, 1):
            reward, elements = _solve_with_elements(env, seed)
            assert reward == 1.0 and elements >= 1
    finally:
        env.close()


@pytest.mark.parametrize("task", ["click-button", "click-link", "click-tab", "click-option", "click-widget"])
def test_miniwob_oracles_solve_through_element_actions(task):
    from emulators.suites import get_suite

    suite = get_suite("miniwob")
    env = suite.make_env(task, device=suite.make_device(marks=True))
    try:
        for seed in (0, 1, 2):
            reward, elements = _solve_with_elements(env, seed)
            assert reward == 1.0 and elements >= 1
    finally:
        env.close()


# ----------------------------------------------------------------------------- element states


def test_marks_carry_the_states_chromium_reports_and_follow_a_tick(shared_browser, page_server):
    """Checked, mixed, selected, expanded / collapsed, disabled and pressed, as the page's controls hold them;
    ticking a box shows in the next screen's marks, and the marks format lists them only when asked."""
    from grounding.marks import MarksFormat

    dev = _device(shared_browser, page_server, "states.html")
    try:
        dev.reset()
        obs = dev.observe()
        states = {m.name: m.states for m in obs.marks}
        assert states == {"Remember me": ("checked",), "Newsletter": (), "All files": ("mixed",),
                          "Inbox": ("selected", "expanded"), "Sent": ("collapsed",),
                          "More options": ("collapsed",), "Delete": ("disabled",), "Bold": ("checked",),
                          "Wi-Fi": (), "Plain": ()}, states
        box = _by_name(obs.marks)["Newsletter"]
        dev.execute(ClickElement(box.id))
        after = _by_name(dev.observe().marks)
        assert after["Newsletter"].states == ("checked",) and after["Remember me"].states == ("checked",)
        listed = MarksFormat(states=True).observation_text(dev.observe())
        assert f'[{box.id}] checkbox checked "Newsletter"' in listed and "Elements (id role states" in listed
        assert "checked" not in MarksFormat().observation_text(dev.observe())  # off unless asked
    finally:
        dev.close()


@pytest.fixture()
def overlap(shared_browser, page_server):
    """A device on the page of overlapping buttons, reset, and how to read what was hit."""
    dev = _device(shared_browser, page_server, "overlap.html")
    dev.reset()
    yield dev
    dev.close()


def _hit(dev):
    return dev.evaluate("() => document.getElementById('out').textContent")


def test_an_element_action_taps_the_part_of_its_element_nothing_covers(overlap):
    """Two buttons overlapping (as MiniWoB++'s random layouts place them): the centre of the one beneath
    lies under the other, so a tap at its mark's centre would press the wrong button; the device taps
    the nearest point of the box that the element itself takes. An element covered whole, or gone from
    the page since the observation, is tapped at its centre as before (no error of the device's own)."""
    dev = overlap
    marks = _by_name(dev.observe().marks)
    under = marks["Under"]
    cx, cy = under.center
    assert marks["Over"].contains(cx, cy)  # the centre lies under the other button
    dev.execute(ClickElement(under.id))
    assert _hit(dev) == "hit under"
    dev.execute(ClickElement(marks["Over"].id))
    assert _hit(dev) == "hit over"
    dev.execute(LongPressElement(under.id, duration_ms=100))  # a held press too
    assert _hit(dev) == "hit under"
    dev.execute(ClickElement(marks["Hidden"].id))  # covered whole: the centre, which the cover takes
    assert _hit(dev) == "hit cover"
    marks = _by_name(dev.observe().marks)
    dev.evaluate("() => { const b = document.getElementById('gone'); b.remove(); }")
    dev.execute(ClickElement(marks["Gone"].id))  # its node is gone: no error, a tap at the centre on nothing
    assert _hit(dev) == "hit cover"  # (the last hit stands)


def test_the_step_records_where_an_element_action_tapped_and_the_overlay_draws_it_there(shared_browser, page_server):
    """The tapped point goes with the step (``StepInfo.tap_point``, the step's ``tap_point`` metadata), so a
    replay draws the tap where it landed: off the centre of a button another one covers."""
    from guiagent.overlay import overlay
    from rl.rollout import step_metadata

    dev = _device(shared_browser, page_server, "overlap.html")
    env = GuiEnv(dev, _page_task("overlap", "hit under"), max_steps=5)
    try:
        obs, _ = env.reset_typed(seed=0)
        marks = _by_name(obs.marks)
        under, over = marks["Under"], marks["Over"]
        _, _, _, info = env.step_typed(ClickElement(99))  # no such element: nothing tapped
        assert info.action_error and info.tap_point is None
        obs, _, _, info = env.step_typed(ClickElement(under.id))
        assert _hit(dev) == "hit under" and info.tap_point is not None
        x, y = info.tap_point
        assert under.contains(x, y) and not over.contains(x, y) and (x, y) != under.center
        assert step_metadata(info.target_box, (), info.tap_point)["tap_point"] == [round(x, 5), round(y, 5)]
        drawn = overlay(ClickElement(under.id), (400, 600), tuple(marks.values()), (x, y))
        assert drawn["points"][0]["x"] == round(x * 400, 1) and drawn["points"][0]["y"] == round(y * 600, 1)
        _, _, _, info = env.step_typed(ClickElement(over.id))  # nothing covers its centre: tapped there
        assert info.tap_point == over.center
        _, _, _, info = env.step_typed(Click(*over.center))  # a point action: its own point, nothing more
        assert info.tap_point is None
    finally:
        env.close()


def test_build_marks_gives_each_mark_its_dom_node():
    ax = [_ax(1, "RootWebArea", "page", 1, children=(2, 3, 5, 4)), _ax(2, "button", "A", 20),
          _ax(3, "button", "B"),                                   # no DOM node: no box, no mark
          _ax(5, "tab", "T", 50, children=(51,)), _ax(51, "link", "T", 51),  # the tab's own link: dropped
          _ax(4, "link", "C", 40)]
    snap = _snap({1: (0, 0, 100, 200), 20: (0, 0, 50, 10), 50: (0, 12, 30, 8), 51: (1, 12, 28, 8),
                  40: (0, 20, 50, 10)})
    nodes: dict[int, int] = {}
    marks = build_marks(ax, snap, (100, 200), nodes)
    assert [m.name for m in marks] == ["A", "T", "C"] and nodes == {0: 20, 1: 50, 2: 40}


def test_a_page_that_breaks_the_hit_test_gets_its_centre_tapped(overlap):
    """The search for an uncovered point runs in the page: a page whose hit test throws (or lies) cannot make
    the element action fail or tap outside the element's box; the centre is tapped, as without the search."""
    marks = _by_name(overlap.observe().marks)
    overlap.evaluate("() => { Document.prototype.elementFromPoint = () => { throw new Error('no'); }; }")
    overlap.execute(ClickElement(marks["Under"].id))
    assert _hit(overlap) == "hit over"  # the centre, where the other button lies
    overlap.evaluate("() => { Document.prototype.elementFromPoint = () => null; }")
    overlap.execute(ClickElement(marks["Under"].id))
    assert _hit(overlap) == "hit over"


def test_a_web_components_slotted_label_is_its_own_and_its_centre_is_tapped(shared_browser, page_server):
    """A button inside a shadow root, its label slotted from the page: the label at the centre is the button's
    own (through its slot), so the tap stays at the centre rather than moving to the button's padding."""
    dev = _device(shared_browser, page_server, "overlap_shadow.html")
    try:
        dev.reset()
        button = next(m for m in dev.observe().marks if m.role == "button")
        assert button.name == "Save"
        dev.execute(ClickElement(button.id))
        assert dev.evaluate("() => document.getElementById('out').textContent") == "hit 100,70"
    finally:
        dev.close()


def test_a_point_outside_the_box_from_the_page_is_not_tapped(overlap, monkeypatch):
    """The page runs the search: whatever it answers, a point outside the element's box is refused for the centre."""
    under = _by_name(overlap.observe().marks)["Under"]
    real = overlap._send

    def lying(method, params=None, budget_ms=0):
        if method == "Runtime.callFunctionOn":
            return {"result": {"type": "object", "value": [399, 599]}}  # a point far outside the box
        return real(method, params, budget_ms)

    monkeypatch.setattr(overlap, "_send", lying)
    assert overlap._uncovered(under) is None
    assert overlap._resolve(ClickElement(under.id)) == Click(*under.center)
