"""Data-parallel learner updates on CPU (gloo, 2 processes): split-batch gradients equal one process's.

The default test spawns the ranks with torch.multiprocessing (Ray start-up would double its
time); the Ray launcher is checked under ``-m slow``.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

from tests.images import noise_png as png

from rl.distributed import DistSettings, free_port, loss_scale, shard_indices

#: max |g_ddp - g_single| relative to max |g_single| per tensor (fp32 sums in another order; measured ~1e-7)
GRAD_RTOL = 1e-4


def batch():
    from guiagent.policy import message

    chats = [[message("user", png(56 + 28 * (i % 3), 56, i), f"Goal: task {i}.")] for i in range(4)]
    g = torch.Generator().manual_seed(1)
    comps = [torch.randint(100, 1000, (n,), generator=g).tolist() for n in (7, 3, 11, 5)]  # unequal lengths
    return chats, comps


def grads_of(policy, chats, comps, scale=1.0) -> dict[str, torch.Tensor]:
    sb = policy.score_batch(chats, comps, grad=True)
    loss = -(sb.logprobs * sb.mask).sum() / sb.mask.sum()  # token mean, as the trainer's default
    (loss * scale).backward()
    model = policy.model.module if hasattr(policy.model, "module") else policy.model
    out = {}
    for n, p in model.named_parameters():
        if p.grad is not None:
            g = p.grad
            out[n] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
    return out


def _rank(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    from guiagent.policy.hf import load_transformers
    from rl.distributed import init_distributed, wrap_policy

    init_distributed(rank, DistSettings(world_size=world, master_port=port))
    try:
        chats, comps = batch()
        idx = shard_indices(len(chats), rank, world)
        mine_c, mine_t = [chats[i] for i in idx], [comps[i] for i in idx]
        scale = loss_scale(sum(len(c) for c in mine_t))
        for strategy in ("ddp", "fsdp2"):  # one spawn for both: process start-up dominates
            policy = wrap_policy(load_transformers(model_dir, device="cpu", precision="fp32"), strategy)
            g = grads_of(policy, mine_c, mine_t, scale)
            if rank == 0:
                torch.save(g, f"{out}.{strategy}.pt")
    finally:
        policy = None  # the wrapped model's hooks and buckets go before the group does
        # neither rank tears the group down while the other is still in a collective
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    # Done (an error above propagates to the parent as usual): leave without running C++ static
    # destructors, where a background thread of gloo's now and then still joinable aborted a rank
    # after its work ("terminate called without an active exception", SIGABRT; twice in ~8 full runs,
    # after the barrier above too). rank 0's files are written and closed by torch.save.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def test_shard_indices_and_loss_scale_without_group():
    assert [shard_indices(5, r, 2) for r in range(2)] == [[0, 1, 2], [3, 4]]
    assert [shard_indices(2, r, 3) for r in range(3)] == [[0], [1], []]
    assert sorted(i for r in range(4) for i in shard_indices(11, r, 4)) == list(range(11))
    assert loss_scale(7) == 1.0
    with pytest.raises(ValueError):
        shard_indices(3, 2, 2)
    with pytest.raises(ValueError):
        DistSettings(world_size=0)


def test_two_rank_gradients_equal_single_process(tiny_model_dir, tmp_path):
    """DDP and FSDP2 (fully_shard, gradients gathered with full_tensor) on 2 gloo ranks, each
    scoring half of 4 chats with completions of unequal lengths, against one process on all 4."""
    import torch.multiprocessing as mp

    from guiagent.policy.hf import load_transformers

    out = tmp_path / "rank0"
    mp.spawn(_rank, args=(2, free_port(), tiny_model_dir, str(out)), nprocs=2, join=True)
    single = grads_of(load_transformers(tiny_model_dir, device="cpu", precision="fp32"), *batch())
    assert len(single) > 50
    for strategy in ("ddp", "fsdp2"):
        got = torch.load(f"{out}.{strategy}.pt", weights_only=True)
        assert set(got) == set(single)
        worst = max(float((got[n] - single[n]).abs().max() / single[n].abs().max().clamp(min=1e-12))
                    for n in single)
        print(f"{strategy}: worst relative gradient difference {worst:.2e}")
        assert worst < GRAD_RTOL


def _ray_fn(rank: int, world: int) -> float:
    t = torch.tensor([float(rank + 1)])
    torch.distributed.all_reduce(t)
    return float(t.item())


@pytest.mark.slow
@pytest.mark.ray
def test_ray_learner_group_forms_a_process_group():
    import ray

    from rl.distributed import RayLearnerGroup

    group = RayLearnerGroup(world_size=2)
    try:
        assert group.run(_ray_fn) == [3.0, 3.0]
    finally:
        group.close()
        ray.shutdown()
