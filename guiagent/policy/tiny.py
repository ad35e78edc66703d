"""Build random-initialised models offline: a tiny Qwen2.5-VL (or Qwen3-VL), or one of a real size.

The model is saved with ``save_pretrained`` next to a locally trained tokenizer,
the Qwen2-VL chat template and a ``preprocessor_config.json``, so the same
``from_pretrained`` path that loads a real checkpoint loads it
(:func:`guiagent.policy.hf.load_transformers`).

The tokenizer is a byte-level BPE trained here with the ``tokenizers`` library.
Digits are split into single tokens before the byte-level step: single-digit
tokens learn coordinates faster than multi-digit BPE pieces (docs/results.md, "Learning
from scratch on CPU"). Its corpus is built from the action vocabulary
(action names, JSON punctuation, numbers) and common words of task goals.

Example::

    >>> from guiagent.policy.tiny import TinyModelSpec, build_tiny_model
    >>> info = build_tiny_model(TinyModelSpec(size="tiny"), "/tmp/tiny")  # doctest: +SKIP
    >>> info["params"] > 1_000_000  # doctest: +SKIP
    True

:func:`build_random_model` saves a random model of any architecture config (for example
:func:`qwen2_5_vl_3b_config`, the real 3B) with a small model folder's tokenizer: memory and
GPU checks at the real size without a download.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Sequence

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from guiagent.policy.geometry import image_processor_for

if TYPE_CHECKING:
    import torch

#: Qwen2-VL special tokens, in Qwen's id order (they get ids 0..15 here).
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
)

#: The Qwen2-VL chat template: images become <|vision_start|><|image_pad|><|vision_end|>; a default
#: system message is added when the chat has none.
QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_ACTION_WORDS = (
    "click tap long_press type scroll swipe drag key back home open_app wait answer finish "
    "navigate_back navigate_home press_back press_home hotkey finished call_user left_double right_single "
    "start_box end_box start_point end_point point direction content text app status success failure "
    "message seconds amount duration_ms submit coordinate action arguments name mobile_use computer_use "
    "up down left right Enter Backspace Tab Escape Control Shift Thought Action"
).split()
_GOAL_WORDS = (
    "the a an of to in on for with and or is are be this that it you your my open find set turn add "
    "remove delete create new send search select choose enter write go show save clear check uncheck "
    "contact contacts message messages note notes alarm timer clock calendar event settings wifi "
    "bluetooth brightness volume music song play pause photo camera gallery email mail inbox reply "
    "name phone number address date time today tomorrow button menu list item items page screen "
    "field box text input tab link icon first second third last next previous all then after before "
    "from by at as called named titled labelled value option options submit login password username "
    "user task goal done please make sure color red blue green yellow shape circle square"
).split()


def _corpus(rng: random.Random, n_lines: int = 4000, capitalised: int = 0) -> list[str]:
    """``capitalised`` lines of goal words written as element names are (``Calendar``, ``Turn On``), then
    lines that look like prompts and actions of every format (JSON, calls, tool calls)."""
    lines: list[str] = [" ".join(rng.choice(_GOAL_WORDS).capitalize() for _ in range(rng.randint(2, 8)))
                        for _ in range(capitalised)]
    words = _ACTION_WORDS + _GOAL_WORDS
    for _ in range(n_lines):
        x, y = rng.randint(0, 1000), rng.randint(0, 1000)
        w = rng.choice(_ACTION_WORDS)
        goal = " ".join(rng.choice(_GOAL_WORDS) for _ in range(rng.randint(3, 12)))
        form = rng.randrange(7)
        if form == 0:
            lines.append(json.dumps({"action": w, "x": x, "y": y}))
        elif form == 1:
            lines.append(f"Thought: {goal}.\nAction: {w}(start_box='({x},{y})')")
        elif form == 2:
            lines.append('<tool_call>\n{"name": "mobile_use", "arguments": {"action": "%s", '
                         '"coordinate": [%d, %d]}}\n</tool_call>' % (w, x, y))
        elif form == 3:
            lines.append(f"Goal: {goal.capitalize()}. Previous actions: {w} ({x}, {y}); error: none")
        elif form == 4:
            lines.append(json.dumps({"kind": w, "text": goal, "status": rng.choice(["success", "failure"])}))
        elif form == 5:
            lines.append(json.dumps({"thought": goal, "action": {
                "kind": w, "x": round(x / 1000, rng.randint(1, 3)), "y": round(y / 1000, rng.randint(1, 3))}}))
        else:
            lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 16))))
    return lines


#: ``words="bare"``: letters runs, single digits, whitespace runs, and punctuation runs (with the
#: space before them) as pre-tokens; a space never joins the word after it
_BARE_WORDS = r"\p{L}+|\p{N}|\s+(?=\p{L})|\s?[^\s\p{L}\p{N}]+|\s+"


def train_tokenizer(vocab_size: int = 2048, seed: int = 0, words: str = "prefixed"):
    """Byte-level BPE with single-digit pre-splitting and the Qwen2-VL special tokens.

    ``words``: ``prefixed`` splits as GPT-2 and Qwen do, a word carrying the space before it, so the
    same word is other tokens after a space (``ĠCalendar``) than after a quote (``C al endar``);
    ``bare`` makes the space before a word a token of its own, so a word is the same tokens
    wherever it stands (in a goal, a quoted element name, a reply), and a model that copies a
    name from its prompt copies token ids (docs/training.md, "Goal-conditioned grounding").
    Returns a ``transformers`` fast tokenizer carrying the chat template.
    """
    from transformers import PreTrainedTokenizerFast

    if words not in ("prefixed", "bare"):
        raise ValueError(f"words must be 'prefixed' or 'bare', got {words!r}")
    tok = Tokenizer(models.BPE())
    if words == "bare":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_BARE_WORDS), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = _corpus(random.Random(seed), capitalised=1000 if words == "bare" else 0)
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in ("<|im_end|>", "<|endoftext|>")],
        model_max_length=32768, padding_side="left", clean_up_tokenization_spaces=False,
    )
    fast.chat_template = QWEN2_VL_CHAT_TEMPLATE
    return fast


@dataclass(frozen=True)
class TinyModelSpec:
    """What to build. ``size``: ``tiny`` (~2-3M parameters) or ``small`` (~10M)."""

    size: Literal["tiny", "small"] = "tiny"
    """tiny: ~2.3M parameters (text 192x3, vision 128x2); small: ~9M"""
    family: Literal["qwen2_5_vl", "qwen3_vl"] = "qwen2_5_vl"
    """architecture family"""
    seed: int = 0
    """seed of the tokenizer corpus and the weight initialisation"""
    vocab_size: int = 2048
    """upper bound on the BPE vocabulary (the small corpus may yield fewer tokens)"""
    min_pixels: int = 28 * 28 * 4
    """image processor lower pixel limit (written to preprocessor_config.json)"""
    max_pixels: int = 28 * 28 * 256
    """image processor upper pixel limit (256 visual tokens at most by default)"""
    words: Literal["prefixed", "bare"] = "prefixed"
    """tokenizer: prefixed (a word carries the space before it, as in GPT-2 and Qwen) or bare (a space
    is a token of its own, so a word is the same tokens in a goal and in a quoted name)"""
    copy_steps: int = 0
    """steps of a copy warm-up after initialisation (0: none): runs of random tokens, each written
    twice, trained on the second; gives the model the match-and-copy circuit a pretrained model
    brings, so that it can copy a name from the goal it has never seen (~1,000 steps, ~4 min on 2
    cores)"""
    copy_until: float = 0.0
    """stop the copy warm-up once it copies this share of a fixed probe's tokens (greedy, checked every
    25 steps), so that it ends where the circuit has formed, whatever step that is on this machine;
    copy_steps is then the most it runs (0: always copy_steps)"""
    copy_repeats: int = 0
    """steps of the copy warm-up after its first part, half of each batch's runs drawn from a few short
    tokens (:data:`COPY_REPEAT_ALPHABET` of the vocabulary's one- and two-letter pieces), so that tokens
    repeat inside a run and the copy has to keep its place rather than follow the current token (a
    name split into letters, ``S`` ``t`` ``or`` ``age``, among other names' ``S``). On a circuit already
    formed it takes ~200 steps; from scratch such runs keep the circuit from forming (0: none)"""

    def __post_init__(self) -> None:
        if self.size not in _SIZES:
            raise ValueError(f"size must be one of {sorted(_SIZES)}, got {self.size!r}")
        if self.family not in ("qwen2_5_vl", "qwen3_vl"):
            raise ValueError(f"family must be 'qwen2_5_vl' or 'qwen3_vl', got {self.family!r}")
        if self.vocab_size < 512:
            raise ValueError("vocab_size must be at least 512 (256 bytes + merges + special tokens)")
        if self.words not in ("prefixed", "bare"):
            raise ValueError(f"words must be 'prefixed' or 'bare', got {self.words!r}")
        if self.min_pixels <= 0:
            raise ValueError(f"min_pixels must be positive, got {self.min_pixels}")
        if self.max_pixels < self.min_pixels:
            raise ValueError(f"max_pixels ({self.max_pixels}) must be >= min_pixels ({self.min_pixels})")
        if not 0 <= self.copy_steps <= 100_000:
            raise ValueError(f"copy_steps must be between 0 and 100000, got {self.copy_steps}")
        if not 0.0 <= self.copy_until <= 1.0:
            raise ValueError(f"copy_until must be between 0 and 1, got {self.copy_until}")
        if not 0 <= self.copy_repeats <= 100_000:
            raise ValueError(f"copy_repeats must be between 0 and 100000, got {self.copy_repeats}")
        if self.copy_repeats and not self.copy_steps:
            raise ValueError("copy_repeats follows the copy warm-up's first part: give copy_steps too")


# text hidden, layers, heads, kv heads, intermediate | vision hidden, depth, heads, intermediate
_SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(hidden=192, layers=3, heads=4, kv=2, inter=512, v_hidden=128, v_depth=2, v_heads=4, v_inter=256),
    "small": dict(hidden=320, layers=6, heads=5, kv=1, inter=864, v_hidden=192, v_depth=3, v_heads=4,
                  v_inter=512),
}


def _config(spec: TinyModelSpec, tok) -> Any:
    s = _SIZES[spec.size]
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    head_dim = s["hidden"] // s["heads"]
    common_text = dict(
        vocab_size=len(tok), hidden_size=s["hidden"], intermediate_size=s["inter"],
        num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv"],
        max_position_embeddings=32768, bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], tie_word_embeddings=True,
    )
    tokens = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                  vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    # mrope_section (temporal, height, width) must sum to head_dim / 2
    half = head_dim // 2
    section = [half - 2 * (half // 3), half // 3, half // 3]
    if spec.family == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig

        text = dict(common_text, rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                  "mrope_section": section})
        vision = dict(depth=s["v_depth"], hidden_size=s["v_hidden"], num_heads=s["v_heads"],
                      intermediate_size=s["v_inter"], out_hidden_size=s["hidden"], patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                      fullatt_block_indexes=[s["v_depth"] - 1], tokens_per_second=2)
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **tokens)
    from transformers import Qwen3VLConfig

    text = dict(common_text, head_dim=head_dim, rope_parameters={
        "rope_type": "default", "rope_theta": 5e6, "mrope_section": section, "mrope_interleaved": True})
    vision = dict(depth=s["v_depth"], hidden_size=s["v_hidden"], num_heads=s["v_heads"],
                  intermediate_size=s["v_inter"], out_hidden_size=s["hidden"], patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=256,
                  deepstack_visual_indexes=[s["v_depth"] - 2])
    return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **tokens)


def build_tiny_model(spec: TinyModelSpec, out: str | os.PathLike) -> dict[str, Any]:
    """Train the tokenizer, initialise the model with ``spec.seed`` and save everything to ``out``.

    Returns ``{"out", "family", "size", "params", "vocab_size"}``. Needs no network.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForImageTextToText

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(spec.vocab_size, spec.seed, words=spec.words)
    config = _config(spec, tok)
    torch.manual_seed(spec.seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    copied = (copy_warmup(model, tok, spec.copy_steps, seed=spec.seed, until=spec.copy_until,
                          repeats=spec.copy_repeats) if spec.copy_steps else None)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    patch = 14 if spec.family == "qwen2_5_vl" else 16
    image_processor_for(patch, spec.min_pixels, spec.max_pixels).save_pretrained(out)
    (out / "chat_template.jinja").write_text(QWEN2_VL_CHAT_TEMPLATE)
    params = sum(p.numel() for p in model.parameters())
    info = {"out": str(out), "family": spec.family, "size": spec.size, "params": int(params),
            "vocab_size": len(tok), "words": spec.words}
    if copied is not None:
        info["copy_warmup"] = copied
    return info


# ---- the copy warm-up ----------------------------------------------------------------------------

#: lengths of the copy warm-up's sequences: a run of RUN tokens after up to GAP others, then up to GAP
#: others and the run again. The run's length and the gaps vary, so that the distance back to the first
#: copy says nothing and the model has to find it by content (an induction head), as it must find a
#: goal's name among the screen's elements.
COPY_RUN = (6, 30)
COPY_GAP = 20
#: the copy warm-up's second part (``TinyModelSpec.copy_repeats``): a batch's few-token runs draw from
#: this many (inclusive range, drawn each batch) of the vocabulary's one- and two-letter pieces
COPY_REPEAT_ALPHABET = (8, 40)
#: the few-token probe's alphabet: this many pieces, fixed
COPY_REPEAT_PROBE = 20


def _copy_batch(rng: random.Random, vocab: Sequence[int], n: int, pad: int, *, few: Sequence[int] = (),
                n_few: int = 0) -> tuple[Any, Any, Any]:
    """``n`` rows of a run written twice, tokens drawn from ``vocab``; the last ``n_few`` of them from
    ``few`` instead (the copy warm-up's second part)."""
    import torch

    rows = []
    for k in range(n):
        tokens = few if k >= n - n_few else vocab
        run = [rng.choice(tokens) for _ in range(rng.randint(*COPY_RUN))]
        pre = [rng.choice(tokens) for _ in range(rng.randint(0, COPY_GAP))]
        mid = [rng.choice(tokens) for _ in range(rng.randint(0, COPY_GAP))]
        ids = pre + run + mid + run
        # the run's first token cannot be known from what comes before it; the rest can, by copying
        rows.append((ids, [-100] * (len(ids) - len(run) + 1) + run[1:]))
    width = max(len(ids) for ids, _ in rows)
    x = torch.full((n, width), pad)
    y = torch.full((n, width), -100)
    mask = torch.zeros((n, width), dtype=torch.long)
    for k, (ids, labels) in enumerate(rows):
        x[k, :len(ids)], y[k, :len(labels)], mask[k, :len(ids)] = torch.tensor(ids), torch.tensor(labels), 1
    return x, y, mask


def _short_pieces(tok: Any, vocab: Sequence[int]) -> list[int]:
    """The ids of ``vocab`` that are one or two letters (a space before them aside): the pieces names
    split into where the tokenizer holds no whole token for them."""
    out = []
    for i in vocab:
        piece = str(tok.convert_ids_to_tokens(i)).lstrip("Ġ")
        if 1 <= len(piece) <= 2 and piece.isalpha():
            out.append(i)
    return out


def _mixed_batch(rng: random.Random, vocab: Sequence[int], short: Sequence[int], n: int, pad: int) -> tuple[Any, Any, Any]:
    """Half of ``n`` rows as :func:`_copy_batch` draws them, half from a few of ``short``
    (:data:`COPY_REPEAT_ALPHABET`)."""
    alphabet = rng.sample(list(short), min(len(short), rng.randint(*COPY_REPEAT_ALPHABET)))
    return _copy_batch(rng, vocab, n, pad, few=alphabet, n_few=n // 2)


def copy_warmup(model: Any, tok: Any, steps: int, *, seed: int = 0, batch: int = 32, lr: float = 1e-3,
                until: float = 0.0, repeats: int = 0) -> dict[str, Any]:
    """Train ``model`` (text only) for ``steps`` on sequences that repeat a run of random tokens
    (:data:`COPY_RUN`), the loss on the repeat. A randomly initialised model learns this only by
    forming the match-and-copy circuit (attend to the earlier occurrence of the current token, copy
    what followed it); with it, a name the goal spells is copied into the reply even when no
    demonstration ever held it. On the tiny model it forms between steps 500 and 750 (copy accuracy
    ~0.01 -> ~0.97), at a step that moves with the seed and the machine's arithmetic. ``until``: stop
    once the greedy accuracy on a fixed probe of 16 sequences reaches it (checked every
    :data:`COPY_CHECK_EVERY` steps; 0: run all ``steps``). ``repeats``: then as many steps with half of
    each batch's runs drawn from a few short tokens (``TinyModelSpec.copy_repeats``). Returns ``{"steps",
    "loss_first", "loss_last", "copy_accuracy", "seconds"}``, ``steps`` those run and the accuracy over
    the copyable tokens of 64 fresh sequences (greedy); with ``repeats``, also ``"repeat_steps"`` and
    ``"repeat_accuracy"`` (64 fresh sequences of :data:`COPY_REPEAT_PROBE` short tokens)."""
    import torch

    t0 = time.perf_counter()
    special = set(tok.all_special_ids)
    vocab = [i for i in range(len(tok)) if i not in special and not str(tok.convert_ids_to_tokens(i)).startswith("<|")]
    short = _short_pieces(tok, vocab) if repeats else []
    if repeats and len(short) < COPY_REPEAT_ALPHABET[0]:
        raise ValueError(f"copy_repeats needs {COPY_REPEAT_ALPHABET[0]} one- or two-letter tokens, the vocabulary "
                         f"has {len(short)}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    probe = _copy_batch(random.Random(seed + 2_000_003), vocab, 16, tok.pad_token_id) if until > 0 else None
    losses: list[float] = []
    model.train()
    done = 0

    def train_on(x: Any, y: Any, mask: Any) -> None:
        logits = model(input_ids=x, attention_mask=mask).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[:, 1:].reshape(-1),
                                                 ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))

    for done in range(1, steps + 1):
        train_on(*_copy_batch(rng, vocab, batch, tok.pad_token_id))
        if probe is not None and done % COPY_CHECK_EVERY == 0 and _copy_accuracy(model, probe) >= until:
            break
    for _ in range(repeats):
        train_on(*_mixed_batch(rng, vocab, short, batch, tok.pad_token_id))
    model.eval()
    accuracy = _copy_accuracy(model, _copy_batch(random.Random(seed + 1_000_003), vocab, 64, tok.pad_token_id))
    out = {"steps": done, "loss_first": round(losses[0], 4) if losses else None,
           "loss_last": round(losses[-1], 4) if losses else None, "copy_accuracy": round(accuracy, 3)}
    if repeats:
        few = random.Random(seed + 3_000_017).sample(short, min(len(short), COPY_REPEAT_PROBE))
        out["repeat_steps"] = repeats
        out["repeat_accuracy"] = round(_copy_accuracy(model, _copy_batch(random.Random(seed + 4_000_037), few, 64,
                                                                          tok.pad_token_id)), 3)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


#: how often the copy warm-up checks its probe when it stops at an accuracy
COPY_CHECK_EVERY = 25


def _copy_accuracy(model: Any, batch: tuple[Any, Any, Any]) -> float:
    """Share of a copy batch's copyable tokens the model predicts greedily (its mode is kept)."""
    import torch

    x, y, mask = batch
    was_training = model.training
    model.eval()
    with torch.no_grad():
        guess, labels = model(input_ids=x, attention_mask=mask).logits[:, :-1].argmax(-1), y[:, 1:]
    model.train(was_training)
    scored = labels != -100
    return float(((guess == labels) & scored).sum()) / max(1, int(scored.sum()))


# ---- random models of other architectures ----------------------------------------------------

def qwen2_5_vl_3b_config() -> Any:
    """The architecture of Qwen2.5-VL-3B-Instruct, written out from its published ``config.json``
    (no download): for memory estimates and GPU checks on a randomly initialised model of the
    real size (build it with ``Qwen2_5_VLForConditionalGeneration._from_config(config)``, or on the
    ``meta`` device to count parameters without memory)."""
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(
        bos_token_id=151643, eos_token_id=151645, vision_start_token_id=151652, vision_end_token_id=151653,
        vision_token_id=151654, image_token_id=151655, video_token_id=151656, hidden_act="silu",
        hidden_size=2048, initializer_range=0.02, intermediate_size=11008, max_position_embeddings=128000,
        max_window_layers=70, num_attention_heads=16, num_hidden_layers=36, num_key_value_heads=2,
        rms_norm_eps=1e-06, rope_theta=1000000.0, sliding_window=32768, tie_word_embeddings=True,
        use_cache=True, use_sliding_window=False, vocab_size=151936,
        rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
        vision_config={"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                       "num_heads": 16, "in_chans": 3, "out_hidden_size": 2048, "patch_size": 14,
                       "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                       "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
                       "temporal_patch_size": 2})


_TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "image_token_id", "video_token_id",
                    "vision_start_token_id", "vision_end_token_id", "vision_token_id")


def build_random_model(config: Any, out: str | os.PathLike, *, tokenizer_from: str, device: str = "cpu",
                       dtype: "torch.dtype | None" = None, seed: int = 0) -> Path:
    """Save a randomly initialised model of ``config``'s architecture, with the tokenizer, image
    processor and chat template of the model folder ``tokenizer_from`` (its special-token ids are
    copied into the config, so images and end-of-turn work; the vocabulary must fit). For
    real-size checks without a download: ``build_random_model(qwen2_5_vl_3b_config(), dir,
    tokenizer_from=tiny_dir, device="cuda")``. ``dtype``: the weights' dtype (bfloat16 by default).
    Returns ``out``."""
    import torch
    from transformers import AutoConfig

    from guiagent.policy.load import model_class  # lazy: keeps torch out of `guiagent model --help`

    dtype = torch.bfloat16 if dtype is None else dtype
    out = Path(out)
    src = AutoConfig.from_pretrained(tokenizer_from)
    for field in _TOKEN_ID_FIELDS:  # the small tokenizer's ids, at whichever level each config keeps them
        for s_obj, d_obj in ((src, config), (getattr(src, "text_config", None), getattr(config, "text_config", None))):
            v = getattr(s_obj, field, None) if s_obj is not None else None
            if v is not None and d_obj is not None:
                setattr(d_obj, field, v)
    torch.manual_seed(seed)
    with torch.device(device):
        model = model_class(config.model_type)._from_config(config, dtype=dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    del model
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "preprocessor_config.json",
              "special_tokens_map.json", "generation_config.json"):
        if Path(tokenizer_from, f).is_file():
            shutil.copy(Path(tokenizer_from, f), out / f)
    return out
