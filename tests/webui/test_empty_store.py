"""An empty ``store.sqlite`` is a broken run the web UI lists, not a run it hides: only a store a
writer is creating this instant (SQLite makes the file, then writes its header microseconds later)
is passed over until the next scan."""

import os
import time

from guiagent.store import Store
from webui.registry import CREATING_S, RunRegistry


def test_an_empty_store_is_listed_as_unreadable(tmp_path):
    with Store.open(tmp_path / "good") as s:
        s.create_run("good", run_id="good")
    (tmp_path / "empty").mkdir()
    empty = tmp_path / "empty" / "store.sqlite"
    empty.write_bytes(b"")
    seconds_ago = time.time() - (CREATING_S + 3)  # the probe looked a few seconds after making it
    os.utime(empty, (seconds_ago, seconds_ago))
    reg = RunRegistry(tmp_path, ttl_s=0)
    broken = {b.label: b.reason for b in reg.broken()}
    assert list(broken) == ["empty"] and "an empty file (0 bytes), not a trajectory store" in broken["empty"]
    assert [r.info.run_id for r in reg.runs()] == ["good"]
    os.utime(empty)  # this instant: a writer may be creating it
    assert reg.broken() == []
