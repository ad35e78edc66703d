"""The per-action table every format is built from, and the helpers its rows share.

A format declares one :class:`ActionSpec` per wire action. That single row
feeds the system prompt (``signature`` and ``doc``), the parser's whitelist
(``name`` and ``aliases``), the JSON schema where the format has one
(``params``), the decoder and the printer, so none of them can drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from guiagent.types import Action, ParseError, check_image_size

from grounding.coords import CoordinateError, ModelFrame

__all__ = [
    "ArgError", "Ctx", "ActionSpec", "Table", "parse_numbers", "canonical_key", "model_key_parts",
]


class ArgError(Exception):
    """A decoder's complaint; ``code`` is a :class:`~guiagent.types.ParseError` code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Ctx:
    """What a row needs besides its arguments: the frame and the screenshot size."""

    frame: ModelFrame
    image_size: tuple[int, int]

    def point(self, value: Any, what: str = "point") -> tuple[float, float]:
        """A model point (list, tuple or text; four numbers = a box, its centre) -> normalised."""
        nums = parse_numbers(value, what)
        if len(nums) == 4:
            nums = [(nums[0] + nums[2]) / 2.0, (nums[1] + nums[3]) / 2.0]
        try:
            return self.frame.to_unit(nums[0], nums[1], self.image_size)
        except CoordinateError as e:
            raise ArgError("bad_coordinates", f"{what}: {e}") from None

    def model(self, x: float, y: float) -> tuple[int, int]:
        """Normalised -> integer model coordinates."""
        return self.frame.to_model(x, y, self.image_size)

    def extent(self) -> tuple[int, int]:
        return self.frame.extent(self.image_size)


Decoder = Callable[[Mapping[str, Any], Ctx], Action]
Encoder = Callable[[Action, Ctx], "dict[str, Any] | None"]


@dataclass(frozen=True)
class ActionSpec:
    """One wire action of a format.

    ``kinds`` are the guiagent action classes the row can decode to and print;
    ``encode`` may return ``None`` to pass an action on to a later row (e.g. a
    ``Key`` that is really a system button). ``signature`` is how the prompt shows
    the call; ``params`` names its arguments (``name?`` marks an optional one).
    """

    name: str
    kinds: tuple[type, ...]
    params: tuple[str, ...]
    doc: str
    decode: Decoder
    encode: Encoder
    signature: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(p for p in self.params if not p.endswith("?"))

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.rstrip("?") for p in self.params)


class Table:
    """An ordered set of rows with the lookups a format needs."""

    def __init__(self, rows: Iterable[ActionSpec]) -> None:
        self.rows: tuple[ActionSpec, ...] = tuple(rows)
        self.by_name: dict[str, ActionSpec] = {}
        for row in self.rows:
            for name in (row.name, *row.aliases):
                if name in self.by_name:
                    raise ValueError(f"action name {name!r} defined twice")
                self.by_name[name] = row
        self.supported_kinds: frozenset[str] = frozenset(k.kind for row in self.rows for k in row.kinds)

    @property
    def names(self) -> tuple[str, ...]:
        """Primary wire names, in prompt order."""
        return tuple(row.name for row in self.rows)

    def lookup(self, name: str) -> ActionSpec | None:
        return self.by_name.get(name) or self.by_name.get(name.lower())

    def encode(self, action: Action, ctx: Ctx, format_name: str) -> tuple[ActionSpec, dict[str, Any]]:
        """The row and arguments that print ``action``; ``ValueError`` if no row can."""
        if action.kind not in self.supported_kinds:
            raise ValueError(
                f"the {format_name} format cannot express a {action.kind!r} action; "
                f"it supports {sorted(self.supported_kinds)}"
            )
        for row in self.rows:
            if type(action) in row.kinds:
                args = row.encode(action, ctx)
                if args is not None:
                    return row, args
        raise ValueError(f"the {format_name} format cannot express {action!r}")


# ----------------------------------------------------------------------------- points

_NUM = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
# wrappers models put around points and boxes (UI-TARS, Qwen, Doubao)
_TAGS = re.compile(r"<\|?/?(?:box_start|box_end|point_start|point_end|bbox|point|box)\|?>")


def parse_numbers(value: Any, what: str = "point") -> list[float]:
    """Two or four numbers from a model point/box: ``[x, y]``, ``'(x,y)'``, ``'<point>x y</point>'``,
    ``'<|box_start|>(x1,y1,x2,y2)<|box_end|>'``, ``'<bbox>x1 y1 x2 y2</bbox>'`` ...

    Anything besides numbers, brackets, commas, spaces and the known tags is an
    error (``bad_arguments``), so a copied template like ``'(x1,y1)'`` is rejected.
    """
    if isinstance(value, (list, tuple)):
        if len(value) == 1 and isinstance(value[0], (list, tuple, str)):
            return parse_numbers(value[0], what)
        if len(value) in (2, 4) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
        ):
            return [float(v) for v in value]
        if all(isinstance(v, str) for v in value):
            return parse_numbers(" ".join(value), what)
        raise ArgError("bad_arguments", f"{what} must be two numbers [x, y] (or a box of four), got {value!r}")
    if isinstance(value, bool) or not isinstance(value, str):
        raise ArgError("bad_arguments", f"{what} must be two numbers [x, y], got {value!r}")
    body = _TAGS.sub(" ", value)
    nums = _NUM.findall(body)
    residue = _NUM.sub(" ", body)
    if residue.strip(" \t\n()[],;（）【】，；") or len(nums) not in (2, 4):
        raise ArgError("bad_arguments", f"{what} must be two numbers like '(x,y)', got {value!r}")
    return [float(n) for n in nums]


# ----------------------------------------------------------------------------- keys

# model-side names -> the canonical (Playwright-style) names guiagent Key actions use
_CANON = {
    "ctrl": "Control", "control": "Control", "shift": "Shift", "alt": "Alt", "option": "Alt",
    "cmd": "Meta", "command": "Meta", "meta": "Meta", "win": "Meta", "super": "Meta",
    "enter": "Enter", "return": "Enter", "esc": "Escape", "escape": "Escape", "tab": "Tab",
    "backspace": "Backspace", "delete": "Delete", "del": "Delete", "space": "Space",
    "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
    "arrowup": "ArrowUp", "arrowdown": "ArrowDown", "arrowleft": "ArrowLeft", "arrowright": "ArrowRight",
    "pageup": "PageUp", "pagedown": "PageDown", "home": "Home", "end": "End", "insert": "Insert",
    "capslock": "CapsLock",
}
_MODEL = {
    "Control": "ctrl", "Shift": "shift", "Alt": "alt", "Meta": "meta", "Enter": "enter",
    "Escape": "esc", "Tab": "tab", "Backspace": "backspace", "Delete": "delete", "Space": "space",
    "ArrowUp": "up", "ArrowDown": "down", "ArrowLeft": "left", "ArrowRight": "right",
    "PageUp": "pageup", "PageDown": "pagedown", "Home": "home", "End": "end", "Insert": "insert",
    "CapsLock": "capslock",
}
_FKEY = re.compile(r"[fF]([1-9]|1[0-9]|2[0-4])")


def canonical_key(parts: Sequence[str]) -> str:
    """Model key names (``['ctrl', 'c']``) -> a guiagent key chord (``'Control+c'``)."""
    out = []
    for p in parts:
        low = p.strip().lower()
        if not low:
            continue
        if _FKEY.fullmatch(low):
            out.append(low.upper())
        else:
            out.append(_CANON.get(low, p.strip()))
    return "+".join(out)


def model_key_parts(key: str) -> list[str]:
    """A guiagent key chord (``'Control+c'``) -> lower-case model names (``['ctrl', 'c']``)."""
    parts = [key] if key == "+" else [p for p in key.split("+") if p] or [key]
    out = []
    for p in parts:
        if _FKEY.fullmatch(p):
            out.append(p.lower())
        else:
            out.append(_MODEL.get(p, p))
    return out


# ----------------------------------------------------------------------------- parse guard

#: prefix of the message a parser returns when it hit a bug instead of a verdict;
#: the fuzz tests assert it never appears
INTERNAL_ERROR = "internal parser error"


def guarded_parse(parse_fn: Callable[[str, tuple[int, int]], Any], text: Any,
                  image_size: Any) -> Any:
    """Run a format's parser so that no model text can make it raise.

    ``image_size`` is checked first (and may raise: it is not model text). Any
    exception from the parser itself becomes ``ParseError('malformed', ...)`` with
    :data:`INTERNAL_ERROR` in its message, so the episode goes on and the bug is visible.
    """
    size = check_image_size(image_size)
    if not isinstance(text, str):
        return ParseError("empty", f"expected model text, got {type(text).__name__}", "")
    if not text.strip():
        return ParseError("empty", "the model produced no text", text)
    try:
        return parse_fn(text, size)
    except ArgError as e:
        return ParseError(e.code, e.message, text)
    except Exception as e:  # noqa: BLE001 - the contract is "never raises on model text"
        return ParseError("malformed", f"{INTERNAL_ERROR}: {type(e).__name__}: {e}", text)
