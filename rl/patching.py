"""The patch step of semi-online RL: what a mismatch puts in the policy's history.

When the policy's action at a recorded screen does not match the recorded one, the recorded
action takes its place in the history the policy sees next (up to ``budget`` times an episode),
with a thought chosen by :class:`PatchConfig` ``mode``: none, the recorded step's own, or one
the policy writes for the given action (:class:`ModelExplainer`). The stored step stays the
policy's own reply: patched steps are never trained on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Sequence

from guiagent.policy import SamplingParams
from guiagent.policy.base import message
from guiagent.types import Action, Observation, Step, action_to_dict
from rl.prompting import summarize_step

__all__ = ["PATCH_MODES", "PatchConfig", "ExplainRequest", "Explainer", "ModelExplainer", "EXPLAIN_PROMPT",
           "patched_step", "response_text"]

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
        if not requests:
            return []
        agent = self.agent
        chats = []
        for r in requests:
            parts: list[Any] = [f"Goal: {r.goal}"]
            if r.history:
                parts.append("Previous steps:\n"
                             + "\n".join(summarize_step(s, agent.format, agent.prompt_config) for s in r.history))
            parts += ["Current screenshot:", r.observation.screenshot,
                      "Action taken: " + agent.format.format(r.action, r.observation.size).strip()]
            chats.append([{"role": "system", "content": EXPLAIN_PROMPT}, message("user", *parts)])
        gens = agent.generate(chats, SamplingParams(max_new_tokens=self.max_new_tokens, temperature=0.0))
        return [g.text.strip() for g in gens]


def response_text(action: Action, thought: str, policy: Any, size: tuple[int, int]) -> str:
    """The reply the policy would have written for ``action`` (its format when it has one)."""
    fmt = getattr(policy, "format", None)
    if fmt is not None:
        try:
            return fmt.format(action, size, thought)
        except Exception:  # a format that cannot print this kind: fall back to JSON
            pass
    return json.dumps({"thought": thought, "action": action_to_dict(action)} if thought else action_to_dict(action))


def patched_step(policy_step: Step, recorded: Step, thought: str, response: str) -> Step:
    """The history entry that replaces a mismatched policy step: the recorded action, the given thought."""
    return replace(policy_step, action=recorded.action, thought=thought, response=response, parse_error=None)
