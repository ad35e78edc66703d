"""Credit assignment per ``--algo``: from a rollout to the learner's turns and advantages.

One object, :class:`Credit`, owns what differs between the methods; rollout, store, update
and checkpoints are shared. The maths are the pure functions of :mod:`rl.advantages`.

* ``grpo`` / ``dr_grpo``: episode-level group advantages (:func:`rl.batching.compute_advantages`).
* ``gigpo``: GiGPO's episode advantage plus the step advantage within anchor-state step groups:
  turns of one group that acted on the same screen (equal screenshot hashes, or with
  ``--anchor-match tolerant`` screens differing in at most ``--anchor-tolerance`` of a small
  thumbnail's pixels, e.g. a clock or a cursor).
* ``ppo``: a turn-level critic (:mod:`rl.critic`) on the policy's hidden state; GAE over
  turns; the actor's PPO-clip loss per token, the critic's clipped value loss per turn.
* ``awr``: advantage-weighted regression ``w = min(exp((G − V)/β), w_max)`` over turns
  sampled from a replay buffer of stored episodes: it starts with the demonstrations of
  ``--data`` (or the warm start's), takes in every online episode, and is saved with each
  checkpoint as (run directory, episode id) pairs (the episodes themselves stay in their
  stores). ``--offline-iterations N`` trains on the buffer alone for the first N iterations.

Options for any algorithm: ``--adv-norm per-task`` (Dr. MAS's per-agent normalisation, per
task here), ``--entropy-modulation α`` (AEM's response-level modulation; not for awr, whose
demonstrations carry no sampling log-probs), ``--horizon-schedule`` (a step budget growing
over iterations, AgentGym-RL's ScalingInter). Every turn's credit (advantage, and the
critic's value and return where there is one) is stored per step (``Store.add_step_credit``),
so the web UI shows it beside each step of a replay.
"""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any, Sequence

import torch

from rl.config import TrainConfig

__all__ = ["Credit", "parse_horizon_schedule", "horizon_at", "state_id", "thumbnail"]


def parse_horizon_schedule(text: str) -> tuple[tuple[int, int], ...]:
    """``"0:3,4:5,8:0"`` → ``((0, 3), (4, 5), (8, 0))``: from iteration 0 a budget of 3 steps, from
    4 one of 5, from 8 the tasks' own (0). ``ValueError`` (one line) on anything else."""
    if not text.strip():
        return ()
    out = []
    for part in text.split(","):
        try:
            it, steps = (int(x) for x in part.split(":"))
        except ValueError:
            raise ValueError(f"--horizon-schedule {text!r}: give ITERATION:STEPS pairs, e.g. 0:3,4:5,8:0 "
                             "(STEPS 0: the task's own budget)") from None
        if it < 0 or steps < 0:
            raise ValueError(f"--horizon-schedule {text!r}: iterations and steps must be >= 0")
        out.append((it, steps))
    if [i for i, _ in out] != sorted({i for i, _ in out}) or out[0][0] != 0:
        raise ValueError(f"--horizon-schedule {text!r}: iterations must start at 0 and increase")
    return tuple(out)


def horizon_at(schedule: Sequence[tuple[int, int]], iteration: int) -> int | None:
    """The step budget of ``iteration`` under ``schedule`` (None: the tasks' own).

    >>> horizon_at(((0, 3), (4, 5), (8, 0)), 5)
    5
    """
    steps = 0
    for it, s in schedule:
        if iteration >= it:
            steps = s
    return steps or None


def state_id(obs: Any) -> str:
    """The content hash of an observation's screenshot (what the store names its blob by)."""
    from guiagent.store import blob_hash

    if obs.screenshot_ref:
        return str(obs.screenshot_ref)
    return blob_hash(obs.screenshot) if obs.screenshot is not None else f"size:{obs.width}x{obs.height}"


def thumbnail(png: bytes | None, size: tuple[int, int] = (96, 64)) -> torch.Tensor:
    """``[H, W]`` float grey thumbnail in [0, 1] (box-filtered) of image bytes; zeros without pixels."""
    if png is None:
        return torch.zeros(size[1], size[0])
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        small = im.convert("L").resize(size, Image.Resampling.BOX)
    import numpy as np

    return torch.from_numpy(np.asarray(small, dtype=np.float32) / 255.0)


def _episode_returns(traj: Any, gamma: float) -> dict[int, float]:
    from rl.advantages import discounted_returns

    if not traj.steps:
        return {}
    r = torch.tensor([[s.reward for s in traj.steps]], dtype=torch.float64)
    return {s.index: float(g) for s, g in zip(traj.steps, discounted_returns(r, gamma=gamma)[0])}


class Credit:
    """Turns and advantages of an iteration for ``cfg.algo``, the critic and the replay buffer."""

    def __init__(self, cfg: TrainConfig, out: Path, state: Any, settings: Any = None):
        from rl.critic import TurnCritic

        self.cfg, self.out, self.state, self.settings = cfg, Path(out), state, settings
        self.critic = (TurnCritic(lr=cfg.critic_lr, epochs=cfg.critic_epochs, clip_eps=cfg.value_clip or None,
                                  seed=cfg.seed) if cfg.algo in ("ppo", "awr") else None)
        self._pending: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        #: what the value head reads hidden states from (--critic-features start: the frozen starting
        #: model, set by the trainer); None: the learner itself
        self.encoder: Any = None
        self.schedule = parse_horizon_schedule(cfg.horizon_schedule)

    # ---- checkpoints ---------------------------------------------------------------------------

    def save(self, folder: Path) -> None:
        if self.critic is not None:
            self.critic.save(folder)

    def load(self, folder: Path) -> None:
        if self.critic is not None:
            self.critic.load(folder)

    # ---- the schedule ----------------------------------------------------------------------------

    def offline(self, iteration: int) -> bool:
        """Whether ``iteration`` trains on the replay buffer alone (AWR's offline start)."""
        return self.cfg.algo == "awr" and iteration < self.cfg.offline_iterations

    def warming_up(self, iteration: int) -> bool:
        """Whether ``iteration`` fits the critic only (``--critic-warmup``): the actor stays put."""
        return self.critic is not None and iteration < self.cfg.critic_warmup

    def max_steps(self, iteration: int) -> int | None:
        return horizon_at(self.schedule, iteration)

    def seed_replay(self, data: Sequence[str]) -> int:
        """Put the completed episodes of the stores ``data`` into an empty replay buffer (AWR's
        offline start); returns how many went in."""
        from guiagent.store import EpisodeFilter, StoreReader

        if self.cfg.algo != "awr" or self.state.replay:
            return 0
        for d in data:
            reader = StoreReader(d)
            try:
                for s in reader.iter_episodes(EpisodeFilter(status="completed")):
                    if not self.cfg.tasks or s.task_id in self.cfg.tasks:
                        self.state.replay.append([str(Path(d).resolve()), s.episode_id])
            finally:
                reader.close()
        self._trim()
        return len(self.state.replay)

    def _trim(self) -> None:
        over = len(self.state.replay) - self.cfg.replay_size
        if over > 0:
            del self.state.replay[:over]  # FIFO: the oldest episodes leave first

    # ---- the batch -------------------------------------------------------------------------------

    def batch(self, result: Any, policy: Any, iteration: int, store: Any = None
              ) -> tuple[list[Any], torch.Tensor, dict[str, float]]:
        """The learner's turns and their advantages (for awr: regression weights), and metrics;
        each turn's credit is recorded in ``store``."""
        from rl.batching import compute_advantages

        cfg = self.cfg
        self._pending = None
        if cfg.algo == "gigpo":
            turns, adv, stats, rows = self._gigpo(result)
        elif cfg.algo == "ppo":
            turns, adv, stats, rows = self._ppo(result, policy)
        elif cfg.algo == "awr":
            return self._awr(result, policy, iteration, store)
        else:
            turns, adv, stats = compute_advantages(cfg, result)
            rows = [{} for _ in turns]
        if turns:
            adv = self._shape(turns, adv.double(), result).float()
            stats.update({"adv_mean": float(adv.mean()), "adv_abs_mean": float(adv.abs().mean())})
        self._record(store, iteration, turns, adv, rows)
        return turns, adv, stats

    def _tasks_of(self, turns: Sequence[Any], result: Any) -> torch.Tensor:
        task_of = {t.episode_id: t.task.task_id for t in result.trajectories}
        names = {n: i for i, n in enumerate(sorted(set(task_of.values())))}
        return torch.tensor([names.get(task_of.get(u.episode_id, ""), -1) for u in turns])

    def _shape(self, turns: Sequence[Any], adv: torch.Tensor, result: Any) -> torch.Tensor:
        """--adv-norm and --entropy-modulation on top of the method's advantages."""
        from rl.advantages import aem_modulation, normalize_per_key, whiten

        cfg = self.cfg
        norm = cfg.adv_norm if cfg.adv_norm != "auto" else ("batch" if cfg.algo == "ppo" else "none")
        if norm == "per-task":
            adv = normalize_per_key(adv, self._tasks_of(turns, result))
        elif norm == "batch":
            adv = whiten(adv)
        if cfg.entropy_modulation:
            surprisal = torch.tensor([-sum(u.old_logprobs) / max(len(u.old_logprobs), 1) for u in turns],
                                     dtype=torch.float64)
            gid = {g: i for i, g in enumerate(sorted({u.group_id for u in turns}))}
            adv = aem_modulation(adv, surprisal, torch.tensor([gid[u.group_id] for u in turns]),
                                 alpha=cfg.entropy_modulation)
        return adv

    def _record(self, store: Any, iteration: int, turns: Sequence[Any], adv: torch.Tensor,
                rows: Sequence[dict[str, Any]]) -> None:
        if store is None or not turns:
            return
        store.add_step_credit(
            [(u.episode_id, u.step_index, float(a), r.get("value"), r.get("return"), r.get("detail", {}))
             for u, a, r in zip(turns, adv.tolist(), rows)], iteration=iteration, algo=self.cfg.algo)

    # ---- GiGPO -----------------------------------------------------------------------------------

    def _gigpo(self, result: Any) -> tuple[list[Any], torch.Tensor, dict[str, float], list[dict[str, Any]]]:
        from rl.advantages import anchor_groups, gigpo_advantages, tolerant_anchor_groups

        cfg = self.cfg
        trajs = [t for t in result.trajectories if t.status == "completed" and t.group_id]
        if not trajs:
            return [], torch.zeros(0), {"groups_kept": 0.0}, []
        ep_index = {t.episode_id: i for i, t in enumerate(trajs)}
        gids = {g: i for i, g in enumerate(sorted({t.group_id for t in trajs}))}
        turns = sorted((u for u in result.turns if u.episode_id in ep_index), key=lambda u: u.group_id)
        if not turns:
            return [], torch.zeros(0), {"groups_kept": 0.0}, []
        returns = {t.episode_id: _episode_returns(t, cfg.gamma) for t in trajs}
        steps = {(t.episode_id, s.index): s for t in trajs for s in t.steps}
        obs = [steps[(u.episode_id, u.step_index)].observation for u in turns]
        turn_group = torch.tensor([gids[u.group_id] for u in turns])
        if cfg.anchor_match == "tolerant":
            sg = tolerant_anchor_groups(torch.stack([thumbnail(o.screenshot) for o in obs]), turn_group,
                                        tol=cfg.anchor_tolerance)
        else:
            names: dict[str, int] = {}
            sg = anchor_groups(torch.tensor([names.setdefault(state_id(o), len(names)) for o in obs]), turn_group)
        step_ret = torch.tensor([returns[u.episode_id][u.step_index] for u in turns], dtype=torch.float64)
        adv = gigpo_advantages(torch.tensor([t.total_reward for t in trajs], dtype=torch.float64),
                               torch.tensor([gids[t.group_id] for t in trajs]),
                               torch.tensor([ep_index[u.episode_id] for u in turns]), step_ret, sg,
                               step_weight=cfg.step_weight, normalize_std=cfg.gigpo_norm == "mean_std")
        sizes = torch.bincount(sg)[sg]
        rows = [{"return": float(g), "detail": {"anchor_group_size": int(n)}} for g, n in zip(step_ret, sizes)]
        if cfg.filter_zero_variance:  # a group whose every turn got 0 carries no signal
            live = {int(g) for g, a in zip(turn_group, adv) if abs(float(a)) > 1e-9}
            keep = [i for i, g in enumerate(turn_group.tolist()) if g in live]
            turns, adv, rows = [turns[i] for i in keep], adv[keep], [rows[i] for i in keep]
        stats = {"groups": float(len(gids)), "groups_kept": float(len({u.group_id for u in turns})),
                 "anchor_shared": float((sizes > 1).double().mean()), "anchor_group_size": float(sizes.double().mean())}
        return turns, adv, stats, rows

    # ---- PPO with a turn-level critic ------------------------------------------------------------

    def _ppo(self, result: Any, policy: Any) -> tuple[list[Any], torch.Tensor, dict[str, float], list[dict[str, Any]]]:
        from rl.advantages import gae

        cfg = self.cfg
        assert self.critic is not None
        trajs = [t for t in result.trajectories if t.status == "completed"]
        ep_ids = {t.episode_id for t in trajs}
        turns = sorted((u for u in result.turns if u.episode_id in ep_ids), key=lambda u: (u.group_id, u.episode_id,
                                                                                           u.step_index))
        if not turns:
            return [], torch.zeros(0), {"groups_kept": 0.0}, []
        feats = self.critic.features(self.encoder or policy, [u.prompt for u in turns], cfg.micro_batch_size)
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
            a, g = gae(r, v, torch.ones_like(r), gamma=cfg.gamma, lam=cfg.gae_lambda)
            for s, ai, gi in zip(t.steps, a[0].tolist(), g[0].tolist()):
                adv_of[(t.episode_id, s.index)], ret_of[(t.episode_id, s.index)] = ai, gi
        adv = torch.tensor([adv_of[(u.episode_id, u.step_index)] for u in turns], dtype=torch.float64)
        rets = torch.tensor([ret_of[(u.episode_id, u.step_index)] for u in turns], dtype=torch.float64)
        self._pending = (feats, rets.float(), values.float())
        rows = [{"value": float(v), "return": float(g), "detail": {"gae": float(a)}}
                for v, g, a in zip(values, rets, adv)]
        return turns, adv, {"groups": float(len({t.group_id for t in trajs})),
                            "groups_kept": float(len({u.group_id for u in turns}))}, rows

    def fit(self) -> dict[str, float]:
        """After the policy's update: fit the critic to this iteration's returns (ppo, awr)."""
        if self.critic is None or self._pending is None:
            return {}
        feats, rets, values = self._pending
        self._pending = None
        return self.critic.fit(feats, rets, values)

    # ---- AWR over a replay buffer ----------------------------------------------------------------

    def _awr(self, result: Any, policy: Any, iteration: int, store: Any
             ) -> tuple[list[Any], torch.Tensor, dict[str, float]]:
        from guiagent.store import StoreReader
        from rl.advantages import awr_weights, normalize_per_key, whiten
        from rl.rollout import TrainTurn
        from rl.sft import SFTConfig, load_examples

        cfg = self.cfg
        assert self.critic is not None and self.settings is not None
        for t in result.trajectories:
            if t.status == "completed":
                self.state.replay.append([str(self.out.resolve()), t.episode_id])
        self._trim()
        if not self.state.replay:
            return [], torch.zeros(0), {"replay": 0.0}
        rng = random.Random(cfg.seed * 7919 + iteration)
        k = min(cfg.replay_episodes or cfg.groups_per_iteration * cfg.group_size, len(self.state.replay))
        picks = rng.sample(range(len(self.state.replay)), k)
        trajs = []
        by_dir: dict[str, list[str]] = {}
        for i in picks:
            d, eid = self.state.replay[i]
            by_dir.setdefault(d, []).append(eid)
        for d, eids in by_dir.items():
            reader = StoreReader(d)
            try:
                trajs += [reader.load_trajectory(e, pixels=True) for e in eids]
            finally:
                reader.close()
        examples = load_examples(trajs, policy, self.settings.format(), self.settings.prompt_config(), SFTConfig())
        if not examples:
            return [], torch.zeros(0), {"replay": float(len(self.state.replay))}
        returns = {t.episode_id: _episode_returns(t, cfg.gamma) for t in trajs}
        task_of = {t.episode_id: t.task.task_id for t in trajs}
        g = torch.tensor([returns[e.episode_id][e.step_index] for e in examples], dtype=torch.float64)
        feats = self.critic.features(self.encoder or policy, [e.chat for e in examples], cfg.micro_batch_size)
        v = self.critic.values(feats).double()
        a = g - v
        if cfg.adv_norm == "per-task":
            names = {n: i for i, n in enumerate(sorted(set(task_of.values())))}
            a = normalize_per_key(a, torch.tensor([names[task_of[e.episode_id]] for e in examples]))
        elif cfg.adv_norm == "batch":
            a = whiten(a)
        w = awr_weights(a, beta=cfg.awr_beta, max_weight=cfg.awr_max_weight)
        turns = [TrainTurn(e.episode_id, e.episode_id, e.step_index, e.chat, tuple(e.completion_ids),
                           (0.0,) * len(e.completion_ids), float(gi), policy.version, True)
                 for e, gi in zip(examples, g.tolist())]
        self._pending = (feats, g.float(), v.float())
        self._record(store, iteration, turns, a, [{"value": float(vi), "return": float(gi),
                                                   "detail": {"awr_weight": float(wi)}}
                                                  for vi, gi, wi in zip(v, g, w)])
        return turns, w.float(), {"replay": float(len(self.state.replay)), "replay_turns": float(len(turns)),
                                  "adv_mean": float(a.mean()), "awr_weight_mean": float(w.mean())}
