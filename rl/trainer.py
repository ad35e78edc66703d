"""The trainer, read top to bottom: setup → iterate → finish → cleanup.

    setup      the run's plan (rl/plan.py: its config, a resumed run's own, checkpoint, tasks and
               phase schedule), run directory, model (tiny + SFT warm start when none is given), the
               algorithm's strategy (rl/strategies/), the learner (policy, optimiser, KL reference:
               rl/learner.py), store, the rollout side (rl/engine.py), held-out evaluation before
               training (rl/heldout.py)
    iterate    rollouts (rl/produce.py: online groups, semi-online replays, or none, as the
               iteration's phase says) → the strategy's batch (turns and advantages) → update with
               the strategy's loss (rl/learner.py, rl/update.py) → critic fit → guards → weight sync
               → stage boundary → held-out evaluation every N iterations (the best model kept) →
               metrics → checkpoint
    finish     final model, held-out evaluation, run status
    cleanup    pool, engine, judge, loggers and store closed

Every phase of an iteration runs under a named timer (``*_seconds`` metrics). ARCHITECTURE.md
follows one iteration from the command line to the checkpoint.

Seeds: training samples task seeds below 1,000,000; ``guiagent eval`` evaluates from
1,000,000 up, so evaluation is on held-out task instances.
"""

from __future__ import annotations

import contextlib
import logging
import random
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator

import torch

from guiagent.config import to_mapping
from guiagent.faults import fault
from guiagent.store import Store
from guiagent.writing import writing
from judge.calibration import rollout_judge_metrics
from judge.settings import make_judge
from rl.agents import AgentSettings, load_agent
from rl.checkpoint import (
    CheckpointError,
    TrainerState,
    begin_session,
    clear_previous_run,
    end_session,
    load_checkpoint,
    mark_run,
    save_checkpoint,
    save_config,
)
from rl.config import TINY_MAX_PIXELS, TrainConfig
from rl.engine import RolloutEngine
from rl.evaluate import _has_oracles, check_started, run_status_after, warm_start
from rl.heldout import HeldOut, TrainResult, write_summary
from rl.learner import Learner
from rl.loggers import make_loggers
from rl.metrics import iteration_line, rollout_metrics
from rl.plan import RunPlan, Schedule, resolve_run, with_demos
from rl.produce import Producer
from rl.replay import recorded_episodes
from rl.rollout import AsyncRollout
from rl.strategies import Strategy, strategy_class
from rl.timing import PhaseTimes

__all__ = ["TrainConfig", "TrainResult", "Trainer", "train", "write_summary"]

log = logging.getLogger(__name__)


def train(cfg: TrainConfig | RunPlan) -> TrainResult:
    """Run (or resume) a training run from its config, or from the plan :func:`rl.plan.resolve_run` made of
    it; see the module docstring."""
    return Trainer(cfg).run()


class Trainer:
    """One training run: :meth:`run` is setup → iterate → finish → cleanup."""

    def __init__(self, cfg: TrainConfig | RunPlan):
        self.plan = cfg if isinstance(cfg, RunPlan) else None
        self.cfg = cfg.cfg if isinstance(cfg, RunPlan) else cfg

    def run(self) -> TrainResult:
        self.store = self.pool = self.async_rollout = self.engine = self.judge = self.loggers = None
        self.session_out: Path | None = None  # set once the run writes in its output folders
        self.started = time.perf_counter()
        try:
            # a full disk is said with what was being written (guiagent.writing); inner blocks say more
            with writing("the run's set-up (its config, warm start and store)", self.cfg.resume or self.cfg.out):
                self.setup()
            while self.state.iteration < self.cfg.iterations and self.stopped_by is None and self.budget_left():
                with writing(f"iteration {self.state.iteration + 1} (its episodes, credit and metrics)", self.out):
                    self.iterate()
            with writing("the run's end (its final model and evaluation)", self.out):
                result = self.finish()
            self.store.set_run_status(self.state.run_id, "finished")
            return result
        except BaseException as e:  # Ctrl+C, a full disk: interrupted (resumable), anything else: failed
            if self.store is not None and self.state.run_id:
                try:
                    self.store.set_run_status(self.state.run_id, run_status_after(e))
                except (OSError, sqlite3.OperationalError) as status_error:  # a full disk takes this write too:
                    # the run stays `running` with its writer gone, which the store reads as interrupted
                    log.warning("the run's status was not stored (%s)", " ".join(str(status_error).split()))
            raise
        finally:
            self.cleanup()

    # ---- setup --------------------------------------------------------------------------------------

    def setup(self) -> None:
        restored = self._config()
        cfg, out = self.cfg, self.out
        self.settings = (AgentSettings.load(self.state.model_dir) or AgentSettings.load(self.model_dir)
                         or AgentSettings()).in_format(cfg.action_format)
        self.strategy: Strategy = strategy_class(cfg.algo)(cfg, out, self.state, self.settings)
        replayed = strategy_class("semi-online")(cfg, out, self.state, self.settings) if cfg.mode != "online" else None
        self.schedule = Schedule(cfg, self.strategy, replayed)
        if restored is not None:
            try:
                self.strategy.load(self.ckpt)
            except ValueError as e:  # the strategy's own state in the checkpoint is damaged: bad input
                raise CheckpointError(str(e)) from None
        else:
            self.strategy.seed_replay(cfg.data or ([str(out / "demos")] if (out / "demos").is_dir() else []))
        self.learner = Learner(cfg, out, self.state, self.model_dir, restored=restored)
        self.policy = self.learner.policy
        if restored is not None:  # the resume is under way: a new total of iterations is the run's from now on
            self.plan.save_total()
        if self.strategy.critic is not None and cfg.critic.critic_features == "start":  # the head's fixed inputs
            self.strategy.encoder = self.learner.critic_encoder()
        if restored is not None:
            torch.set_rng_state(restored.torch_rng)
            random.setstate(restored.python_rng)
        else:
            torch.manual_seed(cfg.seed)
            random.seed(cfg.seed)
        self._open_run()
        self.engine = RolloutEngine(cfg, self.policy, self.model_dir, engine_dir=self.state.model_dir,
                                    max_images=max(self.settings.history_images, 1))
        s = cfg.sampling
        self.sampler = load_agent(self.model_dir, settings=self.settings, loaded=self.engine.policy,
                                  temperature=s.temperature, top_p=s.top_p, min_p=s.min_p,
                                  max_new_tokens=s.max_new_tokens, keep_chats=True, frame=self.policy,
                                  lock=self.engine.lock, resample_unparseable=s.resample_unparseable)
        self._evaluate_start()
        self.judge = make_judge(cfg.judge, out)
        self.loggers = make_loggers(("store", *cfg.log_to), out, f"{cfg.algo}-{cfg.env}-{self.state.run_id}",
                                    to_mapping(cfg), store=self.store, run_id=self.state.run_id)
        h = self.held_out
        if h.suite_before:  # a point at the start of each suite's held-out curve
            self.loggers.log(self.state.iteration, {f"suite/{k}/eval_success_before": v
                                                    for k, v in h.suite_before.items()})
        if self.first_iteration == 0:  # the held-out curve's first point: the starting model
            self.loggers.log(0, h.point(self.state.eval_before, h.unseen_before))
        self.produce = Producer(cfg, self.tasks, self.recorded, self.sampler, store=self.store,
                                run_id=self.state.run_id, judge=self.judge, pool=self.env_pool)
        if cfg.rollouts.rollout == "async":
            cursor = self.state.iteration if self.state.data_cursor is None else self.state.data_cursor
            self.async_rollout = AsyncRollout(lambda it: self.produce(it, self.schedule.at(it)),
                                              max_lag=cfg.rollouts.max_lag, start_iteration=cursor)

    def _config(self) -> Any:
        """The run's plan (:func:`rl.plan.resolve_run`, once: the CLI's, or resolved here), its run directory,
        trainer state and starting model; returns the checkpoint to restore (None for a new run)."""
        plan = self.plan = self.plan or resolve_run(self.cfg)
        cfg = self.cfg = plan.cfg
        self.tasks, self.demo_tasks, self.unseen_tasks = plan.tasks, plan.demo_tasks, plan.unseen_tasks
        self.recorded, self.ckpt, self.phases = plan.recorded, plan.checkpoint, PhaseTimes()
        restored = load_checkpoint(self.ckpt, plan.saved_state) if self.ckpt is not None else None
        self.out = out = plan.out
        if not cfg.resume and cfg.overwrite:  # checked by the plan; cleared now, as the run starts
            clear_previous_run(out, keep=(cfg.model, *cfg.data))
        out.mkdir(parents=True, exist_ok=True)
        mark_run(out)  # before anything else of the run: what a later --overwrite takes as evidence of it
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.stopped_by: str | None = None
        self.history: list[dict[str, float]] = []
        if restored is not None:
            self.state, self.model_dir = restored.state, str(self.ckpt)
            log.info("resuming %s at iteration %d", out, self.state.iteration)
        else:
            self.state = TrainerState()
            save_config(out, cfg)
            if not cfg.model and (cfg.data or _has_oracles(cfg.env, self.tasks)):  # (else: warm_start's one line)
                # the run's record before its warm start: one stopped in it is stored `interrupted`
                self.model_dir = str(out / "sft")  # where the warm start puts its model
                self._open_run()
            torch.manual_seed(cfg.seed)  # the tiny model's initialisation, when the warm start builds one
            w, fmt = cfg.warm_start, "json" if cfg.action_format == "auto" else cfg.action_format
            self.model_dir = cfg.model or warm_start(
                out, env=cfg.env, tasks=self.demo_tasks, demos=w.warm_start_demos, steps=w.warm_start_steps, seed=cfg.seed,
                max_pixels=TINY_MAX_PIXELS, threads=cfg.threads or None, demos_from=cfg.data, device=cfg.fleet.device,
                action_format=fmt, words=w.warm_start_words, copy_steps=w.warm_start_copy_steps,
                copy_until=w.warm_start_copy_until, copy_repeats=w.warm_start_copy_repeats,
                name_weight=w.warm_start_name_weight, action_weight=w.warm_start_action_weight,
                goal_frames=w.warm_start_goal_frames, goal_relabel=w.warm_start_goal_relabel,
                rename=w.warm_start_rename, recover=w.warm_start_recover, targets=cfg.targets, mark_states=w.warm_start_mark_states,
                phases=self.phases, rewards=cfg.rewards)
            self.state.model_dir = self.model_dir
        if cfg.mode != "online" and not cfg.data:  # staged embedded default: replay the warm start's demos
            self.cfg = cfg = with_demos(cfg, out)
            self.recorded = recorded_episodes(cfg.data, cfg.tasks)
            if restored is None:  # the demonstrations are there now: config.yaml says what the store records
                save_config(out, cfg)
        self.first_iteration = self.state.iteration
        return restored

    def _open_run(self) -> None:
        """The run's record in the store (a resumed run's episodes left half-written are marked aborted).
        A new run with a warm start records itself before it (opened already: nothing more to do)."""
        if self.store is not None:
            return
        # from here on the run writes in its output folders: recorded as the run's (what --overwrite deletes);
        # a resume refused before it (a damaged checkpoint) has changed nothing
        begin_session(self.out)
        self.session_out = self.out
        self.store = Store.open(self.out)
        if not self.state.run_id:
            cfg = with_demos(self.cfg, self.out)  # as _config sets it after the warm start
            self.state.run_id = self.store.create_run(f"{cfg.algo}-{cfg.env}", env=cfg.env, algo=cfg.algo,
                                                      model=self.model_dir, config=to_mapping(cfg))
            fault("run_opened")  # tests: a signal once the run is recorded (before the env pool or Ray starts)
        else:  # resuming: episodes a killed run left half-written are marked aborted, never lost silently
            recovered = self.store.recovered + self.store.recover(older_than=3600.0, dead_local_writers=True)
            if recovered:
                log.info("marked %d unfinished episodes of the killed run as aborted", len(recovered))
            self.store.set_run_status(self.state.run_id, "running")

    def _evaluate_start(self) -> None:
        """Held-out success of the starting model (not again on a resume)."""
        self.held_out = HeldOut(self.cfg, self.out, self.tasks, self.unseen_tasks, self.phases, self.env_pool,
                                self._pool_paused)
        if self.state.eval_before is None:
            self.state.eval_before = self.held_out.before("before", **self._generating())
            # the starting model is the first candidate wherever the run evaluates between iterations
            # (--eval-every, or a staged run's evaluation after its semi-online stage): a run never
            # hands back a worse one
            staged_eval = self.cfg.mode == "staged" and 0 < self.cfg.semi.iterations < self.cfg.iterations
            if self.cfg.evaluation.eval_every or staged_eval:
                self.learner.keep_best(self.state.eval_before, 0, self.settings)

    def _generating(self) -> dict[str, Any]:
        """What a greedy evaluation generates with: the learner's weights (a colocated vLLM engine holds them
        too, and generates faster)."""
        return dict(model_dir=self.state.model_dir, settings=self.settings, frame=self.policy,
                    loaded=self.engine.policy if self.engine.colocated is not None else self.policy)

    def env_pool(self) -> Any:
        """The env pool, started on first use (a semi-online run without evaluations needs none)."""
        if self.pool is None:
            self.pool = self.cfg.fleet.open_pool(self.cfg.env)
        return self.pool

    # ---- the loop -------------------------------------------------------------------------------------

    def iterate(self) -> None:
        """One iteration: rollout → batch → update → guards → sync → stage → eval → metrics → checkpoint."""
        cfg, state = self.cfg, self.state
        it = state.iteration
        t0 = time.perf_counter()
        result, data_it = self._rollouts(it)
        phase = self.schedule.at(data_it)
        strategy = phase.strategy
        if not phase.replays and not getattr(self, "_live_started", False):
            # live episodes: a fleet on which none has started yet ends the run (a browser that cannot
            # launch); once some have started, a round whose resets all failed is the fleet's fault of
            # the moment (its episodes are stored aborted, the pool replaces the device), not the run's end
            check_started(result)
        if any(t.steps for t in result.trajectories):
            self._live_started = True
        metrics = rollout_metrics(result, suites=cfg.env.split(","))  # a mixed --env: also per suite
        metrics["data_iteration"] = float(data_it)
        if phase.counts_env_steps:  # a semi-online replay's turns take no env step
            state.env_steps += result.env_steps
        metrics["env_steps_total"] = float(state.env_steps)
        if self.judge is not None and not phase.replays:  # its score is a stored reward part already
            metrics.update(rollout_judge_metrics(result))
        t1 = time.perf_counter()
        batch = strategy.batch(result, self.policy, it, store=self.store)
        metrics.update(batch.stats)
        t2 = time.perf_counter()
        with self.engine.update_phase():  # a colocated vLLM engine sleeps: the learner has the GPU's memory
            self.learner.learn(strategy, batch, metrics, it, epochs=phase.epochs)
            metrics.update(strategy.fit())  # the critic (ppo, awr) after the actor
            self.stopped_by = self.learner.guard(metrics)
        self.engine.sync()
        t3 = time.perf_counter()
        for phase, seconds in (("rollouts", t1 - t0), ("credit", t2 - t1), ("updates", t3 - t2)):
            self.phases.add(phase, seconds)
        metrics.update({"time/rollout_seconds": t1 - t0, "time/credit_seconds": t2 - t1,
                        "time/update_seconds": t3 - t2, "update_seconds": t3 - t1, "iteration_seconds": t3 - t0,
                        "policy_version": float(self.policy.version)})
        state.iteration = it + 1
        self._stage_and_eval(it, metrics)
        # Metrics before the checkpoint: a kill in between repeats the iteration, whose metrics then
        # replace these; the other order would lose them. A held-out evaluation is a point at the
        # number of updates behind it (it + 1), where iteration it + 1's rollouts use the same weights.
        held_out = {k: metrics.pop(k) for k in ("eval_success", "eval_success_unseen") if k in metrics}
        self.loggers.log(it, metrics)
        if held_out:
            self.loggers.log(it + 1, held_out)
            metrics.update(held_out)
        with self.phases.timer("checkpoints"):
            save_checkpoint(self.out, self.policy, self.learner.opt, state, extra=self.strategy.save)
        self.history.append(metrics)
        log.info(iteration_line(it, cfg.iterations, metrics, redrawn=bool(cfg.sampling.resample_unparseable)))

    def _rollouts(self, it: int) -> tuple[Any, int]:
        """This iteration's rollouts and the iteration whose data they are (async: later, after drops)."""
        if self.async_rollout is None:
            return self.produce(it, self.schedule.at(it)), it
        self.async_rollout.set_version(self.policy.version)
        result = self.async_rollout.get()
        self.state.data_cursor = self.async_rollout.cursor  # checkpointed: a resume goes on from here
        return result, self.async_rollout.cursor - 1

    def _stage_and_eval(self, it: int, metrics: dict[str, float]) -> None:
        """A staged run's boundary (the KL reference re-anchored) and the held-out evaluation when due."""
        cfg, stage_end = self.cfg, self.schedule.at(it).stage_end
        if stage_end and self.learner.ref is not None and cfg.update.kl_reference == "stage":
            self.learner.anchor_reference()
        every = cfg.evaluation.eval_every
        due = (every and (it + 1) % every == 0) or stage_end
        if due and it + 1 < cfg.iterations and self.stopped_by is None and self.budget_left():
            t = time.perf_counter()
            metrics["eval_success"] = self.evaluate("after-semi-online" if stage_end else f"iter-{it + 1}")
            if self.held_out.unseen is not None:
                metrics["eval_success_unseen"] = self.held_out.unseen
            metrics.update({f"suite/{k}/eval_success": v for k, v in self.held_out.suite.items()})
            self.learner.keep_best(metrics["eval_success"], it + 1, self.settings)
            metrics["time/eval_seconds"] = time.perf_counter() - t

    def budget_left(self) -> bool:
        """Env steps left under --max-env-steps (always, without a budget)."""
        return not self.cfg.max_env_steps or self.state.env_steps < self.cfg.max_env_steps

    def evaluate(self, tag: str) -> float:
        """Greedy held-out success of the current policy (:class:`rl.heldout.HeldOut`)."""
        return self.held_out(tag, **self._generating())

    @contextlib.contextmanager
    def _pool_paused(self) -> Iterator[None]:
        """Async: the rollout thread shares the pool, so it waits between two rollouts."""
        with self.async_rollout.paused() if self.async_rollout is not None else contextlib.nullcontext():
            yield

    # ---- finish and cleanup ---------------------------------------------------------------------------

    def finish(self) -> TrainResult:
        """The final model and its held-out evaluation."""
        if self.async_rollout is not None:  # the rollout in flight ends before the pool is used again
            self.async_rollout.close()
        final = self.out / "model"
        with self.phases.timer("final model"), writing("the final model", final):
            self.learner.save_model(final, self.settings)  # weights the last checkpoint holds: linked
        s, h = self.state, self.held_out
        if s.iteration == 0 and h.evaluated_before:
            # no update ran (--iterations 0, or stopped before the first): the model is the one evaluated before,
            # on the same greedy episodes, so the figures after are those (an evaluation again would repeat them)
            log.info("no iteration ran: held-out success after = before (%.1f%%), not evaluated again",
                     100 * s.eval_before)
            after = s.eval_before
        else:
            after = self.evaluate("after")
        if h.suite and s.iteration > 0:  # the end of each suite's held-out curve
            self.loggers.log(s.iteration - 1, {f"suite/{k}/eval_success": v for k, v in h.suite.items()})
        self.loggers.log(s.iteration, h.point(after, h.unseen))  # the held-out curve's last point
        if self.cfg.evaluation.eval_every or s.best_success is not None:
            self.learner.keep_best(after, s.iteration, self.settings)
            save_checkpoint(self.out, self.policy, self.learner.opt, s, extra=self.strategy.save)  # best_* kept
        best = self.out / "model-best"
        return TrainResult(
            run_dir=str(self.out), run_id=s.run_id, iterations=s.iteration,
            success_before=s.eval_before if s.eval_before is not None else float("nan"), success_after=after,
            model=str(final), best_model=str(best) if best.is_dir() else None, best_success=s.best_success,
            best_iteration=s.best_iteration, stopped_by=self.stopped_by, env_steps=s.env_steps,
            budget_reached=not self.budget_left() and s.iteration < self.cfg.iterations,
            eval_curve={str(i + 1): h["eval_success"] for i, h in enumerate(self.history, start=self.first_iteration)
                        if "eval_success" in h},
            last=self.history[-1] if self.history else {}, **h.result_fields(), phase_seconds=self.phases.as_dict(),
            wall_seconds=round(time.perf_counter() - self.started, 2))

    def cleanup(self) -> None:
        for part in (self.async_rollout, self.judge, self.loggers, self.pool, self.engine, self.store):
            if part is not None:
                part.close()
        if getattr(self, "session_out", None) is not None:
            try:
                end_session(self.session_out)  # what the run wrote, recorded: --overwrite deletes that alone
            except OSError as e:  # a full disk: the record keeps this session's start, which covers the same
                log.warning("%s: the record of the run's outputs was not updated (%s)", self.session_out,
                            e.strerror or e)
