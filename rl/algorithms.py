"""The training algorithms as the configuration sees them: declared by name, torch-free.

An algorithm is declared here and implemented in ``rl/strategies/``. The declaration is what a
config needs before any tensor exists: the name ``--algo`` takes, what the algorithm learns from
(online rollouts only, sibling groups for ``--branch-at``, a PPO ratio), its defaults, the
settings it owns (whole sections of :class:`rl.config.TrainConfig`, such as ``gigpo`` or
``awr``, and single keys of shared ones) and the checks that refuse what it cannot honour. The
implementation (:class:`rl.strategies.base.Strategy`) subclasses its declaration, so the two
cannot disagree, and is imported only when a run builds it (:func:`rl.strategies.strategy_class`).
So ``import rl.config`` (the CLI's ``--help``, a config's validation) loads no torch.

:data:`ALGORITHMS` is the list of algorithms: ``TrainConfig.algo`` accepts its selectable names
(:func:`choices`) and no other; ``semi-online``, the credit of replayed iterations, is declared too
and picked by a run's phase schedule (:class:`rl.plan.Schedule`), never by ``--algo``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, ClassVar

from rl import settings as _settings

if TYPE_CHECKING:
    from rl.config import TrainConfig

__all__ = ["ALGORITHMS", "Algorithm", "algorithm", "choices", "declare"]

#: name -> declaration, filled by :func:`declare` (the ``--algo`` choices, in declaration order)
ALGORITHMS: dict[str, type["Algorithm"]] = {}

#: a section of TrainConfig -> its settings class (the sections an algorithm may own wholly)
_SECTIONS = {"gigpo": _settings.GiGPOSettings, "critic": _settings.CriticSettings, "awr": _settings.AWRSettings}


def declare(name: str, implementation: str) -> Callable[[type["Algorithm"]], type["Algorithm"]]:
    """Class decorator: declare an algorithm as ``--algo name``, implemented by the class at
    ``implementation`` (``"module:Class"``, a subclass of the declaration)."""
    def deco(cls: type["Algorithm"]) -> type["Algorithm"]:
        if name in ALGORITHMS:
            raise ValueError(f"an algorithm named {name!r} is declared already ({ALGORITHMS[name].__name__})")
        if ":" not in implementation:
            raise ValueError(f"{name}: the implementation is 'module:Class', got {implementation!r}")
        for section in cls.sections:
            if section not in _SECTIONS:
                raise ValueError(f"{name}: no settings section {section!r} (one of {', '.join(_SECTIONS)})")
        cls.name, cls.implementation = name, implementation
        ALGORITHMS[name] = cls
        return cls
    return deco


def choices() -> list[str]:
    """The names ``--algo`` takes: the selectable declared algorithms."""
    return [n for n, c in ALGORITHMS.items() if c.selectable]


def algorithm(name: str) -> type["Algorithm"]:
    """The declaration of ``--algo name``; ``ValueError`` names the choices."""
    declared = ALGORITHMS.get(name)
    if declared is None or not declared.selectable:
        raise ValueError(f"--algo {name!r}: choose one of {', '.join(choices())}")
    return declared


class Algorithm:
    """What the configuration knows of an algorithm (see the module docstring)."""

    name: ClassVar[str] = ""
    #: "module:Class" of the implementation (set by :func:`declare`)
    implementation: ClassVar[str] = ""
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
    #: the sections of TrainConfig this algorithm owns wholly (``gigpo``, ``critic``, ``awr``)
    sections: ClassVar[tuple[str, ...]] = ()
    #: single keys of shared sections that only some algorithms read, this one among them
    own_keys: ClassVar[tuple[str, ...]] = ()
    #: ``--algo`` may name it (False: the credit of a run's replayed iterations, which a run's phase
    #: schedule picks: rl.plan.Schedule)
    selectable: ClassVar[bool] = True

    @classmethod
    def own_settings(cls) -> tuple[str, ...]:
        """The settings (flat key paths) that only some algorithms read, this one among them: its
        sections' fields and its own keys. Another algorithm refuses them when the user gives them."""
        return (*(f.name for s in cls.sections for f in dataclasses.fields(_SECTIONS[s])), *cls.own_keys)

    @classmethod
    def check(cls, cfg: "TrainConfig") -> None:
        """Refuse settings this algorithm cannot honour (``ValueError``, one line saying how to fix it).
        (Whether ``--branch-at`` suits the mode is checked once the mode is known: ``TrainConfig``.)"""
        if cfg.branch.branch_at != "none" and not cls.branches:
            names = ", ".join(sorted(n for n, c in ALGORITHMS.items() if c.branches))
            raise ValueError(f"--branch-at samples sibling episodes for group advantages; --algo {cls.name} "
                             f"has none: use one of {names}")
        if cls.online_only and cfg.mode not in ("auto", "online"):
            raise ValueError(f"--algo {cls.name} trains on online rollouts: drop --mode {cfg.mode} "
                             "(awr reads recorded runs through --data without it)")
        if not cls.ratio:
            if cfg.credit.entropy_modulation:
                raise ValueError(f"--entropy-modulation needs the sampling log-probs of each reply; {cls.name} "
                                 "trains on replayed and demonstrated turns that have none")
            if cfg.update.rescore == "on":
                raise ValueError(f"--rescore on re-scores the PPO ratio's old log-probs; {cls.name}'s weighted "
                                 "regression has no ratio: drop it")

    @classmethod
    def unused(cls, cfg: "TrainConfig") -> dict[str, str]:
        """The settings this algorithm leaves unused under ``cfg``: key path (or a section's prefix,
        ``semi.``) -> why, in words that follow the flag. ``TrainConfig.check_given`` refuses the ones
        the user gave. By default: the other algorithms' own settings."""
        mine = set(cls.own_settings())
        out: dict[str, str] = {}
        for other in ALGORITHMS.values():
            for key in other.own_settings():
                if key not in mine and key not in out:
                    users = ", ".join(sorted(n for n, c in ALGORITHMS.items() if key in c.own_settings()))
                    out[key] = f"is for --algo {users}; --algo {cls.name} does not use it"
        return out


# ---- the declared algorithms ----------------------------------------------------------------------


@declare("grpo", "rl.strategies.group:GRPO")
class GRPO(Algorithm):
    """Std-normalised group advantages, token-mean loss."""

    branches = True
    normalize_std = True
    own_keys = ("advantage", "neg_adv_min_scale")

    @classmethod
    def unused(cls, cfg: "TrainConfig") -> dict[str, str]:
        out = super().unused(cfg)
        if cfg.credit.advantage == "episode":
            out["gamma"] = (f"discounts step returns; --algo {cls.name} with --advantage episode has none "
                            "(give --advantage step, or drop it)")
        return out


@declare("dr_grpo", "rl.strategies.group:DrGRPO")
class DrGRPO(GRPO):
    """GRPO without the std and with a constant-length loss normaliser (Dr. GRPO)."""

    normalize_std = False
    default_loss_agg = "seq_mean_token_sum_norm"


@declare("gigpo", "rl.strategies.gigpo:GiGPO")
class GiGPO(Algorithm):
    """Episode advantage plus a step advantage within anchor-state groups (same screen)."""

    branches = True
    online_only = True
    sections = ("gigpo",)


#: the value head's settings (--critic-*, --value-clip): ppo and awr have one
CRITIC_KEYS = ("critic_lr", "critic_epochs", "value_clip", "critic_features")


@declare("ppo", "rl.strategies.critic:PPO")
class PPO(Algorithm):
    """A turn-level critic on the policy's hidden state; GAE over turns."""

    online_only = True
    default_adv_norm = "batch"
    sections = ("critic",)

    @classmethod
    def check(cls, cfg: "TrainConfig") -> None:
        super().check(cfg)
        if cfg.critic.critic_warmup and cfg.critic.critic_warmup >= cfg.iterations:
            raise ValueError(f"--critic-warmup must be below --iterations ({cfg.iterations}): "
                             "the actor would never move")


@declare("awr", "rl.strategies.critic:AWR")
class AWR(Algorithm):
    """Advantage-weighted regression over a replay buffer (offline, then online)."""

    online_only = True
    ratio = False
    sections = ("awr",)
    own_keys = CRITIC_KEYS
    #: the PPO-clip loss's settings, which a weighted regression (no ratio) leaves unused; its KL term to the
    #: reference (--kl-coef and the settings of the reference and the estimator) it has
    RATIO_SETTINGS = ("clip_eps_low", "clip_eps_high", "max_kl_old", "rescore", "tis_cap", "entropy_modulation")

    @classmethod
    def check(cls, cfg: "TrainConfig") -> None:
        super().check(cfg)
        if cfg.awr.offline_iterations and not cfg.awr.replay_demos:
            raise ValueError("--offline-iterations trains on the recorded episodes of the replay buffer, which "
                             "--no-replay-demos leaves empty: drop one of them")

    @classmethod
    def unused(cls, cfg: "TrainConfig") -> dict[str, str]:
        out = super().unused(cfg)
        for key in cls.RATIO_SETTINGS:
            out.setdefault(key, "is a setting of the PPO-clip loss; awr's weighted regression has no ratio: "
                                "drop it")
        return out


@declare("semi-online", "rl.strategies.semi_online:SemiOnline")
class SemiOnline(Algorithm):
    """The credit of a replayed (semi-online) iteration: step- and episode-level group advantages over
    replays of recorded episodes; its loss and defaults are the run's --algo's (taken at run time)."""

    selectable = False
