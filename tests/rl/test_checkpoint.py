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


# ---- checkpoints sized for real models: what training changes, each weight file written once a version -------

_PARTS = ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json", "chat_template.jinja")


def _learner(tiny_model_dir, out, lora_rank):
    from rl.learner import Learner

    cfg = TrainConfig.build(model=tiny_model_dir, out=str(out), lora_rank=lora_rank, precision="fp32", lr=1e-2)
    return cfg, Learner(cfg, out, TrainerState(run_id="r", model_dir=tiny_model_dir), tiny_model_dir)


def _step(learner, ids) -> float:
    """One optimiser step on a fixed text batch; the loss before it."""
    policy = learner.policy
    loss = policy.model(input_ids=ids, labels=ids).loss
    loss.backward()
    learner.opt.step()
    learner.opt.zero_grad()
    policy.mark_updated()
    return float(loss.detach())


def _files(folder):
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_a_checkpoint_holds_what_training_changes_and_a_resume_takes_the_same_next_steps(tiny_model_dir, tmp_path,
                                                                                        lora_rank):
    """A LoRA checkpoint held the merged weights, the adapter, the tokenizer, the processor and the chat
    template; now the adapter alone (a full one its weights, no tokenizer): the rest is the starting model's,
    which a resume loads it from. The resumed learner (rl.learner.Learner, as --resume builds it) takes the
    next steps with the same losses, to the bit, as the one that went on."""
    from rl.learner import Learner

    torch.manual_seed(0)
    ids = torch.randint(3, 300, (2, 12))
    out = tmp_path / "run"
    out.mkdir()
    cfg, a = _learner(tiny_model_dir, out, lora_rank)
    _step(a, ids)
    state = TrainerState(iteration=1, run_id="r", model_dir=tiny_model_dir)
    save_checkpoint(out, a.policy, a.opt, state)
    ckpt = find_checkpoint(out)
    files = _files(ckpt)
    assert not any(p in files for p in _PARTS), files
    if lora_rank:
        assert not [f for f in files if f.endswith(".safetensors") and not f.startswith("lora_adapter/")], files
        assert {"lora_adapter/adapter_model.safetensors", "lora_adapter/adapter_config.json"} <= files
        weights = sum(t.numel() * t.element_size() for t in a.policy.state_dict().values())
        adapter = (ckpt / "lora_adapter" / "adapter_model.safetensors").stat().st_size
        assert adapter < weights / 10
    else:
        assert "model.safetensors" in files and "config.json" in files
    went_on = [_step(a, ids) for _ in range(2)]
    b = Learner(cfg, out, state, str(ckpt), restored=load_checkpoint(ckpt))
    # an async run's rollout copy: the starting model with the resumed learner's weights
    from rl.engine import RolloutEngine

    copy = RolloutEngine(TrainConfig.build(model=tiny_model_dir, rollout="async"), b.policy, str(ckpt),
                         engine_dir=tiny_model_dir).policy
    merged, copied = b.policy.state_dict(), copy.state_dict()
    assert copy is not b.policy and all(torch.equal(merged[k], copied[k]) for k in merged)
    assert [_step(b, ids) for _ in range(2)] == went_on
    assert b.policy.encoder.chat_template == a.policy.encoder.chat_template  # the starting model's parts


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_weights_are_written_once_a_version_and_linked_where_another_folder_holds_them(tiny_model_dir, tmp_path,
                                                                                       lora_rank):
    """model-best/, the iteration's checkpoint and at the end model/ each held the weights in full; a folder
    saved at the policy's version another folder of the run holds already links those files (one inode),
    model/ and model-best/ still load alone, and a later version is written afresh beside the earlier."""
    from guiagent.policy.hf import load_transformers as load
    from rl.agents import AgentSettings

    out = tmp_path / "run"
    out.mkdir()
    _, learner = _learner(tiny_model_dir, out, lora_rank)
    ids = torch.randint(3, 300, (2, 12), generator=torch.Generator().manual_seed(1))
    _step(learner, ids)
    state = TrainerState(iteration=1, run_id="r", model_dir=tiny_model_dir)
    learner.keep_best(0.5, 1, AgentSettings())  # an evaluation, then the iteration's checkpoint
    save_checkpoint(out, learner.policy, learner.opt, state)
    learner.save_model(out / "model", AgentSettings())  # finish: the final model
    best, ckpt, final = out / "model-best", out / "checkpoint", out / "model"
    inode = lambda p: p.stat().st_ino  # noqa: E731
    shared = "lora_adapter/adapter_model.safetensors" if lora_rank else "model.safetensors"
    assert inode(best / shared) == inode(ckpt / shared) == inode(final / shared)
    assert inode(best / "model.safetensors") == inode(final / "model.safetensors")  # merged, for LoRA
    assert inode(best / "tokenizer.json") == inode(final / "tokenizer.json")
    now = {k: v.detach().clone() for k, v in learner.policy.state_dict().items()}
    for folder in (best, final):  # each a whole model: what guiagent eval --model loads
        assert (folder / "guiagent_agent.json").is_file()
        got = load(str(folder)).state_dict()
        assert all(torch.equal(got[k], now[k]) for k in now)
    _step(learner, ids)  # the next iteration: new weights, written; the earlier files keep theirs
    save_checkpoint(out, learner.policy, learner.opt, TrainerState(iteration=2, run_id="r", model_dir=tiny_model_dir))
    assert inode(ckpt / shared) != inode(best / shared)
    learner.save_model(out / "model", AgentSettings())
    assert inode(final / "tokenizer.json") == inode(best / "tokenizer.json")  # the parts never change: linked
    assert inode(final / "model.safetensors") != inode(best / "model.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(load(str(best)).state_dict().values(), now.values()))
    assert not (out / "model.tmp").exists() and not (out / "model-best.tmp").exists()


@pytest.mark.slow  # ~20-40 s: three offline AWR runs of a LoRA policy (no browser)
def test_a_lora_run_resumed_from_its_adapter_gives_the_uninterrupted_runs_next_iteration(tiny_model_dir, tmp_path):
    """Through the trainer: a LoRA run stopped after one iteration and resumed (its checkpoint the adapter
    alone) trains its second iteration with the loss the uninterrupted run had there; the finished run's
    model/ is the merged model, written once, its adapter the last checkpoint's file."""
    from guiagent.policy.hf import load_transformers as load
    from rl.trainer import train
    from tests.rl.test_algos import _demo_store

    demos = tmp_path / "demos"
    _demo_store(demos, 3)

    def cfg(out, iterations):
        return TrainConfig.build(model=tiny_model_dir, algo="awr", tasks=("settings_dark_theme",),
                                 iterations=iterations, offline_iterations=2, data=(str(demos),), eval_episodes=0,
                                 max_new_tokens=8, out=str(out), replay_episodes=2, seed=1, lora_rank=4, lr=1e-2)

    whole = train(cfg(tmp_path / "whole", 2))
    train(cfg(tmp_path / "cut", 1))
    ckpt = tmp_path / "cut" / "checkpoint"
    assert not (ckpt / "model.safetensors").exists() and (ckpt / "lora_adapter" / "adapter_model.safetensors").is_file()
    resumed = train(TrainConfig.build(resume=str(tmp_path / "cut"), iterations=2))
    assert resumed.iterations == whole.iterations == 2
    assert resumed.last["loss"] == whole.last["loss"] and resumed.last["optimizer_steps"] >= 1
    final = tmp_path / "cut" / "model"
    assert (final / "lora_adapter" / "adapter_model.safetensors").stat().st_ino == \
        (ckpt / "lora_adapter" / "adapter_model.safetensors").stat().st_ino
    a, b = load(str(final)).state_dict(), load(whole.model).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
