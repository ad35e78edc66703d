"""Typed errors of the trajectory store."""

from __future__ import annotations

__all__ = ["StoreError", "InvalidBlobRef", "BlobNotFound", "BlobDamaged", "EpisodeNotFound", "RunNotFound",
           "EpisodeClosed", "InvalidCursor"]


class StoreError(Exception):
    """Base class of every error the store raises on bad input or a bad store."""


class InvalidBlobRef(StoreError, ValueError):
    """A blob reference that is not 64 lowercase hex characters (never touches the disk)."""


class BlobNotFound(StoreError, FileNotFoundError):
    """A well-formed blob reference with no file behind it."""


class BlobDamaged(StoreError):
    """A blob whose bytes no longer hash to its name: truncated, or replaced by other bytes."""


class RunNotFound(StoreError, KeyError):
    """No run with this id."""


class EpisodeNotFound(StoreError, KeyError):
    """No visible episode with this id (in-progress episodes are not visible)."""


class EpisodeClosed(StoreError):
    """A step, completion or abort was sent to an episode that is already completed or aborted."""


class InvalidCursor(StoreError, ValueError):
    """A pagination cursor that was not produced by this sort order."""
