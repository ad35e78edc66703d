"""The two algorithms with a turn-level critic (:class:`rl.critic.TurnCritic`).

* ``ppo``: a value head on the policy's hidden state at the last prompt token (of the frozen
  starting model by default, ``--critic-features start``), GAE over turns; the actor's PPO-clip
  loss per token, the critic's clipped value loss per turn, fitted after the actor.
* ``awr``: advantage-weighted regression ``w = min(exp((G − V)/β), w_max)`` over turns sampled
  from a replay buffer of stored episodes: it starts with the demonstrations of ``--data`` (or
  the warm start's), takes in every online episode, and is saved with each checkpoint as (run
  directory, episode id) pairs (the episodes themselves stay in their stores).
  ``--offline-iterations N`` trains on the buffer alone for the first N iterations.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch

from guiagent.store import EpisodeFilter, StoreReader
from rl import algorithms
from rl.advantages import awr_weights, gae, normalize_per_key, whiten
from rl.critic import TurnCritic
from rl.loop import TrainTurn
from rl.losses import PolicyLossStats, awr_loss
from rl.sft import SFTConfig, load_examples
from rl.strategies.base import Batch, Strategy
from rl.strategies.gigpo import episode_returns

if TYPE_CHECKING:
    from rl.config import TrainConfig
    from rl.loop import RolloutResult

__all__ = ["PPO", "AWR"]



class _WithCritic(Strategy):
    """A strategy with a value head: built from --critic-*, saved with each checkpoint."""

    def __init__(self, cfg: "TrainConfig", out: Path, state: Any, settings: Any = None):
        super().__init__(cfg, out, state, settings)
        c = cfg.critic
        self.critic = TurnCritic(lr=c.critic_lr, epochs=c.critic_epochs, clip_eps=c.value_clip or None, seed=cfg.seed)
        self._pending: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def features(self, policy: Any, chats: Sequence[Any]) -> torch.Tensor:
        return self.critic.features(self.encoder or policy, chats, self.cfg.update.micro_batch_size)

    def fit(self) -> dict[str, float]:
        """Fit the critic to the returns of the batch just built (after the actor's update)."""
        if self._pending is None:
            return {}
        feats, rets, values = self._pending
        self._pending = None
        return self.critic.fit(feats, rets, values)

    def save(self, folder: Path) -> None:
        self.critic.save(folder)

    def load(self, folder: Path) -> None:
        self.critic.load(folder)


class PPO(algorithms.PPO, _WithCritic):
    """A turn-level critic on the policy's hidden state; GAE over turns."""

    def warming_up(self, iteration: int) -> bool:
        return iteration < self.cfg.critic.critic_warmup

    def batch(self, result: "RolloutResult", policy: Any, iteration: int, store: Any = None) -> Batch:
        cfg = self.cfg
        self._pending = None
        trajs = [t for t in result.trajectories if t.status == "completed"]
        ep_ids = {t.episode_id for t in trajs}
        turns = sorted((u for u in result.turns if u.episode_id in ep_ids),
                       key=lambda u: (u.group_id, u.episode_id, u.step_index))
        if not turns:
            return self.finish([], torch.zeros(0), {"groups_kept": 0.0}, result, iteration, store)
        feats = self.features(policy, [u.inputs for u in turns])
        values = self.critic.values(feats).double()
        v_of = {(u.episode_id, u.step_index): float(v) for u, v in zip(turns, values)}
        adv_of: dict[tuple[str, int], float] = {}
        ret_of: dict[tuple[str, int], float] = {}
        for t in trajs:
            if not t.steps:
                continue
            r = torch.tensor([[s.reward for s in t.steps]], dtype=torch.float64)
            v = torch.tensor([[v_of.get((t.episode_id, s.index), 0.0) for s in t.steps]], dtype=torch.float64)
            # a truncated episode is bootstrapped with 0 too: the screen after its last step is not scored
            a, g = gae(r, v, torch.ones_like(r), gamma=cfg.credit.gamma, lam=cfg.critic.gae_lambda)
            for s, ai, gi in zip(t.steps, a[0].tolist(), g[0].tolist()):
                adv_of[(t.episode_id, s.index)], ret_of[(t.episode_id, s.index)] = ai, gi
        adv = torch.tensor([adv_of[(u.episode_id, u.step_index)] for u in turns], dtype=torch.float64)
        rets = torch.tensor([ret_of[(u.episode_id, u.step_index)] for u in turns], dtype=torch.float64)
        self._pending = (feats, rets.float(), values.float())
        rows = [{"value": float(v), "return": float(g), "detail": {"gae": float(a)}}
                for v, g, a in zip(values, rets, adv)]
        stats = {"groups": float(len({t.group_id for t in trajs})),
                 "groups_kept": float(len({u.group_id for u in turns}))}
        return self.finish(turns, adv, stats, result, iteration, store, rows)


class AWR(algorithms.AWR, _WithCritic):
    """Advantage-weighted regression over a replay buffer (offline, then online)."""

    #: the replay buffer's file in a checkpoint folder: [run directory, episode id] pairs, oldest first
    REPLAY_FILE = "replay.json"

    def __init__(self, cfg: "TrainConfig", out: Path, state: Any, settings: Any = None):
        super().__init__(cfg, out, state, settings)
        #: the replay buffer, as [run directory, episode id] pairs (the episodes stay in their stores)
        self.replay: list[list[str]] = []

    def save(self, folder: Path) -> None:
        super().save(folder)
        (Path(folder) / self.REPLAY_FILE).write_text(json.dumps(self.replay), encoding="utf-8")

    def load(self, folder: Path) -> None:
        """The critic and the replay buffer back from a checkpoint folder (one written before the buffer had a
        file of its own keeps it in the trainer state: taken from there); ``ValueError`` for a buffer file that
        is not [run directory, episode id] pairs."""
        super().load(folder)
        path = Path(folder) / self.REPLAY_FILE
        if not path.is_file():
            self.replay = [list(r) for r in getattr(self.state, "replay", [])]
            return
        try:
            pairs = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{path}: the replay buffer cannot be read ({e})") from None
        if not (isinstance(pairs, list) and all(isinstance(r, list) and len(r) == 2
                                                 and all(isinstance(x, str) for x in r) for r in pairs)):
            raise ValueError(f"{path}: the replay buffer is not a list of [run directory, episode id] pairs")
        self.replay = pairs

    def offline(self, iteration: int) -> bool:
        return iteration < self.cfg.awr.offline_iterations

    def seed_replay(self, data: Sequence[str]) -> int:
        """Put the completed episodes of the stores ``data`` into an empty replay buffer (none with
        ``--no-replay-demos``: the buffer then holds the run's own rollouts only)."""
        if self.replay or not self.cfg.awr.replay_demos:
            return 0
        for d in data:
            reader = StoreReader(d)
            try:
                for s in reader.iter_episodes(EpisodeFilter(status="completed")):
                    if not self.cfg.tasks or s.task_id in self.cfg.tasks:
                        self.replay.append([str(Path(d).resolve()), s.episode_id])
            finally:
                reader.close()
        self._trim()
        return len(self.replay)

    def _trim(self) -> None:
        over = len(self.replay) - self.cfg.awr.replay_size
        if over > 0:
            del self.replay[:over]  # FIFO: the oldest episodes leave first

    def _sample(self, iteration: int) -> list[Any]:
        """This iteration's episodes from the buffer, with pixels."""
        cfg = self.cfg
        rng = random.Random(cfg.seed * 7919 + iteration)
        k = min(cfg.awr.replay_episodes or cfg.groups.groups_per_iteration * cfg.groups.group_size,
                len(self.replay))
        by_dir: dict[str, list[str]] = {}
        for i in rng.sample(range(len(self.replay)), k):
            d, eid = self.replay[i]
            by_dir.setdefault(d, []).append(eid)
        trajs = []
        for d, eids in by_dir.items():
            reader = StoreReader(d)
            try:
                trajs += [reader.load_trajectory(e, pixels=True) for e in eids]
            finally:
                reader.close()
        return trajs

    def batch(self, result: "RolloutResult", policy: Any, iteration: int, store: Any = None) -> Batch:
        cfg = self.cfg
        assert self.settings is not None
        self._pending = None
        for t in result.trajectories:
            if t.status == "completed":
                self.replay.append([str(self.out.resolve()), t.episode_id])
        self._trim()
        if not self.replay:
            return Batch(stats={"replay": 0.0})
        trajs = self._sample(iteration)
        examples = load_examples(trajs, policy, self.settings.format(), self.settings.prompt_config(), SFTConfig())
        if not examples:
            return Batch(stats={"replay": float(len(self.replay))})
        returns = {t.episode_id: episode_returns(t, cfg.credit.gamma) for t in trajs}
        task_of = {t.episode_id: t.task.task_id for t in trajs}
        g = torch.tensor([returns[e.episode_id][e.step_index] for e in examples], dtype=torch.float64)
        feats = self.features(policy, [e.chat for e in examples])
        v = self.critic.values(feats).double()
        a = g - v
        if cfg.credit.adv_norm == "per-task":
            names = {n: i for i, n in enumerate(sorted(set(task_of.values())))}
            a = normalize_per_key(a, torch.tensor([names[task_of[e.episode_id]] for e in examples]))
        elif cfg.credit.adv_norm == "batch":
            a = whiten(a)
        w = awr_weights(a, beta=cfg.awr.awr_beta, max_weight=cfg.awr.awr_max_weight)
        if cfg.awr.awr_positive_returns:  # the actor imitates only the turns that led to reward
            w = w * (g > 0)
        turns = [TrainTurn(e.episode_id, e.episode_id, e.step_index, e.chat, tuple(e.completion_ids),
                           (0.0,) * len(e.completion_ids), policy.version, True) for e in examples]
        self._pending = (feats, g.float(), v.float())  # the critic fits every turn
        self.record(store, iteration, turns, a, [{"value": float(vi), "return": float(gi),
                                                  "detail": {"awr_weight": float(wi)}}
                                                 for vi, gi, wi in zip(v, g, w)])
        stats = {"replay": float(len(self.replay)), "replay_turns": float(len(turns)),
                 "adv_mean": float(a.mean()), "awr_weight_mean": float(w.mean())}
        if cfg.awr.awr_positive_returns:  # turns of weight 0 leave the actor's batch (its token mean: the kept ones)
            keep = (g > 0).nonzero().flatten().tolist()
            stats["awr_kept_turns"] = float(len(keep))
            turns, w = [turns[i] for i in keep], w[keep]
        return Batch(turns, w.float(), stats)

    def loss(self, logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, *,
             ref_logp: torch.Tensor | None, group_ids: torch.Tensor, kl_coef: float
             ) -> tuple[torch.Tensor, PolicyLossStats]:
        """Weighted regression: ``adv`` holds the weights exp(A/β); no ratio. With ``--kl-coef`` a KL term to
        the reference on the batch's tokens (:func:`rl.losses.awr_loss`)."""
        return awr_loss(logp, adv, mask, agg=self.loss_agg, max_len=self.cfg.sampling.max_new_tokens,
                        ref_logp=ref_logp, kl_coef=kl_coef, kl_kind=self.cfg.update.kl_kind)
