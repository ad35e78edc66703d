"""Shuffled-layout webapps tasks on a real Chromium against the real app server: each seed reorders
the list the target sits in, the screen shows that order, the target moves between episodes, and the
oracle solves every seed."""

from __future__ import annotations

import dataclasses
import random

import pytest

from emulators.base import GuiEnv
from emulators.suites.webapps import SUITE, TASKS
from emulators.suites.webapps.server import StateError, validate_state
from emulators.suites.webapps.world import LAYOUT_LISTS, make_world

pytestmark = pytest.mark.browser

SHUFFLED = {"open_app_shuffled": ("apps", "app", "link"), "settings_turn_on_shuffled": ("toggles", "key", "switch"),
            "settings_turn_off_shuffled": ("toggles", "key", "switch"),
            "settings_open_section_shuffled": ("sections", "section", "link"),
            "files_open_folder_shuffled": ("folders", "folder", "link"),
            "files_open_file_shuffled": ("folders", "folder", "link")}
#: seeds 0-9 by default, 10-24 with -m slow
SEEDS = [pytest.param(range(10), id="seeds0-9"), pytest.param(range(10, 25), id="seeds10-24", marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def device():
    from emulators.browser import BrowserConfig, launch_browser

    handle = launch_browser(BrowserConfig.phone())
    dev = SUITE.make_device(browser=handle, tree="none", marks=True)
    yield dev
    dev.close()
    handle.close()
    SUITE.close()


def test_the_shuffled_family_is_registered():
    assert set(SHUFFLED) <= set(TASKS)
    for task_id, (lst, _, _) in SHUFFLED.items():
        base = TASKS[task_id.removesuffix("_shuffled")]
        # the same row (goal, choice, success, milestones, oracle) with the layout drawn from the seed
        same_row = dataclasses.replace(TASKS[task_id].family, task_id=base.task_id, shuffle=(), doc="")
        assert same_row == base.family and lst in TASKS[task_id].shuffle and not base.shuffle


@pytest.mark.parametrize("seeds", SEEDS)
@pytest.mark.parametrize("task_id", sorted(SHUFFLED))
def test_oracle_solves_every_seed_and_the_target_moves(task_id, seeds, device):
    lst, key, role = SHUFFLED[task_id]
    cls = TASKS[task_id]
    slots = set()
    for seed in seeds:
        env = GuiEnv(device, cls)
        obs, info = env.reset_typed(seed=seed)
        params = env.task.params
        order = params["layout"][lst]
        assert sorted(order) == sorted(LAYOUT_LISTS[lst])
        # the start screen lists the entries in the episode's order (read from its marks)
        titles = _labels(lst, order)
        shown = [m.name for m in obs.marks if m.role == role and any(m.name.startswith(t) for t in titles)]
        assert [next(t for t in titles if n.startswith(t)) for n in shown] == titles, (task_id, seed, shown)
        target = params[key]
        slots.add(order.index(target))
        done, steps = False, 0
        while not done:
            obs, term, trunc, step = env.step_typed(env.oracle_action())
            steps += 1
            done = term or trunc
        assert step.success == 1.0, f"{task_id} seed {seed}: the oracle failed {env.task_spec.goal!r}"
        assert all(step.milestones) and steps <= cls.max_steps
    # ten seeds put the target in 3+ places (the settings list has four sections); fifteen in 4+
    assert len(slots) >= (4 if len(seeds) >= 15 else 3), f"{task_id}: the target sat in only {sorted(slots)} over seeds {seeds}"


def _labels(lst: str, order: list[str]) -> list[str]:
    from emulators.suites.webapps.world import APP_TITLES, SETTINGS_SECTIONS, SETTINGS_TOGGLES

    table = {"apps": APP_TITLES, "toggles": SETTINGS_TOGGLES, "sections": SETTINGS_SECTIONS}.get(lst)
    return [table[k] for k in order] if table else list(order)


def test_a_folder_lists_its_files_in_the_episodes_order(device):
    """files_open_file_shuffled also reorders the files a folder lists (by name in the fixed layout)."""
    for task_id in ("files_open_file", "files_open_file_shuffled"):
        env = GuiEnv(device, TASKS[task_id])
        env.reset_typed(seed=6)
        obs, *_ = env.step_typed(env.oracle_action())  # into the folder
        params, world = env.task.params, env.task.initial_state()
        held = [f["name"] for f in world["files"] if f["folder"] == params["folder"]]
        order = params["layout"]["files"] if "layout" in params else sorted(held)
        want = [n for n in order if n in held]
        shown = [next(n for n in want if m.name.startswith(n)) for m in obs.marks
                 if any(m.name.startswith(n) for n in want)]
        assert shown == want, (task_id, shown, want)
    assert want != sorted(want)  # seed 6 lists them out of name order


def test_fixed_tasks_keep_the_fixed_order(device):
    env = GuiEnv(device, TASKS["open_app"])
    obs, _ = env.reset_typed(seed=4)
    assert "layout" not in env.task.params
    assert [m.name for m in obs.marks if m.role == "link"] == _labels("apps", list(LAYOUT_LISTS["apps"]))


def test_layouts_are_reproducible_and_vary():
    cls = TASKS["open_app_shuffled"]
    a, b = cls.sample_params(random.Random(3)), cls.sample_params(random.Random(3))
    assert a == b
    orders = {tuple(cls.sample_params(random.Random(s))["layout"]["apps"]) for s in range(20)}
    assert len(orders) == 20


@pytest.mark.parametrize("layout, why", [
    ({"apps": ["contacts"]}, "each of"),
    ({"apps": list(LAYOUT_LISTS["apps"][:-1]) + ["contacts"]}, "each of"),
    ({"icons": list(LAYOUT_LISTS["apps"])}, "unknown layout list"),
    ({"folders": "Music,Pictures"}, "each of"),
    (["apps"], "must be dict"),
])
def test_the_server_refuses_a_bad_layout(layout, why):
    state = make_world(1)
    state["layout"] = layout
    with pytest.raises(StateError, match=why):
        validate_state(state)
    assert validate_state(make_world(1))["layout"] == {}


def test_named_task_sets():
    from emulators.suites import get_suite
    from emulators.suites.webapps import SHUFFLED_TASKS

    sets = get_suite("webapps").task_sets()
    assert set(sets["shuffled"]) == set(SHUFFLED) == set(SHUFFLED_TASKS)
    assert set(sets["fixed-easy"]) == {t.removesuffix("_shuffled") for t in SHUFFLED}
    assert set(sets["goal-conditioned"]) == set(sets["shuffled"]) | set(sets["fixed-easy"])
    assert all(t in TASKS for ids in sets.values() for t in ids)
