"""Rows of our own exports with values the store cannot hold, or holds wrongly: one line naming the
file and the row, exit 2, nothing written; never a traceback, never a staging path, never Python's own
words."""

import math

import pytest

from guiagent.datasets._common import STAGING_INFIX
from guiagent.store import Store, StoreReader
from guiagent.store.export import export_parquet
from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
from tests.guiagent.test_datasets_hostile import noisy_png


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """A Parquet export of one episode of two steps (rows 0 and 1)."""
    base = tmp_path_factory.mktemp("rows")
    with Store.open(base / "run") as s:
        rid = s.create_run("r")
        s.write_trajectory(rid, Trajectory("ep", TaskSpec("webapps", "t", 0, "g"), (
            Step(0, Observation(noisy_png(), 60, 120), Click(0.5, 0.5), reward=0.0),
            Step(1, Observation(noisy_png(seed=1), 60, 120), Click(0.2, 0.2), reward=1.0)), success=1.0))
    export_parquet(base / "run", base / "x.parquet")
    return base / "x.parquet"


def _changed(export, tmp_path, column, value, row=1):
    """The export with ``column`` of ``row`` set to ``value`` (the column's type kept)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(export)
    values = table.column(column).to_pylist()
    values[row] = value
    i = table.schema.get_field_index(column)
    table = table.set_column(i, column, pa.array(values, type=table.schema.field(column).type))
    out = tmp_path / "src" / "x.parquet"
    out.parent.mkdir()
    pq.write_table(table, out)
    return out


def _cli(capsys, *args):
    from guiagent.cli.data import main

    rc = main(["import", *args])
    return rc, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("column,value,said", [
    ("reward", math.nan, "reward is nan, not a finite number"),          # the probe: sqlite3.IntegrityError
    ("reward", math.inf, "reward is inf, not a finite number"),
    ("latency_ms", -math.inf, "latency_ms is -inf, not a finite number"),
    ("success", math.inf, "success is inf, not a finite number"),        # the probe: imported
    ("success", 3.0, "success is 3, outside 0..1"),
    ("width", 2**62, "width is 4611686018427387904, outside 1..65535"),  # the probe: imported
    ("height", 0, "height is 0, outside 1..65535"),
    ("step_metadata", "[1, 2]", "step_metadata must be a JSON object, got a list"),  # the probe: exit 1, no row
    ("step_metadata", '"text"', "step_metadata must be a JSON object, got a text"),
    ("episode_metadata", "5", "episode_metadata must be a JSON object, got a number"),
    ("reward_parts", '{"task": NaN}', "reward_parts: task is nan, not a finite number"),
    ("episode_status", "exploded", "episode_status is 'exploded'; an episode is completed or aborted"),  # the probe
    ("screenshot", None, "the screenshot is missing (null) though screenshot_ref names one"),  # the probe: staging path
    ("step_metadata", '{"n": ' + "9" * 5000 + "}", "step_metadata is not JSON (a number of more than 4300 digits)"),
    ("screenshot", b"not an image at all", "the screenshot is not a readable image (not PNG, JPEG, WEBP, GIF, BMP data)"),
    ("policy_version", 2**63 - 1, None),  # in range: imports
])
def test_a_bad_value_is_one_line_naming_file_and_row(export, tmp_path, capsys, column, value, said):
    src = _changed(export, tmp_path, column, value, row=0 if column.startswith("episode") or column == "success" else 1)
    rc, lines = _cli(capsys, "--format", "parquet", str(src), "--out", str(tmp_path / "out"))
    if said is None:
        assert rc == 0, lines
        return
    assert rc == 2 and len(lines) == 1, lines
    assert str(src) in lines[0] and said in lines[0], lines
    assert ": row 0" in lines[0] or ": row 1" in lines[0], lines
    for leak in (STAGING_INFIX, "Traceback", "IntegrityError", "set_int_max_str_digits", "object at 0x"):
        assert leak not in lines[0], lines
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(f".*{STAGING_INFIX}*"))


def test_the_store_refuses_what_is_not_a_finite_number_in_its_own_words(tmp_path):
    """The store under the importers: a NaN reward, success or reward part is a StoreError, not an
    sqlite3.IntegrityError, and the episode is not written."""
    from guiagent.store import StoreError

    with Store.open(tmp_path / "run") as s:
        rid = s.create_run("r")
        for bad in (dict(reward=math.nan), dict(reward_parts={"task": math.inf}), dict(latency_ms=math.nan)):
            step = Step(0, Observation(noisy_png(), 60, 120), Click(0.5, 0.5), **bad)
            with pytest.raises(StoreError, match="must be a finite number"):
                s.write_trajectory(rid, Trajectory(f"e{len(bad)}", TaskSpec("w", "t", 0, "g"), (step,)))
        with pytest.raises(StoreError, match="success must be a finite number"):
            s.write_trajectory(rid, Trajectory("s", TaskSpec("w", "t", 0, "g"), (
                Step(0, Observation(noisy_png(), 60, 120), Click(0.5, 0.5)),), success=math.nan))
        with pytest.raises(StoreError, match="must fit a 64-bit integer"):
            s.write_trajectory(rid, Trajectory("big", TaskSpec("w", "t", 2**64, "g"), (
                Step(0, Observation(noisy_png(), 60, 120), Click(0.5, 0.5)),)))
    assert StoreReader(tmp_path / "run").count_episodes() == 0


def test_python_words_never_reach_a_uis1_or_odyssey_user(tmp_path, capsys):
    """A 5000-digit number in a JSON record and bytes that are no image: said in our words, not
    ``sys.set_int_max_str_digits()`` or ``<_io.BytesIO object at 0x...>``."""
    (tmp_path / "a.jsonl").write_text('{"goal": "g", "steps": [{"action_content": {"action": "click", "coordinate": ['
                                      + "9" * 5000 + ', 1]}, "screenshot": "s.png"}]}\n')
    (tmp_path / "s.png").write_bytes(b"these bytes are no image")
    rc, lines = _cli(capsys, "--format", "uis1", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"))
    assert rc == 2 and lines == [f"guiagent data import: {tmp_path / 'a.jsonl'}: line 1: not JSON (a number of more "
                                 "than 4300 digits)"], lines
    (tmp_path / "a.jsonl").write_text('{"goal": "g", "steps": [{"action_content": {"action": "wait"}, '
                                      '"screenshot": "s.png"}]}\n')
    rc, lines = _cli(capsys, "--format", "uis1", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and lines[0].endswith(
        "line 1 step 0: the screenshot is not a readable image (not PNG, JPEG, WEBP, GIF, BMP data)"), lines
