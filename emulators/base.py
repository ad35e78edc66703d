"""Device, Task and the Gymnasium-style environment that composes them.

Layers (after android_world's ``env/interface.py`` and ``task_eval.py``):

* :class:`Device` moves pixels: ``reset``, ``observe``, ``execute``, ``close``. It
  knows nothing of rewards.
* :class:`Task` sets a device up for one goal, evaluates it from device/app state,
  reports milestones for progress rewards and has a scripted ``oracle``.
* :class:`GuiEnv` (a :class:`gymnasium.Env`) loops: ``reset(seed=...)`` samples the
  task's parameters from the seed and sets it up; ``step(action)`` executes, observes
  and, when the episode ends, evaluates. Its Gymnasium face returns dict observations
  (``observation_space``) and takes JSON action strings (:class:`ActionText`); its
  typed face (``reset_typed``/``step_typed``) returns :class:`~guiagent.types.Observation`
  and the step's :class:`StepInfo`. See docs/gymnasium.md.

Success travels one way: the task's ``evaluate`` on the step that ends the episode ->
``StepInfo.success`` -> the rollout driver -> ``Trajectory.success`` (stored). The
Gymnasium ``step`` returns it as the reward too, because the Gym API wants a reward; that
is the same number seen through the Gym face, not a second path.

Errors: :class:`ActionError` (the action cannot be carried out: off-screen,
nothing focused, blocked navigation, unknown key) is *data*: it becomes the next
observation's ``last_action_error`` and the episode goes on. :class:`DeviceError`
(the browser or emulator died) truncates the episode with the reason in
``StepInfo.device_error``; the next ``reset`` must work on a fresh device.

Snapshots: ``GuiEnv.snapshot()`` returns an :class:`~emulators.snapshot.EnvState` and
``GuiEnv.restore(state)`` puts it back (on this env or another of the same task) and returns the
observation; ``GuiEnv.can_snapshot`` / ``snapshot_support()`` say whether the env can. The task
captures what it holds (``Task.snapshot`` / ``Task.restore``, by default its attributes and the
device's ``snapshot``) or asks to be replayed (``Task.snapshot_mode = "replay"``). See
:mod:`emulators.snapshot` and docs/gymnasium.md.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import multiprocessing
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Generic, Mapping, TypeVar

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.spaces import utils as space_utils
from gymnasium.vector.utils import shared_memory as shm
from PIL import Image

from emulators.snapshot import DeviceState, EnvState, SnapshotError, StartStates
from guiagent.types import (ELEMENT_ACTION_TYPES, Action, Answer, Finish, Observation, ParseError, TaskSpec,
                            action_from_dict, is_terminal)

__all__ = ["ActionError", "DeviceError", "RestoreMismatch", "Device", "Task", "GuiEnv", "StepInfo", "ActionText",
           "UnicodeText",
           "check_env", "dead_observation", "decode_screenshot", "observation_space", "parse_action",
           "SnapshotError", "EnvState", "DeviceState", "StartStates", "parse_flag", "TARGET_SPLITS"]

log = logging.getLogger(__name__)


def parse_flag(name: str, value: bool | str) -> bool:
    """A device option's yes/no, from Python (a bool) or the command line (``--device NAME true``)."""
    if isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        return value.lower() in ("true", "1", "yes")
    return bool(value)


class ActionError(Exception):
    """The device could not carry out an action; reported to the agent, episode goes on."""


class DeviceError(Exception):
    """The device is dead or unusable (crash, lost connection). The episode is truncated."""


class RestoreMismatch(SnapshotError):
    """A restore whose screen is not the captured one (another screenshot or other element boxes): the
    state did not come back, so the episode does not go on from it (a pool records the episode that
    was to continue it as aborted, with this reason)."""


class Device(ABC):
    """A screen the agent acts on. Returns no rewards."""

    @abstractmethod
    def reset(self) -> None:
        """Bring the device to a clean state (fresh page / home screen); replaces a dead one."""

    @abstractmethod
    def observe(self) -> Observation:
        """Screenshot (bytes as captured), UI tree text and location, after the screen settled."""

    @abstractmethod
    def execute(self, action: Action) -> None:
        """Carry out ``action`` and wait until the screen settles.

        Raises :class:`ActionError` for an action that cannot be carried out and
        :class:`DeviceError` when the device died.
        """

    @abstractmethod
    def close(self) -> None:
        """Release every resource. Safe to call twice."""

    #: whether :meth:`snapshot` and :meth:`restore` work (a device may decide per instance)
    can_snapshot: bool = False
    #: where the last element action executed was carried out, normalised ``(x, y)``, for a device that can say
    #: (``None``: not an element action, or not known); recorded with the step (``StepInfo.tap_point``)
    element_point: tuple[float, float] | None = None

    def snapshot(self) -> DeviceState:
        """The device's state as it stands (between two actions), for :meth:`restore`.

        Raises :class:`~emulators.snapshot.SnapshotError` where the device cannot capture it
        (the default)."""
        raise SnapshotError(f"{type(self).__name__} cannot snapshot its state")

    def restore(self, state: DeviceState) -> None:
        """Put back a state :meth:`snapshot` took; :class:`~emulators.snapshot.SnapshotError` when it cannot."""
        raise SnapshotError(f"{type(self).__name__} cannot restore a state")

    def state_key(self) -> str:
        """What the device's first screen of an episode depends on besides the task (its
        configuration), for :class:`~emulators.snapshot.StartStates`; ``""``: unknown, never shared."""
        return ""

    #: where envs on this device keep and find start states (:class:`GuiEnv`'s ``start_states``
    #: default; a suite that makes the device sets it where restoring a start beats building it)
    start_states: StartStates | None = None

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: the kind of device a task drives: ``Task[BrowserDevice]`` gets a ``BrowserDevice`` in every method
DeviceT = TypeVar("DeviceT", bound=Device)

#: which targets an episode may have (:meth:`Task.sample_targets`): any, only those training may use, only
#: the held-out ones, or those training may use shown under made-up names (:meth:`Task.rename_targets`)
TARGET_SPLITS = ("all", "seen", "unseen", "renamed")
#: draws :meth:`Task.sample_targets` tries before it gives up (a split that holds out a share p of the
#: episodes fails to fit with probability (1 - p) ** draws)
MAX_TARGET_DRAWS = 256


class Task(ABC, Generic[DeviceT]):
    """One task template; an instance holds the sampled parameters of one episode.

    Subclasses set ``task_id``, ``template`` (goal text with ``{param}`` fields),
    ``difficulty`` (``easy``/``medium``/``hard``) and ``max_steps``, and implement
    the abstract methods. ``evaluate`` must read the device's or app's state, never
    the agent's actions, except the final answer of information-retrieval tasks,
    which the environment passes in.

    A task is generic over the device it drives: ``class WebTask(Task[BrowserDevice])``
    types every ``device`` argument as a ``BrowserDevice`` (the webapps tasks); a plain
    ``Task`` subclass takes any :class:`Device`. The parameter is for type checkers: a task
    that needs a particular device checks it where the episode starts (``reset_device`` or
    ``setup``) and raises ``TypeError`` for another.
    """

    suite: ClassVar[str] = ""
    task_id: ClassVar[str] = ""
    template: ClassVar[str] = ""
    difficulty: ClassVar[str] = "easy"
    max_steps: ClassVar[int] = 10
    #: whether the episode succeeds only when the agent ended it (``Finish`` or ``Answer``): a task
    #: of a benchmark that scores an episode whose step budget ran out as failed whatever the
    #: device shows (android_world's ``suite_utils``: ``task_successful if done else 0.0``) sets it,
    #: so its numbers compare with the benchmark's; by default the state is evaluated on truncation too
    success_needs_finish: ClassVar[bool] = False

    def __init__(self, params: Mapping[str, Any]):
        self.params = dict(params)

    @classmethod
    @abstractmethod
    def sample_params(cls, rng: random.Random) -> dict[str, Any]:
        """Parameters of one episode, drawn only from ``rng`` (so a seed fixes them)."""

    @classmethod
    def target_split(cls, params: Mapping[str, Any]) -> str | None:
        """``"unseen"`` when the episode's parameters name a target its suite holds out of training
        (an app, a setting, a folder that no demonstration or training rollout may target), ``"seen"``
        when they name targets only training may use, ``None`` for a task without held-out targets
        (the default: every episode counts as seen)."""
        return None

    @classmethod
    def has_held_out_targets(cls) -> bool:
        """Whether some of this task's targets are held out (:meth:`target_split` can say ``unseen``)."""
        return False

    @classmethod
    def sample_targets(cls, rng: random.Random, targets: str = "all") -> dict[str, Any]:
        """:meth:`sample_params` restricted to ``targets``: ``all`` (any), ``seen`` (no held-out target:
        what training may use) or ``unseen`` (a held-out target: what shows generalisation). Draws
        again from the same ``rng`` until the episode fits, so a seed still fixes the parameters.
        ``renamed``: a ``seen`` episode with its targets under made-up names (:meth:`rename_targets`).
        :class:`ValueError` for ``unseen`` on a task without held-out targets."""
        if targets not in TARGET_SPLITS:
            raise ValueError(f"targets must be one of {', '.join(TARGET_SPLITS)}, got {targets!r}")
        if targets == "renamed":
            return cls.rename_targets(cls.sample_targets(rng, "seen"), rng)
        if targets == "all" or (targets == "seen" and not cls.has_held_out_targets()):
            return cls.sample_params(rng)
        if not cls.has_held_out_targets():
            raise ValueError(f"{cls.task_id} holds no target out of training: it has no unseen-target episodes")
        for _ in range(MAX_TARGET_DRAWS):
            params = cls.sample_params(rng)
            if cls.target_split(params) == targets:
                return params
        raise ValueError(f"{cls.task_id}: no episode with {targets} targets in {MAX_TARGET_DRAWS} draws")

    @classmethod
    def rename_targets(cls, params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        """``params`` with each target of the episode shown under a made-up name (on the screens and in
        the goal; :func:`emulators.names.made_up_name`), drawn from ``rng``: the ``renamed`` split of
        :meth:`sample_targets`, training episodes that no name can be learnt from, only the copying of
        the goal's name to the screen. The default: a task without targets to rename keeps ``params``."""
        return params

    @property
    def goal(self) -> str:
        return self.template.format(**self.params)

    def reset_device(self, device: DeviceT) -> None:
        """Give the episode a clean device; :class:`GuiEnv` calls it just before :meth:`setup`.

        The default is ``device.reset()``. A task whose start page is known before the
        device resets (the webapps tasks) overrides it so the reset loads that page
        directly instead of loading the device's home page first.
        """
        device.reset()

    @abstractmethod
    def setup(self, device: DeviceT) -> str:
        """Put the (freshly reset) device/app into the task's start state; return the goal text."""

    @abstractmethod
    def evaluate(self, device: DeviceT, answer: str | None = None) -> float:
        """Task success in [0, 1] from device/app state (``answer``: the agent's Answer text)."""

    def milestones(self, device: DeviceT) -> list[bool]:
        """Sub-goals reached so far, in order, for progress rewards. Default: none."""
        return []

    def is_done(self, device: DeviceT) -> bool:
        """Whether the task ended by itself (e.g. a MiniWoB page that finished its episode)."""
        return False

    @abstractmethod
    def oracle(self, device: DeviceT) -> Action | None:
        """The next action of a scripted solver from the current state, ``None`` if stuck."""

    def teardown(self, device: DeviceT) -> None:
        """Undo what ``setup`` did, if anything outlives the episode."""

    def spec(self, seed: int) -> TaskSpec:
        return TaskSpec(self.suite, self.task_id, seed, self.goal, self.max_steps, dict(self.params))

    # --- snapshots (emulators.snapshot) ---------------------------------------------------------

    #: how :meth:`GuiEnv.snapshot` captures an episode: ``capture`` (:meth:`snapshot` /
    #: :meth:`restore`: the task's state and the device's) or ``replay`` (the actions since the
    #: reset, played again on the same seed and checked against the captured screen)
    snapshot_mode: ClassVar[str] = "capture"

    @classmethod
    def snapshot_support(cls, device: Device) -> str | None:
        """``None`` when episodes of this task on ``device`` can be snapshotted, else why not (one line).

        Default: capture mode needs a device that can snapshot; replay mode works anywhere."""
        if cls.snapshot_mode == "replay" or device.can_snapshot:
            return None
        return f"{type(device).__name__} cannot snapshot its state"

    def snapshot(self, device: DeviceT) -> tuple[Any, DeviceState | None]:
        """``(task state, device state)`` of the running episode.

        Capture mode, by default: a deep copy of this instance's attributes (the parameters and
        whatever ``setup`` recorded) and ``device.snapshot()``; a task whose state lives elsewhere (a
        server session) overrides this and :meth:`restore`. Replay mode: ``(None, None)`` by default;
        a task may keep what playing the actions again does not bring back (and :meth:`restore` puts
        it back after the replay)."""
        if self.snapshot_mode == "replay":
            return None, None
        state: dict[str, Any] = {}
        for name, value in vars(self).items():
            try:
                state[name] = copy.deepcopy(value)
            except Exception as e:  # a generator, a lock, a connection: nothing a state can hold
                raise SnapshotError(f"{self.task_id}: its attribute {name!r} ({type(value).__name__}) "
                                    f"cannot be copied: {e}") from None
        return state, device.snapshot()

    def restore(self, device: DeviceT, state: EnvState) -> Observation | None:
        """Put ``state`` (taken by :meth:`snapshot` on this task class) back on ``device`` and into this
        fresh instance; return the observation when the state's own is the screen now (``None``:
        :class:`GuiEnv` observes the device). Replay mode: called on the replayed episode's task with
        what :meth:`snapshot` kept (nothing to do by default)."""
        if self.snapshot_mode == "replay":
            return None
        if state.device is None:
            raise SnapshotError(f"{self.task_id}: the state holds no device state")
        device.restore(state.device)
        vars(self).update(copy.deepcopy(state.task or {}))
        return None


@dataclass(frozen=True)
class StepInfo:
    """Typed diagnostics of a step: what ``step_typed`` returns beside the observation, and
    ``info["step"]`` of the Gymnasium ``step``.

    ``elapsed_ms`` is wall-clock time, not data: it takes no part in equality, so two
    replays of the same seed and actions give equal infos.
    """

    action_error: str | None = None
    parse_error: ParseError | None = None
    device_error: str | None = None
    success: float | None = None
    """the task's evaluation in [0, 1] on the step that ends the episode (None before, and when the
    device died): the episode's success, and the only place it comes from; 0.0 without evaluating
    when the step budget ran out on a task with ``success_needs_finish`` (android_world's)"""
    milestones: tuple[bool, ...] = ()
    """the task's sub-goals reached after this step, in order (progress rewards read them)"""
    target_box: tuple[float, float, float, float] | None = None
    """the element the step's point action landed on, normalised ``(x0, y0, x1, y1)``, where the device
    can tell (a browser page; see ``BrowserDevice.target_box``)"""
    tap_point: tuple[float, float] | None = None
    """where an element action was carried out, normalised ``(x, y)``, where the device says (``Device.element_point``:
    the browser and Android devices tap the part of the element nothing covers, not always its mark's centre)"""
    elapsed_ms: float = field(default=0.0, compare=False)


class UnicodeText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` holding any string of at most ``max_length`` characters.

    Page text and accessibility trees use all of Unicode; a charset listing every code
    point would cost megabytes, so :meth:`contains` accepts any ``str`` of a valid length
    while :meth:`sample` draws from printable ASCII (``character_set``).

    Gymnasium's tools that encode a ``Text`` as indexes into its charset
    (``gymnasium.spaces.utils.flatten``/``unflatten``/``flatten_space``/``flatdim`` and the
    vector envs' shared memory) encode this space by code point instead (registered below):
    ``flatten`` gives an ``int32`` array of ``max_length`` code points, ``-1`` after the last
    character (so any member round-trips, ``"\\0"`` included), and ``flatten_space`` is
    ``Box(-1, 0x10FFFF, (max_length,), int32)``.
    """

    def __init__(self, max_length: int, *, seed: int | np.random.Generator | None = None):
        super().__init__(max_length, min_length=0, charset=_PRINTABLE, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.max_length})"

    def encode(self, x: str) -> np.ndarray:
        """``x`` as ``max_length`` ``int32`` code points, ``-1`` after its end (what ``flatten`` gives)."""
        if not self.contains(x):
            raise ValueError(f"{x!r:.80} is not a member of {self!r}")
        out = np.full(self.max_length, _TEXT_END, dtype=np.int32)
        # UTF-32 is the code points themselves; surrogatepass keeps lone surrogates (JS strings have them)
        out[:len(x)] = np.frombuffer(x.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        return out

    def decode(self, codes: np.ndarray) -> str:
        """The string :meth:`encode` gave ``codes`` for (code points up to the first negative one)."""
        codes = np.asarray(codes).reshape(-1)
        ends = np.flatnonzero(codes < 0)
        codes = codes[:ends[0]] if len(ends) else codes
        return codes.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")


#: the code after a :class:`UnicodeText` string's last character in its flat encoding
_TEXT_END = -1


def _register_unicode_text() -> None:
    """Teach Gymnasium's single-dispatch space tools :class:`UnicodeText`'s code-point encoding.

    Without this they dispatch to ``Text``'s, which look every character up in the charset
    (printable ASCII) and raise ``KeyError`` on a newline or any non-ASCII character of an
    observation."""
    @space_utils.flatdim.register(UnicodeText)
    def _flatdim(space: UnicodeText) -> int:
        return space.max_length

    @space_utils.flatten.register(UnicodeText)
    def _flatten(space: UnicodeText, x: str) -> np.ndarray:
        return space.encode(x)

    @space_utils.unflatten.register(UnicodeText)
    def _unflatten(space: UnicodeText, x: np.ndarray) -> str:
        return space.decode(x)

    @space_utils.flatten_space.register(UnicodeText)
    def _flatten_space(space: UnicodeText) -> spaces.Box:
        return spaces.Box(low=_TEXT_END, high=0x10FFFF, shape=(space.max_length,), dtype=np.int32)

    @shm.create_shared_memory.register(UnicodeText)
    def _create(space: UnicodeText, n: int = 1, ctx: Any = multiprocessing) -> Any:
        memory = ctx.Array(np.dtype(np.int32).char, n * space.max_length)
        np.frombuffer(memory.get_obj(), dtype=np.int32).fill(_TEXT_END)  # n empty strings until written
        return memory

    @shm.read_from_shared_memory.register(UnicodeText)
    def _read(space: UnicodeText, shared_memory: Any, n: int = 1) -> _SharedTexts:
        return _SharedTexts(space, np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, space.max_length)))

    @shm.write_to_shared_memory.register(UnicodeText)
    def _write(space: UnicodeText, index: int, value: str, shared_memory: Any) -> None:
        size = space.max_length
        np.copyto(np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * size:(index + 1) * size],
                  space.encode(value))


class _SharedTexts(SequenceABC):
    """The strings of a vector env's shared :class:`UnicodeText` buffer, read when asked.

    ``AsyncVectorEnv`` reads its shared memory once, when it starts, and hands out what it read
    after every ``reset``/``step`` (copied, by default): fine for a ``Box``, whose read is a live
    view of the buffer, but a tuple of strings read then would never change. This sequence reads
    the buffer on every access, and its ``deepcopy`` (what the vector env returns by default) is
    a plain ``tuple`` of the strings as they stand."""

    def __init__(self, space: UnicodeText, codes: np.ndarray):
        self._space, self._codes = space, codes

    def __len__(self) -> int:
        return len(self._codes)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self)[i]
        return self._space.decode(self._codes[i])

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, _SharedTexts) else other)

    __hash__ = None  # type: ignore[assignment]  # its strings change

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return repr(tuple(self))


_register_unicode_text()


_PRINTABLE = "".join(chr(c) for c in range(32, 127))
#: key names :class:`ActionText` samples (every device maps these)
_SAMPLE_KEYS = ("Enter", "Tab", "Escape", "Backspace", "ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight")


class ActionText(UnicodeText):
    """The action space: one action as a JSON object string, ``{"kind": "click", "x": 0.5, "y": 0.5}``.

    The format is :func:`guiagent.types.action_to_dict` (points normalised to [0, 1]);
    :meth:`contains` accepts exactly the strings :func:`parse_action` turns into an
    :data:`~guiagent.types.Action`. :meth:`sample` draws *valid* actions (click, long
    press, type, scroll, swipe, drag, key, back, home, short wait, answer, finish), so
    a random agent and Gymnasium's ``check_env`` drive the device for real instead of
    only exercising the parse-error path.
    """

    _KINDS = ("click", "click", "click", "long_press", "type", "scroll", "scroll", "swipe", "drag", "key",
              "back", "home", "wait", "answer", "finish")

    def __init__(self, max_length: int = 2048, *, seed: int | np.random.Generator | None = None):
        # a UnicodeText (typed text may be any Unicode: flatten and shared memory by code point)
        spaces.Text.__init__(self, max_length, min_length=2, charset=_PRINTABLE, seed=seed)

    def contains(self, x: Any) -> bool:
        return (isinstance(x, str) and self.min_length <= len(x) <= self.max_length
                and not isinstance(parse_action(x), ParseError))

    def sample(self, mask: Any = None, probability: Any = None) -> str:  # type: ignore[override]
        if mask is not None or probability is not None:
            raise ValueError("ActionText.sample takes no mask")
        rng = self.np_random

        def unit() -> float:
            return round(float(rng.uniform(0.02, 0.98)), 3)

        def word() -> str:
            return "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz0123456789 "), size=int(rng.integers(1, 9))))

        kind = str(rng.choice(self._KINDS))
        d: dict[str, Any] = {"kind": kind}
        if kind in ("click", "long_press"):
            d.update(x=unit(), y=unit())
            if kind == "long_press":
                d["duration_ms"] = int(rng.integers(100, 700))
        elif kind == "type":
            d["text"] = word()
        elif kind == "scroll":
            d.update(direction=str(rng.choice(["up", "down", "left", "right"])), amount=round(float(rng.uniform(0.1, 0.9)), 2))
        elif kind in ("swipe", "drag"):
            d.update(x1=unit(), y1=unit(), x2=unit(), y2=unit())
            if kind == "swipe":
                d["duration_ms"] = int(rng.integers(50, 300))
        elif kind == "key":
            d["key"] = str(rng.choice(_SAMPLE_KEYS))
        elif kind == "wait":
            d["seconds"] = round(float(rng.uniform(0.0, 0.2)), 2)
        elif kind == "answer":
            d["text"] = word()
        return json.dumps(d)

    def __repr__(self) -> str:
        return f"ActionText({self.max_length})"


def parse_action(text: str) -> Action | ParseError:
    """A JSON action string (``{"kind": ..., **fields}``) -> the typed action, or a :class:`ParseError`."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as e:
        return ParseError("malformed", f"not JSON: {e}", str(text)[:500])
    if not isinstance(data, dict):
        return ParseError("malformed", "an action is a JSON object", text[:500])
    if not data.get("kind"):
        return ParseError("no_action", "the object has no 'kind'", text[:500])
    try:
        return action_from_dict(data)
    except ValueError as e:
        code = "unknown_action" if "unknown action kind" in str(e) else "bad_arguments"
        if code == "bad_arguments" and any(w in str(e) for w in ("[0, 1]", "coordinate")):
            code = "bad_coordinates"
        return ParseError(code, str(e), text[:500])
    except TypeError as e:
        return ParseError("bad_arguments", str(e), text[:500])


#: longest strings the observation's text fields hold
TEXT_LIMITS = {"goal": 4096, "tree": 1_000_000, "url": 8192, "last_action_error": 8192}


def observation_space(width: int, height: int) -> spaces.Dict:
    """The Gymnasium observation space of a ``width`` x ``height`` screen.

    ``screenshot``: the frame as ``uint8`` RGB, shape ``(height, width, 3)``; ``goal``:
    the task's instruction; ``tree``: the UI tree text (``""`` when the device gives
    none); ``url``: the page or app location (``""`` when none); ``last_action_error``:
    why the previous action could not be carried out (``""`` when it could).
    """
    return spaces.Dict({
        "screenshot": spaces.Box(0, 255, (height, width, 3), np.uint8),
        **{name: UnicodeText(limit) for name, limit in TEXT_LIMITS.items()},
    })


def decode_screenshot(obs: Observation) -> np.ndarray:
    """The observation's PNG/JPEG bytes as a fresh ``uint8`` array ``(height, width, 3)``."""
    if obs.screenshot is None:
        raise ValueError("the observation carries no pixels (loaded without them)")
    with Image.open(io.BytesIO(obs.screenshot)) as im:
        return np.array(im.convert("RGB"), dtype=np.uint8)


class GuiEnv(gymnasium.Env):
    """A :class:`gymnasium.Env` over a :class:`Device` and a :class:`Task` class.

    Two faces over one episode loop:

    * Gymnasium (:meth:`reset`, :meth:`step`): observations are dicts of
      :func:`observation_space` (``screenshot`` as a ``uint8`` array, text fields as
      strings); actions are JSON strings of :class:`ActionText` (typed actions and
      :class:`~guiagent.types.ParseError` are accepted too). ``info["observation"]``
      holds the typed :class:`~guiagent.types.Observation` of the same frame (image bytes
      as captured, ``url``), ``info["task"]`` the :class:`~guiagent.types.TaskSpec`
      (reset), ``info["step"]`` a :class:`StepInfo` (step).
    * typed (:meth:`reset_typed`, :meth:`step_typed`): the same, returning the typed
      ``Observation`` itself and decoding no pixels, and a step's :class:`StepInfo`
      itself (no reward: the success is ``StepInfo.success``); the env fleet and the
      rollout driver use this face.

    A parse error executes nothing and comes back as ``last_action_error``. The
    Gymnasium reward is the task's evaluation (``StepInfo.success``) on the step that
    ends the episode, 0 before (and 0 when the step budget runs out on a task whose
    success needs the agent's ``Finish``: ``Task.success_needs_finish``); shaping and
    penalties are composed downstream (``judge.compose``) from the typed info.
    ``reset(seed=s)`` fixes the task parameters; ``reset()`` draws the episode seed from the
    env's ``np_random`` (so a seeded reset followed by unseeded ones is reproducible). The env
    owns its device: :meth:`close` closes it.

    Snapshots (:mod:`emulators.snapshot`): :meth:`snapshot` captures the episode between two
    steps, :meth:`restore` puts a state back (this env's or another env's of the same task) and
    returns its observation; :attr:`can_snapshot` says whether this env can. With
    ``start_states`` (a :class:`~emulators.snapshot.StartStates`), a reset to a start this
    process has seen before (same task, parameters and device configuration: the G episodes of a
    group) restores that start instead of building it again; the observation, task state and
    milestones are the same either way. Without ``start_states`` the device's (``Device.start_states``,
    which the suite sets) are used.

    Example::

        env = GuiEnv(device, MyTask)
        obs, info = env.reset(seed=0)            # obs["screenshot"].shape == (H, W, 3)
        obs, reward, terminated, truncated, info = env.step('{"kind": "click", "x": 0.5, "y": 0.5}')
        typed_obs = info["observation"]          # guiagent.types.Observation
    """

    #: ``rgb_array`` only: ``render()`` returns the last frame. ``gymnasium.make`` adds ``rgb_array_list``
    #: (RenderCollection) and ``human`` (HumanRendering, which needs a display): docs/gymnasium.md.
    #: ``render_fps``: one frame per step, the rate a human-mode window or a recorded video plays them at.
    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, device: Device, task_cls: type[Task], *, max_steps: int | None = None,
                 render_mode: str | None = None, start_states: StartStates | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.device = device
        self.task_cls = task_cls
        self.max_steps = max_steps or task_cls.max_steps
        self.render_mode = render_mode
        self.task: Task | None = None
        #: the running episode's task instance (``spec`` is Gymnasium's EnvSpec, set by ``gymnasium.make``)
        self.task_spec: TaskSpec | None = None
        self.steps = 0
        self.done = True
        self.answer: str | None = None
        self._last: Observation | None = None
        #: restores a start seen before instead of building it (see the class docstring)
        self.start_states = start_states if start_states is not None else getattr(device, "start_states", None)
        self._milestones: tuple[bool, ...] = ()
        self._actions: list[Action | ParseError] = []  # since the reset: what a replay state plays again
        self._oracle_calls: list[int] = []  # the step count at each oracle call since the reset
        self._dead: str | None = None  # why the device died in this episode
        self.action_space = ActionText()
        size = _screen_size(device)
        # a device that learns its screen size only once connected (Android) gets its
        # observation space on the first reset
        self.observation_space = observation_space(*size) if size else observation_space(1, 1)
        self._space_fixed = size is not None

    # --- typed face -----------------------------------------------------------------------

    def reset_typed(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
                    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode; returns the typed observation and ``{"task", "milestones"}``."""
        super().reset(seed=seed)
        if self.task is not None:
            try:
                self.task.teardown(self.device)
            except DeviceError:
                pass
        if seed is None:
            seed = int(self.np_random.integers(2**31))
        options = options or {}
        params = dict(options.get("params") or self.task_cls.sample_targets(random.Random(seed),
                                                                            options.get("targets", "all")))
        key = self.start_key(params) if self.start_states is not None else ""
        start = self.start_states.get(key) if key else None  # type: ignore[union-attr]
        if start is not None:
            try:
                spec = replace(start.spec, seed=seed, max_steps=self.max_steps)
                obs = self._restore(replace(start, spec=spec))
                return obs, {"task": self.task_spec, "milestones": self._milestones}
            except (SnapshotError, DeviceError) as e:  # built the ordinary way below, and kept anew
                log.warning("%s: restoring the start state failed (%s); resetting", self.task_cls.task_id, e)
                self.start_states.discard(key)  # type: ignore[union-attr]
        self.task = self.task_cls(params)
        self.task.reset_device(self.device)
        goal = self.task.setup(self.device)
        self.task_spec = TaskSpec(self.task_cls.suite, self.task_cls.task_id, seed, goal, self.max_steps, params)
        self.steps = 0
        self.done = False
        self.answer = None
        self._actions, self._oracle_calls, self._dead = [], [], None
        obs = self.device.observe()
        self._last = obs
        if not self._space_fixed:
            self.observation_space = observation_space(obs.width, obs.height)
            self._space_fixed = True
        self._milestones = tuple(self.task.milestones(self.device))
        if key:
            try:
                self.start_states.put(key, self.snapshot())  # type: ignore[union-attr]
            except SnapshotError as e:  # this start cannot be kept (the page was busy): built again next time
                log.debug("%s: start state not kept: %s", self.task_cls.task_id, e)
        return obs, {"task": self.task_spec, "milestones": self._milestones}

    def step_typed(self, action: Action | ParseError | str | Mapping[str, Any]
                   ) -> tuple[Observation, bool, bool, StepInfo]:
        """One step with a typed action (or its JSON text or dict): ``(observation, terminated,
        truncated, info)``, the episode's success in ``info.success`` once it ends."""
        if self.done or self.task is None:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        if isinstance(action, str):
            action = parse_action(action)
        elif isinstance(action, Mapping):
            action = parse_action(json.dumps(dict(action), default=str))
        t0 = time.perf_counter()
        self.steps += 1
        self._actions.append(action)
        action_error: str | None = None
        target: tuple[float, float, float, float] | None = None
        tap: tuple[float, float] | None = None
        parse_error = action if isinstance(action, ParseError) else None
        try:
            if parse_error is not None:
                action_error = parse_error.as_action_error()
            elif isinstance(action, Answer):
                self.answer = action.text
            elif not isinstance(action, Finish):
                box_of = getattr(self.device, "target_box", None)
                target = box_of(action) if box_of is not None else None
                try:
                    self.device.execute(action)
                except ActionError as e:
                    action_error = str(e)
                if action_error is None and isinstance(action, ELEMENT_ACTION_TYPES):
                    tap = getattr(self.device, "element_point", None)
            obs = self.device.observe()
            if action_error is not None:
                obs = _with_error(obs, action_error)
            terminated = (parse_error is None and is_terminal(action)) or self.task.is_done(self.device)
            truncated = not terminated and self.steps >= self.max_steps
            milestones = tuple(self.task.milestones(self.device))
            success = None
            if truncated and self.task.success_needs_finish:
                success = 0.0  # the agent never declared the task done (see Task.success_needs_finish)
            elif terminated or truncated:
                success = float(self.task.evaluate(self.device, self.answer))
        except DeviceError as e:
            self.done = True
            self._dead = str(e)
            obs = dead_observation(str(e))
            self._last = obs
            info = StepInfo(parse_error=parse_error, device_error=str(e),
                            elapsed_ms=(time.perf_counter() - t0) * 1e3)
            return obs, False, True, info
        self.done = terminated or truncated
        self._last = obs
        self._milestones = milestones
        info = StepInfo(action_error=action_error, parse_error=parse_error, success=success, milestones=milestones,
                        target_box=target, tap_point=tap, elapsed_ms=(time.perf_counter() - t0) * 1e3)
        return obs, terminated, truncated, info

    # --- Gymnasium face -------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Gymnasium ``reset``: a dict observation; ``info["observation"]`` is the typed one.

        ``options={"params": {...}}`` sets the task parameters instead of sampling them;
        ``options={"targets": "seen"}`` (or ``"unseen"``, ``"all"``) samples only episodes whose targets
        training may use (or only held-out ones; :meth:`Task.sample_targets`).
        """
        obs, info = self.reset_typed(seed=seed, options=options)
        return self.encode(obs), {**info, "observation": obs}

    def step(self, action: str | Action | ParseError | Mapping[str, Any]
             ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Gymnasium ``step``: ``action`` is a JSON action string (or a typed action, or its dict).

        The reward is ``info["step"].success`` (0 before the episode ends): the Gym API needs a
        reward, and the task's success is this env's; the rollout driver reads the success from
        the :class:`StepInfo` and composes its own rewards from it.
        """
        obs, terminated, truncated, step = self.step_typed(action)
        reward = step.success if step.success is not None else 0.0
        info = {"step": step, "observation": obs}
        return self.encode(obs), float(reward), bool(terminated), bool(truncated), info

    def encode(self, obs: Observation) -> dict[str, Any]:
        """The typed observation as a member of :attr:`observation_space` (fresh arrays)."""
        shape = self.observation_space["screenshot"].shape
        if obs.width == 1 and obs.height == 1 and shape != (1, 1, 3):
            frame = np.zeros(shape, np.uint8)  # a dead device's stand-in frame
        else:
            frame = decode_screenshot(obs)
            if frame.shape != shape:
                raise DeviceError(f"the device gave a {frame.shape[1]}x{frame.shape[0]} frame; "
                                  f"the observation space is {shape[1]}x{shape[0]}")
        return {"screenshot": frame, "goal": self.task_spec.goal if self.task_spec else "", "tree": obs.tree or "",
                "url": obs.url or "", "last_action_error": obs.last_action_error or ""}

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """``render_mode="rgb_array"``: the last frame as ``uint8`` ``(H, W, 3)``; otherwise ``None``."""
        if self.render_mode != "rgb_array" or self._last is None:
            return None
        return self.encode(self._last)["screenshot"]

    # --- helpers ----------------------------------------------------------------------------

    def oracle_action(self) -> Action | None:
        if self.task is None:
            raise RuntimeError("reset() first")
        self._oracle_calls.append(self.steps)
        return self.task.oracle(self.device)

    def close(self) -> None:
        self.device.close()

    # --- snapshots ----------------------------------------------------------------------------

    def snapshot_support(self) -> str | None:
        """``None`` when :meth:`snapshot` works on this env's task and device, else why not (one line)."""
        return self.task_cls.snapshot_support(self.device)

    @property
    def can_snapshot(self) -> bool:
        """Whether :meth:`snapshot` / :meth:`restore` work here (:meth:`snapshot_support` says why not)."""
        return self.snapshot_support() is None

    def start_key(self, params: Mapping[str, Any]) -> str:
        """The :class:`~emulators.snapshot.StartStates` key of a start with ``params`` on this env's
        device; ``""`` when starts are not shared (replay-mode tasks, devices of unknown configuration)."""
        device_key = self.device.state_key()
        if not device_key or self.task_cls.snapshot_mode != "capture" or self.snapshot_support() is not None:
            return ""
        try:
            text = json.dumps(dict(params), sort_keys=True)
        except (TypeError, ValueError):  # parameters that are not plain data: no key, no sharing
            return ""
        return f"{self.task_cls.suite}.{self.task_cls.task_id}|{text}|{device_key}"

    def snapshot(self) -> EnvState:
        """The episode's state now (between two steps): its spec, counters, last observation and
        milestones, and the task's and device's state (or the actions to replay). Raises
        :class:`~emulators.snapshot.SnapshotError` when the env cannot (see :meth:`snapshot_support`),
        before a reset, or after the device died; the episode goes on either way."""
        if self.task is None or self.task_spec is None or self._last is None:
            raise SnapshotError("no episode to snapshot: reset() first")
        if self._dead:
            raise SnapshotError(f"the device died in this episode ({self._dead})")
        why = self.snapshot_support()
        if why is not None:
            raise SnapshotError(why)
        base = dict(spec=self.task_spec, steps=self.steps, done=self.done, answer=self.answer,
                    observation=self._last, milestones=self._milestones)
        try:
            task_state, device_state = self.task.snapshot(self.device)
        except DeviceError as e:
            raise SnapshotError(f"the device failed while capturing: {e}") from None
        if self.task_cls.snapshot_mode == "replay":
            return EnvState(**base, mode="replay", task=task_state, device=device_state,
                            actions=tuple(self._actions), oracle_calls=tuple(self._oracle_calls))
        return EnvState(**base, mode="capture", task=task_state, device=device_state)

    def restore(self, state: EnvState) -> Observation:
        """Put ``state`` back (taken on this env or on another env of the same task) and return its
        observation; the episode continues from there (``step``), at the state's step count.

        Raises :class:`~emulators.snapshot.SnapshotError` for a state this env cannot take (another
        task, a device that cannot restore it, a replayed screen that came back different); the env
        then has no running episode (``reset`` or ``restore`` again)."""
        if not isinstance(state, EnvState):
            raise TypeError(f"restore takes an EnvState, got {type(state).__name__}")
        super().reset()  # Gymnasium's bookkeeping: an episode starts here (the RNG is left as it is)
        return self._restore(state)

    def _restore(self, state: EnvState) -> Observation:
        spec = state.spec
        if (spec.suite, spec.task_id) != (self.task_cls.suite, self.task_cls.task_id):
            raise SnapshotError(f"a state of {spec.suite}.{spec.task_id} cannot be restored on an env of "
                                f"{self.task_cls.suite}.{self.task_cls.task_id}")
        why = self.snapshot_support()
        if why is not None:
            raise SnapshotError(why)
        if state.mode != self.task_cls.snapshot_mode:
            raise SnapshotError(f"a {state.mode} state; {spec.task_id} is restored by {self.task_cls.snapshot_mode}")
        if self.task is not None:
            try:
                self.task.teardown(self.device)
            except DeviceError:
                pass
        self.task, self.done = None, True  # no episode until the state is back
        if state.mode == "replay":
            obs = self._replay(state)
        else:
            task = self.task_cls(dict(spec.params))
            try:
                obs = task.restore(self.device, state)
                self.task = task
                if obs is None:
                    obs = self.device.observe()
            except DeviceError as e:
                raise SnapshotError(f"the device failed while restoring: {e}") from None
            # the screen is the state's; what the last action said about itself is too (a device's
            # observation knows nothing of the step that led to it)
            obs = replace(obs, last_action_error=state.observation.last_action_error)
            self._actions, self._oracle_calls = list(state.actions), list(state.oracle_calls)
        self.task_spec, self.max_steps = spec, spec.max_steps
        self.steps, self.done, self.answer = state.steps, state.done, state.answer
        self._dead = None
        self._milestones = tuple(state.milestones)
        self._last = obs
        return obs

    def _replay(self, state: EnvState) -> Observation:
        """A fresh episode of the state's seed and parameters, its actions played again (and the
        oracle asked where it was, so a scripted plan is where it was), then the screen checked."""
        spec = state.spec
        starts, self.start_states = self.start_states, None
        try:
            self.reset_typed(seed=spec.seed, options={"params": dict(spec.params)})
        finally:
            self.start_states = starts
        self.max_steps = spec.max_steps
        calls = list(state.oracle_calls)
        obs = self._last
        for i, action in enumerate(state.actions):
            while calls and calls[0] <= i:
                self.oracle_action()
                calls.pop(0)
            obs, _, _, info = self.step_typed(action)
            if info.device_error:
                self.done = True
                raise SnapshotError(f"the device failed while replaying step {i + 1}: {info.device_error}")
        for _ in calls:
            self.oracle_action()
        assert obs is not None and self.task is not None
        if state.task is not None or state.device is not None:  # what the actions do not bring back
            try:
                if self.task.restore(self.device, state) is None:
                    obs = self.device.observe()
            except DeviceError as e:
                self.done = True
                raise SnapshotError(f"the device failed after the replay: {e}") from None
            obs = replace(obs, last_action_error=self._last.last_action_error if self._last else None)
        if obs.screenshot != state.observation.screenshot:
            self.done = True
            raise SnapshotError(f"{spec.task_id}: the replayed screen differs from the captured one after "
                                f"{state.steps} steps (the page changes with time, not only with actions)")
        return obs


def _screen_size(device: Device) -> tuple[int, int] | None:
    """The device's screenshot size in pixels when it is known without touching the device."""
    size = getattr(device, "size", None)
    if isinstance(size, tuple) and len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size):
        return size
    return None


def _with_error(obs: Observation, error: str) -> Observation:
    return replace(obs, last_action_error=error)


_BLACK_PNG: bytes | None = None


def dead_observation(reason: str, *, what: str = "device") -> Observation:
    """A 1x1 black frame standing in for the screen of a dead device (or worker: ``what``)."""
    global _BLACK_PNG
    if _BLACK_PNG is None:
        buf = io.BytesIO()
        Image.new("RGB", (1, 1)).save(buf, format="PNG")
        _BLACK_PNG = buf.getvalue()
    return Observation(screenshot=_BLACK_PNG, width=1, height=1, last_action_error=f"{what} error: {reason}")


def check_env(env: GuiEnv, *, seed: int = 0, max_oracle_steps: int | None = None) -> float:
    """The suite's own conformance check for a :class:`GuiEnv`; returns the oracle's success.

    Complements Gymnasium's ``gymnasium.utils.env_checker.check_env`` (API, spaces,
    seeding, determinism) with what is particular to GUI tasks: ``info`` carries a
    :class:`TaskSpec` and the typed observation, a seed fixes the task parameters and
    goal, a parse error is reported and not executed, and the oracle solves the task.
    Drives the Gymnasium face (``reset``/``step``). Raises ``AssertionError`` with a
    message on any violation.
    """
    obs, info = env.reset(seed=seed)
    assert obs in env.observation_space, "reset's observation is not in the observation space"
    typed = info.get("observation")
    assert isinstance(typed, Observation), f"reset info needs the typed Observation, got {type(typed)}"
    assert isinstance(info.get("task"), TaskSpec), "reset info needs a TaskSpec under 'task'"
    assert typed.screenshot, "reset observation has no screenshot"
    spec1 = info["task"]
    _, info2 = env.reset(seed=seed)
    spec2 = info2["task"]
    assert (spec1.goal, dict(spec1.params)) == (spec2.goal, dict(spec2.params)), \
        "the same seed gave different task parameters"
    obs, r, term, trunc, info = env.step("{not json")
    assert obs["last_action_error"] and info["observation"].last_action_error, \
        "a parse error must show as last_action_error"
    assert isinstance(r, float) and isinstance(term, bool) and isinstance(trunc, bool)
    assert isinstance(info.get("step"), StepInfo) and info["step"].parse_error is not None
    env.reset(seed=seed)
    success = 0.0
    limit = max_oracle_steps or env.max_steps
    for _ in range(limit):
        action = env.oracle_action()
        assert action is not None, f"{env.task_spec.env_id}: the oracle got stuck"  # type: ignore[union-attr]
        obs, r, term, trunc, info = env.step(action)
        assert info["step"].device_error is None, info["step"].device_error
        if term or trunc:
            success = r
            break
    return success
