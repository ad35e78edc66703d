"""Snapshots of webapps episodes, on every task, against the episode driven to the same point.

One real Chromium and the real app server for the module, three phone devices (contexts). For
each task (seed 0; by default one task of each app, every task with ``-m slow``): env A runs the oracle to the end, snapshotting at every step and recording what
the episode shows at the start, half way and at the end (``-m slow``: before the last action too,
with ARIA trees, seeds 0-2, and a third env driven afresh with the same actions checked against
the records). Each of those states is then restored on A (which has gone on since: the state must
come back, not merely stay) or on B (another device, so another session), by turns (``-m slow``:
on both), and must agree with the record: screenshot bytes (the observation the restore returns and a fresh capture), ARIA tree and
url (session id aside), server-side session state, milestones, the task's success check, the env's
counters and the page's history, scroll, focus, open dialog and fields. Then the half-way state is
restored on B once more (the branch case: another slot) and the oracle solves the task from there.
"""

from __future__ import annotations

import dataclasses

import pytest

from emulators.base import GuiEnv, SnapshotError
from emulators.snapshot import EnvState, StartStates
from emulators.suites.webapps import SUITE, TASKS
from guiagent.types import Answer, Click, Key, NavigateBack, Scroll, Type, Wait
from tests.sweeps import first_of_each, sweep

pytestmark = pytest.mark.browser

_PAGE_JS = """() => ({history: history.length, scroll: [scrollX, scrollY],
                      focus: document.activeElement ? [document.activeElement.tagName, document.activeElement.className,
                              document.activeElement.getAttribute('aria-label'), document.activeElement.name,
                              document.activeElement.textContent.slice(0, 40),
                              document.activeElement.matches(':focus-visible')] : null,
                      dialog: (document.querySelector('dialog[open]') || {}).id || null,
                      fields: Array.from(document.querySelectorAll('input, textarea, select'), (c) => c.value)})"""


@pytest.fixture(scope="module")
def devices(shared_browser):
    devs = [SUITE.make_device(browser=shared_browser) for _ in range(3)]
    yield devs
    for d in devs:
        d.close()
    SUITE.close()


@pytest.fixture(scope="module")
def screen_devices(shared_browser, devices):
    """Devices without the ARIA tree (the every-task sweep: half the capture cost; trees are compared
    in the other tests and in the slow sweep)."""
    devs = [SUITE.make_device(browser=shared_browser, tree="none") for _ in range(3)]
    yield devs
    for d in devs:
        d.close()


def _norm(env: GuiEnv, text: str | None) -> str:
    return (text or "").replace(env.task.sid, "SID")


def _point(env: GuiEnv, obs) -> dict:
    """Everything the two envs must agree on at one point of the episode."""
    task, dev = env.task, env.device
    fresh = dev.observe()
    return {
        "screenshot": obs.screenshot, "fresh screenshot": fresh.screenshot, "tree": _norm(env, obs.tree),
        "fresh tree": _norm(env, fresh.tree), "url": _norm(env, obs.url), "error": obs.last_action_error,
        "session": task.state(), "milestones": task.milestones(dev),
        "success": task.evaluate(dev, env.answer), "steps": env.steps, "done": env.done, "answer": env.answer,
        "page": {k: (_norm(env, v) if isinstance(v, str) else v) for k, v in dev.evaluate(_PAGE_JS).items()},
    }


def _diff(a: dict, b: dict) -> list[str]:
    return [k for k in a if a[k] != b[k]]


def _check_task(task_id: str, seed: int, devices, *, slow: bool = False) -> None:
    """A runs the oracle, recording each snapshot point as it passes it (the episode driven afresh to
    that point) and snapshotting; then each state is restored on A (gone further since) and on B
    (another session) and compared with the record. ``slow``: also before the last action, and
    against a third env driven afresh with the same actions; the branch continues on B otherwise."""
    a, b, c = (GuiEnv(d, TASKS[task_id]) for d in devices)
    obs, _ = a.reset_typed(seed=seed)
    actions, states, records = [], {0: a.snapshot()}, {0: _point(a, obs)}
    done = False
    while not done:
        action = a.oracle_action()
        assert action is not None, f"{task_id}: the oracle got stuck"
        obs, term, trunc, _ = a.step_typed(action)
        actions.append(action)
        done = term or trunc
        states[len(actions)] = a.snapshot()
        records[len(actions)] = _point(a, obs)
    n = len(actions)
    points = sorted({0, n // 2, max(n - 1, 0), n} if slow else {0, n // 2, n})
    assert a.task.evaluate(a.device, a.answer) == 1.0, f"{task_id}: the oracle did not solve it"

    if slow:  # C afresh, driven with the same actions: the records are what a fresh episode shows
        obs_c, _ = c.reset_typed(seed=seed)
        for k in range(n + 1):
            if k:
                obs_c, *_ = c.step_typed(actions[k - 1])
            if k in points:
                bad = _diff(records[k], _point(c, obs_c))
                assert not bad, f"{task_id} seed {seed}: a fresh episode differs at step {k}: {bad}"
    for i, k in enumerate(points):
        # the default sweep restores each point once, on A (gone on since) and on B by turns; slow: on both
        targets = ((a, "on the same device, after going on"), (b, "on another device"))
        for env, where in (targets if slow else (targets[(i + 1) % 2],)):
            bad = _diff(records[k], _point(env, env.restore(states[k])))
            assert not bad, f"{task_id} seed {seed}, step {k} of {n} restored {where}: {bad} differ"

    # the branch case: the half-way state on another device (another session), solved from there
    k = n // 2
    obs_b = b.restore(states[k])
    assert obs_b.screenshot == states[k].observation.screenshot
    assert b.task.state()["log"] == states[k].task["session"]["log"]
    done = states[k].done
    while not done:
        _, term, trunc, _ = b.step_typed(b.oracle_action())
        done = term or trunc
    assert b.task.evaluate(b.device, b.answer) == 1.0, f"{task_id}: not solved from the restored step {k}"
    for env in (a, b, c):
        if env.task is not None:
            env.task.teardown(env.device)


#: by default one task of each app (their first by name), one cross-app task and a shuffled layout;
#: the other tasks with -m slow (tests/sweeps.py)
CROSS_APP = {"alarm_for_event", "note_contact_phone", "share_event_time"}  # message_category_total stays
SNAPSHOT_DEFAULT = (first_of_each(TASKS) - CROSS_APP) | {"files_open_folder_shuffled"}


@pytest.mark.parametrize("task_id", sweep(sorted(TASKS), SNAPSHOT_DEFAULT))
def test_restored_episode_matches_a_fresh_copy(task_id, screen_devices):
    _check_task(task_id, 0, screen_devices)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_restored_episode_matches_a_fresh_copy_more_seeds(task_id, seed, devices):
    """With ARIA trees, against a fresh copy, and also restored just before the last action."""
    _check_task(task_id, seed, devices, slow=True)


def _tap(selector: str):
    return lambda d: Click(*d.center(selector))


#: page changes of every kind: links, typing, a save that goes Back, a scrolled list, the up arrow,
#: Back to the scrolled list, keyboard focus, a dialog opened and a field typed but not saved
SCRIPT = [
    _tap('a.app-icon[data-app="notes"]'), _tap("a.card"), lambda d: Type(" and more", *d.center("textarea")),
    _tap("button.save"), lambda d: Scroll("down", amount=0.3), _tap("a.up"), lambda d: NavigateBack(),
    lambda d: Key("Tab"), _tap('a.card:has-text("Workout")'), _tap("#delete"), lambda d: Key("Escape"),
    lambda d: Type("half typed", *d.center("input[name=title]")),
]


def test_every_step_of_a_varied_episode_continues_the_same_after_a_restore(devices):
    """A state taken at any step, restored on another device, goes on exactly as the original did:
    every later step's screen, tree and page state are the original's (history, referrers for the
    apps' Back-like redirects, scroll positions of earlier entries, focus, dialogs, typed fields)."""
    a, b, _ = (GuiEnv(d, TASKS["notes_create"]) for d in devices)
    obs, _ = a.reset_typed(seed=4)
    states, actions, points = [a.snapshot()], [], [_point(a, obs)]
    for make in SCRIPT:
        action = make(a.device)
        obs, *_ = a.step_typed(action)
        actions.append(action)
        states.append(a.snapshot())
        points.append(_point(a, obs))
    for k in range(len(states)):
        obs = b.restore(states[k])
        assert not _diff(points[k], _point(b, obs)), f"restored at step {k}: {_diff(points[k], _point(b, obs))}"
        for j in range(k, min(k + 3, len(actions))):
            obs, *_ = b.step_typed(actions[j])
            bad = _diff(points[j + 1], _point(b, obs))
            assert not bad, f"restored at step {k}, then step {j + 1}: {bad} differ"


def test_state_round_trips_through_json_and_restores(devices):
    import json

    a, b, _ = (GuiEnv(d, TASKS["contacts_add"]) for d in devices)
    a.reset_typed(seed=3)
    for _ in range(3):
        a.step_typed(a.oracle_action())
    state = a.snapshot()
    text = json.dumps(state.to_dict())
    again = EnvState.from_dict(json.loads(text))
    assert again == state
    obs = b.restore(again)
    assert obs.screenshot == state.observation.screenshot == b.device.observe().screenshot
    assert b.task.state() == state.task["session"] and b.steps == 3


def test_refusals_are_snapshot_errors(devices, shared_browser):
    a = GuiEnv(devices[0], TASKS["contacts_add"])
    with pytest.raises(SnapshotError, match="reset"):
        a.snapshot()
    a.reset_typed(seed=1)
    state = a.snapshot()
    other = GuiEnv(devices[1], TASKS["notes_create"])
    with pytest.raises(SnapshotError, match="cannot be restored on an env of"):
        other.restore(state)
    # a device that loads every page for real keeps the page's state in documents: no snapshots
    loads = SUITE.make_device(browser=shared_browser, page_loads=True)
    try:
        env = GuiEnv(loads, TASKS["contacts_add"])
        assert not env.can_snapshot and "page_loads" in env.snapshot_support()
        env.reset_typed(seed=1)
        with pytest.raises(SnapshotError):
            env.snapshot()
        with pytest.raises(SnapshotError):
            env.restore(state)
    finally:
        loads.close()
    # another screen size: the page would lay out differently
    small = SUITE.make_device(browser=shared_browser, viewport=(320, 560))
    try:
        with pytest.raises(SnapshotError, match="another screen"):
            GuiEnv(small, TASKS["contacts_add"]).restore(state)
    finally:
        small.close()
    # a tampered state is refused, not half restored
    bad = dataclasses.replace(state, task={"session": {"contacts": "not a list"}, "sid": "x", "origin": "y"})
    with pytest.raises(SnapshotError, match="does not fit"):
        a.restore(bad)
    a.reset_typed(seed=1)
    assert a.snapshot().observation.screenshot == state.observation.screenshot


def test_answer_and_counters_come_back(devices):
    a, b, _ = (GuiEnv(d, TASKS["contacts_phone_lookup"]) for d in devices)
    a.reset_typed(seed=0)
    while True:
        action = a.oracle_action()
        if isinstance(action, Answer):
            break
        a.step_typed(action)
    a.step_typed(Answer("not the number"))  # an answer that ends nothing yet is still the env's
    state = a.snapshot()
    b.restore(state)
    assert (b.steps, b.done, b.answer, b.task_spec) == (a.steps, a.done, a.answer, a.task_spec)


@pytest.mark.parametrize("task_id", ["open_app", "open_app_shuffled", "settings_turn_on", "files_open_folder",
                                     "go_home", "notes_create", "contacts_phone_lookup"])
def test_reset_by_restore_gives_the_start_a_reset_builds(task_id, devices):
    """A second env resetting to the same start restores the first's (another device: another
    session) and shows what a plain reset shows; both episodes then go on the same way."""
    starts = StartStates()
    first, second = GuiEnv(devices[0], TASKS[task_id], start_states=starts), GuiEnv(devices[1], TASKS[task_id],
                                                                                     start_states=starts)
    plain = GuiEnv(devices[2], TASKS[task_id])
    plain.start_states = None
    envs = (plain, first, second)
    for env in envs:  # every device shows an app page (a fresh one loads its first)
        env.reset_typed(seed=6)
    requests: list[str] = []

    def on_request(request):
        requests.append(request.url)

    points = []
    for env in envs:
        if env is second:
            env.device.page.context.on("request", on_request)
        obs, info = env.reset_typed(seed=7)
        if env is second:
            env.device.page.context.remove_listener("request", on_request)
        points.append((_point(env, obs), info["milestones"], info["task"]))
    assert (starts.misses, starts.hits, len(starts)) == (2, 2, 2)  # each start built once (plain never asks)
    assert requests == [], f"a restored start asked the server for {requests}"
    for p in points[1:]:
        assert not _diff(points[0][0], p[0]) and p[1:] == points[0][1:], _diff(points[0][0], p[0])
    for _ in range(2):
        action = plain.oracle_action()
        outs = [env.step_typed(action) for env in envs]
        results = [(_point(env, o[0]), o[1:3], o[3].milestones) for env, o in zip(envs, outs)]
        for r in results[1:]:
            assert not _diff(results[0][0], r[0]) and r[1:] == results[0][1:]
        if outs[0][1] or outs[0][2]:
            break


def test_reset_by_restore_is_on_for_suite_devices_and_can_be_turned_off(shared_browser):
    from emulators.snapshot import START_STATES

    on, off, loads = (SUITE.make_device(browser=shared_browser, **kw)
                      for kw in ({}, {"reset_by_restore": "false"}, {"page_loads": True}))
    try:
        assert SUITE.make_env("open_app", device=on).start_states is START_STATES
        assert SUITE.make_env("open_app", device=off).start_states is None
        env = SUITE.make_env("open_app", device=loads)
        assert env.start_key({"seed": 1}) == ""  # cannot snapshot: never kept, never restored
        with pytest.raises(ValueError, match="reset_by_restore must be true or false"):
            SUITE.make_device(browser=shared_browser, reset_by_restore="maybe")
    finally:
        for d in (on, off, loads):
            d.close()


def test_a_pool_starts_a_group_once_and_restores_it_in_the_other_slots():
    """The first episode of each (task, seed) of a reset batch starts before the rest of its group,
    which restore its start: one start built a group, the same first screen in every slot."""
    from emulators.pool import InProcessPool
    from emulators.pool_types import ResetRequest
    from emulators.snapshot import START_STATES

    with InProcessPool("webapps", num_slots=4, device_options={"tree": "none"}) as pool:
        pool.reset([ResetRequest(s, "open_app", 500 + s) for s in range(4)])  # every slot shows an app page
        hits, misses = START_STATES.hits, START_STATES.misses
        requests = [ResetRequest(0, "open_app", 11), ResetRequest(1, "settings_turn_on", 12),
                    ResetRequest(2, "open_app", 11), ResetRequest(3, "settings_turn_on", 12)]
        outs = pool.reset(requests)
        assert [o.slot for o in outs] == [0, 1, 2, 3] and not any(o.worker_error for o in outs)
        assert (START_STATES.hits - hits, START_STATES.misses - misses) == (2, 2)
        assert outs[0].observation.screenshot == outs[2].observation.screenshot
        assert outs[1].observation.screenshot == outs[3].observation.screenshot
        assert outs[0].spec == outs[2].spec and outs[1].info.milestones == outs[3].info.milestones


def test_a_restore_settles_in_its_own_call(shared_browser):
    """A restore on a quiet page polls the settle inside the restore's own page call (no second round
    trip), and leaves the device as a settle would: the next observation is the state's, unchanged."""
    a, b = (SUITE.make_device(browser=shared_browser, tree="none") for _ in range(2))
    env = GuiEnv(a, TASKS["settings_turn_on"])
    env.reset_typed(seed=0)
    env.step_typed(env.oracle_action())
    state = env.snapshot()
    shot = a.observe().screenshot
    other = GuiEnv(b, TASKS["settings_turn_on"])
    other.reset_typed(seed=0)
    settles: list[float | None] = []
    real = b._settle
    b._settle = lambda cap_ms=None: settles.append(cap_ms) or real(cap_ms)  # type: ignore[method-assign]
    calls: list[object] = []
    real_js = b._js
    b._js = lambda script, *args: calls.append(args[:1]) or real_js(script, *args)  # type: ignore[method-assign]
    try:
        other.restore(state)
    finally:
        del b._settle, b._js
    # the observation that checks the restored screen compares the poll's mutation count: no read of its own
    assert [-1, None] not in [a[0] for a in calls if a], "the restore's check read the mutation count again"
    assert settles == [], "the restore's poll took the place of a separate settle"
    assert b.observe().screenshot == shot
    a.close()
    b.close()


@pytest.fixture
def make_devices(shared_browser):
    """``make(n, **options)``: n phone devices of the suite with these options, closed after the test (made
    anew: a pool's test above closes the suite's app server, which the module's devices were made for)."""
    made = []

    def make(n, **options):
        made.extend(SUITE.make_device(browser=shared_browser, **options) for _ in range(n))
        return made[-n:]

    yield make
    for d in made:
        d.close()


def _restored_elsewhere(devices, *, task_id="settings_turn_on", seed=0):
    """A state of ``task_id`` captured on ``devices[0]`` after one oracle step, and an env on ``devices[1]``
    to restore it on."""
    a, b = GuiEnv(devices[0], TASKS[task_id]), GuiEnv(devices[1], TASKS[task_id])
    a.reset_typed(seed=seed)
    b.reset_typed(seed=seed)
    a.step_typed(a.oracle_action())
    return a, b, a.snapshot()


def test_a_restore_whose_page_renders_otherwise_fails_loudly(make_devices):
    """A page that shows what its own script does not capture (here its colours inverted by a style sheet
    made in script, which is no part of the document's markup) restores to another screen than the
    captured one: the restore fails (a typed error naming what differs), the old screen is not handed
    back, and the env has no episode to go on with."""
    from emulators.base import RestoreMismatch

    a, b, _ = _restored_elsewhere(make_devices(2, tree="none"))
    a.device.evaluate("""() => { const sheet = new CSSStyleSheet(); sheet.replaceSync('html { filter: invert(1); }');
                                 document.adoptedStyleSheets = [sheet]; }""")
    shown, *_ = a.step_typed(Wait(0))  # the env's observation: the inverted screen
    state = a.snapshot()
    assert shown.screenshot == state.observation.screenshot
    with pytest.raises(RestoreMismatch, match=r"does not show the captured screen \(screenshot differ"):
        b.restore(state)
    assert b.task is None and b.done
    # the same state, its screen as the page renders it, comes back (and is checked)
    a.device.evaluate("() => { document.adoptedStyleSheets = []; }")
    honest = dataclasses.replace(state, observation=dataclasses.replace(state.observation,
                                                                        screenshot=a.device.observe().screenshot))
    assert b.restore(honest).screenshot == honest.observation.screenshot and b.task is not None


def test_a_restore_checks_the_element_boxes_it_hands_on(make_devices):
    """With marks on, the boxes element actions tap are the restored page's own, read off it; a state
    whose boxes are not what the page shows fails to restore instead of tapping where nothing is."""
    from emulators.base import RestoreMismatch
    from guiagent.types import ClickElement

    a, b, state = _restored_elsewhere(make_devices(2, tree="none", marks="true"))
    obs = b.restore(state)
    assert obs.marks and obs.marks == state.observation.marks and b.device._marks == obs.marks
    moved = tuple(dataclasses.replace(m, box=(0.0, 0.0, 0.01, 0.01)) for m in state.observation.marks)
    bad = dataclasses.replace(state, observation=dataclasses.replace(state.observation, marks=moved))
    with pytest.raises(RestoreMismatch, match="element boxes differ"):
        b.restore(bad)
    b.restore(state)
    target = next(m for m in state.observation.marks if m.role in ("switch", "checkbox", "link", "button"))
    _, _, _, info = b.step_typed(ClickElement(target.id))
    assert info.action_error is None


def test_a_restore_still_busy_when_the_settle_time_runs_out_is_no_restore(make_devices):
    """A restored page that does not settle within the device's settle time (here one that starts a
    long animation as it restores) is a failed restore, not a restored one."""
    _, b, state = _restored_elsewhere(make_devices(2, tree="none", settle_timeout_ms=300))
    b.device.evaluate("""() => { const restore = window.webapps.restore;
        window.webapps.restore = async (data, rewrite) => {
            const ok = await restore(data, rewrite);
            document.body.animate([{opacity: 1}, {opacity: 0.99}], {duration: 20000});
            return ok;
        }; }""")
    with pytest.raises(SnapshotError, match=r"still busy \(animation\) when the settle time \(300 ms\) ran out"):
        b.restore(state)
    assert b.task is None


def test_a_restore_keeps_the_last_actions_error(make_devices):
    """The step before the snapshot failed (an unknown key): the restored observation still says so, on a
    device whose observations are the capturing one's and on one that observes otherwise (no tree)."""
    aria = make_devices(2)
    a = GuiEnv(aria[0], TASKS["settings_turn_on"])
    a.reset_typed(seed=2)
    obs, *_ = a.step_typed(Key("NoSuchKey"))
    assert obs.last_action_error and "unknown key" in obs.last_action_error
    state = a.snapshot()
    for device in (aria[1], *make_devices(1, tree="none")):
        restored = GuiEnv(device, TASKS["settings_turn_on"]).restore(state)
        assert restored.last_action_error == obs.last_action_error
