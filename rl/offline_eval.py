"""Offline evaluation on recorded episodes: one action per recorded step, scored against the step's target.

For every recorded step the agent sees the goal (``high``) or the goal and the step's instruction
(``low``, AndroidControl's low-level setting), the recorded steps before it as its history (their
actions; thoughts and replies left out, so earlier step instructions do not leak into the high
level), and the recorded screen. Its action is matched with :func:`rl.match.match_action`; the
outcomes give :func:`rl.offline_metrics.offline_metrics`. Any turn policy works: a model (local or an
OpenAI-compatible server), :class:`RecordedPolicy` (the recorded actions: the oracle), a random one.

    >>> res = run_offline_eval(RecordedPolicy(episodes), episodes)     # doctest: +SKIP
    >>> res["high"].step_sr
    1.0

The steps run through the one rollout loop (:class:`rl.loop.RolloutLoop`) with :class:`OfflineSide`,
a side over recorded steps: each request is one recorded step at one level, started with its screen,
its goal and the recorded steps before it as history, and ended by its one turn, which the side scores
against the step's target. The loop's ``num_slots`` is ``batch_size``: the steps reach the policy in
the recorded order, ``batch_size`` to an ``act_batch`` call, as online and semi-online turns do
(a policy that draws from one stream in call order, such as :class:`rl.agents.RandomPolicy`, draws
what it drew before the loop ran these steps).

With a store, each recorded episode's predictions are written as one episode per level once its level
is scored (the steps carry ``matched``, ``kind_match``, ``recorded_action`` and ``target`` in their
metadata, as semi-online steps do, so the web UI's replay draws the recorded action under the
policy's), and the metrics go in as run metrics (:func:`rl.offline_metrics.to_run_metrics`). The loop
itself stores nothing here: its episodes are single steps, the store's are the recorded episodes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from guiagent.types import STEP_TARGET_KEY, Action, ParseError, Step, StepTarget, Trajectory, action_to_dict
from rl.agents import PolicyTurn, TurnContext, TurnPolicy, _scripted
from rl.loop import Episode, RolloutLoop, Started
from rl.loop import StepOutcome as LoopOutcome
from rl.match import MatchConfig, match_action, step_target
from rl.offline_metrics import LEVELS, OfflineMetrics, StepOutcome, kind_row, offline_metrics, to_run_metrics

__all__ = ["run_offline_eval", "RecordedPolicy", "OfflineRequest", "OfflineSide", "step_goal", "context_key"]


def context_key(level: str, episode_id: str, index: int) -> str:
    """The stable name of one step's turn (its sampling stream, and how :class:`RecordedPolicy` finds it)."""
    return f"offline:{level}:{episode_id}:{index}"


def step_goal(goal: str, step: Step, level: str) -> str:
    """The goal text the agent is given at ``step``: the goal, plus the step instruction at the low level
    (steps without one get the goal alone)."""
    if level == "low":
        instr = (step.metadata or {}).get("step_instruction")
        if isinstance(instr, str) and instr.strip():
            return f"{goal}\nStep instruction: {instr.strip()}"
    return goal


class RecordedPolicy:
    """The oracle of recorded data: at each step, the recorded action."""

    name = "oracle"

    def __init__(self, episodes: Sequence[Trajectory]):
        self.actions = {(t.episode_id, s.index): s.action for t in episodes for s in t.steps}

    def act_batch(self, contexts: Sequence[TurnContext], pool: Any) -> list[PolicyTurn]:
        out = []
        for c in contexts:
            _, _, rest = c.key.split(":", 2)
            eid, _, idx = rest.rpartition(":")
            out.append(_scripted(self.actions[(eid, int(idx))]))
        return out


def _history(steps: Sequence[Step]) -> tuple[Step, ...]:
    return tuple(replace(s, thought="", response="") for s in steps)


@dataclass(frozen=True)
class OfflineRequest:
    """One recorded step to act on at one level: an episode of one turn for the rollout loop."""

    episode: Trajectory
    index: int
    level: str
    target: StepTarget
    group_id: str = ""
    max_steps = 1

    @property
    def key(self) -> str:
        return context_key(self.level, self.episode.episode_id, self.index)

    @property
    def task_id(self) -> str:
        return self.episode.task.task_id

    @property
    def seed(self) -> int:
        return self.episode.task.seed


@dataclass
class OfflineSide:
    """The rollout loop's side over recorded steps (see the module docstring): a start is the step's
    recorded screen, its goal at the request's level and the recorded steps before it (thoughts and
    replies left out); a step scores the turn against the step's target and ends the episode."""

    num_slots: int
    match: MatchConfig = field(default_factory=MatchConfig)
    agent: str = "offline:policy"
    suite: str = ""

    def agent_name(self, policy: Any) -> str:
        return self.agent

    def start(self, requests: Sequence[tuple[int, OfflineRequest]]) -> list[Started]:
        out = []
        for _, r in requests:
            rec = r.episode.steps[r.index]
            out.append(Started(replace(r.episode.task, goal=step_goal(r.episode.task.goal, rec, r.level)),
                               rec.observation, history=_history(r.episode.steps[:r.index])))
        return out

    def step(self, episodes: Sequence[Episode], turns: Sequence[PolicyTurn]) -> list[LoopOutcome]:
        if len(turns) != len(episodes):
            raise RuntimeError(f"the policy answered {len(turns)} of {len(episodes)} turns")
        outs = []
        for ep, turn in zip(episodes, turns):
            r: OfflineRequest = ep.req
            rec = r.episode.steps[r.index]
            parse_failed = isinstance(turn.action, ParseError)
            m = match_action(turn.action, r.target, size=rec.observation.size, config=self.match,
                             marks=rec.observation.marks)
            outs.append(LoopOutcome(_stored_step(rec, turn, r.target, m, parse_failed, r.level), end="completed",
                                    success=1.0 if m.matched else 0.0,
                                    metadata={"recorded_episode": r.episode.episode_id, "level": r.level}))
        return outs


def run_offline_eval(
    policy: TurnPolicy,
    episodes: Sequence[Trajectory],
    *,
    levels: Sequence[str] = LEVELS,
    match: MatchConfig = MatchConfig(),
    batch_size: int = 16,
    store: Any = None,
    run_id: str | None = None,
    agent_name: str | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> dict[str, OfflineMetrics]:
    """Ask ``policy`` for an action at every step of ``episodes`` at each of ``levels`` and score them.

    ``batch_size`` steps go to the policy in one ``act_batch`` call (the rollout loop's slots).
    ``on_batch(done, total)`` reports progress as steps are scored. Returns the metrics per level; with
    ``store``/``run_id`` the predictions and the metrics are written too. ``ValueError`` names a
    recorded step without a target.
    """
    for lv in levels:
        if lv not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {lv!r}")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if store is not None and run_id is None:
        raise ValueError("a store needs a run_id")
    targets = {}
    for t in episodes:
        for s in t.steps:
            try:
                targets[(t.episode_id, s.index)] = step_target(s)
            except ValueError as e:
                raise ValueError(f"recorded episode {t.episode_id}: {e}") from None
            if s.observation.screenshot is None:
                raise ValueError(f"recorded episode {t.episode_id} step {s.index} has no screenshot bytes "
                                 "(load it with pixels=True)")
    name = agent_name or f"offline:{getattr(policy, 'name', 'policy')}"
    total = sum(len(t.steps) for t in episodes) * len(levels)
    done = [0]

    def scored(_: Trajectory) -> None:
        done[0] += 1
        if on_batch is not None:
            on_batch(done[0], total)

    side = OfflineSide(batch_size, match, name)
    results: dict[str, OfflineMetrics] = {}
    for level in levels:
        requests = [OfflineRequest(t, i, level, targets[(t.episode_id, rec.index)])
                    for t in episodes for i, rec in enumerate(t.steps)]
        res = RolloutLoop(side, policy, keep_turns=False, on_episode=scored).run(requests)
        stepped = {(tr.metadata["recorded_episode"], tr.steps[0].index): tr.steps[0] for tr in res.trajectories}
        outcomes = []
        for t in episodes:
            steps = [stepped[(t.episode_id, rec.index)] for rec in t.steps]
            for step in steps:
                target = targets[(t.episode_id, step.index)]
                outcomes.append(StepOutcome(t.episode_id, kind_row(target.kind, target.button),
                                            step.parse_error is None, bool(step.metadata["kind_match"]),
                                            bool(step.metadata["matched"])))
            if store is not None:
                _write(store, run_id, t, steps, name, level)
        results[level] = offline_metrics(outcomes)
        if store is not None:
            store.log_metrics(run_id, 0, to_run_metrics(results[level], level))
    return results


def _stored_step(rec: Step, turn: PolicyTurn, target: Any, m: Any, parse_failed: bool, level: str) -> Step:
    meta = {"matched": m.matched, "kind_match": m.kind_match, "exact": m.exact, "match_reason": m.reason,
            "recorded_action": action_to_dict(rec.action) if rec.action is not None else None,
            "recorded_index": rec.index, STEP_TARGET_KEY: target.to_dict(), "level": level}
    if m.distance is not None:
        meta["distance"] = round(m.distance, 4)
    if "step_instruction" in (rec.metadata or {}):
        meta["step_instruction"] = rec.metadata["step_instruction"]
    action: Action | None = None if parse_failed else turn.action  # type: ignore[assignment]
    return Step(index=rec.index, observation=rec.observation, action=action, response=turn.response,
                thought=turn.thought, parse_error=turn.action if parse_failed else None,  # type: ignore[arg-type]
                reward=1.0 if m.matched else 0.0, reward_parts={"offline_match": 1.0 if m.matched else 0.0},
                policy_version=turn.policy_version, metadata=meta)


def _write(store: Any, run_id: str | None, t: Trajectory, steps: list[Step], agent: str, level: str) -> None:
    n = len(steps)
    matched = sum(bool(s.metadata["matched"]) for s in steps)
    meta = {"mode": "offline", "level": level, "recorded_episode": t.episode_id, "recorded_steps": n,
            "matched_steps": matched, "step_sr": matched / n if n else 0.0}
    store.write_trajectory(run_id, Trajectory(
        f"offline-{level}-{uuid.uuid4().hex[:12]}", t.task, tuple(steps),
        success=1.0 if matched == n else 0.0, status="completed", agent=agent, group_id=f"offline:{level}",
        metadata=meta))
