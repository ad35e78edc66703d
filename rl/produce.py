"""An iteration's rollouts, by the iteration's kind.

* online: ``--groups-per-iteration`` (task, seed) groups of G episodes on the env pool, in more
  rounds while too few groups are informative (dynamic sampling, ``--min-informative-groups``);
  with ``--branch-at``, a trunk (or a captured start) per (task, seed) and G branches from each
  of its chosen states (:mod:`rl.branch`);
* semi-online: ``--groups-per-iteration`` recorded episodes replayed G times each (:mod:`rl.replay`),
  in more rounds the same way (no device: cheap);
* offline (AWR's start): none; the strategy trains on its replay buffer.

Iteration ``i`` draws its tasks, seeds and recorded episodes from a generator seeded by
``(seed, i)``, and every turn samples from its own stream (this seed, its episode's group and
member, the turn index), so a reply depends on neither batching, slot order nor the pool kind.
"""

from __future__ import annotations

import dataclasses
import random
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from emulators.suites import get_suite
from rl.branch import run_branched
from rl.loop import RolloutResult
from rl.patching import ModelExplainer
from rl.replay import run_semi_online
from rl.rollout import make_groups, run_rollout
from rl.settings import TRAIN_SEED_RANGE, WARM_START_TASKS

if TYPE_CHECKING:
    from guiagent.types import Trajectory
    from rl.config import TrainConfig
    from rl.plan import Phase
    from rl.strategies import Strategy

__all__ = ["Producer", "sample_tasks", "resolve_tasks", "warm_start_tasks"]


def sample_tasks(rng: random.Random, tasks: Sequence[str], n: int, weights: dict[str, float] | None = None
                 ) -> list[str]:
    """``n`` tasks drawn from ``tasks``: uniformly, or (``weights``: suite -> weight, a mixed run whose
    tasks read ``<suite>.<task>``) a suite by its weight (1 when not given), then a task of it."""
    if not weights:
        return [rng.choice(tasks) for _ in range(n)]
    by_suite: dict[str, list[str]] = {}
    for t in tasks:
        by_suite.setdefault(t.partition(".")[0], []).append(t)
    names = list(by_suite)
    w = [float(weights.get(s, 1.0)) for s in names]
    return [rng.choice(by_suite[rng.choices(names, w)[0]]) for _ in range(n)]


def resolve_tasks(cfg: "TrainConfig") -> list[str]:
    """The task ids to train (and evaluate) on; ``KeyError`` names an unknown suite or task.

    In ``--mode semi-online`` the tasks only filter the recorded episodes, which may come from
    elsewhere (an imported dataset): the held-out evaluation runs the ones the suite has.
    """
    ids = get_suite(cfg.env).task_ids()
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


def warm_start_tasks(cfg: "TrainConfig", tasks: Sequence[str]) -> list[str]:
    """The tasks the warm start's demonstrations cover: ``--warm-start-tasks``, each one of ``tasks`` (the
    run's), or all of ``tasks``; ``KeyError`` names one that the run does not train on."""
    chosen = cfg.warm_start.warm_start_tasks
    if not chosen:
        return list(tasks)
    stray = [t for t in chosen if t not in tasks]
    if stray:
        raise KeyError(f"--warm-start-tasks {stray} are not among the run's tasks; the warm start demonstrates "
                       "a part of --tasks")
    return list(dict.fromkeys(chosen))


class Producer:
    """``producer(iteration, strategy)`` -> that iteration's :class:`~rl.loop.RolloutResult`."""

    def __init__(self, cfg: "TrainConfig", tasks: Sequence[str], recorded: Sequence["Trajectory"], sampler: Any, *,
                 store: Any, run_id: str, judge: Any, pool: Callable[[], Any]):
        self.cfg, self.tasks, self.recorded, self.sampler = cfg, list(tasks), list(recorded), sampler
        self.store, self.run_id, self.judge, self.pool = store, run_id, judge, pool

    def __call__(self, iteration: int, phase: "Phase") -> RolloutResult:
        cfg, strategy = self.cfg, phase.strategy
        rng = random.Random(cfg.seed * 7919 + iteration)  # the data cursor: iteration i -> its groups
        torch.manual_seed(cfg.seed * 7919 + iteration)
        self.sampler.seed = cfg.seed * 7919 + iteration
        if phase.replays:
            return self._rounds(lambda rnd: self._replay(rng, iteration, rnd), strategy)
        if strategy.offline(iteration):  # awr's offline start: the replay buffer only
            return RolloutResult()
        return self._rounds(lambda rnd: self._online(rng, iteration, rnd), strategy)

    def _rounds(self, one: Callable[[int], RolloutResult], strategy: "Strategy") -> RolloutResult:
        """Rounds of rollouts until enough groups are informative (one round without the option)."""
        g = self.cfg.groups
        result = RolloutResult()
        for rnd in range(max(1, g.max_sampling_rounds) if g.min_informative_groups else 1):
            result.extend(one(rnd))
            if strategy.informative_groups(result) >= g.min_informative_groups:
                break
        return result

    def _online(self, rng: random.Random, iteration: int, rnd: int) -> RolloutResult:
        cfg = self.cfg
        picks = sample_tasks(rng, self.tasks, cfg.groups.groups_per_iteration, cfg.env_weights)
        seeds = [rng.randrange(TRAIN_SEED_RANGE) for _ in picks]
        branched = cfg.branch.branch_at != "none"
        requests = make_groups(picks, seeds, 1 if branched else cfg.groups.group_size,
                               max_steps=cfg.credit.max_steps(iteration), tag=f"i{iteration}r{rnd}",
                               targets=cfg.targets)
        if cfg.rename_targets:  # whole groups renamed (a group's members share their episode)
            renamed = {gid for gid in dict.fromkeys(r.group_id for r in requests) if rng.random() < cfg.rename_targets}
            requests = [dataclasses.replace(r, targets="renamed") if r.group_id in renamed else r for r in requests]
        if branched:  # a trunk (or a captured start) per (task, seed), G branches from its states
            return run_branched(self.pool(), self.sampler, requests, cfg.branch, group_size=cfg.groups.group_size,
                                rewards=cfg.rewards, store=self.store, run_id=self.run_id, suite=cfg.env,
                                judge=self.judge, min_batch_share=cfg.rollouts.min_batch_share)
        return run_rollout(self.pool(), self.sampler, requests, rewards=cfg.rewards, store=self.store,
                           run_id=self.run_id, suite=cfg.env, judge=self.judge,
                           min_batch_share=cfg.rollouts.min_batch_share)

    def _replay(self, rng: random.Random, iteration: int, rnd: int) -> RolloutResult:
        cfg, n = self.cfg, self.cfg.groups.groups_per_iteration
        explainer = ModelExplainer(self.sampler) if cfg.semi.patch.mode == "policy" else None
        picks = (rng.sample(self.recorded, n) if n <= len(self.recorded)
                 else [rng.choice(self.recorded) for _ in range(n)])
        return run_semi_online(self.sampler, picks, group_size=cfg.groups.group_size, patch=cfg.semi.patch,
                               rewards=cfg.semi.rewards, match=cfg.semi.match, explainer=explainer, store=self.store,
                               run_id=self.run_id, tag=f"i{iteration}r{rnd}")
