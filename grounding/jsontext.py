"""Moved to :mod:`guiagent.jsontext` (the judge reads model JSON too, and may not import grounding);
this name stays importable."""

from guiagent.jsontext import find_objects, loads, strip_fences

__all__ = ["loads", "find_objects", "strip_fences"]
