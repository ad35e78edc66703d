"""What every training algorithm is: a :class:`Strategy`, registered by name.

A strategy owns what differs between algorithms: the checks of its settings, which turns an
iteration learns from and their advantages (from the stored step rewards only), the loss of a
micro-batch, and a critic or a replay buffer where it has one. The trainer asks the strategy
and never branches on an algorithm's name; the maths are the pure functions of
:mod:`rl.advantages` and :mod:`rl.losses`.

Adding an algorithm: subclass :class:`Strategy` in a module of ``rl/strategies/``, decorate it
with ``@register("name")``, import the module in ``rl/strategies/__init__.py`` and add the name
to ``TrainConfig.algo``'s choices (ARCHITECTURE.md, "Where to add things").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Sequence

import torch

from rl.advantages import aem_modulation, normalize_per_key, whiten
from rl.losses import PolicyLossStats, ppo_clip_loss

if TYPE_CHECKING:
    from rl.config import TrainConfig
    from rl.loop import RolloutResult, TrainTurn

__all__ = ["Batch", "Strategy", "register", "STRATEGIES", "strategy_class", "make_strategy"]

#: name -> strategy class, filled by :func:`register`
STRATEGIES: dict[str, type["Strategy"]] = {}


def register(name: str):
    """Class decorator: make a :class:`Strategy` available as ``--algo name``."""
    def deco(cls: type["Strategy"]) -> type["Strategy"]:
        if name in STRATEGIES:
            raise ValueError(f"a strategy named {name!r} is registered already ({STRATEGIES[name].__name__})")
        cls.name = name
        STRATEGIES[name] = cls
        return cls
    return deco


def strategy_class(name: str) -> type["Strategy"]:
    """The strategy registered as ``name``; ``KeyError`` names the choices."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KeyError(f"no training algorithm {name!r}; choose one of {', '.join(sorted(STRATEGIES))}") from None


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


class Strategy:
    """One training algorithm (see the module docstring). Subclasses override what differs."""

    name: ClassVar[str] = ""
    #: trains on online rollouts only (refuses --mode semi-online / mixed / staged)
    online_only: ClassVar[bool] = False
    #: the loss has a PPO ratio: it needs the sampling log-probs of every reply (re-scoring,
    #: entropy modulation and a KL term apply)
    ratio: ClassVar[bool] = True
    #: group advantages divided by the group's standard deviation (GRPO) or not (Dr. GRPO)
    normalize_std: ClassVar[bool] = False
    #: --adv-norm auto means this
    default_adv_norm: ClassVar[str] = "none"
    #: --loss-agg "" means this
    default_loss_agg: ClassVar[str] = "token_mean"
    #: learns from groups of sibling episodes, so --branch-at can sample them from one env state
    branches: ClassVar[bool] = False
    #: the settings (flat key paths) that only some algorithms read, this one among them: another
    #: algorithm refuses them when the user gives them (:meth:`unused`)
    own_settings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cfg: "TrainConfig", out: Path, state: Any, settings: Any = None):
        self.cfg, self.out, self.state, self.settings = cfg, Path(out), state, settings
        #: a critic (ppo, awr); None otherwise
        self.critic: Any = None
        #: what a critic reads hidden states from (--critic-features start: the frozen starting model,
        #: set by the trainer); None: the learner itself
        self.encoder: Any = None

    # ---- the config ------------------------------------------------------------------------------

    @classmethod
    def check(cls, cfg: "TrainConfig") -> None:
        """Refuse settings this algorithm cannot honour (``ValueError``, one line saying how to fix it).
        (Whether ``--branch-at`` suits the mode is checked once the mode is known: ``TrainConfig``.)"""
        if cfg.branch.branch_at != "none" and not cls.branches:
            names = ", ".join(sorted(n for n, c in STRATEGIES.items() if c.branches))
            raise ValueError(f"--branch-at samples sibling episodes for group advantages; --algo {cls.name} "
                             f"has none: use one of {names}")
        if cls.online_only and cfg.mode not in ("auto", "online"):
            raise ValueError(f"--algo {cls.name} trains on online rollouts: drop --mode {cfg.mode} "
                             "(awr reads recorded runs through --data without it)")
        if not cls.ratio:
            if cfg.credit.entropy_modulation:
                raise ValueError(f"--entropy-modulation needs the sampling log-probs of each reply; {cls.name} "
                                 "trains on replayed and demonstrated turns that have none")
            if cfg.update.kl_coef > 0:
                raise ValueError(f"--kl-coef is a term of the PPO-clip loss; {cls.name}'s weighted regression has "
                                 "none: drop it")
            if cfg.update.rescore == "on":
                raise ValueError(f"--rescore on re-scores the PPO ratio's old log-probs; {cls.name}'s weighted "
                                 "regression has no ratio: drop it")

    @classmethod
    def unused(cls, cfg: "TrainConfig") -> dict[str, str]:
        """The settings this algorithm leaves unused under ``cfg``: key path (or a section's prefix,
        ``semi.``) -> why, in words that follow the flag. ``TrainConfig.check_given`` refuses the ones
        the user gave. By default: the other algorithms' own settings."""
        out: dict[str, str] = {}
        for other in STRATEGIES.values():
            for key in other.own_settings:
                if key not in cls.own_settings and key not in out:
                    users = ", ".join(sorted(n for n, c in STRATEGIES.items() if key in c.own_settings))
                    out[key] = f"is for --algo {users}; --algo {cls.name} does not use it"
        return out

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
