"""UI-TARS-2 (Seed GUI) XML function calls.

The model writes its reasoning in a ``<think...>`` tag and one function call in
``<seed:tool_call>``::

    <think>The browser icon is on the desktop; open it.</think>
    <seed:tool_call>
    <function=left_double>
    <parameter=point><point>18 58</point></parameter>
    </function>
    </seed:tool_call>

Points are relative 0-1000 of the screenshot (``<point>x y</point>``; bare
``x y`` and ``(x,y)`` are accepted too). Names follow UI-TARS-desktop's Seed GUI
action space: ``click``, ``left_double``, ``right_single``, ``hover``,
``long_press``, ``drag`` / ``swipe`` (``start_point``, ``end_point``),
``scroll`` (``point?``, ``direction``), ``type`` (``content``, ``point?``),
``hotkey`` (``key``), ``press_home``, ``press_back``, ``open_app``
(``app_name``), ``wait``, ``finished`` (``content?``, ``status?``),
``call_user`` (``content?``). An ``<answer>...</answer>`` reply is an :class:`Answer`.

Decisions:

* ``finished`` with content is an :class:`Answer` (UI-TARS reports answers
  there); with ``status`` ``失败``/``fail``/``failure`` it is ``Finish('failure')``.
  ``call_user`` is ``Finish('failure', message=content)``: in an environment no
  user is there to help.
* ``type`` at a ``point`` is :class:`Type` with ``x, y`` (tap the field, then type);
  a trailing newline in ``content`` (real or ``\\n``) means submit.
* Tolerated, as seen in real replies and in the parsers of UI-TARS-desktop and the
  Seed agents of OSWorld/MobileWorld: ``<tool_call>`` instead of
  ``<seed:tool_call>``, a missing closing ``</seed:tool_call>``, ``</function>`` or
  ``</parameter>``, the attribute form ``<function name='scroll'>`` /
  ``<parameter name='point'>``, any ``<think...>`` tag name (``<thinkt>``,
  ``<think_never_used_...>``). Several functions in one call are ``multiple_actions``.
"""

from __future__ import annotations

import re
from typing import Mapping

from guiagent.types import (
    SCROLL_DIRECTIONS, Action, Answer, Click, DoubleClick, Drag, Finish, Hover, Key, LongPress, NavigateBack,
    NavigateHome, OpenApp, ParseError, RightClick, Scroll, Swipe, Type, Wait,
)

from grounding.base import ActionFormat, register_format
from grounding.coords import ModelFrame
from grounding.spec import (
    ActionSpec, ArgError, Ctx, Table, canonical_key, check_image_size, guarded_parse, model_key_parts,
)

__all__ = ["SeedXmlFormat"]

_CALL_OPEN = re.compile(r"<(?:seed:)?tool_call\s*>", re.IGNORECASE)
_CALL_CLOSE = re.compile(r"</(?:seed:)?tool_call\s*>", re.IGNORECASE)
_FUNC = re.compile(r"<function(?:=\s*([A-Za-z_][\w.-]*)|\s+name\s*=\s*['\"]([^'\"]*)['\"])\s*>")
_FUNC_END = re.compile(r"</function\s*>")
_PARAM = re.compile(r"<parameter(?:=\s*([A-Za-z_]\w*)|\s+name\s*=\s*['\"]([^'\"]*)['\"])\s*>")
_PARAM_END = re.compile(r"</parameter\s*>")
_THINK = re.compile(r"<(think[\w-]*)>(.*?)</\1\s*>", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_FAIL = {"失败", "fail", "failed", "failure"}
_UNESCAPE = re.compile(r"\\([nt'\"\\])")


def _unescape(text: str) -> str:
    return _UNESCAPE.sub(lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


def _params(body: str) -> dict[str, str]:
    """``<parameter=name>value</parameter>`` pairs of one function body; a missing close
    tag ends the value at the next parameter (as the Seed agents' parsers do). Text
    outside the parameters must be blank."""
    out: dict[str, str] = {}
    opens = list(_PARAM.finditer(body))
    stray, pos = [], 0
    for k, m in enumerate(opens):
        stray.append(body[pos:m.start()])
        name = m.group(1) or m.group(2) or ""
        limit = opens[k + 1].start() if k + 1 < len(opens) else len(body)
        close = _PARAM_END.search(body, m.end(), limit)
        value = body[m.end():close.start() if close else limit]
        pos = close.end() if close else limit
        if name in out:
            raise ArgError("bad_arguments", f"parameter {name!r} given twice")
        out[name] = value
    stray.append(body[pos:])
    junk = "".join(stray).strip()
    if junk:
        raise ArgError("bad_arguments", f"unexpected text in the function call: {junk[:60]!r}")
    return out


class SeedXmlFormat(ActionFormat):
    """UI-TARS-2's ``<seed:tool_call><function=...><parameter=...>`` replies, relative 0-1000 points.

    Example::

        >>> fmt = SeedXmlFormat()
        >>> fmt.parse("<seed:tool_call>\\n<function=click>\\n<parameter=point><point>500 250</point>"
        ...           "</parameter>\\n</function>\\n</seed:tool_call>", (1080, 2400))
        Click(x=0.5, y=0.25)
    """

    name = "uitars2"

    def __init__(self) -> None:
        self.frame = ModelFrame("relative1000")
        self.table = Table(self._rows())
        self.supported_kinds: frozenset[str] = self.table.supported_kinds
        #: fields this format cannot carry: format() drops them, parse() gives the defaults back
        self.dropped_fields: dict[str, tuple[str, ...]] = {
            "scroll": ("amount",), "wait": ("seconds",), "long_press": ("duration_ms",),
            "swipe": ("duration_ms",), "finish": ("message",),
        }

    # ------------------------------------------------------------------ the table

    @staticmethod
    def _rows() -> list[ActionSpec]:
        def need(a: Mapping[str, str], name: str, action: str) -> str:
            if name not in a or not a[name].strip():
                raise ArgError("bad_arguments", f"{action} needs <parameter={name}>")
            return a[name]

        def pt(c: Ctx, x: float, y: float) -> str:
            mx, my = c.model(x, y)
            return f"<point>{mx} {my}</point>"

        def dec_point(cls, name):
            return lambda a, c: cls(*c.point(need(a, "point", name), "point"))

        def enc_point(a, c):
            return {"point": pt(c, a.x, a.y)}

        def dec_two(cls, name):
            def dec(a, c):
                return cls(*c.point(need(a, "start_point", name), "start_point"),
                           *c.point(need(a, "end_point", name), "end_point"))
            return dec

        def enc_two(a, c):
            return {"start_point": pt(c, a.x1, a.y1), "end_point": pt(c, a.x2, a.y2)}

        def dec_scroll(a, c):
            d = need(a, "direction", "scroll").strip().lower()
            if d not in SCROLL_DIRECTIONS:
                raise ArgError("bad_arguments",
                               f"scroll direction must be one of {SCROLL_DIRECTIONS}, got {d!r}")
            point = c.point(a["point"], "point") if a.get("point", "").strip() else (None, None)
            return Scroll(d, *point)

        def enc_scroll(a, c):
            out = {"direction": a.direction}
            if a.x is not None:
                out["point"] = pt(c, a.x, a.y)
            return out

        def dec_type(a, c):
            if "content" not in a:
                raise ArgError("bad_arguments", "type needs <parameter=content>")
            text = _unescape(a["content"])
            submit = text.endswith("\n")
            text = text[:-1] if submit else text
            if not text and not submit:
                raise ArgError("bad_arguments", "type needs non-empty content")
            point = c.point(a["point"], "point") if a.get("point", "").strip() else (None, None)
            return Type(text, *point, submit=submit)

        def enc_type(a, c):
            out = {"content": a.text.replace("\\", "\\\\").replace("\n", "\\n") + ("\\n" if a.submit else "")}
            if a.x is not None:
                out["point"] = pt(c, a.x, a.y)
            return out

        def dec_key(a, c):
            raw = need(a, "key", "hotkey").strip()
            parts = raw.split() if " " in raw else (raw.split("+") if len(raw) > 1 else [raw])
            return Key(canonical_key(parts))

        def dec_finished(a, c):
            content = _unescape(a.get("content", "")).strip()
            if a.get("status", "").strip().lower() in _FAIL:
                return Finish("failure", message=content)
            return Answer(content) if content else Finish("success")

        def enc_finished(a, c):
            if isinstance(a, Answer):
                return {"content": a.text}
            return {} if a.status == "success" else None

        def empty(a, c):
            return {}

        def row(sig: str, kinds: tuple, params: tuple, doc: str, dec, enc, aliases: tuple = ()) -> ActionSpec:
            return ActionSpec(sig.split("(")[0], kinds, params, doc, dec, enc, signature=sig, aliases=aliases)

        return [
            row("click(point)", (Click,), ("point",), "Click or tap the centre of an element.",
                dec_point(Click, "click"), enc_point, ("left_single",)),
            row("left_double(point)", (DoubleClick,), ("point",), "Double click an element.",
                dec_point(DoubleClick, "left_double"), enc_point, ("double_click",)),
            row("right_single(point)", (RightClick,), ("point",), "Right click an element (mouse only).",
                dec_point(RightClick, "right_single"), enc_point, ("right_click",)),
            row("hover(point)", (Hover,), ("point",), "Move the mouse over an element without clicking.",
                dec_point(Hover, "hover"), enc_point, ("mouse_move", "move_to")),
            row("long_press(point)", (LongPress,), ("point",), "Press and hold an element.",
                dec_point(LongPress, "long_press"), enc_point),
            row("drag(start_point, end_point)", (Drag,), ("start_point", "end_point"),
                "Press at the start point, move to the end point, release.", dec_two(Drag, "drag"), enc_two),
            row("swipe(start_point, end_point)", (Swipe,), ("start_point", "end_point"),
                "Swipe a finger from the start point to the end point.", dec_two(Swipe, "swipe"), enc_two),
            row("scroll(point, direction)", (Scroll,), ("point?", "direction"),
                "Show more content on the `direction` side (up, down, left, right).", dec_scroll, enc_scroll),
            row("type(content, point)", (Type,), ("content", "point?"),
                "Type content (into the field at point, if given). End content with \\n to submit.",
                dec_type, enc_type),
            row("hotkey(key)", (Key,), ("key",),
                "Press a key or chord, lower case, keys split by spaces, e.g. 'ctrl c'.",
                dec_key, lambda a, c: {"key": " ".join(model_key_parts(a.key))}),
            row("press_home()", (NavigateHome,), (), "Go to the home screen.",
                lambda a, c: NavigateHome(), empty),
            row("press_back()", (NavigateBack,), (), "Go back to the previous screen.",
                lambda a, c: NavigateBack(), empty),
            row("open_app(app_name)", (OpenApp,), ("app_name",), "Open an app by its name.",
                lambda a, c: OpenApp(need(a, "app_name", "open_app").strip()),
                lambda a, c: {"app_name": a.app}),
            row("wait()", (Wait,), (), "Wait a moment, then look at the screen again.",
                lambda a, c: Wait(), empty),
            row("finished(content)", (Answer, Finish), ("content?", "status?"),
                "The task is done; put the answer in content if the task asks for one.",
                dec_finished, enc_finished),
            row("call_user()", (Finish,), ("content?",),
                "Give up: the task is impossible or needs the user's help.",
                lambda a, c: Finish("failure", message=_unescape(a.get("content", "")).strip()),
                lambda a, c: {} if a.status == "failure" else None),
        ]

    # ------------------------------------------------------------------ interface

    def system_prompt(self, image_size: tuple[int, int] | None = None) -> str:
        """The Seed GUI prompt: output format and the action space, generated from the table."""
        space = "\n".join(f"{r.signature}  # {r.doc}" for r in self.table.rows)
        return (
            "You are a GUI agent. You are given a task and your action history, with screenshots. "
            "You need to perform the next action to complete the task.\n\n"
            "## Output Format\nThink inside <think></think>, then call exactly one function:\n"
            "<think>...</think>\n<seed:tool_call>\n<function=click>\n"
            "<parameter=point><point>x y</point></parameter>\n</function>\n</seed:tool_call>\n\n"
            f"## Action Space\n{space}\n\n"
            "## Note\n- Points are <point>x y</point>, relative 0-1000 of the screenshot's width and "
            "height.\n"
            "- Output exactly one function call.\n"
        )

    def thought(self, text: str) -> str:
        if not isinstance(text, str):
            return ""
        m = _THINK.search(text)
        if m:
            return m.group(2).strip()
        i = _CALL_OPEN.search(text)
        return text[:i.start()].strip() if i else ""

    def format(self, action: Action, image_size: tuple[int, int], thought: str = "") -> str:
        ctx = Ctx(self.frame, check_image_size(image_size))
        row, args = self.table.encode(action, ctx, "UI-TARS-2")
        params = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in args.items())
        call = f"<seed:tool_call>\n<function={row.name}>\n{params}</function>\n</seed:tool_call>"
        return f"<think>{thought.strip()}</think>\n{call}" if thought.strip() else call

    def parse(self, text: str, image_size: tuple[int, int]) -> Action | ParseError:
        return guarded_parse(self._parse, text, image_size)

    def _parse(self, text: str, image_size: tuple[int, int]) -> Action | ParseError:
        body = _THINK.sub(" ", text)  # points inside the reasoning are not calls
        opens = list(_CALL_OPEN.finditer(body))
        if len(opens) > 1:
            return ParseError("multiple_actions", f"one tool call per message, found {len(opens)}", text)
        if opens:
            close = _CALL_CLOSE.search(body, opens[0].end())
            body = body[opens[0].end():close.start() if close else len(body)]
        funcs = list(_FUNC.finditer(body))
        if not funcs:
            answer = _ANSWER.search(body)
            if answer:
                content = answer.group(1).strip()
                return Answer(content) if content else ParseError("bad_arguments", "empty <answer>", text)
            if opens:
                return ParseError("malformed", "<seed:tool_call> holds no <function=...>", text)
            return ParseError("no_action", "no function call like <seed:tool_call><function=click><parameter="
                              "point><point>x y</point></parameter></function></seed:tool_call>", text)
        if len(funcs) > 1:
            return ParseError("multiple_actions", f"one function per message, found {len(funcs)}", text)
        f = funcs[0]
        name = (f.group(1) or f.group(2) or "").strip()
        end = _FUNC_END.search(body, f.end())
        closed = end is not None or _CALL_CLOSE.search(text) is not None or _PARAM_END.search(body, f.end())
        if opens and not closed and _PARAM.search(body, f.end()):  # cut off inside its first parameter
            return ParseError("malformed", "truncated function call: no </parameter> or </function>", text)
        args = _params(body[f.end():end.start() if end else len(body)])
        row = self.table.lookup(name)
        if row is None:
            return ParseError("unknown_action", f"unknown function {name!r}; expected one of "
                              f"{list(self.table.names)}", text)
        unknown = set(args) - set(row.param_names)
        if unknown:
            takes = list(row.param_names) or "no parameters"
            return ParseError("bad_arguments", f"{row.name} takes {takes}, got unexpected {sorted(unknown)}",
                              text)
        return row.decode(args, Ctx(self.frame, image_size))


# UI-TARS-2's Seed XML function calls, relative 0-1000
register_format("uitars2", SeedXmlFormat)
