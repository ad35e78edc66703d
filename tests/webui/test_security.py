"""Escaping of model text, path traversal, screenshot caching, tokens, Host checks, CSP."""

from __future__ import annotations

import re

import pytest

from webui import AppConfig, create_app
from webui.security import CSP, TOKEN_COOKIE, TOKEN_HEADER

from tests.webui.conftest import XSS

PAGES = ["/", "/runs/trainrun0001", "/runs/trainrun0001/episodes", "/episodes/ep-rich",
         "/episodes/ep-rich?step=2", "/compare?a=ep-rich&b=ep-sib"]


@pytest.mark.parametrize("url", PAGES)
def test_model_text_is_escaped_everywhere(client, url):
    r = client.get(url)
    html = r.get_data(as_text=True)
    assert r.status_code == 200
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>Enter" not in html
    # every <script> tag on the page is one of our static files
    tags = re.findall(r"<script[^>]*>", html)
    assert all(re.fullmatch(r'<script src="/static/\w+\.js">', tag) for tag in tags)
    assert " on" + "error=" not in html.replace("onerror=alert(1)&gt;", "")
    assert 'style="' not in html  # the CSP forbids inline styles


def test_escaped_text_is_still_shown(client):
    html = client.get("/episodes/ep-rich").get_data(as_text=True)
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html  # thought, raw output, goal
    assert "key &lt;b&gt;Enter&lt;/b&gt; not allowed here" in html


def test_json_keeps_model_text_verbatim(client):
    d = client.get("/api/episodes/ep-rich").get_json()
    assert d["steps"][2]["action"]["text"] == XSS  # JSON is data: the client escapes what it shows
    assert client.get("/api/episodes/ep-rich").mimetype == "application/json"


def test_strict_headers_on_every_response(client):
    for url in ["/", "/api/runs", "/static/app.css", "/episodes/nope"]:
        r = client.get(url)
        assert r.headers["Content-Security-Policy"] == CSP, url
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["X-Frame-Options"] == "DENY"
    assert "script-src 'self';" in CSP and "unsafe-inline" not in CSP


def test_screenshots_are_immutable_and_conditional(client):
    ref = client.get("/api/episodes/ep-rich").get_json()["steps"][0]["screenshot_ref"]
    r = client.get(f"/img/trainrun0001/{ref}")
    assert r.status_code == 200 and r.mimetype == "image/png" and r.data[:8] == b"\x89PNG\r\n\x1a\n"
    assert r.headers["ETag"] == f'"{ref}"'
    assert "immutable" in r.headers["Cache-Control"] and "max-age=31536000" in r.headers["Cache-Control"]
    again = client.get(f"/img/trainrun0001/{ref}", headers={"If-None-Match": f'"{ref}"'})
    assert again.status_code == 304 and again.data == b""


@pytest.mark.parametrize("url", [
    "/img/trainrun0001/../../store.sqlite",
    "/img/trainrun0001/..%2f..%2fstore.sqlite",
    "/img/trainrun0001/%2e%2e%2f%2e%2e%2fstore.sqlite",
    "/img/%2e%2e/" + "a" * 64,
    "/img/..%2ftrain/" + "a" * 64,
    "/img/trainrun0001/%2fetc%2fpasswd",
    "/img/trainrun0001//etc/passwd",
    "/img/trainrun0001/" + "A" * 64,
    "/img/trainrun0001/" + "a" * 63,
    "/img/trainrun0001/" + "a" * 64,  # well formed, no such blob
    "/img/trainrun0001/" + "a" * 62 + "%00a",
    "/img/trainrun0001/store.sqlite",
    "/static/../webui/app.py",
    "/static/%2e%2e/app.py",
    "/runs/..%2f..%2fetc/episodes",
    "/runs/%2e%2e/episodes",
    "/api/runs/..%2ftrain",
    "/api/episodes/..%2f..%2fstore.sqlite",
    "/episodes/%2e%2e%2fstore.sqlite",
])
def test_path_traversal_is_404(client, url):
    r = client.get(url)
    assert r.status_code == 404, (url, r.status_code)
    assert b"SQLite format" not in r.data and b"root:" not in r.data


def test_blob_of_another_run_directory_is_not_served_by_this_run(client):
    ref = client.get("/api/episodes/ev-0").get_json()["steps"][0]["screenshot_ref"]
    assert client.get(f"/img/evalrun0001/{ref}").status_code == 200
    train_refs = {s["screenshot_ref"] for s in client.get("/api/episodes/ep-rich").get_json()["steps"]}
    if ref not in train_refs:
        assert client.get(f"/img/trainrun0001/{ref}").status_code == 404


@pytest.fixture(scope="module")
def token_app(runs):
    return create_app(AppConfig(runs=runs.root, token="s3cret-token-123"))


def test_token_required_on_every_route(token_app):
    c = token_app.test_client()
    for url in ["/", "/api/runs", "/episodes/ep-rich", "/static/app.css", "/img/trainrun0001/" + "a" * 64]:
        assert c.get(url).status_code == 401, url
    assert c.get("/api/runs", headers={TOKEN_HEADER: "wrong-token-xyz"}).status_code == 401
    assert c.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/?token=wrong").status_code == 401


def test_token_by_header_or_bearer(token_app):
    c = token_app.test_client()
    assert c.get("/api/runs", headers={TOKEN_HEADER: "s3cret-token-123"}).status_code == 200
    assert c.get("/api/runs", headers={"Authorization": "Bearer s3cret-token-123"}).status_code == 200


def test_token_in_url_sets_a_cookie_once_and_leaves_the_url(token_app):
    c = token_app.test_client()
    r = c.get("/runs/trainrun0001/episodes?task=todo_add&token=s3cret-token-123")
    assert r.status_code == 303
    assert r.headers["Location"] == "/runs/trainrun0001/episodes?task=todo_add"
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith(f"{TOKEN_COOKIE}=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert c.get("/runs/trainrun0001/episodes?task=todo_add").status_code == 200  # the cookie now
    assert c.get("/api/runs").status_code == 200


@pytest.mark.parametrize("host,code", [
    ("evil.example:8765", 400), ("evil.example", 400), ("127.0.0.1.evil.example", 400), ("[2001:db8::1]:80", 400),
    ("[::2]", 400), ("localhost.:8765", 400), ("127.0.0.1:8765", 200), ("localhost:8765", 200), ("[::1]:8765", 200),
    ("[::1]", 200), ("LOCALHOST:8765", 200), ("[::1]:", 400), ("user@localhost", 400),
    ("localhost/x", 400), ("", 400), ("[::1]x", 400), ("[0:0:0:0:0:0:0:1]:80", 400), ("127.0.0.1 :80", 400),
])
def test_foreign_host_header_is_refused_on_loopback(client, host, code):
    r = client.get("/api/runs", headers={"Host": host})
    assert r.status_code == code, host
    if code == 400:
        assert r.get_json()["status"] == 400  # an API error is JSON


def test_remote_app_accepts_other_hosts_with_token(runs):
    app = create_app(AppConfig(runs=runs.root, token="s3cret-token-123", loopback_only=False))
    c = app.test_client()
    h = {"Host": "farm1.lan:8765", TOKEN_HEADER: "s3cret-token-123"}
    assert c.get("/api/runs", headers=h).status_code == 200


def test_short_tokens_are_rejected(runs):
    with pytest.raises(ValueError, match="at least 8"):
        AppConfig(runs=runs.root, token="abc")


def test_scripts_never_write_markup():
    """Data reaches the DOM only through textContent / attributes, never parsed as HTML or run as code: every
    script the pages load is a file of ours with no HTML or code sink, the templates hold no inline script
    (no <script> without src, no on* handler, no javascript: URL), and the CSP would refuse one anyway."""
    import re
    from pathlib import Path

    import webui
    from webui.security import CSP

    root = Path(webui.__file__).parent
    static, templates = root / "static", root / "templates"
    scripts = sorted(static.rglob("*.js")) + sorted(static.rglob("*.mjs"))
    pages = sorted(templates.rglob("*.html"))
    assert scripts and pages, "no scripts or templates found: nothing was checked"
    loaded = set()
    for page in pages:
        html = page.read_text()
        for tag in re.findall(r"<script\b[^>]*>", html, flags=re.I):
            src = re.search(r"filename=['\"]([^'\"]+)['\"]", tag)
            assert src, (page.name, tag)  # a script tag loads a file of ours, never inline code
            loaded.add(src.group(1))
        assert not re.search(r"<script\b[^>]*>\s*[^<\s]", html, flags=re.I), page.name  # no inline body
        assert not re.search(r"\son[a-z]+\s*=", html, flags=re.I), page.name  # no handler attribute
        assert "javascript:" not in html.lower(), page.name
    assert loaded and loaded <= {str(p.relative_to(static)) for p in scripts}, loaded
    sinks = [r"\binnerHTML\b", r"\bouterHTML\b", r"\binsertAdjacentHTML\b", r"\bdocument\.write(ln)?\b",
             r"\beval\s*\(", r"\bnew\s+Function\b", r"\bFunction\s*\(", r"\bsrcdoc\b", r"\bDOMParser\b",
             r"\bcreateContextualFragment\b", r"\bsetHTMLUnsafe\b", r"\bparseHTMLUnsafe\b", r"\.html\s*\(",
             r"\bset(Timeout|Interval)\s*\(\s*['\"`]", r"javascript:", r"setAttribute\s*\(\s*['\"]on"]
    for js in scripts:
        text = js.read_text()
        for sink in sinks:
            assert not re.search(sink, text), (js.name, sink)
    policy = {d.split()[0]: d.split()[1:] for d in CSP.split(";") if d.strip()}
    assert policy["script-src"] == ["'self'"], policy.get("script-src")  # no inline script, no eval


def test_browsing_everything_writes_nothing(client, runs):
    """The UI is a reader: a crawl of every page and API leaves the run directories as they were."""
    def snapshot():
        return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in runs.root.rglob("*")
                if p.is_file() and not p.name.endswith("-shm")}

    before = snapshot()
    urls = ["/", "/api/runs"]
    for key in (runs.train_key, runs.eval_key):
        urls += [f"/runs/{key}", f"/runs/{key}/episodes", f"/api/runs/{key}", f"/api/runs/{key}/metrics",
                 f"/api/runs/{key}/tasks", f"/api/runs/{key}/filters", f"/api/runs/{key}/episodes?count=1"]
        for e in client.get(f"/api/runs/{key}/episodes?limit=100").get_json()["items"]:
            urls += [f"/episodes/{e['episode_id']}", f"/api/episodes/{e['episode_id']}"]
    for url in urls:
        assert client.get(url).status_code == 200, url
    assert snapshot() == before


def test_host_check_does_not_depend_on_werkzeug_trusted_hosts(runs, monkeypatch):
    """werkzeug 3.1.9 cuts trusted entries at their first ':' (so ``[::1]`` became ``[``): the
    guard is ours, so a change there cannot turn the server's own URL into a 400."""
    import werkzeug.sansio.utils as wz

    def cut_like_3_1_9(hostname, trusted_list=None):
        if not hostname:
            return False
        if not trusted_list:
            return True
        name = hostname.partition(":")[0]
        return any(ref.partition(":")[0] == name for ref in trusted_list)

    monkeypatch.setattr(wz, "host_is_trusted", cut_like_3_1_9)
    app = create_app(AppConfig(runs=runs.root, loopback_only=True, trusted_hosts=("[::1]",)))
    c = app.test_client()
    assert c.get("/api/runs", headers={"Host": "[::1]:8765"}).status_code == 200
    assert c.get("/api/runs", headers={"Host": "[2001:db8::1]:8765"}).status_code == 400
    assert "TRUSTED_HOSTS" not in app.config or not app.config["TRUSTED_HOSTS"]


@pytest.mark.parametrize("entry,host,code", [
    ("::1", "[::1]:8765", 200), ("[::1]", "[::1]", 200), ("MyBox.Local", "mybox.local:8765", 200),
    ("mybox.local", "evil.example:8765", 400),
])
def test_trusted_host_entries(runs, entry, host, code):
    app = create_app(AppConfig(runs=runs.root, loopback_only=True, trusted_hosts=(entry,)))
    assert app.test_client().get("/api/runs", headers={"Host": host}).status_code == code
