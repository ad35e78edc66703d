"""Between model text and actions: action formats, coordinate frames, overlays, evaluation.

Example::

    >>> from grounding import get_format, parse
    >>> from guiagent.types import Click
    >>> parse("Action: click(start_box='(500,250)')", "uitars", (1080, 2400))
    Click(x=0.5, y=0.25)
    >>> get_format("qwen_mobile").format(Click(0.5, 0.5), (1080, 2400))
    '<tool_call>\\n{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [546, 1204]}}\\n</tool_call>'
"""

from __future__ import annotations

__guiagent__ = True

from typing import Any

from guiagent.types import Action, ParseError

from grounding.base import FORMATS, ActionFormat, register_format
from grounding.coords import ModelFrame, smart_resize
# each format module registers its names as it is imported (grounding.base.register_format); this order
# is the order of FORMAT_NAMES
from grounding.uitars import UITarsFormat
from grounding.seed import SeedXmlFormat
from grounding.qwen import QwenToolCallFormat
from grounding.mobile_agents import GuiOwlFormat, MaiUiFormat
from grounding.jsonfmt import JsonFormat
from grounding.marks import MarksFormat

__all__ = [
    "ActionFormat", "UITarsFormat", "QwenToolCallFormat", "JsonFormat", "SeedXmlFormat", "GuiOwlFormat",
    "MaiUiFormat", "MarksFormat", "ModelFrame", "smart_resize",
    "FORMAT_NAMES", "FORMATS", "get_format", "parse", "register_format",
]

#: names accepted by :func:`get_format`: the formats the modules above registered
FORMAT_NAMES: tuple[str, ...] = tuple(FORMATS)


def get_format(name: str, **kwargs: Any) -> ActionFormat:
    """Build the format registered as ``name``; ``kwargs`` go to its constructor (over the registered defaults).

    The names (each registered beside its class): ``uitars`` (UI-TARS-1, relative 0-1000 coordinates),
    ``uitars15`` (UI-TARS-1.5, pixels of the smart-resized image), ``uitars2`` (UI-TARS-2's Seed XML
    function calls, relative 0-1000), ``qwen_mobile`` / ``qwen_computer`` (Qwen2.5-VL ``mobile_use`` /
    ``computer_use`` tool calls), ``qwen3_mobile`` / ``qwen3_computer`` (the same tools as Qwen3-VL speaks
    them, relative 0-999 / 0-1000: pass ``frame=`` to pick the other), ``guiowl`` (GUI-Owl /
    Mobile-Agent-v3 ``mobile_use`` calls, smart-resized pixels), ``guiowl15`` (GUI-Owl 1.5, relative
    0-1000), ``maiui`` (MAI-UI ``mobile_use`` calls, relative 0-999), ``json`` (plain JSON, normalised
    coordinates), ``marks`` (JSON actions on the screen's numbered elements: set-of-marks; the prompt lists
    the elements each turn, the device needs marks on).
    """
    try:
        build = FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown action format {name!r}; choose one of {tuple(FORMATS)}") from None
    return build(**kwargs)


def parse(text: str, format: ActionFormat | str, image_size: tuple[int, int]) -> Action | ParseError:
    """Model text -> action (normalised coordinates) or a typed :class:`ParseError`; never raises on text.

    ``format`` is an :class:`ActionFormat` or a name for :func:`get_format`;
    ``image_size`` is the ``(width, height)`` of the screenshot the model saw.
    """
    fmt = get_format(format) if isinstance(format, str) else format
    return fmt.parse(text, image_size)
