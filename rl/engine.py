"""The rollout side's weights: the learner's own model, a copy for async rollouts, or a colocated
vLLM engine.

In sync mode the rollouts share the learner's model, so syncing is free. In async mode they act
with their own copy, synced after each update under a lock (generation holds it: weights are
never swapped mid-batch). With ``--rollout-engine vllm`` a vLLM engine in this process on the
learner's GPU generates; it sleeps during each update (its memory the learner's) and the
learner's new weights are pushed into it when the update ends.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Iterator

import torch

from guiagent.policy.hf import load_transformers

if TYPE_CHECKING:
    from rl.config import TrainConfig

__all__ = ["RolloutEngine", "engine_dtype"]


def engine_dtype(name: str, learner: Any) -> Any:
    """The dtype weights are cast to on their way into the engine (auto: the learner's weights' own,
    bf16 when the learner keeps fp32 masters on a GPU)."""
    if name != "auto":
        return getattr(torch, name)
    dtype = next(learner.parameters()).dtype
    return torch.bfloat16 if dtype == torch.float32 and learner.device.type == "cuda" else dtype


class RolloutEngine:
    """What generates rollouts, and how it gets the learner's weights (see the module docstring)."""

    def __init__(self, cfg: "TrainConfig", policy: Any, model_dir: str, *, engine_dir: str | None = None,
                 max_images: int = 1):
        """``model_dir``: the policy's folder (a resumed run's checkpoint); ``engine_dir``: the starting
        model, which an async copy and a vLLM engine are built from (the learner's weights go into
        them at once)."""
        self.learner = policy
        self.lock = threading.Lock()
        self.colocated: Any = None
        if cfg.rollouts.rollout_engine == "vllm":
            self.policy, self.colocated = self._vllm(cfg, engine_dir or model_dir, max_images)
        elif cfg.rollouts.rollout == "async":  # the starting model's folder, then the learner's weights: a
            # resumed run's checkpoint holds what training changed alone (a LoRA run's adapter, no tokenizer)
            self.policy = load_transformers(engine_dir or model_dir, threads=cfg.threads or None)
            self.policy.load_state_dict(policy.state_dict())
            self.policy.version = policy.version
        else:
            self.policy = policy

    def _vllm(self, cfg: "TrainConfig", model_dir: str, max_images: int) -> tuple[Any, Any]:
        """A vLLM engine holding the learner's current weights (a resumed or LoRA run's differ from the
        folder's), and the sync that hands memory over."""
        from guiagent.policy.vllm_backend import ColocatedSync, VLLMPolicy, on_cpu  # lazy: the optional vllm extra

        v = cfg.vllm
        g = self.learner.image_geometry()
        cpu = on_cpu()
        # vLLM's CPU build: the learner's fp32 on CPU, so the engine's too (its "auto" would pick bf16)
        dtype = "float32" if cpu and v.dtype == "auto" else v.dtype
        # the learner's own encoder: one encoding a turn serves the engine (its token ids) and the update
        engine = VLLMPolicy(model_dir, colocate=True, enable_sleep_mode=v.sleep_level > 0,
                            gpu_memory_utilization=v.gpu_memory_utilization, max_model_len=v.max_model_len,
                            enforce_eager=v.enforce_eager or cpu, dtype=dtype, seed=cfg.seed,
                            min_pixels=g.min_pixels, max_pixels=g.max_pixels, max_images=max_images,
                            encoder=self.learner.encoder,
                            kv_cache_memory_bytes=int(v.kv_cache_gib * (1 << 30)) if v.kv_cache_gib else None)
        level = v.sleep_level if engine.sleep_mode else 0  # the CPU build has none (said once by the engine)
        sync = ColocatedSync(engine, self.learner, dtype=engine_dtype(dtype, self.learner), level=level)
        sync.push()
        return engine, sync

    @contextlib.contextmanager
    def update_phase(self) -> Iterator[None]:
        """Around the update: a colocated engine asleep (its memory the learner's), the new weights
        pushed into it when the block ends (and the engine woken with its old weights if the update
        fails); nothing otherwise."""
        if self.colocated is None:
            yield
        elif self.colocated.level == 0:  # no sleep mode: both stay on the GPU, weights pushed after
            yield
            self.colocated.push()
        else:
            with self.colocated.update_phase():
                yield

    def sync(self) -> None:
        """After an update: the rollout side's copy takes the learner's weights (pushed already into a
        colocated engine at the end of the update phase)."""
        if self.colocated is None and self.policy is not self.learner:
            with self.lock:
                self.policy.load_state_dict(self.learner.state_dict())
                self.policy.version = self.learner.version

    def close(self) -> None:
        if self.colocated is not None:
            self.colocated.engine.close()
