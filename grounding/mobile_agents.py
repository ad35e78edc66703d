"""Two ``mobile_use`` dialects of open GUI models: GUI-Owl (Mobile-Agent-v3) and MAI-UI.

Both reply with reasoning in ``<thinking>`` tags and a Qwen-style tool call::

    <thinking>
    The search box is at the top; tap it.
    </thinking>
    <tool_call>
    {"name": "mobile_use", "arguments": {"action": "click", "coordinate": [540, 210]}}
    </tool_call>

and share the tolerant JSON parsing of :class:`~grounding.qwen.QwenToolCallFormat`
(missing ``</tool_call>``, bare JSON, prose, comments; two calls are ``multiple_actions``).
They differ in action sets and coordinate frames:

``guiowl`` (:class:`GuiOwlFormat`)
    GUI-Owl's ``mobile_use``: the Qwen2.5-VL mobile actions plus ``open``, in
    **pixels of the smart-resized image** (Mobile-Agent-v3 resizes with
    ``min_pixels=3136``, ``max_pixels=10035200``; pass the served processor's
    limits). Also accepted: ``tap`` for ``click`` and ``open_app`` for ``open``
    (Mobile-Agent-v3 maps both), a trailing ``<conclusion>`` (its action summary,
    ignored), and the Mobile-Agent-v3 framework's ``### Thought ### ... ### Action ###
    {"action": ...}`` / ``Action: {"action": ...}`` replies.

``guiowl15`` (:class:`GuiOwlFormat` with ``frame="relative1000"``)
    GUI-Owl 1.5 (Mobile-Agent-v3.5, on Qwen3-VL): the same calls (plus ``answer``) in
    **relative 0-1000** coordinates; its prompt states "The screen's resolution is
    1000x1000" and its agent divides by 1000. Its replies put a one-line ``Action:``
    description before the call, which becomes the thought.

``maiui`` (:class:`MaiUiFormat`)
    MAI-UI's ``mobile_use``, in **relative 0-999** coordinates (MAI-UI divides by
    999). Actions: ``click``, ``double_click``, ``long_press``, ``type``,
    ``swipe`` (``direction``, optional ``coordinate``), ``drag``
    (``start_coordinate``, ``end_coordinate``), ``open`` (``AWAKE``),
    ``system_button`` (``back``/``home``/``menu``/``enter``), ``wait``,
    ``terminate`` (``success``/``fail``), ``answer``, ``ask_user`` (``INFO``).
    Decisions: ``swipe`` names the finger's direction, so ``swipe up`` is
    ``Scroll('down')`` (content further down comes into view) and prints back the
    same way; ``ask_user`` ends the episode as ``Finish('failure', message=text)``
    because no user answers inside an environment (like UI-TARS ``call_user``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Literal

from guiagent.types import (
    SCROLL_DIRECTIONS, Action, Answer, Click, DoubleClick, Drag, Finish, Key, LongPress, NavigateBack,
    NavigateHome, OpenApp, Scroll, Type, Wait,
)

from grounding.base import register_format
from grounding.coords import ModelFrame
from grounding.qwen import (
    QwenToolCallFormat, _dec_terminate, _dec_type, _enc_type, _mobile_rows, _need, _text,
)
from grounding.spec import ActionSpec, ArgError, Table, check_image_size

__all__ = ["GuiOwlFormat", "MaiUiFormat"]

_THINKING = re.compile(r"<(think|thinking)>(.*?)</\1\s*>", re.DOTALL | re.IGNORECASE)
_SECTION = re.compile(r"#{2,}\s*(Thought|Action)\s*#{2,}", re.IGNORECASE)
_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


def _thinking(text: Any, fallback) -> str:
    """The ``<thinking>``/``<think>`` content, a ``### Thought ###`` section, or ``fallback(text)``."""
    if not isinstance(text, str):
        return ""
    m = _THINKING.search(text)
    if m:
        return m.group(2).strip()
    marks = list(_SECTION.finditer(text))
    for k, mark in enumerate(marks):
        if mark.group(1).lower() == "thought":
            end = marks[k + 1].start() if k + 1 < len(marks) else len(text)
            return text[mark.end():end].strip()
    if "</think>" in text:  # thinking models: the opening tag is in the prompt
        return text.split("</think>")[0].strip()
    return fallback(text)


def _with_thinking(call: str, thought: str) -> str:
    return f"<thinking>\n{thought.strip()}\n</thinking>\n{call}" if thought.strip() else call


class GuiOwlFormat(QwenToolCallFormat):
    """GUI-Owl / Mobile-Agent-v3 ``mobile_use`` calls in smart-resized pixels (GUI-Owl 1.5:
    ``frame="relative1000"``).

    Example::

        >>> fmt = GuiOwlFormat()
        >>> fmt.parse('<thinking>\\nopen it\\n</thinking>\\n<tool_call>\\n{"name": "mobile_use", '
        ...           '"arguments": {"action": "tap", "coordinate": [546, 1204]}}\\n</tool_call>',
        ...           (1080, 2400))
        Click(x=0.5, y=0.5)
    """

    #: Mobile-Agent-v3's resize limits (``image_to_base64`` in its GUI-Owl agent)
    MIN_PIXELS = 3136
    MAX_PIXELS = 10035200

    def __init__(self, *, frame: Literal["smart_resize_pixels", "relative1000"] = "smart_resize_pixels",
                 min_pixels: int | None = MIN_PIXELS, max_pixels: int | None = MAX_PIXELS,
                 factor: int = 28) -> None:
        super().__init__("mobile_use", frame=frame, min_pixels=min_pixels, max_pixels=max_pixels, factor=factor)
        self.name = "guiowl" if frame == "smart_resize_pixels" else "guiowl15"
        extra = {"click": ("tap",), "open": ("open_app",)}
        self.table = Table(dataclasses.replace(r, aliases=r.aliases + extra.get(r.name, ()))
                           for r in _mobile_rows())
        self.supported_kinds = self.table.supported_kinds

    def system_prompt(self, image_size: tuple[int, int] | None = None) -> str:
        return super().system_prompt(image_size) + (
            "\n\nBefore the tool call, explain your reasoning step by step in <thinking></thinking> "
            "tags; after it, summarise your action in <conclusion></conclusion> tags."
        )

    def thought(self, text: str) -> str:
        return _thinking(text, super().thought)

    def format(self, action: Action, image_size: tuple[int, int], thought: str = "") -> str:
        return _with_thinking(super().format(action, image_size), thought)

    def _parse(self, text: str, image_size: tuple[int, int]):
        # the framework's "### Action ###" header (and its "Action description") is not JSON noise
        return super()._parse(_SECTION.sub(" ", text), image_size)


def _mai_rows() -> list[ActionSpec]:
    def pt(a, c, name):
        return c.point(_need(a, name, a.get("action", "")), name)

    def enc_pt(a, c):
        return {"coordinate": list(c.model(a.x, a.y))}

    def dec_swipe(a, c):
        d = str(_need(a, "direction", "swipe")).strip().lower()
        if d not in SCROLL_DIRECTIONS:
            raise ArgError("bad_arguments", f"swipe direction must be one of {SCROLL_DIRECTIONS}, got {d!r}")
        point = c.point(a["coordinate"], "coordinate") if a.get("coordinate") is not None else (None, None)
        return Scroll(_OPPOSITE[d], *point)

    def enc_swipe(a, c):
        out: dict[str, Any] = {"direction": _OPPOSITE[a.direction]}
        if a.x is not None:
            out["coordinate"] = list(c.model(a.x, a.y))
        return out

    buttons = {"back": NavigateBack(), "home": NavigateHome(), "menu": Key("Menu"), "enter": Key("Enter")}

    def dec_button(a, c):
        b = str(_need(a, "button", "system_button")).strip().lower()
        if b not in buttons:
            raise ArgError("bad_arguments", f"button must be one of {list(buttons)}, got {b!r}")
        return buttons[b]

    def enc_button(a, c):
        for name, act in buttons.items():
            if act == a:
                return {"button": name}
        return None

    def dec_wait(a, c):
        t = a.get("time")
        if t is None:
            return Wait()
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 60:
            raise ArgError("bad_arguments", f"wait time must be seconds in [0, 60], got {t!r}")
        return Wait(float(t))

    def ask(a, c):
        return Finish("failure", message=_text(a, "text", "ask_user", allow_empty=True).strip())

    return [
        ActionSpec("click", (Click,), ("coordinate",), "Click the point (x, y).",
                   lambda a, c: Click(*pt(a, c, "coordinate")), enc_pt),
        ActionSpec("double_click", (DoubleClick,), ("coordinate",), "Double click the point (x, y).",
                   lambda a, c: DoubleClick(*pt(a, c, "coordinate")), enc_pt),
        ActionSpec("long_press", (LongPress,), ("coordinate",), "Press and hold the point (x, y).",
                   lambda a, c: LongPress(*pt(a, c, "coordinate")), enc_pt),
        ActionSpec("type", (Type,), ("text",), "Type into the activated input box; end with \\n to submit.",
                   _dec_type, _enc_type),
        ActionSpec("swipe", (Scroll,), ("direction", "coordinate?"),
                   "Swipe a finger up, down, left or right (at coordinate, if given); swiping up shows "
                   "what lies below.", dec_swipe, enc_swipe),
        ActionSpec("drag", (Drag,), ("start_coordinate", "end_coordinate"), "Drag from one point to another.",
                   lambda a, c: Drag(*pt(a, c, "start_coordinate"), *pt(a, c, "end_coordinate")),
                   lambda a, c: {"start_coordinate": list(c.model(a.x1, a.y1)),
                                 "end_coordinate": list(c.model(a.x2, a.y2))}),
        ActionSpec("open", (OpenApp,), ("text",), "Open an app by its name.",
                   lambda a, c: OpenApp(_text(a, "text", "open").strip()), lambda a, c: {"text": a.app},
                   aliases=("awake",)),
        ActionSpec("system_button", (NavigateBack, NavigateHome, Key), ("button",),
                   "Press a system button: back, home, menu or enter.", dec_button, enc_button),
        ActionSpec("wait", (Wait,), ("time?",), "Wait for the screen to change.", dec_wait,
                   lambda a, c: {}),
        ActionSpec("terminate", (Finish,), ("status",), "End the task: status success or fail.",
                   _dec_terminate, lambda a, c: {"status": "success" if a.status == "success" else "fail"}),
        ActionSpec("answer", (Answer,), ("text",), "Give the answer to the user's question.",
                   lambda a, c: Answer(_text(a, "text", "answer")), lambda a, c: {"text": a.text}),
        ActionSpec("ask_user", (Finish,), ("text",), "Ask the user for information (ends the episode here).",
                   ask, lambda a, c: None, aliases=("info",)),
    ]


_PLACEHOLDER = {"coordinate": [0, 0], "start_coordinate": [0, 0], "end_coordinate": [0, 0], "text": "",
                "direction": "up or down or left or right", "button": "back, home, menu or enter",
                "status": "success or fail", "time": 1}


class MaiUiFormat(QwenToolCallFormat):
    """MAI-UI ``mobile_use`` calls in relative 0-999 coordinates.

    Example::

        >>> fmt = MaiUiFormat()
        >>> fmt.parse('<thinking>\\ngo\\n</thinking>\\n<tool_call>\\n{"name": "mobile_use", "arguments": '
        ...           '{"action": "click", "coordinate": [999, 0]}}\\n</tool_call>', (1080, 2400))
        Click(x=1.0, y=0.0)
    """

    def __init__(self) -> None:
        super().__init__("mobile_use")
        self.name = "maiui"
        self.frame = ModelFrame("relative999")
        self.table = Table(_mai_rows())
        self.supported_kinds = self.table.supported_kinds
        self.dropped_fields = {"finish": ("message",), "long_press": ("duration_ms",), "scroll": ("amount",),
                               "wait": ("seconds",)}

    def system_prompt(self, image_size: tuple[int, int] | None = None) -> str:
        """MAI-UI's prompt layout; the action space lines come from the table."""
        lines = []
        for r in self.table.rows:
            args = {"action": r.name, **{p.rstrip("?"): _PLACEHOLDER[p.rstrip("?")] for p in r.params
                                         if not p.endswith("?") or p == "coordinate?"}}
            lines.append(f"{json.dumps(args, ensure_ascii=False)} # {r.doc}")
        return (
            "You are a GUI agent. You are given a task and your action history, with screenshots. You need "
            "to perform the next action to complete the task.\n\n## Output Format\nFor each function call, "
            "return the thinking process in <thinking> </thinking> tags, and a json object with function "
            "name and arguments "
            "within <tool_call></tool_call> XML tags:\n```\n<thinking>\n...\n</thinking>\n<tool_call>\n"
            '{"name": "mobile_use", "arguments": <args-json-object>}\n</tool_call>\n```\n\n'
            "## Action Space\n\n"
            + "\n".join(lines)
            + "\n\n## Note\n- Coordinates [x, y] are relative, 0-999 of the screenshot's width and height.\n"
            "- Write a small plan and finally summarize your next action (with its target element) in one "
            "sentence in <thinking></thinking> part.\n"
        )

    def thought(self, text: str) -> str:
        return _thinking(text, super().thought)

    def format(self, action: Action, image_size: tuple[int, int], thought: str = "") -> str:
        check_image_size(image_size)
        return _with_thinking(super().format(action, image_size), thought)


# GUI-Owl / Mobile-Agent-v3 in smart-resized pixels, GUI-Owl 1.5 relative 0-1000; MAI-UI relative 0-999
register_format("guiowl", GuiOwlFormat)
register_format("guiowl15", GuiOwlFormat, frame="relative1000")
register_format("maiui", MaiUiFormat)
