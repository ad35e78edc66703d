"""Damaged and tampered checkpoints: refused in one line before anything is changed, never taken for
a run with no checkpoint; a kill at any point of a save still resumes from the whole copy."""

import os
import pickle
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from guiagent.policy.hf import load_transformers
from rl.checkpoint import (
    COMPLETE, OPTIM_FILE, STATE_FILE, CheckpointError, TrainerState, find_checkpoint, load_checkpoint,
    mark_run, restore_optimizer, save_checkpoint, save_config,
)
from rl.config import TrainConfig


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return load_transformers(tiny_model_dir)


def _stepped(policy) -> torch.optim.Optimizer:
    """An AdamW that has taken a step: a state (step, exp_avg, exp_avg_sq) for every parameter."""
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    for p in policy.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad()
    return opt


@pytest.fixture(scope="module")
def saved(policy, tiny_model_dir, tmp_path_factory):
    """A run folder with one whole checkpoint (an optimiser with state), written once."""
    out = tmp_path_factory.mktemp("saved")
    state = TrainerState(iteration=1, run_id="r", model_dir=tiny_model_dir)
    save_checkpoint(out, policy, _stepped(policy), state)
    return out


def _copy(saved: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(saved, out)
    return out


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


# ---- a damaged checkpoint folder is not "no checkpoint" -----------------------------------------------

@pytest.mark.parametrize("damage, message", [
    ("no_complete", "COMPLETE is missing"),
    ("state_is_a_folder", "trainer_state.json is not a file"),
    ("no_optimizer", "optimizer.pt is missing"),
    ("checkpoint_is_a_file", "not a folder"),
    ("torn_old_alone", "checkpoint.old is not a whole checkpoint"),
])
def test_a_damaged_checkpoint_folder_is_refused_not_taken_for_none(saved, tmp_path, damage, message):
    """It was taken for a run with no checkpoint: a resume started again from iteration 0 and wrote
    a new checkpoint over the damaged one."""
    out = _copy(saved, tmp_path)
    ck = out / "checkpoint"
    if damage == "no_complete":
        (ck / COMPLETE).unlink()
    elif damage == "state_is_a_folder":
        (ck / STATE_FILE).unlink()
        (ck / STATE_FILE).mkdir()
    elif damage == "no_optimizer":
        (ck / OPTIM_FILE).unlink()
    elif damage == "checkpoint_is_a_file":
        shutil.rmtree(ck)
        ck.write_text("")
    else:
        os.replace(ck, out / "checkpoint.old")
        (out / "checkpoint.old" / COMPLETE).unlink()
    with pytest.raises(CheckpointError) as e:
        find_checkpoint(out)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_damaged_checkpoint_falls_back_to_a_whole_copy(saved, tmp_path):
    out = _copy(saved, tmp_path)
    shutil.copytree(out / "checkpoint", out / "checkpoint.old")
    (out / "checkpoint" / COMPLETE).unlink()
    assert find_checkpoint(out) == out / "checkpoint.old"


@pytest.mark.parametrize("moment", ["first_save_torn_tmp", "writing_tmp", "tmp_whole", "between_moves",
                                    "moved_in", "deleting_old", "resumed_save_deleting_tmp"])
def test_a_kill_at_each_moment_of_a_save_resumes_from_the_whole_copy(saved, tmp_path, moment):
    """save_checkpoint: rmtree(tmp), write tmp, COMPLETE, rmtree(old), checkpoint -> old, tmp -> checkpoint,
    rmtree(old). The folders a kill leaves at each moment, and what a resume takes."""
    out = _copy(saved, tmp_path)
    ck, tmp, old = out / "checkpoint", out / "checkpoint.tmp", out / "checkpoint.old"

    def torn(folder: Path) -> None:  # a folder half written (or half deleted)
        (folder / COMPLETE).unlink()
        (folder / OPTIM_FILE).unlink()

    expect = {"first_save_torn_tmp": None, "writing_tmp": ck, "tmp_whole": ck, "between_moves": tmp,
              "moved_in": ck, "deleting_old": ck, "resumed_save_deleting_tmp": old}[moment]
    if moment == "first_save_torn_tmp":  # the first save killed while writing: no checkpoint yet
        os.replace(ck, tmp)
        torn(tmp)
    elif moment in ("writing_tmp", "tmp_whole"):
        shutil.copytree(ck, tmp)
        if moment == "writing_tmp":
            torn(tmp)
    elif moment == "between_moves":  # the moment with no checkpoint/
        shutil.copytree(ck, tmp)
        os.replace(ck, old)
    elif moment in ("moved_in", "deleting_old"):
        shutil.copytree(ck, old)
        if moment == "deleting_old":
            torn(old)
    else:  # a run resumed from checkpoint.tmp saves again: killed while deleting that tmp, before writing
        os.replace(ck, old)
        shutil.copytree(old, tmp)
        torn(tmp)
    assert find_checkpoint(out) == expect


# ---- a tampered optimizer.pt: its shapes checked before anything uses it ---------------------------------

def _tamper(blob: dict, case: str) -> object:
    opt, rng = blob["optimizer"], blob["torch_rng"]
    group = opt["param_groups"][0]
    if case == "optimizer_int":
        return {"optimizer": 5, "torch_rng": rng}
    if case == "no_groups":
        return {"optimizer": {"state": {}, "param_groups": []}, "torch_rng": rng}
    if case == "rng_float":
        return {"optimizer": opt, "torch_rng": rng.float()}
    if case == "rng_short":
        return {"optimizer": opt, "torch_rng": rng[:100]}
    if case == "rng_garbage":  # the right shape, bytes torch's generator refuses
        return {"optimizer": opt, "torch_rng": torch.full_like(rng, 255)}
    if case == "extra_entry":
        return {**blob, "payload": torch.zeros(3)}
    if case == "group_not_a_dict":
        return {"optimizer": {**opt, "param_groups": [7]}, "torch_rng": rng}
    if case == "params_not_indices":
        return {"optimizer": {**opt, "param_groups": [{**group, "params": ["a"]}]}, "torch_rng": rng}
    if case == "params_twice":
        return {"optimizer": {**opt, "param_groups": [{**group, "params": [0, 0]}]}, "torch_rng": rng}
    if case == "lr_tensor":
        return {"optimizer": {**opt, "param_groups": [{**group, "lr": torch.tensor([1.0, 2.0])}]},
                "torch_rng": rng}
    if case == "state_of_unlisted":
        return {"optimizer": {**opt, "state": {**opt["state"], 10_000: opt["state"][0]}}, "torch_rng": rng}
    if case == "state_not_tensors":
        return {"optimizer": {**opt, "state": {**opt["state"], 0: {"exp_avg": 3}}}, "torch_rng": rng}
    if case == "state_nan":
        bad = {**opt["state"][0], "exp_avg": torch.full_like(opt["state"][0]["exp_avg"], float("nan"))}
        return {"optimizer": {**opt, "state": {**opt["state"], 0: bad}}, "torch_rng": rng}
    if case == "step_negative":
        bad = {**opt["state"][0], "step": torch.tensor(-1.0)}
        return {"optimizer": {**opt, "state": {**opt["state"], 0: bad}}, "torch_rng": rng}
    raise AssertionError(case)


@pytest.mark.parametrize("case, message", [
    ("optimizer_int", "optimizer: expected a state dict (a mapping), got int"),
    ("no_groups", "optimizer: no parameter groups"),
    ("rng_float", "torch_rng: a torch.float32 tensor"),
    ("rng_short", "expected a torch.uint8 tensor of shape"),
    ("rng_garbage", "torch_rng: not a state of torch's generator"),
    ("extra_entry", "not 'payload'"),
    ("group_not_a_dict", "param_groups[0]: expected a mapping"),
    ("params_not_indices", "params: expected a list of parameter indices"),
    ("params_twice", "a parameter index listed twice"),
    ("lr_tensor", "lr: tensor([1., 2.]) is not a plain setting"),
    ("state_of_unlisted", "state of 10000, which no parameter group lists"),
    ("state_not_tensors", "state[0]['exp_avg']: expected a tensor, got int"),
    ("state_nan", "state[0]['exp_avg']: holds values that are not finite"),
    ("step_negative", "state[0]['step']: expected one count, 0 or more"),
])
def test_a_tampered_optimizer_file_of_tensors_is_refused_in_one_line(saved, tmp_path, case, message):
    """Plain tensors, so weights-only loading takes them: an int optimiser state was an AttributeError
    traceback, no parameter groups a ValueError, a float RNG state a TypeError, each at resume."""
    out = _copy(saved, tmp_path)
    path = out / "checkpoint" / OPTIM_FILE
    torch.save(_tamper(torch.load(path, weights_only=True), case), path)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(find_checkpoint(out))
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_raw_pickle_optimizer_file_is_refused_without_torchs_warning(saved, tmp_path):
    out = _copy(saved, tmp_path)
    with open(out / "checkpoint" / OPTIM_FILE, "wb") as f:
        pickle.dump({"optimizer": {}, "torch_rng": 1}, f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError, match=r"not a plain tensor file .*\(UnpicklingError: Unsupp"):
            load_checkpoint(find_checkpoint(out))
    assert not [str(w.message) for w in caught]


def _refit(saved_opt: dict, case: str) -> dict:
    group = saved_opt["param_groups"][0]
    if case == "one_param_less":
        return {**saved_opt, "param_groups": [{**group, "params": group["params"][:-1]}],
                "state": {k: v for k, v in saved_opt["state"].items() if k != group["params"][-1]}}
    if case == "two_groups":
        half = len(group["params"]) // 2
        return {**saved_opt, "param_groups": [{**group, "params": group["params"][:half]},
                                              {**group, "params": group["params"][half:]}]}
    if case == "state_shape":
        bad = {**saved_opt["state"][0], "exp_avg": torch.zeros(3, 3)}
        return {**saved_opt, "state": {**saved_opt["state"], 0: bad}}
    if case == "lr_string":
        return {**saved_opt, "param_groups": [{**group, "lr": "abc"}]}
    if case == "lr_negative":
        return {**saved_opt, "param_groups": [{**group, "lr": -1.0}]}
    if case == "betas_short":
        return {**saved_opt, "param_groups": [{**group, "betas": (0.9,)}]}
    if case == "amsgrad_int":
        return {**saved_opt, "param_groups": [{**group, "amsgrad": 1}]}
    if case == "unknown_setting":
        return {**saved_opt, "param_groups": [{**group, "momentum": 0.9}]}
    if case == "no_lr":
        return {**saved_opt, "param_groups": [{k: v for k, v in group.items() if k != "lr"}]}
    raise AssertionError(case)


@pytest.mark.parametrize("case, message", [
    ("one_param_less", "parameter group 0 holds"),
    ("two_groups", "2 parameter group(s), the optimiser has 1"),
    ("state_shape", "state[0]['exp_avg'] has shape (3, 3)"),
    ("lr_string", "lr: 'abc' is not valid"),
    ("lr_negative", "lr: -1.0 is out of range"),
    ("betas_short", "betas: (0.9,) is not valid"),
    ("amsgrad_int", "amsgrad: 1 is not valid"),
    ("unknown_setting", "unknown setting momentum"),
    ("no_lr", "lacks the setting lr"),
])
def test_an_optimizer_state_that_does_not_fit_is_refused_and_nothing_loaded(policy, saved, tmp_path, case,
                                                                             message):
    """Checked against the run's optimiser before it loads anything (torch raised a ValueError traceback
    for a group count or size, and took a string lr or a wrong-shaped moment until the first step)."""
    out = _copy(saved, tmp_path)
    path = out / "checkpoint" / OPTIM_FILE
    blob = torch.load(path, weights_only=True)
    torch.save({**blob, "optimizer": _refit(blob["optimizer"], case)}, path)
    restored = load_checkpoint(find_checkpoint(out))  # plain and well formed: only the optimiser can tell
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    with pytest.raises(CheckpointError) as e:
        restore_optimizer(opt, restored)
    assert message in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not opt.state and opt.param_groups[0]["lr"] == 1e-3


def test_a_whole_optimizer_state_is_restored(policy, saved):
    restored = load_checkpoint(find_checkpoint(saved))
    opt = torch.optim.AdamW(policy.parameters(), lr=5e-4)
    restore_optimizer(opt, restored)
    assert opt.param_groups[0]["lr"] == 1e-3 and len(opt.state) == len(list(policy.parameters()))


# ---- through guiagent train --resume: one line, exit 2, nothing written ---------------------------------

@pytest.mark.parametrize("damage, message", [
    ("no_complete", "checkpoint is not a whole checkpoint (COMPLETE is missing)"),
    ("optimizer_int", "optimizer: expected a state dict"),
    ("one_param_less", "does not fit this run's optimiser (parameter group 0 holds"),
])
def test_train_resume_refuses_a_damaged_checkpoint_and_changes_nothing(saved, tiny_model_dir, tmp_path,
                                                                       capsys, damage, message):
    from guiagent.cli.main import main

    out = _copy(saved, tmp_path)
    cfg = TrainConfig.build(model=tiny_model_dir, out=str(out), tasks=("open_app",), eval_episodes=0)
    save_config(out, cfg)
    mark_run(out)  # as a run marks its folder when it starts
    ck = out / "checkpoint"
    if damage == "no_complete":
        (ck / COMPLETE).unlink()
    else:
        blob = torch.load(ck / OPTIM_FILE, weights_only=True)
        blob = _tamper(blob, damage) if damage == "optimizer_int" else {**blob, "optimizer": _refit(
            blob["optimizer"], damage)}
        torch.save(blob, ck / OPTIM_FILE)
    before = _files(out)
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--iterations", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and message in err[-1] and not any("Traceback" in line for line in err), err
    assert _files(out) == before  # no store, no new checkpoint: the damaged one is kept as it was


@pytest.mark.parametrize("forged", [b"{}", b"not json", b'{"by": "someone else"}'])
def test_a_forged_run_marker_is_said_as_it_is(tmp_path, forged):
    """A folder whose run marker guiagent train did not write: the refusal said "no run marker" while one was
    there. Now it says the marker is not one a run wrote, and deletes nothing, with or without --overwrite."""
    from guiagent.config import ConfigError
    from rl.checkpoint import RUN_MARKER, check_out, clear_previous_run

    out = tmp_path / "run"
    (out / "base").mkdir(parents=True)
    (out / "base" / "mynotes.txt").write_text("mine")
    (out / RUN_MARKER).write_bytes(forged)
    for refuse in (lambda: check_out(str(out), resume=None, overwrite=True), lambda: clear_previous_run(out)):
        with pytest.raises(ConfigError) as got:
            refuse()
        said = str(got.value)
        assert f"its {RUN_MARKER} is not a run marker guiagent train wrote" in said and "no run marker" not in said
        assert "holds base, which no guiagent training run wrote" in said
    assert (out / "base" / "mynotes.txt").read_text() == "mine" and (out / RUN_MARKER).read_bytes() == forged
    (out / RUN_MARKER).unlink()
    with pytest.raises(ConfigError, match=f"no run marker {RUN_MARKER}, nor a config.yaml"):
        clear_previous_run(out)
