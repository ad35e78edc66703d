"""The OpenAI-compatible backend against a real chat-completions server on 127.0.0.1.

The server is a ``http.server`` app backed by the tiny transformers model: it
checks each request's shape (auth header, messages, image data URLs that decode
to the PNG sent, ``logprobs``) and answers with the model's real output.
Special model names make it misbehave: ``flaky`` (429 then 500 then OK),
``hang`` (never answers in time), ``slow`` (counts requests in flight), ``bad``
(a 400 that must not be retried).
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from PIL import Image

from guiagent.policy import BackendError, SamplingParams, load_policy, message
from guiagent.policy.hf import load_transformers
from guiagent.policy.openai_backend import OpenAIPolicy
from guiagent.policy.tiny import TinyModelSpec, build_tiny_model
from tests.http_servers import serving

API_KEY = "test-key-123"


def png(w: int, h: int, seed: int) -> bytes:
    g = torch.Generator().manual_seed(seed)
    buf = io.BytesIO()
    Image.fromarray((torch.rand((h, w, 3), generator=g) * 255).to(torch.uint8).numpy()).save(buf, format="PNG")
    return buf.getvalue()


_CALL = {"id": "chatcmpl-tool-1", "type": "function",
         "function": {"name": "mobile_use", "arguments": '{"action": "click", "coordinate": [546, 1204]}'}}
#: chat-completions messages as vLLM hands them back with --enable-auto-tool-choice
#: --tool-call-parser hermes (the call moved out of content) and a reasoning parser
SPLIT_REPLIES = {
    "tool-calls": {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    "tool-calls-reasoning": {"role": "assistant", "content": "Tapping the icon.", "tool_calls": [_CALL],
                             "reasoning_content": "The app icon sits in the middle of the screen."},
    "reasoning-new-name": {"role": "assistant", "reasoning": "Middle of the screen.",
                           "content": '<tool_call>\n{"name": "mobile_use", "arguments": {"action": "click", '
                                      '"coordinate": [546, 1204]}}\n</tool_call>'},
    "tool-calls-twice": {"role": "assistant", "content": "", "tool_calls": [_CALL, _CALL]},
    "tool-calls-bad-json": {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "mobile_use", "arguments": '{"action": "click", "coordinate": [5'}}]},
    "tool-calls-not-a-list": {"role": "assistant", "content": None, "tool_calls": "click"},
}


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, policy):
        super().__init__(("127.0.0.1", 0), Handler)
        self.policy = policy
        self.model_lock = threading.Lock()
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.calls: dict[str, int] = {}
        self.images: list[bytes] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.errors: list[str] = []

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, *args):  # keep pytest output clean
        pass

    def reply(self, status, obj, headers=None):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/chat/completions":
            return self.reply(404, {"error": "not found"})
        if self.headers.get("Authorization") != f"Bearer {API_KEY}":
            return self.reply(401, {"error": "bad key"})
        model = body.get("model")
        with srv.lock:
            n = srv.calls[model] = srv.calls.get(model, 0) + 1
        try:
            chat = self.to_chat(body)
        except (KeyError, ValueError, TypeError, AssertionError) as e:
            srv.errors.append(repr(e))
            return self.reply(400, {"error": f"bad request: {e}"})
        if model == "bad":
            return self.reply(400, {"error": "unsupported"})
        if model in SPLIT_REPLIES:  # a server whose parsers took the reply apart (vLLM's shape)
            return self.reply(200, {"id": "cmpl-2", "object": "chat.completion", "model": model,
                                    "choices": [{"index": 0, "message": SPLIT_REPLIES[model],
                                                 "finish_reason": "tool_calls"}],
                                    "usage": {"prompt_tokens": 7, "completion_tokens": 5}})
        if model == "flaky" and n == 1:
            return self.reply(429, {"error": "rate limited"}, {"Retry-After": "0"})
        if model == "flaky" and n == 2:
            return self.reply(500, {"error": "boom"})
        if model == "hang":
            time.sleep(3.0)
            return self.reply(200, {"choices": []})
        if model == "slow":
            with srv.lock:
                srv.in_flight += 1
                srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            time.sleep(0.3)
            with srv.lock:
                srv.in_flight -= 1
        sp = SamplingParams(max_new_tokens=body["max_tokens"], temperature=body["temperature"],
                            top_p=body["top_p"], seed=body.get("seed"))
        with srv.model_lock:
            [g] = srv.policy.generate([chat], sp)
        lp = [{"token": f"token_id:{t}", "logprob": p} for t, p in zip(g.token_ids, g.logprobs)]
        self.reply(200, {
            "id": "cmpl-1", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": g.text},
                         "finish_reason": g.finish_reason,
                         "logprobs": {"content": lp} if body.get("logprobs") else None}],
            "usage": {"prompt_tokens": g.prompt_tokens, "completion_tokens": len(g.token_ids)},
        })

    def to_chat(self, body):
        assert isinstance(body["max_tokens"], int) and body["logprobs"] is True
        chat = []
        for m in body["messages"]:
            assert m["role"] in ("system", "user", "assistant")
            if isinstance(m["content"], str):
                chat.append({"role": m["role"], "content": m["content"]})
                continue
            parts = []
            for p in m["content"]:
                if p["type"] == "text":
                    parts.append({"type": "text", "text": p["text"]})
                else:
                    assert p["type"] == "image_url"
                    head, b64 = p["image_url"]["url"].split(",", 1)
                    assert head == "data:image/png;base64"
                    data = base64.b64decode(b64, validate=True)
                    self.server.images.append(data)
                    parts.append({"type": "image", "image": data})
            chat.append({"role": m["role"], "content": parts})
        return chat


@pytest.fixture(scope="module")
def local_policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    build_tiny_model(TinyModelSpec(size="tiny"), out)
    return load_transformers(str(out), device="cpu")


@pytest.fixture(scope="module")
def server(local_policy):
    with serving(Server(local_policy)) as srv:
        yield srv


@pytest.fixture
def client_env(monkeypatch, server):
    monkeypatch.setenv("GUIAGENT_TEST_KEY", API_KEY)
    server.reset()
    return server


def chat(seed=1, w=112, h=112):
    return [{"role": "system", "content": "You are a phone agent."},
            message("user", png(w, h, seed), f"Goal: open app number {seed}.")]


def test_real_model_output_and_image_round_trip(client_env, local_policy):
    srv = client_env
    cs = [chat(1), chat(2, 84, 140)]
    with load_policy(srv.url, model="tiny", api_key_env="GUIAGENT_TEST_KEY") as p:
        gens = p.generate(cs, SamplingParams(max_new_tokens=8, temperature=0))
    assert not srv.errors
    assert sorted(srv.images) == sorted([cs[0][1]["content"][0]["image"], cs[1][1]["content"][0]["image"]])
    local = local_policy.generate(cs, SamplingParams(max_new_tokens=8, temperature=0))
    for g, ref in zip(gens, local):
        assert g.text == ref.text and g.token_ids == ref.token_ids
        assert max(abs(a - b) for a, b in zip(g.logprobs, ref.logprobs)) < 1e-4
        assert g.prompt_tokens == ref.prompt_tokens and g.finish_reason == "length"


def test_missing_key_is_rejected_without_retry(server, monkeypatch):
    monkeypatch.delenv("GUIAGENT_TEST_KEY", raising=False)
    server.reset()
    with OpenAIPolicy(server.url, model="tiny", api_key_env="GUIAGENT_TEST_KEY", max_retries=3) as p:
        with pytest.raises(BackendError, match="401"):
            p.generate([chat()], SamplingParams(max_new_tokens=2))
        assert p.stats["requests"] == 1


def test_retries_429_and_500_then_succeeds(client_env):
    with OpenAIPolicy(client_env.url, model="flaky", api_key_env="GUIAGENT_TEST_KEY", backoff=0.01) as p:
        [g] = p.generate([chat()], SamplingParams(max_new_tokens=4, temperature=0))
        assert p.stats == {"requests": 3, "retries": 2}
    assert client_env.calls["flaky"] == 3 and len(g.token_ids) == 4


def test_client_errors_are_not_retried(client_env):
    with OpenAIPolicy(client_env.url, model="bad", api_key_env="GUIAGENT_TEST_KEY", backoff=0.01) as p:
        with pytest.raises(BackendError, match="400"):
            p.generate([chat()], SamplingParams(max_new_tokens=2))
    assert client_env.calls["bad"] == 1


def test_timeout_retries_then_gives_up(client_env):
    t0 = time.perf_counter()
    with OpenAIPolicy(client_env.url, model="hang", api_key_env="GUIAGENT_TEST_KEY", timeout=0.3,
                      max_retries=1, backoff=0.01) as p:
        with pytest.raises(BackendError, match="timeout"):
            p.generate([chat()], SamplingParams(max_new_tokens=2))
    assert time.perf_counter() - t0 < 2.5  # two 0.3 s attempts, not the server's 3 s
    assert client_env.calls["hang"] == 2


def test_connection_refused_is_retried(monkeypatch):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with OpenAIPolicy(f"http://127.0.0.1:{port}/v1", max_retries=2, backoff=0.01) as p:
        with pytest.raises(BackendError, match="connection error"):
            p.generate([chat()], SamplingParams(max_new_tokens=2))
        assert p.stats["requests"] == 3


def test_concurrency_limit(client_env):
    with OpenAIPolicy(client_env.url, model="slow", api_key_env="GUIAGENT_TEST_KEY", max_concurrency=2) as p:
        gens = p.generate([chat(i) for i in range(5)], SamplingParams(max_new_tokens=2, temperature=0))
    assert len(gens) == 5 and client_env.max_in_flight == 2


def test_group_of_identical_chats_gets_distinct_seeds(client_env):
    c = chat(3)
    with OpenAIPolicy(client_env.url, model="tiny", api_key_env="GUIAGENT_TEST_KEY") as p:
        gens = p.generate([c, c, c], SamplingParams(max_new_tokens=8, temperature=1.0, seed=5))
        again = p.generate([c, c, c], SamplingParams(max_new_tokens=8, temperature=1.0, seed=5))
    assert len({g.token_ids for g in gens}) > 1
    assert [g.token_ids for g in gens] == [g.token_ids for g in again]


def test_per_chat_seeds_travel_one_per_request(client_env):
    c = chat(3)
    with OpenAIPolicy(client_env.url, model="tiny", api_key_env="GUIAGENT_TEST_KEY") as p:
        gens = p.generate([c, c], SamplingParams(max_new_tokens=8, temperature=1.0, seeds=(41, 42)))
        swapped = p.generate([c, c], SamplingParams(max_new_tokens=8, temperature=1.0, seeds=(42, 41)))
        [alone] = p.generate([c], SamplingParams(max_new_tokens=8, temperature=1.0, seed=42))
    assert gens[0].token_ids != gens[1].token_ids
    assert [g.token_ids for g in swapped] == [gens[1].token_ids, gens[0].token_ids]
    assert alone.token_ids == gens[1].token_ids  # the request carried seed 42, not 41 + 1


def test_replies_a_server_took_apart_are_put_back_together(client_env):
    """vLLM's tool-call and reasoning parsers move the call and the thinking out of ``content``;
    the policy's text holds them again, so the action format reads the same reply."""
    from grounding import get_format
    fmt = get_format("qwen_mobile")
    phone = (1080, 2400)
    texts = {}
    for model in SPLIT_REPLIES:
        with OpenAIPolicy(client_env.url, model=model, api_key_env="GUIAGENT_TEST_KEY", backoff=0.01,
                          max_retries=0) as p:
            if model == "tool-calls-not-a-list":
                with pytest.raises(BackendError, match=r"malformed reply: choices\[0\]\.message: tool_calls is not a list"):
                    p.generate([chat(1)], SamplingParams(max_new_tokens=8))
                continue
            [g] = p.generate([chat(1)], SamplingParams(max_new_tokens=8))
            texts[model] = g.text
    from guiagent.types import Click
    assert fmt.parse(texts["tool-calls"], phone) == Click(0.5, 0.5)
    assert fmt.parse(texts["tool-calls-reasoning"], phone) == Click(0.5, 0.5)
    assert fmt.thought(texts["tool-calls-reasoning"]) == ("The app icon sits in the middle of the screen.\n"
                                                          "Tapping the icon.")
    assert fmt.parse(texts["reasoning-new-name"], phone) == Click(0.5, 0.5)
    assert fmt.thought(texts["reasoning-new-name"]) == "Middle of the screen."
    # the model's own faults stay the model's: two calls, or arguments that are not JSON
    assert fmt.parse(texts["tool-calls-twice"], phone).code == "multiple_actions"
    assert fmt.parse(texts["tool-calls-bad-json"], phone).code == "malformed"
