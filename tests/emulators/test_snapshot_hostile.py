"""A tampered :class:`~emulators.snapshot.EnvState` (the Python API: a state from a file or another
process): its saved page runs no script when restored, and its counters are range-checked when it
is made or loaded (``steps=10**30`` was accepted)."""

from __future__ import annotations

import dataclasses
import io

import pytest
from PIL import Image

from emulators.snapshot import MAX_STATE_STEPS, EnvState
from guiagent.types import Observation, TaskSpec, Wait


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, format="PNG")
    return buf.getvalue()


def _state(**kw) -> EnvState:
    base = dict(spec=TaskSpec("webapps", "t", 0, "g", max_steps=10), steps=2, done=False, answer=None,
                observation=Observation(_png(), 4, 4), milestones=(False,), mode="replay",
                actions=(Wait(0), Wait(0)), oracle_calls=(0, 1))
    return EnvState(**{**base, **kw})


@pytest.mark.parametrize("key,value,said", [
    ("steps", 10**30, "not an env state|steps must lie in 0..10"),
    ("steps", 11, "steps must lie in 0..10"),
    ("steps", -1, "steps must lie in 0..10"),
    ("steps", "2", "steps must be int"),
    ("steps", True, "steps must be int"),
    ("done", "yes", "done must be bool"),
    ("oracle_calls", [0, 99], "oracle_calls must be step counts in 0..2"),
    ("oracle_calls", [1, 0], "oracle_calls must be step counts in 0..2, in order"),
    ("actions", [{"kind": "wait", "seconds": 0}] * (MAX_STATE_STEPS + 1), "lists longer than any episode's"),
    ("milestones", [True] * 5000, "lists longer than any episode's"),
    ("spec", {"suite": "webapps", "task_id": "t", "seed": 0, "goal": "g", "max_steps": 10**30}, "max_steps must lie"),
])
def test_a_tampered_state_is_refused_when_loaded(key, value, said):
    d = _state().to_dict()
    d[key] = value
    with pytest.raises(ValueError, match=said):
        EnvState.from_dict(d)


def test_a_state_made_in_python_is_checked_too():
    assert EnvState.from_dict(_state().to_dict()) == _state()
    with pytest.raises(ValueError, match=r"steps must lie in 0..10 \(the task's max_steps\), got an integer of 100 bits"):
        _state(steps=10**30)
    with pytest.raises(ValueError, match="max_steps must lie in 1..100000"):
        _state(spec=TaskSpec("webapps", "t", 0, "g", max_steps=10**6), steps=0, actions=(), oracle_calls=())


# -- the saved page runs no script ---------------------------------------------------------------

#: hidden, so that the page renders as captured (the restore then succeeds); each would set a flag
INJECTED = (
    '<img style="display:none" src="/nonexistent.png" onerror="window.__pwned = (window.__pwned || 0) + 1">'
    '<script>window.__pwned = (window.__pwned || 0) + 10</script>'
    '<iframe style="display:none" srcdoc="<script>parent.__pwned = (parent.__pwned || 0) + 100</script>"></iframe>'
    '<svg style="display:none"><animate onbegin="window.__pwned = (window.__pwned || 0) + 1000" attributeName="x" '
    'dur="1s"/></svg>'
    '<details open ontoggle="window.__pwned = (window.__pwned || 0) + 10000" style="display:none"></details>'
    '<a id="evil" style="display:none" href="javascript:window.__pwned = (window.__pwned || 0) + 100000">x</a>'
)


@pytest.mark.browser
def test_a_tampered_page_runs_no_script_when_restored(shared_browser):
    from emulators.base import GuiEnv
    from emulators.suites.webapps import SUITE, TASKS

    devices = [SUITE.make_device(browser=shared_browser, tree="none") for _ in range(2)]
    try:
        a, b = (GuiEnv(d, TASKS["settings_turn_on"]) for d in devices)
        a.reset_typed(seed=0)
        b.reset_typed(seed=0)
        a.step_typed(a.oracle_action())
        state = a.snapshot()
        page = dict(state.device.data["page"])
        assert "</body>" in page["html"]
        page["html"] = page["html"].replace("</body>", INJECTED + "</body>", 1).replace(
            "<html ", '<html onmouseover="window.__pwned = -1" ', 1)
        tampered = dataclasses.replace(state, device=dataclasses.replace(
            state.device, data={**state.device.data, "page": page}))
        obs = b.restore(tampered)
        assert obs.screenshot == state.observation.screenshot  # what was ours comes back exactly
        b.device.evaluate("() => new Promise((done) => setTimeout(done, 500))")  # an image error, a toggle event
        b.device.evaluate("() => { const a = document.getElementById('evil'); if (a) a.click(); }")
        flags = b.device.evaluate("() => [window.__pwned ?? null, document.documentElement.getAttribute('onmouseover'),"
                                  " document.querySelectorAll('iframe, script:not(head script)').length,"
                                  " (document.getElementById('evil') || {getAttribute: () => null}).getAttribute('href')]")
        assert flags == [None, None, 0, None], flags
        # the untampered state still restores exactly, and the episode goes on
        assert b.restore(state).screenshot == state.observation.screenshot
        b.step_typed(b.oracle_action())
    finally:
        for d in devices:
            d.close()
