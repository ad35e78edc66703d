"""Targets held out of training: which episodes are seen and unseen, and that the split is kept.

Without a browser: every task that holds targets out draws seen episodes only on ``seen`` and
held-out ones only on ``unseen``, from its seed alone; a task without held-out targets refuses
``unseen``. With a browser: ``guiagent eval --targets unseen`` runs only held-out targets, through
the env pool's resets.
"""

from __future__ import annotations

import random

import pytest

from emulators.base import TARGET_SPLITS, Task
from emulators.suites.webapps import TASKS
from emulators.suites.webapps.world import (
    FOLDERS,
    HELD_OUT_TARGETS,
    LAYOUT_LISTS,
    check_labels,
    held_out_names,
    phone_names,
    target_name,
)

SPLIT = sorted(t for t, cls in TASKS.items() if cls.has_held_out_targets())


def test_the_default_families_hold_targets_out():
    assert SPLIT == sorted(
        f"{base}{suffix}" for base in ("open_app", "settings_turn_on", "settings_turn_off", "settings_open_section",
                                       "files_open_folder", "files_open_file") for suffix in ("", "_shuffled"))
    # every held-out target is one the tasks can draw, and each kind keeps most of its targets for training
    assert HELD_OUT_TARGETS["folder"] < set(FOLDERS) and len(HELD_OUT_TARGETS["folder"]) < len(FOLDERS)
    assert HELD_OUT_TARGETS["file"] < set(LAYOUT_LISTS["files"])
    assert 0 < len(HELD_OUT_TARGETS["file"]) <= len(LAYOUT_LISTS["files"]) // 3


@pytest.mark.parametrize("task_id", SPLIT)
def test_seen_never_draws_a_held_out_target_and_unseen_always_does(task_id):
    cls = TASKS[task_id]
    kinds = cls.family.targets
    seen_values: set[str] = set()
    for seed in range(60):
        seen = cls.sample_targets(random.Random(seed), "seen")
        unseen = cls.sample_targets(random.Random(seed), "unseen")
        assert cls.target_split(seen) == "seen" and cls.target_split(unseen) == "unseen"
        assert not any(str(seen[k]) in HELD_OUT_TARGETS[kind] for k, kind in kinds.items()), (task_id, seed, seen)
        assert any(str(unseen[k]) in HELD_OUT_TARGETS[kind] for k, kind in kinds.items()), (task_id, seed, unseen)
        # a seed fixes the episode, whatever the split
        assert cls.sample_targets(random.Random(seed), "unseen") == unseen
        assert cls.sample_targets(random.Random(seed), "all") == cls.sample_params(random.Random(seed))
        seen_values |= {str(seen[k]) for k in kinds}
    assert len(seen_values) >= 3  # the seen split still varies its targets


def test_a_task_without_held_out_targets_has_only_seen_episodes():
    cls = TASKS["contacts_add"]
    assert not cls.has_held_out_targets() and cls.target_split(cls.sample_params(random.Random(0))) is None
    assert cls.sample_targets(random.Random(5), "seen") == cls.sample_params(random.Random(5))
    with pytest.raises(ValueError, match="no target out of training"):
        cls.sample_targets(random.Random(5), "unseen")
    with pytest.raises(ValueError, match="targets must be one of"):
        cls.sample_targets(random.Random(5), "held-out")
    assert TARGET_SPLITS == ("all", "seen", "unseen", "renamed")
    assert cls.sample_targets(random.Random(5), "renamed") == cls.sample_params(random.Random(5)), \
        "nothing to rename: the seen episode itself"
    assert Task.target_split.__func__ is not None  # the base class says "no split" for any other suite


@pytest.mark.parametrize("task_id", SPLIT)
def test_renamed_episodes_show_each_seen_target_under_a_made_up_name(task_id):
    """--rename-targets' episodes: a seen episode (the same draw as ``seen`` from the seed) whose every target
    is shown under a made-up name, in the goal too; never a name of the phone (held out or not), never two
    targets under one name."""
    cls = TASKS[task_id]
    shown: set[str] = set()
    for seed in range(40):
        seen = cls.sample_targets(random.Random(seed), "seen")
        renamed = cls.sample_targets(random.Random(seed), "renamed")
        assert {k: v for k, v in renamed.items() if k != "labels"} == seen
        assert cls.target_split(renamed) == "seen"
        labels = renamed["labels"]
        check_labels(labels)
        olds = {target_name(kind, seen[key]) for key, kind in cls.family.targets.items()}
        assert set(labels) == olds and len(set(labels.values())) == len(olds)
        assert not set(labels.values()) & (phone_names() | held_out_names())
        goal = cls(renamed).goal
        assert all(new in goal for new in labels.values()) and not any(old in goal for old in olds), goal
        assert cls.sample_targets(random.Random(seed), "renamed") == renamed  # the seed fixes the names too
        shown |= set(labels.values())
    assert len(shown) >= 30  # drawn afresh: no name to memorise


def test_labels_of_a_world_are_checked():
    from emulators.suites.webapps.server import StateError, validate_state

    assert validate_state({"labels": {"Wi-Fi": "Dit", "report.pdf": "rulo.txt"}})["labels"]["Wi-Fi"] == "Dit"
    for labels, words in (([], "must be dict"), ({"Nope": "x"}, "not a name of the phone"),
                          ({"Wi-Fi": ""}, "printable name"), ({"Wi-Fi": "a\nb"}, "printable name"),
                          ({"Wi-Fi": "x" * 65}, "printable name"), ({"Wi-Fi": 3}, "printable name"),
                          ({n: "x" for n in sorted(phone_names())[:9]}, "at most 8")):
        with pytest.raises(StateError, match=words):
            validate_state({"labels": labels})


@pytest.mark.browser
def test_a_renamed_target_is_shown_and_reached_under_its_new_name(tmp_path):
    """The screens write the made-up name where the real one stood (the element list too), the oracle
    reaches the real target through it, and the task's success reads the real state."""
    from emulators.browser import BrowserConfig, launch_browser
    from emulators.suites.webapps import SUITE

    browser = launch_browser(BrowserConfig())
    try:
        device = SUITE.make_device(browser=browser, marks=True)
        for task_id, seed in (("settings_turn_on_shuffled", 3), ("open_app", 4), ("files_open_file_shuffled", 5)):
            env = SUITE.make_env(task_id, device=device)
            obs, _ = env.reset_typed(seed=seed, options={"targets": "renamed"})
            labels = env.task_spec.params["labels"]
            names = []
            done, info = False, None
            while not done:
                names += [m.name for m in obs.marks or []]
                obs, term, trunc, info = env.step_typed(env.task.oracle(device))
                done = term or trunc
            assert info.success == 1.0, (task_id, env.task_spec.goal)
            # every made-up name was on a screen on the way, the real one it stands for never as a name
            assert all(any(n.startswith(new) for n in names) for new in labels.values()), (labels, names)
            assert not any(n.startswith(old) for n in names for old in labels), (labels, names)
            assert all(new in env.task_spec.goal for new in labels.values())
    finally:
        SUITE.close()
        browser.close()


@pytest.mark.browser
def test_eval_runs_held_out_targets_only(tmp_path, capsys):
    from guiagent.cli.main import main
    from guiagent.store import StoreReader

    out = tmp_path / "unseen"
    rc = main(["eval", "--env", "webapps", "--agent", "oracle", "--tasks", "open_app", "files_open_file_shuffled",
               "contacts_add", "--targets", "unseen", "--episodes", "4", "--pool", "inprocess", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    trajectories = list(StoreReader(out).iter_trajectories(pixels=False))
    # contacts_add holds nothing out: left out of an unseen-target evaluation
    assert sorted({t.task.task_id for t in trajectories}) == ["files_open_file_shuffled", "open_app"]
    assert len(trajectories) == 4
    for t in trajectories:
        assert TASKS[t.task.task_id].target_split(t.task.params) == "unseen", t.task.params
        assert t.success
    # --targets renamed: seen targets under made-up names, the goal saying the made-up one
    out = tmp_path / "renamed"
    rc = main(["eval", "--env", "webapps", "--agent", "oracle", "--tasks", "settings_turn_off", "--targets", "renamed",
               "--episodes", "2", "--pool", "inprocess", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    trajectories = list(StoreReader(out).iter_trajectories(pixels=False))
    assert len(trajectories) == 2 and all(t.success for t in trajectories)
    for t in trajectories:
        [(old, new)] = t.task.params["labels"].items()
        assert new in t.task.goal and old not in t.task.goal and TASKS["settings_turn_off"].target_split(
            t.task.params) == "seen"
