"""The learner: the trained policy, its optimiser, the KL reference, and what restores or keeps them.

* the policy is loaded with the run's precision, LoRA adapters (a resumed LoRA run: its base and
  the checkpoint's adapters) and gradient checkpointing;
* the KL reference is the starting policy for the whole run, also after any number of resumes
  (a LoRA learner's own base with its adapters off: no second model); with ``--kl-reference
  stage`` the policy where a staged run's online stage begins takes its place, saved as
  ``RUN_DIR/reference`` so that a resume reads it back;
* an iteration's update runs with its strategy's loss (:meth:`Learner.learn`, adaptive β after it);
* a tripped stability guard rolls weights and optimiser back to the last checkpoint, or stops the run
  (:meth:`Learner.guard`);
* ``model-best/`` keeps the policy with the best held-out success so far, ``model/`` the final one
  (:meth:`Learner.save_model`: whole models; weights another folder of the run holds at the same
  version are hard-linked, not written again: ``rl.checkpoint.save_model``).

A checkpoint holds no tokenizer, processor or chat template, and a LoRA run's no merged weights: they
come from the starting model (``state.model_dir``) when a checkpoint is loaded.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guiagent.policy.hf import LoraSettings, load_transformers, resolve_precision
from rl.checkpoint import find_checkpoint, load_checkpoint, restore_optimizer, save_model
from rl.critic import turn_features
from rl.losses import AdaptiveKL
from rl.metrics import guard_tripped
from rl.optim import build_optimizer, estimate_memory_for
from rl.update import update

if TYPE_CHECKING:
    from rl.config import TrainConfig

__all__ = ["Learner", "AdaptersOff"]

log = logging.getLogger(__name__)

#: a guard that trips this many iterations in a row stops the run instead of rolling back again
MAX_CONSECUTIVE_ROLLBACKS = 3


class AdaptersOff:
    """A LoRA policy scored as its frozen base: the KL reference without a second model."""

    def __init__(self, policy: Any):
        self.policy = policy

    @property
    def encoder(self) -> Any:
        return self.policy.encoder

    def score_batch(self, *a: Any, **k: Any) -> Any:
        with self.policy.adapters_disabled():
            return self.policy.score_batch(*a, **k)

    def score_encoded(self, *a: Any, **k: Any) -> Any:
        with self.policy.adapters_disabled():
            return self.policy.score_encoded(*a, **k)

    def turn_features(self, chats: Any, micro_batch_size: int) -> Any:
        with self.policy.adapters_disabled():
            return turn_features(self.policy, chats, micro_batch_size=micro_batch_size)


class Learner:
    """The policy being trained, its optimiser and its KL reference (see the module docstring)."""

    def __init__(self, cfg: "TrainConfig", out: Path, state: Any, model_dir: str, *, restored: Any = None):
        self.cfg, self.out, self.state = cfg, Path(out), state
        self.policy = self.load(model_dir, resumed=restored is not None)
        self.ref = self.reference() if cfg.update.kl_coef > 0 else None
        if self.ref is not None and self.stage_reference_due() and (self.out / "reference" / "config.json").is_file():
            self.ref = load_transformers(str(self.out / "reference"), threads=cfg.threads or None)
        u = cfg.update
        self.opt = build_optimizer(self.policy, u.lr, betas=(0.9, 0.98), weight_decay=0.01,
                                   precision=cfg.learner.precision)
        log.info("%s (precision %s, LoRA rank %d, micro-batch %d, ~2048-token turns)", estimate_memory_for(
            self.policy.model, precision=self.precision, micro_batch_size=u.micro_batch_size, seq_len=2048,
            completion_len=cfg.sampling.max_new_tokens, gradient_checkpointing=cfg.learner.gradient_checkpointing,
            device=self.policy.device.type).summary(), cfg.learner.precision, cfg.learner.lora_rank,
            u.micro_batch_size)
        if restored is not None:  # checked against this optimiser first: one CheckpointError line
            restore_optimizer(self.opt, restored)

    def load(self, model_dir: str, *, resumed: bool) -> Any:
        """The learner's policy: precision, LoRA adapters (resumed from the checkpoint's adapter folder)
        and gradient checkpointing as configured. A checkpoint's tokenizer, processor and template are
        the starting model's."""
        cfg, ls = self.cfg, self.cfg.learner
        lora = LoraSettings(rank=ls.lora_rank, alpha=ls.lora_alpha) if ls.lora_rank else None
        adapter = str(Path(model_dir) / "lora_adapter") if lora is not None and resumed else None
        base = self.state.model_dir if adapter else model_dir  # a LoRA run resumes from base + its adapter
        policy = load_transformers(base, threads=cfg.threads or None, precision=ls.precision, lora=lora,
                                   adapter=adapter, gradient_checkpointing=ls.gradient_checkpointing,
                                   parts=self.state.model_dir if resumed else None)
        self.precision = resolve_precision(ls.precision, policy.device).name
        return policy

    # ---- the KL reference ---------------------------------------------------------------------------

    def reference(self) -> Any:
        """A frozen copy of the starting policy (a LoRA learner's own base, adapters off)."""
        if self.cfg.learner.lora_rank:
            return AdaptersOff(self.policy)
        return load_transformers(self.state.model_dir, threads=self.cfg.threads or None)

    def stage_reference_due(self) -> bool:
        """Whether the KL reference is the online stage's starting policy now (--kl-reference stage)."""
        return self.cfg.update.kl_reference == "stage" and self.state.iteration >= self.cfg.semi.iterations

    def anchor_reference(self) -> None:
        """--kl-reference stage: the policy as the online stage begins becomes the KL reference, saved
        (whole, then renamed) before this iteration's checkpoint so that a resume reads it back."""
        dst = self.out / "reference"
        save_model(self.policy, dst)  # this iteration's checkpoint links its weights
        self.ref.load_state_dict(self.policy.state_dict())
        log.info("KL reference: the policy at the end of the semi-online stage (%s)", dst)

    # ---- learning and guarding ----------------------------------------------------------------------

    def learn(self, strategy: Any, batch: Any, metrics: dict[str, float], iteration: int, *, epochs: int) -> None:
        """The actor's update on ``batch`` with ``strategy``'s loss (not while its critic warms up, nor
        without turns); adaptive β after it. Adds the update's figures to ``metrics``."""
        cfg, state = self.cfg, self.state
        if strategy.warming_up(iteration):  # --critic-warmup: the critic fits, the actor waits
            metrics["critic_warmup"] = 1.0
            return
        if not batch.turns:
            return
        beta = cfg.update.kl_coef if state.kl_coef is None else state.kl_coef
        settings = dataclasses.replace(cfg.update, kl_coef=beta, epochs=epochs)
        metrics.update(update(strategy, settings, self.policy, self.ref, self.opt, batch.turns, batch.adv,
                              rng=random.Random(cfg.seed * 7919 + iteration)))
        if cfg.update.kl_target > 0:  # adaptive β: a soft trust region around the reference
            state.kl_coef = AdaptiveKL(beta, cfg.update.kl_target, cfg.update.kl_horizon).update(
                metrics.get("kl", 0.0), len(batch.turns))
        metrics["kl_coef"] = beta

    def guard(self, metrics: dict[str, float]) -> str | None:
        """The stability guards on an iteration's ``metrics``: roll back when one trips; the guard that
        stops the run (rolled back too often in a row, --guard-action stop, stale engine weights), or None."""
        g, state = self.cfg.guards, self.state
        tripped = guard_tripped(g, metrics)
        stale = bool(metrics.get("alarm/engine_gap"))  # the engine's weights, not the learner's: stop
        if tripped and g.guard_action == "rollback" and state.rollbacks < MAX_CONSECUTIVE_ROLLBACKS and not stale:
            self.rollback(tripped)
            metrics["guard/rollback"] = 1.0
            return None
        if tripped:
            metrics["guard/stop"] = 1.0
            log.warning("stability guard: %s; stopping the run", tripped)
            if g.guard_action == "rollback" and not stale:  # rolled back too often in a row: keep the last good weights
                self.rollback(tripped)
            return tripped
        state.rollbacks = 0
        return None

    # ---- restoring and keeping ----------------------------------------------------------------------

    def rollback(self, why: str) -> None:
        """Restore the weights and optimiser of the last checkpoint (the start when there is none yet)."""
        ckpt = find_checkpoint(self.out)
        src = str(ckpt) if ckpt is not None else self.state.model_dir
        if self.policy.lora is not None:
            # a LoRA learner holds its trainable weights in adapters: the checkpoint's adapters on the
            # starting base (before the first checkpoint: fresh ones, which leave the base as it was)
            saved = self.load(src, resumed=ckpt is not None)
            self.policy.model.load_state_dict(saved.model.state_dict())
        else:
            self.policy.load_state_dict(load_transformers(src, parts=self.state.model_dir).state_dict())
        if ckpt is not None:
            restore_optimizer(self.opt, load_checkpoint(ckpt))
        else:  # no checkpoint yet: back to a fresh optimiser too
            self.opt.state.clear()
        self.policy.mark_updated()
        self.state.rollbacks += 1
        log.warning("stability guard: %s; rolled back to %s", why, src)

    def keep_best(self, success: float, iteration: int, settings: Any) -> None:
        """model-best/: the policy with the best held-out success so far (ties keep the earlier)."""
        if success != success or (self.state.best_success is not None and success <= self.state.best_success):
            return
        best = self.out / "model-best"
        self.save_model(best, settings)
        self.state.best_success, self.state.best_iteration = success, iteration
        log.info("best held-out success so far (%.1f%% at iteration %d): kept in %s", 100 * success, iteration, best)

    def save_model(self, folder: Path, settings: Any) -> None:
        """The policy as a whole model in ``folder`` (``model/``, ``model-best/``), with the agent
        settings that say how to prompt it; weights the run holds already at this version (the
        iteration's checkpoint, ``model-best/``) are linked, not written again."""
        save_model(self.policy, folder, settings)

    def critic_encoder(self) -> Any:
        """What a critic reads with --critic-features start: the frozen starting model."""
        return self.ref if self.ref is not None else self.reference()
