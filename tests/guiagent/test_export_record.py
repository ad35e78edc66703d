"""``export --overwrite`` and a forged export record: the refusal says what is there. It said the
folder "holds no .guiagent-export.json" while holding one (a record that is not an export's)."""

import pytest

from guiagent.cli.main import main
from tests.guiagent.test_store_check import _run as stored_run


@pytest.mark.parametrize("record,said", [
    (None, "holds no .guiagent-export.json, so guiagent export did not write it"),
    ('{"files": "steps.parquet"}', "holds a .guiagent-export.json that is not the record guiagent export keeps"),
    ("[1, 2]", "holds a .guiagent-export.json that is not the record guiagent export keeps"),
    ("not json", "holds a .guiagent-export.json that is not the record guiagent export keeps"),
])
def test_a_forged_or_missing_record_is_said_as_it_is(tmp_path, capsys, record, said):
    run = stored_run(tmp_path, episodes=1)
    out = tmp_path / "out"
    out.mkdir()
    (out / "steps.parquet").write_bytes(b"mine")
    if record is not None:
        (out / ".guiagent-export.json").write_text(record)
    assert main(["export", str(run), "--format", "parquet", "--out", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    if record is not None:
        assert "holds no" not in err[0]
    assert (out / "steps.parquet").read_bytes() == b"mine"
