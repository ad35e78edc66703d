"""Every webapps task on a real Chromium against the real app server.

One browser and one phone device are shared by the whole module. For each task
and seed, ``check_env`` runs through a recording env that also checks: the task
scores 0 before the oracle acts and 1 after, milestones never fall back, and a
wrong answer scores 0 on information-retrieval tasks. Seed 0 of one task of each app and of every
answer task runs by default (test_webapps_golden.py replays seed 0 of the other tasks against its
record, so every task's oracle episode runs by default); the other tasks and seeds 1 and 2 run
with ``-m slow``.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from emulators.base import ActionError, GuiEnv, check_env
from emulators.suites import get_suite
from emulators.suites.webapps import SUITE, TASKS
from emulators.suites.webapps.tasks.easy import TASKS as EASY_FIXED
from guiagent.types import Answer, Click, OpenApp
from tests.sweeps import WEBAPPS_ANSWER_TASKS, WEBAPPS_CHECK_DEFAULT, sweep

pytestmark = pytest.mark.browser

ANSWER_TASKS = WEBAPPS_ANSWER_TASKS


@pytest.fixture(scope="module")
def browser():
    from emulators.browser import BrowserConfig, launch_browser
    handle = launch_browser(BrowserConfig.phone())
    yield handle
    handle.close()
    SUITE.close()


@pytest.fixture(scope="module")
def device(browser):
    dev = SUITE.make_device(browser=browser, tree="none")
    yield dev
    dev.close()


class RecordingEnv(GuiEnv):
    """A GuiEnv that checks, along check_env's last (oracle) episode, what the suite promises."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self.before = self.task.evaluate(self.device, None)
        self.trace: list[tuple[bool, ...]] = [info["milestones"]]
        self.rewards: list[float] = []
        return obs, info

    def step(self, action):
        out = super().step(action)
        self.trace.append(out[4]["step"].milestones)
        self.rewards.append(out[1])
        return out


def _check_task(task_id: str, seed: int, device) -> None:
    env = RecordingEnv(device, SUITE.task_class(task_id))
    success = check_env(env, seed=seed)
    assert success == 1.0, f"{task_id} seed {seed}: the oracle did not solve {env.task_spec.goal!r}"
    assert env.before == 0.0, f"{task_id} seed {seed}: scored {env.before} before anything was done"
    trace = env.trace
    assert len({len(m) for m in trace}) == 1 and trace[0], f"{task_id}: milestones missing or changing length"
    for prev, cur in zip(trace, trace[1:]):
        assert all(c or not p for p, c in zip(prev, cur)), f"{task_id} seed {seed}: a milestone fell back {trace}"
    assert all(trace[-1]), f"{task_id} seed {seed}: solved but milestones {trace[-1]}"
    if task_id in ANSWER_TASKS:
        assert env.task.evaluate(device, "I do not know 0") == 0.0
        assert env.task.evaluate(device, None) == 0.0


@pytest.mark.parametrize("task_id", sweep(sorted(TASKS), WEBAPPS_CHECK_DEFAULT))
def test_oracle_solves_seed0(task_id, device):
    """By default one task of each app and every answer task (tests/sweeps.py; the golden record's test
    replays seed 0 of the others by default); every task with -m slow."""
    _check_task(task_id, 0, device)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_oracle_solves_more_seeds(task_id, seed, device):
    _check_task(task_id, seed, device)


def test_suite_shape():
    suite = get_suite("webapps")
    assert suite is SUITE and suite.name == "webapps"
    ids = suite.task_ids()
    assert len(ids) >= 40 and ids == sorted(ids)
    assert all(e.startswith("guiagent/webapps.") for e in suite.env_ids())
    counts = Counter(TASKS[t].difficulty for t in ids)
    assert counts["easy"] >= 8 and counts["medium"] >= 10 and counts["hard"] >= 8, counts
    assert len([t for t in EASY_FIXED if t.difficulty == "easy"]) >= 8
    assert all(TASKS[t].suite == "webapps" and TASKS[t].max_steps >= 2 for t in ids)
    with pytest.raises(KeyError, match="known"):
        suite.task_class("nope")


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_sampling_is_reproducible(task_id):
    cls = TASKS[task_id]
    for seed in range(3):
        a, b = cls.sample_params(random.Random(seed)), cls.sample_params(random.Random(seed))
        assert a == b and cls(a).goal == cls(b).goal
        assert "{" not in cls(a).goal
    goals = {cls(cls.sample_params(random.Random(s))).goal for s in range(12)}
    constant_goal = {"go_home", "todo_count_open", "contacts_count_favourites", "expenses_biggest",
                     "todo_clear_completed"}
    assert len(goals) > 1 or task_id in constant_goal


def test_fixed_family_targets_do_not_move(device):
    """Two seeds that draw the same goal get the same tap, wherever the data differ."""
    for task_id, key in (("open_app", "app"), ("settings_turn_on", "key"), ("files_open_folder", "folder")):
        cls = TASKS[task_id]
        seen: dict[str, tuple[float, float]] = {}
        for seed in range(40):
            params = cls.sample_params(random.Random(seed))
            if params[key] in seen and len(seen) >= 1:
                env = GuiEnv(device, cls)
                env.reset(seed=seed)
                first = env.oracle_action()
                assert isinstance(first, Click)
                assert (first.x, first.y) == seen[params[key]], f"{task_id}: {params[key]} moved"
                break
            env = GuiEnv(device, cls)
            env.reset(seed=seed)
            first = env.oracle_action()
            seen[params[key]] = (first.x, first.y)


def test_open_app_action_and_unknown_app(device):
    env = GuiEnv(device, TASKS["open_app"], max_steps=10)
    env.reset(seed=3)
    target = env.task.params["app"]
    obs, *_, info = env.step_typed(OpenApp("  Tasks app "))
    assert obs.url.endswith("/tasks") and info.action_error is None
    obs, *_, info = env.step_typed(OpenApp("Camera"))
    assert "unknown app" in obs.last_action_error and "Contacts" in obs.last_action_error
    with pytest.raises(ActionError):
        device.execute(OpenApp("Camera"))
    obs, reward, term, *_ = env.step(OpenApp(target))
    obs, reward, term, *_ = env.step(Answer("done"))
    assert term and reward == 1.0


def test_two_episodes_at_once_keep_their_own_state(browser):
    dev_a, dev_b = SUITE.make_device(browser=browser, tree="none"), SUITE.make_device(browser=browser, tree="none")
    try:
        env_a = SUITE.make_env("settings_turn_on", device=dev_a)
        env_b = SUITE.make_env("settings_turn_on", device=dev_b)
        env_a.reset(seed=5)
        env_b.reset(seed=5)
        assert env_a.task.sid != env_b.task.sid
        while True:
            _, reward, term, trunc, _ = env_a.step(env_a.oracle_action())
            if term or trunc:
                break
        assert reward == 1.0
        key = env_a.task.params["key"]
        assert env_a.task.state()["settings"][key] is True
        assert env_b.task.state()["settings"][key] is False, "one episode's change leaked into another"
        assert env_b.task.evaluate(dev_b) == 0.0
        # the page of B still shows its own (unchanged) switch
        assert dev_b.evaluate(f"document.querySelector('button.switch[data-key={key}]').getAttribute('aria-checked')") == "false"
    finally:
        dev_a.close()
        dev_b.close()


def test_back_navigation_and_up_arrow(device):
    env = SUITE.make_env("contacts_phone_lookup", device=device)
    env.reset(seed=1)
    while not env.task.at(device, f"contacts/{env.task.params['cid']}"):
        env.step(env.oracle_action())
    from guiagent.types import NavigateBack
    env.step(NavigateBack())
    assert env.task.at(device, "contacts")
    env.step(env.task.click(device, "a.up"))
    assert env.task.at(device, "")
    assert env.task.state()["log"][-1] == ""
