"""Who acts: turn policies for the rollout driver (oracle, random, model).

A turn policy answers a *batch* of slots at once (``act_batch``), so a model
generates for every busy env in one call. Each answer is typed
(:class:`PolicyTurn`): the raw text (what a model said, or the JSON of a scripted
action), the parsed action or a :class:`~guiagent.types.ParseError`, the thought,
and for models the prompt, completion token ids and log-probs the learner needs.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from guiagent.types import (
    Action, Click, Finish, Key, NavigateBack, Observation, ParseError, Scroll, Step, Swipe, TaskSpec, Type,
    action_to_dict,
)

__all__ = ["TurnContext", "PolicyTurn", "TurnPolicy", "OraclePolicy", "RandomPolicy", "ModelPolicy",
           "AgentSettings", "load_model_policy", "AGENT_SETTINGS_FILE", "format_for_policy"]


@dataclass(frozen=True)
class TurnContext:
    """What a policy sees for one slot: the task, the episode so far and the current screen."""

    spec: TaskSpec
    history: Sequence[Step]
    observation: Observation
    slot: int
    key: str = ""
    """a stable name of the episode (its group and member): with the turn index, it picks the
    episode's own sampling stream, whichever slot or batch the turn lands in"""


@dataclass(frozen=True)
class PolicyTurn:
    """A policy's answer for one slot; ``prompt``/``completion_ids``/``logprobs`` feed the learner."""

    response: str
    action: Action | ParseError
    thought: str = ""
    policy_version: int = 0
    prompt: Any = None
    completion_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()


class TurnPolicy(Protocol):
    name: str

    def act_batch(self, contexts: Sequence[TurnContext], pool: Any) -> list[PolicyTurn]:
        """One turn per context, in order (``pool`` lets scripted policies ask the tasks' oracles)."""


def _scripted(action: Action, thought: str = "") -> PolicyTurn:
    return PolicyTurn(json.dumps(action_to_dict(action)), action, thought)


class OraclePolicy:
    """The tasks' scripted solvers, through the pool (demonstrations; solvability checks)."""

    name = "oracle"

    def act_batch(self, contexts: Sequence[TurnContext], pool: Any) -> list[PolicyTurn]:
        actions = pool.oracle_actions([c.slot for c in contexts])
        return [_scripted(a) if a is not None else
                _scripted(Finish("failure", "oracle is stuck"), "the oracle found no next action")
                for a in actions]


class RandomPolicy:
    """Uniformly random taps, with some typing, scrolling, swiping, keys and back presses.

    The baseline every learning curve is read against; it never answers or finishes.
    """

    name = "random"
    _WORDS = ("hello", "test", "Ann", "12", "note", "meeting", "ok")

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def _one(self) -> Action:
        r = self.rng.random()
        u = lambda: round(self.rng.uniform(0.02, 0.98), 3)  # noqa: E731
        if r < 0.7:
            return Click(u(), u())
        if r < 0.8:
            return Type(self.rng.choice(self._WORDS))
        if r < 0.88:
            return Scroll(self.rng.choice(("up", "down")))
        if r < 0.92:
            return Swipe(u(), u(), u(), u())
        if r < 0.96:
            return Key(self.rng.choice(("Enter", "Backspace", "Tab")))
        return NavigateBack()

    def act_batch(self, contexts: Sequence[TurnContext], pool: Any) -> list[PolicyTurn]:
        return [_scripted(self._one()) for _ in contexts]


class ModelPolicy:
    """A :class:`guiagent.policy.agent.ModelAgent` as a turn policy (one generation call per batch)."""

    name = "model"

    def __init__(self, model_agent: Any, sampling: Any = None, seed: int | None = None):
        self.agent = model_agent
        self.sampling = sampling
        self.seed = seed
        """when set (the trainer sets one per iteration), each turn samples from its own stream,
        seeded by (seed, the episode's key, the turn index): replies do not depend on batching"""

    @property
    def version(self) -> int:
        return int(getattr(self.agent.policy, "version", 0))

    def _sampling_for(self, contexts: Sequence[TurnContext]) -> Any:
        import dataclasses

        from guiagent.policy.base import turn_seed

        base = self.sampling or self.agent.sampling
        if self.seed is None or base.temperature == 0:
            return self.sampling
        seeds = tuple(turn_seed(self.seed, c.key or f"slot{c.slot}", len(c.history)) for c in contexts)
        return dataclasses.replace(base, seeds=seeds)

    def act_batch(self, contexts: Sequence[TurnContext], pool: Any) -> list[PolicyTurn]:
        from guiagent.policy.agent import AgentInput

        decisions = self.agent.act([AgentInput(c.spec.goal, c.observation, tuple(c.history)) for c in contexts],
                                   self._sampling_for(contexts))
        version = self.version
        return [PolicyTurn(d.response, d.result, d.thought, version, d.chat or None,
                           tuple(d.generation.token_ids), tuple(d.generation.logprobs)) for d in decisions]


#: a short system prompt for tiny models trained from scratch (the full one is ~700 of their tokens)
COMPACT_JSON_PROMPT = ('Reply with one JSON action, e.g. {"action": {"kind": "click", "x": 0.5, "y": 0.25}} '
                       '(x, y: fractions of the screenshot) or {"action": {"kind": "finish"}}.')

#: written next to a fine-tuned model so eval and training prompt it the way it was trained
AGENT_SETTINGS_FILE = "guiagent_agent.json"


@dataclass(frozen=True)
class AgentSettings:
    """How a model is prompted and how its text is parsed."""

    action_format: str = "json"
    """action format of the model's replies (json, uitars, uitars15, uitars2, qwen_mobile, qwen_computer, ...)"""
    coord_decimals: int = 2
    """json format: decimals of normalised coordinates (2 = a 0-100 grid, which tiny models learn fastest)"""
    history_images: int = 1
    """screenshots in the prompt, the current one included"""
    max_history: int = 10
    """older steps summarised as text in the prompt"""
    system_prompt: str | None = None
    """replaces the format's system prompt (None: the format's own, generated from the action table)"""

    def __post_init__(self) -> None:
        from grounding import FORMAT_NAMES

        if self.action_format not in FORMAT_NAMES:  # checked before any model loads or file is written
            raise ValueError(f"unknown action format {self.action_format!r}; "
                             f"choose one of {', '.join(FORMAT_NAMES)}")

    def save(self, model_dir: str) -> None:
        from pathlib import Path

        Path(model_dir, AGENT_SETTINGS_FILE).write_text(json.dumps(self.__dict__, indent=2))

    @classmethod
    def load(cls, model_dir: str) -> "AgentSettings | None":
        from pathlib import Path

        p = Path(model_dir, AGENT_SETTINGS_FILE)
        return cls(**json.loads(p.read_text())) if p.is_file() else None

    def in_format(self, action_format: str) -> "AgentSettings":
        """These settings speaking ``action_format``: unchanged for ``auto`` or the same format; for another,
        that format's own system prompt (a custom one belongs to the format it was written for) and the same
        history."""
        if action_format in ("auto", self.action_format):
            return self
        return AgentSettings(action_format=action_format, history_images=self.history_images,
                             max_history=self.max_history)

    def format(self, policy: Any = None) -> Any:
        """The action format; with ``policy``, in the coordinate frame of its image processor."""
        from grounding import get_format

        if self.action_format == "json":
            fmt = get_format("json", decimals=self.coord_decimals)
        else:
            fmt = get_format(self.action_format)
        return fmt if policy is None else format_for_policy(fmt, policy)

    def prompt_config(self) -> Any:
        from guiagent.policy.prompting import PromptConfig

        return PromptConfig(history_images=self.history_images, max_history=self.max_history,
                            system_prompt=self.system_prompt)


def format_for_policy(fmt: Any, policy: Any) -> Any:
    """``fmt`` in the coordinate frame of ``policy``'s image processor: one frame for prompt, SFT
    targets and parser.

    A format speaking pixels of the resized image must resize exactly as the processor does (its
    patch size x merge size, its min/max pixels); the format's own defaults are the processor
    defaults of the original Qwen release, and a model saved with other limits would get every
    point in the wrong place. Policies without an image processor (a server behind an
    OpenAI-compatible API) and formats in relative or normalised frames are left as they are.
    """
    geometry = getattr(policy, "image_geometry", None)
    rebind = getattr(fmt, "with_image_geometry", None)
    if geometry is None or rebind is None:
        return fmt
    g = geometry()
    return rebind(g.factor, g.min_pixels, g.max_pixels)


def load_model_policy(spec: str, *, backend: str = "auto", settings: AgentSettings | None = None,
                      temperature: float = 0.0, max_new_tokens: int = 96, keep_chats: bool = False,
                      policy: Any = None, top_p: float = 1.0, min_p: float = 0.0, frame: Any = None,
                      **policy_opts: Any) -> ModelPolicy:
    """A :class:`ModelPolicy` for a model folder, hub id or server URL (or an already loaded ``policy``).

    ``frame``: the policy whose image processor sets the action format's coordinate frame (default:
    ``policy`` itself; a vLLM engine generating for a transformers learner takes the learner's).

    Settings come from ``settings``, else the model folder's ``guiagent_agent.json``
    (written by ``guiagent sft``/``train``), else the defaults.
    """
    from guiagent.policy import SamplingParams, load_policy
    from guiagent.policy.agent import ModelAgent

    settings = settings or AgentSettings.load(spec) or AgentSettings()
    if policy is None:
        policy = load_policy(spec, backend=None if backend == "auto" else backend, **policy_opts)
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                              min_p=min_p)
    return ModelPolicy(ModelAgent(policy, settings.format(frame or policy), settings.prompt_config(), sampling,
                                  keep_chats=keep_chats))
