"""Moved to :mod:`guiagent.overlay` (the web UI draws overlays and may not import grounding);
this name stays importable."""

from guiagent.overlay import draw, marks_overlay, overlay

__all__ = ["overlay", "draw", "marks_overlay"]
