"""androidworld task parameters that are not JSON (android_world's expense, recipe and calendar
rows are dataclasses, its receipt tasks draw images): the episode records a JSON rendering, the
android_world task gets the real values, drawn again from the seed. ``scripts/contracts.sh``
runs the same checks over every task of the real registry."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from emulators.android.suite import REGENERATED, json_params, wrap_task
from guiagent.store import Store, StoreReader
from guiagent.types import TaskSpec


@dataclasses.dataclass(frozen=True)
class Expense:
    name: str
    amount: int
    when: object = None


class ExpenseAddMultiple:
    """Shaped like android_world's TaskEval: rows as dataclasses, an image, from the global RNGs."""

    template = "Add these expenses: {names}."
    complexity = 2
    app_names = ("pro expense",)

    def __init__(self, params):
        self.params = params

    @property
    def goal(self):
        return self.template.format(names=", ".join(r.name for r in self.params["row_objects"]))

    @classmethod
    def generate_random_params(cls):
        import datetime

        from PIL import Image

        rows = [Expense(random.choice(["Tea", "Rent", "Bus"]) + str(random.randrange(100)),
                        int(np.random.randint(1, 500)), datetime.date(2023, 10, 1 + random.randrange(20)))
                for _ in range(3)]
        shade = random.randrange(256)
        return {"row_objects": rows, "img": Image.new("RGB", (20, 30), (shade, 0, 0)), "count": 3,
                "names": [r.name for r in rows]}


def test_params_are_json_and_the_task_gets_the_real_values():
    cls = wrap_task("ExpenseAddMultiple", ExpenseAddMultiple)
    np.random.seed(5)
    np_before = np.random.random()
    np.random.seed(5)
    params = cls.sample_params(random.Random(3))
    assert np.random.random() == np_before  # numpy's global stream is put back too
    stored = json.loads(json.dumps(params))  # what a trajectory store holds
    assert stored == params and stored[REGENERATED] == ["img", "row_objects"]
    assert stored["count"] == 3 and len(stored["names"]) == 3  # JSON values stay as they are
    assert stored["img"] == {"image": {"width": 20, "height": 30, "mode": "RGB"}}
    assert stored["row_objects"][0].keys() == {"name", "amount", "when"}
    assert stored["row_objects"][0]["when"].startswith("2023-10-")
    a, b = cls(stored), cls(params)
    rows = a.aw_task.params["row_objects"]
    assert all(isinstance(r, Expense) for r in rows) and rows == b.aw_task.params["row_objects"]
    assert [r.name for r in rows] == stored["names"] and a.goal == b.goal
    assert a.aw_task.params["img"].tobytes() == b.aw_task.params["img"].tobytes()
    assert REGENERATED not in a.aw_task.params and a.aw_task.params["seed"] == stored["seed"]
    other = cls.sample_params(random.Random(4))
    assert cls(other).aw_task.params["row_objects"] != rows


def test_a_recorded_episode_keeps_the_json_params(tmp_path):
    cls = wrap_task("ExpenseAddMultiple", ExpenseAddMultiple)
    params = cls.sample_params(random.Random(3))
    task = cls(params)
    spec = TaskSpec("androidworld", "ExpenseAddMultiple", 3, task.goal, cls.max_steps, params)
    with Store.open(tmp_path) as store:
        run = store.create_run("t", env="androidworld")
        store.begin_episode(run, spec, agent="oracle").abort("no device here")
    with StoreReader(tmp_path) as reader:
        (ep,) = list(reader.iter_trajectories())
    assert dict(ep.task.params) == params


def test_json_params_of_plain_values_add_nothing():
    assert json_params({"name": "Ada", "n": 3, "seed": 7}) == {"name": "Ada", "n": 3, "seed": 7}


def test_regenerated_params_need_the_seed():
    cls = wrap_task("ExpenseAddMultiple", ExpenseAddMultiple)
    params = cls.sample_params(random.Random(3))
    params.pop("seed")
    with pytest.raises(ValueError, match="seed"):
        cls(params)
