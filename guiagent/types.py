"""Core typed data shared by every guiagent package.

Everything here is a frozen dataclass with a JSON round trip (``to_dict`` /
``from_dict`` and the module-level ``action_to_dict`` / ``action_from_dict``).

Coordinates inside an :data:`Action` are **normalised to [0, 1] of the
screenshot** the action was chosen on: ``x`` left to right, ``y`` top to bottom.
Devices convert them to device pixels, ``grounding`` formats convert them to and
from the model's own coordinate frame.

Example::

    >>> a = Click(x=0.5, y=0.25)
    >>> action_from_dict(action_to_dict(a)) == a
    True
    >>> action_to_dict(a)
    {'kind': 'click', 'x': 0.5, 'y': 0.25}
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping, Union

__all__ = [
    "Click", "DoubleClick", "RightClick", "Hover", "LongPress", "Type", "Scroll", "Swipe", "Drag", "Key",
    "NavigateBack",
    "NavigateHome", "OpenApp", "Wait", "Answer", "Finish", "Action", "ACTION_TYPES",
    "action_to_dict", "action_from_dict", "ParseError", "Observation", "Step",
    "Trajectory", "TaskSpec", "SCROLL_DIRECTIONS", "EpisodeStatus",
    # marks and element actions
    "Mark", "MARK_STATES", "ClickElement", "LongPressElement", "TypeElement", "ELEMENT_ACTION_TYPES", "ElementNotFound",
    "resolve_element", "element_at", "check_image_size",
]

SCROLL_DIRECTIONS = ("up", "down", "left", "right")


def _check_unit(name: str, value: float | None) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number in [0, 1], got {value!r}")
    if not (0.0 <= float(value) <= 1.0):
        raise ValueError(f"{name}={value!r} is outside the screenshot; normalised coordinates lie in [0, 1]")


class _ActionBase:
    """Mixin for the action dataclasses: ``kind`` tag and JSON helpers."""

    kind: ClassVar[str]
    #: names of fields that are normalised coordinates (checked to lie in [0, 1])
    coord_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self.coord_fields:
            _check_unit(name, getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            out[f.name] = getattr(self, f.name)
        return out


@dataclass(frozen=True)
class _PointAction(_ActionBase):
    """An action at one point of the screen (x, y normalised to [0, 1])."""

    coord_fields: ClassVar[tuple[str, ...]] = ("x", "y")
    x: float
    y: float


@dataclass(frozen=True)
class Click(_PointAction):
    """Tap (touch) or left-click at a point."""

    kind: ClassVar[str] = "click"


@dataclass(frozen=True)
class DoubleClick(_PointAction):
    """Double click (mouse) or double tap (touch) at a point: open files and desktop icons, select a word."""

    kind: ClassVar[str] = "double_click"


@dataclass(frozen=True)
class RightClick(_PointAction):
    """Right mouse click at a point (context menus); touch devices have no right button."""

    kind: ClassVar[str] = "right_click"


@dataclass(frozen=True)
class Hover(_PointAction):
    """Move the mouse pointer to a point without clicking (menus and tooltips that open on hover)."""

    kind: ClassVar[str] = "hover"


@dataclass(frozen=True)
class LongPress(_PointAction):
    """Press and hold at a point (context menus, selection)."""

    kind: ClassVar[str] = "long_press"
    duration_ms: int = 800


@dataclass(frozen=True)
class Type(_ActionBase):
    """Type text into the focused field, or into the field at (x, y) after tapping it.

    ``submit`` presses Enter after the text.
    """

    kind: ClassVar[str] = "type"
    coord_fields: ClassVar[tuple[str, ...]] = ("x", "y")
    text: str
    x: float | None = None
    y: float | None = None
    submit: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.text, str):
            raise TypeError(f"Type.text must be a string, got {type(self.text).__name__}")
        if (self.x is None) != (self.y is None):
            raise ValueError("Type needs both x and y, or neither")


@dataclass(frozen=True)
class Scroll(_ActionBase):
    """Scroll the view so that content further in ``direction`` comes into sight.

    ``direction='down'`` reveals what lies below (the finger moves up). ``x, y`` is
    where to scroll (default: the screen centre); ``amount`` is the fraction of the
    screen to move.
    """

    kind: ClassVar[str] = "scroll"
    coord_fields: ClassVar[tuple[str, ...]] = ("x", "y")
    direction: Literal["up", "down", "left", "right"]
    x: float | None = None
    y: float | None = None
    amount: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.direction not in SCROLL_DIRECTIONS:
            raise ValueError(f"scroll direction must be one of {SCROLL_DIRECTIONS}, got {self.direction!r}")
        if (self.x is None) != (self.y is None):
            raise ValueError("Scroll needs both x and y, or neither")
        if not (0.0 < float(self.amount) <= 1.0):
            raise ValueError(f"scroll amount must lie in (0, 1], got {self.amount!r}")


@dataclass(frozen=True)
class Swipe(_ActionBase):
    """Touch swipe from (x1, y1) to (x2, y2): the finger's own path."""

    kind: ClassVar[str] = "swipe"
    coord_fields: ClassVar[tuple[str, ...]] = ("x1", "y1", "x2", "y2")
    x1: float
    y1: float
    x2: float
    y2: float
    duration_ms: int = 300


@dataclass(frozen=True)
class Drag(_ActionBase):
    """Press at (x1, y1), move to (x2, y2) and release (drag and drop, sliders)."""

    kind: ClassVar[str] = "drag"
    coord_fields: ClassVar[tuple[str, ...]] = ("x1", "y1", "x2", "y2")
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True)
class Key(_ActionBase):
    """Press a key or a chord, e.g. ``Enter``, ``Backspace``, ``Control+a``."""

    kind: ClassVar[str] = "key"
    key: str

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip():
            raise ValueError("Key.key must be a non-empty key name")


@dataclass(frozen=True)
class NavigateBack(_ActionBase):
    """System back (Android back button, browser back)."""

    kind: ClassVar[str] = "back"


@dataclass(frozen=True)
class NavigateHome(_ActionBase):
    """Go to the home screen (the launcher)."""

    kind: ClassVar[str] = "home"


@dataclass(frozen=True)
class OpenApp(_ActionBase):
    """Open an app by its name."""

    kind: ClassVar[str] = "open_app"
    app: str


@dataclass(frozen=True)
class Wait(_ActionBase):
    """Do nothing for a while and look again."""

    kind: ClassVar[str] = "wait"
    seconds: float = 1.0

    def __post_init__(self) -> None:
        if not (0.0 <= float(self.seconds) <= 60.0):
            raise ValueError(f"wait seconds must lie in [0, 60], got {self.seconds!r}")


@dataclass(frozen=True)
class Answer(_ActionBase):
    """Give the answer to an information-retrieval task; ends the episode."""

    kind: ClassVar[str] = "answer"
    text: str


@dataclass(frozen=True)
class Finish(_ActionBase):
    """Declare the task finished (``success``) or impossible (``failure``); ends the episode."""

    kind: ClassVar[str] = "finish"
    status: Literal["success", "failure"] = "success"
    message: str = ""

    def __post_init__(self) -> None:
        if self.status not in ("success", "failure"):
            raise ValueError(f"finish status must be 'success' or 'failure', got {self.status!r}")


# ----------------------------------------------------------------------------- element actions
# An element action names a mark of the observation it was chosen on (``Observation.marks``) instead of a
# point. Devices resolve it to the pixel action at the mark's box centre (:func:`resolve_element`; where another
# element covers the centre, the browser and Android devices tap the nearest uncovered point of the box); an id
# the observation's table does not hold is an action error, like any action that cannot be carried out.
# They are kinds of their own rather than an optional ``element`` on Click/LongPress/Type, so a Click
# always has a point (every overlay, matcher and format that reads ``x, y`` stays correct) and a format's
# whitelist says by itself whether it speaks elements.


def _check_element(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"element must be a mark id (an integer), got {value!r}")
    if value < 0:
        raise ValueError(f"element must be a mark id >= 0, got {value!r}")


@dataclass(frozen=True)
class ClickElement(_ActionBase):
    """Tap (touch) or left-click the element numbered ``element`` in the screen's marks (at its box centre, or,
    in the browser, the nearest point of the box nothing else covers)."""

    kind: ClassVar[str] = "click_element"
    element: int

    def __post_init__(self) -> None:
        _check_element(self.element)


@dataclass(frozen=True)
class LongPressElement(_ActionBase):
    """Press and hold the element numbered ``element`` in the screen's marks."""

    kind: ClassVar[str] = "long_press_element"
    element: int
    duration_ms: int = 800

    def __post_init__(self) -> None:
        _check_element(self.element)


@dataclass(frozen=True)
class TypeElement(_ActionBase):
    """Tap the field numbered ``element`` in the screen's marks, then type ``text`` into it.

    ``submit`` presses Enter after the text.
    """

    kind: ClassVar[str] = "type_element"
    element: int
    text: str
    submit: bool = False

    def __post_init__(self) -> None:
        _check_element(self.element)
        if not isinstance(self.text, str):
            raise TypeError(f"TypeElement.text must be a string, got {type(self.text).__name__}")


Action = Union[
    Click, DoubleClick, RightClick, Hover, LongPress, Type, Scroll, Swipe, Drag, Key, NavigateBack, NavigateHome,
    OpenApp, Wait, Answer, Finish, ClickElement, LongPressElement, TypeElement,
]

#: the actions that name a mark instead of a point
ELEMENT_ACTION_TYPES: tuple[type, ...] = (ClickElement, LongPressElement, TypeElement)
#: every action class, in prompt order (point actions first, element actions last)
ACTION_TYPES: tuple[type, ...] = (
    Click, DoubleClick, RightClick, Hover, LongPress, Type, Scroll, Swipe, Drag, Key, NavigateBack, NavigateHome,
    OpenApp, Wait, Answer, Finish, *ELEMENT_ACTION_TYPES,
)
_BY_KIND: dict[str, type] = {cls.kind: cls for cls in ACTION_TYPES}

#: actions after which the episode ends
TERMINAL_KINDS = frozenset({"answer", "finish"})


def action_to_dict(action: Action) -> dict[str, Any]:
    """``{"kind": ..., **fields}``, JSON-serialisable."""
    return action.to_dict()


def action_from_dict(data: Mapping[str, Any]) -> Action:
    """Inverse of :func:`action_to_dict`; raises ``ValueError`` on unknown kinds or fields."""
    data = dict(data)
    kind = data.pop("kind", None)
    cls = _BY_KIND.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown action kind {kind!r}; known: {sorted(_BY_KIND)}")
    names = {f.name for f in dataclasses.fields(cls)}
    extra = set(data) - names
    if extra:
        raise ValueError(f"unknown fields for {kind}: {sorted(extra)}")
    return cls(**data)


def is_terminal(action: Action | None) -> bool:
    return action is not None and action.kind in TERMINAL_KINDS


@dataclass(frozen=True)
class ParseError:
    """Why model text did not become an action. Parsing returns this; it never raises.

    ``code`` is one of: ``empty``, ``no_action``, ``unknown_action``, ``bad_arguments``,
    ``bad_coordinates``, ``multiple_actions``, ``malformed``.
    """

    code: str
    message: str
    text: str = ""

    CODES: ClassVar[tuple[str, ...]] = (
        "empty", "no_action", "unknown_action", "bad_arguments", "bad_coordinates",
        "multiple_actions", "malformed",
    )

    def __post_init__(self) -> None:
        if self.code not in self.CODES:
            raise ValueError(f"unknown parse error code {self.code!r}")

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def as_action_error(self) -> str:
        """What an env reports for a reply that did not parse (the step's ``action_error`` and the next
        observation's ``last_action_error``): nothing was done, and this is why."""
        return f"could not parse the action: {self}"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "text": self.text}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ParseError":
        return cls(code=data["code"], message=data["message"], text=data.get("text", ""))


# ----------------------------------------------------------------------------- marks


#: the element states a :class:`Mark` may carry, in the order an element list writes them: what a screen
#: reader announces beside a control's role and name, read from Chromium's accessibility tree (``checked``
#: / ``mixed``, ``selected``, ``expanded`` / ``collapsed`` for an element that opens and closes,
#: ``disabled``) and from Android's UI tree (``checked``, ``selected``, ``disabled``)
MARK_STATES = ("checked", "mixed", "selected", "expanded", "collapsed", "disabled")


@dataclass(frozen=True)
class Mark:
    """One numbered element of a screen (a "set of marks"): what element actions name.

    ``id`` is its number in the observation's mark table (unique there; devices number the
    elements in document order from 0). ``role`` is the ARIA role on the web (``button``,
    ``link``, ``textbox``, ``checkbox``...) and the matching role of an Android widget class
    (``Button`` -> ``button``, ``EditText`` -> ``textbox``). ``name`` is its accessible name
    (label, text or description; may be empty). ``box`` is ``(x0, y0, x1, y1)`` normalised to
    [0, 1] of the screenshot, clipped to it.

    >>> m = Mark(7, "button", "Send", (0.5, 0.8, 0.7, 0.9))
    >>> m.center
    (0.6, 0.85)
    >>> Mark.from_dict(m.to_dict()) == m
    True
    """

    id: int
    role: str
    name: str
    box: tuple[float, float, float, float]
    #: the element's states from :data:`MARK_STATES` that hold (a checked checkbox, the selected tab, an
    #: expanded or collapsed section, a disabled button), in that tuple's order; ``()``: none known
    states: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.id, bool) or not isinstance(self.id, int) or self.id < 0:
            raise ValueError(f"a mark id is an integer >= 0, got {self.id!r}")
        if isinstance(self.states, (str, bytes)) or not hasattr(self.states, "__iter__"):
            raise TypeError(f"mark {self.id}: states must be a sequence of names, got {self.states!r:.80}")
        states = tuple(self.states)
        unknown = [s for s in states if s not in MARK_STATES]
        if unknown:
            raise ValueError(f"mark {self.id}: unknown states {unknown!r:.80}; known: {', '.join(MARK_STATES)}")
        if ("expanded" in states and "collapsed" in states) or ("checked" in states and "mixed" in states):
            raise ValueError(f"mark {self.id}: contradictory states {states!r}")
        object.__setattr__(self, "states", tuple(s for s in MARK_STATES if s in states))
        if not isinstance(self.role, str) or not isinstance(self.name, str):
            raise TypeError(f"mark {self.id}: role and name must be strings, got {self.role!r}, {self.name!r}")
        if (isinstance(self.box, (str, bytes)) or not hasattr(self.box, "__len__") or len(self.box) != 4
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.box)):
            raise ValueError(f"mark {self.id}: box must be four numbers (x0, y0, x1, y1), got {self.box!r:.80}")
        box = tuple(float(v) for v in self.box)
        x0, y0, x1, y1 = box
        if not all(0.0 <= v <= 1.0 for v in box) or x1 < x0 or y1 < y0:
            raise ValueError(f"mark {self.id}: box {self.box!r} must lie in [0, 1] with x0 <= x1 and y0 <= y1")
        object.__setattr__(self, "box", box)

    @property
    def center(self) -> tuple[float, float]:
        """The box centre, normalised: where an element action on this mark lands (unless another element
        covers it: the browser and Android devices then tap the nearest point of the box the element takes)."""
        x0, y0, x1, y1 = self.box
        return (round((x0 + x1) / 2, 6), round((y0 + y1) / 2, 6))

    @property
    def area(self) -> float:
        x0, y0, x1, y1 = self.box
        return (x1 - x0) * (y1 - y0)

    def contains(self, x: float, y: float) -> bool:
        """Whether the normalised point lies inside the box (edges included)."""
        x0, y0, x1, y1 = self.box
        return x0 <= x <= x1 and y0 <= y <= y1

    def to_dict(self) -> dict[str, Any]:
        """``{id, role, name, box}``, and ``states`` when any holds (a table stored before states were read
        is the same JSON as one read since from a screen without them)."""
        out: dict[str, Any] = {"id": self.id, "role": self.role, "name": self.name, "box": list(self.box)}
        if self.states:
            out["states"] = list(self.states)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Mark":
        if not isinstance(data, Mapping):
            raise TypeError(f"a mark is an object {{id, role, name, box}}, got {data!r:.80}")
        extra = set(data) - {"id", "role", "name", "box", "states"}
        if extra:
            raise ValueError(f"unknown mark fields {sorted(extra)}")
        states = data.get("states", ())
        if not isinstance(states, (list, tuple)) or not all(isinstance(x, str) for x in states):
            raise ValueError(f"mark states must be a list of names, got {states!r:.80}")
        return cls(data["id"], data["role"], data.get("name", ""), tuple(data["box"]), tuple(states))


def _mark_table(marks: Any) -> tuple[Mark, ...]:
    """A mark table from Marks or their dicts (stored JSON); ids must be unique."""
    if isinstance(marks, (str, bytes, Mapping)) or not hasattr(marks, "__iter__"):
        raise TypeError(f"marks must be a sequence of Mark, got {type(marks).__name__}")
    out = tuple(m if isinstance(m, Mark) else Mark.from_dict(m) for m in marks)
    ids = [m.id for m in out]
    if len(set(ids)) != len(ids):
        raise ValueError("mark ids must be unique within an observation")
    return out


class ElementNotFound(ValueError):
    """An element action names a mark the observation does not hold (or the screen has no marks)."""


def _find_mark(marks: "tuple[Mark, ...] | None", element: int) -> Mark:
    if marks is None:
        raise ElementNotFound("this screen has no numbered elements (marks are off on this device); "
                              "use an action at a point instead")
    for m in marks:
        if m.id == element:
            return m
    if not marks:
        raise ElementNotFound(f"no element {element}: this screen has no numbered elements")
    ids = sorted(m.id for m in marks)
    numbered = f"{ids[0]}-{ids[-1]}" if ids[-1] - ids[0] + 1 == len(ids) else ", ".join(map(str, ids[:50]))
    raise ElementNotFound(f"no element {element} on this screen; its elements are numbered {numbered}")


def resolve_element(action: "Action", marks: "tuple[Mark, ...] | None") -> "Action":
    """The point action an element action stands for on a screen with ``marks``: the same kind of
    action at the mark's box centre. Other actions come back unchanged.

    Raises :class:`ElementNotFound` when the id is not in ``marks`` (or ``marks`` is ``None``).

    >>> marks = (Mark(0, "link", "Files", (0.1, 0.2, 0.3, 0.4)),)
    >>> resolve_element(ClickElement(0), marks)
    Click(x=0.2, y=0.3)
    """
    if isinstance(action, ClickElement):
        return Click(*_find_mark(marks, action.element).center)
    if isinstance(action, LongPressElement):
        return LongPress(*_find_mark(marks, action.element).center, duration_ms=action.duration_ms)
    if isinstance(action, TypeElement):
        x, y = _find_mark(marks, action.element).center
        return Type(action.text, x, y, submit=action.submit)
    return action


def element_at(marks: "tuple[Mark, ...] | None", x: float, y: float) -> Mark | None:
    """The mark a point lands on: the smallest box holding it (the most specific element; on a tie
    the later one in document order, the deeper), ``None`` when no box does."""
    best: Mark | None = None
    for m in marks or ():
        if m.contains(x, y) and (best is None or m.area <= best.area):
            best = m
    return best


def check_image_size(image_size: Any) -> tuple[int, int]:
    """Validate a screenshot's ``(width, height)``: two positive integers. A bad size is the caller's bug
    (not model text), so this raises ``ValueError``."""
    try:
        w, h = image_size
    except (TypeError, ValueError):
        raise ValueError(f"image_size must be (width, height), got {image_size!r}") from None
    if isinstance(w, bool) or isinstance(h, bool) or not (isinstance(w, int) and isinstance(h, int)):
        raise ValueError(f"image_size must be two integers (width, height), got {image_size!r}")
    if w <= 0 or h <= 0:
        raise ValueError(f"image_size must be positive, got {image_size!r}")
    return w, h


@dataclass(frozen=True)
class Observation:
    """What the agent sees after a reset or a step.

    ``screenshot`` holds the image bytes exactly as captured (PNG or JPEG), or is
    ``None`` when the observation was loaded from a store without its pixels; then
    ``screenshot_ref`` names the blob (its content hash).

    ``marks`` is the screen's numbered elements (:class:`Mark`), built from its accessibility /
    UI tree by a device configured to (``None`` otherwise: devices build none unless asked).
    Element actions (:class:`ClickElement` ...) name them by id; the table is stored with the
    step, so the store, the matcher, the overlay and the replay resolve the same element.
    Dicts (stored JSON) are accepted and become :class:`Mark`.
    """

    screenshot: bytes | None
    width: int
    height: int
    screenshot_ref: str | None = None
    tree: str | None = None
    url: str | None = None
    last_action_error: str | None = None
    marks: tuple[Mark, ...] | None = None

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"observation size must be positive, got {self.width}x{self.height}")
        if self.marks is not None:
            object.__setattr__(self, "marks", _mark_table(self.marks))

    @property
    def size(self) -> tuple[int, int]:
        return (self.width, self.height)

    def to_dict(self, *, include_pixels: bool = True) -> dict[str, Any]:
        """JSON-able fields; ``marks`` only when the observation has a table (older readers and stored
        observations without marks see the same keys as before marks existed)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "marks"}
        d["screenshot"] = (
            base64.b64encode(self.screenshot).decode("ascii")
            if (include_pixels and self.screenshot is not None) else None
        )
        if self.marks is not None:
            d["marks"] = [m.to_dict() for m in self.marks]
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Observation":
        d = dict(data)
        if d.get("screenshot") is not None:
            d["screenshot"] = base64.b64decode(d["screenshot"])
        return cls(**d)


@dataclass(frozen=True)
class TaskSpec:
    """One task instance: which suite and task, with which seed and goal."""

    suite: str
    task_id: str
    seed: int
    goal: str
    max_steps: int = 10
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_steps <= 0:
            raise ValueError(f"max_steps must be positive, got {self.max_steps}")
        if not isinstance(self.goal, str):
            raise TypeError(f"the goal must be text, got {type(self.goal).__name__}: {self.goal!r:.80}")

    @property
    def env_id(self) -> str:
        return f"guiagent/{self.suite}.{self.task_id}"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["params"] = dict(self.params)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TaskSpec":
        return cls(**dict(data))


@dataclass(frozen=True)
class Step:
    """One agent turn: the observation it saw, what it said, what was done, what it got.

    ``response`` is the model's raw text; ``action`` the parsed action, or ``None``
    with ``parse_error`` set. ``action_error`` is the device's complaint when the
    action could not be carried out (it also reaches the next observation's
    ``last_action_error``). ``reward_parts`` names every reward component; ``reward``
    is their configured combination. ``metadata`` holds JSON-serialisable extras (a
    recorded step's ``target_box`` and ``tap_point``, a semi-online step's ``patched`` / ``matched`` flags).
    """

    index: int
    observation: Observation
    action: Action | None
    response: str = ""
    thought: str = ""
    parse_error: ParseError | None = None
    action_error: str | None = None
    reward: float = 0.0
    reward_parts: Mapping[str, float] = field(default_factory=dict)
    milestones: tuple[bool, ...] = ()
    terminated: bool = False
    truncated: bool = False
    policy_version: int = 0
    latency_ms: float = 0.0
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self, *, include_pixels: bool = True) -> dict[str, Any]:
        return {
            "index": self.index,
            "observation": self.observation.to_dict(include_pixels=include_pixels),
            "action": None if self.action is None else action_to_dict(self.action),
            "response": self.response,
            "thought": self.thought,
            "parse_error": None if self.parse_error is None else self.parse_error.to_dict(),
            "action_error": self.action_error,
            "reward": self.reward,
            "reward_parts": dict(self.reward_parts),
            "milestones": list(self.milestones),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "policy_version": self.policy_version,
            "latency_ms": self.latency_ms,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Step":
        d = dict(data)
        d["observation"] = Observation.from_dict(d["observation"])
        d["action"] = None if d.get("action") is None else action_from_dict(d["action"])
        d["parse_error"] = None if d.get("parse_error") is None else ParseError.from_dict(d["parse_error"])
        d["milestones"] = tuple(d.get("milestones", ()))
        d["reward_parts"] = dict(d.get("reward_parts", {}))
        d["metadata"] = dict(d.get("metadata", {}))
        return cls(**d)


EpisodeStatus = Literal["completed", "aborted"]


@dataclass(frozen=True)
class Trajectory:
    """A whole episode.

    ``status`` is ``completed`` (the task ended or the step budget ran out) or
    ``aborted`` (the device died, the worker was killed, ...; ``abort_reason`` says
    why). ``success`` is the task's own evaluation in [0, 1]. ``final_observation``
    is what the screen showed after the last step.
    """

    episode_id: str
    task: TaskSpec
    steps: tuple[Step, ...]
    success: float = 0.0
    status: EpisodeStatus = "completed"
    abort_reason: str | None = None
    final_observation: Observation | None = None
    agent: str = ""
    group_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def to_dict(self, *, include_pixels: bool = True) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "task": self.task.to_dict(),
            "steps": [s.to_dict(include_pixels=include_pixels) for s in self.steps],
            "success": self.success,
            "status": self.status,
            "abort_reason": self.abort_reason,
            "final_observation": None if self.final_observation is None
            else self.final_observation.to_dict(include_pixels=include_pixels),
            "agent": self.agent,
            "group_id": self.group_id,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Trajectory":
        d = dict(data)
        d["task"] = TaskSpec.from_dict(d["task"])
        d["steps"] = tuple(Step.from_dict(s) for s in d["steps"])
        if d.get("final_observation") is not None:
            d["final_observation"] = Observation.from_dict(d["final_observation"])
        d["metadata"] = dict(d.get("metadata", {}))
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "Trajectory":
        return cls.from_dict(json.loads(text))


# ----------------------------------------------------------------------------- step targets

#: how a recorded direction reads: ``finger`` = where the finger moves; ``scroll`` = where the view
#: scrolls to (the content further that way comes into sight: the finger moves the other way), as
#: :class:`Scroll` and AndroidControl's ``scroll`` action
SWIPE_CONVENTIONS = ("finger", "scroll")
#: the key of a step's ``metadata`` that holds its :class:`StepTarget` (as :meth:`StepTarget.to_dict`)
STEP_TARGET_KEY = "target"
_BOX_ROUND = 6


def _unit_pair(name: str, value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        pair = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"StepTarget.{name} must be two numbers, got {value!r:.80}") from None
    if len(pair) != 2 or any(isinstance(v, bool) for v in value):
        raise ValueError(f"StepTarget.{name} must be (x, y), got {value!r:.80}")
    for v in pair:
        _check_unit(name, v)
    return pair  # type: ignore[return-value]


@dataclass(frozen=True)
class StepTarget:
    """What a recorded step asks of an action: the whole of what the matcher reads about the truth.

    Importers build one from whatever the source records (UI-S1's ``check_options``, an AndroidControl
    action and its accessibility tree, a live step's action and element box); it is stored in the step's
    ``metadata[STEP_TARGET_KEY]`` and read back with :meth:`from_dict`. Coordinates are normalised to
    [0, 1] of the step's screenshot.

    Attributes:
        kind: the recorded action's kind (``Action.kind``: ``click``, ``long_press``, ``type``,
            ``scroll``, ``swipe``, ``open_app``, ``key``, ``back``, ``home``, ``wait``, ``answer``,
            ``finish``, ``drag``, ...).
        boxes: candidate element boxes ``(x0, y0, x1, y1)``, any number (UI-S1 lists the tapped element
            and the clickable containers around it); a tap inside any of them hits. A box may reach past
            the screen (an element partly scrolled off it): it is enlarged about its own centre.
        point: the recorded point (a tap, a long press, where a type tapped; a swipe's or drag's start).
        point2: a swipe's or drag's end point.
        text: typed text, an app's name, an answer, a key's name.
        direction: ``up``, ``down``, ``left`` or ``right``, as the source wrote it; read by ``convention``.
        convention: the source's swipe convention, :data:`SWIPE_CONVENTIONS`: ``finger`` (``direction``
            is where the finger moves) or ``scroll`` (where the view scrolls to; the finger moves the
            other way).
        button: a system button's name, lower case (``back``, ``home``, ``enter``, ``menu``).
        status: a finish's status (``success``, ``failure``).
        element: the recorded element's id in the step's mark table (``Observation.marks``), when the
            recorded action named one (``ClickElement``...): a prediction naming an element of the same
            screen matches by id.

    >>> t = StepTarget("click", boxes=((0.1, 0.2, 0.3, 0.4),), point=(0.2, 0.3))
    >>> StepTarget.from_dict(t.to_dict()) == t
    True
    >>> StepTarget("swipe", direction="down", convention="scroll").finger_direction
    'up'
    """

    kind: str
    boxes: tuple[tuple[float, float, float, float], ...] = ()
    point: tuple[float, float] | None = None
    point2: tuple[float, float] | None = None
    text: str | None = None
    direction: str | None = None
    convention: str = "finger"
    button: str | None = None
    status: str | None = None
    element: int | None = None

    def __post_init__(self) -> None:
        if self.element is not None and (isinstance(self.element, bool) or not isinstance(self.element, int)
                                         or self.element < 0):
            raise ValueError(f"StepTarget.element must be a mark id >= 0, got {self.element!r:.80}")
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError(f"StepTarget.kind must be an action kind, got {self.kind!r:.80}")
        if isinstance(self.boxes, (str, bytes, Mapping)) or not hasattr(self.boxes, "__iter__"):
            raise TypeError(f"StepTarget.boxes must be a list of boxes, got {self.boxes!r:.80}")
        boxes = []
        for b in self.boxes:
            try:
                box = tuple(round(float(v), _BOX_ROUND) for v in b)
            except (TypeError, ValueError):
                raise TypeError(f"a target box must be four numbers, got {b!r:.80}") from None
            if len(box) != 4 or any(isinstance(v, bool) for v in b):
                raise ValueError(f"a target box must be (x0, y0, x1, y1), got {b!r:.80}")
            x0, y0, x1, y1 = box
            if not all(-1.0 <= v <= 2.0 for v in box) or x1 < x0 or y1 < y0 or x1 < 0 or y1 < 0 or x0 > 1 or y0 > 1:
                raise ValueError(f"target box {b!r:.80} must overlap the screen [0, 1] (reaching at most a screen "
                                 "past it) with x0 <= x1 and y0 <= y1")
            boxes.append(box)
        object.__setattr__(self, "boxes", tuple(boxes))
        object.__setattr__(self, "point", _unit_pair("point", self.point))
        object.__setattr__(self, "point2", _unit_pair("point2", self.point2))
        for name in ("text", "button", "status"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise TypeError(f"StepTarget.{name} must be a string, got {v!r:.80}")
        if self.direction is not None and self.direction not in SCROLL_DIRECTIONS:
            raise ValueError(f"StepTarget.direction must be one of {SCROLL_DIRECTIONS}, got {self.direction!r:.80}")
        if self.convention not in SWIPE_CONVENTIONS:
            raise ValueError(f"StepTarget.convention must be one of {SWIPE_CONVENTIONS}, got {self.convention!r:.80}")

    @property
    def finger_direction(self) -> str | None:
        """Where the finger moves to do this step (``None`` without a direction)."""
        if self.direction is None:
            return None
        return self.direction if self.convention == "finger" else _OPPOSITE_DIRECTION[self.direction]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; fields left at their defaults are omitted (``convention`` only with a direction)."""
        d: dict[str, Any] = {"kind": self.kind}
        if self.boxes:
            d["boxes"] = [list(b) for b in self.boxes]
        for name in ("point", "point2"):
            if getattr(self, name) is not None:
                d[name] = list(getattr(self, name))
        for name in ("text", "direction", "button", "status", "element"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        if self.direction is not None:
            d["convention"] = self.convention
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StepTarget":
        """Inverse of :meth:`to_dict`; ``ValueError``/``TypeError`` name a bad field."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a step target is an object, got {data!r:.80}")
        names = {f.name for f in dataclasses.fields(cls)}
        extra = set(data) - names
        if extra:
            raise ValueError(f"unknown step target fields {sorted(extra)}")
        d = dict(data)
        if "boxes" in d:
            d["boxes"] = tuple(tuple(b) if isinstance(b, (list, tuple)) else b for b in d["boxes"] or ())
        return cls(**d)


_OPPOSITE_DIRECTION = {"up": "down", "down": "up", "left": "right", "right": "left"}

__all__ += ["StepTarget", "SWIPE_CONVENTIONS", "STEP_TARGET_KEY"]
