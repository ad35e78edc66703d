"""The action-format interface: one object owns its prompt text, parser, printer and frame.

``parse`` never raises on model text: it returns an :data:`~guiagent.types.Action`
or a :class:`~guiagent.types.ParseError`. ``image_size`` is always the
``(width, height)`` of the screenshot the model was shown (before any resizing the
format itself applies); actions come back in normalised [0, 1] coordinates.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod

from guiagent.types import Action, ParseError

from grounding.coords import ModelFrame


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
