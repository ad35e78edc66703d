"""Supervised fine-tuning on stored successful trajectories (behaviour cloning).

Each step of a successful episode becomes one example: the chat the agent saw
(:func:`rl.prompting.sft_example`) and, as the target, the step's
action printed by the action format. The loss is the negative log-likelihood of
the assistant's tokens only, optionally up-weighting the action name and the
coordinate digits ("action-aware" SFT): those are the few tokens that decide
where the tap lands, and they drown among JSON punctuation otherwise.

Recipe (what it teaches a tiny model on CPU: docs/results.md, "Learning from scratch on
CPU"): AdamW, lr 1e-3, β2 0.98, 30 warm-up steps, cosine decay, batch 8.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from tqdm import tqdm

from emulators.names import made_up_name
from guiagent.store import EpisodeFilter, StoreReader
from guiagent.types import ELEMENT_ACTION_TYPES, ParseError, Step, Trajectory
from rl.agents import format_for_policy
from rl.prompting import build_chat, sft_example

__all__ = ["GOAL_FRAMES", "Relabel", "SFTConfig", "SFTExample", "frame_goal", "goal_relabels", "load_examples",
           "replace_goal", "TOGGLE_ROLES", "token_weights", "train_sft"]


@dataclass(frozen=True)
class SFTConfig:
    """Optimisation settings of an SFT run."""

    lr: float = 1e-3
    beta2: float = 0.98
    weight_decay: float = 0.0
    warmup_steps: int = 30
    steps: int = 300
    """optimiser steps"""
    batch_size: int = 8
    """examples per optimiser step (split into micro-batches)"""
    micro_batch_size: int = 8
    """examples per forward/backward pass; gradient accumulation covers the rest"""
    action_weight: float = 1.0
    """loss weight of the action-name tokens (action-aware SFT; 1 = plain SFT)"""
    coord_weight: float = 1.0
    """loss weight of the coordinate digit tokens (action-aware SFT; 1 = plain SFT)"""
    name_weight: float = 1.0
    """loss weight of the tokens of the element's name in an element action given by name (the marks
    format's "name": "Files"): the one part of such a reply the goal decides, among a JSON frame's
    twenty-odd tokens that every reply shares (1 = plain SFT)"""
    goal_frames: float = 0.0
    """share of the examples drawn whose goal is framed by neutral words before and after it
    (:data:`GOAL_FRAMES`, "Please ... Thanks."), drawn afresh each time: a goal's length then says
    nothing of its target, so the model must read the goal's words (0 = the goals as recorded)"""
    goal_relabel: float = 0.0
    """share of the examples drawn, among first steps whose goal names the element they act on, that
    are relabelled in hindsight (:func:`goal_relabels`): the goal names another element of the same
    role on that screen and the reply acts on it ("Open the Files app." -> tap Files becomes "Open
    the Clock app." -> tap Clock). Every name on a screen then becomes a target as often as any
    other, in every context the recorded goals give it, and the reply is the goal's name copied
    (0 = the goals as recorded)"""
    rename: float = 0.0
    """share of the examples drawn whose target element's name (the name an element action gives by, when
    the goal names it too) is replaced in the whole chat (goal, element list, history) and in the reply by
    a made-up name of the same shape, drawn afresh each time (:func:`made_up_name`; never a name the
    suite holds out of training): with names that never repeat, the model cannot keep a map from each
    name to itself and has to copy the name the goal spells, which carries over to targets no
    demonstration held (0 = the names as recorded)"""
    recover: float = 0.0
    """share of the examples drawn whose chat holds one failed turn just before the step (:func:`failed_turns`):
    a reply of the kinds a small model gets wrong (an element named as no element of the screen is, a
    name cut short, a reply broken off) with the error the env reports for it, in the history and as the
    screen's error note, while the reply to learn stays the demonstrated one (the failed turn changed
    nothing). Demonstrations hold no failure, so a model that fails once meets a prompt unlike any it
    learned on; these show it one. Measured once (six MiniWoB++ tasks, 0.3): worse held-out, the
    recovery not learned (docs/results.md, "Failed turns in the warm start") (0 = the chats as recorded)"""
    max_grad_norm: float = 1.0
    seed: int = 0
    checkpoint_every: int = 0
    """save a checkpoint every N steps (0: only at the end)"""

    def __post_init__(self) -> None:
        if self.batch_size % self.micro_batch_size:
            raise ValueError("batch_size must be a multiple of micro_batch_size")
        if self.steps <= 0 or self.lr <= 0:
            raise ValueError("steps and lr must be positive")
        if min(self.action_weight, self.coord_weight, self.name_weight) <= 0:
            raise ValueError("action_weight, coord_weight and name_weight must be positive")
        if not 0.0 <= self.goal_frames <= 1.0:
            raise ValueError(f"goal_frames must be in [0, 1], got {self.goal_frames}")
        if not 0.0 <= self.goal_relabel <= 1.0:
            raise ValueError(f"goal_relabel must be in [0, 1], got {self.goal_relabel}")
        if not 0.0 <= self.rename <= 1.0:
            raise ValueError(f"rename must be in [0, 1], got {self.rename}")
        if not 0.0 <= self.recover <= 1.0:
            raise ValueError(f"recover must be in [0, 1], got {self.recover}")


@dataclass(frozen=True)
class SFTExample:
    chat: list
    target: str
    completion_ids: tuple[int, ...]
    weights: tuple[float, ...]
    episode_id: str
    step_index: int
    goal: str = ""
    """the task's goal as the chat states it (what :func:`frame_goal` frames)"""
    relabels: tuple["Relabel", ...] = ()
    """hindsight relabellings of this step (:func:`goal_relabels`; built when
    :attr:`SFTConfig.goal_relabel` is on)"""
    name: str = ""
    """the element name the reply acts on, when the goal names it too (what :attr:`SFTConfig.rename`
    replaces); "" otherwise"""
    suite: str = ""
    """the suite of the episode (whose held-out names a made-up name must not be)"""
    failed: tuple[list, ...] = ()
    """the same step's chat after one failed turn, one per kind of failure (:func:`failed_turns`; built
    when :attr:`SFTConfig.recover` is on)"""


@dataclass(frozen=True)
class Relabel:
    """The same screen with another goal and the reply it asks for (:func:`goal_relabels`)."""

    goal: str
    target: str
    completion_ids: tuple[int, ...]
    weights: tuple[float, ...]

    def apply(self, e: "SFTExample") -> "SFTExample":
        """``e`` with this goal in its chat and this reply as its target."""
        return replace(e, chat=replace_goal(e.chat, e.goal, self.goal), target=self.target,
                       completion_ids=self.completion_ids, weights=self.weights, goal=self.goal, relabels=())


#: neutral words put before and after a goal (:attr:`SFTConfig.goal_frames`): they change its length
#: by 0-3 words on each side and leave what it asks unchanged
GOAL_FRAMES: tuple[tuple[str, ...], tuple[str, ...]] = (
    ("", "Please ", "Now ", "Now please ", "Please now, ", "Next, please "),
    ("", " Thanks.", " Now.", " Please.", " Go ahead now.", " Thank you."))


def frame_goal(chat: list, goal: str, rng: random.Random) -> list:
    """``chat`` with every ``Goal: <goal>`` in its text framed by a random pair of :data:`GOAL_FRAMES`
    (the same pair everywhere; the original chat is not changed).

    Why: a tiny model trained on fixed goal templates ("Open the X app.") can tell its targets
    apart by the goal's length in tokens alone, which a name's length gives away, and then never
    reads the name: names of equal length all get one answer (docs/training.md, "Goal-conditioned
    grounding"). Framing goals at random makes their length uninformative."""
    before, after = rng.choice(GOAL_FRAMES[0]), rng.choice(GOAL_FRAMES[1])
    if not goal or (not before and not after):
        return chat
    return replace_goal(chat, goal, f"{before}{goal}{after}")


def replace_goal(chat: list, goal: str, new_goal: str) -> list:
    """``chat`` with every ``Goal: <goal>`` in its text made ``Goal: <new_goal>`` (the original chat
    and its images are shared, not changed)."""
    if not goal or goal == new_goal:
        return chat
    old, new = f"Goal: {goal}", f"Goal: {new_goal}"
    out = []
    for m in chat:
        content = m.get("content")
        if isinstance(content, str):
            m = {**m, "content": content.replace(old, new)}
        elif isinstance(content, list):
            m = {**m, "content": [{**part, "text": part["text"].replace(old, new)}
                                  if part.get("type") == "text" and isinstance(part.get("text"), str) else part
                                  for part in content]}
        out.append(m)
    return out


def load_trajectories(run_dirs: Sequence[str], *, successful_only: bool = True, tasks: Sequence[str] = ()
                      ) -> list[Trajectory]:
    """Completed (and, by default, successful) trajectories of the given run directories, with pixels."""
    out: list[Trajectory] = []
    for d in run_dirs:
        reader = StoreReader(d)
        try:
            kw: dict[str, Any] = {"status": "completed"}
            if successful_only:
                kw["outcome"] = "success"
            for s in reader.iter_episodes(EpisodeFilter(**kw)):
                if tasks and s.task_id not in tasks:
                    continue
                out.append(reader.load_trajectory(s.episode_id, pixels=True))
        finally:
            reader.close()
    return out


#: the value of an element action's ``"name"`` in a reply (a JSON string, escapes included)
_ELEMENT_NAME = re.compile(r'"name":\s*"((?:[^"\\]|\\.)*)"')


def token_weights(policy: Any, ids: Sequence[int], target: str, action_kind: str, *, action_weight: float,
                  coord_weight: float, name_weight: float = 1.0) -> tuple[float, ...]:
    """Per-token loss weights: digits of numbers get ``coord_weight``, the action name ``action_weight``,
    the element's name of an element action given by name ``name_weight`` (a token that overlaps
    the name's characters gets it; the name's weight wins over a digit's)."""
    if action_weight == 1.0 and coord_weight == 1.0 and name_weight == 1.0:
        return tuple(1.0 for _ in ids)
    tok = policy.tokenizer
    weights = []
    pos = 0
    name_at = target.find(action_kind) if action_kind else -1
    element = any(f'"{cls.kind}"' in target for cls in ELEMENT_ACTION_TYPES)  # the oracle's tap, printed by name
    m = _ELEMENT_NAME.search(target) if name_weight != 1.0 and element else None
    span = m.span(1) if m else (-1, -1)
    for i in ids:
        piece = tok.decode([i])
        start = pos
        pos += len(piece)
        w = 1.0
        if start < span[1] and pos > span[0]:
            w = name_weight
        elif any(ch.isdigit() for ch in piece):
            w = coord_weight
        elif name_at >= 0 and start < name_at + len(action_kind) and pos > name_at:
            w = action_weight
        weights.append(w)
    return tuple(weights)


def _names_in(goal: str, name: str) -> int:
    """How many times ``name`` occurs in ``goal`` as whole words."""
    return len(re.findall(r"(?<!\w)" + re.escape(name) + r"(?!\w)", goal)) if name else 0


#: roles whose tap flips a state the marks do not record (on/off): a relabelled "Turn off X" could
#: then be a tap that turns X on, so :func:`goal_relabels` leaves their steps as recorded
TOGGLE_ROLES = frozenset({"switch", "checkbox", "radio", "menuitemcheckbox", "menuitemradio", "togglebutton"})


def _reply_name(target: str) -> str | None:
    """The element's name in a reply that acts on an element by name (unescaped), else None."""
    m = _ELEMENT_NAME.search(target)
    if m is None:
        return None
    try:
        return json.loads(f'"{m.group(1)}"')
    except ValueError:
        return None


def goal_relabels(trajectory: Trajectory, index: int, fmt: Any, chat: list, target: str,
                  avoid: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """Hindsight relabellings of step ``index``: ``(goal, target)`` pairs on the same screen.

    Only a first step (no history to contradict) whose reply acts on a listed element by its name,
    where that name occurs exactly once in the goal as whole words: for every other element of the
    same role and of a like size (:func:`_alike`: the siblings of a grid, list or bar) on the
    screen whose name (as a reply gives it) is its own, absent from the goal and
    neither part of the recorded name nor containing it, the goal with the name swapped and the
    same action on that element. "Open the Files app." -> tap Files gives "Open the Clock app." ->
    tap Clock, as true a demonstration as the recorded one. Toggles (:data:`TOGGLE_ROLES`) give
    none, since the marks do not say which way each one stands; nor do goals the chat does not
    state as ``Goal: ...`` (nothing to swap), nor an element named as one of ``avoid`` (targets held out
    of training)."""
    if index != 0 or getattr(fmt, "adapt", None) is None or not hasattr(fmt, "format_on"):
        return []
    step = trajectory.steps[index]
    goal, marks = trajectory.task.goal, step.observation.marks or ()
    name = _reply_name(target)
    if not marks or not name or _names_in(goal, name) != 1 or not _states_goal(chat, goal):
        return []
    action = fmt.adapt(step.action, step.observation)
    if not isinstance(action, ELEMENT_ACTION_TYPES):
        return []
    mark = next((m for m in marks if m.id == action.element), None)
    if mark is None or mark.role in TOGGLE_ROLES:
        return []
    out: list[tuple[str, str]] = []
    seen = {name}
    for m in marks:
        if m.id == mark.id or m.role != mark.role or not _alike(m.box, mark.box):
            continue
        thought = step.thought or ""
        alt = fmt.format_on(replace(action, element=m.id), step.observation, thought)
        other = _reply_name(alt)
        if (not other or not other.strip() or other in seen or _names_in(goal, other)
                or other in name or name in other or other in avoid):
            continue
        seen.add(other)
        new_goal = re.sub(r"(?<!\w)" + re.escape(name) + r"(?!\w)", lambda _: other, goal)
        if thought:
            alt = fmt.format_on(replace(action, element=m.id), step.observation, thought.replace(name, other))
        out.append((new_goal, alt))
    return out


def _alike(a: tuple[float, ...], b: tuple[float, ...], ratio: float = 1.5) -> bool:
    """Whether two boxes are siblings' boxes: width and height each within ``ratio`` of the other's
    (the icons of a grid, the rows of a list, the tabs of a bar; not a list row and its toolbar's
    back arrow, which share a role)."""
    def close(u: float, v: float) -> bool:
        return u > 0 and v > 0 and max(u, v) <= ratio * min(u, v)
    return close(a[2] - a[0], b[2] - b[0]) and close(a[3] - a[1], b[3] - b[1])


def _states_goal(chat: list, goal: str) -> bool:
    """Whether some text of ``chat`` holds ``Goal: <goal>`` (what :func:`replace_goal` swaps)."""
    needle = f"Goal: {goal}"
    for m in chat:
        content = m.get("content")
        parts = [content] if isinstance(content, str) else [
            p.get("text") for p in content or () if isinstance(p, dict)] if isinstance(content, list) else []
        if any(isinstance(t, str) and needle in t for t in parts):
            return True
    return False


def load_examples(trajs: Sequence[Trajectory], policy: Any, fmt: Any, prompt_config: Any, cfg: SFTConfig
                  ) -> list[SFTExample]:
    """One example per step with an action: the chat the agent saw and the target ``fmt`` prints,
    with coordinates in the frame of ``policy``'s image processor (see
    :func:`rl.agents.format_for_policy`)."""
    fmt = format_for_policy(fmt, policy)  # targets in the frame of the model's own image processor
    # a relabelled goal never asks for a target held out of training
    avoid = _held_out_names({t.task.suite for t in trajs}) if cfg.goal_relabel else frozenset()
    out = []
    for t in trajs:
        for i, step in enumerate(t.steps):
            if step.action is None:
                continue
            try:
                chat, target = sft_example(t, i, fmt, prompt_config)
            except ValueError:  # an action the format cannot express: skip the step, keep the rest
                continue
            ids = policy.encode_completion(target)
            w = token_weights(policy, ids, target, step.action.kind, action_weight=cfg.action_weight,
                              coord_weight=cfg.coord_weight, name_weight=cfg.name_weight)
            relabels = []
            if cfg.goal_relabel:
                for goal, alt in goal_relabels(t, i, fmt, chat, target, avoid):
                    alt_ids = policy.encode_completion(alt)
                    relabels.append(Relabel(goal, alt, tuple(alt_ids), token_weights(
                        policy, alt_ids, alt, step.action.kind, action_weight=cfg.action_weight,
                        coord_weight=cfg.coord_weight, name_weight=cfg.name_weight)))
            name = _reply_name(target) or ""
            failed = tuple(failed_turns(t, i, fmt, prompt_config, target)) if cfg.recover else ()
            out.append(SFTExample(chat, target, tuple(ids), w, t.episode_id, i, goal=t.task.goal,
                                  relabels=tuple(relabels), name=name if _names_in(t.task.goal, name) else "",
                                  suite=t.task.suite, failed=failed))
    return out


def failed_turns(trajectory: Trajectory, index: int, fmt: Any, prompt_config: Any, target: str) -> list[list]:
    """Step ``index``'s chat as it reads after one failed turn on the same screen, for each kind of failure
    the screen allows, each as a rollout would prompt it: the failed reply in the history (``invalid
    output (...)``, with the env's error) and the env's error note on the screen (:meth:`ParseError.
    as_action_error`). The kinds: the element action of ``target`` (the demonstrated reply) naming its
    element cut to its first half, or with its last letter doubled, and naming a name the goal quotes
    that no element of the screen has (a link to be found behind a tab, copied before it shows); the
    reply broken off in its middle. Only a reply that does not parse on the screen is kept: a failed turn
    changes nothing, so the demonstrated reply is still the one to learn."""
    step = trajectory.steps[index]
    obs = step.observation
    bad: list[str] = []
    name = _reply_name(target)
    if name:
        cut = name[: max(1, len(name) // 2)].rstrip()
        bad += [_with_name(target, cut), _with_name(target, name + name[-1])]
        bad += [_with_name(target, q) for q in re.findall(r'"([^"\n]{1,80})"', trajectory.task.goal) if q != name]
    if len(target) > 8:
        bad.append(target[: len(target) // 2])
    out: list[list] = []
    seen: set[str] = set()
    for reply in bad:
        if not reply or reply in seen:
            continue
        seen.add(reply)
        parse_on = getattr(fmt, "parse_on", None)
        error = parse_on(reply, obs) if parse_on is not None else fmt.parse(reply, obs.size)
        if not isinstance(error, ParseError):
            continue  # it names an element after all (or parses): not a failure on this screen
        failed = Step(index, obs, None, response=reply, parse_error=error, action_error=error.as_action_error())
        after = replace(obs, last_action_error=error.as_action_error())
        out.append(build_chat(trajectory.task.goal, [*trajectory.steps[:index], failed], after, fmt, prompt_config))
    return out


def _with_name(target: str, name: str) -> str:
    """``target`` (a reply naming an element) naming ``name`` instead."""
    return _ELEMENT_NAME.sub(lambda _: '"name": ' + json.dumps(name, ensure_ascii=False), target, count=1)


def rename_target(e: SFTExample, new: str, policy: Any, cfg: "SFTConfig") -> SFTExample:
    """``e`` with its target's name (:attr:`SFTExample.name`) made ``new`` wherever it stands as a whole
    name in the chat's text and in the reply; the reply's ids and weights made again."""
    old = e.name
    pattern = re.compile(r"(?<![\w.])" + re.escape(old) + r"(?![\w])")

    def swap(text: str) -> str:
        return pattern.sub(lambda _: new, text)

    chat = []
    for m in e.chat:
        content = m.get("content")
        if isinstance(content, str):
            m = {**m, "content": swap(content)}
        elif isinstance(content, list):
            m = {**m, "content": [{**part, "text": swap(part["text"])}
                                  if part.get("type") == "text" and isinstance(part.get("text"), str) else part
                                  for part in content]}
        chat.append(m)
    target = e.target.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    ids = policy.encode_completion(target)
    kind = next((cls.kind for cls in ELEMENT_ACTION_TYPES if f'"{cls.kind}"' in target), "")
    w = token_weights(policy, ids, target, kind, action_weight=cfg.action_weight, coord_weight=cfg.coord_weight,
                      name_weight=cfg.name_weight)
    return replace(e, chat=chat, target=target, completion_ids=tuple(ids), weights=w, goal=swap(e.goal),
                   name=new, relabels=())


def _held_out_names(suites: set[str]) -> frozenset[str]:
    """Every name the ``suites`` hold out of training (a made-up name must never be one)."""
    from emulators.suites import get_suite  # lazy: the suite table (gymnasium), only when names are made up

    out: frozenset[str] = frozenset()
    for s in suites:
        try:
            out |= get_suite(s).held_out_names()
        except KeyError:  # episodes of a suite this install does not have: it holds nothing out here
            continue
    return out


def _lr_lambda(cfg: SFTConfig) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return f


def weighted_nll(policy: Any, batch: Sequence[SFTExample]) -> tuple[torch.Tensor, float]:
    """Σ w·(−log p) / Σ w over the batch's completion tokens (and the plain token-mean NLL, for logs)."""
    sb = policy.score_batch([e.chat for e in batch], [list(e.completion_ids) for e in batch], grad=True)
    w = _place(sb.mask, batch, sb.logprobs.dtype)
    loss = -(w * sb.logprobs).sum() / w.sum().clamp(min=1e-8)
    plain = float((-(sb.logprobs * sb.mask).sum() / sb.mask.sum().clamp(min=1)).detach())
    return loss, plain


def _place(mask: torch.Tensor, batch: Sequence[SFTExample], dtype: torch.dtype) -> torch.Tensor:
    w = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    for b, e in enumerate(batch):
        idx = mask[b].nonzero().flatten()
        if len(idx) != len(e.weights):
            raise RuntimeError(f"completion of {len(e.weights)} tokens but the mask holds {len(idx)}")
        w[b, idx] = torch.tensor(e.weights, dtype=dtype, device=mask.device)
    return w


def train_sft(policy: Any, examples: Sequence[SFTExample], cfg: SFTConfig, *, out_dir: str | None = None,
              log: Callable[[dict], None] | None = None, progress: bool = True, settings: Any = None) -> dict:
    """Train ``policy`` in place on ``examples``; returns figures (first/last loss, steps, seconds).

    ``settings`` (an :class:`rl.agents.AgentSettings`) is saved beside every checkpoint and the
    final model, so each one is prompted the way it was trained.
    """
    if not examples:
        raise ValueError("no SFT examples: the given runs hold no successful episodes with actions")

    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    avoid = _held_out_names({e.suite for e in examples if e.suite}) if cfg.rename else frozenset()
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, cfg.beta2), weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(cfg))
    order: list[int] = []
    losses: list[float] = []
    t0 = time.perf_counter()
    accum = cfg.batch_size // cfg.micro_batch_size
    progress = progress and sys.stderr.isatty()
    # steps done, steps/s and time left on a terminal (guiagent.progress); log lines otherwise
    bar = tqdm(range(cfg.steps), desc="sft", unit="step", file=sys.stderr, disable=not progress,
               dynamic_ncols=True, smoothing=0.1)
    for step in bar:
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for _ in range(accum):
            mb = []
            for _ in range(cfg.micro_batch_size):
                if not order:
                    order = list(range(len(examples)))
                    rng.shuffle(order)
                e = examples[order.pop()]
                if e.failed and cfg.recover and rng.random() < cfg.recover:
                    e = replace(e, chat=rng.choice(e.failed), failed=())
                if e.relabels and cfg.goal_relabel and rng.random() < cfg.goal_relabel:
                    e = rng.choice(e.relabels).apply(e)
                if e.name and cfg.rename and rng.random() < cfg.rename:
                    e = rename_target(e, made_up_name(rng, e.name, avoid), policy, cfg)
                if cfg.goal_frames and rng.random() < cfg.goal_frames:
                    e = replace(e, chat=frame_goal(e.chat, e.goal, rng))
                mb.append(e)
            loss, plain = weighted_nll(policy, mb)
            (loss / accum).backward()
            step_loss += plain / accum
        gn = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        sched.step()
        policy.mark_updated()
        losses.append(step_loss)
        bar.set_postfix(loss=f"{step_loss:.3f}")
        if not progress and ((step + 1) % max(1, cfg.steps // 10) == 0):
            print(f"sft step {step + 1}/{cfg.steps}: loss {step_loss:.3f} "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        if log is not None:
            log({"step": step, "loss": step_loss, "grad_norm": float(gn), "lr": sched.get_last_lr()[0]})
        if out_dir and cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            ck = Path(out_dir) / "checkpoints" / f"step-{step + 1}"
            policy.save(ck)
            if settings is not None:
                settings.save(str(ck))
    if out_dir:
        policy.save(out_dir)
        if settings is not None:
            settings.save(str(out_dir))
    k = max(1, min(10, len(losses) // 5))
    figures = {"steps": cfg.steps, "examples": len(examples), "seconds": round(time.perf_counter() - t0, 1),
               "loss_first": sum(losses[:k]) / k, "loss_last": sum(losses[-k:]) / k}
    if out_dir:
        (Path(out_dir) / "sft_log.json").write_text(json.dumps({"figures": figures, "config": dataclasses.asdict(cfg),
                                                                "losses": losses}))
    return figures
