"""``guiagent ui --runs DIR``: the web UI (run dashboards, episode lists, replay, comparison).

Examples::

    guiagent ui --runs runs                              # http://127.0.0.1:8765/
    guiagent ui --runs runs/demo --port 0                # any free port (printed)
    GUIAGENT_UI_TOKEN=... guiagent ui --runs runs --host 0.0.0.0 --allow-remote

It only reads the run directories (through ``guiagent.store.StoreReader``). It binds
127.0.0.1 unless told otherwise; any other address needs ``--allow-remote`` and an
access token (``--token`` or the ``GUIAGENT_UI_TOKEN`` environment variable).
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import os
import secrets
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from guiagent.cli._common import emit_json, log
from guiagent.config import parse_config

TOKEN_ENV = "GUIAGENT_UI_TOKEN"


@dataclass
class UIConfig:
    """Serve the web UI over a run directory or a folder of run directories."""

    runs: str = "runs"
    """a run directory (holding store.sqlite) or a folder of run directories (one or two levels deep)"""
    host: str = "127.0.0.1"
    """address to bind; anything but loopback needs --allow-remote and a token"""
    port: int = 8765
    """port to listen on (0: any free port; the URL is printed)"""
    allow_remote: bool = False
    """allow binding a non-loopback address (requires --token or GUIAGENT_UI_TOKEN)"""
    token: str | None = None
    """access token required on every request (default: $GUIAGENT_UI_TOKEN; none on loopback)"""
    debug: bool = False
    """Flask debug mode (tracebacks in the browser; never with --allow-remote)"""
    json: bool = False
    """print one JSON object with the URL as a stdout line once listening"""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must lie in [0, 65535], got {self.port}")


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(cfg: UIConfig, token: str | None) -> str | None:
    """Why this host/token combination is refused, in one line (``None``: fine)."""
    if token is not None and (len(token) < 8 or not token.isprintable() or any(c.isspace() for c in token)):
        return "the access token must be at least 8 printable characters without spaces"
    if is_loopback(cfg.host):
        return None
    if not cfg.allow_remote:
        return (f"refusing to bind {cfg.host}: only 127.0.0.1 is served by default; pass --allow-remote "
                f"and a token (--token or {TOKEN_ENV}) to serve other machines")
    if not token:
        return f"refusing to bind {cfg.host} without an access token: pass --token or set {TOKEN_ENV}"
    if len(token) < 16:
        return "the access token must be at least 16 characters when serving other machines"
    if cfg.debug:
        return "refusing --debug with --allow-remote (the debugger runs code from the browser)"
    return None


def main(argv: list[str]) -> int:
    cfg = parse_config(UIConfig, argv, prog="guiagent ui")
    token = cfg.token or os.environ.get(TOKEN_ENV) or None
    why = check_exposure(cfg, token)
    if why:
        print(f"guiagent ui: {why}", file=sys.stderr)
        return 2
    if not Path(cfg.runs).is_dir():
        what = ("is a file; give the folder of runs (or one run's folder)" if Path(cfg.runs).exists()
                else "no such directory")
        print(f"guiagent ui: --runs {cfg.runs}: {what}", file=sys.stderr)
        return 2

    # lazy: the web UI loads Flask (0.3 s with werkzeug's server); `guiagent ui --help` need not
    from werkzeug.serving import make_server

    from webui import AppConfig, create_app  # lazy: as above
    from webui.security import RedactingRequestHandler  # lazy: as above

    remote = not is_loopback(cfg.host)
    bound = f"[{cfg.host.strip('[]')}]" if ":" in cfg.host else cfg.host  # how browsers send it in Host
    app = create_app(AppConfig(runs=cfg.runs, token=token, loopback_only=not remote,
                               trusted_hosts=() if remote else (bound.lower(),)))
    app.debug = cfg.debug
    # werkzeug reports a bind failure (a busy port, an address not on this host, a name that does not
    # resolve) in lines of its own and exits 1: ask first, with port 0 too, and keep its words out
    why = _cannot_listen(cfg.host, cfg.port)
    if why is None:
        try:
            with contextlib.redirect_stderr(io.StringIO()) as said:
                server = make_server(cfg.host, cfg.port, app, threaded=True,
                                     request_handler=RedactingRequestHandler)
        except OSError as e:  # the address went away since the check
            why = e.strerror or str(e)
        except SystemExit:
            why = (said.getvalue().strip().splitlines() or ["the address cannot be used"])[0]
    if why is not None:
        print(f"guiagent ui: cannot listen on {cfg.host}:{cfg.port}: {why}", file=sys.stderr)
        return 2
    port = server.server_port
    shown = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    url = f"http://{shown}:{port}/"
    # the token travels once in the URL; the server swaps it for a cookie at once
    open_url = url + (f"?token={token}" if token else "")
    print(f"guiagent ui: serving {Path(cfg.runs).resolve()} at {open_url}", flush=True)
    if cfg.json:
        emit_json({"url": url, "host": cfg.host, "port": port, "runs": str(Path(cfg.runs).resolve()),
                   "token_required": bool(token)})
    log("press Ctrl+C to stop")
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def _cannot_listen(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, in a few words (``None``: it can). Port 0 is asked
    too: it cannot be busy, but the address may not be this host's or the name may not resolve."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as werkzeug's make_server picks it
    try:
        addr = socket.getaddrinfo(host.strip("[]"), port, family, socket.SOCK_STREAM)[0][4]
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug's server will
            sock.bind(addr)
            sock.listen()
    except (OSError, UnicodeError) as e:  # gaierror is an OSError; an over-long name a UnicodeError
        return (e.strerror if isinstance(e, OSError) else None) or str(e) or type(e).__name__
    return None


def new_token() -> str:
    """A fresh random token (for scripts that start the UI for others)."""
    return secrets.token_urlsafe(24)
