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
from emulators.suites.webapps.world import FOLDERS, HELD_OUT_TARGETS, LAYOUT_LISTS

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
    assert TARGET_SPLITS == ("all", "seen", "unseen")
    assert Task.target_split.__func__ is not None  # the base class says "no split" for any other suite


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
