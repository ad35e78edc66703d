"""The app server: per-episode sessions of server-side state behind phone-style web apps.

Why Flask + werkzeug's threaded server rather than the stdlib ``http.server``:
the apps are a few dozen routes with templates, forms and redirects, which
Flask/Jinja express in a fraction of the code; Flask is already a project
dependency (the web UI uses it), and werkzeug's ``make_server`` binds port 0
and serves from a background thread, which is all the suite needs.

State lives here, never in the browser: every session (``/s/<session_id>/...``)
holds one world dict (see :mod:`.world`); pages render it and every change is a
form POST or a ``fetch`` POST to the server. Tasks load a session's initial state
and read it back through the JSON API (:class:`AppClient`; :class:`LocalClient` gives
the same answers without HTTP when the server runs in the task's process), so evaluation
sees exactly what the apps saved. Several sessions run side by side on one server
without sharing anything.

JSON API (all bodies JSON):

* ``POST /api/sessions`` ``{"state": {...}}`` (optional) -> ``{"session_id", "url"}``
* ``PUT /api/sessions/<sid>`` ``{"state": {...}}`` -> reset (or create) that session
* ``GET /api/sessions/<sid>`` -> ``{"state": {...}}``; ``DELETE`` removes it
* ``GET /api/health`` -> ``{"ok": true, "sessions": n}``

Example::

    server = AppServer().start()
    client = AppClient(server.url)
    sid = client.create(make_world(0))
    client.state(sid)["settings"]["wifi"]
    server.stop()
"""

from __future__ import annotations

import itertools
import os
import threading
import uuid
from collections import OrderedDict
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Iterator

import httpx
from flask import Flask, jsonify, request
from markupsafe import Markup
from werkzeug.exceptions import HTTPException
from werkzeug.serving import WSGIRequestHandler, make_server

from .views import bp
from .world import check_labels, check_layout, copy_json, empty_world

__all__ = ["StateError", "SessionStore", "validate_state", "create_app", "AppServer", "AppClient", "LocalClient",
           "shared_server", "stop_shared_server"]

LOG_LIMIT = 200


class StateError(ValueError):
    """A session state that does not fit the schema of :func:`.world.empty_world`."""


def validate_state(state: Any) -> dict[str, Any]:
    """A deep copy of ``state`` with missing keys filled from the empty world; raises :class:`StateError`."""
    if not isinstance(state, dict):
        raise StateError(f"state must be a JSON object, got {type(state).__name__}")
    try:
        state = copy_json(state)  # what a JSON round trip gives (tuples as lists): the copy the store keeps
    except (TypeError, ValueError, RecursionError) as e:
        raise StateError(f"state must be plain JSON data: {e}") from None
    base = empty_world()
    unknown = set(state) - set(base)
    if unknown:
        raise StateError(f"unknown state keys {sorted(unknown)}; known: {sorted(base)}")
    out = base
    for key, value in state.items():
        expected = type(base[key]) if base[key] is not None else (str, type(None))
        if not isinstance(value, expected):
            raise StateError(f"state[{key!r}] must be {getattr(expected, '__name__', 'str or null')}, "
                             f"got {type(value).__name__}")
        if key == "settings":
            out[key].update(value)
        else:
            out[key] = value
    for key in ("contacts", "threads", "events", "notes", "files", "expenses", "alarms", "todos"):
        for item in out[key]:
            if not isinstance(item, dict) or not isinstance(item.get("id"), int):
                raise StateError(f"every item of state[{key!r}] needs an integer 'id'")
    try:
        check_layout(out["layout"])
        check_labels(out["labels"])
    except ValueError as e:
        raise StateError(str(e)) from None
    return out


class SessionStore:
    """Thread-safe map session id -> state, evicting the least recently used past ``max_sessions``."""

    def __init__(self, max_sessions: int = 512):
        self.max_sessions = max_sessions
        self._lock = threading.RLock()
        self._sessions: OrderedDict[str, dict[str, Any]] = OrderedDict()
        # each session's version: a number drawn from one counter at every change (never reused, so
        # a session made again under the same id never shows an old version)
        self._versions: dict[str, int] = {}
        self._clock = itertools.count(1)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def reset(self, sid: str, state: Any) -> None:
        """Replace (or create) session ``sid`` with a validated copy of ``state``."""
        clean = validate_state(state)
        with self._lock:
            self._sessions[sid] = clean
            self._versions[sid] = next(self._clock)
            self._sessions.move_to_end(sid)
            while len(self._sessions) > self.max_sessions:
                gone, _ = self._sessions.popitem(last=False)
                self._versions.pop(gone, None)

    def create(self, state: Any = None) -> str:
        sid = uuid.uuid4().hex[:16]
        self.reset(sid, {} if state is None else state)
        return sid

    def get(self, sid: str) -> dict[str, Any]:
        """A deep copy of the state; ``KeyError`` if unknown."""
        with self._lock:
            return copy_json(self._sessions[sid])

    def __contains__(self, sid: object) -> bool:
        with self._lock:
            return sid in self._sessions

    def delete(self, sid: str) -> bool:
        with self._lock:
            self._versions.pop(sid, None)
            return self._sessions.pop(sid, None) is not None

    def version(self, sid: str) -> int:
        """A number that changes whenever the session's state may have (every :meth:`edit` and
        :meth:`reset`) and never comes back; ``KeyError`` if unknown."""
        with self._lock:
            return self._versions[sid]

    @contextmanager
    def edit(self, sid: str) -> Iterator[dict[str, Any]]:
        """Hold the lock and yield the live state for in-place changes; ``KeyError`` if unknown."""
        with self._lock:
            state = self._sessions[sid]
            self._sessions.move_to_end(sid)
            try:
                yield state
            finally:
                self._versions[sid] = next(self._clock)

    @contextmanager
    def view(self, sid: str) -> Iterator[dict[str, Any]]:
        """Hold the lock and yield the live state to read (to copy) only: its version stays."""
        with self._lock:
            state = self._sessions[sid]
            self._sessions.move_to_end(sid)
            yield state


def create_app(store: SessionStore) -> Flask:
    """The Flask app: the JSON API under ``/api`` and the phone apps under ``/s/<sid>/``."""
    app = Flask(__name__, template_folder="templates", static_folder="static")
    app.config["SEND_FILE_MAX_AGE_DEFAULT"] = 3600
    app.config["STORE"] = store
    # The stylesheet and script go inline into every page: one request a page load instead of
    # three (the browser device's navigation guard routes every request, which also turns the
    # HTTP cache off, so the files came again with every page; docs/benchmarks.md).
    assets = {name: Markup((Path(app.static_folder) / f"app.{ext}").read_text())  # type: ignore[arg-type]
              for name, ext in (("app_css", "css"), ("app_js", "js"))}
    if "</style" in assets["app_css"].lower() or "</script" in assets["app_js"].lower():
        raise RuntimeError("static/app.css or app.js would end its inline element early")
    app.context_processor(lambda: assets)

    @app.post("/api/sessions")
    def api_create():
        body = request.get_json(silent=True) or {}
        try:
            sid = store.create(body.get("state"))
        except StateError as e:
            return jsonify(error=str(e)), 400
        return jsonify(session_id=sid, url=f"{request.host_url}s/{sid}/"), 201

    @app.put("/api/sessions/<sid>")
    def api_reset(sid: str):
        body = request.get_json(silent=True)
        if not isinstance(body, dict) or "state" not in body:
            return jsonify(error='body must be a JSON object {"state": {...}}'), 400
        try:
            store.reset(sid, body["state"])
        except StateError as e:
            return jsonify(error=str(e)), 400
        return jsonify(session_id=sid, url=f"{request.host_url}s/{sid}/")

    @app.get("/api/sessions/<sid>")
    def api_state(sid: str):
        try:
            return jsonify(state=store.get(sid))
        except KeyError:
            return jsonify(error=f"unknown session {sid!r}"), 404

    @app.delete("/api/sessions/<sid>")
    def api_delete(sid: str):
        return jsonify(deleted=store.delete(sid))

    @app.get("/")
    def index():
        return ('<!doctype html><meta name="viewport" content="width=device-width"><title>Web apps</title>'
                '<p style="font-family:sans-serif;padding:24px">No episode is running.</p>')

    @app.get("/api/health")
    def api_health():
        return jsonify(ok=True, sessions=len(store))

    app.register_blueprint(bp)

    @app.errorhandler(HTTPException)
    def phone_error_page(e: HTTPException):
        # The apps' error pages (an item that is gone, an unknown page) fit the phone's width like
        # its other pages: werkzeug's page with a viewport. The apps render pages, error pages
        # included, in the open document, where a page without one would keep the last width.
        if not request.path.startswith("/s/"):
            return e
        body = e.get_body().replace("<html lang=en>", '<html lang=en>\n<meta name="viewport" '
                                    'content="width=device-width, initial-scale=1">', 1)
        return body, e.code, {"Content-Type": "text/html; charset=utf-8"}

    @app.after_request
    def no_store(resp):
        # Pages must be fetched again on Back, so the server logs every view and shows fresh state;
        # the static CSS/JS may be cached.
        if not request.path.startswith("/static/"):
            resp.headers["Cache-Control"] = "no-store"
        return resp

    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log line per request (an episode makes dozens)."""

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


class AppServer:
    """The Flask app on ``127.0.0.1`` (port 0 -> a free port) in a daemon thread.

    A server serves in the process that started it. In a forked child (a ``fork`` context's
    vector-env worker) the copy is not running: its thread stayed in the parent, and its store
    is a copy the parent's thread never sees. :meth:`start` there starts a new server (a new
    port, this process's store) and :meth:`stop` only closes the child's copy of the socket.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, store: SessionStore | None = None):
        self.store = store or SessionStore()
        self._host, self._port = host, port
        self._server = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None  # the process serving

    @property
    def running(self) -> bool:
        return self._server is not None and self._pid == os.getpid()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash)."""
        if not self.running:
            raise RuntimeError("the app server is not running in this process; call start()")
        return f"http://{self._host}:{self._server.server_port}"

    def start(self) -> "AppServer":
        if self._server is not None and not self.running:
            self._forget()
        if self._server is None:
            self._server = make_server(self._host, self._port, create_app(self.store), threaded=True,
                                       request_handler=_QuietHandler)
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._server.serve_forever, name="webapps-server", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port. Safe to call twice."""
        if self._server is not None and not self.running:
            self._forget()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server, self._thread, self._pid = None, None, None

    def _forget(self) -> None:
        """A forked copy: close this process's handle on the listening socket (the parent's stays
        open and served) and drop the copy; ``shutdown`` would wait for a thread that is not here."""
        try:
            self._server.socket.close()
        except OSError:
            pass
        self._server, self._thread, self._pid = None, None, None

    def session_url(self, sid: str, path: str = "") -> str:
        return f"{self.url}/s/{sid}/{path}"


class AppClient:
    """The JSON API over HTTP (works against a server in another process too)."""

    def __init__(self, base_url: str, *, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, trust_env=False)

    def _check(self, resp: httpx.Response) -> dict[str, Any]:
        if resp.status_code >= 400:
            try:
                msg = resp.json().get("error", resp.text)
            except ValueError:
                msg = resp.text
            if resp.status_code == 404:
                raise KeyError(msg)
            raise StateError(msg) if resp.status_code == 400 else RuntimeError(msg)
        return resp.json()

    def create(self, state: dict[str, Any] | None = None) -> str:
        return self._check(self._http.post("/api/sessions", json={"state": state or {}}))["session_id"]

    def reset(self, sid: str, state: dict[str, Any]) -> None:
        self._check(self._http.put(f"/api/sessions/{sid}", json={"state": state}))

    def state(self, sid: str) -> dict[str, Any]:
        return self._check(self._http.get(f"/api/sessions/{sid}"))["state"]

    def delete(self, sid: str) -> bool:
        return bool(self._check(self._http.delete(f"/api/sessions/{sid}"))["deleted"])

    def close(self) -> None:
        self._http.close()


class LocalClient:
    """:class:`AppClient`'s interface on a server running in this process: the session store
    read and written directly, without an HTTP round trip (what tasks use: a state check
    costs a fraction of an HTTP call's, docs/benchmarks.md, and it never blocks the event loop
    that drives the browsers while the server thread answers). States pass through JSON both ways, so tasks
    see exactly what the HTTP API would give them."""

    def __init__(self, server: AppServer):
        self._server = server
        self.base_url = server.url

    def create(self, state: dict[str, Any] | None = None) -> str:
        return self._server.store.create(state or {})  # the store keeps a copy (validate_state)

    def reset(self, sid: str, state: dict[str, Any]) -> None:
        self._server.store.reset(sid, state)

    def state(self, sid: str) -> dict[str, Any]:
        store = self._server.store
        with store.view(sid) as live:  # KeyError for an unknown session, as over HTTP
            return copy_json(live, sort_keys=True)  # as JSON gives it, keys sorted as Flask's jsonify does

    def state_version(self, sid: str) -> int:
        """The session's :meth:`SessionStore.version` (not over HTTP: a client without this method
        reads the state afresh at every check)."""
        return self._server.store.version(sid)

    def delete(self, sid: str) -> bool:
        return self._server.store.delete(sid)

    def close(self) -> None:
        pass


_shared: AppServer | None = None
_shared_client: LocalClient | None = None
_shared_lock = threading.Lock()


def shared_server() -> tuple[AppServer, LocalClient]:
    """The process-wide server (started on first use) and an in-process client for it.

    Each process has its own: a forked child starts a new one (the parent's copy there is not
    running, :class:`AppServer`), so its sessions live in the store its own server answers from."""
    global _shared, _shared_client
    with _shared_lock:
        if _shared is None or not _shared.running:
            _shared = AppServer().start()
            _shared_client = LocalClient(_shared)
        assert _shared_client is not None
        return _shared, _shared_client


def stop_shared_server() -> None:
    global _shared, _shared_client
    with _shared_lock:
        if _shared_client is not None:
            _shared_client.close()
        if _shared is not None:
            _shared.stop()
        _shared, _shared_client = None, None


def _forget_in_forked_child() -> None:
    """After ``os.fork``, in the child: drop the parent's shared server without stopping it (its
    thread is the parent's); the child's first :func:`shared_server` starts one of its own."""
    global _shared, _shared_client, _shared_lock
    if _shared is not None:
        _shared._forget()
    _shared, _shared_client, _shared_lock = None, None, threading.Lock()  # a lock held at the fork stays held


os.register_at_fork(after_in_child=_forget_in_forked_child)
