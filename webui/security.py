"""Request guards: access token, Host check, strict response headers, and log redaction.

* **Token.** With a token configured, every request must carry it: header
  ``X-GUIAgent-Token: T`` or ``Authorization: Bearer T``, or the cookie that
  ``?token=T`` sets once (the URL is then redirected without the token, so it does
  not linger in history). Compared with :func:`hmac.compare_digest`. Access-log lines
  never show it (:class:`RedactingRequestHandler`).
* **Host.** A loopback-only server answers only ``Host: 127.0.0.1 / localhost /
  [::1]`` (any port, and the names given as ``trusted_hosts``): a web page on another
  origin cannot read it through DNS rebinding; any other Host is a 400. The check is
  ours (:func:`host_name`), not Flask's ``TRUSTED_HOSTS``: werkzeug's
  ``host_is_trusted`` cuts both the header and each trusted entry at the first ``:``,
  so IPv6 literals compare as ``"["`` and its behaviour has changed between patch
  releases (3.1.9 refuses ``[::1]`` that 3.1.8 accepted).
* **Headers.** A strict Content-Security-Policy (scripts and styles only from our
  own static files, no inline code), ``nosniff``, no framing, no referrer.
"""

from __future__ import annotations

import hmac
import re
from urllib.parse import quote, urlencode

from flask import Flask, Response, redirect, request
from werkzeug.exceptions import BadRequest, Unauthorized
from werkzeug.serving import WSGIRequestHandler

__all__ = ["install", "CSP", "TOKEN_COOKIE", "TOKEN_HEADER", "LOOPBACK_HOSTS", "RedactingRequestHandler",
           "redact", "host_name"]

TOKEN_COOKIE = "guiagent_ui_token"
TOKEN_HEADER = "X-GUIAgent-Token"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_TOKEN_ARG = re.compile(r"([?&;]token=)[^&;#\s\"]*", re.I)
# A Host header (RFC 9110 section 7.2): a bracketed IPv6 literal or a name / IPv4 address, then an
# optional port. Nothing else (no userinfo, no path, no trailing dot games) is a host we answer.
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)(?::([0-9]{1,5}))?")


def redact(text: str) -> str:
    """``?token=secret`` -> ``?token=[redacted]`` in a URL or a log line."""
    return _TOKEN_ARG.sub(r"\1[redacted]", text)


class RedactingRequestHandler(WSGIRequestHandler):
    """werkzeug's request handler, with the token taken out of access-log lines."""

    def log(self, type: str, message: str, *args) -> None:  # noqa: A002 (werkzeug's signature)
        super().log(type, redact(message % args) if args else redact(message))


def _same(given: str | None, token: str) -> bool:
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


def host_name(header: str) -> str | None:
    """The host part of a ``Host`` header, lower-cased, or ``None`` when it is malformed.

    >>> host_name("[::1]:8765"), host_name("LocalHost"), host_name("a@b"), host_name("x:99999")
    ('[::1]', 'localhost', None, None)
    """
    m = _HOST.fullmatch(header.strip().lower())
    if m is None or (m.group(2) is not None and int(m.group(2)) > 65535):
        return None
    return m.group(1)


def _trusted_name(entry: str) -> str:
    """A trusted-host entry as :func:`host_name` would return it (an IPv6 address gets its brackets)."""
    entry = entry.strip().lower()
    if ":" in entry and not entry.startswith("["):
        return f"[{entry}]"  # a bare IPv6 address, as `guiagent ui --host ::1` binds it
    return host_name(entry) or entry


def install(app: Flask, *, token: str | None, loopback_only: bool, trusted_hosts: tuple[str, ...] = ()) -> None:
    """Register the guards on ``app``."""
    trusted = frozenset(_trusted_name(h) for h in (*LOOPBACK_HOSTS, *trusted_hosts))

    @app.before_request
    def _guard() -> Response | None:
        if loopback_only:
            header = request.headers.get("Host", "")
            if host_name(header) not in trusted:
                raise BadRequest(f"Host {header[:60]!r} is not trusted (this server answers on loopback only)")
        if token is None:
            return None
        auth = request.headers.get("Authorization", "")
        header = request.headers.get(TOKEN_HEADER) or (auth[7:] if auth.startswith("Bearer ") else None)
        if _same(header, token) or _same(request.cookies.get(TOKEN_COOKIE), token):
            return None
        if _same(request.args.get("token"), token):
            rest = [(k, v) for k, vs in request.args.lists() if k != "token" for v in vs]
            # the path is percent-encoded again: a decoded CR/LF must not reach the Location header
            location = quote(request.path, safe="/-._~!$&'()*+,;=:@") + ("?" + urlencode(rest) if rest else "")
            resp = redirect(location, code=303)
            resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict", secure=request.is_secure)
            return resp
        raise Unauthorized(f"access token required (open the URL printed at start-up, or send the "
                           f"{TOKEN_HEADER} header)")

    @app.after_request
    def _headers(resp: Response) -> Response:
        resp.headers["Content-Security-Policy"] = CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers.setdefault("Cache-Control", "no-store")
        return resp
