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
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if self.mode == "replay" and len(self.actions) != self.steps:
            raise ValueError(f"a replay state holds one action a step: {len(self.actions)} for {self.steps} steps")

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
            return cls(
                spec=TaskSpec.from_dict(d["spec"]), steps=int(d["steps"]), done=bool(d["done"]),
                answer=d["answer"] if d["answer"] is None else str(d["answer"]),
                observation=Observation.from_dict(d["observation"]),
                milestones=tuple(bool(m) for m in d["milestones"]), mode=d["mode"], task=d["task"],
                device=DeviceState.from_dict(d["device"]) if d["device"] is not None else None,
                actions=tuple(_action_from(a) for a in d["actions"]),
                oracle_calls=tuple(int(i) for i in d["oracle_calls"]))
        except (KeyError, TypeError) as e:
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
