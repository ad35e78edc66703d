"""What every training algorithm's implementation is: a :class:`Strategy`.

An algorithm is declared in :mod:`rl.algorithms` (its ``--algo`` name, flags, settings and
checks: what a config reads, torch-free) and implemented here: a strategy subclasses its
declaration and owns what differs between algorithms at run time: which turns an iteration learns
from and their advantages (from the stored step rewards only), the loss of a micro-batch, and a
critic or a replay buffer where it has one. The trainer asks the strategy and never branches on
an algorithm's name; the maths are the pure functions of :mod:`rl.advantages` and :mod:`rl.losses`.

Adding an algorithm: declare it in :mod:`rl.algorithms` with ``@declare("name",
"rl.strategies.module:Class")`` (its settings section, flags and checks), then subclass the
declaration and :class:`Strategy` in that module of ``rl/strategies/`` (ARCHITECTURE.md, "Where to
add things"). ``--algo`` takes the declared names; the module is imported when a run builds it.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import torch

from rl.advantages import aem_modulation, normalize_per_key, whiten
from rl.algorithms import ALGORITHMS, Algorithm, algorithm
from rl.losses import PolicyLossStats, aggregate, ppo_clip_loss

if TYPE_CHECKING:
    from rl.config import TrainConfig
    from rl.loop import RolloutResult, TrainTurn

__all__ = ["Batch", "Strategy", "STRATEGIES", "strategy_class", "make_strategy"]

#: the declared algorithms (name -> declaration): :data:`rl.algorithms.ALGORITHMS`
STRATEGIES = ALGORITHMS


def strategy_class(name: str) -> type["Strategy"]:
    """The implementation of ``--algo name`` (its module imported now); ``ValueError`` names the choices."""
    declared = ALGORITHMS.get(name) or algorithm(name)  # a declared name (semi-online too), else --algo's one line
    module, _, cls_name = declared.implementation.partition(":")
    cls = getattr(importlib.import_module(module), cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, declared) and issubclass(cls, Strategy)):
        raise TypeError(f"--algo {name}: {declared.implementation} is not a Strategy subclassing its declaration "
                        f"{declared.__module__}.{declared.__qualname__}")
    return cls


@dataclass
class Batch:
    """An iteration's learner batch: turns, one advantage (or regression weight) per turn, metrics.
    Unpacks as ``turns, adv, stats``."""

    turns: list["TrainTurn"] = field(default_factory=list)
    adv: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    stats: dict[str, float] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.turns, self.adv, self.stats))


def make_strategy(cfg: "TrainConfig", out: Path | str, state: Any, settings: Any = None) -> "Strategy":
    """The strategy of ``cfg.algo``, ready for a run in ``out`` with trainer state ``state``."""
    return strategy_class(cfg.algo)(cfg, Path(out), state, settings)


class Strategy(Algorithm):
    """One training algorithm's implementation (see the module docstring); its flags, settings and
    checks are its declaration's (:class:`rl.algorithms.Algorithm`). Subclasses override what differs."""

    def __init__(self, cfg: "TrainConfig", out: Path, state: Any, settings: Any = None):
        self.cfg, self.out, self.state, self.settings = cfg, Path(out), state, settings
        #: a critic (ppo, awr); None otherwise
        self.critic: Any = None
        #: what a critic reads hidden states from (--critic-features start: the frozen starting model,
        #: set by the trainer); None: the learner itself
        self.encoder: Any = None

    # ---- the schedule ----------------------------------------------------------------------------

    def offline(self, iteration: int) -> bool:
        """Whether ``iteration`` trains without rollouts (AWR's offline start)."""
        return False

    def warming_up(self, iteration: int) -> bool:
        """Whether ``iteration`` fits the critic only (the actor stays put)."""
        return False

    def seed_replay(self, data: Sequence[str]) -> int:
        """Fill a replay buffer from recorded runs (AWR); how many episodes went in."""
        return 0

    def informative_groups(self, result: "RolloutResult") -> int:
        """Groups of ``result`` with a learning signal (dynamic sampling samples more until enough)."""
        return result.informative_groups()

    # ---- the batch and its loss ------------------------------------------------------------------

    def batch(self, result: "RolloutResult", policy: Any, iteration: int, store: Any = None) -> Batch:
        """The turns of ``result`` to learn from and their advantages; each turn's credit is stored."""
        raise NotImplementedError

    def shape(self, turns: Sequence["TrainTurn"], adv: torch.Tensor, result: "RolloutResult") -> torch.Tensor:
        """--adv-norm and --entropy-modulation on top of the method's advantages (float64 in and out)."""
        credit = self.cfg.credit
        norm = credit.adv_norm if credit.adv_norm != "auto" else self.default_adv_norm
        if norm == "per-task":
            adv = normalize_per_key(adv, tasks_of(turns, result))
        elif norm == "batch":
            adv = whiten(adv)
        if credit.entropy_modulation:
            surprisal = torch.tensor([-sum(u.old_logprobs) / max(len(u.old_logprobs), 1) for u in turns],
                                     dtype=torch.float64)
            gid = {g: i for i, g in enumerate(sorted({u.group_id for u in turns}))}
            adv = aem_modulation(adv, surprisal, torch.tensor([gid[u.group_id] for u in turns]),
                                 alpha=credit.entropy_modulation)
        return adv

    def finish(self, turns: list["TrainTurn"], adv: torch.Tensor, stats: dict[str, float], result: "RolloutResult",
               iteration: int, store: Any, rows: Sequence[dict[str, Any]] | None = None) -> Batch:
        """Shape the advantages, add their figures to ``stats``, record each turn's credit."""
        if turns:
            adv = self.shape(turns, adv.double(), result).float()
            stats.update({"adv_mean": float(adv.mean()), "adv_abs_mean": float(adv.abs().mean())})
        self.record(store, iteration, turns, adv, rows or [{} for _ in turns])
        return Batch(turns, adv, stats)

    def record(self, store: Any, iteration: int, turns: Sequence["TrainTurn"], adv: torch.Tensor,
               rows: Sequence[dict[str, Any]]) -> None:
        """Each turn's credit in the store (the web UI shows it beside its step)."""
        if store is None or not turns:
            return
        store.add_step_credit(
            [(u.episode_id, u.step_index, float(a), r.get("value"), r.get("return"), r.get("detail", {}))
             for u, a, r in zip(turns, adv.tolist(), rows)], iteration=iteration, algo=self.name)

    def loss(self, logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, *,
             ref_logp: torch.Tensor | None, group_ids: torch.Tensor, kl_coef: float
             ) -> tuple[torch.Tensor, PolicyLossStats]:
        """The loss of one micro-batch (``[B, T]`` log-probs, ``[B]`` advantages): PPO-clip by default."""
        u = self.cfg.update
        return ppo_clip_loss(logp, old_logp, adv, mask, clip_eps_low=u.clip_eps_low, clip_eps_high=u.clip_eps_high,
                             agg=self.loss_agg, ref_logp=ref_logp, kl_coef=kl_coef, kl_kind=u.kl_kind,
                             max_len=self.cfg.sampling.max_new_tokens, group_ids=group_ids)

    @property
    def loss_agg(self) -> str:
        return self.cfg.update.loss_agg or self.default_loss_agg

    def mean_entropy(self, entropy: torch.Tensor, mask: torch.Tensor, *, group_ids: torch.Tensor) -> torch.Tensor:
        """The entropy bonus's measure of one micro-batch (``--entropy-coef``): the per-token entropy
        ``[B, T]`` aggregated as the loss aggregates its tokens, so that it accumulates over
        micro-batches as the loss does."""
        return aggregate(entropy, mask, self.loss_agg, max_len=self.cfg.sampling.max_new_tokens, group_ids=group_ids)

    def fit(self) -> dict[str, float]:
        """After the actor's update: fit a critic to this iteration's returns (nothing by default)."""
        return {}

    # ---- checkpoints -----------------------------------------------------------------------------

    def save(self, folder: Path) -> None:
        """Write this strategy's own state (a critic) into a checkpoint folder."""

    def load(self, folder: Path) -> None:
        """Read it back from a checkpoint folder."""


def tasks_of(turns: Sequence["TrainTurn"], result: "RolloutResult") -> torch.Tensor:
    """``[N]`` task index of each turn (its episode's task, in sorted order; -1 when unknown)."""
    task_of = {t.episode_id: t.task.task_id for t in result.trajectories}
    names = {n: i for i, n in enumerate(sorted(set(task_of.values())))}
    return torch.tensor([names.get(task_of.get(u.episode_id, ""), -1) for u in turns])


def replace_section(cfg: Any, section: str, **changes: Any) -> Any:
    """``cfg`` with fields of one of its sections changed (the sections are frozen)."""
    return dataclasses.replace(cfg, **{section: dataclasses.replace(getattr(cfg, section), **changes)})
