"""The trainer: an update changes parameters with finite losses; a killed run resumes."""

import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from emulators.pool import InProcessPool
from guiagent.store import EpisodeFilter, StoreReader
from rl.agents import load_agent
from rl.rollout import make_groups, run_rollout
from rl.strategies import make_strategy
from rl.config import TrainConfig
from rl.update import update

pytestmark = pytest.mark.browser


def test_update_changes_parameters_with_finite_loss(tiny_model_dir):
    agent = load_agent(tiny_model_dir, temperature=1.0, max_new_tokens=10, keep_chats=True)
    policy = agent.backend
    pool = InProcessPool("webapps", num_slots=2)
    try:
        res = run_rollout(pool, agent, make_groups(["open_app"], [1], group_size=2, max_steps=2))
    finally:
        pool.close()
    turns = res.turns
    assert len(turns) >= 2
    adv = torch.tensor([1.0 if i % 2 else -1.0 for i in range(len(turns))])
    before = [p.detach().clone() for p in policy.parameters()]
    cfg = TrainConfig.build(micro_batch_size=1, lr=1e-3)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.update.lr)
    v0 = policy.version
    stats = update(make_strategy(cfg, ".", None), cfg.update, policy, None, opt, turns, adv)
    assert math.isfinite(stats["loss"]) and math.isfinite(stats["grad_norm"]) and stats["grad_norm"] > 0
    changed = sum(not torch.equal(a, b.detach()) for a, b in zip(before, policy.parameters()))
    assert changed > 0 and policy.version == v0 + 1
    # on-policy: the first epoch's ratios are 1, so nothing was clipped
    assert stats["clip_frac"] == 0.0
    assert stats["optimizer_steps"] == 1
    # mini-batches: one optimiser step per mini-batch and epoch, one new policy version in all
    cfg2 = TrainConfig.build(micro_batch_size=1, mini_batch_size=1, epochs=2, lr=1e-3)
    stats2 = update(make_strategy(cfg2, ".", None), cfg2.update, policy, None, opt, turns, adv)
    assert stats2["optimizer_steps"] == 2 * len(turns) and policy.version == v0 + 2
    assert math.isfinite(stats2["loss"]) and math.isfinite(stats2["grad_norm"])
    # trust region: the behaviour policy is now two updates old, so the first mini-batch is
    # already outside a tiny KL bound; nothing is stepped and the version stays
    cfg3 = TrainConfig.build(micro_batch_size=1, mini_batch_size=1, epochs=3, lr=1e-3, max_kl_old=1e-9)
    stats3 = update(make_strategy(cfg3, ".", None), cfg3.update, policy, None, opt, turns, adv)
    assert stats3["early_stopped"] == 1.0 and stats3["optimizer_steps"] == 0 and policy.version == v0 + 2
    # what a loss does not compute is not reported: AWR's weighted regression has no ratio to clip, and
    # without a reference there is no KL (a chart of flat zeros would read as a measurement)
    cfg4 = TrainConfig.build(algo="awr", micro_batch_size=1, lr=1e-3)
    stats4 = update(make_strategy(cfg4, ".", None), cfg4.update, policy, None, opt, turns, adv.abs())
    assert stats4["optimizer_steps"] == 1 and math.isfinite(stats4["loss"])
    assert not {"clip_frac", "approx_kl_old", "kl"} & set(stats4), sorted(stats4)
    assert "clip_frac" in stats and "approx_kl_old" in stats


def test_compute_advantages_filters_zero_variance_groups(tiny_model_dir):
    from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
    from rl.rollout import RolloutResult, TrainTurn

    obs = Observation(b"x", 2, 2)
    spec = TaskSpec("webapps", "t", 0, "g")

    def traj(eid, gid, r):
        return Trajectory(eid, spec, (Step(0, obs, Click(0.5, 0.5), reward=r),), group_id=gid)

    trajs = [traj("a", "g1", 1.0), traj("b", "g1", 0.0), traj("c", "g2", 0.5), traj("d", "g2", 0.5)]
    turns = [TrainTurn(t.group_id, t.episode_id, 0, None, (1,), (-0.1,), 0, True) for t in trajs]
    res = RolloutResult(trajectories=trajs, turns=turns)
    kept, adv, stats = make_strategy(TrainConfig.build(algo="dr_grpo"), ".", None).batch(res, None, 0)
    assert [u.episode_id for u in kept] == ["a", "b"]
    assert adv.tolist() == pytest.approx([0.5, -0.5])
    assert {k: v for k, v in stats.items() if k.startswith("groups")} == {"groups_kept": 1.0, "groups": 2.0,
                                                                         "groups_equal": 1.0, "groups_short": 0.0}


def test_aborted_episodes_are_reported_as_aborted_not_as_equal_rewards():
    from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
    from rl.metrics import no_update_reason, rollout_metrics
    from rl.rollout import RolloutResult, TrainTurn

    obs, spec = Observation(b"x", 2, 2), TaskSpec("androidworld", "t", 0, "g")

    def traj(eid, gid, r, status="completed"):
        steps = (Step(0, obs, Click(0.5, 0.5), reward=r),) if status == "completed" else ()
        return Trajectory(eid, spec, steps, status=status, group_id=gid,
                          abort_reason=None if status == "completed" else "device error: grpc: DEADLINE_EXCEEDED")

    # g1: one completed + one aborted; g2: both aborted; g3: two completed with equal rewards
    trajs = [traj("a", "g1", 1.0), traj("b", "g1", 0, "aborted"), traj("c", "g2", 0, "aborted"),
             traj("d", "g2", 0, "aborted"), traj("e", "g3", 0.0), traj("f", "g3", 0.0)]
    turns = [TrainTurn(t.group_id, t.episode_id, 0, None, (1,), (-0.1,), 0, True) for t in trajs if t.steps]
    res = RolloutResult(trajectories=trajs, turns=turns, aborted=3)
    kept, _, stats = make_strategy(TrainConfig(), ".", None).batch(res, None, 0)
    assert kept == [] and stats["groups_short"] == 2.0 and stats["groups_equal"] == 1.0
    m = {**rollout_metrics(res), **stats}
    assert m["aborted"] == 3.0
    assert no_update_reason(m) == ("3 episode(s) aborted, leaving 2 group(s) with fewer than 2 completed episodes; "
                                   "1 group(s) got equal rewards")
    only_aborted = RolloutResult(trajectories=trajs[1:4], aborted=3)
    _, _, stats = make_strategy(TrainConfig(), ".", None).batch(only_aborted, None, 0)
    reason = no_update_reason({**rollout_metrics(only_aborted), **stats})
    assert reason == "3 episode(s) aborted, leaving 2 group(s) with fewer than 2 completed episodes"
    assert "equal" not in reason
    assert no_update_reason({"aborted": 0.0, "groups": 0.0}) == "no completed episode"
    assert no_update_reason({"critic_warmup": 1.0, "explained_variance": 0.27, "groups_equal": 2.0}) == (
        "critic warm-up, the actor waits (explained variance 0.27)")


def _train_cmd(out, *extra):
    return [sys.executable, "-m", "guiagent", "train", "--out", str(out), *extra]


@pytest.mark.slow  # ~15 s; a kill at each moment of a save: tests/rl/test_checkpoint_hostile.py (the suite's 12-minute budget)
def test_killed_run_resumes_from_checkpoint(tiny_model_dir, tmp_path):
    """Killed at the worst moment: between moving the old checkpoint away and the new one in."""
    out = tmp_path / "run"
    args = ["--model", tiny_model_dir, "--tasks", "go_home", "open_app", "--groups-per-iteration", "1",
            "--group-size", "2", "--slots", "2", "--max-new-tokens", "8", "--pool", "inprocess",
            "--eval-episodes", "0",
            "--iterations", "3", "--seed", "3"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(_train_cmd(out, *args), env={**env, "GUIAGENT_FAULT": "checkpoint_swap"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    assert proc.wait(timeout=300) == -signal.SIGKILL  # killed itself at the second checkpoint's swap
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # its browser
    assert not (out / "checkpoint").exists() and (out / "checkpoint.old").is_dir()
    r = subprocess.run(_train_cmd(out, "--resume", str(out), "--iterations", "3", "--json"), env=env,
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["iterations"] == 3
    # one progress display: the iteration lines, without transformers' bars at every load and checkpoint
    assert "[3/3]" in r.stderr and "Loading weights" not in r.stderr and "Writing model shards" not in r.stderr
    reader = StoreReader(out)
    [run] = reader.list_runs()
    assert run.status == "finished"
    curves = reader.metrics(run.run_id)
    assert [m.iteration for m in curves["success_rate"]] == [0, 1, 2]
    assert all(math.isfinite(m.value) for m in curves["reward_mean"])
    # the same config was used: the saved one, with only the iteration target changed
    assert "seed: 3" in (out / "config.yaml").read_text()
    # nothing half-written is visible; aborted leftovers of the killed run are marked
    n = reader.count_episodes(EpisodeFilter(run_id=run.run_id))
    assert n >= 6
    assert (Path(result["model"]) / "guiagent_agent.json").is_file()


@pytest.mark.slow  # ~12-13 s; AdaptiveKL has a unit test and sampling rounds run in the semi-online
# trainer tests of the default suite
def test_dynamic_sampling_rounds_and_adaptive_kl_coefficient(tiny_model_dir, tmp_path):
    from rl.trainer import train

    out = tmp_path / "run"
    # an untrained model never reaches 99 informative groups: every iteration samples the
    # most rounds, each with --groups-per-iteration fresh groups
    # (equal-reward groups are kept here, so the update runs and the adaptive KL β moves: the
    # policy starts at the reference, KL 0 < target, so β shrinks)
    result = train(TrainConfig.build(model=tiny_model_dir, tasks=("go_home",), iterations=1, groups_per_iteration=1,
                               group_size=2, slots=2, pool="inprocess", max_new_tokens=8, eval_episodes=0,
                               min_informative_groups=99, max_sampling_rounds=2, filter_zero_variance=False,
                               kl_coef=0.05, kl_target=0.01, kl_horizon=10, out=str(out), seed=2,
                               log_to=("tensorboard",)))
    assert list((out / "tensorboard").rglob("events.out.tfevents*"))  # --log-to: the same metrics in TensorBoard
    assert result.last["groups"] == 2.0
    assert result.last["kl_coef"] == 0.05 and result.last["kl"] == pytest.approx(0.0, abs=1e-6)
    beta = json.loads((out / "checkpoint" / "trainer_state.json").read_text())["state"]["kl_coef"]
    assert 0.0 < beta < 0.05
    reader = StoreReader(out)
    [run] = reader.list_runs()
    eps = reader.list_episodes(EpisodeFilter(run_id=run.run_id), limit=50).items
    assert len(eps) == 4 and len({e.group_id for e in eps}) == 2


def test_rollout_results_merge_and_count_informative_groups():
    from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
    from rl.rollout import RolloutResult

    obs = Observation(b"x", 2, 2)

    def res(*rows):
        trajs = [Trajectory(f"{g}{i}", TaskSpec("webapps", "t", 0, "g"), (Step(0, obs, Click(0.5, 0.5), reward=r),),
                            group_id=g) for i, (g, r) in enumerate(rows)]
        return RolloutResult(trajectories=trajs, env_steps=len(rows), wall_seconds=1.0)

    a = res(("g1", 1.0), ("g1", 1.0))
    assert a.informative_groups() == 0
    a.extend(res(("g2", 0.0), ("g2", 1.0), ("g3", 0.0), ("g3", 0.0)))
    assert a.informative_groups() == 1
    assert len(a.trajectories) == 6 and a.env_steps == 6 and a.wall_seconds == 2.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(group_size=1), "group-size"), (dict(eval_every=-1), "eval-every"), (dict(mini_batch_size=-1), "mini-batch"),
    (dict(max_sampling_rounds=0), "sampling-rounds"), (dict(kl_target=0.01), "kl-coef"),
    (dict(max_kl_old=-1.0), "max-kl-old"), (dict(clip_eps_low=0.0), "clip"),
    (dict(resample_unparseable=-1), "resample-unparseable must be >= 0"),
    (dict(action_format="qwen"), "action-format 'qwen': choose auto or one of"),
])
def test_train_config_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig.build(**kwargs)


def test_action_format_switches_the_format_and_keeps_the_history():
    from rl.agents import AgentSettings

    saved = AgentSettings(history_images=2, max_history=5, system_prompt="Reply in compact JSON.")
    assert saved.in_format("auto") is saved and saved.in_format("json") is saved
    qwen = saved.in_format("qwen_mobile")
    assert (qwen.action_format, qwen.history_images, qwen.max_history, qwen.system_prompt) == ("qwen_mobile", 2, 5, None)
    assert "mobile_use" in qwen.format().system_prompt()


def _tiny_cfg(tiny_model_dir, out, **kw):
    base = dict(model=tiny_model_dir, tasks=("go_home",), iterations=1, groups_per_iteration=1, group_size=2,
                slots=2, pool="inprocess", max_new_tokens=8, eval_episodes=0, filter_zero_variance=False,
                out=str(out), seed=1)
    return TrainConfig.build(**{**base, **kw})


@pytest.mark.slow  # ~11-14 s: kept out of the default suite's 12-minute budget
def test_kl_reference_stays_the_starting_policy_across_resumes(tiny_model_dir, tmp_path):
    from guiagent.policy.hf import load_transformers
    from rl.trainer import Trainer, train

    out = tmp_path / "run"
    cfg = _tiny_cfg(tiny_model_dir, out, kl_coef=0.05)
    train(cfg)
    start = load_transformers(tiny_model_dir).state_dict()
    for target in (2,):  # a resume (the reference path is read from the checkpoint each time)
        t = Trainer(dataclasses.replace(cfg, resume=str(out), iterations=target))
        result = t.run()
        assert result.iterations == target and t.state.model_dir == tiny_model_dir
        ref, now = t.learner.ref.state_dict(), t.policy.state_dict()
        assert all(torch.equal(ref[k], start[k]) for k in start)  # the reference is the start, not the checkpoint
        assert any(not torch.equal(now[k], start[k]) for k in start)
        assert "kl" in t.history[-1] and t.history[-1]["kl_coef"] == 0.05  # the KL term ran against it


def _weights(path):
    from guiagent.policy.hf import load_transformers

    return load_transformers(str(path)).state_dict()


@pytest.mark.slow  # ~11-14 s: kept out of the default suite's 12-minute budget
def test_one_seed_gives_one_run_and_two_seeds_two(tiny_model_dir, tmp_path):
    from rl.trainer import train

    timing = ("seconds", "per_s")

    def run(name, seed):
        r = train(_tiny_cfg(tiny_model_dir, tmp_path / name, seed=seed, temperature=1.0))
        return {k: v for k, v in r.last.items() if not any(t in k for t in timing)}, _weights(r.model)

    (m1, w1), (m2, w2), (m3, w3) = run("a", 4), run("b", 4), run("c", 5)
    assert m1 == m2 and all(torch.equal(w1[k], w2[k]) for k in w1)
    assert m1 != m3 or any(not torch.equal(w1[k], w3[k]) for k in w1)


def test_stability_guards_trip_and_raise_alarms():
    from rl.metrics import guard_tripped

    g = TrainConfig.build(max_parse_error_rate=0.2, max_kl_ref=0.1, min_entropy=0.5, kl_coef=0.1).guards
    m = {"parse_error_rate": 0.1, "kl": 0.05, "entropy": 0.2}
    assert guard_tripped(g, m) is None and m["alarm/entropy"] == 1.0
    m = {"parse_error_rate": 0.3, "kl": 0.05}
    assert "parse-error rate" in guard_tripped(g, m) and m["alarm/parse_error_rate"] == 1.0
    m = {"parse_error_rate": 0.0, "kl": 0.5}
    assert "KL to the reference" in guard_tripped(g, m)
    assert guard_tripped(TrainConfig().guards, {"parse_error_rate": 1.0, "kl": 9.0, "entropy": 0.0}) is None


@pytest.mark.slow  # ~16 s; the guard's rule stays checked in tests/rl/test_losses.py (the suite's 12-minute budget)
def test_a_tripped_guard_rolls_back_and_the_best_model_is_kept(tiny_model_dir, tmp_path):
    from rl.trainer import train

    out = tmp_path / "run"
    # every reply of an untrained model fails to parse: the parse-error guard trips each iteration
    r = train(_tiny_cfg(tiny_model_dir, out, iterations=2, eval_every=1, eval_episodes=1,
                        max_parse_error_rate=0.01, lr=1e-2))
    start = _weights(tiny_model_dir)
    final = _weights(r.model)
    assert all(torch.equal(final[k], start[k]) for k in start)  # every update was rolled back
    curves = StoreReader(out).metrics(r.run_id)
    assert [m.value for m in curves["guard/rollback"]] == [1.0, 1.0]
    assert r.best_model == str(out / "model-best") and (out / "model-best" / "guiagent_agent.json").is_file()
    # the untrained start (0%) is the first candidate; later evaluations tie and ties keep the earlier
    assert r.best_iteration == 0 and r.best_success == 0.0 and r.eval_curve.keys() == {"1"}
    assert r.task_success_before == r.task_success_after == {"go_home": 0.0}  # held-out success per task
    best = _weights(r.best_model)
    assert all(torch.equal(best[k], start[k]) for k in start)


@pytest.mark.slow  # ~1-5 min on 2 cores: two trainer runs of a LoRA policy
def test_lora_bf16_mixed_run_trains_adapters_and_resumes(tiny_model_dir, tmp_path):
    from rl.trainer import Trainer, train

    out = tmp_path / "run"
    cfg = _tiny_cfg(tiny_model_dir, out, lora_rank=4, precision="bf16-mixed", kl_coef=0.05, lr=1e-2)
    r = train(cfg)
    assert (out / "checkpoint" / "lora_adapter").is_dir() and r.last["optimizer_steps"] >= 1
    t = Trainer(dataclasses.replace(cfg, resume=str(out), iterations=2))
    r2 = t.run()
    assert r2.iterations == 2 and t.policy.lora is not None
    assert "kl" in t.history[-1]  # the reference: the same model with its adapters off
    start, final = _weights(tiny_model_dir), _weights(r2.model)
    assert any(not torch.equal(final[k], start[k]) for k in start)  # merged adapters changed the weights


@pytest.mark.slow  # ~10 s; the guard's rollback runs in the default suite on a full model
def test_a_lora_runs_guard_rolls_back_its_adapters(tiny_model_dir, tmp_path):
    """Rollback is the default guard action; in a LoRA run it loaded merged weights into the LoRA policy
    (ValueError: a LoRA policy loads its own state_dict). It restores the adapters: fresh ones before the
    first checkpoint (the start), the checkpoint's after."""
    from rl.trainer import Trainer

    out = tmp_path / "run"
    t = Trainer(_tiny_cfg(tiny_model_dir, out, iterations=2, lora_rank=4, max_parse_error_rate=0.01, lr=1e-2))
    r = t.run()  # every reply of the untrained model fails to parse: the guard trips at both iterations
    assert [m.value for m in StoreReader(out).metrics(r.run_id)["guard/rollback"]] == [1.0, 1.0]
    start, final = _weights(tiny_model_dir), _weights(r.model)
    assert all(torch.equal(final[k], start[k]) for k in start)
    adapters = {n: p for n, p in t.policy.model.named_parameters() if "lora_" in n}
    assert adapters and all(p.requires_grad for p in adapters.values())
    kept = {n: p.detach().clone() for n, p in adapters.items()}  # as in the last checkpoint
    with torch.no_grad():
        for p in adapters.values():
            p.add_(0.5)  # an update that went wrong
    t.learner.rollback("test")
    assert all(torch.equal(p, kept[n]) for n, p in t.policy.model.named_parameters() if "lora_" in n)


def test_a_new_run_over_an_earlier_one_needs_overwrite_which_deletes_only_what_a_run_wrote(tiny_model_dir, tmp_path):
    """train --out over an existing run (no --resume) replaced its config, summary, model and checkpoint.
    Now it is refused, nothing touched; --overwrite deletes what the earlier run wrote (not the store,
    whose episodes stay as an earlier run, nor a file of the user's) and starts a new run."""
    from guiagent.config import ConfigError
    from guiagent.store import Store
    from rl.checkpoint import save_config
    from rl.trainer import train

    out = tmp_path / "run"  # an earlier run, as it lies on disk: its store, config, checkpoint, models
    with Store.open(out) as store:
        earlier = store.create_run("earlier")
    save_config(out, _tiny_cfg(tiny_model_dir, out))
    for name in ("checkpoint", "model", "model-best", "eval-before"):
        (out / name).mkdir()
        (out / name / "weights").write_text(name)
    (out / "summary.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and "store.sqlite" not in p.name}
    with pytest.raises(ConfigError, match="holds a training run: continue it with --resume"):
        train(_tiny_cfg(tiny_model_dir, out, seed=2))
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and "store.sqlite" not in p.name} == before
    second = train(_tiny_cfg(tiny_model_dir, out, seed=2, overwrite=True, iterations=0))
    assert (out / "notes.txt").read_text() == "mine"
    assert not (out / "model-best").exists() and not (out / "eval-before").exists()  # the earlier run's, gone
    assert "seed: 2" in (out / "config.yaml").read_text() and not (out / "model" / "weights").exists()
    assert not (out / "checkpoint").exists() and second.run_id != earlier  # 0 iterations: no checkpoint yet
    assert {r.run_id for r in StoreReader(out).list_runs()} == {earlier, second.run_id}


def test_a_run_of_no_iterations_evaluates_its_model_once(tiny_model_dir, tmp_path, caplog):
    """--iterations 0 (a warm start alone): the model after is the model before, so the held-out episodes are
    not played again; the figures after are the ones before, per task too."""
    from rl.trainer import train

    out = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="rl.trainer"):
        r = train(_tiny_cfg(tiny_model_dir, out, iterations=0, eval_episodes=2))
    assert (out / "eval-before").is_dir() and not (out / "eval-after").exists()
    assert r.iterations == 0 and r.success_after == r.success_before
    assert r.task_success_after == r.task_success_before == {"go_home": r.success_before}
    assert "eval after" not in r.phase_seconds and "not evaluated again" in caplog.text


def test_overwrite_replaces_a_real_earlier_run_and_only_what_it_wrote(tiny_model_dir, tmp_path, capsys):
    """A real earlier run (it marks its folder as it starts), started again with `guiagent train --overwrite`:
    its outputs are replaced; the user's files beside them stay, an eval-* folder of the user's too (every
    eval-* folder was deleted)."""
    from guiagent.cli.main import main
    from rl.checkpoint import RUN_MARKER
    from rl.trainer import train

    out = tmp_path / "run"
    first = train(_tiny_cfg(tiny_model_dir, out, iterations=0))
    assert (out / RUN_MARKER).is_file()
    (out / "notes.txt").write_text("mine")
    (out / "eval-mine").mkdir()
    (out / "eval-mine" / "results.csv").write_text("mine too")
    capsys.readouterr()
    argv = ["train", "--overwrite", "--model", tiny_model_dir, "--tasks", "go_home", "--iterations", "0",
            "--eval-episodes", "0", "--seed", "2", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    assert "deleted the earlier run's" in capsys.readouterr().err
    assert (out / "model" / "config.json").is_file()  # a file of the user's inside model/: refused (test_trainer_lifecycle.py)
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "eval-mine" / "results.csv").read_text() == "mine too"
    assert "seed: 2" in (out / "config.yaml").read_text() and (out / RUN_MARKER).is_file()
    assert len({r.run_id for r in StoreReader(out).list_runs()} - {first.run_id}) == 1


def test_a_browser_that_cannot_start_fails_the_training_run(tiny_model_dir, tmp_path):
    """Every slot failing to launch its browser: the run trained "2 iterations" on nothing and exited 0;
    now the first iteration raises NoEpisodeStarted (one line) and the stored run is `failed`."""
    import shutil

    from rl.evaluate import NoEpisodeStarted
    from rl.trainer import train

    out = tmp_path / "run"
    with pytest.raises(NoEpisodeStarted, match=r"^no episode could start: all 2 failed at their reset \("):
        train(_tiny_cfg(tiny_model_dir, out, iterations=2, device={"chromium_path": shutil.which("true")}))
    [run] = StoreReader(out).list_runs()
    assert run.status == "failed"
    assert not (out / "checkpoint").exists()


@pytest.mark.slow  # ~10 s; the signal path stays checked on eval by default: tests/guiagent/test_eval_cli.py (the suite's 12-minute budget)
def test_ctrl_c_stores_the_training_run_as_interrupted(tiny_model_dir, tmp_path):
    """SIGINT during training: exit 130 and the stored run `interrupted` (resumable), not `failed`."""
    import time

    out = tmp_path / "run"
    args = ["--model", tiny_model_dir, "--tasks", "go_home", "--groups-per-iteration", "1", "--group-size",
            "2", "--slots", "2", "--max-new-tokens", "8", "--pool", "inprocess", "--eval-episodes", "0",
            "--iterations", "200"]
    # SIGINT as a terminal delivers it, whatever the test runner's own disposition (a job started in the
    # background of a non-interactive shell ignores SIGINT, and a child would inherit that)
    proc = subprocess.Popen(_train_cmd(out, *args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not (out / "checkpoint").is_dir():
            time.sleep(0.3)
        assert (out / "checkpoint").is_dir(), "no iteration in 120 s"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 130
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its browser
        proc.wait(10)
    assert proc.stderr.read().strip().splitlines()[-1] == "guiagent train: interrupted"
    [run] = StoreReader(out).list_runs()
    assert run.status == "interrupted"


@pytest.fixture(scope="module")
def warm_started_run(tmp_path_factory):
    """A run with no --model (a warm start: a tiny model, oracle demonstrations, SFT), staged (the
    demonstrations replayed first), with reward weights of its own; stopped after its set-up."""
    from rl.trainer import train

    out = tmp_path_factory.mktemp("warm") / "run"
    cfg = TrainConfig.build(tasks=("open_app",), warm_start_demos=2, warm_start_steps=1, iterations=0,
                            eval_episodes=0, pool="inprocess", slots=1, max_new_tokens=8, out=str(out), seed=0,
                            rewards={"task": 3.0, "step_penalty": -0.01})
    assert cfg.mode == "staged" and not cfg.data
    train(cfg)
    return cfg, out


@pytest.mark.slow  # ~20 s with the next test (one warm start for both: a tiny model, demonstrations, SFT)
@pytest.mark.browser
def test_the_warm_starts_demonstrations_are_rewarded_as_the_runs_own_episodes(warm_started_run):
    """--rewards.* weigh the warm start's demonstrations too: a learner reading them back (AWR's replay
    buffer, a staged run's replays) finds them on the scale of the run's online episodes."""
    from guiagent.rewards import combine

    cfg, out = warm_started_run
    reader = StoreReader(out / "demos")
    eps = reader.list_episodes(EpisodeFilter(status="completed"), limit=10).items
    assert len(eps) == 2 and all(e.success == 1.0 for e in eps)
    for e in eps:
        steps = reader.get_episode(e.episode_id).steps
        assert [s.reward for s in steps] == pytest.approx([combine(s.reward_parts, cfg.rewards) for s in steps])
        assert e.total_reward == pytest.approx(3.0 - 0.01 * len(steps))  # the task's weight 3, a step's -0.01


@pytest.mark.slow  # the warm start above (~20 s)
@pytest.mark.browser
def test_the_saved_config_is_the_stores_config(warm_started_run):
    """A staged run without --data replays the warm start's demonstrations: config.yaml says so, as the
    store's record of the run does (one config, written once the run's data is known)."""
    from guiagent.config import load_yaml, read_yaml, to_mapping

    cfg, out = warm_started_run
    [run] = StoreReader(out).list_runs()
    saved = read_yaml(out / "config.yaml")
    assert saved["data"] == [str(out / "demos")] == run.config["data"]
    assert saved == run.config
    assert to_mapping(load_yaml(TrainConfig, out / "config.yaml")) == run.config
