"""Semi-online RL on recorded trajectories (after UI-S1, Lu et al., 2025).

A recorded episode is replayed without a device: for each of G samples, the policy
acts at each recorded screen with *its own* earlier replies in the history (not the
recorded ones). A matcher (:func:`match_action`) compares the policy's action with
the recorded one:

- on a match, the sample goes on with the next recorded screen;
- on a mismatch, the patch module (:class:`PatchConfig`) puts the recorded action in
  the history in place of the policy's and goes on, up to ``budget`` patches per
  episode; after that the episode ends at the mismatch.

Each policy turn is a :class:`~rl.rollout.TrainTurn` (the policy's own completion,
never the substituted one) with a per-step reward from format validity, kind match
and match (:func:`rl.advantages.semi_online_step_rewards`); the turns come back in
the same :class:`~rl.rollout.RolloutResult` as the online driver's, so the trainer's
update runs unchanged. :func:`semi_online_turn_advantages` computes UI-S1's
step + episode group advantages for them.

The G samples of every active episode are answered in one ``act_batch`` call per
turn index: no device, no waiting on screens, which is what makes semi-online fast.

The matcher and its rules live in :mod:`rl.match` (re-exported here): each recorded step's
typed :class:`~guiagent.types.StepTarget` against the policy's action.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal, Mapping, Sequence

import torch

from guiagent.types import (
    STEP_TARGET_KEY,
    Action,
    Observation,
    ParseError,
    Step,
    Trajectory,
    action_to_dict,
)
from rl.advantages import (
    SemiOnlineRewardConfig,
    semi_online_advantages,
    semi_online_returns,
    semi_online_step_rewards,
)
from rl.agents import PolicyTurn, TurnContext, TurnPolicy
from rl.match import (  # the matcher lives in rl.match; these names stay importable from here
    MatchConfig,
    MatchResult,
    content_direction,
    match_action,
    step_target,
    text_similarity,
)
from rl.rollout import RolloutResult, TrainTurn

__all__ = [
    "MatchConfig",
    "MatchResult",
    "match_action",
    "text_similarity",
    "content_direction",
    "step_target",
    "PatchConfig",
    "PATCH_MODES",
    "Explainer",
    "ModelExplainer",
    "patched_step",
    "run_semi_online",
    "load_recorded_episodes",
    "semi_online_turn_advantages",
    "SOPResult",
    "SOPTaskResult",
    "EpisodeOutcome",
    "sop_from_outcomes",
    "semi_online_eval",
]

# -- patches ----------------------------------------------------------------------------------

PATCH_MODES = ("none", "recorded", "policy")


@dataclass(frozen=True)
class PatchConfig:
    """What a mismatch does: substitute the recorded action, at most ``budget`` times an episode.

    ``mode`` picks the thought that goes with the substituted action in the history:
    ``none`` (no thought), ``recorded`` (the recorded step's thought) or ``policy`` (the
    policy explains the given action; needs an :class:`Explainer`). ``budget=0``:
    the first mismatch ends the episode; ``budget=-1``: no limit.
    """

    mode: Literal["none", "recorded", "policy"] = "recorded"
    budget: int = 2  # UI-S1's training script: PATCH_THRESHOLD=2

    def __post_init__(self) -> None:
        if self.mode not in PATCH_MODES:
            raise ValueError(f"patch mode must be one of {PATCH_MODES}, got {self.mode!r}")
        if self.budget < -1:
            raise ValueError("patch budget must be >= 0, or -1 for no limit")

    def allows(self, used: int) -> bool:
        return self.budget == -1 or used < self.budget


@dataclass(frozen=True)
class ExplainRequest:
    """The policy is asked why ``action`` is the right next step at ``observation``."""

    goal: str
    history: tuple[Step, ...]
    observation: Observation
    action: Action


Explainer = Callable[[Sequence[ExplainRequest]], list[str]]

EXPLAIN_PROMPT = (
    "You operate a device to reach a goal. You are shown the goal, the steps so far, the current "
    "screenshot and the action that was taken next. In one or two sentences, explain why this "
    "action is the right next step. Reply with the explanation only."
)


class ModelExplainer:
    """The ``policy`` patch variant: a :class:`rl.agents.ModelAgent`'s model explains a given action.

    All requests of a turn go to the model in one generation call (greedy, short).
    """

    def __init__(self, agent: Any, *, max_new_tokens: int = 64):
        self.agent = agent
        self.max_new_tokens = max_new_tokens

    def __call__(self, requests: Sequence[ExplainRequest]) -> list[str]:
        from guiagent.policy import SamplingParams
        from guiagent.policy.base import message
        from rl.prompting import summarize_step

        if not requests:
            return []
        agent = self.agent
        chats = []
        for r in requests:
            parts: list[Any] = [f"Goal: {r.goal}"]
            if r.history:
                parts.append(
                    "Previous steps:\n"
                    + "\n".join(summarize_step(s, agent.format, agent.prompt_config) for s in r.history)
                )
            parts += [
                "Current screenshot:",
                r.observation.screenshot,
                "Action taken: " + agent.format.format(r.action, r.observation.size).strip(),
            ]
            chats.append([{"role": "system", "content": EXPLAIN_PROMPT}, message("user", *parts)])
        gens = agent.generate(
            chats, SamplingParams(max_new_tokens=self.max_new_tokens, temperature=0.0)
        )
        return [g.text.strip() for g in gens]


def _response_text(action: Action, thought: str, policy: Any, size: tuple[int, int]) -> str:
    """The reply the policy would have written for ``action`` (its format when it has one)."""
    fmt = getattr(policy, "format", None)
    if fmt is not None:
        try:
            return fmt.format(action, size, thought)
        except Exception:  # a format that cannot print this kind: fall back to JSON
            pass
    import json

    return json.dumps(
        {"thought": thought, "action": action_to_dict(action)} if thought else action_to_dict(action)
    )


def patched_step(policy_step: Step, recorded: Step, thought: str, response: str) -> Step:
    """The history entry that replaces a mismatched policy step: the recorded action, the given thought."""
    return replace(policy_step, action=recorded.action, thought=thought, response=response, parse_error=None)


# -- the driver -------------------------------------------------------------------------------


@dataclass
class _Sample:
    episode: Trajectory
    group_id: str
    episode_id: str
    targets: Sequence[Any] = ()  # the recorded steps' StepTargets
    cursor: int = 0
    patches: int = 0
    done: bool = False
    history: list[Step] = field(default_factory=list)  # what the policy sees next turn
    steps: list[Step] = field(default_factory=list)  # what is stored: the policy's own steps
    turns: list[TrainTurn] = field(default_factory=list)
    matched_prefix: int = 0  # steps matched before the first mismatch
    first_mismatch: bool = False
    written: bool = False


def _check_episode(t: Trajectory) -> list[Any]:
    """The episode's step targets; ``ValueError`` names a step that cannot be replayed."""
    if not t.steps:
        raise ValueError(f"recorded episode {t.episode_id} has no steps")
    targets = []
    for s in t.steps:
        if s.action is None:
            raise ValueError(f"recorded episode {t.episode_id} step {s.index} has no action to compare with")
        if s.observation.screenshot is None:
            raise ValueError(
                f"recorded episode {t.episode_id} step {s.index} has no screenshot bytes "
                "(load it with pixels=True)"
            )
        try:
            targets.append(step_target(s))
        except ValueError as e:
            raise ValueError(f"recorded episode {t.episode_id}: {e}") from None
    return targets


def load_recorded_episodes(run_dir: Any, filter: Any = None, *, limit: int | None = None) -> list[Trajectory]:
    """Recorded episodes for :func:`run_semi_online` from a store (e.g. ``guiagent data import`` output).

    Loads pixels; skips episodes that are not ``completed`` or have a step without an
    action (a recorded parse error: nothing to compare with). ``filter``: an
    :class:`~guiagent.store.EpisodeFilter`.
    """
    from guiagent.store import EpisodeFilter, StoreReader

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
    from pathlib import Path

    from guiagent.store import EpisodeFilter
    from guiagent.store.schema import db_path

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


def run_semi_online(
    policy: TurnPolicy,
    episodes: Sequence[Trajectory],
    *,
    group_size: int = 1,
    patch: PatchConfig = PatchConfig(),
    rewards: SemiOnlineRewardConfig = SemiOnlineRewardConfig(),
    match: MatchConfig = MatchConfig(),
    explainer: Explainer | None = None,
    store: Any = None,
    run_id: str | None = None,
    keep_turns: bool = True,
    agent_name: str | None = None,
    tag: str | None = None,
) -> RolloutResult:
    """Replay every recorded episode ``group_size`` times with ``policy`` (semi-online rollout).

    ``episodes``: recorded trajectories with screenshot bytes and an action on every
    step (the matcher compares with each step's :func:`~rl.match.step_target`).
    Every sample's steps are the policy's own replies at the recorded screens; each
    carries metadata ``matched``, ``kind_match``, ``exact``, ``match_reason``,
    ``recorded_action``, ``recorded_index``, and ``patched`` (with ``patch_thought``)
    when the recorded action was substituted in the history. The G samples of an
    episode share a group id: ``semi:<tag>-<k>:<recorded episode id>`` for the k-th episode of the
    call, with a ``tag`` (the trainer passes the iteration and sampling round; random without one);
    each sample's sampling stream is named ``semi:<tag>-<k>#<member>`` (not after the recorded
    episode's id, which a re-recording changes), so one seed gives one replay of the same episodes. With ``store``/``run_id`` every sample is written as a completed episode.

    Returns the trajectories, one :class:`TrainTurn` per policy turn (reward: the
    step reward), and timings; ``env_steps`` counts policy turns.
    """
    if group_size < 1:
        raise ValueError("group_size must be >= 1")
    if patch.mode == "policy" and explainer is None:
        raise ValueError("patch mode 'policy' needs an explainer (e.g. ModelExplainer(model_policy))")
    targets = [_check_episode(t) for t in episodes]
    name = agent_name or f"semi:{getattr(policy, 'name', 'policy')}"
    res = RolloutResult()
    t_wall = time.perf_counter()
    samples: list[_Sample] = []
    prefix = tag if tag is not None else uuid.uuid4().hex[:8]
    for k, t in enumerate(episodes):
        gid = f"semi:{prefix}-{k}:{t.episode_id}"
        samples += [_Sample(t, gid, uuid.uuid4().hex, targets[k]) for _ in range(group_size)]

    while True:
        live = [(i, s) for i, s in enumerate(samples) if not s.done]
        if not live:
            break
        # slot = the sample's stable number (episode-major: episode k's samples are k*G .. k*G+G-1)
        ctxs = [
            TurnContext(s.episode.task, tuple(s.history), s.episode.steps[s.cursor].observation, i,
                        f"semi:{prefix}-{i // group_size}#{i % group_size}")
            for i, s in live
        ]
        live = [s for _, s in live]
        t0 = time.perf_counter()
        turns: list[PolicyTurn] = policy.act_batch(ctxs, None)
        res.policy_seconds += time.perf_counter() - t0
        to_patch: list[tuple[_Sample, Step, Step]] = []
        for s, turn in zip(live, turns):
            rec = s.episode.steps[s.cursor]
            size = rec.observation.size
            parse_failed = isinstance(turn.action, ParseError)
            target = s.targets[s.cursor]
            m = match_action(turn.action, target, size=size, config=match, marks=rec.observation.marks)
            # UI-S1 counts the format as valid when the reply has a thought; here a parsed
            # reply, plus a thought when the config asks for one
            has_thought = bool(turn.thought.strip())
            format_ok = not parse_failed and (has_thought or not rewards.format_requires_thought)
            r = float(
                semi_online_step_rewards(
                    torch.tensor([format_ok]),
                    torch.tensor([m.kind_match]),
                    torch.tensor([m.matched]),
                    rewards,
                    distance=None if m.distance is None else torch.tensor([m.distance]),
                )[0]
            )
            res.env_steps += 1
            meta = {
                "matched": m.matched,
                "kind_match": m.kind_match,
                "exact": m.exact,
                "match_reason": m.reason,
                **({"distance": round(m.distance, 4)} if m.distance is not None else {}),
                "recorded_action": action_to_dict(rec.action),
                "recorded_index": rec.index,
                "recorded_episode": s.episode.episode_id,
            }
            meta[STEP_TARGET_KEY] = target.to_dict()
            if "target_box" in rec.metadata:
                meta["target_box"] = list(rec.metadata["target_box"])
            if turn.rejected:
                meta["rejected_replies"] = list(turn.rejected)
            last_recorded = s.cursor == len(s.episode.steps) - 1
            will_patch = not m.matched and patch.allows(s.patches)
            ends = (m.matched and last_recorded) or (not m.matched and (not will_patch or last_recorded))
            step = Step(
                index=len(s.steps),
                observation=rec.observation,
                action=None if parse_failed else turn.action,  # type: ignore[arg-type]
                response=turn.response,
                thought=turn.thought,
                parse_error=turn.action if parse_failed else None,  # type: ignore[arg-type]
                reward=r,
                reward_parts={"semi_online": r},
                terminated=ends,
                policy_version=turn.policy_version,
                metadata=meta,
            )
            if keep_turns and turn.completion_ids:
                s.turns.append(
                    TrainTurn(
                        s.group_id,
                        s.episode_id,
                        step.index,
                        turn.prompt,
                        tuple(turn.completion_ids),
                        tuple(turn.logprobs),
                        r,
                        turn.policy_version,
                        not parse_failed,
                    )
                )
            if m.matched:
                if not s.first_mismatch:
                    s.matched_prefix += 1
                s.steps.append(step)
                s.history.append(step)
            else:
                s.first_mismatch = True
                if will_patch:
                    s.patches += 1
                    to_patch.append((s, step, rec))
                else:
                    s.steps.append(step)
            s.cursor += 1
            if ends:
                s.done = True
        if to_patch:
            _apply_patches(to_patch, patch, explainer, policy)
        for s in live:
            if s.done and not s.written:
                s.written = True
                _finish(s, res, name, store, run_id, keep_turns)
    res.wall_seconds = time.perf_counter() - t_wall
    return res


def _apply_patches(
    items: list[tuple[_Sample, Step, Step]], patch: PatchConfig, explainer: Explainer | None, policy: Any
) -> None:
    if patch.mode == "policy":
        assert explainer is not None
        thoughts = explainer(
            [
                ExplainRequest(s.episode.task.goal, tuple(s.history), rec.observation, rec.action)
                for s, _, rec in items
            ]
        )
        if len(thoughts) != len(items):
            raise RuntimeError(f"the explainer returned {len(thoughts)} texts for {len(items)} requests")
    else:
        thoughts = [rec.thought if patch.mode == "recorded" else "" for _, _, rec in items]
    for (s, step, rec), thought in zip(items, thoughts):
        # The stored step stays the policy's own reply (what it is trained on); the history
        # the policy sees next holds the recorded action instead.
        s.steps.append(replace(step, metadata={**step.metadata, "patched": True, "patch_thought": thought}))
        s.history.append(
            patched_step(
                step, rec, thought, _response_text(rec.action, thought, policy, rec.observation.size)
            )
        )


def _finish(
    s: _Sample, res: RolloutResult, agent: str, store: Any, run_id: str | None, keep_turns: bool
) -> None:
    n = len(s.episode.steps)
    all_matched = s.matched_prefix == n
    meta = {
        "mode": "semi-online",
        "recorded_episode": s.episode.episode_id,
        "recorded_steps": n,
        "patches": s.patches,
        "matched_prefix": s.matched_prefix,
        "progress": s.matched_prefix / n,
        "policy_versions": sorted({st.policy_version for st in s.steps}),
    }
    traj = Trajectory(
        s.episode_id,
        s.episode.task,
        tuple(s.steps),
        success=1.0 if all_matched else 0.0,
        status="completed",
        agent=agent,
        group_id=s.group_id,
        metadata=meta,
    )
    if store is not None:
        if run_id is None:
            raise ValueError("a store needs a run_id")
        t0 = time.perf_counter()
        store.write_trajectory(run_id, traj)
        res.store_seconds += time.perf_counter() - t0
    res.trajectories.append(traj)
    if keep_turns:
        res.turns.extend(s.turns)


def semi_online_turn_advantages(
    result: RolloutResult,
    *,
    gamma: float = 0.5,
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
    normalize_std: bool = True,
) -> torch.Tensor:
    """UI-S1's advantages for ``result.turns`` (``[N]``, in the same order).

    Step returns stop accumulating at mismatches (:func:`rl.advantages.semi_online_returns`);
    step-level groups are (group, recorded step index), episode-level groups the G
    samples of a recorded episode, with the episode's total step reward.
    """
    by_ep = {t.episode_id: t for t in result.trajectories}
    eps = sorted({t.episode_id for t in result.turns})
    if not eps:
        return torch.zeros(0)
    T = max(len(by_ep[e].steps) for e in eps)
    rew = torch.zeros(len(eps), T, dtype=torch.float64)
    matched = torch.zeros(len(eps), T, dtype=torch.bool)
    mask = torch.zeros(len(eps), T, dtype=torch.bool)
    for b, e in enumerate(eps):
        for st in by_ep[e].steps:
            rew[b, st.index] = st.reward
            matched[b, st.index] = bool(st.metadata.get("matched", False))
            mask[b, st.index] = True
    ret = semi_online_returns(rew, matched, mask, gamma=gamma)
    ep_total = (rew * mask).sum(1)
    row = {e: b for b, e in enumerate(eps)}
    gids = {g: i for i, g in enumerate(sorted({t.group_id for t in result.turns}))}
    idx = torch.tensor([row[t.episode_id] for t in result.turns])
    steps = torch.tensor([t.step_index for t in result.turns])
    rec_steps = torch.tensor(
        [
            by_ep[t.episode_id].steps[t.step_index].metadata.get("recorded_index", t.step_index)
            for t in result.turns
        ]
    )
    return semi_online_advantages(
        ret[idx, steps],
        ep_total[idx],
        torch.tensor([gids[t.group_id] for t in result.turns]),
        rec_steps,
        step_weight=step_weight,
        episode_weight=episode_weight,
        normalize_std=normalize_std,
    ).to(torch.float32)


# -- semi-online evaluation (SOP) --------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeOutcome:
    """One recorded episode replayed without patches: how far the policy got."""

    task_id: str
    recorded_steps: int
    matched_prefix: int

    @property
    def progress(self) -> float:
        return self.matched_prefix / self.recorded_steps if self.recorded_steps else 0.0

    @property
    def success(self) -> bool:
        return self.recorded_steps > 0 and self.matched_prefix == self.recorded_steps


@dataclass(frozen=True)
class SOPTaskResult:
    task_id: str
    episodes: int
    progress: float
    success: float


@dataclass(frozen=True)
class SOPResult:
    """Semi-online performance: mean progress (share of recorded steps matched before the first
    mismatch) and success (every step matched), overall and per task (mean over episodes)."""

    episodes: int
    progress: float
    success: float
    per_task: Mapping[str, SOPTaskResult]
    outcomes: tuple[EpisodeOutcome, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "progress": self.progress,
            "success": self.success,
            "per_task": {k: v.__dict__ for k, v in self.per_task.items()},
        }


def sop_from_outcomes(outcomes: Sequence[EpisodeOutcome]) -> SOPResult:
    """Aggregate per-episode outcomes into an :class:`SOPResult` (pure)."""

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    by_task: dict[str, list[EpisodeOutcome]] = {}
    for o in outcomes:
        by_task.setdefault(o.task_id, []).append(o)
    per = {
        k: SOPTaskResult(k, len(v), mean([o.progress for o in v]), mean([float(o.success) for o in v]))
        for k, v in sorted(by_task.items())
    }
    return SOPResult(
        len(outcomes),
        mean([o.progress for o in outcomes]),
        mean([float(o.success) for o in outcomes]),
        per,
        tuple(outcomes),
    )


def semi_online_eval(
    policy: TurnPolicy,
    episodes: Sequence[Trajectory],
    *,
    match: MatchConfig = MatchConfig(),
    store: Any = None,
    run_id: str | None = None,
) -> SOPResult:
    """Replay each recorded episode once, without patches (the first mismatch ends it).

    Use a greedy policy for a reproducible figure.
    """
    res = run_semi_online(
        policy,
        episodes,
        group_size=1,
        patch=PatchConfig(mode="none", budget=0),
        match=match,
        store=store,
        run_id=run_id,
        keep_turns=False,
    )
    by_src = {t.metadata["recorded_episode"]: t for t in res.trajectories}
    return sop_from_outcomes(
        [
            EpisodeOutcome(e.task.task_id, len(e.steps), int(by_src[e.episode_id].metadata["matched_prefix"]))
            for e in episodes
        ]
    )
