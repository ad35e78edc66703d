"""Semi-online rollouts (after UI-S1, Lu et al., 2025): recorded episodes replayed without a device.

For each of G samples of a recorded episode, the policy acts at each recorded screen with *its
own* earlier replies in the history (not the recorded ones). The matcher (:mod:`rl.match`)
compares the policy's action with the recorded step's typed target:

- on a match, the sample goes on with the next recorded screen;
- on a mismatch, the patch step (:mod:`rl.patching`) puts the recorded action in the history in
  place of the policy's and goes on, up to ``budget`` patches an episode; after that the episode
  ends at the mismatch.

Each step's reward comes from format validity, kind match and match
(:func:`rl.advantages.semi_online_step_rewards`). :class:`ReplaySide` is the rollout loop's side
(:mod:`rl.loop`), so the episodes, turns, store writes and timers are the online rollouts'; the
G samples of every active episode are answered in one ``act_batch`` call a turn: no device and no
waiting on screens, which is what makes semi-online fast. The credit is
:class:`rl.strategies.SemiOnline`'s.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import torch

from guiagent.store import EpisodeFilter, StoreReader
from guiagent.store.schema import db_path
from guiagent.types import STEP_TARGET_KEY, ParseError, Step, StepTarget, Trajectory, action_to_dict
from rl.advantages import SemiOnlineRewardConfig, semi_online_step_rewards
from rl.agents import PolicyTurn, TurnPolicy
from rl.loop import Episode, RolloutLoop, RolloutResult, Started, StepOutcome
from rl.match import MatchConfig, match_action, step_target
from rl.patching import ExplainRequest, Explainer, PatchConfig, patched_step, response_text

__all__ = ["ReplayRequest", "ReplaySide", "run_semi_online", "load_recorded_episodes", "recorded_episodes",
           "replay_targets"]


@dataclass(frozen=True)
class ReplayRequest:
    """Sample ``member`` of the ``k``-th recorded episode of a replay call."""

    episode: Trajectory
    targets: tuple[StepTarget, ...]
    group_id: str
    key: str
    """the sample's sampling stream: ``semi:<tag>-<k>#<member>`` (not the recorded episode's id, which
    a re-recording changes), so one seed gives one replay of the same episodes"""
    member: int = 0

    @property
    def task_id(self) -> str:
        return self.episode.task.task_id

    @property
    def seed(self) -> int:
        return self.episode.task.seed

    max_steps = None


@dataclass
class _Cursor:
    """Where a sample is in its recorded episode."""

    at: int = 0
    patches: int = 0
    matched_prefix: int = 0
    """steps matched before the first mismatch"""
    mismatched: bool = False


def replay_targets(t: Trajectory) -> tuple[StepTarget, ...]:
    """The episode's step targets; ``ValueError`` names a step that cannot be replayed."""
    if not t.steps:
        raise ValueError(f"recorded episode {t.episode_id} has no steps")
    targets = []
    for s in t.steps:
        if s.action is None:
            raise ValueError(f"recorded episode {t.episode_id} step {s.index} has no action to compare with")
        if s.observation.screenshot is None:
            raise ValueError(f"recorded episode {t.episode_id} step {s.index} has no screenshot bytes "
                             "(load it with pixels=True)")
        try:
            targets.append(step_target(s))
        except ValueError as e:
            raise ValueError(f"recorded episode {t.episode_id}: {e}") from None
    return tuple(targets)


@dataclass
class ReplaySide:
    """The rollout loop's side over recorded episodes (see the module docstring)."""

    num_slots: int
    patch: PatchConfig = field(default_factory=PatchConfig)
    rewards: SemiOnlineRewardConfig = field(default_factory=SemiOnlineRewardConfig)
    match: MatchConfig = field(default_factory=MatchConfig)
    explainer: Explainer | None = None
    policy: Any = None
    """the policy whose action format prints a patched action's reply"""
    agent: str | None = None
    suite: str = ""

    def agent_name(self, policy: Any) -> str:
        return self.agent or f"semi:{getattr(policy, 'name', 'policy')}"

    def start(self, requests: Sequence[tuple[int, ReplayRequest]]) -> list[Started]:
        return [Started(r.episode.task, r.episode.steps[0].observation, _Cursor()) for _, r in requests]

    def step(self, episodes: Sequence[Episode], turns: Sequence[PolicyTurn]) -> list[StepOutcome]:
        outs, patches = [], []
        for ep, turn in zip(episodes, turns):
            out, patch = self._one(ep, turn)
            outs.append(out)
            if patch:
                patches.append((ep, out))
        if patches:  # all of the turn's patches at once: one explainer call
            self._apply_patches(patches)
        return outs

    def _one(self, ep: Episode, turn: PolicyTurn) -> tuple[StepOutcome, bool]:
        """Match one turn against its recorded step: the outcome, and whether a patch is due."""
        req, cur = ep.req, ep.state
        rec = req.episode.steps[cur.at]
        target = req.targets[cur.at]
        parse_failed = isinstance(turn.action, ParseError)
        m = match_action(turn.action, target, size=rec.observation.size, config=self.match,
                         marks=rec.observation.marks)
        # UI-S1 counts the format as valid when the reply has a thought; here a parsed reply, plus a
        # thought when the config asks for one
        format_ok = not parse_failed and (bool(turn.thought.strip()) or not self.rewards.format_requires_thought)
        r = float(semi_online_step_rewards(torch.tensor([format_ok]), torch.tensor([m.kind_match]),
                                           torch.tensor([m.matched]), self.rewards,
                                           distance=None if m.distance is None else torch.tensor([m.distance]))[0])
        meta: dict[str, Any] = {
            "matched": m.matched, "kind_match": m.kind_match, "exact": m.exact, "match_reason": m.reason,
            **({"distance": round(m.distance, 4)} if m.distance is not None else {}),
            "recorded_action": action_to_dict(rec.action), "recorded_index": rec.index,
            "recorded_episode": req.episode.episode_id, STEP_TARGET_KEY: target.to_dict(),
        }
        if "target_box" in rec.metadata:
            meta["target_box"] = list(rec.metadata["target_box"])
        if "tap_point" in rec.metadata:  # where the recorded element action was tapped (the web UI draws it there)
            meta["recorded_tap_point"] = rec.metadata["tap_point"]
        if turn.rejected:
            meta["rejected_replies"] = list(turn.rejected)
        last = cur.at == len(req.episode.steps) - 1
        will_patch = not m.matched and self.patch.allows(cur.patches)
        ends = (m.matched and last) or (not m.matched and (not will_patch or last))
        step = Step(index=len(ep.steps), observation=rec.observation,
                    action=None if parse_failed else turn.action,  # type: ignore[arg-type]
                    response=turn.response, thought=turn.thought,
                    parse_error=turn.action if parse_failed else None,  # type: ignore[arg-type]
                    reward=r, reward_parts={"semi_online": r}, terminated=ends,
                    policy_version=turn.policy_version, metadata=meta)
        out = StepOutcome(step, seen=step if m.matched else None)
        if m.matched and not cur.mismatched:
            cur.matched_prefix += 1
        elif not m.matched:
            cur.mismatched = True
            cur.patches += will_patch
        cur.at += 1
        if ends:
            n = len(req.episode.steps)
            out.end, out.success = "completed", 1.0 if cur.matched_prefix == n else 0.0
            out.metadata.update({"mode": "semi-online", "recorded_episode": req.episode.episode_id,
                                 "recorded_steps": n, "patches": cur.patches, "matched_prefix": cur.matched_prefix,
                                 "progress": cur.matched_prefix / n})
        else:
            out.next_observation = req.episode.steps[cur.at].observation
        return out, will_patch

    def _apply_patches(self, items: list[tuple[Episode, StepOutcome]]) -> None:
        """The recorded action in the history in place of the policy's; the stored step stays the
        policy's own reply (what it is trained on), marked patched with the thought that went in."""
        recs = [ep.req.episode.steps[ep.state.at - 1] for ep, _ in items]
        if self.patch.mode == "policy":
            assert self.explainer is not None
            thoughts = self.explainer([ExplainRequest(ep.req.episode.task.goal, tuple(ep.history), rec.observation,
                                                      rec.action) for (ep, _), rec in zip(items, recs)])
            if len(thoughts) != len(items):
                raise RuntimeError(f"the explainer returned {len(thoughts)} texts for {len(items)} requests")
        else:
            thoughts = [rec.thought if self.patch.mode == "recorded" else "" for rec in recs]
        for (ep, out), rec, thought in zip(items, recs, thoughts):
            step = out.step
            assert step is not None
            out.step = replace(step, metadata={**step.metadata, "patched": True, "patch_thought": thought})
            out.seen = patched_step(step, rec, thought, response_text(rec.action, thought, self.policy,
                                                                      rec.observation.size))


def run_semi_online(policy: TurnPolicy, episodes: Sequence[Trajectory], *, group_size: int = 1,
                    patch: PatchConfig = PatchConfig(), rewards: SemiOnlineRewardConfig = SemiOnlineRewardConfig(),
                    match: MatchConfig = MatchConfig(), explainer: Explainer | None = None, store: Any = None,
                    run_id: str | None = None, keep_turns: bool = True, agent_name: str | None = None,
                    tag: str | None = None) -> RolloutResult:
    """Replay every recorded episode ``group_size`` times with ``policy`` (a semi-online rollout).

    ``episodes``: recorded trajectories with screenshot bytes and an action on every step (the
    matcher compares with each step's :func:`~rl.match.step_target`). Every sample's steps are the
    policy's own replies at the recorded screens; each carries metadata ``matched``, ``kind_match``,
    ``exact``, ``match_reason``, ``recorded_action``, ``recorded_index``, and ``patched`` (with
    ``patch_thought``) when the recorded action was substituted in the history. The G samples of an
    episode share a group id: ``semi:<tag>-<k>:<recorded episode id>`` for the k-th episode of the
    call, with a ``tag`` (the trainer passes the iteration and sampling round; random without one).
    With ``store``/``run_id`` every sample is written as a completed episode.

    Returns the trajectories, one :class:`~rl.loop.TrainTurn` per policy turn, and timings;
    ``env_steps`` counts policy turns.
    """
    if group_size < 1:
        raise ValueError("group_size must be >= 1")
    if patch.mode == "policy" and explainer is None:
        raise ValueError("patch mode 'policy' needs an explainer (e.g. ModelExplainer(model_policy))")
    targets = [replay_targets(t) for t in episodes]
    prefix = tag if tag is not None else uuid.uuid4().hex[:8]
    requests = [ReplayRequest(t, targets[k], f"semi:{prefix}-{k}:{t.episode_id}", f"semi:{prefix}-{k}#{m}", m)
                for k, t in enumerate(episodes) for m in range(group_size)]
    side = ReplaySide(max(len(requests), 1), patch, rewards, match, explainer, policy, agent_name)
    return RolloutLoop(side, policy, store=store, run_id=run_id, keep_turns=keep_turns).run(requests)


def load_recorded_episodes(run_dir: Any, filter: Any = None, *, limit: int | None = None) -> list[Trajectory]:
    """Recorded episodes for :func:`run_semi_online` from a store (e.g. ``guiagent data import`` output).

    Loads pixels; skips episodes that are not ``completed`` or have a step without an action (a
    recorded parse error: nothing to compare with). ``filter``: an :class:`~guiagent.store.EpisodeFilter`.
    """
    reader = StoreReader(run_dir)
    out: list[Trajectory] = []
    try:
        for t in reader.iter_trajectories(filter or EpisodeFilter(), pixels=True):
            if t.status != "completed" or not t.steps or any(s.action is None for s in t.steps):
                continue
            out.append(t)
            if limit is not None and len(out) >= limit:
                break
    finally:
        reader.close()
    return out


def recorded_episodes(data: Sequence[str], tasks: Sequence[str] = ()) -> list[Trajectory]:
    """The successful recorded episodes of the stores ``data`` (of ``tasks`` when given), with pixels.

    ``KeyError`` (one line) names a folder without a store, or says that nothing is left to replay.
    """
    episodes: list[Trajectory] = []
    for d in data:
        if not db_path(Path(d)).is_file():
            raise KeyError(f"--data {d}: no trajectory store there (record one with guiagent eval --agent oracle "
                           "--out DIR, or import one with guiagent data import)")
        got = load_recorded_episodes(d, EpisodeFilter(outcome="success"))
        # by task and seed, not by the order the recording finished them in (a Ray pool's varies)
        got.sort(key=lambda t: (t.task.task_id, t.task.seed, t.task.goal, t.episode_id))
        episodes += [t for t in got if not tasks or t.task.task_id in tasks]
    if not episodes:
        raise KeyError(f"--data {' '.join(data)}: no successful recorded episode"
                       + (f" of {list(tasks)}" if tasks else "") + " to replay")
    return episodes
