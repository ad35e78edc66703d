"""A fake Docker Engine API on 127.0.0.1: the part of the HTTP API the farm's healer uses.

The Docker SDK for Python talks HTTP to it exactly as to dockerd (``tcp://127.0.0.1:PORT``):
``GET /version``, ``GET /containers/json`` (with ``all`` and label ``filters``),
``GET /containers/{id}/json``, ``POST /containers/{id}/restart``, ``DELETE /containers/{id}``,
``POST /containers/create`` and ``POST /containers/{id}/start``. What a restart or a new container
does to the emulator behind it is up to the test (``on_restart`` / ``on_create``).
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

API_VERSION = "1.43"


class FakeDockerEngine:
    def __init__(self) -> None:
        self.containers: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.on_restart: Callable[[dict[str, Any]], None] = lambda c: None
        self.on_create: Callable[[dict[str, Any]], None] = lambda c: None
        self.lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any = None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self, method: str) -> None:
                url = urlparse(self.path)
                path = re.sub(r"^/v\d+\.\d+", "", url.path)
                query = parse_qs(url.query)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null") if length else None
                with engine.lock:
                    engine.calls.append((method, path))
                    code, out = engine.handle(method, path, query, body)
                self._send(code, out)

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_DELETE(self) -> None:
                self._route("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"tcp://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    # --- the engine's state ----------------------------------------------------------------
    def add(self, name: str, labels: dict[str, str], image: str = "guiagent/android-emulator:latest") -> str:
        cid = uuid.uuid4().hex + uuid.uuid4().hex
        self.containers[cid] = {
            "Id": cid, "Name": "/" + name, "Image": image, "Created": "2026-01-01T00:00:00Z",
            "State": {"Status": "running", "Running": True, "Health": {"Status": "healthy"}},
            "Config": {"Image": image, "Labels": dict(labels), "Env": ["GUIAGENT_SNAPSHOT=guiagent_ready"],
                       "Healthcheck": {"Test": ["CMD", "/opt/guiagent/healthcheck.sh"]}},
            "HostConfig": {"Devices": [{"PathOnHost": "/dev/kvm", "PathInContainer": "/dev/kvm",
                                        "CgroupPermissions": "rwm"}], "ShmSize": 1 << 30},
            "RestartCount": 0,
        }
        return cid

    def by_name(self, name: str) -> dict[str, Any]:
        return next(c for c in self.containers.values() if c["Name"] == "/" + name)

    def _find(self, ref: str) -> dict[str, Any] | None:
        for c in self.containers.values():
            if c["Id"].startswith(ref) or c["Name"] == "/" + ref:
                return c
        return None

    def _summary(self, c: dict[str, Any]) -> dict[str, Any]:
        return {"Id": c["Id"], "Names": [c["Name"]], "Image": c["Image"], "Labels": c["Config"]["Labels"],
                "State": c["State"]["Status"], "Status": "Up"}

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if method == "GET" and path in ("/version", "/_ping"):
            return 200, {"Version": "27.0.0-fake", "ApiVersion": API_VERSION, "MinAPIVersion": "1.24",
                         "Os": "linux", "Arch": "amd64"}
        if method == "GET" and path == "/containers/json":
            filters = json.loads(query.get("filters", ["{}"])[0])
            labels = filters.get("label", [])
            labels = list(labels)  # a list, or a {label: true} map
            out = []
            for c in self.containers.values():
                have = c["Config"]["Labels"]
                if all(have.get(k) == v for k, _, v in (lab.partition("=") for lab in labels)):
                    out.append(self._summary(c))
            return 200, out
        if method == "POST" and path == "/containers/create":
            cid = self.add(query["name"][0], body.get("Labels") or {}, body.get("Image"))
            c = self.containers[cid]
            c["State"] = {"Status": "created", "Running": False}
            c["HostConfig"] = body.get("HostConfig") or {}
            c["Config"]["Env"] = body.get("Env") or []
            return 201, {"Id": cid, "Warnings": []}
        m = re.fullmatch(r"/containers/([^/]+)(?:/(json|restart|start))?", path)
        if not m:
            return 404, {"message": f"page not found: {method} {path}"}
        c = self._find(m.group(1))
        if c is None:
            return 404, {"message": f"No such container: {m.group(1)}"}
        action = m.group(2)
        if method == "GET" and action == "json":
            return 200, c
        if method == "POST" and action == "restart":
            c["RestartCount"] += 1
            self.on_restart(c)
            return 204, None
        if method == "POST" and action == "start":
            c["State"] = {"Status": "running", "Running": True, "Health": {"Status": "starting"}}
            self.on_create(c)
            return 204, None
        if method == "DELETE" and action is None:
            del self.containers[c["Id"]]
            return 204, None
        return 405, {"message": f"{method} {path} not supported by the fake engine"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
