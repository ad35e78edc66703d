"""GuiEnv as a real Gymnasium env: registration, spaces, Gymnasium's own ``check_env``.

Envs are made with ``gymnasium.make`` (as users do) and checked with
``gymnasium.utils.env_checker.check_env`` on the unwrapped env: spaces, seeding,
reset/step determinism with sampled (valid, executed) actions, no shared buffers,
``render``, ``close``. One Chromium serves the whole module (the registration's
shared browser is pointed at the session's). A representative set runs by default;
every webapps task and a wider MiniWoB sample run with ``-m slow``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium
import numpy as np
import pytest

import emulators  # noqa: F401  (registers the envs)
from emulators.base import ActionText, GuiEnv, UnicodeText, parse_action
from emulators.suites import registration
from emulators.suites.miniwob import SUITE as MINIWOB
from emulators.suites.webapps import SUITE as WEBAPPS
from guiagent.types import Click, Observation, ParseError, Scroll, action_to_dict
from tests.emulators.gym_checks import checked_env

pytestmark = pytest.mark.browser

#: by default one webapps task (launcher start; in-app start pages: test_gym_webapps_reset.py) and one
#: MiniWoB page; every webapps task and ten MiniWoB pages with -m slow (~8 s each on 2 busy cores)
WEBAPPS_DEFAULT = ["open_app"]
MINIWOB_DEFAULT = ["click-button"]
MINIWOB_SLOW = ["click-button", "click-checkboxes", "enter-text", "choose-list", "focus-text", "click-link",
                "click-option", "enter-password", "click-tab", "click-button-sequence"]
# not in the sample: the pages registered nondeterministic (tests/emulators/test_gym_contract.py)


@pytest.fixture(scope="module", autouse=True)
def gym_browser(shared_browser):
    """``gymnasium.make`` envs of this module share the session's Chromium."""
    before = registration._BROWSER
    registration._BROWSER = shared_browser
    yield shared_browser
    registration._BROWSER = before
    WEBAPPS.close()


# --- registration ---------------------------------------------------------------------------------

def test_every_task_of_every_suite_is_registered():
    for suite in (WEBAPPS, MINIWOB):
        ids = suite.env_ids()
        assert ids and all(i in gymnasium.registry for i in ids), suite.name
        spec = gymnasium.spec(ids[0])
        assert spec.entry_point == registration.ENTRY_POINT and spec.kwargs["suite"] == suite.name
    # 53 fixed-layout tasks and the 6 *_shuffled variants of the goal-conditioned ones (tasks/shuffled.py)
    assert len(WEBAPPS.env_ids()) == 59
    assert registration.register_envs() == WEBAPPS.env_ids() + MINIWOB.env_ids()  # idempotent


def test_import_needs_neither_android_world_nor_flask_nor_a_browser():
    code = (
        "import sys, gymnasium, emulators\n"
        "heavy = [m for m in ('android_world', 'flask', 'playwright', 'miniwob') if m in sys.modules]\n"
        "n = sum(1 for k in gymnasium.registry if k.startswith('guiagent/'))\n"
        "print(heavy, n, 'guiagent/webapps.open_app' in gymnasium.registry)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    heavy, n, present = out.stdout.strip().rsplit(" ", 2)
    assert heavy == "[]" and int(n) == len(WEBAPPS.task_ids()) + len(MINIWOB.task_ids()) and present == "True"


def test_androidworld_ids_register_on_request_only():
    import importlib.util
    assert not any(k.startswith("guiagent/androidworld.") for k in gymnasium.registry)
    if importlib.util.find_spec("android_world") is not None:
        pytest.skip("android_world is installed here")
    from emulators.android.suite import AndroidWorldMissing
    with pytest.raises(AndroidWorldMissing):
        gymnasium.make("emulators.suites.androidworld_envs:guiagent/androidworld.ContactsAddContact")


# --- spaces -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ('{"kind": "click", "x": 0.25, "y": 0.5}', Click(0.25, 0.5)),
    ('{"kind": "scroll", "direction": "down"}', Scroll("down")),
    ('{"kind": "click", "x": 1.5, "y": 0.5}', "bad_coordinates"),
    ('{"kind": "click", "x": 0.5}', "bad_arguments"),
    ('{"kind": "fly"}', "unknown_action"),
    ('{"x": 0.5}', "no_action"),
    ('[1, 2]', "malformed"),
    ("click(0.5, 0.5)", "malformed"),
])
def test_parse_action_table(text, expected):
    got = parse_action(text)
    if isinstance(expected, str):
        assert isinstance(got, ParseError) and got.code == expected, got
        assert text not in ActionText()
    else:
        assert got == expected and text in ActionText()


def test_sampled_actions_are_valid_and_seeded():
    space = ActionText(seed=3)
    samples = [space.sample() for _ in range(300)]
    assert all(s in space for s in samples)
    kinds = {json.loads(s)["kind"] for s in samples}
    assert {"click", "type", "scroll", "key", "back", "finish"} <= kinds
    again = ActionText(seed=3)
    assert [again.sample() for _ in range(300)] == samples
    assert "é → 日本" in UnicodeText(10) and "x" * 11 not in UnicodeText(10) and 3 not in UnicodeText(10)


@pytest.mark.parametrize("env_id, shape", [("guiagent/webapps.open_app", (640, 360, 3)),
                                           ("guiagent/miniwob.click-button", (210, 160, 3))])
def test_spaces_follow_the_device_screen(env_id, shape):
    env = gymnasium.make(env_id)
    try:
        assert isinstance(env.unwrapped, GuiEnv) and isinstance(env.unwrapped, gymnasium.Env)
        assert env.observation_space["screenshot"].shape == shape
        assert env.observation_space["screenshot"].dtype == np.uint8
        assert set(env.observation_space.spaces) == {"screenshot", "goal", "tree", "url", "last_action_error"}
        assert isinstance(env.action_space, ActionText)
    finally:
        env.close()


def test_typed_observation_rides_in_info():
    env = gymnasium.make("guiagent/webapps.settings_turn_on")
    try:
        obs, info = env.reset(seed=4)
        typed = info["observation"]
        assert isinstance(typed, Observation) and typed.screenshot[:4] == b"\x89PNG"
        assert obs["screenshot"].shape == (typed.height, typed.width, 3)
        assert (obs["tree"], obs["url"], obs["goal"]) == (typed.tree, typed.url, info["task"].goal)
        assert obs["url"].endswith("/settings")
        obs, reward, term, _, info = env.step("not an action")
        assert "could not parse" in obs["last_action_error"] and info["step"].parse_error.code == "malformed"
        assert info["observation"].last_action_error == obs["last_action_error"] and (reward, term) == (0.0, False)
        # a dict works as well as its JSON text: tap the Wi-Fi switch, the page changes
        before = obs["screenshot"]
        obs, *_, info = env.step({"kind": "click", **_center(env, 'button.switch[data-key="wifi"]')})
        assert info["step"].action_error is None and obs["last_action_error"] == ""
        assert not np.array_equal(obs["screenshot"], before)
    finally:
        env.close()


def _center(env, selector: str) -> dict[str, float]:
    x, y = env.unwrapped.device.center(selector)
    return {"x": round(x, 4), "y": round(y, 4)}


# --- Gymnasium's check_env and an oracle episode through the Gymnasium face -------------------------

def _gym_check(env_id: str) -> None:
    with checked_env(env_id) as env:
        # the oracle solves the task with JSON actions, as a Gymnasium agent sends them
        obs, info = env.reset(seed=0)
        for _ in range(env.unwrapped.max_steps):
            action = json.dumps(action_to_dict(env.unwrapped.oracle_action()))
            assert action in env.action_space
            obs, reward, term, trunc, info = env.step(action)
            assert obs in env.observation_space
            if term or trunc:
                break
        assert reward == 1.0, f"{env_id}: the oracle did not solve {info['observation']}"
        frame = env.render()
        assert frame.dtype == np.uint8 and np.array_equal(frame, obs["screenshot"])


@pytest.mark.parametrize("task_id", WEBAPPS_DEFAULT)
def test_gymnasium_check_env_webapps(task_id):
    _gym_check(f"guiagent/webapps.{task_id}")


@pytest.mark.parametrize("task_id", MINIWOB_DEFAULT)
def test_gymnasium_check_env_miniwob(task_id):
    _gym_check(f"guiagent/miniwob.{task_id}")


@pytest.mark.slow
@pytest.mark.parametrize("task_id", sorted(set(WEBAPPS.task_ids()) - set(WEBAPPS_DEFAULT)))
def test_gymnasium_check_env_every_webapps_task(task_id):
    _gym_check(f"guiagent/webapps.{task_id}")


@pytest.mark.slow
@pytest.mark.parametrize("task_id", sorted(set(MINIWOB_SLOW) - set(MINIWOB_DEFAULT)))
def test_gymnasium_check_env_miniwob_sample(task_id):
    assert task_id in MINIWOB.oracle_task_ids()
    _gym_check(f"guiagent/miniwob.{task_id}")
