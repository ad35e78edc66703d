"""Qwen-VL agent tool calls: ``<tool_call>{"name": "mobile_use", "arguments": {...}}</tool_call>``.

Names and argument names follow the ``mobile_use`` / ``computer_use`` tools of
the Qwen2.5-VL and Qwen3-VL cookbooks (``cookbooks/utils/agent_function_call.py``) and the
Nous-style tool prompt of Qwen-Agent. Two coordinate frames:

* Qwen2.5-VL (``qwen_mobile``, ``qwen_computer``): absolute pixels of the
  smart-resized image (:func:`grounding.coords.smart_resize` with this format's
  ``factor``/``min_pixels``/``max_pixels``, which must match the processor).
* Qwen3-VL (``qwen3_mobile``, ``qwen3_computer``): relative coordinates, whatever the
  image's size. The Qwen3-VL mobile cookbook states "The screen's resolution is
  999x999" and divides by 999 (``relative999``); computer-use agents of Qwen3-VL state
  1000x1000 and divide by 1000 (``relative1000``). ``frame=`` picks either for any variant.

Differences from the cookbook, each deliberate:

* ``answer`` (``{"action": "answer", "text": ...}``) is offered in both tools:
  information tasks need it (Qwen's AndroidWorld variant of ``mobile_use`` adds it too).
* computer_use ``left_click`` carries its ``coordinate`` (as Qwen2.5-VL emits it);
  ``left_click_drag`` takes the start in ``coordinate`` and the end in
  ``coordinate2`` because actions here carry no cursor state; ``scroll`` takes
  signed ``pixels`` (positive = up) of the resized image and an optional ``coordinate``.
* computer_use ``double_click``, ``right_click`` and ``mouse_move`` carry their
  ``coordinate`` like ``left_click`` (:class:`DoubleClick`, :class:`RightClick`,
  :class:`Hover`); ``middle_click`` has no guiagent action and the parser names it
  in an ``unknown_action`` error.
* computer_use ``triple_click`` (Qwen3-VL) is read as :class:`DoubleClick`, as the
  Qwen3-VL cookbook simulates it; ``hscroll`` (Qwen3-VL) is a horizontal :class:`Scroll`
  (positive ``pixels`` = right), and a left/right scroll prints as ``hscroll``.
* Typed text ending in a newline means submit (``Type.submit``).

Tolerated: a missing ``</tool_call>``, a bare JSON object without tags (also the
bare arguments object ``{"action": ...}``), code fences, prose around the call,
``arguments`` given as a JSON string, comments / trailing commas / single quotes
(see :mod:`guiagent.jsontext`), arguments the action does not take (ignored, as the
cookbook's tools and UI-S1's scorer ignore them: UI-S1's targets carry a ``bbox``
beside the ``coordinate``), and a draft call inside the reasoning of a thinking model
(only the calls after the last ``</think>`` count when there are any). Two tool calls
in one answer are rejected (``multiple_actions``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, Mapping

from guiagent import jsontext
from guiagent.types import (
    Action, Answer, Click, DoubleClick, Drag, Finish, Hover, Key, LongPress, NavigateBack, NavigateHome,
    OpenApp, ParseError, RightClick, Scroll, Swipe, Type, Wait,
)

from grounding.base import ActionFormat, register_format
from grounding.coords import ModelFrame
from grounding.spec import (
    ActionSpec, ArgError, Ctx, Table, canonical_key, check_image_size, guarded_parse, model_key_parts,
)

__all__ = ["QwenToolCallFormat", "split_thinking"]

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_THINK = re.compile(r"</?(?:think|thinking)>", re.IGNORECASE)
_THINK_END = re.compile(r"</(?:think|thinking)\s*>", re.IGNORECASE)
#: the one-line action summary of the Qwen3-VL cookbook's replies ("Action: \"I tapped ...\"")
_SUMMARY = re.compile(r"\n\s*\**\s*Action\s*\**\s*[:：][^\n]*\s*$", re.IGNORECASE)
_FRAMES = ("smart_resize_pixels", "relative999", "relative1000")


def split_thinking(text: str) -> tuple[str, str]:
    """``(reasoning, answer)``: a thinking model's reply split after its last ``</think>`` (or
    ``</thinking>``) when a tool call or JSON object follows it, else ``("", text)``. A call the
    model drafted while thinking is then not taken for a second action."""
    ends = list(_THINK_END.finditer(text))
    if not ends:
        return "", text
    tail = text[ends[-1].end():]
    if _OPEN in tail or any(_is_call(tail, s, e) for s, e in jsontext.find_objects(jsontext.strip_fences(tail))):
        return text[:ends[-1].start()], tail
    return "", text


def _is_call(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` (of the fence-stripped text) is a call object, not stray JSON."""
    try:
        obj = jsontext.loads(jsontext.strip_fences(text)[start:end])
    except ValueError:
        return False
    return isinstance(obj, dict) and bool({"name", "action", "arguments"} & set(obj))
_SYSTEM_BUTTONS = {"back": "Back", "home": "Home", "menu": "Menu", "enter": "Enter"}
_STATUS = {"success": "success", "succeeded": "success", "failure": "failure", "fail": "failure",
           "failed": "failure"}
_NO_GUIAGENT_ACTION = {
    "middle_click": "there is no middle-button action; use left_click",
}

# argument schema entries shared by the rows (their "Required only by" text is generated)
_PARAM_SCHEMA: dict[str, dict[str, Any]] = {
    "coordinate": {"description": "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) "
                                  "coordinates to move the mouse to.", "type": "array"},
    "coordinate2": {"description": "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) "
                                   "coordinates of the end point.", "type": "array"},
    "text": {"description": "The text to type, the key, the app name or the answer.", "type": "string"},
    "keys": {"description": "Key names pressed together, e.g. [\"ctrl\", \"c\"].", "type": "array"},
    "time": {"description": "The seconds to wait or to press.", "type": "number"},
    "pixels": {"description": "The amount of scrolling to perform. Positive values scroll up "
                              "(right for hscroll), negative values scroll down (left).", "type": "number"},
    "button": {"description": "Back means returning to the previous interface, Home means returning to the "
                              "desktop, Menu means opening the application background menu, and Enter means "
                              "pressing the enter.", "enum": ["Back", "Home", "Menu", "Enter"], "type": "string"},
    "status": {"description": "The status of the task.", "type": "string", "enum": ["success", "failure"]},
}


def _need(a: Mapping[str, Any], name: str, action: str) -> Any:
    if a.get(name) is None:
        raise ArgError("bad_arguments", f"action={action} needs {name!r}")
    return a[name]


def _text(a: Mapping[str, Any], name: str, action: str, *, allow_empty: bool = False) -> str:
    v = _need(a, name, action)
    if not isinstance(v, str) or (not allow_empty and not v.strip()):
        raise ArgError("bad_arguments", f"action={action} needs a non-empty string {name!r}, got {v!r}")
    return v


def _seconds(a: Mapping[str, Any], name: str, action: str, default: float) -> float:
    v = a.get(name)
    if v is None:
        return default
    try:
        s = float(v)
    except (TypeError, ValueError):
        raise ArgError("bad_arguments", f"{name} of action={action} must be seconds, got {v!r}") from None
    if isinstance(v, bool) or not 0 <= s <= 60:
        raise ArgError("bad_arguments", f"{name} of action={action} must lie in [0, 60] seconds, got {v!r}")
    return s


def _num(v: float) -> int | float:
    return int(v) if float(v).is_integer() else round(v, 3)


def _dec_type(a, c):
    text = _text(a, "text", "type", allow_empty=True)
    submit = text.endswith("\n")
    text = text[:-1] if submit else text
    if not text and not submit:
        raise ArgError("bad_arguments", "action=type needs non-empty text")
    return Type(text, submit=submit)


def _enc_type(a, c):
    if a.x is not None:
        raise ValueError("the Qwen tool-call format cannot type at a point; emit a click first, then type")
    return {"text": a.text + ("\n" if a.submit else "")}


def _dec_terminate(a, c):
    s = str(_need(a, "status", "terminate")).strip().lower()
    if s not in _STATUS:
        raise ArgError("bad_arguments", f"terminate status must be 'success' or 'failure', got {s!r}")
    return Finish(_STATUS[s])


def _mobile_rows() -> list[ActionSpec]:
    def dec_long(a, c):
        x, y = c.point(_need(a, "coordinate", "long_press"), "coordinate")
        return LongPress(x, y, duration_ms=round(_seconds(a, "time", "long_press", 0.8) * 1000))

    def dec_swipe(a, c):
        return Swipe(*c.point(_need(a, "coordinate", "swipe"), "coordinate"),
                     *c.point(_need(a, "coordinate2", "swipe"), "coordinate2"))

    def dec_button(a, c):
        b = str(_need(a, "button", "system_button")).strip().lower()
        if b not in _SYSTEM_BUTTONS:
            raise ArgError("bad_arguments", f"button must be one of {list(_SYSTEM_BUTTONS.values())}, got {b!r}")
        return {"back": NavigateBack(), "home": NavigateHome()}.get(b) or Key(_SYSTEM_BUTTONS[b])

    def enc_button(a, c):
        if isinstance(a, NavigateBack):
            return {"button": "Back"}
        if isinstance(a, NavigateHome):
            return {"button": "Home"}
        return {"button": a.key} if a.key in ("Menu", "Enter") else None

    return [
        ActionSpec("key", (Key,), ("text",), "Perform a key event on the mobile device (adb `keyevent` "
                   "names, e.g. \"volume_up\", \"volume_down\", \"power\", \"camera\", \"clear\").",
                   lambda a, c: Key(_text(a, "text", "key").strip()),
                   lambda a, c: None if a.key in ("Menu", "Enter") else {"text": a.key}),
        ActionSpec("click", (Click,), ("coordinate",), "Click the point on the screen with coordinate (x, y).",
                   lambda a, c: Click(*c.point(_need(a, "coordinate", "click"), "coordinate")),
                   lambda a, c: {"coordinate": list(c.model(a.x, a.y))}),
        ActionSpec("long_press", (LongPress,), ("coordinate", "time"),
                   "Press the point on the screen with coordinate (x, y) for specified seconds.",
                   dec_long, lambda a, c: {"coordinate": list(c.model(a.x, a.y)), "time": _num(a.duration_ms / 1000)}),
        ActionSpec("swipe", (Swipe,), ("coordinate", "coordinate2"),
                   "Swipe from the starting point with coordinate (x, y) to the end point with coordinates2 (x2, y2).",
                   dec_swipe, lambda a, c: {"coordinate": list(c.model(a.x1, a.y1)),
                                            "coordinate2": list(c.model(a.x2, a.y2))}),
        ActionSpec("type", (Type,), ("text",), "Input the specified text into the activated input box.",
                   _dec_type, _enc_type),
        ActionSpec("answer", (Answer,), ("text",), "Output the answer.",
                   lambda a, c: Answer(_text(a, "text", "answer")), lambda a, c: {"text": a.text}),
        ActionSpec("system_button", (NavigateBack, NavigateHome, Key), ("button",), "Press the system button.",
                   dec_button, enc_button),
        ActionSpec("open", (OpenApp,), ("text",), "Open an app on the device.",
                   lambda a, c: OpenApp(_text(a, "text", "open").strip()), lambda a, c: {"text": a.app}),
        ActionSpec("wait", (Wait,), ("time",), "Wait specified seconds for the change to happen.",
                   lambda a, c: Wait(_seconds(a, "time", "wait", 1.0)), lambda a, c: {"time": _num(a.seconds)}),
        ActionSpec("terminate", (Finish,), ("status",),
                   "Terminate the current task and report its completion status.",
                   _dec_terminate, lambda a, c: {"status": a.status}),
    ]


def _point_spec(name: str, cls: type, verb: str) -> ActionSpec:
    """A computer_use action at one (x, y) pixel ``coordinate`` of the resized screen."""
    where = " to" if cls is Hover else " at"
    return ActionSpec(name, (cls,), ("coordinate",),
                      f"{verb}{where} a specified (x, y) pixel coordinate on the screen.",
                      lambda a, c: cls(*c.point(_need(a, "coordinate", name), "coordinate")),
                      lambda a, c: {"coordinate": list(c.model(a.x, a.y))})


def _computer_rows() -> list[ActionSpec]:
    def dec_key(a, c):
        keys = _need(a, "keys", "key")
        if isinstance(keys, str):
            keys = keys.split("+") if len(keys) > 1 and " " not in keys else keys.split() or [keys]
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k.strip() for k in keys):
            raise ArgError("bad_arguments", f"keys must be a list of key names, got {keys!r}")
        return Key(canonical_key(keys))

    def dec_drag(a, c):
        start = a.get("coordinate") if a.get("start_coordinate") is None else a["start_coordinate"]
        end = a.get("coordinate2") if a.get("end_coordinate") is None else a["end_coordinate"]
        if start is None or end is None:
            raise ArgError("bad_arguments", "left_click_drag needs the start point 'coordinate' and the end "
                                            "point 'coordinate2'")
        return Drag(*c.point(start, "coordinate"), *c.point(end, "coordinate2"))

    def dec_scroll(a, c):
        p = _need(a, "pixels", "scroll")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or p == 0 or p != p:
            raise ArgError("bad_arguments", f"scroll pixels must be a non-zero number, got {p!r}")
        point = c.point(a["coordinate"], "coordinate") if a.get("coordinate") is not None else (None, None)
        amount = min(1.0, abs(p) / c.extent()[1])
        return Scroll("up" if p > 0 else "down", *point, amount=amount)

    def enc_scroll(a, c):
        if a.direction not in ("up", "down"):
            return None  # left/right: hscroll's row
        pixels = max(1, round(a.amount * c.extent()[1]))
        out: dict[str, Any] = {"pixels": pixels if a.direction == "up" else -pixels}
        if a.x is not None:
            out["coordinate"] = list(c.model(a.x, a.y))
        return out

    def dec_hscroll(a, c):
        p = _need(a, "pixels", "hscroll")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or p == 0 or p != p:
            raise ArgError("bad_arguments", f"hscroll pixels must be a non-zero number, got {p!r}")
        point = c.point(a["coordinate"], "coordinate") if a.get("coordinate") is not None else (None, None)
        return Scroll("right" if p > 0 else "left", *point, amount=min(1.0, abs(p) / c.extent()[0]))

    def enc_hscroll(a, c):
        if a.direction not in ("left", "right"):
            return None
        pixels = max(1, round(a.amount * c.extent()[0]))
        out: dict[str, Any] = {"pixels": pixels if a.direction == "right" else -pixels}
        if a.x is not None:
            out["coordinate"] = list(c.model(a.x, a.y))
        return out

    return [
        ActionSpec("key", (Key,), ("keys",), "Performs key down presses on the arguments passed in order, "
                   "then performs key releases in reverse order.",
                   dec_key, lambda a, c: {"keys": model_key_parts(a.key)}),
        ActionSpec("type", (Type,), ("text",), "Type a string of text on the keyboard.", _dec_type, _enc_type),
        _point_spec("left_click", Click, "Click the left mouse button"),
        _point_spec("double_click", DoubleClick, "Double-click the left mouse button"),
        ActionSpec("triple_click", (DoubleClick,), ("coordinate",),
                   "Triple-click the left mouse button at a specified (x, y) pixel coordinate on the screen "
                   "(done as a double-click, the closest action).",
                   lambda a, c: DoubleClick(*c.point(_need(a, "coordinate", "triple_click"), "coordinate")),
                   lambda a, c: None),
        _point_spec("right_click", RightClick, "Click the right mouse button"),
        _point_spec("mouse_move", Hover, "Move the cursor"),
        ActionSpec("left_click_drag", (Drag,), ("coordinate", "coordinate2"),
                   "Click at coordinate and drag the cursor to coordinate2.",
                   dec_drag, lambda a, c: {"coordinate": list(c.model(a.x1, a.y1)),
                                           "coordinate2": list(c.model(a.x2, a.y2))}),
        ActionSpec("scroll", (Scroll,), ("pixels", "coordinate?"),
                   "Performs a scroll of the mouse scroll wheel (at coordinate if given).", dec_scroll, enc_scroll),
        ActionSpec("hscroll", (Scroll,), ("pixels", "coordinate?"),
                   "Performs a horizontal scroll (at coordinate if given); positive values scroll right.",
                   dec_hscroll, enc_hscroll),
        ActionSpec("wait", (Wait,), ("time",), "Wait specified seconds for the change to happen.",
                   lambda a, c: Wait(_seconds(a, "time", "wait", 1.0)), lambda a, c: {"time": _num(a.seconds)}),
        ActionSpec("answer", (Answer,), ("text",), "Output the answer.",
                   lambda a, c: Answer(_text(a, "text", "answer")), lambda a, c: {"text": a.text}),
        ActionSpec("terminate", (Finish,), ("status",),
                   "Terminate the current task and report its completion status.",
                   _dec_terminate, lambda a, c: {"status": a.status}),
    ]


class QwenToolCallFormat(ActionFormat):
    """Qwen-VL ``mobile_use`` / ``computer_use`` tool calls: in smart-resized pixels (Qwen2.5-VL,
    the default ``frame``) or relative coordinates (Qwen3-VL: ``frame="relative999"`` or
    ``"relative1000"``; the prompt states the frame as the screen's resolution).

    Example::

        >>> fmt = QwenToolCallFormat("mobile_use")
        >>> fmt.parse('<tool_call>\\n{"name": "mobile_use", "arguments": {"action": "click", '
        ...           '"coordinate": [546, 1204]}}\\n</tool_call>', (1080, 2400))
        Click(x=0.5, y=0.5)
    """

    def __init__(
        self,
        variant: Literal["mobile_use", "computer_use"] = "mobile_use",
        *,
        frame: Literal["smart_resize_pixels", "relative999", "relative1000"] = "smart_resize_pixels",
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        factor: int = 28,
    ) -> None:
        if variant not in ("mobile_use", "computer_use"):
            raise ValueError(f"variant must be 'mobile_use' or 'computer_use', got {variant!r}")
        if frame not in _FRAMES:
            raise ValueError(f"frame must be one of {_FRAMES}, got {frame!r}")
        self.variant = variant
        pixels = frame == "smart_resize_pixels"
        self.name = ("qwen" if pixels else "qwen3") + ("_mobile" if variant == "mobile_use" else "_computer")
        self.frame = (ModelFrame("smart_resize_pixels", factor, min_pixels, max_pixels) if pixels
                      else ModelFrame(frame))
        self.table = Table(_mobile_rows() if variant == "mobile_use" else _computer_rows())
        self.supported_kinds: frozenset[str] = self.table.supported_kinds
        #: fields this format cannot carry: format() drops them, parse() gives the defaults back
        self.dropped_fields: dict[str, tuple[str, ...]] = {"finish": ("message",)}

    # ------------------------------------------------------------------ prompt

    def parameters_schema(self) -> dict[str, Any]:
        """The tool's JSON-schema ``parameters``, generated from the table."""
        lines = "\n".join(f"* `{r.name}`: {r.doc}" for r in self.table.rows)
        props: dict[str, Any] = {"action": {
            "description": f"The action to perform. The available actions are:\n{lines}",
            "enum": list(self.table.names), "type": "string",
        }}
        for pname, schema in _PARAM_SCHEMA.items():
            users = [r.name for r in self.table.rows if pname in r.required]
            optional = [r.name for r in self.table.rows if pname + "?" in r.params]
            if not users and not optional:
                continue
            desc = schema["description"]
            if users:
                desc += " Required only by " + ", ".join(f"`action={u}`" for u in users) + "."
            if optional:
                desc += " Optional for " + ", ".join(f"`action={u}`" for u in optional) + "."
            props[pname] = {**schema, "description": desc}
        return {"properties": props, "required": ["action"], "type": "object"}

    def function(self, image_size: tuple[int, int] | None = None) -> dict[str, Any]:
        """The ``{"name", "description", "parameters"}`` function definition (Qwen-Agent style)."""
        if self.variant == "mobile_use":
            desc = ("Use a touchscreen to interact with a mobile device, and take screenshots.\n"
                    "* This is an interface to a mobile device with touchscreen. You can perform actions like "
                    "clicking, typing, swiping, etc.\n")
        else:
            desc = ("Use a mouse and keyboard to interact with a computer, and take screenshots.\n"
                    "* This is an interface to a desktop GUI. You do not have access to a terminal or "
                    "applications menu. You must click on desktop icons to start applications.\n")
        desc += ("* Some applications may take time to start or process actions, so you may need to wait and "
                 "take successive screenshots to see the results of your actions.\n")
        if image_size is not None:
            w, h = self.frame.extent(check_image_size(image_size))
            desc += f"* The screen's resolution is {w}x{h}.\n"
        desc += ("* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the "
                 "element. Don't click boxes on their edges unless asked.")
        return {"name": self.variant, "description": desc, "parameters": self.parameters_schema()}

    def system_prompt(self, image_size: tuple[int, int] | None = None) -> str:
        """Qwen's Nous-style tool prompt. Pass ``image_size`` to state the resized resolution as
        the cookbook does (it is the frame the model's coordinates live in)."""
        tool = json.dumps({"type": "function", "function": self.function(image_size)}, ensure_ascii=False)
        return (
            "You are a helpful assistant.\n\n# Tools\n\n"
            "You may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{tool}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n"
            "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
        )

    # ------------------------------------------------------------------ text <-> action

    def thought(self, text: str) -> str:
        if not isinstance(text, str):
            return ""
        reasoning, text = split_thinking(text)
        i = text.find(_OPEN)
        if i < 0:
            spans = jsontext.find_objects(text)
            i = spans[0][0] if spans else len(text)
        pieces = (_THINK.sub("", jsontext.strip_fences(part)).strip() for part in (reasoning, text[:i]))
        head = "\n".join(p for p in pieces if p)
        head = re.sub(r"^\s*\**\s*(?:Thought|Thinking)\s*\**\s*[:：]\s*", "", head, flags=re.IGNORECASE)
        # the cookbook's one-line action summary after the reasoning is not reasoning (kept when
        # it is all the model wrote, as GUI-Owl 1.5's "Action: <what to do>" replies are)
        return _SUMMARY.sub("", "\n" + head).strip() or head.strip()

    def format(self, action: Action, image_size: tuple[int, int], thought: str = "") -> str:
        ctx = Ctx(self.frame, check_image_size(image_size))
        row, args = self.table.encode(action, ctx, f"Qwen {self.variant}")
        call = json.dumps({"name": self.variant, "arguments": {"action": row.name, **args}}, ensure_ascii=False)
        body = f"{_OPEN}\n{call}\n{_CLOSE}"
        return f"{thought.strip()}\n{body}" if thought.strip() else body

    def parse(self, text: str, image_size: tuple[int, int]) -> Action | ParseError:
        return guarded_parse(self._parse, text, image_size)

    def _candidates(self, text: str) -> list[str]:
        """Text of each tool call in the message (tags first, then bare JSON objects)."""
        if _OPEN in text:
            out = []
            for chunk in text.split(_OPEN)[1:]:
                j = chunk.find(_CLOSE)
                out.append(chunk if j < 0 else chunk[:j])  # a missing </tool_call> runs to the end
            return out
        body = jsontext.strip_fences(text)
        return [body[s:e] for s, e in jsontext.find_objects(body)]

    def _parse(self, text: str, image_size: tuple[int, int]) -> Action | ParseError:
        cands = self._candidates(split_thinking(text)[1])
        calls: list[Any] = []
        for cand in cands:
            spans = jsontext.find_objects(jsontext.strip_fences(cand))
            if not spans:
                continue
            body = jsontext.strip_fences(cand)
            for s, e in spans:
                try:
                    calls.append(jsontext.loads(body[s:e]))
                except ValueError as err:
                    calls.append(err)
        if not calls:
            if _OPEN in text:
                return ParseError("malformed", "<tool_call> holds no JSON object", text)
            return ParseError("no_action", 'no tool call found; expected <tool_call>\n{"name": '
                              f'"{self.variant}", "arguments": {{"action": ...}}}}\n</tool_call>', text)
        # stray JSON in prose (not an object at all) must not count as a second call
        real = [c for c in calls if not isinstance(c, dict) or "name" in c or "action" in c or "arguments" in c]
        if len(real) > 1:
            return ParseError("multiple_actions", f"one tool call per message, found {len(real)}", text)
        call = (real or calls)[0]
        if isinstance(call, ValueError):
            return ParseError("malformed", f"tool call is not valid JSON: {call}", text)
        if not isinstance(call, dict):
            return ParseError("malformed", f"tool call must be a JSON object, got {type(call).__name__}", text)
        if "arguments" in call or "name" in call:
            name = call.get("name")
            if name is not None and name != self.variant:
                return ParseError("unknown_action", f"unknown tool {name!r}; call {self.variant!r}", text)
            args = call.get("arguments")
            if isinstance(args, str):
                try:
                    args = jsontext.loads(args)
                except ValueError as err:
                    return ParseError("malformed", f"arguments string is not JSON: {err}", text)
        else:
            args = call  # the bare arguments object {"action": ...}
        if not isinstance(args, dict):
            return ParseError("bad_arguments", f"arguments must be an object, got {args!r}", text)
        action = args.get("action")
        if not isinstance(action, str) or not action.strip():
            return ParseError("bad_arguments", "arguments need an \"action\" name", text)
        row = self.table.lookup(action.strip())
        if row is None:
            why = _NO_GUIAGENT_ACTION.get(action.strip().lower())
            msg = f"{action!r} has no guiagent action: {why}" if why else f"unknown action {action!r}"
            return ParseError("unknown_action", f"{msg}; expected one of {list(self.table.names)}", text)
        # arguments the action does not take are ignored, as the reference tools ignore them
        return row.decode(args, Ctx(self.frame, image_size))


# Qwen2.5-VL's tools in smart-resized pixels; the same tools as Qwen3-VL speaks them, relative 0-999 (its
# mobile cookbook) / 0-1000 coordinates (frame= picks the other)
register_format("qwen_mobile", QwenToolCallFormat, "mobile_use")
register_format("qwen_computer", QwenToolCallFormat, "computer_use")
register_format("qwen3_mobile", QwenToolCallFormat, "mobile_use", frame="relative999")
register_format("qwen3_computer", QwenToolCallFormat, "computer_use", frame="relative1000")
