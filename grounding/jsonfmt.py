"""A plain JSON format: ``{"thought": "...", "action": {"kind": "click", "x": 0.5, "y": 0.2}}``.

The action object is exactly :func:`guiagent.types.action_to_dict`, so
coordinates are **normalised [0, 1]** of the screenshot (the frame actions use
everywhere else; no conversion can go wrong). :meth:`JsonFormat.format` rounds
them to ``decimals`` places (3 by default, i.e. 0-1000 resolution). The table
is generated from the action dataclasses themselves; the prompt, the parser's
whitelist and :meth:`JsonFormat.json_schema` all come from it.

Accepted: the wrapper object or a bare action object; code fences, prose
around it, comments, trailing commas and single quotes (see
:mod:`guiagent.jsontext`). ``"action"`` holding a list, or several action
objects in one message, is ``multiple_actions``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from typing import Any, Mapping

from guiagent import jsontext
from guiagent.types import ACTION_TYPES, ELEMENT_ACTION_TYPES, Action, ParseError, SCROLL_DIRECTIONS

from grounding.base import ActionFormat, register_format
from grounding.coords import ModelFrame
from grounding.spec import ActionSpec, ArgError, Ctx, Table, check_image_size, guarded_parse

__all__ = ["JsonFormat"]


def _field_type(cls: type, f: dataclasses.Field) -> str:
    """JSON type name of a dataclass field (from its annotation)."""
    hint = typing.get_type_hints(cls)[f.name]
    args = set(typing.get_args(hint)) - {type(None)}
    base = next(iter(args)) if args else hint
    if typing.get_origin(hint) is typing.Literal or typing.get_origin(base) is typing.Literal:
        return "string"
    return {float: "number", int: "integer", str: "string", bool: "boolean"}.get(base, "string")


def _row(cls: type, decimals: int, *, skip: tuple[str, ...] = (), aliases: tuple[str, ...] = (),
         doc: str | None = None) -> ActionSpec:
    """The row of action class ``cls``: its wire name is its kind, its arguments its fields (less ``skip``:
    fields the format leaves at their defaults, e.g. the point of a Type in a format without points)."""
    fields = tuple(f for f in dataclasses.fields(cls) if f.name not in skip)
    params = tuple(f.name + ("?" if f.default is not dataclasses.MISSING else "") for f in fields)
    types = {f.name: _field_type(cls, f) for f in fields}
    doc = doc or (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ").replace("``", "`")

    def decode(a: Mapping[str, Any], ctx: Ctx) -> Action:
        kw = {}
        for name, value in a.items():
            t = types[name]
            ok = {
                "number": isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value),
                "integer": isinstance(value, int) and not isinstance(value, bool)
                or (isinstance(value, float) and value.is_integer()),
                "string": isinstance(value, str),
                "boolean": isinstance(value, bool),
            }[t]
            if value is None and name in cls.coord_fields:
                ok = True
            if not ok:
                raise ArgError("bad_arguments", f"{cls.kind}.{name} must be a {t}, got {value!r}")
            kw[name] = int(value) if t == "integer" else value
        for name in cls.coord_fields:
            v = kw.get(name)
            if v is not None and not 0.0 <= v <= 1.0:
                raise ArgError("bad_coordinates", f"{cls.kind}.{name}={v!r} is outside the screenshot; "
                                                  "coordinates are normalised to [0, 1]")
        missing = [p for p in params if not p.endswith("?") and p not in kw]
        if missing:
            raise ArgError("bad_arguments", f"{cls.kind} needs {missing}")
        try:
            return cls(**kw)
        except (TypeError, ValueError) as e:
            raise ArgError("bad_arguments", f"{cls.kind}: {e}") from None

    def encode(action: Action, ctx: Ctx) -> dict[str, Any]:
        out = {}
        for f in fields:
            v = getattr(action, f.name)
            if f.name in cls.coord_fields and v is not None:
                v = round(float(v), decimals)
            if f.default is not dataclasses.MISSING and v == f.default and f.name not in cls.coord_fields:
                continue  # keep SFT targets short: defaults are implied
            if v is None:
                continue
            out[f.name] = v
        return out

    return ActionSpec(cls.kind, (cls,), params, doc, decode, encode, aliases=aliases)


class JsonFormat(ActionFormat):
    """JSON actions in normalised coordinates, one object per message.

    Example::

        >>> from guiagent.types import Click
        >>> fmt = JsonFormat()
        >>> fmt.parse('{"thought": "go", "action": {"kind": "click", "x": 0.5, "y": 0.2}}', (400, 800))
        Click(x=0.5, y=0.2)
        >>> fmt.format(Click(0.5, 0.2), (400, 800))
        '{"action": {"kind": "click", "x": 0.5, "y": 0.2}}'
    """

    name = "json"

    def __init__(self, *, decimals: int = 3, elements: bool = False) -> None:
        if not 1 <= decimals <= 6:
            raise ValueError(f"decimals must lie in 1..6, got {decimals}")
        self.decimals = decimals
        self.frame = None  # actions already are the frame: normalised [0, 1]
        # element actions name the screen's marks: only with elements=True (the "marks" format speaks them)
        self.table = Table(_row(cls, decimals) for cls in ACTION_TYPES
                           if elements or cls not in ELEMENT_ACTION_TYPES)
        self.supported_kinds: frozenset[str] = self.table.supported_kinds
        self.dropped_fields: dict[str, tuple[str, ...]] = {}  # every field round-trips

    def json_schema(self) -> dict[str, Any]:
        """JSON schema of a reply (usable for constrained decoding), generated from the table."""
        variants = []
        for row in self.table.rows:
            cls = row.kinds[0]
            props: dict[str, Any] = {"kind": {"const": row.name}}
            for f in dataclasses.fields(cls):
                if f.name not in row.param_names:
                    continue
                t = _field_type(cls, f)
                p: dict[str, Any] = {"type": t}
                if f.name in cls.coord_fields:
                    p = {"type": "number", "minimum": 0, "maximum": 1}
                if f.name == "direction":
                    p["enum"] = list(SCROLL_DIRECTIONS)
                if f.name == "status":
                    p["enum"] = ["success", "failure"]
                if f.name == "element":
                    p["minimum"] = 0
                props[f.name] = p
            variants.append({"type": "object", "description": row.doc, "properties": props,
                             "required": ["kind", *row.required], "additionalProperties": False})
        return {"type": "object", "properties": {"thought": {"type": "string"}, "action": {"oneOf": variants}},
                "required": ["action"]}

    def system_prompt(self, image_size: tuple[int, int] | None = None) -> str:
        lines = []
        for row in self.table.rows:
            args = ", ".join(f'"{p.rstrip("?")}": {"..." if not p.endswith("?") else "(optional)"}'
                             for p in row.params)
            lines.append(f'- {{"kind": "{row.name}"{", " + args if args else ""}}}  {row.doc}')
        return (
            "You control a device through its screen. Reply with one JSON object and nothing else:\n"
            '{"thought": "<your reasoning>", "action": {"kind": ..., ...}}\n\n'
            "Coordinates x, y are fractions of the screenshot: 0 is the left/top edge, 1 the right/bottom "
            f"edge (up to {self.decimals} decimals).\n\n## Actions\n" + "\n".join(lines) + "\n"
        )

    def thought(self, text: str) -> str:
        if not isinstance(text, str):
            return ""
        body = jsontext.strip_fences(text)
        for s, e in jsontext.find_objects(body):
            try:
                obj = jsontext.loads(body[s:e])
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("thought"), str):
                return obj["thought"].strip()
        return ""

    def format(self, action: Action, image_size: tuple[int, int], thought: str = "") -> str:
        ctx = Ctx(ModelFrame("pixels"), check_image_size(image_size))
        row, args = self.table.encode(action, ctx, "JSON")
        out: dict[str, Any] = {"thought": thought.strip()} if thought.strip() else {}
        out["action"] = {"kind": row.name, **args}
        return json.dumps(out, ensure_ascii=False)

    def parse(self, text: str, image_size: tuple[int, int]) -> Action | ParseError:
        return guarded_parse(self._parse, text, image_size)

    def _foreign(self, obj: Any) -> bool:
        """Whether ``obj`` is an action in another JSON dialect this format also reads (none here)."""
        return False

    def _translate(self, obj: dict[str, Any]) -> "dict[str, Any] | ParseError":
        """A :meth:`_foreign` action as this format's ``{"kind": ...}`` object."""
        return obj

    def _parse(self, text: str, image_size: tuple[int, int]) -> Action | ParseError:
        body = jsontext.strip_fences(text)
        spans = jsontext.find_objects(body)
        if not spans:
            return ParseError("no_action", 'no JSON object found; reply {"action": {"kind": ...}}', text)
        objs: list[Any] = []
        for s, e in spans:
            try:
                objs.append(jsontext.loads(body[s:e]))
            except ValueError as err:
                objs.append(err)
        actions = [o for o in objs if isinstance(o, dict) and ("action" in o or "kind" in o or self._foreign(o))]
        if len(actions) > 1:
            return ParseError("multiple_actions", f"one action per message, found {len(actions)}", text)
        if not actions:
            err = next((o for o in objs if isinstance(o, ValueError)), None)
            if err is not None:
                return ParseError("malformed", f"reply is not valid JSON: {err}", text)
            return ParseError("no_action", 'the JSON holds no "action"', text)
        obj = actions[0]
        act = obj.get("action", obj) if "action" in obj else obj
        if self._foreign(act):
            act = self._translate(act)
            if isinstance(act, ParseError):
                return ParseError(act.code, act.message, text)
        if isinstance(act, list):
            return ParseError("multiple_actions", "\"action\" must be one object, got a list", text)
        if not isinstance(act, dict):
            return ParseError("bad_arguments", f"\"action\" must be an object, got {act!r}", text)
        kind = act.get("kind")
        if not isinstance(kind, str):
            return ParseError("bad_arguments", 'the action needs a "kind"', text)
        row = self.table.lookup(kind.strip())
        if row is None:
            return ParseError("unknown_action", f"unknown action kind {kind!r}; expected one of "
                              f"{list(self.table.names)}", text)
        args = {k: v for k, v in act.items() if k != "kind"}
        unknown = set(args) - set(row.param_names)
        if unknown:
            return ParseError("bad_arguments", f"{row.name} takes {list(row.param_names)}, "
                              f"got unexpected {sorted(unknown)}", text)
        return row.decode(args, Ctx(ModelFrame("pixels"), image_size))


# plain JSON actions, normalised coordinates
register_format("json", JsonFormat)
