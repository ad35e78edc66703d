"""GiGPO: GRPO's episode advantage plus a step advantage within anchor-state step groups.

Turns of one group that acted on the same screen form an anchor-state group (equal screenshot
hashes; with ``--anchor-match tolerant``, screens whose small thumbnails differ in at most
``--anchor-tolerance`` of their pixels, e.g. a clock or a cursor); within it each turn's
discounted return is compared with the others'. ``--step-weight`` is ω.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image

from guiagent.store import blob_hash
from rl import algorithms
from rl.advantages import anchor_groups, discounted_returns, gigpo_advantages, tolerant_anchor_groups
from rl.strategies.base import Batch, Strategy

if TYPE_CHECKING:
    from rl.loop import RolloutResult

__all__ = ["GiGPO", "state_id", "thumbnail", "episode_returns"]


def state_id(obs: Any) -> str:
    """The content hash of an observation's screenshot (what the store names its blob by)."""
    if obs.screenshot_ref:
        return str(obs.screenshot_ref)
    return blob_hash(obs.screenshot) if obs.screenshot is not None else f"size:{obs.width}x{obs.height}"


def thumbnail(png: bytes | None, size: tuple[int, int] = (96, 64)) -> torch.Tensor:
    """``[H, W]`` float grey thumbnail in [0, 1] (box-filtered) of image bytes; zeros without pixels."""
    if png is None:
        return torch.zeros(size[1], size[0])
    with Image.open(io.BytesIO(png)) as im:
        small = im.convert("L").resize(size, Image.Resampling.BOX)
    return torch.from_numpy(np.asarray(small, dtype=np.float32) / 255.0)


def episode_returns(traj: Any, gamma: float) -> dict[int, float]:
    """Step index -> discounted return from that step of one trajectory's stored rewards."""
    if not traj.steps:
        return {}
    r = torch.tensor([[s.reward for s in traj.steps]], dtype=torch.float64)
    return {s.index: float(g) for s, g in zip(traj.steps, discounted_returns(r, gamma=gamma)[0])}


class GiGPO(algorithms.GiGPO, Strategy):
    """Episode advantage + step advantage within anchor-state groups (same screen)."""

    def batch(self, result: "RolloutResult", policy: Any, iteration: int, store: Any = None) -> Batch:
        cfg, g = self.cfg, self.cfg.gigpo
        trajs = [t for t in result.trajectories if t.status == "completed" and t.group_id]
        ep_index = {t.episode_id: i for i, t in enumerate(trajs)}
        turns = sorted((u for u in result.turns if u.episode_id in ep_index), key=lambda u: u.group_id)
        if not turns:
            return self.finish([], torch.zeros(0), {"groups_kept": 0.0}, result, iteration, store)
        gids = {gid: i for i, gid in enumerate(sorted({t.group_id for t in trajs}))}
        returns = {t.episode_id: episode_returns(t, cfg.credit.gamma) for t in trajs}
        steps = {(t.episode_id, s.index): s for t in trajs for s in t.steps}
        obs = [steps[(u.episode_id, u.step_index)].observation for u in turns]
        turn_group = torch.tensor([gids[u.group_id] for u in turns])
        if g.anchor_match == "tolerant":
            sg = tolerant_anchor_groups(torch.stack([thumbnail(o.screenshot) for o in obs]), turn_group,
                                        tol=g.anchor_tolerance)
        else:
            names: dict[str, int] = {}
            sg = anchor_groups(torch.tensor([names.setdefault(state_id(o), len(names)) for o in obs]), turn_group)
        step_ret = torch.tensor([returns[u.episode_id][u.step_index] for u in turns], dtype=torch.float64)
        adv = gigpo_advantages(torch.tensor([t.total_reward for t in trajs], dtype=torch.float64),
                               torch.tensor([gids[t.group_id] for t in trajs]),
                               torch.tensor([ep_index[u.episode_id] for u in turns]), step_ret, sg,
                               step_weight=g.step_weight, normalize_std=g.gigpo_norm == "mean_std")
        sizes = torch.bincount(sg)[sg]
        rows = [{"return": float(r), "detail": {"anchor_group_size": int(n)}} for r, n in zip(step_ret, sizes)]
        if cfg.groups.filter_zero_variance:  # a group whose every turn got 0 carries no signal
            live = {int(gi) for gi, a in zip(turn_group, adv) if abs(float(a)) > 1e-9}
            keep = [i for i, gi in enumerate(turn_group.tolist()) if gi in live]
            turns, adv, rows = [turns[i] for i in keep], adv[keep], [rows[i] for i in keep]
        stats = {"groups": float(len(gids)), "groups_kept": float(len({u.group_id for u in turns})),
                 "anchor_shared": float((sizes > 1).double().mean()),
                 "anchor_group_size": float(sizes.double().mean())}
        return self.finish(turns, adv, stats, result, iteration, store, rows)
