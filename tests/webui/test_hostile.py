"""Hostile and broken input to the web UI: corrupt stores, planted symlinks, query values
that ``int()`` or SQLite refuse, CR/LF in paths, and a server that must stay bounded.

Each case asserts a 4xx (JSON on ``/api``) or a working page, and that nothing under
``--runs`` was written.
"""

from __future__ import annotations

import html
import io
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from guiagent.store import Store
from guiagent.store.schema import db_path
from tests.webui.conftest import short_trajectory
from webui import AppConfig, create_app
from webui.security import TOKEN_HEADER, RedactingRequestHandler

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hostile-token-1234"


def _snapshot(root: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and not p.name.endswith(("-wal", "-shm"))}


@pytest.fixture(scope="module")
def hostile_root(tmp_path_factory) -> Path:
    """``good`` (a finished run), ``dead`` (its writer exited), and three broken stores."""
    root = tmp_path_factory.mktemp("hostile")
    with Store.open(root / "good") as s:
        rid = s.create_run("good", run_id="good")
        s.write_trajectory(rid, short_trajectory("g-0", "todo_add", 1, 1.0, 3))
        s.write_trajectory(rid, short_trajectory("g-1", "todo_add", 2, 0.0, 2))
        s.set_run_status(rid, "finished")
    subprocess.run([sys.executable, "-c", "from guiagent.store import Store\n"
                    f"Store.open({str(root / 'dead')!r}).create_run('dead', run_id='dead')"],
                   cwd=ROOT, check=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    for name, content in (("garbage", b"this is not a database" * 50), ("empty", b""), ("creating", b"")):
        (root / name).mkdir()
        db_path(root / name).write_bytes(content)
    old = time.time() - 3600  # an empty store left for an hour is broken; a fresh one is being created
    os.utime(db_path(root / "empty"), (old, old))
    shutil.copytree(root / "good", root / "truncated")
    data = db_path(root / "truncated").read_bytes()
    db_path(root / "truncated").write_bytes(data[:len(data) // 3])
    return root


@pytest.fixture(scope="module")
def hostile_app(hostile_root):
    return create_app(AppConfig(runs=hostile_root, rescan_s=0))


def test_broken_stores_are_listed_and_the_rest_stays_browsable(hostile_app, hostile_root):
    os.utime(db_path(hostile_root / "creating"))  # an empty store this fresh is one a writer is creating
    before = _snapshot(hostile_root)
    c = hostile_app.test_client()
    r = c.get("/api/runs")
    assert r.status_code == 200
    body = r.get_json()
    assert {x["key"]: x["status"] for x in body["runs"]} == {"good~good": "finished", "dead~dead": "interrupted"}
    broken = {b["dir"]: b["error"] for b in body["broken"]}
    assert set(broken) == {"empty", "garbage", "truncated"}
    assert "an empty file (0 bytes)" in broken["empty"] and "not a readable" in broken["garbage"]
    assert all(str(hostile_root) not in why for why in broken.values())  # no absolute server paths
    page = c.get("/").get_data(as_text=True)
    assert "Unreadable run directories" in page and "garbage" in page and "status-interrupted" in page
    for url in ("/runs/good~good", "/runs/good/episodes", "/episodes/g-0", "/api/episodes/g-0",
                "/api/runs/good/episodes", "/compare?a=g-0&b=g-1"):
        assert c.get(url).status_code == 200, url
    for url in ("/runs/garbage", "/api/runs/truncated~good", "/api/episodes/nope"):
        r = c.get(url)
        assert r.status_code == 404, url
    assert _snapshot(hostile_root) == before


def test_a_store_that_breaks_under_a_request_is_a_503_for_that_run_only(hostile_root, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(hostile_root / "good", root / "a")
    shutil.copytree(hostile_root / "good", root / "b")
    with Store.open(root / "b") as s:  # give b its own run id
        s.create_run("b", run_id="bee")
    db = db_path(root / "a")
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    app = create_app(AppConfig(runs=root, rescan_s=3600))
    c = app.test_client()
    assert c.get("/api/runs/a~good").status_code == 200
    for reader in app.extensions["guiagent_registry"]._readers.values():
        reader.close()  # no cached pages: the next request reads the file
    data = bytearray(db.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # every page but the header and schema
    db.write_bytes(bytes(data))
    assert c.get("/api/episodes/g-0").get_json()["run"] == "b~good"  # the copy in b still answers
    for url in ("/api/runs/a~good", "/runs/a~good", "/runs/a~good/episodes", "/api/runs/a~good/metrics"):
        r = c.get(url)
        text = r.get_data(as_text=True)
        assert r.status_code in (404, 503) and "Traceback" not in text and "malformed" not in text, url
        assert r.is_json == url.startswith("/api/")
    assert c.get("/api/runs/b~bee").status_code == 200 and c.get("/").status_code == 200


def test_odd_directory_names_and_mangled_rows(tmp_path):
    root = tmp_path / "runs"
    odd = os.fsdecode(os.path.join(os.fsencode(root), b"bytes\xff"))
    for i, d in enumerate((odd, str(root / "new\nline"), str(root / "<b>x"), str(root / "mangled"))):
        with Store.open(d) as s:
            s.write_trajectory(s.create_run("r", run_id=f"r{i}"), short_trajectory(f"e{i}", "t", 1, 1.0, 2))
    con = sqlite3.connect(db_path(root / "mangled"))
    con.execute("UPDATE runs SET config = '{bad'")
    con.execute("UPDATE steps SET action = '{'")
    con.commit()
    con.close()
    c = create_app(AppConfig(runs=root)).test_client()
    runs = c.get("/api/runs").get_json()["runs"]
    assert {r["dir"] for r in runs} == {"bytes\\xff", "new\nline", "<b>x", "mangled"}
    page = c.get("/")
    assert page.status_code == 200 and b"<b>x" not in page.data  # escaped
    for r in runs:
        assert c.get(f"/runs/{r['key']}").status_code == 200
        assert c.get(f"/runs/{r['key']}/episodes").status_code == 200
    for eid in ("e0", "e1", "e2"):
        assert c.get(f"/episodes/{eid}").status_code == 200
    r = c.get("/api/episodes/e3")  # its step rows were mangled by another tool
    assert r.status_code == 503 and "malformed" in r.get_json()["error"]
    assert c.get("/episodes/e3").status_code == 503


@pytest.fixture(scope="module")
def damage_src(tmp_path_factory) -> Path:
    """A run whose episode "bad" (judged, trained on) is about to have one row mangled, beside "good"
    (same task: "bad" is in its siblings)."""
    root = tmp_path_factory.mktemp("damage")
    with Store.open(root / "r") as s:
        rid = s.create_run("r", run_id="r")
        s.write_trajectory(rid, short_trajectory("bad", "t", 1, 1.0, 3), started_at=1000.0)
        s.write_trajectory(rid, short_trajectory("good", "t", 2, 0.0, 2), started_at=1001.0)
        s.add_judgement("bad", "vlm", 0.9, verdict={"votes": [1, 0], "mode": "vote", "weight": 1.0,
                                                   "rule_success": 1.0}, reason="looks done")
        s.add_step_credit([("bad", 0, 0.5, None, None, {"anchor": 2.0})], iteration=0, algo="grpo")
        s.log_metrics(rid, 0, {"loss": 1.0})
    return root


_BAD_STEP = "UPDATE steps SET {} WHERE idx = 0 AND episode_pk = (SELECT pk FROM episodes WHERE id = 'bad')"
_BAD_EP = "UPDATE episodes SET {} WHERE id = 'bad'"
_VERDICT = "UPDATE judgements SET verdict = '{}'"


#: one row mangled with sqlite3 each: (what, SQL, how the UI shows it). "marked": every route answers,
#: the bad episode's summary names the field in ``damaged``; "503": the bad episode's own routes are its
#: run's 503, everything else answers; "shown": every route answers. Each of these once gave a 500.
DAMAGE = [
    ("success as text", _BAD_EP.format("success = 'yes'"), "marked"),
    ("started_at as text", _BAD_EP.format("started_at = 'noon'"), "marked"),
    ("total_reward as text", _BAD_EP.format("total_reward = 'lots'"), "marked"),
    ("metadata a list", _BAD_EP.format("metadata = '[1]'"), "marked"),
    ("params a string", _BAD_EP.format("params = '\"p\"'"), "marked"),
    ("task_id a BLOB", _BAD_EP.format("task_id = x'00ff'"), "marked"),
    ("reward_parts a list", _BAD_STEP.format("reward_parts = '[]'"), "503"),
    ("screenshot width -5", _BAD_STEP.format("width = -5"), "503"),
    ("screenshot height as text", _BAD_STEP.format("height = 'h'"), "503"),
    ("step metadata a list", _BAD_STEP.format("metadata = '[1]'"), "503"),
    ("malformed action", _BAD_STEP.format("action = '{'"), "503"),
    ("thought a BLOB", _BAD_STEP.format("thought = x'00ff'"), "503"),
    ("verdict a list", "UPDATE judgements SET verdict = '[1]'", "503"),
    ("verdict with words for numbers", _VERDICT.format('{"votes": ["a", {}], "mode": "m", "weight": "w", '
                                                      '"rule_success": "x"}'), "shown"),
    ("verdict votes a number, huge", _VERDICT.format('{"votes": 3, "shown_steps": 4, "weight": 1e400, '
                                                    '"rule_success": 1' + "0" * 400 + "}"), "shown"),
    ("judge name a BLOB", "UPDATE judgements SET judge = x'00ff'", "shown"),
    ("credit iteration as text", "UPDATE step_credit SET iteration = 'i'", "503"),
    ("credit detail a list", "UPDATE step_credit SET detail = '[1]'", "503"),
    ("credit detail with text", "UPDATE step_credit SET detail = '{\"anchor\": \"many\"}'", "shown"),
    ("run created_at as text", "UPDATE runs SET created_at = 'x'", "shown"),
    ("run config a list", "UPDATE runs SET config = '[1]'", "shown"),
    ("run name a BLOB", "UPDATE runs SET name = x'00ff'", "shown"),
]


@pytest.mark.parametrize("what,sql,shown", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_damaged_row_is_marked_or_its_episodes_503_never_a_500(damage_src, tmp_path, what, sql, shown):
    root = tmp_path / "runs"
    shutil.copytree(damage_src, root)
    con = sqlite3.connect(db_path(root / "r"))
    con.execute(sql)
    con.commit()
    con.close()
    before = _snapshot(root)
    c = create_app(AppConfig(runs=root)).test_client()
    own = ["/episodes/bad", "/episodes/bad?step=2", "/api/episodes/bad", "/api/episodes/bad/steps/0",
           "/compare?a=good&b=bad"]
    rest = ["/", "/api/runs", "/runs/r", "/api/runs/r", "/runs/r/episodes", "/api/runs/r/episodes",
            "/api/runs/r/episodes?sort=reward&limit=1", "/api/runs/r/metrics", "/api/runs/r/filters",
            "/episodes/good", "/api/episodes/good", "/api/episodes/good/siblings", "/api/episodes/bad/siblings"]
    for url in own + rest:
        r = c.get(url)
        text = r.get_data(as_text=True)
        # the step API reads no judgements and no credit: only a mangled step row is its 503
        want = 503 if shown == "503" and url in own and ("/steps/" not in url or "steps SET" in sql) else 200
        assert r.status_code == want, (what, url, r.status_code, text[-400:])
        assert r.is_json == url.startswith("/api/") and "Traceback" not in text
        if want == 503:
            message = r.get_json()["error"] if r.is_json else html.unescape(text)
            assert "this run's store cannot be read: episode 'bad'" in message and "malformed" in message, message
    listed = {e["episode_id"]: e for e in c.get("/api/runs/r/episodes").get_json()["items"]}
    assert set(listed) == {"bad", "good"} and "damaged" not in listed["good"]
    if shown == "marked":
        assert listed["bad"]["damaged"], listed["bad"]
        field = listed["bad"]["damaged"][0]
        assert listed["bad"][field] in (None, {})
        assert "damaged row" in c.get("/runs/r/episodes").get_data(as_text=True)
    else:
        assert "damaged" not in listed["bad"]
    assert _snapshot(root) == before


def test_what_the_ui_creates_in_a_run_folder_is_what_the_docs_say(tmp_path):
    """Reading a WAL store makes SQLite create its two side files (the docs once said the UI never
    writes): those two, empty or an index, and nothing else; every file that was there is untouched."""
    run = tmp_path / "r"
    with Store.open(run) as s:
        s.write_trajectory(s.create_run("r", run_id="r"), short_trajectory("w-0", "t", 1, 1.0, 2))
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()}
    assert db_path(run).name in {p.name for p in before} and not any(p.name.endswith(("-wal", "-shm")) for p in before)
    c = create_app(AppConfig(runs=tmp_path)).test_client()
    ref = c.get("/api/episodes/w-0").get_json()["steps"][0]["screenshot_ref"]
    for url in ("/", "/runs/r", "/runs/r/episodes", "/episodes/w-0", f"/img/r/{ref}", "/api/runs/r/metrics"):
        assert c.get(url).status_code == 200, url
    after = {p for p in run.rglob("*") if p.is_file()}
    created = {p.name for p in after - set(before)}
    assert created == {"store.sqlite-wal", "store.sqlite-shm"}
    assert (run / "store.sqlite-wal").stat().st_size == 0
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in before} == before
    doc = (ROOT / "docs" / "webui.md").read_text()
    assert "never writes" not in doc and all(f"`{name}`" in doc for name in created)


def test_planted_symlinks_in_blobs_serve_nothing(tmp_path):
    run = tmp_path / "runs" / "r"
    with Store.open(run) as s:
        rid = s.create_run("r", run_id="r")
        s.write_trajectory(rid, short_trajectory("s-0", "todo_add", 1, 1.0, 2))
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0 secret")
    app = create_app(AppConfig(runs=tmp_path / "runs"))
    c = app.test_client()
    refs = [st["screenshot_ref"] for st in c.get("/api/episodes/s-0").get_json()["steps"]]
    assert c.get(f"/img/r/{refs[0]}").status_code == 200
    # 1. a blob file replaced by a link to a file outside the run
    blob = next((run / "blobs" / refs[0][:2]).glob(refs[0] + ".*"))
    blob.unlink()
    blob.symlink_to(secret)
    # 2. a link under a well-formed name that never was a blob
    fake = "ab" * 32
    (run / "blobs" / "ab").mkdir(exist_ok=True)
    (run / "blobs" / "ab" / f"{fake}.png").symlink_to(secret)
    # 3. a whole shard directory that is a link to a folder outside the run
    outside = tmp_path / "outside"
    outside.mkdir()
    other = refs[1]
    shard = run / "blobs" / other[:2]
    for f in shard.iterdir():
        shutil.copy(f, outside / f.name)
    shutil.rmtree(shard)
    shard.symlink_to(outside, target_is_directory=True)
    # 4. a named pipe under a blob name (would block a reader)
    fifo_ref = "cd" * 32
    (run / "blobs" / "cd").mkdir(exist_ok=True)
    os.mkfifo(run / "blobs" / "cd" / f"{fifo_ref}.png")
    for ref in (refs[0], fake, other, fifo_ref):
        r = c.get(f"/img/r/{ref}")
        assert r.status_code == 404 and b"secret" not in r.data, ref


def test_judge_reports_behind_links_are_not_read(tmp_path):
    root = tmp_path / "runs"
    with Store.open(root / "r") as s:
        s.create_run("r", run_id="r")
    outside = tmp_path / "judge_eval_secret.json"
    outside.write_text('{"calibration": {"secret-marker": 1}, "disagreements": []}')
    (root / "r" / "judge_eval_link.json").symlink_to(outside)
    (root / "judge_eval_real.json").write_text('{"calibration": {"n": 3}, "disagreements": []}')
    c = create_app(AppConfig(runs=root)).test_client()
    page = c.get("/judge")
    assert page.status_code == 200 and b"judge_eval_real.json" in page.data and b"judge_eval_link" not in page.data
    assert b"secret-marker" not in c.get("/judge/report/0").data
    assert c.get("/judge/report/1").status_code == 404
    assert c.get("/judge/report/" + "9" * 40).status_code == 404


def test_screenshots_answer_conditional_requests(tmp_path):
    with Store.open(tmp_path / "r") as s:
        s.write_trajectory(s.create_run("r", run_id="r"), short_trajectory("c-0", "t", 1, 1.0, 1))
    c = create_app(AppConfig(runs=tmp_path / "r")).test_client()
    ref = c.get("/api/episodes/c-0").get_json()["steps"][0]["screenshot_ref"]
    full = c.get(f"/img/r/{ref}")
    assert full.status_code == 200 and full.headers["ETag"] == f'"{ref}"'
    assert c.get(f"/img/r/{ref}", headers={"If-None-Match": f'"{ref}"'}).status_code == 304
    assert c.get(f"/img/r/{ref}", headers={"If-None-Match": '"other"'}).status_code == 200
    assert full.headers["Last-Modified"] and "immutable" in full.headers["Cache-Control"]


BIG = str(2**63)


@pytest.mark.parametrize("url,code", [
    ("/episodes/g-0?step=--1", 400),
    ("/episodes/g-0?step=%C2%B2", 400),
    ("/episodes/g-0?step=1_0", 400),
    ("/episodes/g-0?step=" + "9" * 40, 400),
    ("/episodes/g-0?step=-5", 200),
    ("/compare?a=g-0&b=g-1&step=--3", 400),
    ("/compare?a=g-0&b=g-1&step=%C2%B2", 400),
    ("/compare?a=g-0&b=nope", 404),
    ("/api/episodes/g-0/siblings?limit=%C2%B2", 400),
    ("/api/episodes/g-0/siblings?limit=0", 400),
    ("/api/episodes/g-0/siblings?limit=--1", 400),
    ("/api/episodes/g-0/steps/" + BIG, 404),
    ("/api/episodes/g-0/steps/" + "9" * 100, 404),
    ("/api/episodes/g-0/steps/99", 404),
    ("/api/episodes/g-0/steps/-1", 404),
    ("/api/runs/good/episodes?cursor=WyJzdGFydGVkIix0cnVlLE5hTiwxXQ", 400),  # ["started",true,NaN,1]
    ("/api/runs/good/episodes?cursor=WyJzdGFydGVkIix0cnVlLDFlNDAwLDFd", 400),  # ["started",true,1e400,1]
    ("/api/runs/good/episodes?cursor=WyJzdGFydGVkIix0cnVlLDEsMWU0MDBd", 400),  # pk 1e400
    ("/api/runs/good/episodes?cursor=WyJzdGFydGVkIix0cnVlLDEsOTk5OTk5OTk5OTk5OTk5OTk5OTk5OV0", 400),
    ("/api/runs/good/episodes?min_reward=nan", 400),
    ("/api/runs/good/episodes?min_reward=1e400", 400),
    ("/api/runs/good/episodes?min_length=%C2%B2", 400),
    ("/api/runs/good/episodes?seed=" + BIG, 400),
    ("/api/runs/good/episodes?limit=" + "1" * 5000, 400),
    ("/runs/good/episodes?min_length=--2", 400),
    ("/runs/good/episodes?cursor=%00", 400),
    ("/api/runs/good%0d", 404),
    ("/api/runs/good%0d%0aX-Evil:%201", 404),
    ("/api/nope", 404),
    ("/api/runs/good/metrics?names=" + ",".join(["x"] * 5000), 200),
    ("/runs/nope", 404),
])
def test_hostile_query_values_are_4xx_never_500(hostile_app, hostile_root, url, code):
    before = _snapshot(hostile_root)
    r = hostile_app.test_client().get(url)
    assert r.status_code == code, (url, r.status_code, r.data[:300])
    text = r.get_data(as_text=True)
    if r.status_code >= 400 and url.startswith("/api/"):
        assert r.is_json and r.get_json()["status"] == code and r.get_json()["error"]
    for leak in ("Traceback", "_finite", "integer(", "int()", "_opt", "isdigit", "OverflowError", "sqlite3"):
        assert leak not in text, (url, leak)
    assert _snapshot(hostile_root) == before


@pytest.fixture(scope="module")
def token_app(hostile_root):
    return create_app(AppConfig(runs=hostile_root, token=TOKEN))


@pytest.mark.parametrize("url,headers,code", [
    ("/api/runs", {}, 401),
    ("/api/runs", {TOKEN_HEADER: "wrong-wrong-wrong"}, 401),
    ("/api/runs", {"Host": "evil.example"}, 400),  # the Host is checked before the token
    ("/api/runs", {TOKEN_HEADER: TOKEN, "Host": "evil.example"}, 400),
    ("/api/runs", {TOKEN_HEADER: TOKEN, "Host": "[2001:db8::1]"}, 400),
    ("/api/runs", {TOKEN_HEADER: TOKEN}, 200),
])
def test_api_auth_and_host_errors_are_json(token_app, url, headers, code):
    r = token_app.test_client().get(url, headers=headers)
    assert r.status_code == code
    if code != 200:
        assert r.is_json and r.get_json()["status"] == code


def test_token_redirect_with_cr_lf_in_the_path_is_safe(token_app):
    c = token_app.test_client()
    r = c.get(f"/runs/good%0d?token={TOKEN}")
    assert r.status_code == 303 and "\r" not in r.headers["Location"] and "\n" not in r.headers["Location"]
    assert r.headers["Location"] == "/runs/good%0D"
    r = token_app.test_client().get(f"/runs/good%0d%0aSet-Cookie:%20x=1?token={TOKEN}&task=a")
    assert r.status_code == 303 and "Set-Cookie: x=1" not in str(r.headers)
    assert r.headers["Location"].endswith("?task=a")


class _Server:
    """A real werkzeug server on 127.0.0.1 in a thread (as ``guiagent ui`` runs it)."""

    def __init__(self, app):
        from werkzeug.serving import make_server

        self.srv = make_server("127.0.0.1", 0, app, threaded=True, request_handler=RedactingRequestHandler)
        self.url = f"http://127.0.0.1:{self.srv.server_port}"
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def get(self, path: str, headers: dict | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_real_server_with_broken_stores_fds_stay_flat_and_token_never_logged(hostile_root):
    app = create_app(AppConfig(runs=hostile_root, token=TOKEN, rescan_s=0.2))
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    wlog = logging.getLogger("werkzeug")
    wlog.addHandler(handler)
    old_level = wlog.level
    wlog.setLevel(logging.INFO)
    srv = _Server(app)
    try:
        h = {TOKEN_HEADER: TOKEN}
        status, body = srv.get("/", h)
        assert status == 200 and b"Unreadable run directories" in body
        # the token in a URL is swapped for a cookie, and never reaches the access log
        status, _ = srv.get(f"/api/runs?token={TOKEN}")
        assert status == 401  # urllib follows the 303 without the cookie; the logged 303 is what counts
        paths = ["/", "/api/runs", "/runs/good", "/runs/good/episodes", "/episodes/g-0", "/api/episodes/g-0",
                 "/api/runs/good/episodes?step=--1"]
        for p in paths * 5:  # warm up: every thread-pool path and store connection exists
            srv.get(p, h)
        fds = len(os.listdir("/proc/self/fd"))
        for p in paths * 20:
            status, _ = srv.get(p, h)
            assert status in (200, 400)
        assert len(os.listdir("/proc/self/fd")) <= fds + 4  # 140 requests later, no growth
    finally:
        srv.close()
        wlog.removeHandler(handler)
        wlog.setLevel(old_level)
    text = log.getvalue()
    assert "GET /api/runs?token=[redacted]" in text and TOKEN not in text


#: reports of the right shape whose fields hold the wrong types; each once made /judge (and its own
#: page) answer 500, taking every report down with it
BADLY_TYPED = [
    {"calibration": {"agreement": "high", "n": 3}},
    {"calibration": {"n": 3}, "judge": "a string, not a mapping"},
    {"calibration": {"n": 3}, "judge": {"model": "m", "votes": "3"}},
    {"calibration": {"n": 3}, "disagreements": 7},
    {"calibration": {"n": 3}, "disagreements": [{"episode_id": "e", "rule_success": "yes"}]},
    {"calibration": {"n": 3}, "missing_reasons": ["timeout"], "missing": 1},
    {"calibration": {"n": 3}, "seconds": "fast"},
    {"calibration": {"n": 3}, "missing_episodes": {"episode_id": "e"}},
    {"calibration": [1, 2, 3]},
]


def test_badly_typed_judge_reports_are_listed_with_the_reason_and_never_500(tmp_path):
    import json

    root = tmp_path / "runs"
    with Store.open(root / "r") as s:
        s.create_run("r", run_id="r")
    good = {"calibration": {"n": 4, "tp": 2, "fp": 1, "tn": 1, "fn": 0, "agreement": 0.75, "precision": 0.667,
                            "recall": 1.0, "kappa": 0.5},
            "judge": {"model": "http://judge/v1", "votes": 3, "evidence": "key_screens"}, "episodes": 4,
            "missing": 0, "missing_reasons": {}, "calls": 12, "seconds": 3.5,
            "disagreements": [{"episode_id": "nope", "task_id": "todo_add", "seed": 3, "goal": "add",
                               "rule_success": 0.0, "judge_success": True, "judge_score": 0.9,
                               "judge_reason": "looks done"}], "missing_episodes": []}
    (root / "judge_eval_a_good.json").write_text(json.dumps(good))
    for i, bad in enumerate(BADLY_TYPED):
        (root / f"judge_eval_b{i}.json").write_text(json.dumps(bad))
    c = create_app(AppConfig(runs=root)).test_client()
    page = c.get("/judge")
    assert page.status_code == 200, page.data[-2000:]
    text = page.data.decode()
    assert text.count("not a judge eval report") == len(BADLY_TYPED)
    assert "judge_eval_a_good.json" in text and "http://judge/v1" in text and "0.75" in text
    good_page = c.get("/judge/report/0")
    assert good_page.status_code == 200 and b"looks done" in good_page.data
    for n in range(1, len(BADLY_TYPED) + 1):
        r = c.get(f"/judge/report/{n}")
        assert r.status_code == 404 and b"not a judge eval report" in r.data, (n, r.data[-500:])
    assert c.get("/").status_code == 200  # the run list (whose template asks for reward weights) too
