"""Mark tables in the store: stored with each step, read back with it, exported, and an older
(schema 2) store opened by a reader as it is and migrated in place by a writer."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

from guiagent.store import Store, StoreReader
from guiagent.store import schema
from guiagent.store.export import iter_step_rows
from guiagent.store.schema import SCHEMA_VERSION, db_path
from guiagent.types import ClickElement, Mark, TypeElement
from tests.guiagent.test_store_fixtures import make_traj

MARKS = (Mark(0, "link", "Contacts", (0.0, 0.1, 0.25, 0.2), ("selected",)),
         Mark(1, "textbox", 'To "who"\n', (0.05, 0.5, 0.95, 0.6)))


def _with_marks(n: int):
    """Episode ``n`` whose first step acted on marks and whose second screen had an empty table."""
    base = make_traj(n, steps=3)
    steps = list(base.steps)
    steps[0] = dataclasses.replace(steps[0], action=ClickElement(0),
                                   observation=dataclasses.replace(steps[0].observation, marks=MARKS))
    steps[1] = dataclasses.replace(steps[1], action=TypeElement(1, "Ann"),
                                   observation=dataclasses.replace(steps[1].observation, marks=()))
    final = dataclasses.replace(base.final_observation, marks=MARKS[:1])
    return dataclasses.replace(base, steps=tuple(steps), final_observation=final)


def test_marks_round_trip_with_the_step(tmp_path):
    traj = _with_marks(1)
    with Store.open(tmp_path / "run") as store:
        store.write_trajectory(store.create_run("marks"), traj)
    reader = StoreReader(tmp_path / "run")
    back = reader.load_trajectory(traj.episode_id)
    assert back == traj
    assert [s.observation.marks for s in back.steps] == [MARKS, (), None]  # a table, an empty one, none
    assert back.final_observation.marks == MARKS[:1]
    detail = reader.get_episode(traj.episode_id)
    assert detail.steps[0].marks == MARKS and detail.steps[2].marks is None
    rows = list(iter_step_rows(tmp_path / "run", pixels=False))
    assert json.loads(rows[0]["marks"])[1]["name"] == 'To "who"\n' and rows[2]["marks"] is None
    assert json.loads(rows[0]["marks"])[0]["states"] == ["selected"] and "states" not in json.loads(rows[0]["marks"])[1]


def _v2_store(run_dir):
    """A store as schema 2 wrote it: today's tables without ``steps.marks``, user_version 2."""
    run_dir.mkdir()
    con = sqlite3.connect(db_path(run_dir))
    ddl = schema._DDL.replace(
        "    marks               TEXT,               -- the observation's marks [{id, role, name, box}] "
        "JSON, or NULL\n", "")
    assert "marks" not in ddl.split("CREATE TABLE IF NOT EXISTS steps")[1].split(");")[0]
    con.executescript(ddl)
    con.execute("PRAGMA user_version = 2")
    con.commit()
    con.close()


def test_a_schema_2_store_opens_for_readers_and_migrates_for_writers(tmp_path):
    run_dir = tmp_path / "old"
    _v2_store(run_dir)
    # written by a v2 writer: the step row has no marks column at all
    con = sqlite3.connect(db_path(run_dir))
    con.execute("INSERT INTO runs (id, name, status, created_at, updated_at) VALUES ('r1', 'old', 'finished', 1, 2)")
    con.execute("INSERT INTO episodes (id, run_id, suite, task_id, seed, goal, max_steps, status, started_at, "
                "updated_at, num_steps) VALUES ('e1', 'r1', 'webapps', 'open_app', 1, 'g', 3, 'completed', 1, 1, 1)")
    con.execute("INSERT INTO steps (episode_pk, idx, width, height, response, thought, action, reward, reward_parts, "
                "milestones, terminated, truncated, policy_version, latency_ms) VALUES (1, 0, 4, 3, '', '', "
                "'{\"kind\": \"click\", \"x\": 0.5, \"y\": 0.5}', 0, '{}', '[]', 1, 0, 0, 0)")
    con.commit()
    con.close()

    reader = StoreReader(run_dir)  # a reader cannot migrate: old steps read as steps without marks
    (step,) = reader.get_episode("e1").steps
    assert step.marks is None and step.action.kind == "click"
    assert reader.load_trajectory("e1").steps[0].observation.marks is None

    with Store.open(run_dir) as store:  # a writer migrates in place, then stores marks
        store.write_trajectory("r1", _with_marks(2))
    con = sqlite3.connect(db_path(run_dir))
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    reader = StoreReader(run_dir)
    assert reader.get_episode("e1").steps[0].marks is None  # the old row: NULL
    assert reader.load_trajectory("ep-000002").steps[0].observation.marks == MARKS


def test_a_mangled_marks_value_reads_as_no_marks(tmp_path):
    with Store.open(tmp_path / "run") as store:
        store.write_trajectory(store.create_run("m"), _with_marks(3))
    con = sqlite3.connect(db_path(tmp_path / "run"))
    con.execute("UPDATE steps SET marks = '[{\"id\": \"x\"}]' WHERE idx = 0")
    con.commit()
    con.close()
    assert StoreReader(tmp_path / "run").get_episode("ep-000003").steps[0].marks is None
