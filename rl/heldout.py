"""A training run's held-out evaluations and what a run hands back.

:class:`HeldOut` evaluates the current policy greedily on held-out task seeds (from 1,000,000,
which training never samples): before training, between iterations (``--eval-every``, a staged
run's stage boundary) and after. With ``--targets seen`` it evaluates on seen targets and, beside
them, on the targets no training episode had. It keeps the figures of the latest evaluation and of
the first (per suite of a mixed fleet, per task) for the run's result and its curves.
:class:`TrainResult` is that result (the ``--json`` line and ``summary.json``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager

from guiagent.writing import writing
from rl.agents import load_agent
from rl.evaluate import EvalConfig, run_eval

__all__ = ["HeldOut", "TrainResult", "write_summary"]

log = logging.getLogger(__name__)


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
    env_steps: int = 0
    """env steps the run's rollouts took (semi-online replays take none)"""
    budget_reached: bool = False
    """the run ended at its --max-env-steps budget, before --iterations"""
    eval_curve: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    suite_success_before: dict[str, float] = field(default_factory=dict)
    """a mixed --env: held-out success per suite before training (empty on a resumed run)"""
    suite_success_after: dict[str, float] = field(default_factory=dict)
    """a mixed --env: held-out success per suite of the final model"""
    task_success_before: dict[str, float] = field(default_factory=dict)
    """held-out success per task before training (empty on a resumed run)"""
    task_success_after: dict[str, float] = field(default_factory=dict)
    """held-out success per task of the final model"""
    unseen_success_before: float | None = None
    """--targets seen: held-out success on unseen targets (the suite's held-out targets) before training"""
    unseen_success_after: float | None = None
    """--targets seen: held-out success on unseen targets of the final model"""
    unseen_task_success_before: dict[str, float] = field(default_factory=dict)
    unseen_task_success_after: dict[str, float] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    """wall seconds of each phase of the run (warm start parts, evaluations, rollouts, updates, saving)"""
    wall_seconds: float = 0.0
    """wall seconds of the run, from the start of its set-up to its final evaluation (this session of it,
    on a resumed run)"""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def write_summary(result: TrainResult) -> None:
    Path(result.run_dir, "summary.json").write_text(json.dumps(result.to_dict(), indent=2, default=float))


class HeldOut:
    """The run's held-out evaluations (see the module docstring)."""

    def __init__(self, cfg: Any, out: Path, tasks: list[str], unseen_tasks: list[str], phases: Any,
                 pool: Callable[[], Any], paused: Callable[[], ContextManager[None]] | None = None):
        self.cfg, self.out, self.tasks, self.unseen_tasks, self.phases = cfg, out, tasks, unseen_tasks, phases
        self.pool, self.paused = pool, paused or contextlib.nullcontext
        #: of the latest evaluation: per suite (a mixed run), per task; on unseen targets (--targets seen)
        self.suite: dict[str, float] = {}
        self.task: dict[str, float] = {}
        self.unseen: float | None = None
        self.unseen_task: dict[str, float] = {}
        #: of the starting model (empty on a resumed run)
        self.suite_before: dict[str, float] = {}
        self.task_before: dict[str, float] = {}
        self.unseen_before: float | None = None
        self.unseen_task_before: dict[str, float] = {}
        #: the starting model was evaluated in this process (not on a resumed run, not with --eval-episodes 0)
        self.evaluated_before = False

    def before(self, tag: str, **model: Any) -> float:
        """The starting model's evaluation, kept as the run's "before" figures."""
        seen = self(tag, **model)
        self.suite_before, self.task_before = dict(self.suite), dict(self.task)
        self.unseen_before, self.unseen_task_before = self.unseen, dict(self.unseen_task)
        self.evaluated_before = not math.isnan(seen)
        return seen

    def __call__(self, tag: str, *, model_dir: str, settings: Any, frame: Any, loaded: Any) -> float:
        """Greedy held-out success of the policy (nan when --eval-episodes is 0); with --targets seen, on seen
        targets, and on unseen ones beside it (``self.unseen``). ``loaded``: what generates (the learner, or
        a colocated vLLM engine holding its weights)."""
        cfg = self.cfg
        if cfg.evaluation.eval_episodes <= 0:
            return float("nan")
        t0 = time.perf_counter()
        greedy = load_agent(model_dir, settings=settings, frame=frame, loaded=loaded, temperature=0.0,
                            max_new_tokens=cfg.sampling.max_new_tokens)
        ecfg = EvalConfig(env=cfg.env, agent="model", model=model_dir, episodes=cfg.evaluation.eval_episodes,
                          out=str(self.out / f"eval-{tag}"), tasks=tuple(self.tasks), name=f"eval {tag}",
                          fleet=cfg.fleet, targets="seen" if cfg.targets == "seen" else "all")
        n = cfg.evaluation.eval_unseen_episodes
        n = cfg.evaluation.eval_episodes if n < 0 else n
        with self.paused(), writing(f"the held-out evaluation {tag}", ecfg.out):
            r = run_eval(ecfg, policy=greedy, pool=self.pool())
            if self.unseen_tasks and n:  # --targets seen: the same model on targets no training episode had
                u = run_eval(dataclasses.replace(ecfg, episodes=n, out=str(self.out / f"eval-{tag}-unseen"),
                                                 targets="unseen", tasks=tuple(self.unseen_tasks),
                                                 name=f"eval {tag} (unseen targets)"), policy=greedy, pool=self.pool())
                self.unseen, self.unseen_task = float(u.success_rate), dict(u.per_task)
        self.suite, self.task = dict(r.per_suite), dict(r.per_task)
        by_suite = ", ".join(f"{k} {100 * v:.1f}%" for k, v in r.per_suite.items())
        log.info("held-out success %s%s: %.1f%% over %d episodes%s%s", tag,
                 " on seen targets" if cfg.targets == "seen" else "", 100 * r.success_rate, r.episodes,
                 f" ({by_suite})" if by_suite else "",
                 f"; on unseen targets {100 * self.unseen:.1f}%" if self.unseen_tasks and n else "")
        self.phases.add(f"eval {tag}", time.perf_counter() - t0)
        return float(r.success_rate)

    def point(self, seen: float | None, unseen: float | None = None) -> dict[str, float]:
        """A point of the held-out curves (``eval_success``; ``eval_success_unseen`` with --targets seen)."""
        return {k: v for k, v in (("eval_success", seen), ("eval_success_unseen", unseen)) if v is not None}

    def result_fields(self) -> dict[str, Any]:
        """The :class:`TrainResult` fields of the first and latest evaluations."""
        return dict(suite_success_before=self.suite_before, suite_success_after=dict(self.suite),
                    task_success_before=self.task_before, task_success_after=dict(self.task),
                    unseen_success_before=self.unseen_before, unseen_success_after=self.unseen,
                    unseen_task_success_before=self.unseen_task_before,
                    unseen_task_success_after=dict(self.unseen_task))
