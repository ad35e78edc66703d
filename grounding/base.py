"""The action-format interface: one object owns its prompt text, parser, printer and frame.

``parse`` never raises on model text: it returns an :data:`~guiagent.types.Action`
or a :class:`~guiagent.types.ParseError`. ``image_size`` is always the
``(width, height)`` of the screenshot the model was shown (before any resizing the
format itself applies); actions come back in normalised [0, 1] coordinates.

Formats are registered by name, as training algorithms are (``rl/strategies/base.py``): the module that
defines a format calls :func:`register_format` for each name it answers to (one class may serve several,
with different constructor arguments), and :func:`grounding.get_format` builds any name of
:data:`FORMATS`. The package imports each format module once; the names come in the order they register.
"""

from __future__ import annotations

import copy
import functools
from abc import ABC, abstractmethod
from typing import Any, Callable

from guiagent.types import Action, ParseError

from grounding.coords import ModelFrame

__all__ = ["ActionFormat", "FORMATS", "register_format"]


class ActionFormat(ABC):
    name: str = ""
    #: action kinds (``Action.kind``) this format can print; ``format`` raises ValueError for others
    supported_kinds: frozenset[str] = frozenset()
    #: per kind, fields the format cannot carry: ``format`` drops them, ``parse`` returns their defaults
    dropped_fields: dict[str, tuple[str, ...]] = {}

    @abstractmethod
    def system_prompt(self) -> str:
        """The action-space description and output rules, generated from the action classes."""

    @abstractmethod
    def parse(self, text: str, image_size: tuple[int, int]) -> Action | ParseError:
        """Model text -> action, or a typed error. Never raises."""

    @abstractmethod
    def format(self, action: Action, image_size: tuple[int, int], thought: str = "") -> str:
        """Action -> the text a model should emit (SFT targets)."""

    @abstractmethod
    def thought(self, text: str) -> str:
        """The reasoning part of the model text ('' if none)."""

    def with_image_geometry(self, factor: int, min_pixels: int, max_pixels: int) -> "ActionFormat":
        """This format in the frame of an image processor that resizes to multiples of ``factor``
        within ``[min_pixels, max_pixels]``.

        Only formats that speak pixels of the resized image (``smart_resize_pixels``) change:
        a copy with the new frame is returned, so prompt, printer and parser all use it.
        Relative and normalised frames do not depend on the processor; they return ``self``.
        """
        frame = getattr(self, "frame", None)
        if frame is None or frame.kind != "smart_resize_pixels":
            return self
        out = copy.copy(self)
        frame = ModelFrame("smart_resize_pixels", factor, min_pixels, max_pixels)
        out.frame = frame  # type: ignore[attr-defined]
        return out


#: name -> what builds that format (its options as keywords), filled by :func:`register_format`
FORMATS: dict[str, Callable[..., ActionFormat]] = {}


def register_format(name: str, cls: type[ActionFormat], *args: Any, **defaults: Any) -> None:
    """Make ``cls`` available as ``get_format(name, **options)``: built as ``cls(*args, **defaults)``
    with the options given to ``get_format`` over ``defaults``. A name is registered once (a second
    registration is a ``ValueError``, not a silent replacement)."""
    if name in FORMATS:
        raise ValueError(f"an action format named {name!r} is registered already")
    FORMATS[name] = functools.partial(cls, *args, **defaults)
