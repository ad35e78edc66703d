"""Branched rollouts: G continuations sampled from the very same env state (``--branch-at``).

A GRPO group compares G episodes that start from one seed; every later step is compared only by
guess (GiGPO's screenshot hashes). Branching makes the siblings real: the env's state is
captured (:meth:`emulators.pool_types.EnvPool.snapshot`: the webapps session and page, a
MiniWoB++ episode's actions replayed, an emulator snapshot) and restored into G slots, and each
slot samples its own continuation. The G branches of one state form one group, so a group's
advantage compares actions taken from exactly the same screen and task state::

    first      one reset per (task, seed), snapshotted at once; its G branches are the group
               (GRPO's groups, from one captured start instead of G resets)
    every      a trunk episode is sampled first (its turns are not trained: it is how the states
               are reached); each of its states before a step is a branch point, up to its
               first unparseable reply (:func:`choose_points`)
    uncertain  as every, but only the --branch-points states per trunk where the trunk's reply was
               least certain (highest mean surprisal per sampled token)

A branch episode is a new episode in the store: its steps are the continuation only, the trunk's
steps before the branch point are its history (what the policy sees: its prompts number the
branch's steps on from the trunk's, as a plain rollout's would), and its metadata names the
trunk (``branch_of``, ``branch_step``), so the store keeps the tree and the web UI shows an
episode's branches side by side. Its reward starts from the trunk's milestones at the branch
point, so progress is not paid twice. A state that cannot be captured (an env that cannot
snapshot; ``SnapshotOutput.error`` says why) gives no branch; an iteration without any branch
point raises :class:`BranchError` with the reason.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from emulators.pool_types import EnvPool, ResetRequest
from guiagent.types import Step
from judge.compose import RewardConfig
from rl.agents import PolicyTurn, TurnPolicy
from rl.loop import Episode, RolloutLoop, RolloutResult
from rl.rollout import EpisodeRequest, LiveSide

if TYPE_CHECKING:
    from judge.settings import RewardJudge
    from rl.settings import BranchSettings

__all__ = ["BranchRequest", "BranchPoint", "BranchError", "TrunkSide", "run_branched", "surprisal",
           "choose_points"]


class BranchError(RuntimeError):
    """No state of an iteration could be branched from (the reason of the first refusal)."""


@dataclass(frozen=True)
class BranchRequest(EpisodeRequest):
    """An episode that continues ``state`` (an :class:`~emulators.snapshot.EnvState`) instead of
    starting from a reset; ``prefix`` is the trunk's steps before it (the policy's history)."""

    parent: str = ""
    """the trunk episode's id ("" for a start state: no trunk)"""
    branch_step: int = 0

    @property
    def metadata(self) -> dict[str, Any]:
        return {**super().metadata, "branch_of": self.parent or None, "branch_step": self.branch_step,
                "branch_group": self.group_id}


@dataclass(frozen=True)
class BranchPoint:
    """A captured state of a trunk episode, before its step ``step``."""

    request: EpisodeRequest
    episode_id: str
    step: int
    state: Any
    history: tuple[Step, ...]
    surprisal: float


def surprisal(turn: PolicyTurn) -> float:
    """Mean negative log-probability of the reply's sampled tokens (0 without log-probs)."""
    lps = [lp for lp in turn.logprobs if math.isfinite(lp)]
    return -sum(lps) / len(lps) if lps else 0.0


class TrunkSide(LiveSide):
    """A :class:`~rl.rollout.LiveSide` that captures each episode's state before each step."""

    def __init__(self, pool: EnvPool, rewards: RewardConfig | None = None, suite: str = ""):
        super().__init__(pool, rewards, suite)
        self.points: list[BranchPoint] = []
        self.refusals: dict[str, int] = {}

    def before_step(self, episodes: Sequence[Episode], turns: Sequence[PolicyTurn]) -> None:
        snaps = self.pool.snapshot([ep.slot for ep in episodes])
        for ep, turn, snap in zip(episodes, turns, snaps):
            if snap.state is None:
                _count(self.refusals, snap.error or "no state")
                continue
            self.points.append(BranchPoint(ep.req, ep.episode_id, len(ep.steps), snap.state, tuple(ep.history),
                                           surprisal(turn)))


def choose_points(points: Sequence[BranchPoint], completed: set[str], rule: str, per_trunk: int
                  ) -> list[BranchPoint]:
    """The branch points of completed trunks: all of them (``every``), or each trunk's
    ``per_trunk`` most uncertain ones (``uncertain``; ties: the earlier step), in step order.

    A state the trunk reached through an unparseable reply is no branch point: its history holds
    text the policy did not mean as an action, which its G branches would read and often copy,
    so their group would measure the garbage in the prompt rather than the actions taken (and,
    with ``every``, spend G continuations on each state of a derailed trunk's tail)."""
    by_trunk: dict[str, list[BranchPoint]] = {}
    for p in points:
        if p.episode_id in completed and not any(s.parse_error is not None for s in p.history):
            by_trunk.setdefault(p.episode_id, []).append(p)
    out: list[BranchPoint] = []
    for pts in by_trunk.values():
        if rule == "uncertain":
            pts = sorted(sorted(pts, key=lambda p: (-p.surprisal, p.step))[:per_trunk], key=lambda p: p.step)
        out += sorted(pts, key=lambda p: p.step)
    return out


def _start_points(pool: EnvPool, requests: Sequence[EpisodeRequest]) -> tuple[list[BranchPoint], dict[str, int]]:
    """``first``: each request reset and captured at once (no step taken), in batches of the pool's slots."""
    points: list[BranchPoint] = []
    refusals: dict[str, int] = {}
    for i in range(0, len(requests), pool.num_slots):
        batch = list(requests[i:i + pool.num_slots])
        outs = pool.reset([ResetRequest(s, r.task_id, r.seed, r.max_steps, targets=r.targets)
                           for s, r in enumerate(batch)])
        live = []
        for s, (r, o) in enumerate(zip(batch, outs)):
            if o.worker_error is not None:
                _count(refusals, f"reset failed: {o.worker_error}")
            elif not o.done:
                live.append((s, r))
        for (s, r), snap in zip(live, pool.snapshot([s for s, _ in live]) if live else []):
            if snap.state is None:
                _count(refusals, snap.error or "no state")
            else:
                points.append(BranchPoint(r, "", 0, snap.state, (), 0.0))
    return points, refusals


def _count(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def branch_requests(points: Sequence[BranchPoint], group_size: int) -> list[BranchRequest]:
    """G requests per branch point, one group each (``<trunk group>@<step>``)."""
    out = []
    for p in points:
        gid = f"{(p.request.group_id or p.request.key).removesuffix(':trunk')}@{p.step}"
        out += [BranchRequest(p.request.task_id, p.request.seed, gid, p.request.max_steps, member=m,
                              state=p.state, prefix=p.history, parent=p.episode_id, branch_step=p.step)
                for m in range(group_size)]
    return out


def run_branched(pool: EnvPool, policy: TurnPolicy, requests: Sequence[EpisodeRequest], settings: "BranchSettings",
                 *, group_size: int, rewards: RewardConfig | None = None, store: Any = None,
                 run_id: str | None = None, suite: str = "", judge: "RewardJudge | None" = None,
                 min_batch_share: float = 1.0) -> RolloutResult:
    """One round of branched rollouts: a trunk (or a captured start) per request, then
    ``group_size`` branches from each chosen state (see the module docstring).

    ``requests`` are one per (task, seed) (``make_groups(..., group_size=1)``). The result holds
    the trunks' trajectories (not their turns) and the branches' trajectories and turns.
    ``min_batch_share`` < 1: trunks and branches run on partial batches (:class:`rl.loop.RolloutLoop`;
    a trunk's state is still captured right before each of its steps).
    """
    rule = settings.branch_at
    result = RolloutResult()
    if rule == "first":
        points, refusals = _start_points(pool, requests)
    else:
        side = TrunkSide(pool, rewards, suite)
        trunks = RolloutLoop(side, policy, store=store, run_id=run_id, keep_turns=False, judge=judge,
                             rewards=rewards, min_batch_share=min_batch_share).run([dataclasses.replace(r, group_id=r.group_id + ":trunk")
                                                   for r in requests])
        # a trunk is how the states were reached, not a group to learn from (it keeps its group id
        # in the store, where the web UI finds its branches by it)
        trunks.trajectories = [dataclasses.replace(t, group_id=None) for t in trunks.trajectories]
        result.extend(trunks)
        completed = {t.episode_id for t in trunks.trajectories if t.status == "completed"}
        points, refusals = choose_points(side.points, completed, rule, settings.branch_points), side.refusals
    if not points:
        why = max(refusals, key=lambda k: refusals[k]) if refusals else "every trunk episode was aborted"
        raise BranchError(f"--branch-at {rule}: no state to branch from in this round ({why})")
    side = LiveSide(pool, rewards, suite)
    result.extend(RolloutLoop(side, policy, store=store, run_id=run_id, judge=judge, rewards=rewards,
                              min_batch_share=min_batch_share).run(branch_requests(points, group_size)))
    return result
