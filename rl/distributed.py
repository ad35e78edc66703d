"""Data-parallel learner updates: DDP or FSDP2 over torch.distributed, ranks launched as Ray actors.

Each rank holds the policy (DDP: a full copy; FSDP2: a shard of every layer), scores its share of
an update's turns and calls ``backward``; the gradients are averaged across ranks during the
backward pass. So that N ranks compute the gradient one process would compute on the whole batch,
each rank scales its loss by :func:`loss_scale` (its share of the batch's tokens times N, as DDP
divides the summed gradient by N).

Pieces (torch's own DDP / ``fully_shard`` do the communication; Ray only places and starts ranks):

* :func:`init_distributed` -- join a process group (``gloo`` on CPU, ``nccl`` on CUDA);
* :func:`wrap_policy` -- wrap a :class:`~guiagent.policy.hf.TransformersPolicy`'s model in place;
* :func:`shard_indices` -- which of an update's turns a rank scores;
* :func:`loss_scale` -- the all-reduced token share above;
* :class:`RayLearnerGroup` -- N Ray actors, one rank each, running a function with the group set up.

Example (two GPUs)::

    group = RayLearnerGroup(world_size=2, num_gpus_per_rank=1)            # doctest: +SKIP
    grads = group.run(my_update_fn, model_dir, turns)                     # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

import torch
import torch.distributed as dist

__all__ = ["DistSettings", "init_distributed", "wrap_policy", "wrap_model", "shard_indices", "loss_scale",
           "RayLearnerGroup", "free_port", "scatter"]

Strategy = Literal["ddp", "fsdp2"]


@dataclass(frozen=True)
class DistSettings:
    """Where rank 0 listens and how ranks talk (``gloo``: CPU, ``nccl``: CUDA)."""

    world_size: int
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    backend: Literal["gloo", "nccl"] = "gloo"
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be gloo or nccl, got {self.backend!r}")


def free_port() -> int:
    """A TCP port free on this host right now (for rank 0's rendezvous)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def init_distributed(rank: int, settings: DistSettings) -> None:
    """Join the default process group as ``rank`` (TCP rendezvous at ``master_addr:master_port``)."""
    if not 0 <= rank < settings.world_size:
        raise ValueError(f"rank {rank} outside [0, {settings.world_size})")
    if settings.backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("backend nccl needs CUDA GPUs; use gloo on CPU")
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(settings.backend, init_method=f"tcp://{settings.master_addr}:{settings.master_port}",
                            rank=rank, world_size=settings.world_size,
                            timeout=datetime.timedelta(seconds=settings.timeout_s))


def wrap_model(model: torch.nn.Module, strategy: Strategy = "ddp", *, mixed_bf16: bool = False) -> torch.nn.Module:
    """Make ``model`` data-parallel.

    * ``ddp``: ``DistributedDataParallel`` (a full replica per rank; gradients all-reduced in
      buckets during the backward). ``find_unused_parameters`` is on because a text-only batch
      leaves the vision tower out of the graph.
    * ``fsdp2``: ``torch.distributed.fsdp.fully_shard`` on each decoder / vision block, then on the
      root (parameters, gradients and optimiser state sharded; a block's weights gathered only
      while it runs). ``mixed_bf16`` computes in bf16 with fp32 gradient reduction
      (``MixedPrecisionPolicy``), over fp32 sharded weights: the master copy is the shard.
      The module is changed in place and returned.
    """
    if not dist.is_initialized():
        raise RuntimeError("call init_distributed first")
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        dev = next(model.parameters()).device
        ids = [dev.index] if dev.type == "cuda" else None
        return DDP(model, device_ids=ids, find_unused_parameters=True)
    if strategy == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed_bf16
              else MixedPrecisionPolicy())
        for block in _blocks(model):
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        return model
    raise ValueError(f"unknown strategy {strategy!r}; choose ddp or fsdp2")


def _blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks to shard one by one: every ``ModuleList`` entry (decoder layers, vision blocks)."""
    out: list[torch.nn.Module] = []
    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList):
            out.extend(m)
    return out


def wrap_policy(policy: Any, strategy: Strategy = "ddp", *, mixed_bf16: bool = False) -> Any:
    """Wrap a :class:`~guiagent.policy.hf.TransformersPolicy`'s model (in place); returns the policy.

    Scoring, ``parameters()`` and saving keep working (save from rank 0; under FSDP2 gather a full
    state dict first with ``torch.distributed.checkpoint.state_dict.get_model_state_dict``)."""
    wrapped = wrap_model(policy.model, strategy, mixed_bf16=mixed_bf16)
    if strategy == "ddp":
        policy.ddp = wrapped
        policy.model = wrapped
    return policy


def shard_indices(n: int, rank: int, world_size: int) -> list[int]:
    """Contiguous, near-equal shares of ``range(n)``: rank ``r`` gets the ``r``-th (the first
    ``n % world_size`` ranks one more). Every index lands on exactly one rank."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside [0, {world_size})")
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return list(range(start, start + base + (1 if rank < extra else 0)))


def loss_scale(local_tokens: int | float, *, device: torch.device | str = "cpu") -> float:
    """``world_size · local / Σ_ranks local``: the factor that makes DDP's averaged gradient equal
    the gradient of a token mean over the whole batch (each rank's loss is its own token mean).
    For a sequence mean pass sequence counts instead. 1.0 without a process group."""
    if not dist.is_initialized():
        return 1.0
    t = torch.tensor([float(local_tokens)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    total = float(t.item())
    return dist.get_world_size() * float(local_tokens) / total if total > 0 else 0.0


# ---- launching ranks as Ray actors ------------------------------------------------------------------

class _Rank:
    """One learner rank in a Ray actor: joins the process group, then runs what it is given."""

    def __init__(self, rank: int, settings: DistSettings, env: dict[str, str]):
        os.environ.update(env)
        self.rank = rank
        self.settings = settings

    def setup(self) -> int:
        init_distributed(self.rank, self.settings)
        return self.rank

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self.rank, self.settings.world_size, *args)

    def teardown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class RayLearnerGroup:
    """``world_size`` Ray actors, one torch.distributed rank each (rank 0's host is the rendezvous).

    ``run(fn, *args)`` calls ``fn(rank, world_size, *args)`` on every rank at once and returns the
    results in rank order. ``num_gpus_per_rank=1`` pins one GPU per actor (Ray sets
    ``CUDA_VISIBLE_DEVICES``) and uses ``nccl``; 0 runs on CPU with ``gloo``.
    """

    def __init__(self, world_size: int, *, num_gpus_per_rank: float = 0, num_cpus_per_rank: float = 1,
                 backend: str | None = None, env: dict[str, str] | None = None):
        import ray

        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        backend = backend or ("nccl" if num_gpus_per_rank else "gloo")
        addr = ray.util.get_node_ip_address()
        self.settings = DistSettings(world_size=world_size, master_addr=addr, master_port=free_port(),
                                     backend=backend)  # type: ignore[arg-type]
        actor = ray.remote(num_gpus=num_gpus_per_rank, num_cpus=num_cpus_per_rank)(_Rank)
        env = {"OMP_NUM_THREADS": "1", **(env or {})}
        self.actors = [actor.remote(r, self.settings, env) for r in range(world_size)]
        ray.get([a.setup.remote() for a in self.actors])  # all ranks rendezvous together

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        import ray

        return ray.get([a.run.remote(fn, *args) for a in self.actors])

    def close(self) -> None:
        import ray

        try:
            ray.get([a.teardown.remote() for a in self.actors])
        finally:
            for a in self.actors:
                ray.kill(a)
            self.actors = []


def scatter(items: Sequence[Any], rank: int, world_size: int) -> list[Any]:
    """``items`` at :func:`shard_indices` for ``rank``."""
    return [items[i] for i in shard_indices(len(items), rank, world_size)]
