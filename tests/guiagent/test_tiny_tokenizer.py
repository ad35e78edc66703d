"""The tiny model's tokenizers: ``prefixed`` (GPT-2 / Qwen splitting) and ``bare`` (a space is a token of
its own, so a name is the same token ids in a goal, in the element list and in a reply)."""

from __future__ import annotations

import json

import pytest

from grounding.marks import mark_line
from guiagent.policy.tiny import TinyModelSpec, train_tokenizer
from guiagent.types import Mark


@pytest.fixture(scope="module")
def bare():
    return train_tokenizer(words="bare")


@pytest.fixture(scope="module")
def prefixed():
    return train_tokenizer()


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def _contains(seq: list[int], sub: list[int]) -> bool:
    return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


# names as the webapps and MiniWoB++ screens write them: one-token, many-token, with punctuation, unseen
NAMES = ("Calendar", "Expenses", "Wi-Fi", "Do not disturb", "About phone", "Pictures", "nibh", "Xylophone 3")


@pytest.mark.parametrize("name", NAMES)
def test_bare_words_give_a_name_the_same_ids_in_the_goal_the_element_list_and_the_reply(bare, name):
    name_ids = _ids(bare, name)
    goal = _ids(bare, f"Open the {name} app.")
    listed = _ids(bare, mark_line(Mark(3, "link", name, (0.1, 0.1, 0.2, 0.2))))
    reply = _ids(bare, json.dumps({"action": {"kind": "click_element", "name": name}}))
    for text in (goal, listed, reply):
        assert _contains(text, name_ids), (name, bare.convert_ids_to_tokens(text))


def test_prefixed_words_give_a_name_other_ids_after_a_space(prefixed):
    """Why ``bare`` exists: GPT-2 splitting makes 'Calendar' after a space another token than after a quote,
    so a model cannot copy a name from a goal into a quoted reply by copying ids."""
    goal = _ids(prefixed, "Open the Calendar app.")
    reply = _ids(prefixed, '{"name": "Calendar"}')
    assert not _contains(goal, _ids(prefixed, "Calendar"))
    assert _contains(reply, _ids(prefixed, "Calendar"))


@pytest.mark.parametrize("words", ["prefixed", "bare"])
@pytest.mark.parametrize("text", [
    'Open the Calendar app.\n\nElements (id role "name"):\n[0] link "Expenses"\n[1] switch "Wi-Fi" checked',
    '{"thought": "tap it", "action": {"kind": "click", "x": 0.125, "y": 0.5}}',
    "  two  spaces, a tab\tand unicode: café — 東京 ✓  ",
    "Thought: 1234 items.\nAction: click(start_box='(12,987)')",
])
def test_both_tokenizers_decode_what_they_encode_with_single_digit_tokens(words, text, bare, prefixed):
    tok = bare if words == "bare" else prefixed
    assert tok.decode(_ids(tok, text)) == text
    assert tok.tokenize("1234") == ["1", "2", "3", "4"]
    for t in ("<|im_start|>", "<|image_pad|>", "<tool_call>"):
        assert len(tok.tokenize(t)) == 1


def test_a_bad_words_value_is_one_clear_error():
    with pytest.raises(ValueError, match="words must be 'prefixed' or 'bare'"):
        TinyModelSpec(words="spaced")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="words must be"):
        train_tokenizer(words="spaced")


def test_model_init_builds_a_bare_words_model(tmp_path, capsys):
    from guiagent.cli.main import main

    out = tmp_path / "tiny"
    assert main(["model", "init", "--size", "tiny", "--words", "bare", "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["words"] == "bare" and info["check"]["generated_tokens"] == 4
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    assert tok.tokenize("the Calendar") == ["the", "Ġ", "Calendar"]
