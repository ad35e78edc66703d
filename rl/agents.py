"""Who acts: turn policies for the rollout loop, live or replayed (oracle, random, model).

A turn policy answers a *batch* of slots at once (``act_batch``), so a model
generates for every busy env in one call. Each answer is typed
(:class:`PolicyTurn`): the raw text (what a model said, or the JSON of a scripted
action), the parsed action or a :class:`~guiagent.types.ParseError`, the thought,
and for models the prompt, completion token ids and log-probs the learner needs.

From model to action is one chain:

* a backend (:class:`guiagent.policy.Policy`: transformers, vLLM or an OpenAI-compatible
  server) turns chats into generations and knows nothing of GUIs;
* :class:`ModelAgent` prompts it (:mod:`rl.prompting`), samples each turn from its own seed
  and parses the reply in its action format;
* as a :class:`TurnPolicy` it answers each :class:`TurnContext` of the rollout loop's
  batches (:mod:`rl.loop`) with one :class:`PolicyTurn`.

:func:`load_agent` builds a :class:`ModelAgent` from a model folder, hub id or server URL and
the :class:`AgentSettings` saved beside the model.

Example::

    >>> agent = load_agent("runs/sft", temperature=1.0)                      # doctest: +SKIP
    >>> [turn] = agent.act_batch([TurnContext(spec, (), observation, slot=0)], pool=None)  # doctest: +SKIP
    >>> turn.action                                   # an Action, or a ParseError  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from grounding import FORMAT_NAMES, get_format
from guiagent.policy import load_policy
from guiagent.policy.base import Chat, Generation, Policy, SamplingParams, turn_seed
from guiagent.types import (
    Action,
    Click,
    Finish,
    Key,
    NavigateBack,
    Observation,
    ParseError,
    Scroll,
    Step,
    Swipe,
    TaskSpec,
    Type,
    action_to_dict,
)
from rl.prompting import PromptConfig, build_chat

if TYPE_CHECKING:
    from grounding.base import ActionFormat

__all__ = ["TurnContext", "PolicyTurn", "TurnPolicy", "OraclePolicy", "RandomPolicy", "ModelAgent",
           "AgentSettings", "load_agent", "AGENT_SETTINGS_FILE", "format_for_policy", "COMPACT_JSON_PROMPT",
           "COMPACT_MARKS_PROMPT", "COMPACT_MARKS_NAME_PROMPT", "compact_prompt", "tiny_model_settings"]


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
    rejected: tuple[str, ...] = ()
    """unparseable replies drawn and set aside before this one (``ModelAgent(resample_unparseable=K)``)"""
    encoded: Any = None
    """``prompt`` as the model's inputs, as generation encoded it (a transformers backend with
    ``keep_chats``): the learner scores the turn from it instead of encoding the chat again"""


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
    ``actions="taps"``: taps only (what a raw tap-and-screenshot loop does, for measuring the
    rollout loop's own cost beside one: a swipe or typing lasts as long as it lasts).
    """

    name = "random"
    _WORDS = ("hello", "test", "Ann", "12", "note", "meeting", "ok")
    ACTIONS = ("mixed", "taps")

    def __init__(self, seed: int = 0, actions: str = "mixed"):
        if actions not in self.ACTIONS:
            raise ValueError(f"actions must be one of {self.ACTIONS}, got {actions!r}")
        self.rng = random.Random(seed)
        self.actions = actions

    def _one(self) -> Action:
        r = 0.0 if self.actions == "taps" else self.rng.random()
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


class ModelAgent:
    """A backend as a turn policy: prompt, one batched generation per batch of turns, parse.

    ``sampling``: the sampling of every turn. ``seed``: when set (the trainer sets one per
    iteration), each turn samples from its own stream, seeded by (seed, the episode's key, the turn
    index), so a reply depends neither on batching nor on slot order. ``keep_chats``: each turn
    keeps its chat (``PolicyTurn.prompt``) for the learner to score; off by default to spare
    memory. ``lock``: held around every generation, so a learner thread never swaps the weights
    mid-batch (the trainer's async rollout). Model text never raises: bad text becomes a
    :class:`~guiagent.types.ParseError`.

    ``resample_unparseable``: when sampling (temperature > 0), a reply that does not parse is
    drawn again, up to this many times, each time from a fresh stream (seeded by the turn's seed
    and the attempt); the turn keeps the first reply that parses, and the ones set aside in
    ``PolicyTurn.rejected``. A reply still unparseable after the last attempt is the turn's reply,
    a :class:`~guiagent.types.ParseError` as always. Rejection sampling at the level of whole
    replies: the policy is trained on the replies it acted on, drawn from its distribution
    restricted to parseable text (as top-p and min-p restrict it token by token), and one slip of
    a digit at temperature 1 no longer ends an episode. Greedy decoding never resamples.

    ``hide``: parts of every observation the model is not shown, to measure what it relies on:
    ``screenshot`` (a uniform grey image of the same size, history images too), ``elements`` (no
    element list or tree in the prompt). Replies are still parsed against the full screen, and the env
    acts on it as always.
    """

    name = "model"

    def __init__(self, backend: Policy, action_format: "ActionFormat",
                 prompt_config: PromptConfig = PromptConfig(),
                 sampling: SamplingParams = SamplingParams(max_new_tokens=128, temperature=0.0), *,
                 keep_chats: bool = False, seed: int | None = None, lock: threading.Lock | None = None,
                 resample_unparseable: int = 0, hide: Sequence[str] = ()):
        if resample_unparseable < 0:
            raise ValueError("resample_unparseable must be >= 0")
        unknown = sorted(set(hide) - set(HIDEABLE))
        if unknown:
            raise ValueError(f"cannot hide {', '.join(unknown)}: choose from {', '.join(HIDEABLE)}")
        self.hide = tuple(hide)
        self.backend = backend
        self.format = action_format
        self.prompt_config = prompt_config
        self.sampling = sampling
        self.keep_chats = keep_chats
        self.seed = seed
        self.lock = lock
        self.resample_unparseable = resample_unparseable

    @property
    def version(self) -> int:
        """The backend's weights version (stamped on every turn)."""
        return int(getattr(self.backend, "version", 0))

    def generate(self, chats: Sequence[Chat], sampling: SamplingParams) -> list[Generation]:
        """The backend's generations for ``chats``, under the lock (for callers with prompts of their own)."""
        with self._locked():
            return self.backend.generate(list(chats), sampling)

    def act_batch(self, contexts: Sequence[TurnContext], pool: Any = None) -> list[PolicyTurn]:
        """One turn per context, in order, from one generation call."""
        if not contexts:
            return []
        with self._locked():
            chats = [build_chat(c.spec.goal, self._shown_history(c.history), self._shown(c.observation), self.format,
                                self.prompt_config) for c in contexts]
            sampling = self._sampling_for(contexts)
            encs = self._encode(chats)
            gens = self._generate(chats, encs, sampling)
            parsed = [self._parse(g.text, c.observation) for c, g in zip(contexts, gens)]
            rejected: list[list[str]] = [[] for _ in contexts]
            if sampling.temperature > 0:
                for attempt in range(1, self.resample_unparseable + 1):
                    again = [i for i, (result, _) in enumerate(parsed) if isinstance(result, ParseError)]
                    if not again:
                        break
                    redo = self._generate([chats[i] for i in again], encs and [encs[i] for i in again],
                                          self._resampling(sampling, [contexts[i] for i in again], attempt))
                    for i, g in zip(again, redo):
                        rejected[i].append(gens[i].text)
                        gens[i] = g
                        parsed[i] = self._parse(g.text, contexts[i].observation)
            version = self.version
        parsed = [(_cut_short(result, g, sampling.max_new_tokens), thought) for (result, thought), g in zip(parsed, gens)]
        keep = self.keep_chats
        return [PolicyTurn(g.text, result, thought, version, chat if keep else None, tuple(g.token_ids),
                           tuple(g.logprobs), tuple(r), enc if keep else None)
                for chat, enc, g, (result, thought), r in zip(chats, encs or [None] * len(chats), gens, parsed,
                                                              rejected)]

    def _shown(self, obs: Observation) -> Observation:
        """``obs`` as the model sees it, with the parts ``hide`` names taken out."""
        if "screenshot" in self.hide and obs.screenshot is not None:
            obs = dataclasses.replace(obs, screenshot=_grey_png(obs.width, obs.height), screenshot_ref=None)
        if "elements" in self.hide:
            obs = dataclasses.replace(obs, marks=None, tree=None)
        return obs

    def _shown_history(self, history: Sequence[Step]) -> Sequence[Step]:
        if not self.hide:
            return history
        return [dataclasses.replace(s, observation=self._shown(s.observation)) for s in history]

    def _encode(self, chats: Sequence[Chat]) -> list[Any] | None:
        """The chats as model inputs, once, when the backend takes encoded prompts (transformers)."""
        if not hasattr(self.backend, "generate_encoded") or not hasattr(self.backend, "encoder"):
            return None
        return [self.backend.encoder.encode(c) for c in chats]

    def _generate(self, chats: Sequence[Chat], encs: Sequence[Any] | None, sampling: SamplingParams
                  ) -> list[Generation]:
        if encs is not None:
            return self.backend.generate_encoded(list(encs), sampling)
        return self.backend.generate(list(chats), sampling)

    def _locked(self) -> Any:
        return self.lock if self.lock is not None else contextlib.nullcontext()

    def _sampling_for(self, contexts: Sequence[TurnContext]) -> SamplingParams:
        if self.seed is None or self.sampling.temperature == 0:
            return self.sampling
        seeds = tuple(turn_seed(self.seed, c.key or f"slot{c.slot}", len(c.history)) for c in contexts)
        return dataclasses.replace(self.sampling, seeds=seeds)

    def _resampling(self, sampling: SamplingParams, contexts: Sequence[TurnContext], attempt: int) -> SamplingParams:
        """``sampling`` for the ``attempt``-th redraw of ``contexts``' turns: a stream of its own per turn
        and attempt, from the run's seed (else the sampling's own; with neither, the backend draws as it
        likes)."""
        base = self.seed if self.seed is not None else sampling.seed
        if base is None:
            return dataclasses.replace(sampling, seeds=None)
        seeds = tuple(turn_seed(base, f"{c.key or f'slot{c.slot}'}#redraw{attempt}", len(c.history))
                      for c in contexts)
        return dataclasses.replace(sampling, seeds=seeds)

    def _parse(self, text: str, observation: Observation) -> tuple[Action | ParseError, str]:
        try:  # a format that reads the screen to parse (the marks format's element names) gets it
            parse_on = getattr(self.format, "parse_on", None)
            result = (parse_on(text, observation) if parse_on is not None
                      else self.format.parse(text, observation.size))
        except Exception as e:  # formats must not raise; if one does, the episode still goes on
            result = ParseError("malformed", f"parser raised {type(e).__name__}: {e}", text)
        try:
            thought = self.format.thought(text)
        except Exception:
            thought = ""
        return result, thought


#: what :class:`ModelAgent` can hide from the model (``guiagent eval --hide``)
HIDEABLE = ("screenshot", "elements")


@functools.lru_cache(maxsize=16)
def _grey_png(width: int, height: int) -> bytes:
    """A uniform mid-grey PNG of ``width`` x ``height`` (a screenshot with nothing on it)."""
    from PIL import Image  # lazy: Pillow for one image per screen size, only when the screenshot is hidden

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (128, 128, 128)).save(buf, format="PNG")
    return buf.getvalue()


#: a short system prompt for tiny models trained from scratch (the full one is ~700 of their tokens)
COMPACT_JSON_PROMPT = ('Reply with one JSON action, e.g. {"action": {"kind": "click", "x": 0.5, "y": 0.25}} '
                       '(x, y: fractions of the screenshot) or {"action": {"kind": "finish"}}.')
#: the marks format's short system prompt (``MarksFormat(compact=True)``): act on a numbered element
COMPACT_MARKS_PROMPT = ('Reply with one JSON action on a numbered element, e.g. '
                        '{"action": {"kind": "click_element", "element": 3}}, or {"action": {"kind": "finish"}}.')
#: the same with elements named as listed (``MarksFormat(compact=True, refer="name")``)
COMPACT_MARKS_NAME_PROMPT = ('Reply with one JSON action on a listed element, by name, e.g. '
                             '{"action": {"kind": "click_element", "name": "Files"}}, or {"action": {"kind": "finish"}}.')
#: marks format, tiny models: longest element name listed. The names a goal mentions (apps, settings, folders,
#: MiniWoB++ buttons, links, options) are shorter; long rows (a message preview, an expense line) would
#: otherwise be most of a prompt and of its compute
TINY_MARK_NAME_CHARS = 24


def compact_prompt(action_format: str, mark_refer: str = "id") -> str:
    """The short system prompt of a tiny model trained from scratch in ``action_format``: the marks
    format's for ``marks`` (elements by number, or by name with ``mark_refer="name"``), the JSON one for
    every other format (as before formats had their own)."""
    if action_format == "marks":
        return COMPACT_MARKS_NAME_PROMPT if mark_refer == "name" else COMPACT_MARKS_PROMPT
    return COMPACT_JSON_PROMPT


def tiny_model_settings(action_format: str = "json", mark_states: bool = False) -> "AgentSettings":
    """How a tiny model trained from scratch here is prompted (the embedded default's warm start): the
    compact prompt; in the marks format, names written plain (as goals write them: its tokenizer,
    trained from scratch, splits a quoted name into other pieces) and cut at
    :data:`TINY_MARK_NAME_CHARS`, and its replies naming the element as listed (``mark_refer="name"``:
    from scratch on CPU such a model learns to copy the goal's name in a few hundred steps, and does not
    learn to look up a name's number in the list in a few thousand; docs/training.md, "Goal-conditioned
    grounding"). ``repeat_goal`` stays off: stating the goal again after the elements did not help such
    a model tell apart the apps whose names are one token each (docs/results.md, "The embedded
    default"). ``mark_states``: the elements' states listed too (:class:`AgentSettings`)."""
    if action_format == "marks":
        return AgentSettings(action_format="marks", system_prompt=COMPACT_MARKS_NAME_PROMPT, mark_names="plain",
                             mark_name_chars=TINY_MARK_NAME_CHARS, mark_refer="name", mark_states=mark_states)
    return AgentSettings(action_format=action_format, system_prompt=compact_prompt(action_format))

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
    mark_names: str = "quoted"
    """marks format: how the listed elements' names are written: quoted ([3] link "Files") or plain
    ([3] link: Files, as goals write them: a tokenizer trained from scratch splits the two apart)"""
    mark_name_chars: int = 80
    """marks format: longest element name listed, in characters (longer ones are cut with an ellipsis):
    a short limit keeps long list rows (a message preview, an expense line) from filling a small
    model's prompt"""
    mark_refer: str = "id"
    """marks format: how the model's own replies (SFT targets, the history) point at an element: by its
    number (id: "element": 3) or by its name as listed (name: "name": "Files"). Replies are read in
    either form"""
    repeat_goal: bool = False
    """state the goal again at the end of the prompt, after the screen's elements (a small model copying
    the name the goal spells then looks a few tokens back, not across the screenshot)"""
    mark_states: bool = False
    """marks format: list each element's states after its role ([2] checkbox checked: Wi-Fi): which boxes
    are ticked, which tab is selected, which section is open (off: the lists every recipe before them
    was measured with)"""

    def __post_init__(self) -> None:
        if self.action_format not in FORMAT_NAMES:  # checked before any model loads or file is written
            raise ValueError(f"unknown action format {self.action_format!r}; "
                             f"choose one of {', '.join(FORMAT_NAMES)}")
        if self.mark_names not in ("quoted", "plain"):
            raise ValueError(f"--mark-names must be quoted or plain, got {self.mark_names!r}")
        if self.mark_refer not in ("id", "name"):
            raise ValueError(f"--mark-refer must be id or name, got {self.mark_refer!r}")
        if not 1 <= self.mark_name_chars <= 10_000:
            raise ValueError(f"--mark-name-chars must lie in 1..10000, got {self.mark_name_chars}")

    def save(self, model_dir: str) -> None:
        Path(model_dir, AGENT_SETTINGS_FILE).write_text(json.dumps(self.__dict__, indent=2))

    @classmethod
    def load(cls, model_dir: str) -> "AgentSettings | None":
        p = Path(model_dir, AGENT_SETTINGS_FILE)
        return cls(**json.loads(p.read_text())) if p.is_file() else None

    def in_format(self, action_format: str) -> "AgentSettings":
        """These settings speaking ``action_format``: unchanged for ``auto`` or the same format; for another,
        that format's own system prompt (a custom one belongs to the format it was written for) and the same
        history."""
        if action_format in ("auto", self.action_format):
            return self
        return AgentSettings(action_format=action_format, history_images=self.history_images,
                             max_history=self.max_history, repeat_goal=self.repeat_goal)

    def format(self, policy: Any = None) -> Any:
        """The action format; with ``policy``, in the coordinate frame of its image processor."""
        if self.action_format == "json":
            fmt = get_format("json", decimals=self.coord_decimals)
        elif self.action_format == "marks":
            fmt = get_format("marks", names=self.mark_names, max_name_chars=self.mark_name_chars,
                             refer=self.mark_refer, states=self.mark_states)
        else:
            fmt = get_format(self.action_format)
        return fmt if policy is None else format_for_policy(fmt, policy)

    def prompt_config(self) -> PromptConfig:
        return PromptConfig(history_images=self.history_images, max_history=self.max_history,
                            system_prompt=self.system_prompt, repeat_goal=self.repeat_goal)


def _cut_short(result: Any, gen: Generation, max_new_tokens: int) -> Any:
    """A parse error of a reply the token budget cut off says so: a thinking or ``Thought:``-style
    reply that runs past ``max_new_tokens`` loses its action, and the error alone would not tell."""
    if not isinstance(result, ParseError) or gen.finish_reason != "length":
        return result
    return dataclasses.replace(result, message=f"{result.message} (the reply was cut off at max_new_tokens="
                                               f"{max_new_tokens}; a longer budget, --max-new-tokens, may let it finish)")


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


def load_agent(spec: str, *, backend: str = "auto", settings: AgentSettings | None = None,
               temperature: float = 0.0, max_new_tokens: int = 96, top_p: float = 1.0, min_p: float = 0.0,
               keep_chats: bool = False, loaded: Policy | None = None, frame: Any = None,
               lock: threading.Lock | None = None, resample_unparseable: int = 0, hide: Sequence[str] = (),
               **backend_opts: Any) -> ModelAgent:
    """A :class:`ModelAgent` for a model folder, hub id or server URL.

    ``backend``: which backend loads ``spec`` (``auto``: see :func:`guiagent.policy.load_policy`;
    ``backend_opts`` go to it); ``loaded``: an already loaded backend to use instead (the trainer's
    learner or its vLLM engine). ``frame``: the backend whose image processor sets the action
    format's coordinate frame (default: the agent's own; a vLLM engine generating for a
    transformers learner takes the learner's). ``keep_chats``, ``lock``, ``resample_unparseable``:
    see :class:`ModelAgent`.

    Settings come from ``settings``, else the model folder's ``guiagent_agent.json``
    (written by ``guiagent sft``/``train``), else the defaults.
    """
    settings = settings or AgentSettings.load(spec) or AgentSettings()
    if loaded is None:
        loaded = load_policy(spec, backend=None if backend == "auto" else backend, **backend_opts)
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                              min_p=min_p)
    return ModelAgent(loaded, settings.format(frame or loaded), settings.prompt_config(), sampling,
                      keep_chats=keep_chats, lock=lock, resample_unparseable=resample_unparseable, hide=hide)
