"""guiagent.writing: a full disk said with what was being written, and where."""

from __future__ import annotations

import errno
import os
import sqlite3

import pytest

from guiagent.writing import NoSpace, describe, disk_full, writing


def _full(code=errno.ENOSPC, filename="runs/x/checkpoint.tmp/model.safetensors"):
    return OSError(code, os.strerror(code), filename)


def test_a_full_disk_inside_a_write_names_the_write_and_its_place():
    with pytest.raises(NoSpace) as e, writing("the checkpoint", "runs/x/checkpoint"):
        raise _full()
    assert str(e.value) == ("no space left on the device while writing the checkpoint to runs/x/checkpoint: free "
                            "some space, then run it again (a run: --resume)")
    assert isinstance(e.value.cause, OSError) and e.value.where == "runs/x/checkpoint"


def test_the_innermost_write_names_it_and_other_errors_pass_unchanged():
    with pytest.raises(NoSpace, match="while writing the checkpoint to c"), writing("iteration 3", "run"):
        with writing("the checkpoint", "c"):
            raise _full()
    with pytest.raises(PermissionError), writing("the checkpoint", "c"):
        raise PermissionError(errno.EACCES, "Permission denied", "c")
    with pytest.raises(NoSpace, match="^the disk quota is used up while writing"), writing("the metrics", "m"):
        raise _full(errno.EDQUOT)
    with pytest.raises(NoSpace, match=r"^the file size limit was reached .*raise the limit \(ulimit -f\)"):
        with writing("the metrics", "m"):
            raise _full(errno.EFBIG)


def test_sqlites_full_database_is_a_full_disk():
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (x BLOB)")
    con.execute("PRAGMA max_page_count = 2")  # a real SQLITE_FULL: the database may not grow past two pages
    with pytest.raises(NoSpace, match="while writing the episodes to s"), writing("the episodes", "s"):
        con.execute("INSERT INTO t VALUES (?)", (bytes(100_000),))
    assert not disk_full(sqlite3.OperationalError("no such table: t"))


def test_a_full_disk_with_no_word_for_the_write_still_says_the_file():
    assert describe(_full(filename="m/model.safetensors")) == (
        "no space left on the device while writing a file to m/model.safetensors: free some space, then run it "
        "again (a run: --resume)")
    assert describe(_full(errno.EACCES)) is None


def test_a_full_disk_in_a_librarys_own_words_is_one_too():
    from safetensors import SafetensorError

    e = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    with pytest.raises(NoSpace, match="^no space left on the device while writing the final model to m"):
        with writing("the final model", "m"):
            raise e
    assert describe(e).startswith("no space left on the device while writing a file:")
    assert not disk_full(RuntimeError("I/O error: Permission denied (os error 13)"))
