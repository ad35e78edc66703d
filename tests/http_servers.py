"""Test HTTP servers on 127.0.0.1, run for a block on a thread of their own."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from socketserver import BaseServer
from typing import TypeVar

S = TypeVar("S", bound=BaseServer)


@contextlib.contextmanager
def serving(srv: S) -> Iterator[S]:
    """``srv`` answering on a daemon thread for the block; shut down and closed after it."""
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
