"""Metrics loggers: TensorBoard event files read back record by record, the store through its reader."""

from __future__ import annotations

import math
import struct
import time
from pathlib import Path

import pytest

from guiagent.store import Store
from guiagent.store.reader import StoreReader
from rl.loggers import MetricsLogger, MultiLogger, StoreLogger, TensorBoardLogger, make_loggers

pytest.importorskip("tensorboardX")

METRICS = [
    {"success_rate": 0.25, "loss": 0.71, "kl": 0.0},
    {"success_rate": 0.5, "loss": 0.52, "kl": 0.013},
    {"success_rate": 0.875, "loss": 0.40, "kl": 0.021},
]


def read_tfevents(path: Path) -> list:
    """Every Event of a tfevents file: TFRecord framing (length, masked CRC32C, payload, CRC) checked."""
    from tensorboardX.crc32c import crc32c
    from tensorboardX.proto.event_pb2 import Event

    def masked(data: bytes) -> int:
        crc = crc32c(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    events, data, pos = [], path.read_bytes(), 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        assert length_crc == masked(header), "corrupt record length"
        payload = data[pos + 12:pos + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert payload_crc == masked(payload), "corrupt record"
        events.append(Event.FromString(payload))
        pos += 16 + length
    return events


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    files = sorted(log_dir.glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    out: dict[str, list[tuple[int, float]]] = {}
    for ev in read_tfevents(files[0]):
        for v in ev.summary.value:
            if v.HasField("simple_value"):
                out.setdefault(v.tag, []).append((ev.step, v.simple_value))
    return out


def test_tensorboard_scalars_round_trip(tmp_path):
    config = {"algo": "dr_grpo", "lr": 3e-4}
    with make_loggers(("tensorboard",), tmp_path, "grpo-1", config) as logger:
        assert isinstance(logger, TensorBoardLogger)
        for it, m in enumerate(METRICS):
            logger.log(it, m)
        log_dir = tmp_path / "tensorboard" / "grpo-1"
        # on disk about a second after log(): readable while the run goes on
        deadline = time.monotonic() + 10
        while len(scalars(log_dir).get("loss", [])) < len(METRICS) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert scalars(log_dir)["loss"] == [(i, pytest.approx(m["loss"])) for i, m in enumerate(METRICS)]
    got = scalars(log_dir)
    assert set(got) == {"success_rate", "loss", "kl"}  # the store's names, unchanged
    for name in got:
        assert got[name] == [(i, pytest.approx(m[name], abs=1e-7)) for i, m in enumerate(METRICS)]
    texts = [v for ev in read_tfevents(next(log_dir.glob("events.*"))) for v in ev.summary.value
             if v.tag.startswith("config")]
    assert texts and b"dr_grpo" in texts[0].tensor.string_val[0]


def test_store_and_tensorboard_share_names(tmp_path):
    run_dir = tmp_path / "run"
    with Store.open(run_dir) as store:
        run_id = store.create_run("loggers")
        logger = make_loggers(("store", "tensorboard"), tmp_path, "both", None, store=store, run_id=run_id)
        assert isinstance(logger, MultiLogger) and isinstance(logger.loggers[0], StoreLogger)
        for it, m in enumerate(METRICS):
            logger.log(it, {**m, "judge_agreement": float("nan")})
        logger.close()
        logger.close()  # twice is fine
    with StoreReader(run_dir) as reader:
        stored = set(reader.metric_names(run_id))
        values = reader.metrics(run_id, ["loss"])
    tb = scalars(tmp_path / "tensorboard" / "both")
    assert stored == set(tb) - {"judge_agreement"} == {"success_rate", "loss", "kl"}
    assert all(math.isnan(v) for _, v in tb["judge_agreement"])  # TensorBoard draws NaN; the store holds numbers
    assert [(p.iteration, p.value) for p in values["loss"]] == [(i, m["loss"]) for i, m in enumerate(METRICS)]


@pytest.mark.parametrize("names, kwargs, error, message", [
    (("tensorbored",), {}, ValueError, "unknown logger"),
    (("store",), {}, ValueError, "store= and run_id="),
])
def test_bad_names_fail_before_anything_is_written(tmp_path, names, kwargs, error, message):
    with pytest.raises(error, match=message):
        make_loggers(("tensorboard", *names), tmp_path, "x", None, **kwargs)
    assert not (tmp_path / "tensorboard").exists()


def test_non_numbers_are_refused(tmp_path):
    with make_loggers(("tensorboard",), tmp_path, "x") as logger:
        with pytest.raises(TypeError, match="'note' must be a number"):
            logger.log(0, {"note": "hello"})


def test_no_backends_is_a_quiet_logger(tmp_path):
    logger = make_loggers((), tmp_path, "none")
    assert isinstance(logger, MetricsLogger)
    logger.log(0, {"loss": 1.0})
    logger.close()
    assert list(tmp_path.iterdir()) == []


def test_wandb_missing_is_one_clear_error(tmp_path):
    import importlib.util
    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    with pytest.raises(ImportError, match=r"pip install 'guiagent\[wandb\]'"):
        make_loggers(("tensorboard", "wandb"), tmp_path, "x")
    assert not (tmp_path / "tensorboard").exists()  # checked before any logger started


def test_wandb_offline_run(tmp_path, monkeypatch):
    """With wandb installed (the ``wandb`` extra): an offline run on disk holding the metrics."""
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline is the default
    monkeypatch.setenv("WANDB_SILENT", "true")
    with make_loggers(("wandb",), tmp_path, "wb", {"lr": 3e-4}) as logger:
        for it, m in enumerate(METRICS):
            logger.log(it, {**m, "judge_agreement": float("nan")})
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    data = runs[0].read_bytes()  # protobuf records: metric names are stored as plain bytes
    assert all(name.encode() in data for name in METRICS[0]) and b"judge_agreement" not in data
