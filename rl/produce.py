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
import logging
import random
import re
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from emulators.suites import get_suite
from guiagent.store.records import SUCCESS_THRESHOLD
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

__all__ = ["Producer", "sample_tasks", "learnability_weights", "resolve_tasks", "warm_start_tasks"]

log = logging.getLogger(__name__)


def sample_tasks(rng: random.Random, tasks: Sequence[str], n: int, weights: dict[str, float] | None = None,
                 task_weights: dict[str, float] | None = None) -> list[str]:
    """``n`` tasks drawn from ``tasks``: uniformly, or (``weights``: suite -> weight, a mixed run whose
    tasks read ``<suite>.<task>``) a suite by its weight (1 when not given), then a task of it; with
    ``task_weights`` (task -> weight, :func:`learnability_weights`) a task by its weight, within its suite;
    equal weights draw what uniform draws do, from the same stream (a learnability run's first iteration
    is a uniform run's)."""
    if task_weights is not None and len(set(task_weights.values())) <= 1:
        task_weights = None

    def pick(among: Sequence[str]) -> str:
        if task_weights is None:
            return rng.choice(among)
        return rng.choices(among, [task_weights[t] for t in among])[0]

    if not weights:
        return [pick(tasks) for _ in range(n)]
    by_suite: dict[str, list[str]] = {}
    for t in tasks:
        by_suite.setdefault(t.partition(".")[0], []).append(t)
    names = list(by_suite)
    w = [float(weights.get(s, 1.0)) for s in names]
    return [pick(by_suite[rng.choices(names, w)[0]]) for _ in range(n)]


#: an online group's id (:func:`rl.rollout.make_groups`): ``task:seed:i<iteration>r<round>-<k>``, and
#: ``@<step>`` after it for the branches from one of its states (:mod:`rl.branch`)
_ONLINE_GROUP = re.compile(r":i(\d+)r\d+-\d+(?:@\d+)?$")


def learnability_weights(outcomes: Sequence[tuple[str | None, str, str, float]], tasks: Sequence[str], iteration: int,
                         *, floor: float = 0.1, decay: float = 0.8) -> dict[str, float]:
    """Task -> the weight iteration ``iteration`` draws it by under ``--task-sampling learnability``.

    ``outcomes``: (group id, suite, task id, success) of the run's episodes (the store's
    :meth:`~guiagent.store.Store.grouped_outcomes`); those of online groups of earlier iterations
    count, an episode of iteration ``j`` by ``decay ** (iteration - 1 - j)``. A task's success rate
    ``p`` is the mean of its Beta(1, 1) posterior over them (1/2 before any episode), and its weight
    ``max(p (1 - p), floor / 4)``: most where outcomes still differ, ``floor`` of that where a task is
    always or never solved (the learnability score of Rutherford et al. 2024, "No Regrets").
    A mixed run's tasks read ``<suite>.<task>``, as its episodes' suite and task id make them."""
    known = set(tasks)
    wins = dict.fromkeys(tasks, 0.0)
    seen = dict.fromkeys(tasks, 0.0)
    for group_id, suite, task_id, success in outcomes:
        m = _ONLINE_GROUP.search(group_id or "")
        if m is None or int(m.group(1)) >= iteration:
            continue
        task = task_id if task_id in known else f"{suite}.{task_id}"
        if task not in known:
            continue
        w = decay ** (iteration - 1 - int(m.group(1)))
        seen[task] += w
        wins[task] += w * (success >= SUCCESS_THRESHOLD)
    out = {}
    for t in tasks:
        p = (wins[t] + 1.0) / (seen[t] + 2.0)
        out[t] = max(p * (1.0 - p), floor / 4.0)
    return out


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
        weights = self._task_weights(iteration)  # once an iteration: its rounds draw by the same weights
        return self._rounds(lambda rnd: self._online(rng, iteration, rnd, weights), strategy)

    def _rounds(self, one: Callable[[int], RolloutResult], strategy: "Strategy") -> RolloutResult:
        """Rounds of rollouts until enough groups are informative (one round without the option)."""
        g = self.cfg.groups
        result = RolloutResult()
        for rnd in range(max(1, g.max_sampling_rounds) if g.min_informative_groups else 1):
            result.extend(one(rnd))
            if strategy.informative_groups(result) >= g.min_informative_groups:
                break
        return result

    def _task_weights(self, iteration: int) -> dict[str, float] | None:
        """--task-sampling learnability: the iteration's task weights from the store (None: uniform draws)."""
        g = self.cfg.groups
        if g.task_sampling != "learnability":
            return None
        weights = learnability_weights(self.store.grouped_outcomes(self.run_id), self.tasks, iteration,
                                       floor=g.task_sampling_floor, decay=g.task_sampling_decay)
        total = sum(weights.values())
        ranked = sorted(weights, key=lambda t: -weights[t])
        log.info("iteration %d draws its tasks by learnability: most %s, least %s", iteration,
                 ", ".join(f"{t} {weights[t] / total:.0%}" for t in ranked[:3]),
                 ", ".join(f"{t} {weights[t] / total:.0%}" for t in ranked[-3:]))
        return weights

    def _online(self, rng: random.Random, iteration: int, rnd: int,
                task_weights: dict[str, float] | None = None) -> RolloutResult:
        cfg, g = self.cfg, self.cfg.groups
        picks = sample_tasks(rng, self.tasks, g.groups_per_iteration, cfg.env_weights, task_weights)
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
