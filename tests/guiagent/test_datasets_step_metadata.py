"""Step metadata in the store: written, read back, and added to stores made before the column existed."""

import sqlite3

from guiagent.store import Store, StoreReader
from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory


def _traj(eid, meta):
    return Trajectory(
        eid,
        TaskSpec("s", "t", 0, "g"),
        (Step(0, Observation(b"\x89PNG fake", 4, 4), Click(0.5, 0.5), metadata=meta),),
    )


def test_step_metadata_round_trip_and_migration(tmp_path):
    store = Store.open(tmp_path)
    run = store.create_run("r")
    store.write_trajectory(run, _traj("a", {"patched": True, "target_box": [0.1, 0.2, 0.3, 0.4]}))
    store.close()
    assert StoreReader(tmp_path).load_trajectory("a").steps[0].metadata == {
        "patched": True,
        "target_box": [0.1, 0.2, 0.3, 0.4],
    }
    assert Step.from_dict(_traj("x", {"k": 1}).steps[0].to_dict()).metadata == {"k": 1}

    # a store from before the column: reads as empty metadata, gains the column on the next open for writing
    con = sqlite3.connect(tmp_path / "store.sqlite")
    con.execute("ALTER TABLE steps DROP COLUMN metadata")
    con.commit()
    con.close()
    assert StoreReader(tmp_path).load_trajectory("a").steps[0].metadata == {}
    store = Store.open(tmp_path)
    store.write_trajectory(run, _traj("b", {"matched": False}))
    store.close()
    Store.open(tmp_path).close()  # a second open finds the column there
    r = StoreReader(tmp_path)
    assert r.load_trajectory("a").steps[0].metadata == {}
    assert r.load_trajectory("b").steps[0].metadata == {"matched": False}
