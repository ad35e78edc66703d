"""Chats for agent turns, and SFT targets.

A turn's chat is ``[system, user]``:

* system: the action format's own prompt (``ActionFormat.system_prompt()``);
* user: the goal; then text summaries of older steps (each the action as the
  format prints it, plus its parse or action error), at most
  ``max_history`` of them; then the last ``history_images`` screenshots
  (the current one last), each with the step's action; then the current
  screen's error note and (optionally) its accessibility tree.

So the prompt grows with neither the episode length (summaries are capped) nor
the number of images (only the last k are attached): long episodes stay within
context and memory.

The action format is duck-typed (``system_prompt``, ``format``, ``parse``,
``thought``; see ``grounding.base.ActionFormat``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from guiagent.policy.base import Chat, message
from guiagent.types import Observation, Step, Trajectory

if TYPE_CHECKING:
    from grounding.base import ActionFormat

__all__ = ["PromptConfig", "build_chat", "summarize_step", "sft_target", "sft_example"]


@dataclass(frozen=True)
class PromptConfig:
    """What goes into an agent's prompt."""

    #: screenshots attached as images, the current one included (k >= 1)
    history_images: int = 1
    #: older steps summarised as text; the oldest beyond this are dropped (and counted)
    max_history: int = 10
    #: include the model's previous thoughts in the summaries
    include_thoughts: bool = False
    #: attach the accessibility/UI tree text of the current screen
    include_tree: bool = False
    #: cut the tree (and any quoted model text) to this many characters
    max_tree_chars: int = 4000
    max_quote_chars: int = 200
    #: text appended to the format's system prompt
    system_suffix: str = ""
    #: replaces the format's generated system prompt when set (e.g. a short one for tiny models,
    #: whose prompt length is mostly compute: they learn the mapping, not the instructions)
    system_prompt: str | None = None
    #: state the goal again at the end of the user message, after the screen's elements, so that the
    #: reply starts a few tokens after it (a small model copying a name the goal spells then looks a
    #: short, nearly fixed distance back instead of across the screenshot's tokens)
    repeat_goal: bool = False

    def __post_init__(self) -> None:
        if self.history_images < 1:
            raise ValueError("history_images must be >= 1 (the current screenshot is always shown)")
        if self.max_history < 0:
            raise ValueError("max_history must be >= 0")
        if self.max_tree_chars < 0 or self.max_quote_chars < 0:
            raise ValueError("max_tree_chars and max_quote_chars must be >= 0")


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(0, n - 3)] + "..."


def summarize_step(step: Step, fmt: "ActionFormat", config: PromptConfig = PromptConfig()) -> str:
    """One line for a past step: the action as ``fmt`` prints it, or why there was none, plus errors."""
    size = step.observation.size
    if step.action is not None:
        try:
            did = _printed(fmt, step, "").strip()
        except Exception as e:  # a format that cannot print an action kind: say so, keep going
            did = f"{step.action.kind} (not expressible in this format: {e})"
        did = _cut(did.replace("\n", " "), config.max_quote_chars * 2)
    elif step.parse_error is not None:
        did = (f"invalid output ({step.parse_error.code}: {step.parse_error.message}): "
               f"{_cut(step.response.strip(), config.max_quote_chars)!r}")
    else:
        did = "no action"
    line = f"Step {step.index + 1}: {did}"
    if config.include_thoughts and step.thought:
        line += f" | thought: {_cut(step.thought.strip(), config.max_quote_chars)}"
    if step.action_error:
        line += f" | error: {_cut(step.action_error, config.max_quote_chars)}"
    return line


def build_chat(goal: str, history: Sequence[Step], observation: Observation, fmt: "ActionFormat",
               config: PromptConfig = PromptConfig()) -> Chat:
    """The chat for the next turn, given the goal, the steps so far and the current observation."""
    history = list(history)
    n_img_steps = min(len(history), config.history_images - 1)
    text_steps = history[: len(history) - n_img_steps]
    img_steps = history[len(history) - n_img_steps:]
    parts: list[Any] = [f"Goal: {goal}"]
    dropped = max(0, len(text_steps) - config.max_history)
    kept = text_steps[dropped:] if config.max_history else []
    dropped = len(text_steps) - len(kept)
    if kept or dropped:
        lines = [f"({dropped} earlier steps omitted)"] if dropped else []
        lines += [summarize_step(s, fmt, config) for s in kept]
        parts.append("Previous steps:\n" + "\n".join(lines))
    for s in img_steps:
        if s.observation.screenshot is not None:
            parts += [f"Screenshot before step {s.index + 1}:", s.observation.screenshot]
        parts.append(summarize_step(s, fmt, config))
    if observation.screenshot is None:
        raise ValueError("the current observation has no screenshot (load its blob from the store first)")
    parts += ["Current screenshot:", observation.screenshot]
    if observation.last_action_error:
        parts.append(f"The last action failed: {_cut(observation.last_action_error, config.max_quote_chars)}")
    if config.include_tree and observation.tree:
        parts.append("UI tree:\n" + _cut(observation.tree, config.max_tree_chars))
    observation_text = getattr(fmt, "observation_text", None)  # a format that lists the screen (marks)
    if observation_text is not None:
        parts.append(observation_text(observation))
    if config.repeat_goal:
        parts.append(f"Goal: {goal}")
    base = config.system_prompt if config.system_prompt is not None else _system_prompt(fmt, observation.size)
    system = base + (("\n\n" + config.system_suffix) if config.system_suffix else "")
    return [{"role": "system", "content": system}, _merge_text(message("user", *parts))]


def _system_prompt(fmt: "ActionFormat", size: tuple[int, int]) -> str:
    """The format's prompt for this screen size (formats stating the resized resolution need it)."""
    try:
        takes_size = "image_size" in inspect.signature(fmt.system_prompt).parameters
    except (TypeError, ValueError):
        takes_size = False
    return fmt.system_prompt(size) if takes_size else fmt.system_prompt()


def _merge_text(msg: Any) -> Any:
    """Join neighbouring text parts with newlines (fewer, cleaner parts for every template)."""
    out: list[Any] = []
    for p in msg["content"]:
        if p["type"] == "text" and out and out[-1]["type"] == "text":
            out[-1] = {"type": "text", "text": out[-1]["text"] + "\n" + p["text"]}
        else:
            out.append(p)
    return {"role": msg["role"], "content": out}


def sft_target(step: Step, fmt: "ActionFormat") -> str:
    """The assistant text a model should have produced at ``step`` (its action, printed by ``fmt``)."""
    if step.action is None:
        raise ValueError(f"step {step.index} has no action to imitate")
    return _printed(fmt, step, step.thought)


def _printed(fmt: "ActionFormat", step: Step, thought: str) -> str:
    """The step's action printed by ``fmt`` on the step's screen (a format that names elements by their
    listed names reads them off the screen, ``format_on``); by ``format`` for every other format."""
    format_on = getattr(fmt, "format_on", None)
    if format_on is not None:
        return format_on(_adapted(fmt, step), step.observation, thought)
    return fmt.format(_adapted(fmt, step), step.observation.size, thought)


def _adapted(fmt: "ActionFormat", step: Step) -> Any:
    """The step's action as ``fmt`` speaks it on the step's screen (the marks format turns a point on a
    numbered element into the element action); the action itself for formats without ``adapt``."""
    adapt = getattr(fmt, "adapt", None)
    return step.action if adapt is None else adapt(step.action, step.observation)


def sft_example(trajectory: Trajectory, index: int, fmt: "ActionFormat",
                config: PromptConfig = PromptConfig()) -> tuple[Chat, str]:
    """``(chat, target text)`` for step ``index`` of a trajectory: what the agent saw and should say."""
    steps = trajectory.steps
    if not (0 <= index < len(steps)):
        raise IndexError(f"step {index} out of range for {len(steps)} steps")
    chat = build_chat(trajectory.task.goal, steps[:index], steps[index].observation, fmt, config)
    return chat, sft_target(steps[index], fmt)
