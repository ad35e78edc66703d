"""The webapps tasks as rows: one ``Family`` per task, one ``WebTask`` class running it, typed devices.

No browser: the rows, the classes made from them, and the device check. Their behaviour
(goals, parameters, oracle episodes) is pinned by ``test_webapps_golden.py``.
"""

from __future__ import annotations

import dataclasses
import random
import typing
from importlib import import_module

import pytest

from emulators.base import Device, Task
from emulators.suites.webapps import TASKS, WebTask
from emulators.suites.webapps.tasks.base import Family, task_class
from emulators.suites.webapps.tasks.easy import OpenApp
from emulators.suites.webapps.tasks.shuffled import shuffled
from guiagent.types import Observation


def test_every_task_is_one_row_run_by_webtask():
    for task_id, cls in TASKS.items():
        assert cls.__mro__[1] is WebTask and cls.__mro__[2] is Task, f"{task_id}: {cls.__mro__}"
        row = cls.family
        assert isinstance(row, Family) and row.task_id == task_id
        assert (cls.template, cls.difficulty, cls.max_steps, cls.shuffle) == (
            row.template, row.difficulty, row.max_steps, row.shuffle)
        assert cls.difficulty in ("easy", "medium", "hard") and cls.max_steps >= 2
        # bound in its module under its CamelCase id, as the hand-written classes were
        name = "".join(part.capitalize() for part in task_id.split("_"))
        assert cls.__name__ == name and getattr(import_module(cls.__module__), name, cls) is cls


def test_rows_are_frozen_and_milestones_match_progress():
    row = TASKS["contacts_delete"].family
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.max_steps = 99  # type: ignore[misc]
    for task_id, cls in TASKS.items():
        task = cls(cls.sample_params(random.Random(7)))
        world = task.initial_state()
        marks = cls.family.milestones
        assert len(task.progress(world)) == len(marks(task.params) if callable(marks) else marks) >= 1, task_id
        # every template of the row fills from the parameters; a route starts on the launcher
        route = task.route()
        assert route[0] == ("", None) and all("{" not in page + (sel or "") for page, sel in route), task_id
        assert "{" not in task.start_page() and "{" not in task.goal, task_id


def test_shuffled_variant_is_the_same_row_with_the_layout_drawn():
    cls = shuffled(OpenApp, ("apps",))
    assert cls.task_id == "open_app_shuffled" and cls.__name__ == "OpenAppShuffled" and cls.__mro__[1] is WebTask
    assert dataclasses.replace(cls.family, task_id="open_app", shuffle=(), doc="") == OpenApp.family
    params = cls.sample_params(random.Random(3))
    assert sorted(params["layout"]) == ["apps"]
    assert cls(params).goal == OpenApp({k: v for k, v in params.items() if k != "layout"}).goal


def test_webtask_is_a_browser_task_and_refuses_another_device():
    (base,) = typing.get_args(next(b for b in WebTask.__orig_bases__ if typing.get_origin(b) is Task))
    assert base == typing.ForwardRef("BrowserDevice")
    (param,) = Task.__parameters__
    assert param.__bound__ is Device  # a plain Task subclass (miniwob, androidworld) takes any Device

    class NotABrowser(Device):
        def reset(self) -> None: ...
        def observe(self) -> Observation: return Observation(screenshot=b"", width=1, height=1)
        def execute(self, action) -> None: ...
        def close(self) -> None: ...

    task = TASKS["open_app"](TASKS["open_app"].sample_params(random.Random(0)))
    with pytest.raises(TypeError, match="webapps tasks need a BrowserDevice, got NotABrowser"):
        task.reset_device(NotABrowser())


def test_a_new_row_makes_a_task_class():
    row = dataclasses.replace(TASKS["todo_add"].family, task_id="todo_add_again", max_steps=9)
    cls = task_class(row, __name__)
    assert cls.__name__ == "TodoAddAgain" and cls.__module__ == __name__ and cls.max_steps == 9
    a, b = cls.sample_params(random.Random(1)), TASKS["todo_add"].sample_params(random.Random(1))
    assert a == b and cls(a).goal == TASKS["todo_add"](b).goal
