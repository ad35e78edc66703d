"""Screenshots by content hash: ``/img/<run>/<sha256>``.

The run key is looked up among the discovered runs and the hash is checked by the
store (exactly 64 lowercase hex characters) before any path exists. The file is then
opened without following a final symlink and served only if it is a regular file
whose real path lies inside the run directory: a link planted in ``blobs/`` (or a
``blobs/`` that is itself a link) serves nothing. Its bytes are then checked against the hash
they are named by: a blob truncated or replaced on disk is never served as the screenshot (the
answer is an error naming the blob, with no ETag and ``Cache-Control: no-store``, so no cache keeps
it). A checked blob never changes under its name: responses are immutable, cached for a year, with
the hash as ETag, and werkzeug answers ``If-None-Match`` / ``If-Modified-Since``
(``send_file(conditional=True)``).
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from flask import Blueprint, Response, send_file

from guiagent.store import StoreError
from guiagent.store.blobs import check_bytes
from webui.registry import NotFound
from webui.views import registry

bp = Blueprint("blobs", __name__)

YEAR_S = 365 * 24 * 3600
#: the largest blob served (checked whole against its hash first; a screenshot is 0.1-5 MB)
MAX_BLOB_BYTES = 256 * 1024 * 1024
_MIMETYPES = {"png": "image/png", "jpg": "image/jpeg", "webp": "image/webp", "gif": "image/gif",
              "bmp": "image/bmp"}
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_inside(path: Path, root: Path):
    """Open ``path`` for reading if it is a regular file whose real path lies under ``root``
    (raises :class:`NotFound` otherwise). The check is made on the opened descriptor, so the
    file cannot be swapped for a link between check and read."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:  # a symlink (ELOOP), gone, unreadable
        raise NotFound("no such screenshot") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotFound("no such screenshot")
        try:  # what was really opened (Linux); elsewhere the resolved path
            real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            real = path.resolve()
        if not real.is_relative_to(root.resolve()):
            raise NotFound("no such screenshot")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@bp.get("/img/<run>/<ref>")
def blob(run: str, ref: str) -> Response:
    ref_run = registry().run(run)
    try:
        path = ref_run.reader.blob_path(ref)  # validates the hash, raises BlobNotFound if absent
    except (StoreError, OSError):
        raise NotFound("no such screenshot") from None
    with open_inside(path, ref_run.run_dir) as f:
        mtime = os.fstat(f.fileno()).st_mtime
        data = f.read(MAX_BLOB_BYTES + 1)
    if len(data) > MAX_BLOB_BYTES:
        raise NotFound("no such screenshot")
    check_bytes(ref, data)  # BlobDamaged (a StoreError): an error page, no ETag, no-store
    resp = send_file(io.BytesIO(data), mimetype=_MIMETYPES.get(path.suffix[1:], "application/octet-stream"),
                     conditional=True, etag=ref, max_age=YEAR_S, last_modified=mtime)
    resp.headers["Cache-Control"] = f"public, max-age={YEAR_S}, immutable"
    return resp
