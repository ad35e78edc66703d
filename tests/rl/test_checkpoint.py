"""Checkpoints hold plain data only, are never torn, and resume from the newest whole folder."""

import json
import os
import pickle
import random
from pathlib import Path

import pytest
import torch

from guiagent.policy.hf import load_transformers
from rl.checkpoint import (
    CheckpointError, TrainerState, find_checkpoint, load_checkpoint, load_config, save_checkpoint,
)
from rl.config import TrainConfig


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return load_transformers(tiny_model_dir)


def _save(out: Path, policy, iteration: int) -> torch.optim.Optimizer:
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    save_checkpoint(out, policy, opt, TrainerState(iteration=iteration, run_id="r", model_dir="m"))
    return opt


def test_round_trip_restores_state_optimiser_and_rngs(policy, tmp_path):
    random.seed(5)
    torch.manual_seed(7)
    opt = _save(tmp_path, policy, 3)
    expect_py, expect_torch = random.random(), torch.rand(3)
    got = load_checkpoint(find_checkpoint(tmp_path))
    assert got.state == TrainerState(iteration=3, run_id="r", model_dir="m")
    assert got.optimizer["param_groups"][0]["lr"] == opt.state_dict()["param_groups"][0]["lr"]
    random.setstate(got.python_rng)
    torch.set_rng_state(got.torch_rng)
    assert random.random() == expect_py and torch.equal(torch.rand(3), expect_torch)
    assert not (tmp_path / "checkpoint.tmp").exists() and not (tmp_path / "checkpoint.old").exists()


class _Boom:
    """What a crafted checkpoint carries: unpickling it would run a command."""

    def __reduce__(self):
        return (os.system, (f"touch {_Boom.marker}",))


def test_a_malicious_optimizer_file_is_refused_not_executed(policy, tmp_path):
    _save(tmp_path, policy, 1)
    marker = tmp_path / "pwned"
    _Boom.marker = marker
    with open(tmp_path / "checkpoint" / "optimizer.pt", "wb") as f:
        pickle.dump({"optimizer": _Boom(), "torch_rng": torch.zeros(1)}, f)
    with pytest.raises(CheckpointError, match="not a plain tensor file"):
        load_checkpoint(find_checkpoint(tmp_path))
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncate_optimizer", "garbage_state", "state_missing_field"])
def test_a_damaged_checkpoint_gives_one_clear_error(policy, tmp_path, damage):
    _save(tmp_path, policy, 1)
    ck = tmp_path / "checkpoint"
    if damage == "truncate_optimizer":
        data = (ck / "optimizer.pt").read_bytes()
        (ck / "optimizer.pt").write_bytes(data[: len(data) // 3])
    elif damage == "garbage_state":
        (ck / "trainer_state.json").write_bytes(b"\xff\xfe not json")
    else:
        (ck / "trainer_state.json").write_text(json.dumps({"state": {"iteration": 1}}))
    with pytest.raises(CheckpointError):
        load_checkpoint(find_checkpoint(tmp_path))


def test_an_old_pickled_checkpoint_is_not_loaded(tmp_path):
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "trainer_state.pt").write_bytes(b"\x80\x04")
    with pytest.raises(CheckpointError, match="older guiagent"):
        find_checkpoint(tmp_path)


def test_the_newest_whole_folder_wins_when_a_swap_was_interrupted(policy, tmp_path):
    assert find_checkpoint(tmp_path) is None
    _save(tmp_path, policy, 1)
    os.replace(tmp_path / "checkpoint", tmp_path / "checkpoint.old")  # killed between the two moves
    assert find_checkpoint(tmp_path) == tmp_path / "checkpoint.old"
    _save(tmp_path, policy, 2)
    os.replace(tmp_path / "checkpoint", tmp_path / "checkpoint.tmp")  # written whole, not yet moved in
    assert load_checkpoint(find_checkpoint(tmp_path)).state.iteration == 2
    (tmp_path / "checkpoint.tmp" / "COMPLETE").unlink()  # a torn tmp folder is never used
    assert find_checkpoint(tmp_path) is None


def test_a_run_config_that_is_missing_or_invalid_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no config.yaml"):
        load_config(TrainConfig, tmp_path)


@pytest.mark.parametrize("change, message", [
    ({"iteration": "abc"}, "iteration: 'abc' is not valid (expected int)"),
    ({"iteration": -5}, "iteration: -5 is out of range"),  # ran 7 iterations to reach 2
    ({"iteration": 2**64}, "is out of range"),
    ({"iteration": True}, "iteration: True is not valid"),
    ({"rollbacks": 1.5}, "rollbacks: 1.5 is not valid"),
    ({"data_cursor": 1}, "data_cursor 1 lies before iteration 3"),
    ({"best_iteration": 9}, "best_iteration 9 lies after iteration 3"),
    ({"eval_before": 7.0}, "eval_before: 7.0 is not a success rate"),
    ({"kl_coef": -1.0}, "kl_coef: -1.0 is not a finite"),
    ({"replay": [["a"]]}, "replay: expected [run directory, episode id] pairs"),
    ({"model_dir": 3}, "model_dir: 3 is not valid (expected str)"),
    ({"surprise": 1}, "unknown field(s) ['surprise']"),
    ({"python_rng": [3, [1, 2], None]}, "python_rng"),
])
def test_a_trainer_state_is_checked_field_by_field(tmp_path, change, message):
    """trainer_state.json is read back as checked plain data: a wrong type or an out-of-range count is
    one CheckpointError line (it was a TypeError traceback mid-run, or a run of extra iterations)."""
    from rl.checkpoint import COMPLETE, OPTIM_FILE, STATE_FILE, read_state

    version, internal, gauss = random.getstate()
    state = {"iteration": 3, "run_id": "r", "model_dir": "m", "eval_before": float("nan"), "best_success": 0.5,
             "best_iteration": 2, "replay": [["runs/a", "e1"]], "data_cursor": 4}
    doc = {"state": state, "python_rng": [version, list(internal), gauss]}
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    for name in (COMPLETE, OPTIM_FILE):
        (ckpt / name).write_text("")
    (ckpt / STATE_FILE).write_text(json.dumps(doc))
    assert read_state(ckpt)[0].iteration == 3  # a NaN evaluation (--eval-episodes 0) is fine
    if "python_rng" in change:
        doc = {**doc, **change}
    else:
        doc = {**doc, "state": {**state, **change}}
    (ckpt / STATE_FILE).write_text(json.dumps(doc))
    with pytest.raises(CheckpointError) as e:
        read_state(ckpt)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
