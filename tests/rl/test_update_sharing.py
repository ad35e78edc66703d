"""The update's micro-batches keep a group's samples of one screen together, without changing the step."""

from __future__ import annotations

import io
import random

import pytest
import torch
from PIL import Image

from guiagent.policy import message
from guiagent.policy.hf import load_transformers
from rl.config import TrainConfig
from rl.rollout import TrainTurn
from rl.strategies import make_strategy
from rl.update import rescore, update


def _png(seed: int) -> bytes:
    g = torch.Generator().manual_seed(seed)
    buf = io.BytesIO()
    pixels = (torch.rand((84, 84, 3), generator=g) * 255).to(torch.uint8).numpy()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def _turns(policy, groups: int = 3, size: int = 3) -> tuple[list[TrainTurn], torch.Tensor]:
    """``groups`` x ``size`` first-step turns (one screen a group, each turn its own chat), shuffled."""
    rng = random.Random(0)
    chats, comps, ids = [], [], []
    for g in range(groups):
        shot = _png(g)
        for k in range(size):
            chats.append([message("user", bytes(bytearray(shot)), f"Goal: task {g}.")])
            comps.append(tuple(rng.randrange(16, 200) for _ in range(rng.randint(2, 5))))
            ids.append((f"g{g}", f"e{g}-{k}"))
    olds = policy.score(chats, comps)
    turns = [TrainTurn(g, e, 0, c, comp, tuple(old), 0, True)
             for (g, e), c, comp, old in zip(ids, chats, comps, olds)]
    rng.shuffle(turns)
    adv = torch.tensor([rng.choice([-1.0, 1.0]) for _ in turns])
    return turns, adv


def test_micro_batches_hold_whole_groups_and_the_step_is_that_of_one_batch(tiny_model_dir, monkeypatch):
    steps = {}
    seen: list[list[str]] = []
    for micro in (6, 2):
        policy = load_transformers(tiny_model_dir, device="cpu")
        turns, adv = _turns(policy, groups=3, size=2)
        real = policy.score_encoded

        def spy(encs, comps, grad=True, _real=real, _turns=turns, _policy=policy):
            seen.append(sorted({u.group_id for u in _turns if any(_policy.encoder.encode(u.prompt) is e for e in encs)}))
            return _real(encs, comps, grad=grad)

        monkeypatch.setattr(policy, "score_encoded", spy)
        opt = torch.optim.SGD(policy.parameters(), lr=1.0)  # the step is the gradient itself
        cfg = TrainConfig.build(micro_batch_size=micro, lr=1.0, max_grad_norm=1e9)
        update(make_strategy(cfg, ".", None), cfg.update, policy, None, opt, turns, adv)
        steps[micro] = {n: t.detach().clone() for n, t in policy.model.named_parameters()}
    assert seen[0] == ["g0", "g1", "g2"] and all(len(s) == 1 for s in seen[1:])  # one group a micro-batch
    for n in steps[6]:
        torch.testing.assert_close(steps[2][n], steps[6][n], atol=1e-5, rtol=1e-4)


def test_rescore_returns_rows_in_the_turns_order(tiny_model_dir):
    policy = load_transformers(tiny_model_dir, device="cpu")
    turns, _ = _turns(policy, groups=2, size=2)
    rows, stats = rescore(policy, turns, 2)
    for u, r in zip(turns, rows):
        assert len(r) == len(u.completion_ids)
        assert max(abs(a - b) for a, b in zip(r, u.old_logprobs)) < 1e-5
    assert stats["mismatch_max_abs"] < 1e-5


def _batch_entropy(policy, turns) -> float:
    sb = policy.score_batch([u.prompt for u in turns], [list(u.completion_ids) for u in turns], grad=False,
                            entropy=True)
    return float((sb.extra["entropy"] * sb.mask).sum() / sb.mask.sum())


def test_the_entropy_bonus_is_its_share_of_the_loss_and_raises_the_entropy(tiny_model_dir):
    """--entropy-coef c: with no advantage to learn from, the loss is -c times the batch's mean entropy per
    token (logged as update_entropy), and the updates flatten the policy; without it nothing moves."""
    policy = load_transformers(tiny_model_dir, device="cpu")
    turns, _ = _turns(policy, groups=2, size=3)
    zero = torch.zeros(len(turns))
    # first a peaked policy (a random model's is near uniform, its entropy near the maximum)
    sharpen = TrainConfig.build(algo="grpo", micro_batch_size=len(turns), lr=1e-2)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    for _ in range(3):
        update(make_strategy(sharpen, ".", None), sharpen.update, policy, None, opt, turns, torch.ones(len(turns)))
    before = _batch_entropy(policy, turns)
    cfg = TrainConfig.build(algo="grpo", entropy_coef=0.1, micro_batch_size=len(turns), lr=1e-3)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    out = update(make_strategy(cfg, ".", None), cfg.update, policy, None, opt, turns, zero)
    assert out["update_entropy"] == pytest.approx(before, rel=1e-5)
    assert out["loss"] == pytest.approx(-0.1 * before, rel=1e-5)
    for _ in range(4):
        update(make_strategy(cfg, ".", None), cfg.update, policy, None, opt, turns, zero)
    assert _batch_entropy(policy, turns) > before + 0.05
    off = TrainConfig.build(algo="grpo", micro_batch_size=len(turns), lr=1e-2)
    still = _batch_entropy(policy, turns)
    out = update(make_strategy(off, ".", None), off.update, policy, None,
                 torch.optim.AdamW(policy.parameters(), lr=1e-2, weight_decay=0.0), turns, zero)
    assert "update_entropy" not in out and out["loss"] == 0.0
    assert _batch_entropy(policy, turns) == pytest.approx(still, abs=1e-6)


def test_the_entropy_bonus_accumulates_over_micro_batches_as_one_batch(tiny_model_dir):
    steps = {}
    for micro in (6, 2):
        policy = load_transformers(tiny_model_dir, device="cpu")
        turns, adv = _turns(policy, groups=3, size=2)
        opt = torch.optim.SGD(policy.parameters(), lr=1.0)
        cfg = TrainConfig.build(micro_batch_size=micro, lr=1.0, max_grad_norm=1e9, entropy_coef=0.5)
        update(make_strategy(cfg, ".", None), cfg.update, policy, None, opt, turns, adv)
        steps[micro] = {n: t.detach().clone() for n, t in policy.model.named_parameters()}
    for n in steps[6]:
        torch.testing.assert_close(steps[2][n], steps[6][n], atol=1e-5, rtol=1e-4)
