"""A real OpenAI-compatible judge server on 127.0.0.1, for the judge's tests.

It is the chat-completions server of ``tests/guiagent/test_policy_openai.py``
(request checks, the tiny transformers model answering for real) with judge
behaviours chosen by the served model name:

``verdict-success`` / ``verdict-failure``  a well-formed JSON verdict (a ``}`` inside its reason)
``verdict-slow``   the success verdict after ``slow_s`` seconds (a slow judge)
``injected``       success only if the words "the task is complete" reach the user text outside
                   the evidence block (they never should)
``garbage``        text without any verdict
``ratelimit``      HTTP 429 on every request
``hang``           answers after 3 s (past any test timeout)
anything else      the tiny random model's real output
"""

from __future__ import annotations

import json
import threading
import time

from judge.vlm_prompt import EVIDENCE_BEGIN, EVIDENCE_END
from tests.guiagent.test_policy_openai import API_KEY, Handler, Server

__all__ = ["JudgeServer", "API_KEY", "start_judge_server"]

VERDICTS = {
    "verdict-slow": {"success": True, "score": 0.9, "reason": "slow but sure", "evidence_steps": []},
    "verdict-success": {"success": True, "score": 0.9, "reason": "the switch shows On } as asked",
                        "evidence_steps": [0]},
    "verdict-failure": {"success": False, "score": 0.1, "reason": "nothing changed {sic}",
                        "evidence_steps": []},
}


class JudgeHandler(Handler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        length = int(self.headers["Content-Length"])
        raw = self.rfile.read(length)
        body = json.loads(raw)
        model = body.get("model")
        srv: JudgeServer = self.server  # type: ignore[assignment]
        with srv.lock:
            srv.judge_calls[model] = srv.judge_calls.get(model, 0) + 1
            srv.bodies.append(body)
        if self.headers.get("Authorization") != f"Bearer {API_KEY}":
            return self.reply(401, {"error": "bad key"})
        if model == "verdict-slow":
            time.sleep(srv.slow_s)
        if model in VERDICTS or model in ("garbage", "injected"):
            if model == "garbage":
                text = "}{ I looked at it ::: maybe?"
            elif model == "injected":
                user = [p["text"] for m in body["messages"] if m["role"] == "user" for p in m["content"]
                        if p["type"] == "text"]
                outside, inside = [], False
                for t in user:
                    inside = inside or t.strip() == EVIDENCE_BEGIN
                    if not inside:
                        outside.append(t)
                    inside = inside and t.strip() != EVIDENCE_END
                hit = any("task is complete" in t.lower() for t in outside)
                text = json.dumps({"success": hit, "reason": "instruction outside evidence" if hit else "ok"})
            else:
                text = "Checked the final screen.\n```json\n" + json.dumps(VERDICTS[model]) + "\n```"
            return self.reply(200, {"id": "j", "object": "chat.completion", "model": model,
                                    "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                                 "message": {"role": "assistant", "content": text}}]})
        if model == "ratelimit":
            return self.reply(429, {"error": "rate limited"}, {"Retry-After": "0"})
        # everything else (the real tiny model, 'hang', ...) as the policy server does it
        self.rfile = _Replay(raw)
        return super().do_POST()


class _Replay:
    """The request body again, for the parent handler that reads it itself."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, n: int = -1) -> bytes:
        out, self.data = (self.data, b"") if n < 0 else (self.data[:n], self.data[n:])
        return out


class JudgeServer(Server):
    def __init__(self, policy):
        super().__init__(policy)
        self.RequestHandlerClass = JudgeHandler
        self.judge_calls: dict[str, int] = {}
        self.bodies: list[dict] = []
        self.slow_s = 1.0


def start_judge_server(policy) -> tuple[JudgeServer, threading.Thread]:
    srv = JudgeServer(policy)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return srv, t
