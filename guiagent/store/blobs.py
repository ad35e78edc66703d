"""Content-addressed screenshot blobs.

A blob is stored once under ``blobs/<h[:2]>/<h>.<ext>`` where ``h`` is the
sha256 of the bytes exactly as captured (no re-encoding) and ``ext`` comes from
the magic bytes (png, jpg, webp, gif, bmp, or bin). Writes go to a temporary
file in the same shard directory and are published with :func:`os.replace`, so a
reader (or a writer killed mid-write) never sees a half-written blob under its
final name; a leftover ``.tmp-*`` file is ignored and cleaned by
:meth:`guiagent.store.Store.recover`.

Every read checks the bytes against their name (:meth:`BlobStore.read`): a blob truncated or
replaced on disk raises :class:`~guiagent.store.errors.BlobDamaged` instead of reaching a model, an
export or the web UI as if it were what was captured.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from pathlib import Path

from guiagent.store.errors import BlobDamaged, BlobNotFound, InvalidBlobRef

__all__ = ["blob_hash", "check_hash", "check_bytes", "looks_truncated", "image_extension", "BlobStore",
           "BLOB_EXTENSIONS", "TMP_PREFIX"]

_HASH_RE = re.compile(r"[0-9a-f]{64}")
#: extensions in lookup order (screenshots are nearly always PNG)
BLOB_EXTENSIONS = ("png", "jpg", "webp", "gif", "bmp", "bin")
TMP_PREFIX = ".tmp-"


def blob_hash(data: bytes) -> str:
    """The blob reference of ``data``: lowercase hex sha256."""
    return hashlib.sha256(data).hexdigest()


def check_hash(ref: object) -> str:
    """Return ``ref`` if it is a well-formed blob hash (64 lowercase hex chars).

    Anything else (path separators, ``..``, upper case, other lengths) raises
    :class:`InvalidBlobRef`, so a ref taken from a URL can never name a path
    outside ``blobs/``.
    """
    if not isinstance(ref, str) or _HASH_RE.fullmatch(ref) is None:
        raise InvalidBlobRef(f"not a blob hash (want 64 lowercase hex characters): {str(ref)[:80]!r}")
    return ref


def check_bytes(ref: str, data: bytes) -> None:
    """Raise :class:`BlobDamaged` when ``data`` does not hash to ``ref`` (saying whether it looks cut
    short: empty, or an image missing its end)."""
    if blob_hash(data) != ref:
        how = "truncated" if looks_truncated(data) else "replaced by other bytes"
        raise BlobDamaged(f"screenshot blob {ref} is damaged: its {len(data):,} bytes do not hash to its name "
                          f"({how})")


def looks_truncated(data: bytes) -> bool:
    """Whether image bytes look cut short: empty, or a PNG without its IEND chunk, a JPEG without its
    end marker, a GIF without its trailer."""
    if not data:
        return True
    kind = image_extension(data)
    if kind == "png":
        return not data.rstrip(b"\x00").endswith(b"IEND\xaeB`\x82")
    if kind == "jpg":
        return not data.rstrip(b"\x00").endswith(b"\xff\xd9")
    if kind == "gif":
        return not data.endswith(b"\x3b")
    return False


def image_extension(data: bytes) -> str:
    """File extension for ``data`` judged from its magic bytes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpg"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if data.startswith(b"BM"):
        return "bmp"
    return "bin"


class BlobStore:
    """The ``blobs/`` directory of a run. ``put`` is safe from many processes at once."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.root = Path(root)
        self.fsync = fsync

    def _shard(self, ref: str) -> Path:
        return self.root / ref[:2]

    def path(self, ref: str) -> Path:
        """Path of an existing blob; :class:`BlobNotFound` when absent."""
        check_hash(ref)
        shard = self._shard(ref)
        for ext in BLOB_EXTENSIONS:
            p = shard / f"{ref}.{ext}"
            if p.is_file() and not p.is_symlink():  # the store never writes links: one planted is ignored
                return p
        raise BlobNotFound(f"no blob {ref} under {self.root}")

    def exists(self, ref: str) -> bool:
        try:
            self.path(ref)
        except BlobNotFound:
            return False
        return True

    def read(self, ref: str) -> bytes:
        """The bytes of blob ``ref``, checked against its hash (:class:`BlobDamaged` when they differ)."""
        data = self.path(ref).read_bytes()
        check_bytes(ref, data)
        return data

    def put(self, data: bytes) -> tuple[str, bool]:
        """Store ``data`` once; return ``(hash, written)`` (``written`` False if it was there)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"blob data must be bytes, got {type(data).__name__}")
        data = bytes(data)
        ref = blob_hash(data)
        shard = self._shard(ref)
        final = shard / f"{ref}.{image_extension(data)}"
        if final.exists():
            return ref, False
        shard.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=shard)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            # Same content under the same name: a concurrent writer's replace is harmless.
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        return ref, True

    def clean_temp(self, older_than: float = 3600.0) -> int:
        """Delete temporary files left by killed writers; return how many were removed."""
        if not self.root.is_dir():
            return 0
        cutoff = time.time() - older_than
        removed = 0
        for tmp in self.root.glob(f"*/{TMP_PREFIX}*"):
            try:
                if tmp.stat().st_mtime < cutoff:
                    tmp.unlink()
                    removed += 1
            except FileNotFoundError:
                pass
        return removed

    def count(self) -> int:
        """Number of published blob files (temporary files excluded)."""
        if not self.root.is_dir():
            return 0
        return sum(1 for p in self.root.glob("*/*") if not p.name.startswith(TMP_PREFIX))
