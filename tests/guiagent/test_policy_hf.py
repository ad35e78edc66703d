"""The transformers backend on the tiny model: exact log-probs, batching, sampling, weights."""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image

from guiagent.policy import SamplingParams, load_policy, message
from guiagent.policy.hf import load_transformers
from guiagent.policy.tiny import TinyModelSpec, build_tiny_model

TOL = 1e-4


def png(w: int, h: int, seed: int = 0) -> bytes:
    g = torch.Generator().manual_seed(seed)
    arr = (torch.rand((h, w, 3), generator=g) * 255).to(torch.uint8).numpy()
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    build_tiny_model(TinyModelSpec(size="tiny", seed=0), out)
    return out


@pytest.fixture(scope="module")
def policy(model_dir):
    return load_transformers(str(model_dir), device="cpu", threads=2)


def chats():
    return [
        [message("user", png(112, 112, 1), "Goal: open the settings.")],
        [{"role": "system", "content": "You are a phone agent."},
         message("user", png(168, 84, 2), "Goal: send a message to Ann.", png(84, 140, 3), "Now?")],
        [message("user", "Goal: no image at all, just text.")],
    ]


def max_diff(a, b):
    assert len(a) == len(b) and len(a) > 0
    return max(abs(x - y) for x, y in zip(a, b))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_logprobs_match_teacher_forcing(policy, temperature):
    cs = chats()
    gens = policy.generate(cs, SamplingParams(max_new_tokens=10, temperature=temperature, seed=7))
    assert {len(g.token_ids) for g in gens} == {10}
    assert all(g.finish_reason == "length" and len(g.logprobs) == 10 for g in gens)
    # left-padded batch with different image sizes and counts
    batch_scores = policy.score(cs, [g.token_ids for g in gens])
    for g, s in zip(gens, batch_scores):
        assert max_diff(g.logprobs, s) < TOL
    # and each chat alone (no padding)
    for c, g in zip(cs, gens):
        assert max_diff(g.logprobs, policy.score([c], [g.token_ids])[0]) < TOL
    assert all(lp <= 0 for g in gens for lp in g.logprobs)


def test_prompt_tokens_count_image_tokens(policy):
    [a] = policy.generate([[message("user", png(112, 112), "x")]], SamplingParams(max_new_tokens=1, temperature=0))
    [b] = policy.generate([[message("user", png(224, 224), "x")]], SamplingParams(max_new_tokens=1, temperature=0))
    # 112x112 -> 8x8 patches -> 16 merged tokens; 224x224 -> 64: the image costs 48 more tokens
    assert b.prompt_tokens - a.prompt_tokens == 48


def test_seeded_sampling_is_reproducible(policy):
    cs = chats()[:2]
    sp = SamplingParams(max_new_tokens=12, temperature=1.0, seed=123)
    a = policy.generate(cs, sp)
    b = policy.generate(cs, sp)
    c = policy.generate(cs, SamplingParams(max_new_tokens=12, temperature=1.0, seed=124))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    # seeding leaves the global RNG stream alone
    torch.manual_seed(5)
    x = torch.rand(1)
    torch.manual_seed(5)
    policy.generate(cs[:1], sp)
    assert torch.equal(torch.rand(1), x)


def test_greedy_is_deterministic_and_batch_independent(policy):
    cs = chats()
    sp = SamplingParams(max_new_tokens=8, temperature=0)
    batch = policy.generate(cs, sp)
    single = [policy.generate([c], sp)[0] for c in cs]
    assert [g.token_ids for g in batch] == [g.token_ids for g in single]


def test_per_chat_seeds_make_each_reply_independent_of_its_batch(policy):
    cs = chats()
    sp = SamplingParams(max_new_tokens=12, temperature=1.0, min_p=0.0, seeds=(11, 22, 33))
    torch.manual_seed(0)
    batch = policy.generate(cs, sp)
    torch.manual_seed(99)  # the global RNG plays no part
    reordered = policy.generate(cs[::-1], SamplingParams(max_new_tokens=12, temperature=1.0, seeds=(33, 22, 11)))
    alone = policy.generate(cs[1:2], SamplingParams(max_new_tokens=12, temperature=1.0, seeds=(22,)))
    assert [g.token_ids for g in reordered[::-1]] == [g.token_ids for g in batch]
    assert alone[0].token_ids == batch[1].token_ids
    other = policy.generate(cs, SamplingParams(max_new_tokens=12, temperature=1.0, seeds=(12, 23, 34)))
    assert [g.token_ids for g in other] != [g.token_ids for g in batch]
    # the log-probs are still the model's own (teacher forcing agrees)
    for c, g in zip(cs, batch):
        assert max_diff(g.logprobs, policy.score([c], [g.token_ids])[0]) < TOL


def test_per_chat_seeds_sample_the_warped_distribution():
    """Gumbel-max with per-row streams draws from softmax(logits / T) after top-p / min-p: the
    frequencies over 4000 rows match the probabilities within four standard errors."""
    from guiagent.policy.hf import _row_seeded_sampler

    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    n = 4000

    def freqs(sp):
        proc = _row_seeded_sampler(sp, range(n), torch.device("cpu"))
        picks = proc(torch.zeros((n, 1), dtype=torch.long), logits.repeat(n, 1)).argmax(-1)
        return torch.bincount(picks, minlength=4).double() / n

    for temperature in (1.0, 2.0):
        p = torch.softmax(logits / temperature, -1).double()
        f = freqs(SamplingParams(temperature=temperature, seeds=tuple(range(n))))
        assert torch.all((f - p).abs() <= 4 * (p * (1 - p) / n).sqrt() + 1e-9), (temperature, f, p)
    # min-p 0.2 drops the 0.05 token (< 0.2 x 0.5); the rest renormalise
    f = freqs(SamplingParams(temperature=1.0, min_p=0.2, seeds=tuple(range(n))))
    p = torch.tensor([0.5, 0.3, 0.15, 0.0], dtype=torch.float64) / 0.95
    assert f[3] == 0 and torch.all((f - p).abs() <= 4 * (p * (1 - p) / n).sqrt() + 1e-9)
    # the same seed gives the same pick, whatever row it sits in
    a = _row_seeded_sampler(SamplingParams(seeds=(5, 6)), (5, 6), torch.device("cpu"))(None, logits.repeat(2, 1))
    b = _row_seeded_sampler(SamplingParams(seeds=(6,)), (6,), torch.device("cpu"))(None, logits.repeat(1, 1))
    assert torch.equal(a[1], b[0])


def test_per_chat_seeds_must_fit_the_batch(policy):
    with pytest.raises(ValueError, match="2 seeds for a batch of 3"):
        policy.generate(chats(), SamplingParams(max_new_tokens=2, seeds=(1, 2)))
    with pytest.raises(ValueError, match="seeds must be integers"):
        SamplingParams(seeds=(-1,))


def test_min_p_cuts_the_tail_and_keeps_unmodified_logprobs(policy):
    cs = chats()
    greedy = policy.generate(cs, SamplingParams(max_new_tokens=8, temperature=0))
    # min_p near 1 keeps only the most likely token: sampling becomes greedy decoding
    sharp = policy.generate(cs, SamplingParams(max_new_tokens=8, temperature=1.0, min_p=0.999, seed=3))
    assert [g.token_ids for g in sharp] == [g.token_ids for g in greedy]
    # the log-probs are the model's own, not those of the truncated distribution (which would be 0)
    assert max(abs(x - y) for a, b in zip(sharp, greedy) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5
    assert all(lp < 0 for g in sharp for lp in g.logprobs)


def test_stop_string_ends_generation(policy):
    c = chats()[:1]
    sp = SamplingParams(max_new_tokens=12, temperature=1.0, seed=11)
    [free] = policy.generate(c, sp)
    j = next(i for i, t in enumerate(free.token_ids) if i >= 2 and policy.tokenizer.decode([t]).strip())
    piece = policy.tokenizer.decode([free.token_ids[j]])
    [stopped] = policy.generate(c, SamplingParams(max_new_tokens=12, temperature=1.0, seed=11, stop=(piece,)))
    assert stopped.finish_reason == "stop"
    assert piece in stopped.text and len(stopped.token_ids) <= j + 1
    assert stopped.token_ids == free.token_ids[:len(stopped.token_ids)]
    assert len(stopped.logprobs) == len(stopped.token_ids)


def test_score_batch_is_differentiable_and_masked(policy):
    cs = chats()[:2]
    comps = [policy.encode_completion('{"action": "click", "x": 12, "y": 345}'), policy.encode_completion("hi")]
    assert comps[0][-1] == policy.end_turn_id
    sb = policy.score_batch(cs, comps, grad=True)
    assert sb.logprobs.shape == sb.mask.shape == (2, len(comps[0]))
    assert sb.mask.sum(1).tolist() == [len(comps[0]), len(comps[1])]
    loss = -(sb.logprobs * sb.mask).sum() / sb.mask.sum()
    loss.backward()
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    policy.model.zero_grad(set_to_none=True)
    # the no-grad list view agrees with the tensor
    assert max_diff(policy.score(cs, comps)[1], sb.to_lists()[1]) < 1e-6


def test_score_batch_gives_each_tokens_entropy_of_the_whole_distribution(policy):
    """``entropy=True``: at each completion token, the entropy of the next-token distribution,
    checked against the distribution itself (every vocabulary token scored as the next one), on the
    one-forward and the shared-prompt paths alike, differentiable, zero off the mask."""
    c = chats()[0]
    first = policy.encode_completion("ok")[0]
    vocab = len(policy.tokenizer)
    for prefix in ([], [first]):
        rows = policy.score_batch([c] * vocab, [prefix + [v] for v in range(vocab)], grad=False)
        lp = rows.logprobs[:, len(prefix)]
        assert lp.exp().sum().item() == pytest.approx(1.0, abs=1e-4)
        want = float(-(lp.exp() * lp).sum())
        for share in (False, True):
            policy.share_prompts = share
            sb = policy.score_batch([c, c], [[first, 5], [first]], grad=False, entropy=True)
            policy.share_prompts = True
            ent = sb.extra["entropy"]
            assert ent.shape == sb.mask.shape == (2, 2)
            assert ent[0, len(prefix)].item() == pytest.approx(want, abs=1e-4)
            assert ent[1, 1].item() == 0.0  # off the second row's one token
    assert "entropy" not in policy.score_batch([c], [[first]], grad=False).extra  # asked for only
    sb = policy.score_batch([c], [[first, 5]], grad=True, entropy=True)
    sb.extra["entropy"].sum().backward()
    assert any(q.grad is not None and q.grad.abs().sum() > 0 for q in policy.parameters())
    policy.model.zero_grad(set_to_none=True)


def _scores_and_grads(p, cs, comps, share):
    p.share_prompts = share
    p.model.zero_grad(set_to_none=True)
    sb = p.score_batch(cs, comps, grad=True)
    (sb.logprobs * torch.linspace(0.5, 1.5, sb.logprobs.shape[1])).sum().backward()
    grads = {n: t.grad.clone() for n, t in p.model.named_parameters() if t.grad is not None}
    p.model.zero_grad(set_to_none=True)
    p.share_prompts = True
    return sb, grads


@pytest.mark.parametrize("lora", [False, True])
def test_rows_with_one_prompt_share_its_forward_with_the_same_logprobs_and_gradients(policy, model_dir, lora,
                                                                                     monkeypatch):
    """A group's samples of one screen: the prompt runs once; log-probs and gradients equal one
    padded forward per row (same chat object, an equal copy, a text-only row, uneven completions)."""
    p = _lora_policy(model_dir) if lora else policy
    a, b, text = chats()
    cs = [a, b, a, [dict(m) for m in b], text, text]
    comps = [[100, 101, 102], [110, 111, 112, 113, 114], [120], [130, 131], [140, 141, 142, 143], [150, 151]]
    calls = []
    real = type(p)._score_shared
    monkeypatch.setattr(type(p), "_score_shared", lambda *x, **k: calls.append(1) or real(*x, **k))
    one, g_one = _scores_and_grads(p, cs, comps, share=False)
    assert not calls
    shared, g_shared = _scores_and_grads(p, cs, comps, share=True)
    assert calls  # the shared path ran
    assert torch.equal(one.mask, shared.mask)
    torch.testing.assert_close(shared.logprobs, one.logprobs, atol=1e-5, rtol=0)
    assert set(g_one) == set(g_shared) and g_one
    for n in g_one:
        torch.testing.assert_close(g_shared[n], g_one[n], atol=1e-5, rtol=1e-4)


def test_vision_outputs_are_reused_while_the_tower_is_unchanged(model_dir):
    """One screen sampled 4 times goes through the vision tower once; re-scoring at the same weights
    reuses it (same log-probs as generation); a step on the tower's weights invalidates the cache."""
    p = load_transformers(str(model_dir), device="cpu")
    screen = png(112, 112, 5)
    cs = [[message("user", bytes(bytearray(screen)), "Goal: open the settings.")] for _ in range(4)]
    cs.append([message("user", png(112, 112, 6), "Goal: open the settings.")])
    gens = p.generate(cs, SamplingParams(max_new_tokens=5, temperature=1.0, seed=3))
    assert p.vision_stats == {"encoded": 2, "reused": 3}
    comps = [g.token_ids for g in gens]
    for g, s in zip(gens, p.score(cs, comps)):
        assert max_diff(g.logprobs, s) < 1e-5
    assert p.vision_stats["encoded"] == 2  # re-scoring ran no vision tower
    sb = p.score_batch(cs, comps, grad=True)  # a trainable tower is run with grad, not reused
    (sb.logprobs * sb.mask).sum().backward()
    visual = p._core().visual
    assert p.vision_stats["encoded"] == 2 and all(t.grad is not None for t in visual.parameters())
    with torch.no_grad():
        for t in visual.parameters():
            t.add_(0.01 * t.grad.sign())  # an optimiser step on the vision tower
    p.model.zero_grad(set_to_none=True)
    after = p.score(cs, comps)
    assert p.vision_stats["encoded"] == 4  # the cache was dropped with the old weights
    p.vision_cache_bytes = 0  # the plain path agrees
    for a, b in zip(after, p.score(cs, comps)):
        assert max_diff(a, b) < 1e-5
    assert max_diff(after[0], list(gens[0].logprobs)) > 1e-4  # and the step did change the model


def test_vision_cache_stays_in_its_budget_and_a_frozen_tower_is_reused_with_grad(model_dir):
    p = _lora_policy(model_dir)  # LoRA: the vision tower is frozen, so the update may reuse its outputs
    cs = [[message("user", png(112, 112, 10 + i), "Goal: go.")] for i in range(3)]
    comps = [[100, 101, 102], [110, 111], [120, 121, 122, 123]]
    p.score(cs, comps)
    used = p._vision_cache_used
    assert p.vision_stats["encoded"] == 3 and used > 0
    grads = []
    for budget in (1 << 30, 0):
        p.vision_cache_bytes = budget
        sb = p.score_batch(cs, comps, grad=True)
        (sb.logprobs * sb.mask).sum().backward()
        grads.append({n: t.grad.clone() for n, t in p.model.named_parameters() if t.grad is not None})
        p.model.zero_grad(set_to_none=True)
    assert p.vision_stats["encoded"] == 3  # the update with grad reused all three
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], atol=1e-6, rtol=1e-4)
    p.vision_cache_bytes = used // 2  # room for one screen: the oldest go
    p._vision_cache.clear()
    p._vision_cache_used = 0
    p.score(cs, comps)
    assert len(p._vision_cache) == 1 and p._vision_cache_used <= used // 2


@pytest.mark.parametrize("seeds", [False, True])
def test_a_shared_system_prompt_is_prefilled_once_and_generation_does_not_change(policy, seeds):
    system = {"role": "system", "content": "You operate a phone for the user. " * 6}
    cs = [[system, message("user", png(112, 112, 1), "Goal: open the settings.")],
          [system, message("user", png(84, 140, 2), "Goal: send a message to Ann, then go back home.")],
          [system, message("user", "Goal: no image at all, just text.")]]
    assert policy._common_prefix([policy.encoder.encode(c) for c in cs]) >= policy.min_shared_prefix
    sp = SamplingParams(max_new_tokens=8, temperature=1.0, seed=5, seeds=(1, 2, 3) if seeds else None)
    runs = []
    for share in (False, True):
        policy.share_prompts = share
        runs.append(policy.generate(cs, sp))
    policy.share_prompts = True
    for a, b in zip(*runs):
        assert a.token_ids == b.token_ids and max_diff(a.logprobs, b.logprobs) < 1e-5
    for g, s in zip(runs[1], policy.score(cs, [g.token_ids for g in runs[1]])):
        assert max_diff(g.logprobs, s) < TOL


def test_weight_update_bumps_version_and_save_reloads(policy, tmp_path):
    c = chats()[:1]
    [g] = policy.generate(c, SamplingParams(max_new_tokens=6, temperature=0))
    v0 = policy.version
    state = {k: v.clone() for k, v in policy.state_dict().items()}
    policy.load_state_dict(state)
    assert policy.version == v0 + 1
    policy.save(tmp_path / "copy")
    again = load_policy(str(tmp_path / "copy"), device="cpu")
    assert max_diff(again.score(c, [g.token_ids])[0], g.logprobs) < TOL


def test_pixel_limits_come_from_the_image_processor(model_dir):
    small = load_transformers(str(model_dir), device="cpu", max_pixels=28 * 28 * 16)
    [g] = small.generate([[message("user", png(360, 640), "x")]], SamplingParams(max_new_tokens=1, temperature=0))
    [g2] = small.generate([[message("user", png(112, 112), "x")]], SamplingParams(max_new_tokens=1, temperature=0))
    assert g.prompt_tokens <= g2.prompt_tokens  # a phone screenshot capped at 16 visual tokens


def test_qwen3_vl_tiny_matches_teacher_forcing(tmp_path):
    build_tiny_model(TinyModelSpec(family="qwen3_vl"), tmp_path)
    p = load_transformers(str(tmp_path), device="cpu")
    assert type(p.model).__name__ == "Qwen3VLForConditionalGeneration"
    cs = chats()[:2]
    gens = p.generate(cs, SamplingParams(max_new_tokens=6, temperature=1.0, seed=0))
    for g, s in zip(gens, p.score(cs, [g.token_ids for g in gens])):
        assert max_diff(g.logprobs, s) < TOL


def test_vision_placeholders_are_never_sampled(tmp_path):
    """A hot, random model would otherwise emit <|image_pad|>, which no scorer can take back."""
    from guiagent.policy.hf import VISION_TOKENS

    build_tiny_model(TinyModelSpec(size="tiny", seed=1), tmp_path)
    pol = load_transformers(str(tmp_path))
    banned = {pol.tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    buf = io.BytesIO()
    Image.new("RGB", (56, 56), "white").save(buf, format="PNG")
    chat = [message("user", buf.getvalue(), "go")]
    gens = pol.generate([chat] * 4, SamplingParams(max_new_tokens=48, temperature=5.0, seed=0))
    for g in gens:
        assert not banned & set(g.token_ids)
        # every sampled completion can be scored back, to the same log-probs
        [lp] = pol.score([chat], [list(g.token_ids)])
        assert lp == pytest.approx(list(g.logprobs), abs=1e-4)


# ---- training set-up: LoRA, gradient checkpointing ------------------------------------------------

def _lora_policy(model_dir, **kw):
    from guiagent.policy.hf import LoraSettings

    p = load_transformers(str(model_dir), device="cpu", precision="fp32", lora=LoraSettings(rank=4, alpha=8), **kw)
    with torch.no_grad():  # B starts at zero (LoRA's identity start); move it so merging matters
        g = torch.Generator().manual_seed(0)
        for n, t in p.model.named_parameters():
            if "lora_B" in n:
                t.copy_(torch.randn(t.shape, generator=g) * 0.05)
    return p


def test_lora_trains_only_adapters_and_save_load_keeps_logprobs(model_dir, tmp_path):
    p = _lora_policy(model_dir)
    trainable = [n for n, t in p.model.named_parameters() if t.requires_grad]
    assert trainable and all("lora_" in n and "language_model" in n for n in trainable)
    cs = chats()[:2]
    comps = [[100, 101, 102, 103, 104], [110, 111, 112]]
    before = p.score(cs, comps)
    plain = load_transformers(str(model_dir), device="cpu")
    assert max_diff(before[0], plain.score(cs, comps)[0]) > 1e-3  # the adapters change the model
    with p.adapters_disabled():  # the base: a KL reference without a second model
        for a, b in zip(p.score(cs, comps), plain.score(cs, comps)):
            assert max_diff(a, b) < TOL
    # state_dict(): merged weights under the plain model's names
    sd = p.state_dict()
    assert set(sd) == set(plain.model.state_dict()) and not any("lora_" in k for k in sd)
    p.save(tmp_path / "ckpt")
    merged = load_transformers(str(tmp_path / "ckpt"), device="cpu")  # a standalone model
    for a, b in zip(before, merged.score(cs, comps)):
        assert max_diff(a, b) < TOL
    from guiagent.policy.hf import LoraSettings

    again = load_transformers(str(model_dir), device="cpu", precision="fp32", lora=LoraSettings(rank=4, alpha=8),
                              adapter=str(tmp_path / "ckpt" / "lora_adapter"))  # continue training
    assert any(t.requires_grad for t in again.parameters())
    for a, b in zip(before, again.score(cs, comps)):
        assert max_diff(a, b) < TOL


def test_lora_bad_settings_fail_clearly(model_dir, tmp_path):
    from guiagent.policy.hf import LoraSettings

    with pytest.raises(ValueError, match="rank must be positive"):
        LoraSettings(rank=0)
    with pytest.raises(ValueError, match="matched no layer"):
        load_transformers(str(model_dir), device="cpu", lora=LoraSettings(target_modules=r"nothing\.here"))
    with pytest.raises(FileNotFoundError, match="no LoRA adapter"):
        load_transformers(str(model_dir), device="cpu", lora=LoraSettings(), adapter=str(tmp_path))
    with pytest.raises(ValueError, match="either dtype"):
        load_transformers(str(model_dir), device="cpu", dtype="float32", precision="fp32")


def saved_in_decoder_layers(policy, cs, comps) -> tuple[int, tuple[int, int, int]]:
    """Bytes of the tensors autograd keeps for the backward pass while the language model's decoder
    layers run (each counted once), and the (batch, length, hidden) shape of their input, for a
    forward of ``score_batch(cs, comps, grad=True)``: the activation memory checkpointing saves."""
    layers = next(m for n, m in policy.model.named_modules() if n.endswith("language_model.layers"))
    state = {"inside": 0, "bytes": 0, "shape": None}
    seen: set[int] = set()

    def enter(module, args, kwargs):
        state["inside"] += 1
        hidden = args[0] if args else kwargs["hidden_states"]
        state["shape"] = tuple(hidden.shape)

    def leave(module, args, out):
        state["inside"] -= 1

    def pack(t):
        if state["inside"] > 0 and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            state["bytes"] += t.numel() * t.element_size()
        return t

    handles = [h for layer in layers for h in (layer.register_forward_pre_hook(enter, with_kwargs=True),
                                               layer.register_forward_hook(leave))]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            sb = policy.score_batch(cs, comps, grad=True)
    finally:
        for h in handles:
            h.remove()
    return state["bytes"], state["shape"], sb


def test_gradient_checkpointing_is_on_and_gives_the_same_gradients(model_dir):
    """Same gradients with and without, and checkpointing really on: the decoder layers keep only their
    inputs for the backward pass (the recompute makes the rest), so far fewer bytes are saved."""
    cs = chats()[:2]
    comps = [[100, 101, 102, 103, 104], [110, 111, 112]]
    grads, saved = [], []
    for ck in (False, True):
        p = load_transformers(str(model_dir), device="cpu", precision="fp32", gradient_checkpointing=ck)
        assert p.gradient_checkpointing is ck and p.model.is_gradient_checkpointing is ck
        nbytes, (b, length, hidden), sb = saved_in_decoder_layers(p, cs, comps)
        saved.append(nbytes)
        (sb.logprobs * sb.mask).sum().backward()
        assert not p.model.training  # back in eval mode after the checkpointed forward
        grads.append({n: t.grad.clone() for n, t in p.model.named_parameters() if t.grad is not None})
    layers = p.model.config.text_config.num_hidden_layers
    assert saved[1] == layers * b * length * hidden * 4  # each layer's fp32 input, nothing else
    assert saved[1] * 10 < saved[0]  # without: every layer's attention and MLP activations
    assert set(grads[0]) == set(grads[1])
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], atol=1e-6, rtol=1e-4)

def test_a_model_that_does_not_load_is_one_line(model_dir, tmp_path, capsys):
    """Torn weights: transformers raises with a message of several lines; load_transformers one line
    (ModelLoadError, a ConfigError: exit 2), and `guiagent eval` writes nothing."""
    import shutil

    from guiagent.cli.main import main
    from guiagent.policy.hf import ModelLoadError

    torn = tmp_path / "torn"
    shutil.copytree(model_dir, torn)
    (torn / "model.safetensors").write_bytes((torn / "model.safetensors").read_bytes()[:5000])
    with pytest.raises(ModelLoadError) as e:
        load_transformers(str(torn), device="cpu")
    assert str(e.value).startswith(f"the model {torn} cannot be loaded: SafetensorError") and "\n" not in str(e.value)
    assert main(["eval", "--agent", "model", "--model", str(torn), "--episodes", "1", "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be loaded" in err[0] and not (tmp_path / "e").exists()
