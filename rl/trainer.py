"""Online RL trainer (GRPO family), read top to bottom.

    setup      config, run directory, model (tiny + SFT warm start when none is given),
               optimiser, env pool, store; restore the checkpoint when resuming
    loop       rollout (G episodes per task and seed) → rewards (composed per step in the
               rollout) → advantages → update (micro-batches, gradient accumulation) →
               weight sync → checkpoint → metrics
    cleanup    held-out evaluation, run status, pool and store closed

Seeds: training samples task seeds below 1,000,000; ``guiagent eval`` evaluates from
1,000,000 up, so evaluation is on held-out task instances.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from judge.compose import RewardConfig

__all__ = ["TrainConfig", "train", "WARM_START_TASKS"]

#: tasks whose targets sit at fixed places for every seed: what a tiny model trained from
#: scratch on CPU can learn (FACTS.md), so the embedded default trains on them
WARM_START_TASKS = ("open_app", "settings_turn_on", "settings_turn_off", "settings_open_section",
                    "files_open_folder", "go_home")
TRAIN_SEED_RANGE = 1_000_000
TINY_MAX_PIXELS = 28 * 28 * 128


@dataclass
class TrainConfig:
    """Online RL on a suite: GRPO / Dr. GRPO with PPO-clip updates."""

    env: str = "webapps"
    """suite: webapps, miniwob or androidworld"""
    algo: Literal["grpo", "dr_grpo"] = "grpo"
    """grpo: std-normalised group advantages, token-mean loss; dr_grpo: no std, constant-length normaliser"""
    tasks: tuple[str, ...] = ()
    """task ids to train on (default: the fixed-layout family for webapps, else every task)"""
    model: str = ""
    """policy to train: a local folder or hub id (empty: a tiny model with an SFT warm start)"""
    out: str = "runs/train"
    """run directory (store, checkpoints, final model)"""
    resume: str | None = None
    """continue the run in this directory from its last checkpoint (its saved config is used)"""
    iterations: int = 8
    """total training iterations (with --resume: the total to reach)"""
    groups_per_iteration: int = 6
    """(task, seed) groups sampled per iteration"""
    group_size: int = 4
    """G: episodes per group"""
    slots: int = 4
    """envs stepping side by side"""
    pool: Literal["inprocess", "ray"] = "ray"
    """ray: a Ray actor fleet (a local Ray, or --ray-address), which keeps browsers and app servers
    out of the learner's process (measured ~3x faster rollouts on 2 cores, docs/benchmarks.md);
    inprocess: envs in this process (no Ray; for debugging)"""
    ray_address: str | None = None
    """join this Ray cluster (e.g. auto or host:6379); default: start a local Ray"""
    workers: int = 2
    """--pool ray: number of worker actors (slots are spread over them)"""
    worker_resources: dict[str, float] = field(default_factory=dict)
    """--pool ray: custom Ray resources per worker (e.g. --worker-resources androidworld 1 pins
    AndroidWorld workers to farm hosts started with ray start --resources '{"androidworld": N}')"""
    device: dict[str, str] = field(default_factory=dict)
    """device options passed to the suite's make_device (e.g. --device farm runs/farm/endpoints.json
    for androidworld, --device chromium_path /usr/bin/chromium for the browser suites)"""
    mode: Literal["sync", "async"] = "sync"
    """async: rollouts of the next iteration run while the learner updates (bounded by --max-lag)"""
    max_lag: int = 1
    """async: drop rollouts produced more than this many policy versions ago"""
    lr: float = 2e-4
    """AdamW learning rate"""
    epochs: int = 1
    """passes over each iteration's turns"""
    mini_batch_size: int = 0
    """turns per optimiser step (0: all of an iteration's turns, one step per epoch); e.g. 16 with
    --epochs 2 takes 2 x ceil(turns / 16) PPO steps an iteration"""
    micro_batch_size: int = 8
    """turns per forward/backward pass (gradient accumulation covers the mini-batch)"""
    clip_eps_low: float = 0.2
    """PPO ε below 1"""
    clip_eps_high: float = 0.28
    """PPO ε above 1 (> clip_eps_low: clip-higher)"""
    kl_coef: float = 0.0
    """β of the KL(π‖π_ref) loss term (0: no reference model is kept)"""
    kl_kind: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator"""
    kl_target: float = 0.0
    """adaptive KL (a soft trust region around the reference): β starts at --kl-coef and is
    adapted so the KL stays near this value (0: β fixed)"""
    kl_horizon: int = 1000
    """adaptive KL: turns over which β may change by ±20%"""
    max_kl_old: float = 0.0
    """trust region on each update: stop its remaining mini-batches once the approximate KL to
    the policy that sampled them exceeds this (0: never stop early)"""
    loss_agg: str = ""
    """token_mean, seq_mean_token_mean, seq_mean_token_sum, seq_mean_token_sum_norm, group_token_mean
    (default: token_mean for grpo, seq_mean_token_sum_norm for dr_grpo)"""
    advantage: Literal["episode", "step"] = "episode"
    """episode: one group advantage per episode; step: group-normalised discounted returns per turn"""
    gamma: float = 1.0
    """discount of step-level returns"""
    filter_zero_variance: bool = True
    """skip groups whose episodes all got the same reward (no GRPO signal)"""
    min_informative_groups: int = 0
    """dynamic sampling (DAPO): while fewer groups than this have unequal rewards, sample another
    --groups-per-iteration groups, at most --max-sampling-rounds rounds an iteration (0: off)"""
    max_sampling_rounds: int = 3
    """dynamic sampling: most rollout rounds in one iteration"""
    neg_adv_min_scale: float = 1.0
    """success-adaptive scaling of negative advantages: scale = m + (1-m)·group success (1: off)"""
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    """rollout sampling temperature"""
    top_p: float = 1.0
    """rollout nucleus sampling (< 1 cuts the low-probability tail, e.g. malformed replies of a
    weak warm start; log-probs for the loss stay those of the unmodified model)"""
    min_p: float = 0.0
    """rollout min-p sampling: drop tokens below min_p x the most likely one (0: off); keeps
    exploring coordinates while cutting malformed replies"""
    max_new_tokens: int = 64
    """longest reply per turn"""
    rewards: RewardConfig = field(default_factory=RewardConfig)
    """reward components (--rewards.progress 0.5, --rewards.parse-penalty -0.1, ...)"""
    judge_model: str | None = None
    """a VLM judge scoring each finished episode (a model folder, hub id or OpenAI-compatible URL);
    its score, weighted by --rewards.judge, joins the episode reward and its verdict is stored"""
    judge_k: int = 3
    """screenshots the judge sees (the last k and the final screen)"""
    judge_budget: int | None = None
    """most judge calls in the whole run (None: unlimited)"""
    eval_episodes: int = 24
    """held-out episodes evaluated greedily before and after training (0: skip)"""
    eval_every: int = 0
    """also evaluate every N iterations (stored as the metric eval_success; 0: only before and after)"""
    warm_start_demos: int = 120
    """no --model: oracle episodes recorded for the SFT warm start"""
    warm_start_steps: int = 400
    """no --model: SFT optimiser steps of the warm start"""
    seed: int = 0
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    json: bool = False
    """print one JSON object with the figures as the last stdout line"""

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError("--group-size must be >= 2: group advantages compare episodes of one task")
        if (self.iterations < 0 or self.groups_per_iteration <= 0 or self.slots <= 0 or self.eval_every < 0
                or self.mini_batch_size < 0 or self.micro_batch_size <= 0 or self.epochs <= 0
                or self.min_informative_groups < 0 or self.max_sampling_rounds <= 0):
            raise ValueError("--iterations, --eval-every, --mini-batch-size and --min-informative-groups must be "
                             ">= 0; --groups-per-iteration, --slots, --epochs, --micro-batch-size and "
                             "--max-sampling-rounds positive")
        if self.clip_eps_low <= 0 or self.clip_eps_high <= 0:
            raise ValueError("clip epsilons must be positive")
        if self.kl_target < 0 or self.max_kl_old < 0 or self.kl_horizon <= 0:
            raise ValueError("--kl-target and --max-kl-old must be >= 0, --kl-horizon positive")
        if self.kl_target > 0 and self.kl_coef <= 0:
            raise ValueError("--kl-target adapts β from --kl-coef: give a positive --kl-coef too")
        if self.loss_agg == "":
            self.loss_agg = "seq_mean_token_sum_norm" if self.algo == "dr_grpo" else "token_mean"


# ---------------------------------------------------------------------------------------------
# setup


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _task_ids(cfg: TrainConfig) -> list[str]:
    from emulators.suites import get_suite

    if cfg.tasks:
        return list(cfg.tasks)
    ids = get_suite(cfg.env).task_ids()
    if cfg.env == "webapps":
        return [t for t in WARM_START_TASKS if t in ids]
    return ids


def warm_start(cfg: TrainConfig, tasks: list[str], out: Path) -> str:
    """A tiny model, SFT on oracle demonstrations of ``tasks`` (training seeds): the RL warm start."""
    from guiagent.cli.eval import EvalConfig, run as run_eval
    from guiagent.policy.hf import load_transformers
    from guiagent.policy.tiny import TinyModelSpec, build_tiny_model
    from rl.agents import COMPACT_JSON_PROMPT, AgentSettings
    from rl.sft import SFTConfig, load_examples, load_trajectories, train_sft

    sft_dir = out / "sft"
    if (sft_dir / "config.json").is_file():
        return str(sft_dir)
    base = out / "base"
    _log(f"warm start: building a tiny model in {base}")
    # ~128 visual tokens a screenshot: enough for fixed layouts, and 5x cheaper than the default
    build_tiny_model(TinyModelSpec(size="tiny", seed=cfg.seed, max_pixels=TINY_MAX_PIXELS), base)
    demos = out / "demos"
    _log(f"warm start: recording {cfg.warm_start_demos} oracle episodes of {len(tasks)} tasks")
    run_eval(EvalConfig(env=cfg.env, agent="oracle", episodes=cfg.warm_start_demos, out=str(demos),
                        tasks=tuple(tasks), seed=cfg.seed, name="warm-start demos"))
    settings = AgentSettings(system_prompt=COMPACT_JSON_PROMPT)
    policy = load_transformers(str(base), threads=cfg.threads or None)
    sft_cfg = SFTConfig(steps=cfg.warm_start_steps, seed=cfg.seed)
    examples = load_examples(load_trajectories([str(demos)]), policy, settings.format(),
                             settings.prompt_config(), sft_cfg)
    _log(f"warm start: SFT on {len(examples)} examples for {sft_cfg.steps} steps")
    figs = train_sft(policy, examples, sft_cfg, out_dir=str(sft_dir), progress=sys.stderr.isatty(),
                     settings=settings)
    _log(f"warm start: SFT loss {figs['loss_first']:.3f} -> {figs['loss_last']:.3f} in {figs['seconds']} s")
    return str(sft_dir)


def _make_pool(cfg: TrainConfig):
    if cfg.pool == "ray":
        from emulators.pool import RayEnvPool

        per = max(1, math.ceil(cfg.slots / cfg.workers))
        return RayEnvPool(cfg.env, num_workers=cfg.workers, envs_per_worker=per, address=cfg.ray_address,
                          device_options=dict(cfg.device), worker_resources=dict(cfg.worker_resources))
    from emulators.pool import InProcessPool

    return InProcessPool(cfg.env, num_slots=cfg.slots, device_options=dict(cfg.device))


@dataclass
class TrainerState:
    """What a checkpoint holds beside the weights: enough to resume exactly."""

    iteration: int = 0
    """next iteration to run (the data cursor: iteration i samples its groups from seed + i)"""
    run_id: str = ""
    model_dir: str = ""
    eval_before: float | None = None
    kl_coef: float | None = None
    """β of the adaptive KL controller (None: --kl-coef)"""


def _checkpoint_dir(out: Path) -> Path:
    return out / "checkpoint"


def save_checkpoint(out: Path, policy: Any, opt: torch.optim.Optimizer, state: TrainerState) -> None:
    """Write the checkpoint to a fresh folder, then swap it in: a kill never leaves a torn one."""
    tmp = out / "checkpoint.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save(tmp)
    torch.save({"optimizer": opt.state_dict(), "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(), "state": dataclasses.asdict(state)}, tmp / "trainer_state.pt")
    final = _checkpoint_dir(out)
    old = out / "checkpoint.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _save_config(out: Path, cfg: TrainConfig) -> None:
    import yaml

    from guiagent.config import to_mapping

    (out / "config.yaml").write_text(yaml.safe_dump(to_mapping(cfg), sort_keys=False))


def _load_config(run_dir: Path, iterations: int) -> TrainConfig:
    from guiagent.config import load_yaml

    cfg = load_yaml(TrainConfig, run_dir / "config.yaml")
    return dataclasses.replace(cfg, iterations=iterations, resume=str(run_dir), out=str(run_dir))


# ---------------------------------------------------------------------------------------------
# the update


def compute_advantages(cfg: TrainConfig, result: Any, extra: dict[str, float] | None = None
                       ) -> tuple[list[Any], torch.Tensor, dict[str, float]]:
    """Turns to learn from and their advantages (one per turn).

    ``extra`` adds episode-level reward (e.g. the weighted judge score) by episode id.
    """
    extra = extra or {}
    from rl.advantages import (
        discounted_returns, grpo_advantages, group_stats, nonzero_variance_mask, scale_negative_advantages,
        step_group_advantages,
    )

    trajs = [t for t in result.trajectories if t.status == "completed" and t.group_id]
    if not trajs:
        return [], torch.zeros(0), {"groups_kept": 0.0}
    gids = {g: i for i, g in enumerate(sorted({t.group_id for t in trajs}))}
    ep_reward = torch.tensor([t.total_reward + extra.get(t.episode_id, 0.0) for t in trajs], dtype=torch.float64)
    ep_group = torch.tensor([gids[t.group_id] for t in trajs])
    ep_success = torch.tensor([t.success for t in trajs], dtype=torch.float64)
    keep = nonzero_variance_mask(ep_reward, ep_group) if cfg.filter_zero_variance else torch.ones(len(trajs), dtype=torch.bool)
    normalize = cfg.algo == "grpo"
    ep_adv = grpo_advantages(ep_reward, ep_group, normalize_std=normalize)
    if cfg.neg_adv_min_scale < 1.0:
        group_success, _, _ = group_stats(ep_success, ep_group)
        ep_adv = scale_negative_advantages(ep_adv, group_success, min_scale=cfg.neg_adv_min_scale)
    by_episode = {t.episode_id: i for i, t in enumerate(trajs)}
    turns = [u for u in result.turns if u.episode_id in by_episode and keep[by_episode[u.episode_id]]]
    if cfg.advantage == "episode":
        adv = torch.tensor([float(ep_adv[by_episode[u.episode_id]]) for u in turns])
    else:
        step_ret: dict[tuple[str, int], float] = {}
        for t in trajs:
            r = torch.tensor([[s.reward for s in t.steps]], dtype=torch.float64)
            if t.steps:  # the judge's reward lands on the last step, as the task's does
                r[0, -1] += extra.get(t.episode_id, 0.0)
            g = discounted_returns(r, gamma=cfg.gamma)[0] if t.steps else r[0]
            for s, v in zip(t.steps, g.tolist()):
                step_ret[(t.episode_id, s.index)] = v
        rets = torch.tensor([step_ret[(u.episode_id, u.step_index)] for u in turns], dtype=torch.float64)
        grp = torch.tensor([gids[u.group_id] for u in turns])
        idx = torch.tensor([u.step_index for u in turns])
        adv = step_group_advantages(rets, grp, idx, normalize_std=normalize).float()
    stats = {"groups_kept": float(len({trajs[i].group_id for i in range(len(trajs)) if keep[i]})),
             "groups": float(len(gids))}
    return turns, adv, stats


def update(cfg: TrainConfig, policy: Any, ref: Any, opt: torch.optim.Optimizer, turns: list[Any],
           adv: torch.Tensor) -> dict[str, float]:
    """PPO steps over ``turns``: ``epochs`` shuffled passes, one optimiser step per mini-batch,
    each mini-batch in micro-batches with gradient accumulation."""
    from rl.losses import ppo_clip_loss

    params = [p for p in policy.parameters() if p.requires_grad]
    out = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "grad_norm": 0.0, "approx_kl_old": 0.0, "optimizer_steps": 0.0,
           "early_stopped": 0.0}
    n_mb = 0
    order = list(range(len(turns)))
    mini = cfg.mini_batch_size or len(turns)
    for _ in range(cfg.epochs):
        if out["early_stopped"]:
            break
        random.shuffle(order)
        for m in range(0, len(order), mini):
            part = order[m:m + mini]
            part_tokens = sum(len(turns[j].completion_ids) for j in part)
            opt.zero_grad(set_to_none=True)
            loss_sum = kl_old = 0.0
            for i in range(0, len(part), cfg.micro_batch_size):
                idx = part[i:i + cfg.micro_batch_size]
                mb = [turns[j] for j in idx]
                chats = [u.prompt for u in mb]
                comps = [list(u.completion_ids) for u in mb]
                sb = policy.score_batch(chats, comps, grad=True)
                old = _place(sb.mask, [u.old_logprobs for u in mb], sb.logprobs.dtype)
                ref_lp = None
                if ref is not None and cfg.kl_coef > 0:
                    ref_lp = ref.score_batch(chats, comps, grad=False).logprobs.detach()
                loss, st = ppo_clip_loss(sb.logprobs, old, adv[idx].to(sb.logprobs.dtype), sb.mask,
                                         clip_eps_low=cfg.clip_eps_low, clip_eps_high=cfg.clip_eps_high,
                                         agg=cfg.loss_agg, ref_logp=ref_lp, kl_coef=cfg.kl_coef, kl_kind=cfg.kl_kind,
                                         max_len=cfg.max_new_tokens,
                                         group_ids=torch.tensor([hash(u.group_id) % (2**31) for u in mb]))
                # Each micro-batch's share of the mini-batch, so accumulation equals one big batch.
                share = (int(sb.mask.sum()) / max(part_tokens, 1)) if cfg.loss_agg == "token_mean" else len(mb) / len(part)
                (loss * share).backward()
                loss_sum += float(loss.detach()) * share
                out["clip_frac"] += st.clip_frac
                out["kl"] += st.kl
                out["approx_kl_old"] += st.approx_kl_old
                kl_old += st.approx_kl_old * len(mb) / len(part)
                n_mb += 1
            if cfg.max_kl_old and kl_old > cfg.max_kl_old:  # this mini-batch left the trust region
                opt.zero_grad(set_to_none=True)
                out["early_stopped"] = 1.0
                break
            gn = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            opt.step()
            out["loss"] += loss_sum
            out["grad_norm"] += float(gn)
            out["optimizer_steps"] += 1
    for k in ("clip_frac", "kl", "approx_kl_old"):
        out[k] /= max(n_mb, 1)
    for k in ("loss", "grad_norm"):  # means over the optimiser steps
        out[k] /= max(out["optimizer_steps"], 1)
    if out["optimizer_steps"]:
        policy.mark_updated()  # one new policy version per update: what rollouts are tagged and lag-checked with
    return out


def _place(mask: torch.Tensor, rows: list[tuple[float, ...]], dtype: torch.dtype) -> torch.Tensor:
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    for b, r in enumerate(rows):
        idx = mask[b].nonzero().flatten()
        if len(idx) != len(r):
            raise RuntimeError(f"{len(r)} behaviour log-probs for {len(idx)} completion tokens")
        out[b, idx] = torch.tensor(r, dtype=dtype, device=mask.device)
    return out


def _make_judge(cfg: TrainConfig, out: Path) -> Any:
    if not cfg.judge_model:
        return None
    from guiagent.policy import load_policy
    from judge.vlm import JudgeConfig, VLMJudge

    return VLMJudge(load_policy(cfg.judge_model), JudgeConfig(k=cfg.judge_k, budget=cfg.judge_budget,
                                                              cache_dir=str(out / "judge_cache"),
                                                              model_id=cfg.judge_model))


def judge_episodes(judge: Any, result: Any, store: Any, cfg: TrainConfig, metrics: dict[str, float]
                   ) -> dict[str, float]:
    """Judge the finished episodes; store the verdicts; return ``{episode id: weighted judge reward}``."""
    from judge.vlm import store_verdict

    trajs = [t for t in result.trajectories if t.status == "completed"]
    verdicts = judge.judge_batch(trajs)
    extra: dict[str, float] = {}
    agree = judged = 0
    for t, v in zip(trajs, verdicts):
        store_verdict(store, t.episode_id, v)
        if v.reward is not None:
            extra[t.episode_id] = cfg.rewards.judge * v.reward
            judged += 1
            agree += int((v.reward >= 0.5) == (t.success >= 0.5))
    metrics["judge_agreement"] = agree / judged if judged else float("nan")
    metrics["judge_errors"] = float(len(trajs) - judged)
    return extra


class _LockedModelPolicy:
    """A turn policy whose generation holds a lock, so weights are never swapped mid-batch."""

    def __init__(self, inner: Any, lock: threading.Lock):
        self.inner, self.lock, self.name = inner, lock, inner.name

    def act_batch(self, contexts: Any, pool: Any) -> Any:
        with self.lock:
            return self.inner.act_batch(contexts, pool)


def rollout_metrics(result: Any) -> dict[str, float]:
    trajs = [t for t in result.trajectories if t.status == "completed"]
    steps = [s for t in trajs for s in t.steps]
    m: dict[str, float] = {
        "success_rate": sum(t.success for t in trajs) / max(len(trajs), 1),
        "reward_mean": sum(t.total_reward for t in trajs) / max(len(trajs), 1),
        "episode_length": len(steps) / max(len(trajs), 1),
        "parse_error_rate": sum(s.parse_error is not None for s in steps) / max(len(steps), 1),
        "aborted": float(result.aborted), "env_steps_per_s": result.steps_per_second,
        "rollout_seconds": result.wall_seconds,
    }
    for name in sorted({k for s in steps for k in s.reward_parts}):
        m[f"reward/{name}"] = sum(s.reward_parts.get(name, 0.0) for s in steps) / max(len(trajs), 1)
    lps = [lp for u in result.turns for lp in u.old_logprobs]
    if lps:  # −E[log π(a)] over sampled tokens: a Monte-Carlo estimate of the policy's entropy
        m["entropy"] = -sum(lps) / len(lps)
    return m


# ---------------------------------------------------------------------------------------------
# the loop


def train(cfg: TrainConfig) -> dict[str, Any]:
    # ---- setup --------------------------------------------------------------------------------
    from guiagent.cli.eval import EvalConfig, run as run_eval
    from guiagent.policy.hf import load_transformers
    from guiagent.store import Store
    from rl.agents import AgentSettings, load_model_policy
    from rl.losses import AdaptiveKL
    from rl.rollout import AsyncRollout, make_groups, run_rollout

    if cfg.resume:
        cfg = _load_config(Path(cfg.resume), cfg.iterations)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    tasks = _task_ids(cfg)
    ckpt = _checkpoint_dir(out)
    state = TrainerState()
    resuming = cfg.resume is not None and (ckpt / "trainer_state.pt").is_file()
    if resuming:
        saved = torch.load(ckpt / "trainer_state.pt", weights_only=False)
        state = TrainerState(**saved["state"])
        model_dir = str(ckpt)
        _log(f"resuming {out} at iteration {state.iteration}")
    else:
        _save_config(out, cfg)
        model_dir = cfg.model or warm_start(cfg, tasks, out)
        state.model_dir = model_dir
    settings = AgentSettings.load(state.model_dir or model_dir) or AgentSettings()
    policy = load_transformers(model_dir, threads=cfg.threads or None)
    ref = load_transformers(model_dir) if cfg.kl_coef > 0 else None
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=cfg.lr, betas=(0.9, 0.98))
    if resuming:
        opt.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["torch_rng"])
        random.setstate(saved["python_rng"])
    else:
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
    store = Store.open(out)
    if not state.run_id:
        from guiagent.config import to_mapping

        state.run_id = store.create_run(f"{cfg.algo}-{cfg.env}", env=cfg.env, algo=cfg.algo, model=model_dir,
                                        config=to_mapping(cfg))
    else:  # resuming: episodes a killed run left half-written are marked aborted, never lost silently
        recovered = store.recover(older_than=3600.0, dead_local_writers=True)
        if recovered:
            _log(f"marked {len(recovered)} unfinished episodes of the killed run as aborted")
        store.set_run_status(state.run_id, "running")

    async_rollout = None
    pool = _make_pool(cfg)
    try:
        def evaluate(tag: str) -> float:
            if cfg.eval_episodes <= 0:
                return float("nan")
            greedy = load_model_policy(model_dir, settings=settings, policy=policy, temperature=0.0,
                                       max_new_tokens=cfg.max_new_tokens)
            ecfg = EvalConfig(env=cfg.env, agent="model", model=model_dir, episodes=cfg.eval_episodes,
                              out=str(out / f"eval-{tag}"), tasks=tuple(tasks), slots=cfg.slots, name=f"eval {tag}")
            # async: the rollout thread shares the pool, so it waits between two rollouts
            with async_rollout.paused() if async_rollout is not None else contextlib.nullcontext():
                r = run_eval(ecfg, policy=greedy, pool=pool)
            _log(f"held-out success {tag}: {r['success_rate']:.1%} over {r['episodes']} episodes")
            return float(r["success_rate"])

        if state.eval_before is None:
            state.eval_before = evaluate("before")
        # The rollout side acts with its own copy of the weights in async mode (synced after each
        # update under a lock); in sync mode it shares the learner's model, so syncing is free.
        rollout_policy = load_transformers(model_dir, threads=cfg.threads or None) if cfg.mode == "async" else policy
        lock = threading.Lock()
        sampler = _LockedModelPolicy(load_model_policy(model_dir, settings=settings, policy=rollout_policy,
                                                       temperature=cfg.temperature, top_p=cfg.top_p, min_p=cfg.min_p,
                                                       max_new_tokens=cfg.max_new_tokens, keep_chats=True), lock)

        def sync_weights() -> None:
            if rollout_policy is not policy:
                with lock:
                    rollout_policy.load_state_dict(policy.state_dict())
                    rollout_policy.version = policy.version

        judge = _make_judge(cfg, out)

        def produce(iteration: int):
            rng = random.Random(cfg.seed * 7919 + iteration)  # the data cursor: iteration i -> its groups
            result = None
            for _ in range(max(1, cfg.max_sampling_rounds) if cfg.min_informative_groups else 1):
                picks = [rng.choice(tasks) for _ in range(cfg.groups_per_iteration)]
                seeds = [rng.randrange(TRAIN_SEED_RANGE) for _ in picks]
                more = run_rollout(pool, sampler, make_groups(picks, seeds, cfg.group_size), rewards=cfg.rewards,
                                   store=store, run_id=state.run_id, suite=cfg.env)
                result = more if result is None else result.extend(more)
                if result.informative_groups() >= cfg.min_informative_groups:
                    break
            return result

        if cfg.mode == "async":
            async_rollout = AsyncRollout(produce, max_lag=cfg.max_lag, start_iteration=state.iteration)
        history: list[dict[str, float]] = []
        first = state.iteration
        # ---- loop ------------------------------------------------------------------------------
        while state.iteration < cfg.iterations:
            it = state.iteration
            t0 = time.perf_counter()
            if async_rollout is not None:
                async_rollout.set_version(policy.version)
                result = async_rollout.get()
            else:
                result = produce(it)
            metrics = rollout_metrics(result)
            extra = judge_episodes(judge, result, store, cfg, metrics) if judge is not None else {}
            turns, adv, adv_stats = compute_advantages(cfg, result, extra)
            metrics.update(adv_stats)
            t1 = time.perf_counter()
            if turns:
                beta = cfg.kl_coef if state.kl_coef is None else state.kl_coef
                metrics.update(update(dataclasses.replace(cfg, kl_coef=beta), policy, ref, opt, turns, adv))
                if cfg.kl_target > 0:  # adaptive β: a soft trust region around the reference
                    state.kl_coef = AdaptiveKL(beta, cfg.kl_target, cfg.kl_horizon).update(metrics["kl"], len(turns))
                metrics["kl_coef"] = beta
            sync_weights()
            metrics["update_seconds"] = time.perf_counter() - t1
            metrics["iteration_seconds"] = time.perf_counter() - t0
            metrics["policy_version"] = float(policy.version)
            state.iteration = it + 1
            save_checkpoint(out, policy, opt, state)
            if cfg.eval_every and (it + 1) % cfg.eval_every == 0 and it + 1 < cfg.iterations:
                metrics["eval_success"] = evaluate(f"iter-{it + 1}")
            store.log_metrics(state.run_id, it, metrics)
            history.append(metrics)
            upd = (f"loss {metrics['loss']:.4f} grad {metrics['grad_norm']:.3f}" if "loss" in metrics
                   else "no update: every group's episodes got equal rewards")
            _log(f"[{it + 1}/{cfg.iterations}] success {metrics['success_rate']:.2f} reward "
                 f"{metrics['reward_mean']:.3f} len {metrics['episode_length']:.1f} parse-err "
                 f"{metrics['parse_error_rate']:.2f} {upd} ({metrics['iteration_seconds']:.1f} s)")
        # ---- cleanup ---------------------------------------------------------------------------
        if async_rollout is not None:  # the rollout in flight ends before the pool is used again
            async_rollout.close()
        final = out / "model"
        policy.save(final)
        settings.save(str(final))
        after = evaluate("after")
        store.set_run_status(state.run_id, "finished")
    except BaseException:
        store.set_run_status(state.run_id, "failed")
        raise
    finally:
        if async_rollout is not None:
            async_rollout.close()
        pool.close()
        store.close()
    return {"run_dir": str(out), "run_id": state.run_id, "iterations": state.iteration,
            "success_before": state.eval_before, "success_after": after, "model": str(final),
            "eval_curve": {str(i + 1): h["eval_success"] for i, h in enumerate(history, start=first)
                           if "eval_success" in h},
            "last": history[-1] if history else {}}


def write_summary(result: dict[str, Any]) -> None:
    Path(result["run_dir"], "summary.json").write_text(json.dumps(result, indent=2, default=float))
