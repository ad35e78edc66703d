"""Which model a request names, against a server on 127.0.0.1 that answers as vLLM's does.

``vllm serve Qwen/Qwen2.5-VL-3B-Instruct`` serves the model under that name (its
``--served-model-name``) and answers a chat naming any other model with a 404 ("The model
`default` does not exist."). ``OpenAIPolicy(url)`` (model ``"auto"``, the default) asks the server
once at ``GET /v1/models`` and names the one model it lists; several listed is one clear error
asking for ``--served-model``; a server that cannot list its models (404, garbage) is sent
``"default"``, as before, with a warning. ``--served-model NAME`` names it and asks nothing.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from guiagent.policy import BackendError, SamplingParams, message
from guiagent.policy.openai_backend import AUTO_MODEL, OpenAIPolicy
from guiagent.store import StoreReader
from tests.http_servers import serving

SERVED = "Qwen/Qwen2.5-VL-3B-Instruct"


class VLLMLike(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.reset()

    def reset(self, served=(SERVED,), models=None, content="hello"):
        self.served = list(served)
        self.models = models  # None: vLLM's list of self.served; else (status, body bytes)
        self.content = content
        self.lists = 0  # GET /v1/models
        self.named: list[str] = []  # the model each chat named

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


def _send(h, status: int, body: bytes) -> None:
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


class _Handler(BaseHTTPRequestHandler):
    server: VLLMLike

    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        if self.path != "/v1/models":
            return _send(self, 404, b'{"detail": "Not Found"}')
        with srv.lock:
            srv.lists += 1
        if srv.models is not None:
            return _send(self, *srv.models)
        data = [{"id": m, "object": "model", "created": 1764300000, "owned_by": "vllm", "root": m, "parent": None,
                 "max_model_len": 32768} for m in srv.served]
        _send(self, 200, json.dumps({"object": "list", "data": data}).encode())

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.named.append(body["model"])
        if body["model"] not in srv.served:  # vLLM's answer, word for word
            err = {"object": "error", "message": f"The model `{body['model']}` does not exist.",
                   "type": "NotFoundError", "param": None, "code": 404}
            return _send(self, 404, json.dumps(err).encode())
        reply = {"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": srv.content},
                              "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
        _send(self, 200, json.dumps(reply).encode())


@pytest.fixture(scope="module")
def server():
    with serving(VLLMLike()) as srv:
        yield srv


@pytest.fixture
def srv(server):
    server.reset()
    return server


def _chats(n=1):
    return [[message("user", f"Goal: open the settings ({i}).")] for i in range(n)]


def _policy(srv, **kw):
    kw.setdefault("max_retries", 0)
    return OpenAIPolicy(srv.url, **kw)


def test_auto_names_the_one_model_the_server_lists_and_asks_once(srv):
    p = _policy(srv, max_concurrency=4)
    try:
        assert p.model == AUTO_MODEL and srv.lists == 0  # nothing asked before the first request
        out = p.generate(_chats(8), SamplingParams(max_new_tokens=4))
        assert [g.text for g in out] == ["hello"] * 8
        assert srv.named == [SERVED] * 8 and srv.lists == 1  # asked once, however many requests at once
        assert p.served_model() == SERVED
        p.generate(_chats(2))
        assert srv.lists == 1
    finally:
        p.close()


def test_the_old_default_name_is_what_vllm_refuses(srv):
    """Why: the name "default" is not served, and vLLM says so in a 404 the policy does not retry."""
    p = _policy(srv, model="default")
    try:
        with pytest.raises(BackendError, match="HTTP 404.*The model `default` does not exist"):
            p.generate(_chats())
        assert srv.lists == 0
    finally:
        p.close()


def test_a_named_model_is_sent_and_nothing_is_asked(srv):
    srv.reset(served=[SERVED, "judge"])
    p = _policy(srv, model="judge")
    try:
        assert p.generate(_chats())[0].text == "hello"
        assert srv.named == ["judge"] and srv.lists == 0
    finally:
        p.close()


def test_several_listed_models_are_one_error_that_names_them_and_the_flag(srv):
    srv.reset(served=["a-model", "b-model", "c-model"])
    p = _policy(srv)
    try:
        for _ in range(2):  # the same error each time, asked once
            with pytest.raises(BackendError) as e:
                p.generate(_chats())
            msg = str(e.value)
            assert msg.startswith(f"model server {srv.url}/chat/completions: serves 3 models ")
            assert "'a-model', 'b-model', 'c-model'" in msg and "--served-model" in msg and "\n" not in msg
        assert srv.lists == 1 and srv.named == []
    finally:
        p.close()


@pytest.mark.parametrize("models, why", [
    ((404, b'{"detail": "Not Found"}'), "HTTP 404"),
    ((200, b"not json"), "a model list that is not JSON"),
    ((200, b'{"data": "x"}'), "a malformed model list"),
    ((200, b'{"data": [{"id": 5}]}'), "a malformed model list"),
    ((200, b'{"data": [{"id": "bad\\u001b[31mname"}]}'), "a malformed model list"),
    ((200, json.dumps({"data": [{"id": "x" * 300}]}).encode()), "a malformed model list"),
    ((200, b'{"data": []}'), "an empty model list"),
    ((200, b"[" * 100_000 + b"]" * 100_000), "a model list that is not JSON"),
])
def test_a_server_that_cannot_list_its_models_is_sent_default_with_a_warning(srv, caplog, models, why):
    srv.reset(served=["default"], models=models)
    p = _policy(srv)
    try:
        with caplog.at_level(logging.WARNING, logger="guiagent.policy.openai_backend"):
            assert p.generate(_chats())[0].text == "hello"
        assert srv.named == ["default"] and srv.lists == 1
        [rec] = [r for r in caplog.records if "could not read which model" in r.getMessage()]
        line = rec.getMessage()
        assert why in line and "--served-model" in line and "\x1b" not in line and "\n" not in line
    finally:
        p.close()


def test_nothing_listening_is_asked_again_and_warns_of_nothing(srv, caplog):
    """Connection refused at the model list (a server not up yet, a wrong port): no answer is kept and
    no warning printed (the request's own failure is the one line a user sees); once the server
    answers, the list is read and its model named."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    p = OpenAIPolicy(f"http://127.0.0.1:{dead}/v1", max_retries=0)
    try:
        with caplog.at_level(logging.WARNING, logger="guiagent.policy.openai_backend"):
            assert p.served_model() == "default"
            with pytest.raises(BackendError, match="Connection refused"):
                p.generate(_chats())
        assert not [r for r in caplog.records if "could not read which model" in r.getMessage()]
        p.base_url = srv.url  # the same policy once a server answers there
        assert p.served_model() == SERVED and srv.lists == 1
    finally:
        p.close()


@pytest.mark.parametrize("bad", ["", " ", "a\nb", "x" * 300, 5])
def test_a_bad_model_name_is_refused_at_once(srv, bad):
    with pytest.raises(ValueError, match="model"):
        OpenAIPolicy(srv.url, model=bad)


# -- through guiagent eval ----------------------------------------------------------------------

def _eval(srv, uis1_run, out, *extra):
    from guiagent.cli.main import main

    return main(["eval", "--mode", "offline", "--agent", "model", "--model", srv.url, "--data", uis1_run,
                 "--out", str(out), "--episodes", "1", "--level", "high", "--action-format", "qwen_mobile",
                 *extra])


def test_eval_against_a_vllm_like_server_names_its_model(srv, uis1_run, tmp_path, capsys, project_loggers):
    """`vllm serve <model>`, then `guiagent eval --model http://.../v1`: before, every request named
    "default" and the run failed on the server's 404."""
    srv.content = ('<tool_call>\n{"name": "mobile_use", "arguments": {"action": "click", '
                   '"coordinate": [500, 600]}}\n</tool_call>')
    assert _eval(srv, uis1_run, tmp_path / "out") == 0, capsys.readouterr().err
    assert srv.named and set(srv.named) == {SERVED} and srv.lists == 1
    [run] = StoreReader(tmp_path / "out").list_runs()
    assert run.status == "finished"


def test_eval_served_model_flag(srv, uis1_run, tmp_path, capsys, project_loggers):
    srv.reset(served=[SERVED, "other"])
    assert _eval(srv, uis1_run, tmp_path / "out", "--served-model", "other") == 0, capsys.readouterr().err
    assert set(srv.named) == {"other"} and srv.lists == 0


def test_eval_request_flags_reach_the_backend(srv, uis1_run, tmp_path, capsys, project_loggers, monkeypatch):
    """--request-timeout and --request-retries go to the policy, over the environment's values."""
    import rl.evaluate as ev

    monkeypatch.setenv("GUIAGENT_OPENAI_TIMEOUT", "99")
    made = []
    real = ev.load_agent

    def spy(*args, **kw):
        agent = real(*args, **kw)
        made.append(agent.backend)
        return agent

    monkeypatch.setattr(ev, "load_agent", spy)
    assert _eval(srv, uis1_run, tmp_path / "out", "--request-timeout", "7.5", "--request-retries", "2") == 0, \
        capsys.readouterr().err
    [p] = made
    assert (p.timeout, p.max_retries) == (7.5, 2)


def test_eval_with_several_models_and_no_flag_fails_in_one_line(srv, uis1_run, tmp_path, capsys, project_loggers):
    srv.reset(served=[SERVED, "other"])
    assert _eval(srv, uis1_run, tmp_path / "out") == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"guiagent eval: model server {srv.url}/chat/completions: serves 2 models"), err
    assert "--served-model" in last and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["--model", "runs/x", "--served-model", "m"], "--served-model names the model on a server"),
    (["--model", "http://127.0.0.1:9/v1", "--served-model", ""], "--served-model"),
    (["--model", "runs/x", "--request-timeout", "5"], "--request-timeout and --request-retries are for a model on"),
    (["--model", "http://127.0.0.1:9/v1", "--request-timeout", "0"], "--request-timeout must lie in (0, 86400]"),
    (["--model", "http://127.0.0.1:9/v1", "--request-timeout", "nan"], "--request-timeout must lie in (0, 86400]"),
    (["--model", "http://127.0.0.1:9/v1", "--request-retries", "-1"], "--request-retries must lie in 0..100"),
])
def test_eval_refuses_a_served_model_it_cannot_use(tmp_path, capsys, argv, message):
    from guiagent.cli.main import main

    out = tmp_path / "out"
    assert main(["eval", "--agent", "model", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


# -- the judge ------------------------------------------------------------------------------------

def test_a_judge_on_a_server_names_its_listed_model_in_verdicts_and_cache_keys(srv, tmp_path):
    from judge.settings import JudgeSettings, make_judge

    judge = make_judge(JudgeSettings(model=srv.url, retries=0, mode="log"), str(tmp_path))
    try:
        assert judge.judge.model_id == f"{srv.url}#{SERVED}" and srv.lists == 1
    finally:
        judge.close()
