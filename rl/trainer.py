"""Online RL trainer (GRPO family, GiGPO, PPO with a turn-level critic, AWR), read top to bottom.

    setup      config, run directory, model (tiny + SFT warm start when none is given),
               KL reference (the starting policy, for the whole run), optimiser, store, env
               pool; restore the checkpoint when resuming
    loop       rollout (G episodes per task and seed; rewards composed per step in the
               rollout) → advantages (rl/algos.py, per --algo) → update → critic fit → guards → sync →
               checkpoint → held-out evaluation every N iterations (the best model kept) →
               metrics
    cleanup    final model, held-out evaluation, run status, pool and store closed

The pieces live beside it: :mod:`rl.config` (the config), :mod:`rl.checkpoint` (state and
checkpoints), :mod:`rl.batching` (turns and advantages of a rollout), :mod:`rl.update` (the
PPO step), :mod:`rl.evaluate` (held-out evaluation and the warm start), :mod:`rl.rollout`.

Seeds: training samples task seeds below 1,000,000; ``guiagent eval`` evaluates from
1,000,000 up, so evaluation is on held-out task instances.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import random
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from rl.checkpoint import (
    TrainerState, check_out, clear_previous_run, find_checkpoint, load_checkpoint, load_config, save_checkpoint,
    save_config,
)
from rl.config import TINY_MAX_PIXELS, TRAIN_SEED_RANGE, WARM_START_TASKS, TrainConfig, sample_tasks
from judge.settings import make_judge
from rl.loggers import make_loggers
from rl.optim import build_optimizer, estimate_memory_for

__all__ = ["TrainConfig", "TrainResult", "Trainer", "train", "write_summary"]

log = logging.getLogger(__name__)

#: a guard that trips this many iterations in a row stops the run instead of rolling back again
MAX_CONSECUTIVE_ROLLBACKS = 3


@dataclass(frozen=True)
class TrainResult:
    """What a training run produced (``to_dict`` is the ``--json`` line and ``summary.json``)."""

    run_dir: str
    run_id: str
    iterations: int
    success_before: float
    success_after: float
    model: str
    best_model: str | None = None
    """model-best/: the checkpoint with the best held-out success (with --eval-every)"""
    best_success: float | None = None
    best_iteration: int | None = None
    stopped_by: str | None = None
    """the stability guard that ended the run early, if one did"""
    eval_curve: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    suite_success_before: dict[str, float] = field(default_factory=dict)
    """a mixed --env: held-out success per suite before training (empty on a resumed run)"""
    suite_success_after: dict[str, float] = field(default_factory=dict)
    """a mixed --env: held-out success per suite of the final model"""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def train(cfg: TrainConfig) -> TrainResult:
    """Run (or resume) a training run; see the module docstring."""
    return Trainer(cfg).run()


def write_summary(result: TrainResult) -> None:
    Path(result.run_dir, "summary.json").write_text(json.dumps(result.to_dict(), indent=2, default=float))


def load_recorded(cfg: TrainConfig) -> list[Any]:
    """The recorded episodes of ``--data`` (of ``--tasks`` when given); ``KeyError`` says what is missing."""
    from rl.semi_online import recorded_episodes

    return recorded_episodes(cfg.data, cfg.tasks)


def resolve_tasks(cfg: TrainConfig) -> list[str]:
    """The task ids to train (and evaluate) on; ``KeyError`` names an unknown suite or task.

    In ``--mode semi-online`` the tasks only filter the recorded episodes, which may come from
    elsewhere (an imported dataset): the held-out evaluation runs the ones the suite has.
    """
    from emulators.suites import get_suite

    suite = get_suite(cfg.env)
    ids = suite.task_ids()
    if cfg.mode == "semi-online" and cfg.tasks:
        return [t for t in cfg.tasks if t in ids]
    if cfg.tasks:
        unknown = [t for t in cfg.tasks if t not in ids]
        if unknown:
            raise KeyError(f"unknown task(s) {unknown} in {cfg.env}; see `guiagent tasks list --env {cfg.env}`")
        return list(cfg.tasks)
    if cfg.model:  # a given model (a pretrained VLM): every task of the suite(s)
        return ids
    # the tiny warm start learns targets at fixed places only: webapps' fixed-layout family
    if cfg.env == "webapps":
        return [t for t in WARM_START_TASKS if t in ids]
    if "," in cfg.env:  # a mixed run: webapps' share is its fixed-layout family too
        return [t for t in ids if not t.startswith("webapps.") or t.removeprefix("webapps.") in WARM_START_TASKS]
    return ids


def state_name(cfg: TrainConfig, state: TrainerState) -> str:
    """The run's name in TensorBoard and W&B: ``<algo>-<env>-<run id>``."""
    return f"{cfg.algo}-{cfg.env}-{state.run_id}"


def _engine_dtype(name: str, learner: Any) -> Any:
    """The dtype weights are cast to on their way into the engine (auto: the learner's weights' own,
    bf16 when the learner keeps fp32 masters on a GPU)."""
    if name != "auto":
        return getattr(torch, name)
    dtype = next(learner.parameters()).dtype
    return torch.bfloat16 if dtype == torch.float32 and learner.device.type == "cuda" else dtype


@contextlib.contextmanager
def _pushed_after(sync: Any) -> Any:
    yield
    sync.push()


class _AdaptersOff:
    """A LoRA policy scored as its frozen base: the KL reference without a second model."""

    def __init__(self, policy: Any):
        self.policy = policy

    def score_batch(self, *a: Any, **k: Any) -> Any:
        with self.policy.adapters_disabled():
            return self.policy.score_batch(*a, **k)

    def turn_features(self, chats: Any, micro_batch_size: int) -> Any:
        from rl.critic import turn_features

        with self.policy.adapters_disabled():
            return turn_features(self.policy, chats, micro_batch_size=micro_batch_size)



def _semi_informative_groups(result: Any) -> int:
    """Groups of a semi-online rollout whose samples got different step rewards somewhere (the ones
    its step- and episode-level group advantages learn from)."""
    seen: dict[str, set[tuple[float, ...]]] = {}
    for t in result.trajectories:
        if t.group_id:
            seen.setdefault(t.group_id, set()).add(tuple(round(st.reward, 9) for st in t.steps))
    return sum(len(v) > 1 for v in seen.values())

class Trainer:
    """One training run: :meth:`run` is setup → loop → cleanup."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg

    def run(self) -> TrainResult:
        self.store = self.pool = self.async_rollout = self.colocated = None
        try:
            self.setup()
            while self.state.iteration < self.cfg.iterations and self.stopped_by is None:
                self.iterate()
            result = self.finish()
            self.store.set_run_status(self.state.run_id, "finished")
            return result
        except BaseException:
            if self.store is not None and self.state.run_id:
                self.store.set_run_status(self.state.run_id, "failed")
            raise
        finally:
            self.cleanup()

    # ---- setup ----------------------------------------------------------------------------------

    def setup(self) -> None:
        from guiagent.config import to_mapping
        from guiagent.policy.hf import load_transformers
        from guiagent.store import Store
        from rl.agents import AgentSettings, load_agent
        from rl.evaluate import warm_start

        cfg = self.cfg
        restored = None
        if cfg.resume:
            run_dir = Path(cfg.resume)
            cfg = load_config(TrainConfig, run_dir, iterations=cfg.iterations, resume=str(run_dir), out=str(run_dir),
                              overwrite=False)
            ckpt = find_checkpoint(run_dir)
            restored = load_checkpoint(ckpt) if ckpt is not None else None
        self.cfg = cfg
        # before anything is created: a typo leaves nothing behind
        self.tasks = resolve_tasks(cfg)
        self.recorded = load_recorded(cfg) if cfg.mode != "online" and cfg.data else []
        if cfg.eval_episodes > 0 and not self.tasks:
            raise KeyError(f"none of the recorded tasks is a {cfg.env} task to evaluate on: "
                           "give --eval-episodes 0, or --tasks of the suite")
        self.out = out = Path(cfg.out)
        if not cfg.resume:  # a new run: an --out holding another is refused, or (--overwrite) cleared first
            check_out(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite)
            if cfg.overwrite:
                clear_previous_run(out, keep=(cfg.model, *cfg.data))
        out.mkdir(parents=True, exist_ok=True)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.stopped_by: str | None = None
        self.history: list[dict[str, float]] = []
        self.after = float("nan")
        if restored is not None:
            self.state = restored.state
            model_dir = str(ckpt)
            log.info("resuming %s at iteration %d", out, self.state.iteration)
        else:
            self.state = TrainerState()
            save_config(out, cfg)
            torch.manual_seed(cfg.seed)  # the tiny model's initialisation, when the warm start builds one
            model_dir = cfg.model or warm_start(out, env=cfg.env, tasks=self.tasks, demos=cfg.warm_start_demos,
                                                steps=cfg.warm_start_steps, seed=cfg.seed,
                                                max_pixels=TINY_MAX_PIXELS, threads=cfg.threads or None,
                                                demos_from=cfg.data)
            self.state.model_dir = model_dir
        if cfg.mode != "online" and not cfg.data:  # staged embedded default: replay the warm start's demos
            self.cfg = cfg = dataclasses.replace(cfg, data=(str(out / "demos"),))
            self.recorded = load_recorded(cfg)
        self.first_iteration = self.state.iteration
        self.settings = (AgentSettings.load(self.state.model_dir) or AgentSettings.load(model_dir)
                         or AgentSettings()).in_format(cfg.action_format)
        from rl.algos import Credit  # per --algo: critic, replay buffer, advantages (rl/algos.py)

        self.credit = Credit(cfg, out, self.state, self.settings)
        if restored is not None:
            self.credit.load(ckpt)
        else:
            self.credit.seed_replay(cfg.data or ([str(out / "demos")] if (out / "demos").is_dir() else []))
        self.policy = self._load_policy(model_dir, resumed=restored is not None)
        # The KL reference is the starting policy for the whole run, also after any number of resumes
        # (--kl-reference stage: from the online stage of a staged run on, the policy it began with).
        self.ref = self._reference() if cfg.kl_coef > 0 else None
        if self.ref is not None and self._stage_reference_due() and (out / "reference" / "config.json").is_file():
            self.ref = load_transformers(str(out / "reference"), threads=cfg.threads or None)
        if self.credit.critic is not None and cfg.critic_features == "start":  # the head's fixed inputs
            self.credit.encoder = self.ref if self.ref is not None else self._reference()
        self.opt = build_optimizer(self.policy, cfg.lr, betas=(0.9, 0.98), weight_decay=0.01, precision=cfg.precision)
        log.info("%s (precision %s, LoRA rank %d, micro-batch %d, ~2048-token turns)", estimate_memory_for(
            self.policy.model, precision=self.policy_precision, micro_batch_size=cfg.micro_batch_size, seq_len=2048,
            completion_len=cfg.max_new_tokens, gradient_checkpointing=cfg.gradient_checkpointing,
            device=self.policy.device.type).summary(), cfg.precision, cfg.lora_rank, cfg.micro_batch_size)
        if restored is not None:
            self.opt.load_state_dict(restored.optimizer)
            torch.set_rng_state(restored.torch_rng)
            random.setstate(restored.python_rng)
        else:
            torch.manual_seed(cfg.seed)
            random.seed(cfg.seed)

        self.store = Store.open(out)
        if not self.state.run_id:
            self.state.run_id = self.store.create_run(f"{cfg.algo}-{cfg.env}", env=cfg.env, algo=cfg.algo,
                                                      model=model_dir, config=to_mapping(cfg))
        else:  # resuming: episodes a killed run left half-written are marked aborted, never lost silently
            recovered = self.store.recovered + self.store.recover(older_than=3600.0, dead_local_writers=True)
            if recovered:
                log.info("marked %d unfinished episodes of the killed run as aborted", len(recovered))
            self.store.set_run_status(self.state.run_id, "running")

        # The rollout side acts with its own copy of the weights in async mode (synced after each
        # update under a lock), or on a colocated vLLM engine (weights pushed after each update); in
        # sync mode it otherwise shares the learner's model, so syncing is free.
        if cfg.rollout_engine == "vllm":
            self.rollout_policy, self.colocated = self._vllm_engine(self.state.model_dir)
        elif cfg.rollout == "async":
            self.rollout_policy = load_transformers(model_dir, threads=cfg.threads or None)
        else:
            self.rollout_policy = self.policy
        self.lock = threading.Lock()  # generation holds it: weights are never swapped mid-batch
        self.sampler = load_agent(model_dir, settings=self.settings, loaded=self.rollout_policy,
                                  temperature=cfg.temperature, top_p=cfg.top_p, min_p=cfg.min_p,
                                  max_new_tokens=cfg.max_new_tokens, keep_chats=True, frame=self.policy,
                                  lock=self.lock, resample_unparseable=cfg.resample_unparseable)
        self.suite_eval: dict[str, float] = {}  # a mixed run: per suite, of the latest held-out evaluation
        self.suite_before: dict[str, float] = {}
        if self.state.eval_before is None:
            self.state.eval_before = self.evaluate("before")
            self.suite_before = dict(self.suite_eval)
            # the starting model is the first candidate wherever the run evaluates between iterations
            # (--eval-every, or a staged run's evaluation after its semi-online stage): a run never
            # hands back a worse one
            staged_eval = cfg.mode == "staged" and 0 < cfg.semi.iterations < cfg.iterations
            if cfg.eval_every or staged_eval:
                self._keep_best(self.state.eval_before, 0)
        self.judge = make_judge(cfg.judge, out)
        from guiagent.config import to_mapping as _mapping
        self.loggers = make_loggers(("store", *cfg.log_to), out, state_name(cfg, self.state), _mapping(cfg),
                                    store=self.store, run_id=self.state.run_id)
        if self.suite_before:  # a point at the start of each suite's held-out curve
            self.loggers.log(self.state.iteration, {f"suite/{k}/eval_success_before": v
                                                    for k, v in self.suite_before.items()})
        if cfg.rollout == "async":
            from rl.rollout import AsyncRollout

            cursor = self.state.iteration if self.state.data_cursor is None else self.state.data_cursor
            self.async_rollout = AsyncRollout(self.produce, max_lag=cfg.max_lag, start_iteration=cursor)

    def _vllm_engine(self, model_dir: str) -> tuple[Any, Any]:
        """A vLLM engine in this process on the learner's GPU, holding the learner's current weights
        (a resumed or LoRA run's differ from the folder's), and the sync that hands memory over."""
        from guiagent.policy.vllm_backend import ColocatedSync, VLLMPolicy

        v = self.cfg.vllm
        g = self.policy.image_geometry()
        engine = VLLMPolicy(model_dir, colocate=True, enable_sleep_mode=v.sleep_level > 0,
                            gpu_memory_utilization=v.gpu_memory_utilization, max_model_len=v.max_model_len,
                            enforce_eager=v.enforce_eager, dtype=v.dtype, seed=self.cfg.seed,
                            min_pixels=g.min_pixels, max_pixels=g.max_pixels,
                            max_images=max(self.settings.history_images, 1))
        sync = ColocatedSync(engine, self.policy, dtype=_engine_dtype(v.dtype, self.policy), level=v.sleep_level)
        sync.push()
        return engine, sync

    def _load_policy(self, model_dir: str, *, resumed: bool) -> Any:
        """The learner: precision, LoRA adapters (resumed from the checkpoint's adapter folder) and
        gradient checkpointing as configured."""
        from guiagent.policy.hf import LoraSettings, load_transformers, resolve_precision

        cfg = self.cfg
        lora = LoraSettings(rank=cfg.lora_rank, alpha=cfg.lora_alpha) if cfg.lora_rank else None
        adapter = str(Path(model_dir) / "lora_adapter") if lora is not None and resumed else None
        base = self.state.model_dir if adapter else model_dir  # a LoRA run resumes from base + its adapter
        policy = load_transformers(base, threads=cfg.threads or None, precision=cfg.precision, lora=lora,
                                   adapter=adapter, gradient_checkpointing=cfg.gradient_checkpointing)
        self.policy_precision = resolve_precision(cfg.precision, policy.device).name
        return policy

    def _stage_reference_due(self) -> bool:
        """Whether the KL reference is the online stage's starting policy now (--kl-reference stage)."""
        return self.cfg.kl_reference == "stage" and self.state.iteration >= self.cfg.semi.iterations

    def _anchor_reference(self) -> None:
        """--kl-reference stage: the policy as the online stage begins becomes the KL reference, saved
        (whole, then renamed) before this iteration's checkpoint so that a resume reads it back."""
        tmp, dst = self.out / "reference.tmp", self.out / "reference"
        shutil.rmtree(tmp, ignore_errors=True)
        self.policy.save(tmp)
        shutil.rmtree(dst, ignore_errors=True)
        tmp.rename(dst)
        self.ref.load_state_dict(self.policy.state_dict())
        log.info("KL reference: the policy at the end of the semi-online stage (%s)", dst)

    def _reference(self) -> Any:
        """The KL reference: the starting policy (a LoRA learner's own base, adapters off)."""
        from guiagent.policy.hf import load_transformers

        if self.cfg.lora_rank:
            return _AdaptersOff(self.policy)
        return load_transformers(self.state.model_dir, threads=self.cfg.threads or None)

    def env_pool(self) -> Any:
        """The env pool, started on first use (a semi-online run without evaluations needs none)."""
        if self.pool is None:
            self.pool = self._make_pool()
        return self.pool

    def _make_pool(self) -> Any:
        from emulators.pool_mixed import open_pool

        cfg = self.cfg  # one pool, or one per suite of a mixed --env (each placed where it can run)
        return open_pool(cfg.env, kind=cfg.pool, slots=cfg.slots, workers=cfg.workers, device_options=cfg.device,
                         worker_resources=cfg.worker_resources, ray_address=cfg.ray_address)

    # ---- the loop -------------------------------------------------------------------------------

    def is_semi_online(self, iteration: int) -> bool:
        """Whether iteration ``iteration`` replays recorded episodes (--mode semi-online / mixed)."""
        mode, semi = self.cfg.mode, self.cfg.semi
        return (mode == "semi-online" or (mode == "mixed" and iteration % (semi.per_online + 1) != semi.per_online)
                or (mode == "staged" and iteration < semi.iterations))

    def produce(self, iteration: int) -> Any:
        """The rollouts of one iteration: ``groups_per_iteration`` (task, seed) groups of G episodes,
        in more rounds while too few groups are informative (dynamic sampling); or, in a
        semi-online iteration, ``groups_per_iteration`` recorded episodes replayed G times each."""
        from rl.rollout import make_groups, run_rollout

        cfg = self.cfg
        rng = random.Random(cfg.seed * 7919 + iteration)  # the data cursor: iteration i -> its groups
        torch.manual_seed(cfg.seed * 7919 + iteration)
        # every turn samples from its own stream: (this seed, its episode's group and member, the
        # turn index), so a reply does not depend on batching, slot order or the pool kind
        self.sampler.seed = cfg.seed * 7919 + iteration
        if self.is_semi_online(iteration):
            return self._replay(rng, iteration)
        if self.credit.offline(iteration):  # awr's offline start: the replay buffer only
            from rl.rollout import RolloutResult

            return RolloutResult()
        result = None
        for rnd in range(max(1, cfg.max_sampling_rounds) if cfg.min_informative_groups else 1):
            picks = sample_tasks(rng, self.tasks, cfg.groups_per_iteration, cfg.env_weights)
            seeds = [rng.randrange(TRAIN_SEED_RANGE) for _ in picks]
            more = run_rollout(self.env_pool(), self.sampler, make_groups(picks, seeds, cfg.group_size,
                                                                    max_steps=self.credit.max_steps(iteration),
                                                                    tag=f"i{iteration}r{rnd}"),
                               rewards=cfg.rewards, store=self.store, run_id=self.state.run_id, suite=cfg.env,
                               judge=self.judge)
            result = more if result is None else result.extend(more)
            if result.informative_groups() >= cfg.min_informative_groups:
                break
        return result

    def _replay(self, rng: random.Random, iteration: int = 0) -> Any:
        """A semi-online rollout: recorded episodes, each replayed ``group_size`` times."""
        from rl.semi_online import ModelExplainer, run_semi_online

        cfg = self.cfg
        n = cfg.groups_per_iteration
        explainer = ModelExplainer(self.sampler) if cfg.semi.patch.mode == "policy" else None
        result = None
        # as online: with --min-informative-groups, replay more recorded episodes (another round of
        # --groups-per-iteration, up to --max-sampling-rounds) until that many groups differ
        for rnd in range(max(1, cfg.max_sampling_rounds) if cfg.min_informative_groups else 1):
            picks = (rng.sample(self.recorded, n) if n <= len(self.recorded)
                     else [rng.choice(self.recorded) for _ in range(n)])
            more = run_semi_online(self.sampler, picks, group_size=cfg.group_size, patch=cfg.semi.patch,
                                   rewards=cfg.semi.rewards, match=cfg.semi.match, explainer=explainer,
                                   store=self.store, run_id=self.state.run_id, tag=f"i{iteration}r{rnd}")
            result = more if result is None else result.extend(more)
            if _semi_informative_groups(result) >= cfg.min_informative_groups:
                break
        return result

    def iterate(self) -> None:
        """One iteration: rollout → advantages → update → guards → sync → checkpoint → eval → metrics."""
        from judge.calibration import rollout_judge_metrics
        from rl.batching import rollout_metrics
        from rl.losses import AdaptiveKL
        from rl.update import update

        cfg, state = self.cfg, self.state
        it = state.iteration
        t0 = time.perf_counter()
        data_it = it  # the iteration whose groups this result holds (async: later, when results were dropped)
        if self.async_rollout is not None:
            self.async_rollout.set_version(self.policy.version)
            result = self.async_rollout.get()
            data_it = self.async_rollout.cursor - 1
            state.data_cursor = self.async_rollout.cursor  # checkpointed: a resume goes on from here
        else:
            result = self.produce(it)
        metrics = rollout_metrics(result, suites=cfg.env.split(","))  # a mixed --env: also per suite
        metrics["data_iteration"] = float(data_it)
        epochs = cfg.epochs
        if self.is_semi_online(data_it):
            turns, adv, adv_stats = self._semi_online_batch(result, metrics)
            epochs = cfg.semi.epochs or cfg.epochs
        else:  # the judge's weighted score is already a stored reward part of the last step
            if self.judge is not None:
                metrics.update(rollout_judge_metrics(result))
            turns, adv, adv_stats = self.credit.batch(result, self.policy, it, store=self.store)
        metrics.update(adv_stats)
        t1 = time.perf_counter()
        # a colocated vLLM engine sleeps from here to the sync: the learner has the GPU's memory
        with self._update_phase():
            warmup = self.credit.warming_up(it)  # --critic-warmup: the critic fits, the actor waits
            if warmup:
                metrics["critic_warmup"] = 1.0
            if turns and not warmup:
                beta = cfg.kl_coef if state.kl_coef is None else state.kl_coef
                metrics.update(update(dataclasses.replace(cfg, kl_coef=beta, epochs=epochs), self.policy, self.ref, self.opt, turns,
                                      adv, rng=random.Random(cfg.seed * 7919 + it)))
                if cfg.kl_target > 0:  # adaptive β: a soft trust region around the reference
                    state.kl_coef = AdaptiveKL(beta, cfg.kl_target, cfg.kl_horizon).update(metrics["kl"], len(turns))
                metrics["kl_coef"] = beta
            metrics.update(self.credit.fit())  # the critic (ppo, awr) after the actor
            tripped = self._guards(metrics)
            if tripped and cfg.guard_action == "rollback" and state.rollbacks < MAX_CONSECUTIVE_ROLLBACKS:
                self._rollback(tripped)
                metrics["guard/rollback"] = 1.0
            elif tripped:
                self.stopped_by = tripped
                metrics["guard/stop"] = 1.0
                log.warning("stability guard: %s; stopping the run", tripped)
                if cfg.guard_action == "rollback":  # rolled back too often in a row: keep the last good weights
                    self._rollback(tripped)
            else:
                state.rollbacks = 0
        self._sync_weights()
        metrics["update_seconds"] = time.perf_counter() - t1
        metrics["iteration_seconds"] = time.perf_counter() - t0
        metrics["policy_version"] = float(self.policy.version)
        state.iteration = it + 1
        stage_end = cfg.mode == "staged" and it + 1 == cfg.semi.iterations
        if stage_end and self.ref is not None and cfg.kl_reference == "stage":
            self._anchor_reference()
        due = (cfg.eval_every and (it + 1) % cfg.eval_every == 0) or stage_end
        if due and it + 1 < cfg.iterations and self.stopped_by is None:
            metrics["eval_success"] = self.evaluate("after-semi-online" if stage_end else f"iter-{it + 1}")
            metrics.update({f"suite/{k}/eval_success": v for k, v in self.suite_eval.items()})
            self._keep_best(metrics["eval_success"], it + 1)
        # Metrics before the checkpoint: a kill in between repeats the iteration, whose metrics
        # then replace these; the other order would lose them.
        self.loggers.log(it, metrics)
        save_checkpoint(self.out, self.policy, self.opt, state, extra=self.credit.save)
        self.history.append(metrics)
        log.info(self._line(it, metrics))

    def _semi_online_batch(self, result: Any, metrics: dict[str, float]) -> tuple[list[Any], torch.Tensor,
                                                                                    dict[str, float]]:
        """Turns and UI-S1 advantages of a semi-online rollout (patched steps are never trained on:
        the turns are the policy's own replies), and its metrics."""
        from rl.semi_online import semi_online_turn_advantages

        semi = self.cfg.semi
        adv = semi_online_turn_advantages(result, gamma=semi.gamma, step_weight=semi.step_weight,
                                          episode_weight=semi.episode_weight, normalize_std=self.cfg.algo == "grpo")
        trajs = result.trajectories
        steps = [st for t in trajs for st in t.steps]
        n = max(len(trajs), 1)
        metrics.update({
            "semi_online": 1.0,
            "semi/match_rate": sum(bool(st.metadata.get("matched")) for st in steps) / max(len(steps), 1),
            "semi/progress": sum(t.metadata.get("progress", 0.0) for t in trajs) / n,
            "semi/patches": sum(t.metadata.get("patches", 0) for t in trajs) / n,
        })
        turns = list(result.turns)
        groups = {t.group_id for t in trajs}
        if self.cfg.filter_zero_variance and turns:
            # as online: a group whose samples all replied alike has no advantage anywhere; its turns
            # would only cost update time (and dilute the loss's mean)
            live = {u.group_id for u, a in zip(turns, adv.tolist()) if abs(a) > 1e-9}
            keep = torch.tensor([u.group_id in live for u in turns], dtype=torch.bool)
            turns, adv = [u for u, k in zip(turns, keep.tolist()) if k], adv[keep]
        kept = {u.group_id for u in turns}
        stats = {"groups": float(len(groups)), "groups_kept": float(len(kept)), "groups_equal": float(len(groups - kept))}
        if turns:  # --adv-norm and --entropy-modulation, as on an online iteration
            adv = self.credit._shape(turns, adv.double(), result).float()
            stats.update({"adv_mean": float(adv.mean()), "adv_abs_mean": float(adv.abs().mean())})
        return turns, adv, stats

    def _guards(self, m: dict[str, float]) -> str | None:
        """The first stability guard this iteration trips (None: all within bounds); alarms are
        stored as metrics either way."""
        cfg = self.cfg
        if cfg.min_entropy and m.get("entropy", math.inf) < cfg.min_entropy:
            m["alarm/entropy"] = 1.0
        if cfg.max_parse_error_rate and m["parse_error_rate"] > cfg.max_parse_error_rate:
            m["alarm/parse_error_rate"] = 1.0
            return f"parse-error rate {m['parse_error_rate']:.2f} > --max-parse-error-rate {cfg.max_parse_error_rate}"
        if cfg.max_kl_ref and m.get("kl", 0.0) > cfg.max_kl_ref:
            m["alarm/kl_ref"] = 1.0
            return f"KL to the reference {m['kl']:.4f} > --max-kl-ref {cfg.max_kl_ref}"
        return None

    def _rollback(self, why: str) -> None:
        """Restore the weights and optimiser of the last checkpoint (the start when there is none yet)."""
        from guiagent.policy.hf import load_transformers

        ckpt = find_checkpoint(self.out)
        src = str(ckpt) if ckpt is not None else self.state.model_dir
        if self.policy.lora is not None:
            # a LoRA learner holds its trainable weights in adapters: the checkpoint's adapters on the
            # starting base (before the first checkpoint: fresh ones, which leave the base as it was)
            saved = self._load_policy(src, resumed=ckpt is not None)
            self.policy.model.load_state_dict(saved.model.state_dict())
        else:
            self.policy.load_state_dict(load_transformers(src).state_dict())
        if ckpt is not None:
            self.opt.load_state_dict(load_checkpoint(ckpt).optimizer)
        else:  # no checkpoint yet: back to a fresh optimiser too
            self.opt.state.clear()
        self.policy.mark_updated()
        self.state.rollbacks += 1
        log.warning("stability guard: %s; rolled back to %s", why, src)

    def _update_phase(self) -> Any:
        """Around the update: a colocated vLLM engine asleep (its memory the learner's), the learner's
        new weights pushed into it when the block ends (and the engine woken with its old weights
        if the update fails); nothing otherwise."""
        if self.colocated is None:
            return contextlib.nullcontext()
        if self.colocated.level == 0:  # no sleep mode: both stay on the GPU, weights pushed after
            return _pushed_after(self.colocated)
        return self.colocated.update_phase()

    def _sync_weights(self) -> None:
        if self.colocated is not None:  # pushed at the end of the update phase
            return
        if self.rollout_policy is not self.policy:
            with self.lock:
                self.rollout_policy.load_state_dict(self.policy.state_dict())
                self.rollout_policy.version = self.policy.version

    def _keep_best(self, success: float, iteration: int) -> None:
        """model-best/: the policy with the best held-out success so far (ties keep the earlier)."""
        if math.isnan(success) or (self.state.best_success is not None and success <= self.state.best_success):
            return
        tmp, best = self.out / "model-best.tmp", self.out / "model-best"
        shutil.rmtree(tmp, ignore_errors=True)
        self.policy.save(tmp)
        self.settings.save(str(tmp))
        shutil.rmtree(best, ignore_errors=True)
        tmp.rename(best)
        self.state.best_success, self.state.best_iteration = success, iteration
        log.info("best held-out success so far (%.1f%% at iteration %d): kept in %s", 100 * success, iteration, best)

    def _line(self, it: int, m: dict[str, float]) -> str:
        from rl.batching import no_update_reason

        upd = f"loss {m['loss']:.4f} grad {m['grad_norm']:.3f}" if "loss" in m else "no update: " + no_update_reason(m)
        alarms = " ".join(k.split("/", 1)[1].upper() for k in m if k.startswith("alarm/"))
        ent = f" entropy {m['entropy']:.2f}" if "entropy" in m else ""
        aborted = f" aborted {int(m['aborted'])}" if m.get("aborted") else ""
        mode = "[semi] " if m.get("semi_online") else ""
        redrawn = f" (redrawn {m.get('resampled_rate', 0.0):.2f})" if self.cfg.resample_unparseable else ""
        return (f"[{it + 1}/{self.cfg.iterations}] {mode}success {m['success_rate']:.2f} reward {m['reward_mean']:.3f} "
                f"len {m['episode_length']:.1f} parse-err {m['parse_error_rate']:.2f}{redrawn}{ent}{aborted} {upd} "
                f"({m['iteration_seconds']:.1f} s)" + (f" ALARM {alarms}" if alarms else ""))

    def evaluate(self, tag: str) -> float:
        """Greedy held-out success of the current policy (nan when --eval-episodes is 0)."""
        from rl.agents import load_agent
        from rl.evaluate import EvalConfig, run_eval

        cfg = self.cfg
        if cfg.eval_episodes <= 0:
            return float("nan")
        # greedy on the learner's weights: a colocated vLLM engine holds them too, and generates faster
        greedy = load_agent(self.state.model_dir, settings=self.settings, frame=self.policy,
                            loaded=self.rollout_policy if self.colocated is not None else self.policy,
                            temperature=0.0, max_new_tokens=cfg.max_new_tokens)
        ecfg = EvalConfig(env=cfg.env, agent="model", model=self.state.model_dir, episodes=cfg.eval_episodes,
                          out=str(self.out / f"eval-{tag}"), tasks=tuple(self.tasks), slots=cfg.slots,
                          name=f"eval {tag}")
        # async: the rollout thread shares the pool, so it waits between two rollouts
        with self.async_rollout.paused() if self.async_rollout is not None else contextlib.nullcontext():
            r = run_eval(ecfg, policy=greedy, pool=self.env_pool())
        self.suite_eval = dict(r.per_suite)
        by_suite = ", ".join(f"{k} {100 * v:.1f}%" for k, v in r.per_suite.items())
        log.info("held-out success %s: %.1f%% over %d episodes%s", tag, 100 * r.success_rate, r.episodes,
                 f" ({by_suite})" if by_suite else "")
        return float(r.success_rate)

    # ---- cleanup --------------------------------------------------------------------------------

    def finish(self) -> TrainResult:
        """The final model and its held-out evaluation."""
        if self.async_rollout is not None:  # the rollout in flight ends before the pool is used again
            self.async_rollout.close()
        final = self.out / "model"
        self.policy.save(final)
        self.settings.save(str(final))
        self.after = self.evaluate("after")
        if self.suite_eval and self.state.iteration > 0:  # the end of each suite's held-out curve
            self.loggers.log(self.state.iteration - 1,
                             {f"suite/{k}/eval_success": v for k, v in self.suite_eval.items()})
        if self.cfg.eval_every or self.state.best_success is not None:
            self._keep_best(self.after, self.state.iteration)
            save_checkpoint(self.out, self.policy, self.opt, self.state, extra=self.credit.save)  # best_* for a resume
        best = self.out / "model-best"
        s = self.state
        return TrainResult(
            run_dir=str(self.out), run_id=s.run_id, iterations=s.iteration,
            success_before=s.eval_before if s.eval_before is not None else float("nan"),
            success_after=self.after, model=str(final),
            best_model=str(best) if best.is_dir() else None, best_success=s.best_success,
            best_iteration=s.best_iteration, stopped_by=self.stopped_by,
            eval_curve={str(i + 1): h["eval_success"] for i, h in enumerate(self.history, start=self.first_iteration)
                        if "eval_success" in h},
            last=self.history[-1] if self.history else {},
            suite_success_before=self.suite_before, suite_success_after=dict(self.suite_eval))

    def cleanup(self) -> None:
        if self.async_rollout is not None:
            self.async_rollout.close()
        if getattr(self, "judge", None) is not None:
            self.judge.close()
        if getattr(self, "loggers", None) is not None:
            self.loggers.close()
        if self.pool is not None:
            self.pool.close()
        if self.colocated is not None:
            self.colocated.engine.close()
        if self.store is not None:
            self.store.close()

