"""Every importer's memory bounds (docs/training.md, "Files without their screenshots, and limits"),
asserted on the inputs that amplify: each import runs in a child process whose own peak resident set
(``VmHWM``) is read back, and must stay under :data:`PEAK_BOUND_KB` (an import's stated peak, 1 GiB)
and, for an input refused before it is parsed, under :data:`REFUSED_BOUND_KB`.

The probe's inputs: a 62 KB gzipped AndroidControl record of packed int64 widths took 1.8 GB; a
UI-S1 line of 200,000 steps took 919 MB and 82 s."""

import gzip
import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guiagent.datasets._common import MAX_EPISODE_STEPS, MAX_JSON_VALUES
from guiagent.datasets.exported import MAX_ROW_GROUP_BYTES
from guiagent.datasets.tfrecord import MAX_MESSAGE_VALUES
from tests.guiagent.test_datasets import ac_example, write_tfrecord

#: an import's stated peak, whatever its input
PEAK_BOUND_KB = 1024 * 1024
#: an amplifying input refused before it is parsed: the interpreter, the importers' libraries and the
#: record's own bytes (the AndroidControl one is 60 MB decompressed)
REFUSED_BOUND_KB = 400 * 1024

# the child's own peak RSS: VmHWM of its address space (ru_maxrss would carry the forking parent's over exec)
_CHILD = ("import re, sys\nfrom guiagent.cli.data import main\nrc = main(sys.argv[1:])\n"
          "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
          "print('maxrss_kb', hwm, file=sys.stderr)\nsys.exit(rc)")


def _import(*args):
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", _CHILD, "import", *args], capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("maxrss_kb")]
    rss = int(next(ln for ln in p.stderr.splitlines() if ln.startswith("maxrss_kb")).split()[1])
    return p.returncode, lines, rss, time.monotonic() - t0


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _masked(b: bytes) -> int:
    import crc32c

    c = crc32c.crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _gzip_record(path: Path, record: bytes) -> None:
    head = struct.pack("<Q", len(record))
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(head + struct.pack("<I", _masked(head)) + record + struct.pack("<I", _masked(record)))


def test_androidcontrol_packed_widths_are_refused_before_parsing(tmp_path):
    """20 M one-byte varints (a 20 KB gzip file; the probe's 62 KB one took 1.8 GB): parsed, 8 bytes each
    in protobuf and 36 in a Python list. Walked first by its wire format and refused."""
    widths = _field(1, b"\x00" * 20_000_000)  # Int64List.value, packed
    feature = _field(3, widths)  # Feature.int64_list
    entry = _field(1, b"screenshot_widths") + _field(2, feature)
    record = _field(1, _field(1, entry))  # Example.features.feature
    src = tmp_path / "android_control-0"
    _gzip_record(src, record)
    assert src.stat().st_size < 100_000
    rc, lines, rss, took = _import("--format", "androidcontrol", str(src), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1, lines
    assert f"holds more than {MAX_MESSAGE_VALUES:,} values" in lines[0] and "record 0" in lines[0], lines
    assert rss < REFUSED_BOUND_KB, f"peak memory {rss} kB"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_androidcontrol_empty_sub_messages_are_refused_before_parsing(tmp_path):
    """Another amplifier: millions of empty feature entries (2 bytes each, ~100 parsed)."""
    record = _field(1, _field(1, b"") * 3_000_000)
    src = tmp_path / "android_control-0"
    _gzip_record(src, record)
    rc, lines, rss, _ = _import("--format", "androidcontrol", str(src), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and "values" in lines[0], lines
    assert rss < REFUSED_BOUND_KB, f"peak memory {rss} kB"


@pytest.mark.slow
def test_an_accessibility_forest_of_millions_of_nodes_is_not_parsed(tmp_path):
    """A step's accessibility tree (parsed for the target box when android_env is installed) of four
    million empty nodes: walked, found too big, and no box taken from it; the import goes on."""
    pytest.importorskip("android_env.proto.a11y.android_accessibility_forest_pb2")
    from guiagent.datasets.tfrecord import Example

    tree = _field(1, _field(11, _field(1, b"") * 4_000_000))  # forest.windows[0].tree.nodes
    ex = Example().FromString(ac_example(1, [{"action_type": "click", "x": 50, "y": 50}]))
    ex.features.feature["accessibility_trees"].bytes_list.value[0] = tree
    write_tfrecord(tmp_path / "android_control-0", [ex.SerializeToString()])
    rc, lines, rss, _ = _import("--format", "androidcontrol", str(tmp_path / "android_control-0"), "--out",
                                str(tmp_path / "out"))
    assert rc == 0, lines
    assert rss < REFUSED_BOUND_KB, f"peak memory {rss} kB"


def test_uis1_line_of_200k_steps_is_refused_fast(tmp_path):
    """The probe's line: 200,000 steps took 919 MB and 82 s; an episode has at most MAX_EPISODE_STEPS."""
    step = {"action_content": {"action": "wait", "time": 1}, "screenshot": None}
    (tmp_path / "a.jsonl").write_text(json.dumps({"goal": "g", "steps": [step] * 200_000}) + "\n")
    rc, lines, rss, took = _import("--format", "uis1", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"),
                                   "--placeholders", "60x120")
    assert rc == 2 and len(lines) == 1 and "a.jsonl: line 1: holds up to 1,000,003 JSON values" in lines[0], lines
    assert rss < REFUSED_BOUND_KB and took < 30, (rss, took)


def test_an_episode_over_the_step_bound_is_refused_before_its_steps_are_built(tmp_path):
    from guiagent.datasets import DatasetError, import_dataset

    step = {"action_content": {"action": "wait"}, "screenshot": None}
    (tmp_path / "a.jsonl").write_text(json.dumps({"goal": "g", "steps": [step] * (MAX_EPISODE_STEPS + 1)}) + "\n")
    with pytest.raises(DatasetError, match="the episode has 10,001 steps; an import takes at most 10,000 in one"):
        import_dataset("uis1", tmp_path / "a.jsonl", tmp_path / "out", placeholders="60x120")
    assert not (tmp_path / "out").exists()


def test_an_episodes_screenshots_over_the_byte_bound_are_refused(tmp_path, monkeypatch):
    """Rows of one episode accumulate until the episode ends: their screenshots are counted as they come."""
    from guiagent.datasets import DatasetError, _common, import_dataset
    from guiagent.store import Store
    from guiagent.store.export import export_parquet
    from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
    from tests.guiagent.test_datasets_hostile import noisy_png

    with Store.open(tmp_path / "run") as st:
        rid = st.create_run("r")
        st.write_trajectory(rid, Trajectory("ep", TaskSpec("webapps", "t", 0, "g"), tuple(
            Step(i, Observation(noisy_png(seed=i), 60, 120), Click(0.5, 0.5)) for i in range(3)), success=1.0))
    export_parquet(tmp_path / "run", tmp_path / "x.parquet")
    monkeypatch.setattr(_common, "MAX_EPISODE_SCREENSHOT_BYTES", 2 * len(noisy_png()) + 100)
    with pytest.raises(DatasetError, match=r"x.parquet: row 0 \(episode ep\): the episode's screenshots hold more than"):
        import_dataset("parquet", tmp_path / "x.parquet", tmp_path / "out")


def test_the_row_group_bound_is_read_from_the_footer(tmp_path, monkeypatch):
    from guiagent.datasets import DatasetError, exported, import_dataset
    from guiagent.store import Store
    from guiagent.store.export import export_parquet
    from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
    from tests.guiagent.test_datasets_hostile import noisy_png

    with Store.open(tmp_path / "run") as st:
        rid = st.create_run("r")
        st.write_trajectory(rid, Trajectory("ep", TaskSpec("webapps", "t", 0, "g"), (
            Step(0, Observation(noisy_png(), 60, 120), Click(0.5, 0.5)),), success=1.0))
    export_parquet(tmp_path / "run", tmp_path / "x.parquet")
    monkeypatch.setattr(exported, "MAX_ROW_GROUP_BYTES", 1024)
    with pytest.raises(DatasetError, match=r"row group 0 declares 0 MiB, more than the 0 MiB an import decodes"):
        import_dataset("parquet", tmp_path / "x.parquet", tmp_path / "out")


@pytest.mark.slow
def test_a_json_record_of_millions_of_empty_lists_is_refused_before_parsing(tmp_path):
    """``[[],[],...]``: 3 bytes of text, 64 bytes parsed; 60 MiB of it would be 1.3 GB."""
    (tmp_path / "a.jsonl").write_bytes(b'{"goal": "g", "steps": [' + b"[]," * 20_000_000 + b"[]]}\n")
    rc, lines, rss, _ = _import("--format", "uis1", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1 and f"at most {MAX_JSON_VALUES:,} in one record" in lines[0], lines
    assert rss < REFUSED_BOUND_KB, f"peak memory {rss} kB"


@pytest.mark.slow
def test_a_parquet_row_group_over_the_bound_is_refused_before_decoding(tmp_path):
    """A zstd row group declaring 200 MiB of zeros (a 20 KB file): Arrow would hold it three times over."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    big = b"\x00" * (200 * 2**20)
    table = pa.table({"episode_id": ["e"], "screenshot": pa.array([big], pa.binary())})
    del big
    pq.write_table(table, tmp_path / "x.parquet", compression="zstd")
    del table
    assert (tmp_path / "x.parquet").stat().st_size < 1_000_000
    rc, lines, rss, _ = _import("--format", "parquet", str(tmp_path / "x.parquet"), "--out", str(tmp_path / "out"))
    assert rc == 2 and len(lines) == 1, lines
    assert f"row group 0 declares 200 MiB, more than the {MAX_ROW_GROUP_BYTES // 2**20} MiB" in lines[0], lines
    assert rss < REFUSED_BOUND_KB, f"peak memory {rss} kB"


def test_a_compressed_arrow_batch_is_refused_before_it_is_inflated(tmp_path):
    """save_to_disk writes uncompressed batches; a compressed one would be inflated whole by Arrow."""
    import pyarrow as pa

    from guiagent.store.export import STEP_ROW_FIELDS

    folder = tmp_path / "hf"
    folder.mkdir()
    table = pa.table({name: pa.array([None], pa.string()) for name, _ in STEP_ROW_FIELDS})
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
            w.write_table(table)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    from guiagent.datasets import DatasetError, read_dataset

    with pytest.raises(DatasetError, match="holds a compressed record batch"):
        list(read_dataset("hf", folder))


@pytest.mark.slow
def test_a_large_androidcontrol_record_stays_under_the_stated_peak(tmp_path):
    """A legitimate record near the 256 MiB limit (incompressible screenshots): peak under 1 GiB."""
    import os

    from guiagent.datasets.tfrecord import Example
    from tests.guiagent.test_datasets_hostile import noisy_png

    shot = noisy_png(1000, 1000)  # ~3 MB, decodes to 3 MB
    ex = Example()()
    f = ex.features.feature
    f["episode_id"].int64_list.value.append(1)
    f["goal"].bytes_list.value.append(b"g")
    n = (240 * 2**20) // len(shot)
    for _ in range(n):
        f["screenshots"].bytes_list.value.append(shot + os.urandom(8))  # distinct bytes, still a valid PNG
        f["screenshot_widths"].int64_list.value.append(1000)
        f["screenshot_heights"].int64_list.value.append(1000)
    for _ in range(n - 1):
        f["actions"].bytes_list.value.append(b'{"action_type": "wait"}')
    write_tfrecord(tmp_path / "android_control-0", [ex.SerializeToString()])
    del ex, f
    rc, lines, rss, _ = _import("--format", "androidcontrol", str(tmp_path / "android_control-0"), "--out",
                                str(tmp_path / "out"))
    assert rc == 0, lines
    assert rss < PEAK_BOUND_KB, f"peak memory {rss} kB"
