"""The OpenAI-compatible HTTP backend: vLLM serve, SGLang, hosted APIs.

Each chat is one ``POST {base_url}/chat/completions``; images travel as base64
``data:`` URLs of the bytes as captured (PNG stays PNG). Requests run on
``max_concurrency`` daemon threads, so no more than that many are in flight, and
one blocked in a read never holds up the process's exit (Ctrl+C ends a command at
once); ``close()`` ends every call waiting on a request at once. 429, 5xx, connection errors and timeouts are retried with exponential
backoff and jitter (honouring ``Retry-After``); after ``max_retries`` a
:class:`~guiagent.policy.base.BackendError` says what happened.

The server is outside the project, and nothing it sends is trusted:

* each request has a wall-clock deadline, ``timeout`` seconds from its start to the last
  byte of the reply (a reply that trickles in is abandoned at the deadline, not only one
  that stops: the body is streamed and the time checked as it arrives; a silence of
  ``timeout`` seconds ends it too, so no attempt outlives twice ``timeout``); a request past
  it is a timeout, retried like one;
* a reply body larger than ``max_response_bytes`` (32 MiB) is refused as it streams in;
* every field read from a reply is checked: a reply that is not a JSON object, has no
  choice, text that is not text, log-probs that are not finite numbers, token ids that are
  not integers are a :class:`~guiagent.policy.base.BackendError` naming the field (the
  optional ``usage`` is ignored when malformed);
* the reply text kept is at most ``max_text_chars`` characters (default: the larger of
  64 KiB and 16 characters per token of ``max_new_tokens``); a longer reply is cut there and
  marked cut (``finish_reason="length"``, no token ids or log-probs kept), as is one with
  more log-prob entries than ``max_new_tokens``: its parse error is the model's, typed;
* what the server writes in an error (a 4xx body) is shown as one line, control
  characters escaped, and every error message names the server.

``timeout``, ``max_retries`` and ``max_response_bytes`` default to the environment
variables ``GUIAGENT_OPENAI_TIMEOUT``, ``GUIAGENT_OPENAI_MAX_RETRIES`` and
``GUIAGENT_OPENAI_MAX_BYTES`` when set (how ``guiagent eval --model URL`` takes them), else
120 s, 5 and 32 MiB.

Log-probs are requested (``logprobs: true``) and returned when the server gives
them; token ids when the server names tokens as ``token_id:N`` (vLLM's
``return_tokens_as_token_ids``). Note that servers cut stop strings from
``text``. Request ``i`` of a batch carries ``seed + i``, so a group of
identical chats still gets different samples.

A server that parses the model's text for it hands parts of that text back outside
``content``: vLLM's tool-call parser (``--enable-auto-tool-choice --tool-call-parser hermes``,
used when a request carries ``tools``) moves each call into ``message.tool_calls`` and may
leave ``content`` empty; a reasoning parser moves a thinking model's reasoning into
``reasoning_content`` (``reasoning`` in newer servers). Both are put back into the text as
the model wrote them (``<think>...</think>`` before the content, each call as
``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` after it), so action formats
parse the same reply whether or not the server split it.

Which model a request names: ``model`` (default ``"auto"``: the one model the server lists at
``GET /v1/models``, so ``vllm serve Qwen/Qwen2.5-VL-3B-Instruct`` needs no more; a server listing
several is an error asking for one by name; one that cannot list them is sent ``"default"``, with
a warning).

Example::

    >>> policy = OpenAIPolicy("http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-VL-3B-Instruct")  # doctest: +SKIP
    >>> policy.generate([chat], SamplingParams(temperature=0))[0].text                       # doctest: +SKIP
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import logging
import math
import os
import queue
import random
import re
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any

import httpx

from guiagent.policy.base import BackendError, Chat, Generation, SamplingParams, check_chat, to_png

__all__ = ["OpenAIPolicy", "to_openai_messages", "data_url", "message_text", "DEFAULT_TIMEOUT",
           "DEFAULT_MAX_RETRIES", "DEFAULT_MAX_RESPONSE_BYTES", "ENV_TIMEOUT", "ENV_MAX_RETRIES", "ENV_MAX_BYTES",
           "check_server_url", "options_from_env", "text_limit", "AUTO_MODEL", "FALLBACK_MODEL"]

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

DEFAULT_TIMEOUT = 120.0
"""seconds a request may take, from its start to the last byte of the reply"""
DEFAULT_MAX_RETRIES = 5
DEFAULT_MAX_RESPONSE_BYTES = 32 * 2**20
"""the largest reply body read (32 MiB: a reply of a few thousand tokens with log-probs is well under 1 MiB)"""
ENV_TIMEOUT = "GUIAGENT_OPENAI_TIMEOUT"
ENV_MAX_RETRIES = "GUIAGENT_OPENAI_MAX_RETRIES"
ENV_MAX_BYTES = "GUIAGENT_OPENAI_MAX_BYTES"
MIN_TEXT_CHARS = 64 * 1024
"""the reply text kept is at least this long (characters) before it is cut ..."""
TEXT_CHARS_PER_TOKEN = 16
"""... or this many characters per token of ``max_new_tokens``, whichever is more"""
AUTO_MODEL = "auto"
"""``model="auto"``: requests name the one model the server lists at ``GET {base_url}/models`` (vLLM
and SGLang list what they serve under its ``--served-model-name``), asked once, at the first request"""
FALLBACK_MODEL = "default"
"""the name sent when the server lists no model or cannot list them (servers that serve one model and
ignore the name, such as llama.cpp's, need no more)"""
MODELS_TIMEOUT = 10.0
"""the longest wait for the model list (seconds; the request deadline when that is shorter)"""
MAX_MODEL_NAME = 256
_MODELS_BYTES = 2**20  # the largest model list read
_ERROR_BODY_BYTES = 4096  # what is read of an error reply (its start is shown)
_SEND_PIECE = 64 * 1024  # the request body goes out in pieces of this size, the deadline checked between them
_MAX_TOKEN_ID = 2**31


def _mime(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"\xff\xd8"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "image/png"


def data_url(image: Any) -> str:
    """``data:image/png;base64,...`` for image bytes (sent as captured) or a PIL image (PNG)."""
    data = to_png(image)
    return f"data:{_mime(data)};base64,{base64.b64encode(data).decode('ascii')}"


def to_openai_messages(chat: Chat) -> list[dict[str, Any]]:
    """Our chat format -> chat-completions messages (images as ``image_url`` data URLs)."""
    out = []
    for m in chat:
        if isinstance(m["content"], str):
            out.append({"role": m["role"], "content": m["content"]})
            continue
        parts = [{"type": "text", "text": p["text"]} if p["type"] == "text"  # type: ignore[typeddict-item]
                 else {"type": "image_url", "image_url": {"url": data_url(p["image"])}}  # type: ignore[typeddict-item]
                 for p in m["content"]]
        out.append({"role": m["role"], "content": parts})
    return out


def message_text(message: dict[str, Any]) -> str:
    """The model's whole reply from a chat-completions ``message``: its reasoning, content and tool
    calls put back together as the model wrote them (see the module docstring).

    A call's ``arguments`` go back as they came: a JSON string stays a string, which the action
    formats parse (or reject as model output), so nothing the model wrote is lost here. A message
    whose fields have the wrong types is a server error (``ValueError`` naming the field)."""
    if not isinstance(message, dict):
        raise ValueError(f"message is not an object ({_short(message)})")
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts (some servers): their text, in order
        texts = []
        for j, p in enumerate(content):
            if isinstance(p, dict) and p.get("type") == "text":
                t = p.get("text") or ""
                if not isinstance(t, str):
                    raise ValueError(f"content[{j}].text is not text ({_short(t)})")
                texts.append(t)
        content = "".join(texts)
    if not isinstance(content, str):
        raise ValueError(f"content is not text ({_short(content)})")
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    if not isinstance(reasoning, str):
        raise ValueError(f"reasoning_content is not text ({_short(reasoning)})")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ValueError(f"tool_calls is not a list ({_short(calls)})")
    parts = [f"<think>\n{reasoning.strip()}\n</think>"] if reasoning.strip() else []
    if content:
        parts.append(content)
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError(f"tool_calls[{j}] has no function name ({_short(call)})")
        args = fn.get("arguments")
        if isinstance(args, str):
            try:  # the usual case: a JSON object as a string; kept as the model's text if not JSON
                args = json.loads(args)
            except (ValueError, RecursionError):
                pass
        try:
            call_json = json.dumps({"name": fn["name"], "arguments": args}, ensure_ascii=False)
        except (ValueError, RecursionError) as e:  # a float the JSON writer refuses, nesting too deep
            raise ValueError(f"tool_calls[{j}].function.arguments cannot be written back ({e})") from None
        parts.append(f"<tool_call>\n{call_json}\n</tool_call>")
    return "\n".join(parts)


def check_server_url(url: Any) -> str:
    """``url`` if it is an ``http(s)://`` URL with a host (an OpenAI-compatible server's base URL),
    else ``ValueError`` saying so: a local path or a hub id is no server, and retrying it cannot help."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"{_short(url)} is not an OpenAI-compatible server URL (http(s)://HOST[:PORT]/v1); "
                         "a model folder or hub id loads with the transformers or vllm backend")
    try:
        host = httpx.URL(url).host
    except (httpx.InvalidURL, ValueError, TypeError) as e:
        raise ValueError(f"{_short(url)} is not a valid server URL: {e}") from None
    if not host:
        raise ValueError(f"{_short(url)} names no host (http(s)://HOST[:PORT]/v1)")
    return url


def options_from_env(environ: Any = None) -> dict[str, Any]:
    """The options the environment sets (``timeout``, ``max_retries``, ``max_response_bytes``, from
    :data:`ENV_TIMEOUT`, :data:`ENV_MAX_RETRIES`, :data:`ENV_MAX_BYTES`); ``ValueError`` names a
    variable whose value is not a valid one."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    raw = env.get(ENV_TIMEOUT, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{ENV_TIMEOUT}={_short(raw)}: give the seconds a request may take (a number > 0)")
        out["timeout"] = value
    for name, key, least in ((ENV_MAX_RETRIES, "max_retries", 0), (ENV_MAX_BYTES, "max_response_bytes", 1)):
        raw = env.get(name, "").strip()
        if raw:
            if not re.fullmatch(r"[0-9]{1,12}", raw) or int(raw) < least:
                raise ValueError(f"{name}={_short(raw)}: give a whole number >= {least}")
            out[key] = int(raw)
    return out


def text_limit(max_new_tokens: int) -> int:
    """The longest reply text kept for a request of ``max_new_tokens`` tokens (characters)."""
    return max(MIN_TEXT_CHARS, TEXT_CHARS_PER_TOKEN * max_new_tokens)


def check_model_name(model: Any) -> None:
    """``model`` can be sent as a request's model name: text of 1..256 characters, no control
    characters, not blank. Raises ``ValueError``."""
    if not isinstance(model, str):
        raise ValueError(f"the served model's name must be text, got {type(model).__name__}")
    if not model.strip() or len(model) > MAX_MODEL_NAME or not model.isprintable():
        raise ValueError(f"the served model's name {_short(model)} is not a name (1..{MAX_MODEL_NAME} printable "
                         "characters, not blank)")


def _listed_ids(raw: bytes) -> list[str] | str:
    """The model names of a ``GET /models`` reply (OpenAI's ``{"data": [{"id": ...}, ...]}``), in order
    and once each; or why there are none to be read (text)."""
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return "a model list that is not JSON"
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return "a malformed model list"
    ids: list[str] = []
    for e in entries:
        name = e.get("id") if isinstance(e, dict) else None
        try:
            check_model_name(name)
        except ValueError:
            return "a malformed model list"
        if name not in ids:
            ids.append(name)
    return ids


class _Requests:
    """The threads that run a policy's requests, ``workers`` at most at once. They are daemon threads, so
    a request blocked in a read never holds up the process's exit (Ctrl+C ends a command at once, not
    at the request's deadline); :meth:`close` ends every call waiting on a request at once, with
    ``closed()``'s error, without waiting for the reads (a request in flight ends at its next read)."""

    def __init__(self, workers: int, closed: Any):
        self._workers = workers
        self._closed_error = closed
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending: set[Future] = set()
        self._started = False
        self._closed = False

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fut, fn, args = item
            if fut.done():  # ended by close() while it waited: nothing is sent
                continue
            try:
                result = fn(*args)
            except BaseException as e:  # handed to the caller, as a thread pool's future does
                with contextlib.suppress(InvalidStateError):
                    fut.set_exception(e)
            else:
                with contextlib.suppress(InvalidStateError):
                    fut.set_result(result)
            finally:
                with self._lock:
                    self._pending.discard(fut)

    def map(self, fn: Any, *iterables: Any) -> list[Any]:
        """``[fn(*args) for args in zip(*iterables)]``, run on the threads; the first error raised, in order."""
        futures = []
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if not self._started:
                for i in range(self._workers):
                    threading.Thread(target=self._work, name=f"openai-policy-{i}", daemon=True).start()
                self._started = True
            for args in zip(*iterables):
                fut: Future = Future()
                self._pending.add(fut)
                futures.append(fut)
                self._queue.put((fut, fn, args))
        return [f.result() for f in futures]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending, self._pending = list(self._pending), set()
            started = self._started
        for fut in pending:
            with contextlib.suppress(InvalidStateError):
                fut.set_exception(self._closed_error())
        for _ in range(self._workers if started else 0):
            self._queue.put(None)


class _Overdue(Exception):
    """A request ran past its deadline (retried like a timeout)."""


class _Closed(Exception):
    """The policy was closed while a request was in flight."""


class _NobodyThere(Exception):
    """Nothing listens at the server's address (connection refused): the model list is asked again later."""


class OpenAIPolicy:
    """A policy served by an OpenAI-compatible chat-completions endpoint (inference only).

    ``timeout``: the seconds a request may take, start to last byte (``connect_timeout`` bounds the
    connection alone); ``max_retries``: retries of a 429, a 5xx, a connection error or a timeout;
    ``max_response_bytes``: the largest reply body read; ``max_text_chars``: the longest reply text
    kept (None: :func:`text_limit` of the request's ``max_new_tokens``). ``timeout``, ``max_retries``
    and ``max_response_bytes`` left at None take the environment's values (:func:`options_from_env`),
    else the defaults. ``model``: the name requests carry (the server's ``--served-model-name``);
    ``"auto"``: see :data:`AUTO_MODEL` and :meth:`served_model`."""

    def __init__(self, base_url: str, *, model: str = AUTO_MODEL, api_key: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout: float | None = None, connect_timeout: float = 10.0,
                 max_retries: int | None = None, backoff: float = 0.5, max_backoff: float = 30.0,
                 max_concurrency: int = 8, logprobs: bool = True, extra_body: dict[str, Any] | None = None,
                 max_response_bytes: int | None = None, max_text_chars: int | None = None):
        check_server_url(base_url)
        check_model_name(model)
        env = options_from_env()
        timeout = env.get("timeout", DEFAULT_TIMEOUT) if timeout is None else timeout
        max_retries = env.get("max_retries", DEFAULT_MAX_RETRIES) if max_retries is None else max_retries
        max_response_bytes = (env.get("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES) if max_response_bytes is None
                              else max_response_bytes)
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if not (math.isfinite(connect_timeout) and connect_timeout > 0):
            raise ValueError(f"connect_timeout must be a number of seconds > 0, got {connect_timeout!r}")
        if max_response_bytes < 1:
            raise ValueError("max_response_bytes must be >= 1")
        if max_text_chars is not None and max_text_chars < 1:
            raise ValueError("max_text_chars must be >= 1")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        """the model requests name as given (``"auto"``: asked of the server, :meth:`served_model`)"""
        self._served: str | None = None if model == AUTO_MODEL else model
        self._served_error: BackendError | None = None
        self._model_lock = threading.Lock()
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_response_bytes = max_response_bytes
        self.max_text_chars = max_text_chars
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self.version = 0
        self.server = _display(self.url)
        """the server as error messages name it (no credentials, no query)"""
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        # the read timeout bounds a silence (the whole reply of a non-streamed request comes at its end);
        # the deadline (self.timeout from the start) bounds the request as a whole, checked as bytes move
        self._client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(self.timeout, connect=min(connect_timeout, self.timeout)),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency))
        self._pool = _Requests(max_concurrency, lambda: self._fail("the policy was closed while a request was in flight"))
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.stats = {"requests": 0, "retries": 0}

    def _body(self, chat: Chat, sampling: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.served_model(), "messages": to_openai_messages(chat),
            "max_tokens": sampling.max_new_tokens, "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.min_p:  # not in OpenAI's API; vLLM and SGLang servers accept it
            body["min_p"] = sampling.min_p
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if self.logprobs:
            body["logprobs"] = True
        body.update(self.extra_body)
        return body

    def _fail(self, what: str) -> BackendError:
        return BackendError(f"model server {self.server}: {what}")

    def _post(self, body: dict[str, Any]) -> Any:
        """The decoded JSON of a 200 reply, retrying what the retry policy retries."""
        payload = json.dumps(body).encode()
        last = ""
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                with self._lock:
                    self.stats["requests"] += 1
                status, headers, raw = self._fetch(payload)
                if status == 200:
                    return self._decode(raw)
                last = f"HTTP {status}{_excerpt(raw)}"
                if status not in RETRY_STATUS:
                    raise self._fail(f"answered {last}")
                retry_after = _retry_after(headers.get("retry-after"))
            except _Overdue:
                last = f"timeout: no whole reply within {self.timeout:g} s"
            except _Closed:
                raise self._fail("the policy was closed while a request was in flight") from None
            except httpx.TimeoutException as e:
                last = f"timeout ({type(e).__name__}, {self.timeout:g} s)"
            except httpx.TransportError as e:
                last = f"connection error ({type(e).__name__}: {_clip(str(e), 200)})"
            except httpx.HTTPError as e:  # a reply httpx cannot decode (a broken gzip body), a bad redirect
                raise self._fail(f"unreadable reply ({type(e).__name__}: {_clip(str(e), 200)})") from None
            if attempt == self.max_retries or self._closed.is_set():
                break
            with self._lock:
                self.stats["retries"] += 1
            delay = min(self.max_backoff, self.backoff * 2 ** attempt) * (0.5 + random.random() / 2)
            self._closed.wait(min(self.max_backoff, retry_after) if retry_after is not None else delay)
        raise self._fail(f"gave up after {self.max_retries + 1} attempts; last: {last}")

    def served_model(self) -> str:
        """The model name requests carry: ``model`` as given; for ``"auto"``, the one model the server
        lists at ``GET {base_url}/models``, asked once (later calls, from any thread, get the answer or
        the error of that one question). Several listed models are a :class:`BackendError` naming
        them; a server that cannot list its models (an error, no reply in time, not a list of names)
        gets :data:`FALLBACK_MODEL` and a warning."""
        with self._model_lock:
            if self._served is None and self._served_error is None:
                try:
                    self._served = self._listed_model()
                except _NobodyThere:
                    # nothing listens (yet): no answer to keep and nothing to warn of; this request goes out
                    # under the fallback name and fails (or not) on its own, and the next one asks again
                    return FALLBACK_MODEL
                except BackendError as e:
                    self._served_error = e
            if self._served_error is not None:
                raise self._served_error
            assert self._served is not None
            return self._served

    def _listed_model(self) -> str:
        try:
            status, _, raw = self._fetch(b"", method="GET", url=f"{self.base_url}/models",
                                         timeout=min(self.timeout, MODELS_TIMEOUT), limit=_MODELS_BYTES)
        except _Closed:
            raise self._fail("the policy was closed while a request was in flight") from None
        except _Overdue:
            why = f"no whole reply within {min(self.timeout, MODELS_TIMEOUT):g} s"
        except BackendError:  # a list past the size limit
            why = f"a model list over {_MODELS_BYTES:,} bytes"
        except httpx.ConnectError as e:
            raise _NobodyThere from e
        except httpx.HTTPError as e:
            why = f"{type(e).__name__}: {_clip(str(e), 120)}"
        else:
            ids = _listed_ids(raw) if status == 200 else None
            if status != 200:
                why = f"HTTP {status}"
            elif isinstance(ids, str):
                why = ids
            elif len(ids) == 1:
                log.info("model server %s serves %r: requests name it", self.server, ids[0])
                return ids[0]
            elif ids:
                shown = ", ".join(repr(m) for m in ids[:5]) + (", ..." if len(ids) > 5 else "")
                raise self._fail(f"serves {len(ids)} models ({shown}): name one with --served-model NAME "
                                 "(model= in Python)")
            else:
                why = "an empty model list"
        log.warning("model server %s: could not read which model it serves at %s/models (%s); requests name "
                    "the model %r (--served-model NAME names one)", self.server, _display(self.base_url),
                    _clip(why, 200), FALLBACK_MODEL)
        return FALLBACK_MODEL

    def _fetch(self, payload: bytes, *, method: str = "POST", url: str | None = None, timeout: float | None = None,
               limit: int | None = None) -> tuple[int, httpx.Headers, bytes]:
        """One request: (status, headers, body), within the deadline and the size limit (raises
        :class:`_Overdue` past the deadline; a 200 body over ``max_response_bytes``, or ``limit``, is a
        BackendError). The chat request by default; ``method``, ``url``, ``timeout`` for another."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)

        def check() -> None:
            if self._closed.is_set():
                raise _Closed()
            if time.monotonic() > deadline:
                raise _Overdue()

        def pieces() -> Iterator[bytes]:  # the deadline holds while a server reads the request slowly too
            for i in range(0, len(payload), _SEND_PIECE):
                check()
                yield payload[i:i + _SEND_PIECE]

        if method == "POST":
            headers = {"Content-Type": "application/json", "Content-Length": str(len(payload))}
            request = self._client.stream("POST", url or self.url, content=pieces(), headers=headers)
        else:
            request = self._client.stream(method, url or self.url, timeout=httpx.Timeout(
                self.timeout if timeout is None else timeout))
        ok_limit = self.max_response_bytes if limit is None else limit
        with request as r:
            check()
            ok = r.status_code == 200
            limit = ok_limit if ok else _ERROR_BODY_BYTES
            declared = r.headers.get("content-length", "").strip()
            if ok and declared.isdigit() and int(declared) > limit:
                raise self._too_large(f"announces {int(declared):,} bytes")
            chunks, size = [], 0
            for chunk in r.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    if not ok:  # enough of an error reply to show its start
                        break
                    raise self._too_large(f"ran past {limit:,} bytes")
                check()
            return r.status_code, r.headers, b"".join(chunks)

    def _too_large(self, what: str) -> BackendError:
        return self._fail(f"reply too large: the body {what}; the limit is {self.max_response_bytes:,} bytes "
                          f"(max_response_bytes, ${ENV_MAX_BYTES})")

    def _decode(self, raw: bytes) -> Any:
        try:
            return json.loads(raw, parse_constant=_no_constant)
        except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, NaN/Infinity, nesting too deep
            raise self._fail(f"reply is not JSON ({type(e).__name__}: {_clip(str(e), 120)}){_excerpt(raw)}") from None

    def _one(self, chat: Chat, sampling: SamplingParams) -> Generation:
        return self._generation(self._post(self._body(chat, sampling)), sampling.max_new_tokens)

    def _generation(self, data: Any, max_new_tokens: int) -> Generation:
        """A :class:`Generation` from a decoded reply, every field checked (see the module docstring)."""
        def bad(field: str, what: str, value: Any) -> BackendError:
            return self._fail(f"malformed reply: {field} {what} ({_short(value)})")

        if not isinstance(data, dict):
            raise bad("the reply", "is not a JSON object", data)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise bad("choices", "is not a non-empty list", choices)
        choice = choices[0]
        if not isinstance(choice, dict):
            raise bad("choices[0]", "is not an object", choice)
        try:
            text = message_text(choice.get("message"))
        except ValueError as e:
            raise self._fail(f"malformed reply: choices[0].message: {e}") from None
        finish = choice.get("finish_reason")
        if finish is not None and not isinstance(finish, str):
            raise bad("choices[0].finish_reason", "is not text", finish)
        cut = finish == "length"
        logprobs, ids = self._logprobs(choice.get("logprobs"), bad)
        limit = self.max_text_chars or text_limit(max_new_tokens)
        if len(text) > limit or len(logprobs) > max_new_tokens:
            # past what was asked for: cut, and marked so; log-probs and ids of a cut text would not match it
            text, logprobs, ids, cut = text[:limit], (), (), True
        return Generation(text=text, token_ids=ids, logprobs=logprobs, prompt_tokens=_prompt_tokens(data.get("usage")),
                          finish_reason="length" if cut else "stop", policy_version=self.version)

    def _logprobs(self, block: Any, bad: Any) -> tuple[tuple[float, ...], tuple[int, ...]]:
        """(log-probs, token ids) of ``choices[0].logprobs``: both empty when the server gave none."""
        if block is None:
            return (), ()
        if not isinstance(block, dict):
            raise bad("choices[0].logprobs", "is not an object", block)
        entries = block.get("content")
        if entries is None:
            return (), ()
        if not isinstance(entries, list):
            raise bad("choices[0].logprobs.content", "is not a list", entries)
        values: list[float] = []
        tokens: list[Any] = []
        for i, e in enumerate(entries):
            where = f"choices[0].logprobs.content[{i}]"
            if not isinstance(e, dict):
                raise bad(where, "is not an object", e)
            lp = e.get("logprob")
            if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not math.isfinite(lp) or lp > 1e-4:
                raise bad(f"{where}.logprob", "is not a finite number <= 0", lp)
            token = e.get("token", "")
            if not isinstance(token, str):
                raise bad(f"{where}.token", "is not text", token)
            values.append(float(lp))
            tokens.append(token)
        ids: tuple[int, ...] = ()
        if tokens and all(t.startswith("token_id:") for t in tokens):
            parsed = []
            for i, t in enumerate(tokens):
                digits = t[len("token_id:"):]
                if not re.fullmatch(r"[0-9]{1,10}", digits) or int(digits) >= _MAX_TOKEN_ID:
                    raise bad(f"choices[0].logprobs.content[{i}].token", "is not token_id:<id>", t)
                parsed.append(int(digits))
            ids = tuple(parsed)
        return tuple(values), ids

    def generate(self, chats: Sequence[Chat], sampling: SamplingParams = SamplingParams()) -> list[Generation]:
        """One request per chat, at most ``max_concurrency`` in flight; results in input order."""
        for c in chats:
            check_chat(c)
        # per-chat seeds when given, else seed + i: a group of identical chats must still get
        # different samples
        rows = sampling.for_rows(len(chats))
        per = [dataclasses.replace(sampling, seed=rows[i], seeds=None) if rows is not None else
               sampling if sampling.seed is None else dataclasses.replace(sampling, seed=sampling.seed + i)
               for i in range(len(chats))]
        return self._pool.map(self._one, chats, per)

    def close(self) -> None:
        """Stop: requests in flight end at their next read (a retry's wait ends at once)."""
        self._closed.set()
        self._pool.close()
        self._client.close()

    def __enter__(self) -> "OpenAIPolicy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _prompt_tokens(usage: Any) -> int:
    """``usage.prompt_tokens`` when it is a plausible count, else 0 (usage is optional: a malformed one
    is ignored)."""
    n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < _MAX_TOKEN_ID else 0


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _printable(text: str) -> str:
    """``text`` on one line, control and other unprintable characters escaped as ``repr`` writes them."""
    text = " ".join(text.split())
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def _clip(text: str, n: int) -> str:
    text = _printable(text[:4 * n])
    return text if len(text) <= n else text[:n] + "..."


def _short(value: Any) -> str:
    """A value from a reply, shown short and printable (its type when it is big)."""
    if isinstance(value, (dict, list)) and len(value) > 20:
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, str) and len(value) > 200:
        return repr(value[:80]) + f"... ({len(value):,} characters)"
    return _clip(repr(value), 120)


def _excerpt(raw: bytes) -> str:
    """``: <the start of a reply body>`` (one line, escaped), or nothing for an empty body."""
    text = _clip(raw[:_ERROR_BODY_BYTES].decode("utf-8", errors="replace"), 200)
    return f": {text}" if text else ""


def _display(url: str) -> str:
    """``url`` without credentials or query, printable: how messages name the server."""
    try:
        u = httpx.URL(url)
        shown = f"{u.scheme}://{u.netloc.decode('ascii', errors='replace').rpartition('@')[2]}{u.path}"
    except (httpx.InvalidURL, ValueError, TypeError):
        shown = url
    return _clip(shown, 200)
