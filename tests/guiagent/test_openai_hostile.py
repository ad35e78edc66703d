"""A hostile OpenAI-compatible server on 127.0.0.1: whatever it answers, the backend raises one
BackendError naming the server (or keeps a reply cut to size), and `guiagent eval` ends in one
escaped line, exit 1, its run stored `failed`: never a traceback, a hang or a store of hundreds of MB.

The server answers every ``POST /v1/chat/completions`` with what the test sets (``srv.answer``):
raw bytes, a body that trickles in, a body without end. Each test sets the timeouts and retries
it needs, so the suite runs in seconds.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from guiagent.policy import BackendError, SamplingParams, message
from guiagent.policy.openai_backend import OpenAIPolicy, options_from_env
from guiagent.store import EpisodeFilter, StoreReader
from tests.http_servers import serving


class Hostile(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.answer = ok("hello")
        self.requests = 0
        self.sent = 0  # body bytes written by the last streaming answer

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: Hostile

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.requests += 1
        try:
            self.server.answer(self)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: what a test may want
            pass


def send(h, status, body: bytes, *, length: int | None = None, headers=()):
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body) if length is None else length))
    for k, v in headers:
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(body)


def raw(status: int, body: bytes, **kw):
    return lambda h: send(h, status, body, **kw)


def reply(content="hello", *, usage=None, **choice) -> dict:
    c = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop", **choice}
    return {"id": "x", "object": "chat.completion", "choices": [c],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1} if usage is None else usage}


def ok(content="hello", **kw):
    return raw(200, json.dumps(reply(content, **kw)).encode())


def trickle(length: int, gap: float):
    """200, ``Content-Length: length``, then one byte every ``gap`` seconds (never a whole reply)."""
    def answer(h):
        h.send_response(200)
        h.send_header("Content-Length", str(length))
        h.end_headers()
        for _ in range(length):
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(gap)
    return answer


def endless(h):
    """200 without a Content-Length (HTTP/1.0: the body ends when the connection does), 1 MiB pieces
    of a JSON string for as long as the client reads."""
    h.send_response(200)
    h.end_headers()
    h.wfile.write(b'{"choices": [{"message": {"content": "')
    piece = b"x" * 2**20
    for _ in range(2000):
        h.wfile.write(piece)
        h.server.sent += len(piece)


@pytest.fixture(scope="module")
def server():
    with serving(Hostile()) as srv:
        yield srv


@pytest.fixture
def srv(server):
    server.answer, server.requests, server.sent = ok("hello"), 0, 0
    return server


def chat():
    return [message("user", "Goal: open the settings.")]


def policy(srv, **kw):
    kw = {"max_retries": 0, "backoff": 0.01, "timeout": 5.0, **kw}
    return OpenAIPolicy(srv.url, **kw)


def generate(p, max_new_tokens=8):
    [g] = p.generate([chat()], SamplingParams(max_new_tokens=max_new_tokens, temperature=0))
    return g


def no_control(text: str) -> bool:
    return all(c.isprintable() for c in text)


# -- the backend: every bad reply is one BackendError naming the server and the field ----------------

BAD_REPLIES = {
    "not JSON": (raw(200, b"<html>oops</html>"), r"reply is not JSON"),
    "a JSON list": (raw(200, b"[1, 2]"), r"the reply is not a JSON object \(\[1, 2\]\)"),
    "no choices": (raw(200, b'{"choices": []}'), r"choices is not a non-empty list"),
    "content 5": (raw(200, b'{"choices": [{"message": {"content": 5}}]}'), r"choices\[0\]\.message: content is not text"),
    "content part not text": (raw(200, b'{"choices": [{"message": {"content": [{"type": "text", "text": 7}]}}]}'),
                              r"content\[0\]\.text is not text"),
    "choice a string": (raw(200, b'{"choices": ["hi"]}'), r"choices\[0\] is not an object"),
    "finish_reason a number": (ok(finish_reason=3), r"choices\[0\]\.finish_reason is not text"),
    "logprobs a list": (ok(logprobs=[1]), r"choices\[0\]\.logprobs is not an object"),
    "logprobs.content [5]": (ok(logprobs={"content": [5]}), r"choices\[0\]\.logprobs\.content\[0\] is not an object"),
    "logprobs.content a string": (ok(logprobs={"content": "x"}), r"choices\[0\]\.logprobs\.content is not a list"),
    "logprob a string": (ok(logprobs={"content": [{"token": "a", "logprob": "abc"}]}),
                         r"content\[0\]\.logprob is not a finite number <= 0 \('abc'\)"),
    "logprob true": (ok(logprobs={"content": [{"token": "a", "logprob": True}]}), r"content\[0\]\.logprob is not"),
    "logprob NaN": (raw(200, b'{"choices": [{"message": {"content": "a"}, "logprobs": {"content": '
                             b'[{"token": "a", "logprob": NaN}]}}]}'), r"reply is not JSON .*NaN"),
    "logprob 1e999": (raw(200, b'{"choices": [{"message": {"content": "a"}, "logprobs": {"content": '
                               b'[{"token": "a", "logprob": -1e999}]}}]}'), r"content\[0\]\.logprob is not a finite"),
    "logprob positive": (ok(logprobs={"content": [{"token": "a", "logprob": 3.0}]}), r"content\[0\]\.logprob is not"),
    "token id not a number": (ok(logprobs={"content": [{"token": "token_id:abc", "logprob": -1.0}]}),
                              r"content\[0\]\.token is not token_id:<id> \('token_id:abc'\)"),
    "token id past 2**31": (ok(logprobs={"content": [{"token": "token_id:99999999999", "logprob": -1.0}]}),
                            r"content\[0\]\.token is not token_id"),
    "token a number": (ok(logprobs={"content": [{"token": 5, "logprob": -1.0}]}), r"content\[0\]\.token is not text"),
    "nested too deep": (raw(200, b"[" * 100_000 + b"]" * 100_000), r"reply is not JSON \(RecursionError"),
    "not UTF-8": (raw(200, b'{"choices": [{"message": {"content": "\xff\xfe"}}]}'), r"reply is not JSON"),
    "HTTP 400": (raw(400, b'{"error": "bad"}'), r"answered HTTP 400: \{\"error\": \"bad\"\}$"),
    "HTTP 500 after retries": (raw(500, b"boom"), r"gave up after 2 attempts; last: HTTP 500: boom$"),
}


@pytest.mark.parametrize("case", BAD_REPLIES)
def test_a_bad_reply_is_one_backend_error_naming_the_server_and_field(srv, case):
    """Before: a JSON list, ``content: 5``, ``logprobs.content: [5]`` ended in TypeError/AttributeError
    tracebacks, ``logprob: "abc"`` and ``token_id:abc`` in ValueErrors (shown as bad user input)."""
    srv.answer, pattern = BAD_REPLIES[case]
    with policy(srv, max_retries=1) as p:
        with pytest.raises(BackendError, match=pattern) as err:
            generate(p)
    text = str(err.value)
    assert text.startswith(f"model server {srv.url}/chat/completions: "), text
    assert no_control(text) and len(text) < 600, text


def test_an_error_reply_reaches_the_message_as_one_escaped_line(srv):
    """A 400 whose body holds an ANSI escape and a line break: both shown escaped, one line."""
    srv.answer = raw(400, b'{"error": "\x1b[31mred\nsecond line\x07"}')
    with policy(srv) as p:
        with pytest.raises(BackendError) as err:
            generate(p)
    text = str(err.value)
    assert no_control(text) and "\n" not in text
    assert '\\x1b[31mred second line\\x07' in text, text


def test_a_malformed_usage_is_ignored_and_nothing_wrong_is_kept(srv):
    for usage in ("x", {"prompt_tokens": "abc"}, {"prompt_tokens": -4}, {"prompt_tokens": True},
                  {"prompt_tokens": 10**30}, [1]):
        srv.answer = ok("hello", usage=usage)
        with policy(srv) as p:
            g = generate(p)
        assert (g.text, g.prompt_tokens) == ("hello", 0), usage
    srv.answer = ok("hello", usage={"prompt_tokens": 12})
    with policy(srv) as p:
        assert generate(p).prompt_tokens == 12


def test_good_log_probs_and_token_ids_still_come_back(srv):
    srv.answer = ok("ab", logprobs={"content": [{"token": "token_id:5", "logprob": -0.5},
                                               {"token": "token_id:7", "logprob": 0}]})
    with policy(srv) as p:
        g = generate(p)
    assert g.token_ids == (5, 7) and g.logprobs == (-0.5, 0.0) and g.finish_reason == "stop"


def test_a_reply_that_trickles_in_is_abandoned_at_the_deadline(srv):
    """Content-Length 1000, then a byte every 0.1 s: each read comes well within the read timeout, so
    before the deadline the request ran for 100 s (Content-Length 10^8 and a byte every 2 s: for ever)."""
    srv.answer = trickle(1000, 0.1)
    result: list = []

    def run():
        try:
            with policy(srv, timeout=1.0, max_retries=1) as p:
                generate(p)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            result.append(e)

    t0 = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the request ran on past its deadline"
    assert time.monotonic() - t0 < 6
    [e] = result
    assert isinstance(e, BackendError) and "gave up after 2 attempts; last: timeout: no whole reply within 1 s" in str(e)
    assert srv.requests == 2  # a request past its deadline is retried like a timeout


def test_a_reply_announcing_a_huge_body_is_refused_at_once(srv):
    srv.answer = trickle(100_000_000, 0.5)
    t0 = time.monotonic()
    with policy(srv, max_retries=3) as p:
        with pytest.raises(BackendError, match=r"reply too large: the body announces 100,000,000 bytes; the limit "
                                               r"is 33,554,432 bytes"):
            generate(p)
    assert time.monotonic() - t0 < 3 and srv.requests == 1  # not retried


def test_a_body_without_end_is_cut_off_at_the_size_limit(srv):
    srv.answer = endless
    with policy(srv, max_response_bytes=2**20) as p:
        with pytest.raises(BackendError, match=r"reply too large: the body ran past 1,048,576 bytes"):
            generate(p)
    time.sleep(0.2)
    # what the server got out before it noticed: socket buffers, nowhere near its 2 GB
    assert srv.sent < 64 * 2**20


def test_a_reply_longer_than_asked_for_is_cut_and_marked_cut(srv):
    """A 2 MB ``content`` for a request of 8 tokens: kept as its first 64 KiB (the floor of the text limit),
    marked ``length``, its log-probs (which no longer match the text) dropped."""
    entries = [{"token": "token_id:1", "logprob": -0.1}] * 3
    srv.answer = ok("x" * 2_000_000, logprobs={"content": entries})
    with policy(srv) as p:
        g = generate(p, max_new_tokens=8)
    assert len(g.text) == 64 * 1024 and g.finish_reason == "length" and g.logprobs == () and g.token_ids == ()
    with policy(srv, max_text_chars=100) as p:
        assert len(generate(p).text) == 100
    srv.answer = ok("short", logprobs={"content": [{"token": "token_id:1", "logprob": -0.1}] * 20})
    with policy(srv) as p:  # more log-prob entries than tokens asked for: cut too
        g = generate(p, max_new_tokens=8)
    assert (g.text, g.finish_reason, g.logprobs) == ("short", "length", ())


@pytest.mark.parametrize("spec", ["runs/sft/model", "/tmp/some-folder", "Qwen/Qwen2.5-VL-3B-Instruct", "http://",
                                  "ftp://127.0.0.1/v1"])
def test_a_value_that_is_no_server_url_is_refused_before_any_request(spec):
    with pytest.raises(ValueError, match="server URL|names no host"):
        OpenAIPolicy(spec)


def test_options_from_the_environment(monkeypatch):
    monkeypatch.setenv("GUIAGENT_OPENAI_TIMEOUT", "2.5")
    monkeypatch.setenv("GUIAGENT_OPENAI_MAX_RETRIES", "0")
    monkeypatch.setenv("GUIAGENT_OPENAI_MAX_BYTES", "1000")
    assert options_from_env() == {"timeout": 2.5, "max_retries": 0, "max_response_bytes": 1000}
    with OpenAIPolicy("http://127.0.0.1:9/v1") as p:
        assert (p.timeout, p.max_retries, p.max_response_bytes) == (2.5, 0, 1000)
    with OpenAIPolicy("http://127.0.0.1:9/v1", timeout=7, max_retries=2) as p:  # given ones win
        assert (p.timeout, p.max_retries) == (7.0, 2)
    for name, value in (("GUIAGENT_OPENAI_TIMEOUT", "abc"), ("GUIAGENT_OPENAI_TIMEOUT", "inf"),
                        ("GUIAGENT_OPENAI_TIMEOUT", "0"), ("GUIAGENT_OPENAI_MAX_RETRIES", "-1"),
                        ("GUIAGENT_OPENAI_MAX_BYTES", "0")):
        monkeypatch.setenv(name, value)
        with pytest.raises(ValueError, match=name):
            options_from_env()
        monkeypatch.setenv(name, "1")


# -- guiagent eval against the hostile server ---------------------------------------------------

def _eval(srv, uis1_run, out, *extra):
    from guiagent.cli.main import main

    return main(["eval", "--mode", "offline", "--agent", "model", "--model", srv.url, "--data", uis1_run,
                 "--out", str(out), "--episodes", "1", "--level", "high", *extra])


def _status(out):
    [run] = StoreReader(out).list_runs()
    return run.status


CLI_FAILURES = {
    "not JSON": (raw(200, b"<html>\x1b[2J</html>"), "reply is not JSON"),
    "HTTP 400 with ANSI and a line break": (raw(400, b'{"error": "\x1b[31mno\nsuch model"}'),
                                            'answered HTTP 400: {"error": "\\x1b[31mno such model"}'),
    "HTTP 500 after retries": (raw(500, b"boom"), "gave up after 2 attempts; last: HTTP 500: boom"),
    "no choices": (raw(200, b'{"choices": []}'), "choices is not a non-empty list"),
    "a JSON list": (raw(200, b"[1]"), "the reply is not a JSON object"),
    "content 5": (raw(200, b'{"choices": [{"message": {"content": 5}}]}'), "content is not text (5)"),
    "logprobs.content [5]": (ok(logprobs={"content": [5]}), "logprobs.content[0] is not an object"),
    "logprobs [1]": (ok(logprobs=[1]), "logprobs is not an object"),
    "logprob abc": (ok(logprobs={"content": [{"token": "a", "logprob": "abc"}]}), "logprob is not a finite number"),
    "token_id:abc": (ok(logprobs={"content": [{"token": "token_id:abc", "logprob": -1}]}), "is not token_id:<id>"),
    "a reply that trickles in": (trickle(1000, 0.1), "last: timeout: no whole reply within 1 s"),
    "a huge Content-Length": (trickle(100_000_000, 2.0), "reply too large"),
}


# through the CLI: three kinds in the default suite; every kind of reply is checked on the backend above,
# and the rest run through the CLI under -m slow (~1 s each)
CLI_DEFAULT = ("not JSON", "HTTP 400 with ANSI and a line break", "a reply that trickles in")


@pytest.mark.parametrize("case", [c if c in CLI_DEFAULT else pytest.param(c, marks=pytest.mark.slow)
                                  for c in CLI_FAILURES])
def test_eval_ends_a_server_failure_in_one_line_exit_1_and_a_failed_run(srv, uis1_run, tmp_path, capsys, monkeypatch,
                                                                        project_loggers, case):
    """Before: a traceback ending ``guiagent.policy.base.BackendError: ...`` (a 400's ANSI escapes and line
    break raw on the terminal), or exit 2 for a malformed number, or (a trickle) no end at all."""
    monkeypatch.setenv("GUIAGENT_OPENAI_TIMEOUT", "1")
    monkeypatch.setenv("GUIAGENT_OPENAI_MAX_RETRIES", "1")
    srv.answer, expected = CLI_FAILURES[case]
    assert _eval(srv, uis1_run, tmp_path / "out") == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"guiagent eval: model server {srv.url}/chat/completions: "), err
    assert expected in last and no_control(last), last
    assert "Traceback" not in err
    assert _status(tmp_path / "out") == "failed"


def test_eval_ignores_a_malformed_usage(srv, uis1_run, tmp_path, capsys, project_loggers):
    srv.answer = ok("no action here", usage="x")
    assert _eval(srv, uis1_run, tmp_path / "out") == 0
    assert _status(tmp_path / "out") == "finished"


def test_eval_keeps_a_reply_cut_to_size(srv, uis1_run, tmp_path, capsys, project_loggers):
    """A 2 MB ``content`` for --max-new-tokens 96: before, all of it went into the store (a 200 MB one: a
    400 MB store for one step). Now 64 KiB of it, its parse error typed and saying it was cut."""
    srv.answer = ok('{"action": ' + "x" * 2_000_000)
    assert _eval(srv, uis1_run, tmp_path / "out") == 0
    reader = StoreReader(tmp_path / "out")
    steps = [s for e in reader.list_episodes(EpisodeFilter()).items for s in reader.get_episode(e.episode_id).steps]
    assert len(steps) == 2
    for s in steps:
        assert len(s.response) == 64 * 1024 and s.action is None
        assert s.parse_error is not None and "cut off" in s.parse_error.message
    assert sum(f.stat().st_size for f in (tmp_path / "out").rglob("*") if f.is_file()) < 5_000_000


@pytest.mark.parametrize("how", ["flag", "config"])
def test_eval_refuses_a_folder_for_the_openai_backend_before_creating_anything(tmp_path, uis1_run, capsys, how):
    """``--backend openai`` (or ``backend: openai`` in a config) with a folder: before, ~15 s of retries of a
    URL that cannot work; now one line, exit 2, nothing created."""
    from guiagent.cli.main import main

    folder = tmp_path / "model"
    folder.mkdir()
    out = tmp_path / "out"
    argv = ["eval", "--mode", "offline", "--agent", "model", "--data", uis1_run, "--out", str(out)]
    if how == "flag":
        argv += ["--model", str(folder), "--backend", "openai"]
    else:
        cfg = tmp_path / "eval.yaml"
        cfg.write_text(f"backend: openai\nmodel: {folder}\n")
        argv += ["--config", str(cfg)]
    t0 = time.monotonic()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("guiagent eval: --model: --backend openai: ")
    assert "is not an OpenAI-compatible server URL" in err
    assert time.monotonic() - t0 < 5 and not out.exists()


def test_eval_refuses_a_url_for_a_backend_that_loads_weights(tmp_path, uis1_run, capsys):
    from guiagent.cli.main import main

    out = tmp_path / "out"
    assert main(["eval", "--mode", "offline", "--agent", "model", "--model", "http://127.0.0.1:9/v1", "--backend",
                 "transformers", "--data", uis1_run, "--out", str(out)]) == 2
    assert "--backend transformers loads the model's weights here" in capsys.readouterr().err
    assert not out.exists()


def test_eval_refuses_a_bad_timeout_in_the_environment(tmp_path, uis1_run, capsys, monkeypatch):
    from guiagent.cli.main import main

    monkeypatch.setenv("GUIAGENT_OPENAI_TIMEOUT", "soon\x1b")
    out = tmp_path / "out"
    assert main(["eval", "--mode", "offline", "--agent", "model", "--model", "http://127.0.0.1:9/v1", "--data",
                 uis1_run, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("guiagent eval: GUIAGENT_OPENAI_TIMEOUT='soon\\x1b'") and not out.exists()


# -- SIGTERM: stored interrupted, exit 143 --------------------------------------------------------

def _wait_for(cond, proc, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {seconds} s (exit {proc.poll()})")


def _run_row(out: Path):
    try:
        con = sqlite3.connect(f"{(out / 'store.sqlite').as_uri()}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT status FROM runs").fetchone()
        finally:
            con.close()
    except sqlite3.Error:  # no store yet, or its schema still being created
        return None
    return row[0] if row else None


def _terminate(argv, ready, out, seconds=90, sig=signal.SIGTERM, env=()):
    """Start ``guiagent *argv``, send it ``sig`` once ``ready()``; (exit status, stderr)."""
    # SIGINT as a terminal delivers it, whatever the test runner's own disposition (a job started in the
    # background of a non-interactive shell ignores SIGINT, and a child would inherit that)
    proc = subprocess.Popen([sys.executable, "-m", "guiagent", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GUIAGENT_OPENAI_MAX_RETRIES": "0", **dict(env)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for(ready, proc, seconds, "not started")
        proc.send_signal(sig)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return code, proc.stderr.read()


@pytest.mark.slow  # a subprocess eval (~5 s); tests/guiagent/test_eval_cli.py sends SIGTERM to an online eval by default
def test_sigterm_stores_the_eval_as_interrupted(srv, uis1_run, tmp_path):
    """Before: SIGTERM killed the process at once and the stored run stayed `running` for ever."""
    def slow(h):
        time.sleep(0.4)
        ok("no action")(h)

    srv.answer = slow
    out = tmp_path / "out"
    code, err = _terminate(["eval", "--mode", "offline", "--agent", "model", "--model", srv.url, "--data", uis1_run,
                            "--out", str(out), "--episodes", "2", "--level", "both"],
                           lambda: srv.requests > 0 and _run_row(out) == "running", out)
    assert code == 143, err[-2000:]
    assert err.strip().splitlines()[-1] == "guiagent eval: terminated (SIGTERM)"
    assert _status(out) == "interrupted"


def test_ctrl_c_ends_the_eval_at_once_while_a_request_waits_on_a_silent_server(srv, uis1_run, tmp_path):
    """Before: "guiagent eval: interrupted" was printed, then the process waited for the request in flight
    (its deadline, then each retry's: minutes) before it exited. Now the request threads hold up nothing."""
    srv.answer = lambda h: time.sleep(30)
    out = tmp_path / "out"
    sent = []
    code, err = _terminate(["eval", "--mode", "offline", "--agent", "model", "--model", srv.url, "--data", uis1_run,
                            "--out", str(out), "--episodes", "1", "--level", "high"],
                           lambda: srv.requests > 0 and not sent.append(time.monotonic()), out, sig=signal.SIGINT,
                           env={"GUIAGENT_OPENAI_TIMEOUT": "120", "GUIAGENT_OPENAI_MAX_RETRIES": "5"})
    assert time.monotonic() - sent[-1] < 15  # the signal to the exit (was the deadline and every retry's)
    assert code == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "guiagent eval: interrupted"
    assert _status(out) == "interrupted"


def test_close_ends_a_call_waiting_on_a_silent_server_at_once(srv):
    """close() from another thread: the waiting generate() raises at once (not at the 120 s deadline),
    and the request threads are daemon threads, so nothing holds up the process's exit."""
    srv.answer = lambda h: time.sleep(30)
    p = policy(srv, timeout=120)
    got = []
    t = threading.Thread(target=lambda: got.append(_raises(lambda: p.generate([chat()]))))
    t.start()
    deadline = time.monotonic() + 10
    while srv.requests == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    p.close()
    t.join(5)
    assert not t.is_alive() and time.monotonic() - t0 < 2
    [e] = got
    assert isinstance(e, BackendError) and "closed while a request was in flight" in str(e)
    workers = [th for th in threading.enumerate() if th.name.startswith("openai-policy")]
    assert workers and all(th.daemon for th in workers)
    with pytest.raises(BackendError, match="closed"):
        p.generate([chat()])


def _raises(fn):
    try:
        fn()
    except Exception as e:  # the error is what the test looks at
        return e
    return None


@pytest.mark.slow  # ~15-25 s: a subprocess loads torch and a tiny model, trains on recorded screens until the signal
def test_sigterm_stores_the_training_run_as_interrupted(uis1_run, tiny_model_dir, tmp_path):
    out = tmp_path / "train"
    code, err = _terminate(["train", "--mode", "semi-online", "--data", uis1_run, "--model", tiny_model_dir,
                            "--eval-episodes", "0", "--iterations", "50", "--out", str(out)],
                           lambda: _run_row(out) == "running", out, seconds=240)
    assert code == 143, err[-2000:]
    assert err.strip().splitlines()[-1] == "guiagent train: terminated (SIGTERM)"
    assert _status(out) == "interrupted"


# -- guiagent train: a model it cannot load leaves nothing behind -----------------------------------

def test_train_refuses_a_server_url_before_creating_anything(tmp_path, capsys, project_loggers):
    """Before: one line, but `.guiagent-train.json` and `config.yaml` were left in --out, and the next
    `train --out` there was refused as holding a training run."""
    from guiagent.cli.main import main

    out = tmp_path / "o_url"
    for _ in range(2):  # the second start is refused for the same reason, not for the first one's leftovers
        assert main(["train", "--out", str(out), "--model", "http://127.0.0.1:1/v1"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == ("guiagent train: --model http://127.0.0.1:1/v1: training loads the model's weights here; "
                       "give a model folder or a hub id (a server URL serves guiagent eval)")
        assert not out.exists()


def test_train_leaves_nothing_behind_when_the_weights_do_not_load(tmp_path, tiny_model_dir, capsys, project_loggers):
    """A model folder check_model_path lets through (config.json there) whose weights are torn: the start fails
    after the run marked its folder; the marker and config.yaml go again, and so does the folder it made."""
    import shutil

    from guiagent.cli.main import main

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--model", str(broken), "--iterations", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"guiagent train: the model {broken} cannot be loaded: ")
    assert not out.exists()
    # a folder that was there (empty) stays, empty
    out.mkdir()
    assert main(["train", "--out", str(out), "--model", str(broken), "--iterations", "1"]) == 2
    assert out.is_dir() and not any(out.iterdir())


def test_train_refuses_a_model_config_transformers_cannot_read(tmp_path, capsys, project_loggers):
    from guiagent.cli.main import main

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "no-such-architecture"}')
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--model", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"guiagent train: --model {folder}: cannot be loaded: ") and len(err.splitlines()) == 1
    assert not out.exists()

