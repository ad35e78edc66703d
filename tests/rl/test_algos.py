"""Training modes beyond GRPO (rl/algos.py): GiGPO on stored rollouts, the critic, the horizon
schedule, per-step credit in the store; a trainer run of ppo and of awr (offline, then online)."""

import io
import json
import math

import pytest
import torch

from guiagent.store import Store, StoreReader
from guiagent.types import Click, Finish, Observation, Step, TaskSpec, Trajectory
from rl.algos import Credit, horizon_at, parse_horizon_schedule, thumbnail
from rl.checkpoint import TrainerState
from rl.config import TrainConfig
from rl.critic import TurnCritic
from rl.rollout import RolloutResult, TrainTurn
from tests.images import noise_png


def _screen(seed: int, clock: int = 0) -> bytes:
    """A flat 'screen' with a seeded block, and a 'clock' corner that changes with ``clock``."""
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (320, 200), (240, 240, 240))
    d = ImageDraw.Draw(im)
    d.rectangle((20 + 40 * seed, 60, 60 + 40 * seed, 120), fill=(30, 30, 200))
    d.rectangle((300, 2, 304 + clock % 4, 6), fill=(0, 0, 0))  # a few pixels: the status-bar clock
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def _episode(eid: str, screens: list[bytes], rewards: list[float], group: str = "g") -> Trajectory:
    steps = tuple(Step(i, Observation(png, 320, 200), Click(0.5, 0.5) if i < len(screens) - 1 else Finish("success"),
                       reward=r, reward_parts={"task": r}, terminated=i == len(screens) - 1)
                  for i, (png, r) in enumerate(zip(screens, rewards)))
    return Trajectory(eid, TaskSpec("webapps", "settings_dark_theme", 1, "turn on the dark theme", 5), steps,
                      success=float(sum(rewards) > 0), group_id=group)


def _rollout(trajs: list[Trajectory]) -> RolloutResult:
    turns = [TrainTurn(t.group_id, t.episode_id, s.index, None, (1, 2), (-0.5, -1.0 - s.index), s.reward, 0, True)
             for t in trajs for s in t.steps]
    return RolloutResult(trajectories=trajs, turns=turns)


def test_horizon_schedule():
    sched = parse_horizon_schedule("0:2,3:4,6:0")
    assert [horizon_at(sched, i) for i in range(8)] == [2, 2, 2, 4, 4, 4, None, None]
    assert horizon_at((), 5) is None
    for bad in ("3:2", "0:2,0:3", "0-2", "0:-1"):
        with pytest.raises(ValueError, match="--horizon-schedule"):
            parse_horizon_schedule(bad)
    with pytest.raises(ValueError, match="--horizon-schedule"):
        TrainConfig(horizon_schedule="x")


def test_gigpo_credit_from_anchor_states_is_stored_per_step(tmp_path):
    s0, s1, s2 = _screen(0), _screen(1), _screen(2)
    # both succeed; B takes a detour through s2 (the case GRPO gives no signal for)
    a = _episode("A", [s0, s1], [0.0, 1.0])
    b = _episode("B", [s0, s2, s1], [0.0, 0.0, 1.0])
    store = Store.open(tmp_path / "run")
    run = store.create_run("gigpo")
    for t in (a, b):
        store.write_trajectory(run, t)
    cfg = TrainConfig(algo="gigpo", gamma=0.9, model="m")
    turns, adv, stats = Credit(cfg, tmp_path, TrainerState()).batch(_rollout([a, b]), None, 3, store=store)
    got = {(u.episode_id, u.step_index): float(x) for u, x in zip(turns, adv)}
    assert got[("A", 0)] == pytest.approx(0.045, abs=1e-6) and got[("B", 0)] == pytest.approx(-0.045, abs=1e-6)
    assert got[("A", 1)] == pytest.approx(0.0, abs=1e-6) and got[("B", 1)] == pytest.approx(0.0, abs=1e-6)
    assert stats["anchor_shared"] == pytest.approx(4 / 5)
    store.close()
    credit = StoreReader(tmp_path / "run").step_credit("B")
    assert [(c.index, c.iteration, c.algo) for c in credit] == [(0, 3, "gigpo"), (1, 3, "gigpo"), (2, 3, "gigpo")]
    assert credit[0].advantage == pytest.approx(-0.045, abs=1e-6) and credit[0].value is None
    assert credit[0].ret == pytest.approx(0.81) and credit[0].detail == {"anchor_group_size": 2}


def test_gigpo_tolerant_match_joins_screens_that_differ_in_the_clock(tmp_path):
    a = _episode("A", [_screen(0, clock=0), _screen(1)], [0.0, 1.0])
    b = _episode("B", [_screen(0, clock=3), _screen(2), _screen(1)], [0.0, 0.0, 1.0])
    assert a.steps[0].observation.screenshot != b.steps[0].observation.screenshot
    exact = Credit(TrainConfig(algo="gigpo", gamma=0.9, model="m"), tmp_path, TrainerState())
    turns, _, st = exact.batch(_rollout([a, b]), None, 0)
    # the clock split the first screens apart: no anchor shared with another return, no signal, group dropped
    assert turns == [] and st["groups_kept"] == 0.0
    tolerant = Credit(TrainConfig(algo="gigpo", gamma=0.9, model="m", anchor_match="tolerant"), tmp_path,
                      TrainerState())
    turns, adv, st = tolerant.batch(_rollout([a, b]), None, 0)
    got = {(u.episode_id, u.step_index): float(x) for u, x in zip(turns, adv)}
    assert got[("A", 0)] == pytest.approx(0.045, abs=1e-6)
    assert thumbnail(_screen(0)).shape == (64, 96)


def test_per_task_normalisation_and_entropy_modulation_apply_on_top():
    a = _episode("A", [_screen(0), _screen(1)], [0.0, 1.0], group="g1")
    b = _episode("B", [_screen(0), _screen(2)], [0.0, 0.0], group="g1")
    res = _rollout([a, b])
    plain = Credit(TrainConfig(algo="grpo", model="m"), ".", TrainerState()).batch(res, None, 0)[1]
    per_task = Credit(TrainConfig(algo="grpo", model="m", adv_norm="per-task"), ".", TrainerState()).batch(res, None, 0)[1]
    assert float(per_task.mean()) == pytest.approx(0.0, abs=1e-6) and float(per_task.std()) == pytest.approx(1.0, abs=1e-4)
    assert torch.equal(torch.sign(per_task), torch.sign(plain))
    aem = Credit(TrainConfig(algo="grpo", model="m", entropy_modulation=0.5), ".", TrainerState()).batch(res, None, 0)[1]
    assert torch.equal(torch.sign(aem), torch.sign(plain)) and not torch.allclose(aem, plain)


def test_critic_fits_returns_and_round_trips_weights_only(tmp_path):
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(64, 16, generator=g)
    returns = feats[:, 0].tanh()
    critic = TurnCritic(lr=1e-2, epochs=30, clip_eps=None)
    v0 = critic.values(feats)
    m = critic.fit(feats, returns, v0)
    assert m["explained_variance"] > 0.8 and math.isfinite(m["value_loss"])
    critic.save(tmp_path)
    again = TurnCritic()
    assert again.load(tmp_path) and torch.allclose(again.values(feats), critic.values(feats))
    assert not TurnCritic().load(tmp_path / "none")


def test_turn_features_read_the_policys_last_prompt_state(tiny_model_dir):
    from guiagent.policy.hf import load_transformers
    from guiagent.policy.prompting import build_chat
    from grounding import get_format
    from rl.critic import turn_features

    policy = load_transformers(tiny_model_dir)
    fmt = get_format("json")
    chats = [build_chat("open the settings", [], Observation(noise_png(64, 64, s), 64, 64), fmt) for s in (0, 1, 0)]
    f = turn_features(policy, chats, micro_batch_size=2)
    assert f.shape == (3, policy.model.config.text_config.hidden_size) and torch.isfinite(f).all()
    assert torch.allclose(f[0], f[2], atol=1e-5) and not torch.allclose(f[0], f[1], atol=1e-5)
    one = turn_features(policy, chats[1:2])
    assert torch.allclose(one[0], f[1], atol=1e-4)  # left padding does not change a row


@pytest.mark.browser
def test_ppo_and_awr_runs_store_credit_and_checkpoint_critic_and_replay(tiny_model_dir, tmp_path):
    from rl.evaluate import EvalConfig, run_eval
    from rl.trainer import train

    common = dict(model=tiny_model_dir, tasks=("settings_dark_theme",), groups_per_iteration=1, group_size=2,
                  slots=2, pool="inprocess", max_new_tokens=8, eval_episodes=0, filter_zero_variance=False, seed=1)
    ppo = train(TrainConfig(algo="ppo", iterations=1, horizon_schedule="0:2", out=str(tmp_path / "ppo"), **common))
    assert (tmp_path / "ppo" / "checkpoint" / "critic.safetensors").is_file()
    assert math.isfinite(ppo.last["value_loss"]) and ppo.last["episode_length"] <= 2  # the horizon schedule
    reader = StoreReader(tmp_path / "ppo")
    [ep, *_] = reader.list_episodes().items
    credit = reader.step_credit(ep.episode_id)
    assert credit and all(c.value is not None and c.ret is not None and c.algo == "ppo" for c in credit)
    reader.close()

    demos = tmp_path / "demos"
    run_eval(EvalConfig(env="webapps", agent="oracle", episodes=2, out=str(demos), tasks=("settings_dark_theme",),
                        seed=0, slots=2))
    out = tmp_path / "awr"
    awr = train(TrainConfig(algo="awr", iterations=2, offline_iterations=1, data=(str(demos),), out=str(out),
                            **common))
    state = json.loads((out / "checkpoint" / "trainer_state.json").read_text())["state"]
    assert len(state["replay"]) == 4  # 2 demonstrations + the online iteration's 2 episodes
    assert sum(d == str(demos.resolve()) for d, _ in state["replay"]) == 2
    assert (out / "checkpoint" / "critic.safetensors").is_file() and awr.last["replay"] == 4.0
    assert math.isfinite(awr.last["loss"])
    resumed = train(TrainConfig(resume=str(out), iterations=3))
    state = json.loads((out / "checkpoint" / "trainer_state.json").read_text())["state"]
    assert len(state["replay"]) == 6 and resumed.iterations == 3
