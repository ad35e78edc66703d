"""UI-TARS style actions: ``Thought: ...\\nAction: click(start_box='(x,y)')``.

The coordinate frame is a constructor parameter: UI-TARS-1 emits relative
0-1000 coordinates (``frame="relative1000"``), UI-TARS-1.5 absolute pixels of
the smart-resized image (``frame="smart_resize_pixels"``).

Decisions (see docs/grounding.md):

* ``finished(content='...')`` ends the episode. With the default
  ``finished_content="answer"`` non-empty content becomes :class:`Answer` (UI-TARS
  uses the same call to report answers) and ``finished()`` / empty content becomes
  ``Finish('success')``; with ``finished_content="message"`` it is always
  ``Finish('success', message=content)`` and :class:`Answer` is not expressible.
* ``call_user()`` (UI-TARS: "the task is unsolvable, or you need the user's
  help") becomes ``Finish('failure')``; ``Finish('failure')`` prints as ``call_user()``.
* Several actions in one message are rejected with ``multiple_actions``: running
  only the first would silently drop what the model asked for.
* A trailing newline in typed content (``\\n``) means "submit" (``Type.submit``),
  as the UI-TARS prompt teaches.
* Text content may hold unescaped quotes and real newlines: content runs to the
  last ``')`` before the next action line. Unknown arguments are rejected.
"""

from __future__ import annotations

import re
from typing import Literal, Mapping

from guiagent.types import (
    SCROLL_DIRECTIONS, Action, Answer, Click, DoubleClick, Drag, Finish, Hover, Key, LongPress, NavigateBack,
    NavigateHome, OpenApp, ParseError, RightClick, Scroll, Swipe, Type, Wait,
)

from grounding.base import ActionFormat, register_format
from grounding.coords import FrameKind, ModelFrame
from grounding.spec import (
    ActionSpec, ArgError, Ctx, Table, canonical_key, check_image_size, guarded_parse, model_key_parts,
)

__all__ = ["UITarsFormat"]

_ACTION_MARK = re.compile(r"(?:^|(?<=\s)|(?<=\*))\**\s*Action\s*\**\s*[:：]", re.IGNORECASE)
_SECTION = re.compile(
    r"(?:^|\n)\s*\**\s*(Thought|Reflection|Action_Summary|Action)\s*\**\s*[:：]", re.IGNORECASE
)
_CALL = re.compile(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]*)\s*[(（]")
_KWARG = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*")
_CLOSERS = re.compile(r"</bbox>|</point>|<\|box_end\|>|<\|point_end\|>|</box>")
# argument names seen in UI-TARS versions -> the names our table uses
_ARG_ALIASES = {"point": "start_box", "start_point": "start_box", "end_point": "end_box"}
# free-text arguments: their value runs to the last closing quote before ')'
_GREEDY = {"content", "app_name"}
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)
_UNESCAPES = {"n": "\n", "t": "\t", "'": "'", '"': '"', "\\": "\\"}


def _unescape(raw: str) -> str:
    return _UNESCAPE.sub(lambda m: _UNESCAPES.get(m.group(1), m.group(0)), raw)


def _quote(text: str) -> str:
    body = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t")
    return f"'{body}'"


def _scan_value(s: str, i: int, greedy: bool) -> tuple[str, bool, int]:
    """Read one argument value at ``s[i]``; return (value, was_quoted, index after it)."""
    q = s[i]
    if q in "'\"":
        if greedy:
            ends = [m.start() for m in re.finditer(re.escape(q) + r"\s*[)）]", s[i + 1:])]
            if ends:
                j = i + 1 + ends[-1]
                return _unescape(s[i + 1:j]), True, j + 1
            k = max(s.rfind(")"), s.rfind("）"))
            if k > i:  # closing quote missing but the call is closed: content runs to ')'
                return _unescape(s[i + 1:k].rstrip()), True, k
            raise ArgError("malformed", "unterminated string argument")
        j = i + 1
        while j < len(s):
            if s[j] == "\\":
                j += 2
                continue
            if s[j] == q:
                return _unescape(s[i + 1:j]), True, j + 1
            j += 1
        raise ArgError("malformed", "unterminated string argument")
    if q == "<":
        m = _CLOSERS.search(s, i)
        if m:
            return s[i:m.end()], False, m.end()
    depth, j = 0, i
    while j < len(s):
        c = s[j]
        if c in "([（":
            depth += 1
        elif c in ")]）":
            if depth == 0:
                break
            depth -= 1
        elif c in ",，" and depth == 0:
            break
        j += 1
    if depth:
        raise ArgError("malformed", "unbalanced brackets in arguments")
    return s[i:j].strip(), False, j


def _scan_call(s: str, i: int, params: tuple[str, ...]) -> tuple[dict[str, str], int]:
    """Arguments of a call whose '(' ends just before ``s[i]``; return (args, index after ')')."""
    args: dict[str, str] = {}
    n, pos = len(s), 0
    while True:
        while i < n and s[i].isspace():
            i += 1
        if i >= n:
            raise ArgError("malformed", "unterminated call: missing ')'")
        if s[i] in ")）":
            return args, i + 1
        m = _KWARG.match(s, i)
        if m:
            key = _ARG_ALIASES.get(m.group(1), m.group(1))
            i = m.end()
        else:
            key = params[pos] if pos < len(params) else f"#{pos}"
            pos += 1
        if i >= n:
            raise ArgError("malformed", "unterminated call: missing ')'")
        value, _quoted, i = _scan_value(s, i, key in _GREEDY)
        if key in args:
            raise ArgError("bad_arguments", f"argument {key!r} given twice")
        args[key] = value
        while i < n and s[i].isspace():
            i += 1
        if i < n and s[i] in ",，":
            i += 1
        elif i < n and s[i] not in ")）":
            raise ArgError("malformed", f"unexpected {s[i]!r} after argument {key!r}")


class UITarsFormat(ActionFormat):
    """UI-TARS ``Thought:/Action:`` text with ``click(start_box='(x,y)')`` calls.

    Example::

        >>> fmt = UITarsFormat()
        >>> fmt.parse("Thought: open it\\nAction: click(start_box='(500,250)')", (1080, 2400))
        Click(x=0.5, y=0.25)
        >>> fmt.format(Click(0.5, 0.25), (1080, 2400), thought="open it")
        "Thought: open it\\nAction: click(start_box='(500,250)')"
    """

    def __init__(
        self,
        frame: FrameKind = "relative1000",
        *,
        factor: int = 28,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        finished_content: Literal["answer", "message"] = "answer",
        box_tokens: bool = False,
        language: str = "English",
    ) -> None:
        if finished_content not in ("answer", "message"):
            raise ValueError(f"finished_content must be 'answer' or 'message', got {finished_content!r}")
        self.frame = ModelFrame(frame, factor, min_pixels, max_pixels)
        self.name = "uitars" if frame == "relative1000" else "uitars15"
        self.finished_content = finished_content
        self.box_tokens = box_tokens
        self.language = language
        self.table = Table(self._rows())
        self.supported_kinds: frozenset[str] = self.table.supported_kinds
        #: fields this format cannot carry: format() drops them, parse() gives the defaults back
        self.dropped_fields: dict[str, tuple[str, ...]] = {"scroll": ("amount",), "wait": ("seconds",)}
        if finished_content == "answer":
            self.dropped_fields["finish"] = ("message",)

    # ------------------------------------------------------------------ the table

    def _pt(self, x: float, y: float, ctx: Ctx) -> str:
        mx, my = ctx.model(x, y)
        inner = f"({mx},{my})"
        return _quote(f"<|box_start|>{inner}<|box_end|>" if self.box_tokens else inner)

    def _rows(self) -> list[ActionSpec]:
        pt = self._pt
        answer_mode = self.finished_content == "answer"

        def need(args: Mapping[str, str], name: str, action: str) -> str:
            if name not in args:
                raise ArgError("bad_arguments", f"{action} needs {name}=...")
            return args[name]

        def text_arg(args: Mapping[str, str], name: str, action: str) -> str:
            value = need(args, name, action)
            if not value.strip():
                raise ArgError("bad_arguments", f"{action} needs a non-empty {name}")
            return value

        def dec_point(cls, name):
            return lambda a, c: cls(*c.point(need(a, "start_box", name), "start_box"))

        def enc_point(a, c):
            return {"start_box": pt(a.x, a.y, c)}

        def dec_long(a, c):
            x, y = c.point(need(a, "start_box", "long_press"), "start_box")
            t = a.get("time", "").strip()
            if not t:
                return LongPress(x, y)
            try:
                seconds = float(t)
            except ValueError:
                raise ArgError("bad_arguments", f"long_press time must be seconds, got {t!r}") from None
            if not 0 < seconds <= 60:
                raise ArgError("bad_arguments", f"long_press time must lie in (0, 60] seconds, got {t!r}")
            return LongPress(x, y, duration_ms=round(seconds * 1000))

        def enc_long(a, c):
            out = {"start_box": pt(a.x, a.y, c)}
            if a.duration_ms != LongPress.duration_ms:
                out["time"] = _quote(f"{a.duration_ms / 1000:g}")
            return out

        def dec_type(a, c):
            text = need(a, "content", "type")
            submit = text.endswith("\n")
            text = text[:-1] if submit else text
            if not text and not submit:
                raise ArgError("bad_arguments", "type needs non-empty content")
            return Type(text, submit=submit)

        def enc_type(a, c):
            if a.x is not None:
                raise ValueError(
                    "the UI-TARS format cannot type at a point; emit Click on the field, then Type without x, y"
                )
            return {"content": _quote(a.text + ("\n" if a.submit else ""))}

        def dec_scroll(a, c):
            point = c.point(a["start_box"], "start_box") if "start_box" in a else (None, None)
            if "direction" in a:
                d = a["direction"].strip().lower()
                if d not in SCROLL_DIRECTIONS:
                    raise ArgError("bad_arguments", f"scroll direction must be one of {SCROLL_DIRECTIONS}, got {d!r}")
                return Scroll(d, *point)
            if "end_box" in a and point[0] is not None:  # UI-TARS-1 mobile: scroll(start_box, end_box)
                return Swipe(*point, *c.point(a["end_box"], "end_box"))
            raise ArgError("bad_arguments", "scroll needs direction='down or up or right or left'")

        def enc_scroll(a, c):
            out = {"start_box": pt(a.x, a.y, c)} if a.x is not None else {}
            out["direction"] = _quote(a.direction)
            return out

        def dec_two(cls, name):
            def dec(a, c):
                x1, y1 = c.point(need(a, "start_box", name), "start_box")
                x2, y2 = c.point(need(a, "end_box", name), "end_box")
                return cls(x1, y1, x2, y2)
            return dec

        def enc_two(a, c):
            return {"start_box": pt(a.x1, a.y1, c), "end_box": pt(a.x2, a.y2, c)}

        def dec_key(a, c):
            raw = text_arg(a, "key", "hotkey").strip()
            parts = raw.split() if " " in raw else (raw.split("+") if len(raw) > 1 else [raw])
            return Key(canonical_key(parts))

        def dec_finished(a, c):
            content = a.get("content", "")
            if answer_mode:
                return Answer(content) if content.strip() else Finish("success")
            return Finish("success", message=content)

        def enc_finished(a, c):
            if isinstance(a, Answer):
                return {"content": _quote(a.text)}
            if a.status != "success":
                return None
            return {"content": _quote(a.message)} if (a.message and not answer_mode) else {}

        def enc_call_user(a, c):
            return {} if a.status == "failure" else None

        empty = lambda a, c: {}  # noqa: E731
        rows = [
            ActionSpec("click", (Click,), ("start_box",), "Tap or click the centre of an element.",
                       dec_point(Click, "click"), enc_point, aliases=("left_single",)),
            ActionSpec("left_double", (DoubleClick,), ("start_box",), "Double click (double tap) an element.",
                       dec_point(DoubleClick, "left_double"), enc_point, aliases=("double_click",)),
            ActionSpec("right_single", (RightClick,), ("start_box",), "Right click an element (mouse only).",
                       dec_point(RightClick, "right_single"), enc_point, aliases=("right_click",)),
            ActionSpec("hover", (Hover,), ("start_box",), "Move the mouse over an element without clicking.",
                       dec_point(Hover, "hover"), enc_point, aliases=("mouse_move", "move_to")),
            ActionSpec("long_press", (LongPress,), ("start_box", "time?"), "Press and hold an element.",
                       dec_long, enc_long),
            ActionSpec("type", (Type,), ("content",),
                       "Type into the focused field. To submit, end content with \\n.", dec_type, enc_type),
            ActionSpec("scroll", (Scroll,), ("start_box?", "direction", "end_box?"),
                       "Show more content on the `direction` side of the element.", dec_scroll, enc_scroll),
            ActionSpec("swipe", (Swipe,), ("start_box", "end_box"), "Swipe a finger from start to end.",
                       dec_two(Swipe, "swipe"), enc_two),
            ActionSpec("drag", (Drag,), ("start_box", "end_box"), "Press at start, move to end, release.",
                       dec_two(Drag, "drag"), enc_two, aliases=("select",)),
            ActionSpec("hotkey", (Key,), ("key",),
                       "Press a key or chord, lower case, keys split by spaces, e.g. 'ctrl c', 'enter'.",
                       dec_key, lambda a, c: {"key": _quote(" ".join(model_key_parts(a.key)))},
                       aliases=("press",)),
            ActionSpec("press_home", (NavigateHome,), (), "Go to the home screen.",
                       lambda a, c: NavigateHome(), empty),
            ActionSpec("press_back", (NavigateBack,), (), "Go back to the previous screen.",
                       lambda a, c: NavigateBack(), empty),
            ActionSpec("open_app", (OpenApp,), ("app_name",), "Open an app by its name.",
                       lambda a, c: OpenApp(text_arg(a, "app_name", "open_app").strip()),
                       lambda a, c: {"app_name": _quote(a.app)}),
            ActionSpec("wait", (Wait,), (), "Wait a moment, then look at the screen again.",
                       lambda a, c: Wait(), empty),
            ActionSpec("finished", (Answer, Finish) if answer_mode else (Finish,), ("content?",),
                       "The task is done; put the answer in content if the task asks for one."
                       if answer_mode else "The task is done; summarise in content.",
                       dec_finished, enc_finished),
            ActionSpec("call_user", (Finish,), (),
                       "Give up: the task is impossible or needs the user's help.",
                       lambda a, c: Finish("failure"), enc_call_user),
        ]
        sig = {
            "start_box": "'{p1}'", "end_box": "'{p2}'", "content": "''", "key": "''",
            "app_name": "''", "direction": "'down or up or right or left'",
        }
        p1, p2 = ("<|box_start|>(x1,y1)<|box_end|>", "<|box_start|>(x2,y2)<|box_end|>") \
            if self.box_tokens else ("(x1,y1)", "(x2,y2)")
        out = []
        for r in rows:
            # optional arguments kept out of the prompt: accepted from older UI-TARS versions only
            shown = [p for p in r.params if p not in ("time?", "end_box?")]
            args = ", ".join(f"{p.rstrip('?')}={sig[p.rstrip('?')].format(p1=p1, p2=p2)}" for p in shown)
            out.append(ActionSpec(r.name, r.kinds, r.params, r.doc, r.decode, r.encode,
                                  signature=f"{r.name}({args})", aliases=r.aliases))
        return out

    # ------------------------------------------------------------------ interface

    def system_prompt(self, image_size: tuple[int, int] | None = None) -> str:
        """The UI-TARS mobile prompt; the action space is generated from the table."""
        space = "\n".join(f"{r.signature}  # {r.doc}" for r in self.table.rows)
        frame = ("Coordinates are relative, 0-1000 of the screenshot's width and height."
                 if self.frame.kind == "relative1000" else
                 "Coordinates are pixels of the screenshot as you see it.")
        return (
            "You are a GUI agent. You are given a task and your action history, with screenshots. "
            "You need to perform the next action to complete the task.\n\n"
            "## Output Format\n```\nThought: ...\nAction: ...\n```\n\n"
            f"## Action Space\n{space}\n\n"
            f"## Note\n- Use {self.language} in `Thought` part.\n"
            "- Write a small plan and finally summarize your next action (with its target element) "
            "in one sentence in `Thought` part.\n"
            "- Output exactly one action.\n"
            f"- {frame}\n"
        )

    def thought(self, text: str) -> str:
        if not isinstance(text, str):
            return ""
        sections: dict[str, str] = {}
        marks = list(_SECTION.finditer(text))
        for k, m in enumerate(marks):
            end = marks[k + 1].start() if k + 1 < len(marks) else len(text)
            sections.setdefault(m.group(1).lower(), text[m.end():end].strip())
        if "thought" in sections:
            return sections["thought"]
        parts = [sections[k] for k in ("reflection", "action_summary") if sections.get(k)]
        if parts:
            return "\n".join(parts)
        m = _ACTION_MARK.search(text)
        return text[:m.start()].strip() if m else ""

    def format(self, action: Action, image_size: tuple[int, int], thought: str = "") -> str:
        ctx = Ctx(self.frame, check_image_size(image_size))
        row, args = self.table.encode(action, ctx, "UI-TARS")
        call = f"{row.name}({', '.join(f'{k}={v}' for k, v in args.items())})"
        return f"Thought: {thought.strip()}\nAction: {call}" if thought.strip() else f"Action: {call}"

    def parse(self, text: str, image_size: tuple[int, int]) -> Action | ParseError:
        return guarded_parse(self._parse, text, image_size)

    def _parse(self, text: str, image_size: tuple[int, int]) -> Action | ParseError:
        ctx = Ctx(self.frame, image_size)
        mark = _ACTION_MARK.search(text)
        body = text[mark.end():] if mark else text
        calls = list(_CALL.finditer(body))
        known = [m for m in calls if self.table.lookup(m.group(1))]
        if not known:
            if calls:
                name = calls[0].group(1)
                return ParseError("unknown_action", f"unknown action {name!r}; expected one of "
                                  f"{list(self.table.names)}", text)
            return ParseError("no_action", "no action call like click(start_box='(x,y)') found", text)
        first = known[0]
        row = self.table.lookup(first.group(1))
        assert row is not None
        # the call's own span ends where the next action line starts, so free text may hold ')
        span_end = len(body)
        for m in known[1:]:
            line_start = body.rfind("\n", 0, m.start()) + 1
            prefix = body[line_start:m.start()]
            if not prefix.strip() or _ACTION_MARK.fullmatch(prefix.strip()) or prefix.strip().lower().startswith("action"):
                span_end = m.start()
                break
        span = body[:span_end]
        args, end = _scan_call(span, first.end(), row.param_names)
        rest = body[end:]
        if any(self.table.lookup(m.group(1)) for m in _CALL.finditer(rest)) or _ACTION_MARK.search(rest):
            return ParseError("multiple_actions", "one action per message, found several", text)
        unknown = set(args) - set(row.param_names)
        if unknown:
            return ParseError("bad_arguments", f"{row.name} takes {list(row.param_names) or 'no arguments'}, "
                              f"got unexpected {sorted(unknown)}", text)
        return row.decode(args, ctx)


# UI-TARS-1: relative 0-1000 coordinates; UI-TARS-1.5: pixels of the smart-resized image
register_format("uitars", UITarsFormat, "relative1000")
register_format("uitars15", UITarsFormat, "smart_resize_pixels")
