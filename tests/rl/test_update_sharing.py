"""The update's micro-batches keep a group's samples of one screen together, without changing the step."""

from __future__ import annotations

import io
import random

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
