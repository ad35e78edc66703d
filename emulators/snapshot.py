"""Env states: what :meth:`GuiEnv.snapshot <emulators.base.GuiEnv.snapshot>` captures and
:meth:`GuiEnv.restore <emulators.base.GuiEnv.restore>` puts back, and the start states a reset
restores instead of building them again.

An :class:`EnvState` is a frozen value taken between two steps: the episode's
:class:`~guiagent.types.TaskSpec`, its step count, answer and last observation, and either

* ``mode="capture"``: what the task holds (``task``: a webapps session's server-side state) and what
  the device holds (``device``, a :class:`DeviceState`: the page as it stands, an emulator snapshot's
  name), put back as they were; or
* ``mode="replay"``: the actions since the reset, played again on a fresh episode of the same seed
  (MiniWoB++ pages, whose state lives in JavaScript closures nothing can read), then checked: the
  screen must come back byte for byte, or the restore fails.

A state is checked when it is made or loaded (:meth:`EnvState.from_dict`): its step count lies in
0..its task's ``max_steps`` (at most :data:`MAX_STATE_STEPS`), its lists are no longer than an episode
can make them, its counters are of their types. Its saved page is data: the webapps restore
(``static/app.js``) drops whatever could run script in it (scripts not the page's own, ``on*``
attributes, ``javascript:`` URLs, frames, objects) before the document takes it, so a tampered state
runs no code in the page; MiniWoB++ states hold no page (their actions are played again).

States of the webapps and MiniWoB++ suites are plain data (:meth:`EnvState.to_dict` is JSON); an
Android state names a snapshot that lives on its emulator. A state may be restored on another env
of the same task (another slot, another process), which is what branching rollouts do; an Android
state only on the emulator that holds it. docs/gymnasium.md ("Snapshots") says what each suite can
snapshot and what it costs.

:class:`StartStates` keeps start states by (task, parameters, device configuration): an env that
resets to a start it has seen before (the G episodes of a group share their seed) restores it
instead of building it (``GuiEnv(start_states=...)``).

Example::

    state = env.snapshot()                 # after some steps
    obs = env.restore(state)               # the same screen, task state and step count
    other_env.restore(state)               # the same episode, now in another slot as well
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from guiagent.types import Action, Observation, ParseError, TaskSpec, action_from_dict, action_to_dict

__all__ = ["SnapshotError", "DeviceState", "EnvState", "StartStates", "START_STATES"]

#: the layout of :meth:`EnvState.to_dict`; a state of another version is refused
STATE_VERSION = 1
#: the longest episode a state may be of (its task's ``max_steps``); a state is checked against it when
#: made or loaded, so ``steps=10**30`` or a million replay actions is refused, not acted on
MAX_STATE_STEPS = 100_000
#: the most milestones a state may hold, and the longest answer
MAX_MILESTONES = 1_000
MAX_TEXT = 1_000_000


def _short(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of {v.bit_length()} bits"
    r = repr(v)
    return r if len(r) <= 60 else r[:60] + "..."


class SnapshotError(Exception):
    """A state cannot be captured or put back: this env cannot snapshot at all
    (``GuiEnv.snapshot_support`` says why), not right now (a request still in flight, a dead
    device), or the state is not one this env can take (another task, an emulator that does not
    hold it, a screen that did not come back the same). The env is left as it was, except after a
    failed restore: that episode is over (``reset`` or ``restore`` again)."""


@dataclass(frozen=True)
class DeviceState:
    """What a device captured: ``kind`` names who reads it back (``browser-page``,
    ``android-snapshot``), ``data`` is plain JSON-able data in that kind's layout."""

    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "data": json.loads(json.dumps(self.data))}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DeviceState":
        if not isinstance(d, Mapping) or not isinstance(d.get("kind"), str) or not isinstance(d.get("data"), Mapping):
            raise ValueError("a device state is an object {kind: str, data: object}")
        return cls(d["kind"], dict(d["data"]))


@dataclass(frozen=True)
class EnvState:
    """One env's state between two steps (see the module docstring).

    ``observation`` is the last observation as the agent saw it (screenshot bytes as captured);
    ``milestones`` the task's sub-goals reached then; ``steps``, ``done`` and ``answer`` the
    episode's counters. ``task`` and ``device`` (capture mode) or ``actions`` and
    ``oracle_calls`` (replay mode: the step index at which each oracle call was made, so a
    scripted solver's plan is rebuilt too) hold the rest.
    """

    spec: TaskSpec
    steps: int
    done: bool
    answer: str | None
    observation: Observation
    milestones: tuple[bool, ...]
    mode: Literal["capture", "replay"]
    task: Any = None
    device: DeviceState | None = None
    actions: tuple[Action | ParseError, ...] = ()
    oracle_calls: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in ("capture", "replay"):
            raise ValueError(f"mode must be 'capture' or 'replay', got {self.mode!r}")
        if not isinstance(self.spec, TaskSpec):
            raise ValueError(f"spec must be a TaskSpec, got {type(self.spec).__name__}")
        if not isinstance(self.spec.max_steps, int) or not 1 <= self.spec.max_steps <= MAX_STATE_STEPS:
            raise ValueError(f"the task's max_steps must lie in 1..{MAX_STATE_STEPS}, got {_short(self.spec.max_steps)}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or not 0 <= self.steps <= self.spec.max_steps:
            raise ValueError(f"steps must lie in 0..{self.spec.max_steps} (the task's max_steps), got {_short(self.steps)}")
        if not isinstance(self.done, bool):
            raise ValueError(f"done must be true or false, got {_short(self.done)}")
        if self.answer is not None and (not isinstance(self.answer, str) or len(self.answer) > MAX_TEXT):
            raise ValueError(f"answer must be a text of at most {MAX_TEXT:,} characters")
        if not isinstance(self.observation, Observation):
            raise ValueError(f"observation must be an Observation, got {type(self.observation).__name__}")
        if len(self.milestones) > MAX_MILESTONES:
            raise ValueError(f"at most {MAX_MILESTONES} milestones, got {len(self.milestones)}")
        if self.mode == "replay" and len(self.actions) != self.steps:
            raise ValueError(f"a replay state holds one action a step: {len(self.actions)} for {self.steps} steps")
        if len(self.actions) > self.spec.max_steps:
            raise ValueError(f"{len(self.actions)} actions for an episode of at most {self.spec.max_steps} steps")
        calls = self.oracle_calls
        if len(calls) > 4 * (self.steps + 1) or any(isinstance(c, bool) or not isinstance(c, int)
                                                     or not 0 <= c <= self.steps for c in calls) \
                or list(calls) != sorted(calls):
            raise ValueError(f"oracle_calls must be step counts in 0..{self.steps}, in order")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (screenshot in base64); ``ValueError`` when the task's state is not plain data."""
        try:
            task = json.loads(json.dumps(self.task))
        except (TypeError, ValueError) as e:
            raise ValueError(f"the task state of {self.spec.task_id} is not plain data: {e}") from None
        return {
            "version": STATE_VERSION, "spec": self.spec.to_dict(), "steps": self.steps, "done": self.done,
            "answer": self.answer, "observation": self.observation.to_dict(), "milestones": list(self.milestones),
            "mode": self.mode, "task": task, "device": self.device.to_dict() if self.device else None,
            "actions": [_action_dict(a) for a in self.actions], "oracle_calls": list(self.oracle_calls),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EnvState":
        """The state :meth:`to_dict` wrote; ``ValueError`` for anything else."""
        if not isinstance(d, Mapping):
            raise ValueError("an env state is a JSON object")
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"env state version {d.get('version')!r}; this guiagent reads {STATE_VERSION}")
        try:
            for key, kind in (("steps", int), ("done", bool), ("milestones", list), ("actions", list),
                              ("oracle_calls", list), ("spec", Mapping), ("observation", Mapping)):
                if not isinstance(d[key], kind) or (kind is int and isinstance(d[key], bool)):
                    raise ValueError(f"{key} must be {kind.__name__}, got {_short(d[key])}")
            if len(d["actions"]) > MAX_STATE_STEPS or len(d["milestones"]) > MAX_MILESTONES \
                    or len(d["oracle_calls"]) > 4 * (MAX_STATE_STEPS + 1):
                raise ValueError("lists longer than any episode's")  # before a million actions are built
            return cls(
                spec=TaskSpec.from_dict(d["spec"]), steps=d["steps"], done=d["done"],
                answer=d["answer"] if d["answer"] is None else str(d["answer"]),
                observation=Observation.from_dict(d["observation"]),
                milestones=tuple(bool(m) for m in d["milestones"]), mode=d["mode"], task=d["task"],
                device=DeviceState.from_dict(d["device"]) if d["device"] is not None else None,
                actions=tuple(_action_from(a) for a in d["actions"]),
                oracle_calls=tuple(d["oracle_calls"]))
        except (KeyError, TypeError, OverflowError) as e:
            raise ValueError(f"not an env state: {type(e).__name__}: {e}") from None


def _action_dict(a: Action | ParseError) -> dict[str, Any]:
    return {"parse_error": a.to_dict()} if isinstance(a, ParseError) else action_to_dict(a)


def _action_from(d: Mapping[str, Any]) -> Action | ParseError:
    if "parse_error" in d:
        return ParseError.from_dict(d["parse_error"])
    return action_from_dict(d)


class StartStates:
    """Start states by key, the least recently used dropped past ``max_states``; thread-safe.

    Keys come from :meth:`GuiEnv.start_key <emulators.base.GuiEnv.start_key>`: the task, its
    parameters and the device's configuration (what the first screen depends on). A webapps
    start state holds the first screenshot, the page and the session's state: ~60-120 KB.
    """

    def __init__(self, max_states: int = 64):
        if max_states < 1:
            raise ValueError(f"max_states must be >= 1, got {max_states}")
        self.max_states = max_states
        self._lock = threading.Lock()
        self._states: OrderedDict[str, EnvState] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> EnvState | None:
        with self._lock:
            state = self._states.get(key)
            if state is None:
                self.misses += 1
                return None
            self._states.move_to_end(key)
            self.hits += 1
            return state

    def put(self, key: str, state: EnvState) -> None:
        with self._lock:
            self._states[key] = state
            self._states.move_to_end(key)
            while len(self._states) > self.max_states:
                self._states.popitem(last=False)

    def discard(self, key: str) -> None:
        with self._lock:
            self._states.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._states)


#: the process's start states, shared by its envs (the slots of a pool worker)
START_STATES = StartStates()
