"""Semi-online and mixed training in the one trainer, and semi-online evaluation (SOP)."""

import json

import pytest

from guiagent.store import EpisodeFilter, StoreReader
from rl.config import TrainConfig
from rl.evaluate import EvalConfig, run_eval

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos")
    run_eval(EvalConfig(env="webapps", agent="oracle", episodes=2, tasks=("open_app", "settings_turn_on"), seed=0,
                        out=str(out)))
    return str(out)


@pytest.mark.slow  # ~10 s (the suite's 12-minute budget)
def test_mixed_mode_interleaves_semi_online_and_online_iterations(tiny_model_dir, demos, tmp_path):
    from rl.trainer import train

    out = tmp_path / "run"
    r = train(TrainConfig.build(model=tiny_model_dir, mode="mixed", data=(demos,), tasks=("open_app", "settings_turn_on"),
                          iterations=2, groups_per_iteration=1, group_size=2, slots=2, pool="inprocess",
                          max_new_tokens=8, eval_episodes=0, filter_zero_variance=False, out=str(out), seed=1))
    reader = StoreReader(out)
    curves = reader.metrics(r.run_id)
    assert [m.iteration for m in curves["semi_online"]] == [0]  # iteration 0 semi-online, 1 online
    assert [m.iteration for m in curves["success_rate"]] == [0, 1]
    assert 0.0 <= curves["semi/match_rate"][0].value <= 1.0
    eps = reader.list_episodes(EpisodeFilter(run_id=r.run_id), limit=20).items
    semi = [e for e in eps if e.metadata.get("mode") == "semi-online"]
    assert len(semi) == 2 and len(eps) == 4  # G=2 replays of one recorded episode, then 2 live episodes
    steps = reader.get_episode(semi[0].episode_id).steps
    assert "recorded_action" in steps[0].metadata and "matched" in steps[0].metadata
    assert r.last.get("optimizer_steps", 0) >= 1


def test_semi_online_needs_data_and_says_so(tmp_path):
    with pytest.raises(ValueError, match="--data"):
        TrainConfig.build(mode="semi-online")
    from rl.trainer import train

    with pytest.raises(KeyError, match="no trajectory store"):
        train(TrainConfig.build(mode="semi-online", data=(str(tmp_path / "none"),), out=str(tmp_path / "out")))
    assert not (tmp_path / "out").exists()  # nothing created


def test_eval_semi_online_reports_progress_and_success(tiny_model_dir, demos, tmp_path, capsys):
    from guiagent.cli.main import main

    assert main(["eval", "--mode", "semi-online", "--data", demos, "--agent", "model", "--model", tiny_model_dir,
                 "--out", str(tmp_path / "sop"), "--json"]) == 0
    stdout = capsys.readouterr().out
    got = json.loads(stdout.strip().splitlines()[-1])
    assert got["mode"] == "semi-online" and got["episodes"] == 2
    assert 0.0 <= got["progress"] <= 1.0 and 0.0 <= got["success_rate"] <= got["progress"] + 1e-9
    assert "progress" in stdout.splitlines()[0]


@pytest.mark.slow  # ~16 s (the suite's 12-minute budget)
def test_the_embedded_default_runs_its_stages_on_a_tiny_budget(tmp_path):
    """No --model: a tiny model, SFT warm start on oracle demonstrations, semi-online RL on those
    demonstrations, then online RL, with held-out success after each stage (README command (a))."""
    from rl.trainer import train

    out = tmp_path / "default"
    cfg = TrainConfig.build(out=str(out), warm_start_demos=6, warm_start_steps=10, iterations=2, groups_per_iteration=1,
                      group_size=2, slots=2, pool="inprocess", eval_episodes=2, max_new_tokens=8,
                      filter_zero_variance=False)
    assert cfg.mode == "staged"
    from dataclasses import replace

    r = train(replace(cfg, semi=replace(cfg.semi, iterations=1)))
    curves = StoreReader(out).metrics(r.run_id)
    assert [m.iteration for m in curves["semi_online"]] == [0]
    # held-out before (0), after the semi-online stage's one iteration (1), after (2)
    assert [m.iteration for m in curves["eval_success"]] == [0, 1, 2]
    assert r.eval_curve.keys() == {"1"} and 0.0 <= r.success_after <= 1.0 and 0.0 <= r.success_before <= 1.0
    assert (out / "sft" / "config.json").is_file() and (out / "demos" / "store.sqlite").is_file()
    # the warm start is the first candidate for model-best: the run never hands back a worse model
    assert (out / "model-best").is_dir() and r.best_success >= r.success_before


@pytest.mark.slow  # ~24 s; tests/rl/test_trainer.py checks an online run's seed in the default suite
def test_one_seed_gives_one_semi_online_run(tiny_model_dir, demos, tmp_path):
    """Semi-online groups are named by iteration, round and position (not at random): their names pick
    the samples' streams and the update's micro-batches, so one seed gives the same metrics and weights."""
    import torch

    from guiagent.policy.hf import load_transformers
    from rl.trainer import train

    def run(name, seed):
        r = train(TrainConfig.build(model=tiny_model_dir, mode="semi-online", data=(demos,), iterations=2,
                              groups_per_iteration=2, group_size=2, max_new_tokens=8, temperature=1.0,
                              eval_episodes=0, filter_zero_variance=False, min_informative_groups=2,
                              max_sampling_rounds=2, out=str(tmp_path / name), seed=seed))
        metrics = {k: v for k, v in r.last.items() if "seconds" not in k and "per_s" not in k}
        return metrics, load_transformers(r.model).state_dict()

    (m1, w1), (m2, w2), (m3, w3) = run("a", 4), run("b", 4), run("c", 5)
    assert m1 == m2 and all(torch.equal(w1[k], w2[k]) for k in w1)
    assert m1 != m3 or any(not torch.equal(w1[k], w3[k]) for k in w1)


@pytest.mark.slow  # ~12 s (the suite's 12-minute budget)
def test_semi_online_iterations_take_their_own_epochs(tiny_model_dir, demos, tmp_path):
    """--semi.epochs: passes over a semi-online iteration's turns (0: --epochs); the online iterations
    of the same run keep --epochs. One mini-batch a pass, so optimizer steps count the passes."""
    from rl.config import SemiOnlineSettings
    from rl.trainer import train

    out = tmp_path / "run"
    r = train(TrainConfig.build(model=tiny_model_dir, mode="mixed", data=(demos,), tasks=("open_app", "settings_turn_on"),
                          iterations=2, groups_per_iteration=1, group_size=2, slots=2, pool="inprocess",
                          max_new_tokens=8, eval_episodes=0, filter_zero_variance=False, mini_batch_size=0,
                          epochs=1, semi=SemiOnlineSettings(epochs=3), out=str(out), seed=1))
    curves = StoreReader(out).metrics(r.run_id)
    assert [m.iteration for m in curves["semi_online"]] == [0]
    assert {m.iteration: m.value for m in curves["optimizer_steps"]} == {0: 3.0, 1: 1.0}
    with pytest.raises(ValueError, match="--semi.epochs"):
        SemiOnlineSettings(epochs=-1)


@pytest.mark.slow  # ~13 s (the suite's 12-minute budget)
def test_kl_reference_stage_reanchors_where_the_online_stage_begins(tiny_model_dir, demos, tmp_path):
    """--kl-reference stage: a staged run's KL term refers to the policy at the end of the semi-online
    stage (saved as RUN_DIR/reference), also after a resume; before that, to the starting policy."""
    import dataclasses

    import torch

    from guiagent.policy.hf import load_transformers
    from rl.config import SemiOnlineSettings
    from rl.trainer import Trainer

    out = tmp_path / "run"
    cfg = TrainConfig.build(model=tiny_model_dir, mode="staged", data=(demos,), tasks=("open_app", "settings_turn_on"),
                      iterations=1, groups_per_iteration=1, group_size=2, slots=2, pool="inprocess",
                      max_new_tokens=8, eval_episodes=0, filter_zero_variance=False, lr=1e-3, kl_coef=0.05,
                      kl_reference="stage", semi=SemiOnlineSettings(iterations=1), out=str(out), seed=1)
    t = Trainer(cfg)
    t.run()  # one semi-online iteration: the stage ends, the reference moves to the trained policy
    start, after_semi = load_transformers(tiny_model_dir).state_dict(), t.policy.state_dict()
    saved = load_transformers(str(out / "reference")).state_dict()
    assert any(not torch.equal(after_semi[k], start[k]) for k in start)
    assert all(torch.equal(saved[k], after_semi[k]) for k in start)
    assert all(torch.equal(t.learner.ref.state_dict()[k], after_semi[k]) for k in start)

    t2 = Trainer(dataclasses.replace(cfg, resume=str(out), iterations=2))  # one online iteration, resumed
    t2.run()
    assert all(torch.equal(t2.learner.ref.state_dict()[k], after_semi[k]) for k in start)
    assert "kl" in t2.history[-1] and not t2.history[-1].get("semi_online")

    with pytest.raises(ValueError, match="--kl-reference stage"):
        TrainConfig.build(mode="staged", kl_coef=0.1, kl_reference="stage", lora_rank=8)
    # an online run has one stage: a reference to re-anchor at its boundary is a setting it would not use
    with pytest.raises(ValueError, match="has one stage"):
        TrainConfig.build(model=tiny_model_dir, kl_coef=0.1, kl_reference="stage")
    assert TrainConfig.build(model=tiny_model_dir, kl_coef=0.1).mode == "online"


def _semi_result():
    """A semi-online rollout by hand: two recorded episodes replayed twice each (two groups), two steps
    a replay with unequal step rewards, and sampled replies of unequal surprisal."""
    from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
    from rl.rollout import RolloutResult, TrainTurn

    obs = Observation(b"x", 2, 2)
    trajs, turns = [], []
    rewards = {("g1", 0): (1.0, 1.0), ("g1", 1): (1.0, 0.0), ("g2", 0): (0.0, 0.0), ("g2", 1): (1.0, 0.5)}
    for (g, i), (r0, r1) in rewards.items():
        eid = f"{g}-{i}"
        task = TaskSpec("webapps", "open_app" if g == "g1" else "go_home", 0, "goal")
        steps = tuple(Step(k, obs, Click(0.5, 0.5), reward=r, metadata={"matched": r > 0, "recorded_index": k})
                      for k, r in enumerate((r0, r1)))
        trajs.append(Trajectory(eid, task, steps, group_id=g))
        for k in range(2):
            lp = -0.1 * (1 + i + 2 * k + (3 if g == "g2" else 0))
            turns.append(TrainTurn(g, eid, k, None, (1, 2), (lp, lp), 0, True))
    return RolloutResult(trajectories=trajs, turns=turns)


def test_adv_norm_and_entropy_modulation_shape_semi_online_iterations(tmp_path):
    """--entropy-modulation and --adv-norm were silently ignored in semi-online iterations (the embedded
    default's first stage included): they now shape those advantages as they shape online ones."""
    import torch

    from rl.advantages import aem_modulation, whiten
    from rl.checkpoint import TrainerState
    from rl.strategies import SemiOnline

    def batch(**kw):
        cfg = TrainConfig.build(model="m", mode="semi-online", data=("d",), algo="dr_grpo", **kw)
        turns, adv, _ = SemiOnline(cfg, tmp_path, TrainerState()).batch(_semi_result(), None, 0)
        return turns, adv

    turns, plain = batch()
    assert len(turns) == 8 and plain.abs().sum() > 0
    _, whitened = batch(adv_norm="batch")
    torch.testing.assert_close(whitened, whiten(plain.double()).float())
    _, modulated = batch(entropy_modulation=0.5)
    surprisal = torch.tensor([-sum(u.old_logprobs) / len(u.old_logprobs) for u in turns], dtype=torch.float64)
    groups = torch.tensor([0 if u.group_id == "g1" else 1 for u in turns])
    want = aem_modulation(plain.double(), surprisal, groups, alpha=0.5).float()
    torch.testing.assert_close(modulated, want)
    assert not torch.allclose(modulated, plain)
