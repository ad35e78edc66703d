"""The policy interface's value types and checks, and backend selection."""

from __future__ import annotations

import pytest

from guiagent.policy import ChatError, Generation, SamplingParams, check_chat, load_policy, message
from guiagent.policy.openai_backend import OpenAIPolicy, data_url, to_openai_messages


@pytest.mark.parametrize("chat, match", [
    ([], "non-empty"),
    ("hello", "non-empty list"),
    ([{"role": "robot", "content": "x"}], "role"),
    ([{"role": "user", "content": 3}], "content"),
    ([{"role": "user", "content": [{"type": "image", "image": "not bytes"}]}], "part 0"),
    ([{"role": "user", "content": [{"type": "text", "text": "ok"}, {"type": "video"}]}], "part 1"),
])
def test_bad_chats_raise_chat_error(chat, match):
    with pytest.raises(ChatError, match=match):
        check_chat(chat)


def test_good_chat_passes_and_message_builder():
    m = message("user", b"\x89PNG....", "hi")
    assert m == {"role": "user", "content": [{"type": "image", "image": b"\x89PNG...."},
                                             {"type": "text", "text": "hi"}]}
    check_chat([{"role": "system", "content": "s"}, m])


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(temperature=-1), "temperature"),
    (dict(top_p=0), "top_p"), (dict(stop="x"), "tuple"), (dict(min_p=1.0), "min_p"), (dict(min_p=-0.1), "min_p"),
])
def test_sampling_params_checks(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_generation_checks_lengths():
    with pytest.raises(ValueError):
        Generation("x", token_ids=(1, 2), logprobs=(-0.1,))
    assert Generation("x", (1, 2), (-0.5, -0.25)).logprob == -0.75


def test_openai_messages_use_data_urls():
    import base64

    png = b"\x89PNG\r\n\x1a\nrest"
    [sys_m, user] = to_openai_messages([{"role": "system", "content": "s"}, message("user", png, "go")])
    assert sys_m == {"role": "system", "content": "s"}
    url = user["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,") and base64.b64decode(url.split(",")[1]) == png
    assert data_url(b"\xff\xd8\xff\xe0jpeg").startswith("data:image/jpeg;base64,")


def test_load_policy_dispatch():
    p = load_policy("http://127.0.0.1:9/v1", model="m")
    assert isinstance(p, OpenAIPolicy) and p.base_url == "http://127.0.0.1:9/v1"
    p.close()
    with pytest.raises(ValueError, match="backend"):
        load_policy("x", backend="onnx")
