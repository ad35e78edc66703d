"""Set-of-marks: actions that name one of the screen's numbered elements.

What AndroidWorld's M3A agent (``{"action_type": "click", "index": 7}``) and BrowserGym's
``bid`` actions do: the device numbers the visible, interactive or named elements of the
screen from its accessibility / UI tree (:class:`~guiagent.types.Mark`: id, role, name,
normalised box), the prompt lists them beside the screenshot, and the model acts on a number
instead of a point. The device resolves the number to the element's box centre
(:func:`guiagent.types.resolve_element`; where another element covers that centre, the browser to the
nearest point of the box the element itself takes, and the Android device to the nearest point no control
drawn later covers); a number the screen does not hold is an action
error, reported back like any other.

:class:`MarksFormat` is the JSON format (:mod:`grounding.jsonfmt`) over the element actions
(:class:`~guiagent.types.ClickElement`, :class:`~guiagent.types.LongPressElement`,
:class:`~guiagent.types.TypeElement`) and the actions that need no point (type into the focused
field, scroll the page, keys, back, home, open an app, wait, answer, finish); ``pixels=True``
adds the point actions too. The reply object is exactly :func:`guiagent.types.action_to_dict`,
and the table, generated from the action classes, feeds the prompt, the whitelist and the JSON
schema. Each turn's user message carries the numbered elements (:meth:`MarksFormat.observation_text`)::

    Elements (id role "name"):
    [0] link "Contacts"
    [1] link "Messages"
    [2] switch "Wi-Fi"

and with ``states=True`` each element's states after its role (``[2] switch checked "Wi-Fi"``).

Example::

    >>> from guiagent.types import ClickElement, Mark, Observation
    >>> fmt = MarksFormat()
    >>> fmt.parse('{"action": {"kind": "click_element", "element": 7}}', (360, 640))
    ClickElement(element=7)
    >>> fmt.parse('{"action": {"kind": "click", "element": 7}}', (360, 640))  # a short alias
    ClickElement(element=7)
    >>> fmt.format(ClickElement(7), (360, 640))
    '{"action": {"kind": "click_element", "element": 7}}'
    >>> print(marks_text((Mark(0, "link", "Files", (0, 0, 0.5, 0.1)),)))
    [0] link "Files"
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Sequence

from guiagent import jsontext
from guiagent.types import (
    ELEMENT_ACTION_TYPES, Action, Answer, Click, ClickElement, Finish, Key, LongPress, LongPressElement,
    Mark, NavigateBack, NavigateHome, Observation, OpenApp, ParseError, Scroll, Type, TypeElement, Wait,
    ACTION_TYPES, element_at,
)

from grounding.base import register_format
from grounding.jsonfmt import JsonFormat, _row
from grounding.spec import Table

__all__ = ["MarksFormat", "from_android_world", "marks_text", "mark_line", "to_element_action", "listed_name", "mark_named", "shortest_name"]

#: the actions of the elements-only format besides the element actions: none of them needs a point
_NO_POINT = (Type, Scroll, Key, NavigateBack, NavigateHome, OpenApp, Wait, Answer, Finish)


def listed_name(name: str, max_name_chars: int = 80) -> str:
    """``name`` as the element list writes it: whitespace collapsed, cut with an ellipsis past
    ``max_name_chars``."""
    name = " ".join(name.split())
    return name[: max(0, max_name_chars - 1)] + "…" if len(name) > max_name_chars else name


def mark_named(marks: Sequence[Mark] | None, name: str, *, max_name_chars: int = 80) -> Mark | None:
    """The mark a reply means by ``name`` (whitespace collapsed): the first in table order whose name, or
    its listed (cut) form, equals it; failing that, the first equal ignoring case; failing that, the
    first whose name begins with it as whole words, ignoring case (``Pictures`` for a row
    ``Pictures 8 items``, as a goal names it). ``None`` when no mark is so named."""
    want = " ".join(name.split()).casefold()
    if not want:
        return None
    rows = [(m, " ".join(m.name.split())) for m in marks or ()]
    for m, full in rows:
        if name.split() and " ".join(name.split()) in (full, listed_name(full, max_name_chars)):
            return m
    for m, full in rows:
        if want in (full.casefold(), listed_name(full, max_name_chars).casefold()):
            return m
    for m, full in rows:
        if full.casefold().startswith(want + " "):
            return m
    return None


def shortest_name(marks: Sequence[Mark] | None, mark: Mark, *, max_name_chars: int = 80) -> str | None:
    """The fewest leading words of ``mark``'s listed name that :func:`mark_named` leads back to ``mark`` and
    that begin no other element's name (``Pictures`` for a row ``Pictures 8 items`` when no other row starts
    so; ``Tab #1``, not ``Tab``, beside ``Tab #2``: a reader of ``Tab`` could not tell which tab is meant,
    though the first one listed takes it); the whole listed name where every shorter one is shared;
    ``None`` when not even that leads back (an earlier row has the same name, or the mark has none)."""
    words = listed_name(mark.name, max_name_chars).split()
    others = [" ".join(listed_name(m.name, max_name_chars).split()).casefold() + " "
              for m in marks or () if m is not mark]
    for k in range(1, len(words) + 1):
        lead = " ".join(words[:k])
        if k < len(words) and any(o.startswith(lead.casefold() + " ") for o in others):
            continue  # another element's name begins so too
        if mark_named(marks, lead, max_name_chars=max_name_chars) is mark:
            return lead
    return None


def mark_line(mark: Mark, *, max_name_chars: int = 80, boxes: bool = False, decimals: int = 2,
              names: str = "quoted", states: bool = False) -> str:
    """``[id] role "name"`` (and ``@[x0,y0,x1,y1]`` with ``boxes``): one line, whatever the name holds.

    ``states``: the mark's states (:data:`~guiagent.types.MARK_STATES`) follow its role, before the name
    (``[2] checkbox checked "Wi-Fi"``, ``[4] tab selected: 2``), where no name can be taken for them.

    ``names="quoted"``: the name is JSON-quoted (quotes and backslashes escaped), so no page text can
    close the quote early. ``names="plain"``: ``[id] role: name``, the name as a goal would write it
    (a from-scratch tokenizer splits ``"Calendar"`` and `` Calendar`` into unrelated pieces), its
    brackets turned into parentheses so no name can forge an ``[id]``. Either way whitespace, newlines
    included, collapses to single spaces: a name never starts a line of its own.
    """
    name = listed_name(mark.name, max_name_chars)
    line = f"[{mark.id}] {mark.role or 'element'}"
    if states and mark.states:
        line += " " + " ".join(mark.states)
    if name and names == "plain":
        line += ": " + name.replace("[", "(").replace("]", ")")
    elif name:
        line += " " + json.dumps(name, ensure_ascii=False)
    if boxes:
        line += " @[" + ",".join(f"{v:.{decimals}f}" for v in mark.box) + "]"
    return line


def marks_text(marks: Sequence[Mark] | None, *, max_marks: int = 200, max_name_chars: int = 80,
               boxes: bool = False, names: str = "quoted", states: bool = False) -> str:
    """The numbered elements, one :func:`mark_line` each, in table order; the first ``max_marks``
    of a longer table, with a line saying how many were left out."""
    if marks is None:
        return "(this screen has no numbered elements)"
    lines = [mark_line(m, max_name_chars=max_name_chars, boxes=boxes, names=names, states=states)
             for m in list(marks)[:max_marks]]
    if len(marks) > max_marks:
        lines.append(f"({len(marks) - max_marks} more elements not listed)")
    return "\n".join(lines) if lines else "(no elements on this screen)"


def to_element_action(action: Action, marks: Sequence[Mark] | None) -> Action:
    """The element action a point action stands for on a screen with ``marks``: a Click, LongPress or
    Type at a point inside a mark's box becomes the same action on that mark (the smallest box holding
    the point, :func:`guiagent.types.element_at`). Anything else, and a point on no mark, comes back
    unchanged. How demonstrations recorded as points (oracles, imported datasets) become targets in
    the marks format."""
    if marks is None or isinstance(action, ELEMENT_ACTION_TYPES):
        return action
    if isinstance(action, Click):
        m = element_at(tuple(marks), action.x, action.y)
        return action if m is None else ClickElement(m.id)
    if isinstance(action, LongPress):
        m = element_at(tuple(marks), action.x, action.y)
        return action if m is None else LongPressElement(m.id, duration_ms=action.duration_ms)
    if isinstance(action, Type) and action.x is not None and action.y is not None:
        m = element_at(tuple(marks), action.x, action.y)
        return action if m is None else TypeElement(m.id, action.text, submit=action.submit)
    return action


class MarksFormat(JsonFormat):
    """JSON actions over the screen's numbered elements; see the module docstring.

    ``pixels``: also offer the point actions (click at x, y ...), for screens whose target has no
    mark. ``max_marks`` / ``max_name_chars``: how much of a long table the prompt lists.
    ``boxes``: list each element's normalised box too. ``compact``: a one-paragraph system prompt
    (for tiny models, whose prompt length is compute) instead of the full action list. ``names``:
    ``quoted`` (``[3] link "Files"``) or ``plain`` (``[3] link: Files``, see :func:`mark_line`).
    ``states``: each element's states after its role (``[2] switch checked "Wi-Fi"``): whether a box is
    ticked, which tab is selected, which section is open. Off by default: every recipe measured before
    the states were read was prompted without them.
    """

    name = "marks"

    def __init__(self, *, decimals: int = 3, pixels: bool = False, max_marks: int = 200,
                 max_name_chars: int = 80, boxes: bool = False, compact: bool = False,
                 names: str = "quoted", refer: str = "id", states: bool = False) -> None:
        super().__init__(decimals=decimals)
        self.states = bool(states)
        if refer not in ("id", "name"):
            raise ValueError(f"refer must be 'id' or 'name', got {refer!r}")
        self.refer = refer
        if max_marks < 1 or max_name_chars < 1:
            raise ValueError("max_marks and max_name_chars must be >= 1")
        if names not in ("quoted", "plain"):
            raise ValueError(f"names must be 'quoted' or 'plain', got {names!r}")
        self.names = names
        self.pixels = pixels
        self.max_marks = max_marks
        self.max_name_chars = max_name_chars
        self.boxes = boxes
        self.compact = compact
        if pixels:
            rows = [_row(cls, decimals) for cls in ACTION_TYPES]
        else:
            # without point actions the short names are free: "click" / "tap" / "long_press" name elements
            aliases = {ClickElement: ("click", "tap"), LongPressElement: ("long_press",)}
            rows = [_row(cls, decimals, aliases=aliases.get(cls, ())) for cls in ELEMENT_ACTION_TYPES]
            docs = {Type: "Type text into the focused field (type_element taps a field first).",
                    Scroll: "Scroll the page so that content further in `direction` comes into sight."}
            rows += [_row(cls, decimals, skip=("x", "y"), doc=docs.get(cls)) for cls in _NO_POINT]
        self.table = Table(rows)
        self.supported_kinds = self.table.supported_kinds
        self.dropped_fields = {} if pixels else {"type": ("x", "y"), "scroll": ("x", "y")}

    def system_prompt(self, image_size: tuple[int, int] | None = None) -> str:
        if self.compact and self.refer == "name":
            return ('Reply with one JSON action on a listed element, by name, e.g. '
                    '{"action": {"kind": "click_element", "name": "Files"}}, or {"action": {"kind": "finish"}}.')
        if self.compact:
            return ('Reply with one JSON action on a numbered element, e.g. '
                    '{"action": {"kind": "click_element", "element": 3}}, or {"action": {"kind": "finish"}}.')
        lines = []
        for row in self.table.rows:
            args = ", ".join(f'"{p.rstrip("?")}": {"..." if not p.endswith("?") else "(optional)"}'
                             for p in row.params)
            lines.append(f'- {{"kind": "{row.name}"{", " + args if args else ""}}}  {row.doc}')
        points = (f"Coordinates x, y are fractions of the screenshot: 0 is the left/top edge, 1 the right/bottom "
                  f"edge (up to {self.decimals} decimals).\n\n" if self.pixels else "")
        return (
            "You control a device through its screen. Each turn shows the screenshot and the screen's "
            'numbered elements, one a line: [id] role "name". Act on an element by its number '
            '("element": 3) or by its name as listed ("name": "Files" in place of "element"). '
            "Reply with one JSON object and nothing else:\n"
            '{"thought": "<your reasoning>", "action": {"kind": ..., ...}}\n\n'
            + points + "## Actions\n" + "\n".join(lines) + "\n"
        )

    def observation_text(self, observation: Observation) -> str:
        """The turn's numbered elements, for the user message beside the screenshot."""
        role = "role states" if self.states else "role"
        head = f"Elements (id {role} \"name\"):\n" if self.names == "quoted" else f"Elements (id {role}: name):\n"
        return head + marks_text(observation.marks, max_marks=self.max_marks, max_name_chars=self.max_name_chars,
                                 boxes=self.boxes, names=self.names, states=self.states)

    def json_schema(self) -> dict[str, Any]:
        """The JSON format's schema with an element action's element given by number or by name."""
        schema = super().json_schema()
        element_kinds = {cls.kind for cls in ELEMENT_ACTION_TYPES}
        for v in schema["properties"]["action"]["oneOf"]:
            if v["properties"]["kind"]["const"] in element_kinds:
                v["properties"]["name"] = {"type": "string", "minLength": 1}
                v["required"] = [r for r in v["required"] if r != "element"]
                v["oneOf"] = [{"required": ["element"]}, {"required": ["name"]}]
        return schema

    def parse_on(self, text: str, observation: Observation) -> Action | ParseError:
        """:meth:`parse` on the turn's screen: an element action naming its element (``"name": "Files"``
        in place of ``"element"``) becomes the action on the mark so named (:func:`mark_named`); a name
        no element of the screen has is ``bad_arguments``. Everything else parses as :meth:`parse` does."""
        try:
            text = self._names_to_ids(text, observation)
        except _NoSuchName as e:
            return ParseError("bad_arguments", str(e), text)
        except Exception:  # malformed text: parse() says what is wrong with it
            pass
        return self.parse(text, observation.size)

    def _names_to_ids(self, text: str, observation: Observation) -> str:
        body = jsontext.strip_fences(text)
        found = []
        for s, e in jsontext.find_objects(body):
            try:
                obj = jsontext.loads(body[s:e])
            except ValueError:
                continue
            act = obj.get("action", obj) if isinstance(obj, dict) else None
            if isinstance(act, dict) and ("action" in obj or "kind" in obj):
                found.append((obj, act))
        if len(found) != 1:
            return text
        obj, act = found[0]
        row = self.table.lookup(act["kind"]) if isinstance(act.get("kind"), str) else None
        if row is None or "element" in act or not isinstance(act.get("name"), str) \
                or not set(row.kinds) & set(ELEMENT_ACTION_TYPES):
            return text
        mark = mark_named(observation.marks, act["name"], max_name_chars=self.max_name_chars)
        if mark is None:
            raise _NoSuchName(f"no element named {act['name'][:80]!r} on this screen; name one as the list "
                              "writes it, or give its number as \"element\"")
        act["element"] = mark.id
        del act["name"]
        return json.dumps(obj, ensure_ascii=False)

    def format_on(self, action: Action, observation: Observation, thought: str = "") -> str:
        """:meth:`format` on the turn's screen: with ``refer="name"`` an element action names its mark by
        the fewest leading words of its listed name that find it again (:func:`shortest_name`), and by
        its number where no name does (an earlier mark has the same name, or the mark has none)."""
        text = self.format(action, observation.size, thought)
        if self.refer != "name" or not isinstance(action, ELEMENT_ACTION_TYPES):
            return text
        mark = next((m for m in observation.marks or () if m.id == action.element), None)
        listed = None if mark is None else shortest_name(observation.marks, mark, max_name_chars=self.max_name_chars)
        if listed is None:
            return text
        obj = json.loads(text)
        args = {k: v for k, v in obj["action"].items() if k != "element"}
        obj["action"] = {"kind": args.pop("kind"), "name": listed, **args}
        return json.dumps(obj, ensure_ascii=False)

    def _foreign(self, obj: Any) -> bool:
        # AndroidWorld's JSON actions (M3A, T3A) in the elements-only format
        return not self.pixels and isinstance(obj, dict) and "action_type" in obj and "kind" not in obj

    def _translate(self, obj: dict[str, Any]) -> "dict[str, Any] | ParseError":
        return from_android_world(obj)

    def thought(self, text: str) -> str:
        got = super().thought(text)
        if got or not isinstance(text, str):
            return got
        # M3A's "Reason: ... Action: {...}" replies: the reason
        m = re.search(r"Reason\s*:\s*(.*?)(?:\bAction\s*:|\{|$)", text, re.DOTALL | re.IGNORECASE)
        return m.group(1).strip() if m else ""

    def adapt(self, action: Action, observation: Observation) -> Action:
        """``action`` as this format speaks it on ``observation``: a point action on a marked element
        becomes the element action (:func:`to_element_action`); with ``pixels`` everything stays as is.
        Used for SFT targets and the history of past steps recorded as points."""
        if self.pixels:
            return action
        out = to_element_action(action, observation.marks)
        if isinstance(out, Scroll) and out.x is not None:
            out = dataclasses.replace(out, x=None, y=None)  # this format scrolls the page, not a point
        return out


#: AndroidWorld's JSON actions (``android_world/env/json_action.py``, what its M3A and T3A agents
#: reply) that need no point: their ``{"kind": ...}`` form here
_M3A_PLAIN = {"navigate_home": {"kind": "home"}, "navigate_back": {"kind": "back"},
              "keyboard_enter": {"kind": "key", "key": "Enter"}, "wait": {"kind": "wait"}}
_M3A_ELEMENT = {"click": "click_element", "long_press": "long_press_element"}
_M3A_STATUS = {"complete": "success", "infeasible": "failure"}
_M3A_FINGER = {"up": "down", "down": "up", "left": "right", "right": "left"}


def from_android_world(act: dict[str, Any]) -> "dict[str, Any] | ParseError":
    """An AndroidWorld JSON action (``{"action_type": "click", "index": 7}``) as the marks format's
    ``{"kind": ...}`` object, or why it has none here. Elements are its ``index``; an action at
    a pixel point (``x``, ``y``) or ``double_tap`` has no element action here. ``input_text`` submits
    (AndroidWorld presses Enter after typing); ``scroll`` with an ``index`` scrolls the page (this
    format's scrolls have no point). ``scroll``'s
    ``direction`` is where the content comes from, as here; ``swipe``'s is the finger's, so
    ``swipe up`` is a scroll down. Keys besides the action's own are ignored, as its agents
    ignore them."""
    kind = act.get("action_type")
    if not isinstance(kind, str):
        return ParseError("bad_arguments", f"action_type must be a name, got {kind!r}")
    kind = kind.strip().lower()
    index = act.get("index")

    def element() -> Any:
        if index is None:
            if act.get("x") is not None or act.get("y") is not None:
                raise _Refused("bad_arguments", f"action_type={kind} at a pixel point: this format acts on the "
                                                "numbered elements; give \"index\"")
            raise _Refused("bad_arguments", f"action_type={kind} needs the element's \"index\"")
        return index

    try:
        if kind in _M3A_PLAIN:
            return dict(_M3A_PLAIN[kind])
        if kind in _M3A_ELEMENT:
            return {"kind": _M3A_ELEMENT[kind], "element": element()}
        if kind == "input_text":
            # AndroidWorld presses Enter after typing (actuation.py), and its M3A prompt says so
            if index is None and act.get("x") is None and act.get("y") is None:
                return {"kind": "type", "text": act.get("text"), "submit": True}
            return {"kind": "type_element", "element": element(), "text": act.get("text"), "submit": True}
        if kind in ("scroll", "swipe"):
            d = str(act.get("direction", "")).strip().lower()
            if d not in _M3A_FINGER:
                return ParseError("bad_arguments", f"{kind} direction must be up, down, left or right, got "
                                                   f"{act.get('direction')!r}")
            return {"kind": "scroll", "direction": d if kind == "scroll" else _M3A_FINGER[d]}
        if kind == "open_app":
            return {"kind": "open_app", "app": act.get("app_name")}
        if kind == "answer":
            return {"kind": "answer", "text": act.get("text")}
        if kind == "status":
            status = str(act.get("goal_status", "")).strip().lower()
            if status not in _M3A_STATUS:
                return ParseError("bad_arguments", f"goal_status must be 'complete' or 'infeasible', got "
                                                   f"{act.get('goal_status')!r}")
            return {"kind": "finish", "status": _M3A_STATUS[status]}
    except _Refused as e:
        return ParseError(e.code, e.message)
    why = {"double_tap": "there is no double-tap on an element here; use click"}.get(kind)
    return ParseError("unknown_action", f"action_type {kind!r} has no action here" + (f": {why}" if why else ""))


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class _NoSuchName(ValueError):
    """A reply names an element the screen does not list."""


# JSON actions on the screen's numbered elements (the prompt lists them each turn; the device needs marks on)
register_format("marks", MarksFormat)
