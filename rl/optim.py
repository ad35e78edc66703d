"""Optimisers that keep small updates, and a memory estimate for a training run.

Why: bf16 has 8 significant bits, so a weight of 0.02 moves only in steps of ~1.2e-4
(half a step rounds away). An AdamW update at lr 1e-6 changes each weight by ~1e-6, so on
bf16 weights nearly every update is lost. Two remedies, picked by the policy's storage:

* fp32 trainable weights (``load_transformers(..., precision="bf16-mixed")``: the forward
  runs under bf16 autocast): a plain ``torch.optim.AdamW`` (fp32 state).
* bf16 weights (a policy loaded with ``dtype="bfloat16"``): :class:`MasterWeightAdamW`
  keeps an fp32 master copy and fp32 AdamW state, steps the master and copies it back.

``precision="bf16"`` asks for neither (bf16 weights and state, a warning).

Example::

    >>> policy = load_transformers(path, precision="bf16-mixed", lora=LoraSettings(rank=64))  # doctest: +SKIP
    >>> print(estimate_memory_for(policy.model, precision="bf16-mixed", micro_batch_size=4,
    ...                           seq_len=2048, completion_len=256).summary())                 # doctest: +SKIP
    >>> opt = build_optimizer(policy, lr=1e-5, betas=(0.9, 0.98), weight_decay=0.0,
    ...                       precision="bf16-mixed")                                         # doctest: +SKIP
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch

from guiagent.policy.hf import LANGUAGE_LINEAR_TARGETS, PRECISIONS, resolve_precision

__all__ = ["PRECISIONS", "OptimConfig", "MasterWeightAdamW", "build_optimizer", "MemoryEstimate",
           "estimate_memory", "estimate_memory_for", "lora_trainable_params", "GiB"]

GiB = 1 << 30


@dataclass(frozen=True)
class OptimConfig:
    """AdamW settings and the precision they run under (``auto``: fp32 on CPU, bf16-mixed on CUDA)."""

    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0
    precision: str = "auto"

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must lie in [0, 1), got {self.betas}")


class MasterWeightAdamW(torch.optim.AdamW):
    """AdamW over fp32 master copies of low-precision (bf16/fp16) model weights.

    ``step()`` copies each model gradient into its master's fp32 gradient, runs AdamW on the
    masters, and writes them back rounded to the model's dtype; sub-resolution updates
    accumulate in the master until they show. ``param_groups`` hold the masters (so lr
    schedulers work); ``state_dict()`` carries them too, so a resumed run continues from the
    exact fp32 values rather than the rounded weights.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), weight_decay: float = 0.0, eps: float = 1e-8):
        self.model_params = [p for p in params]
        if not self.model_params:
            raise ValueError("MasterWeightAdamW got no parameters")
        masters = [p.detach().to(torch.float32).clone().requires_grad_(True) for p in self.model_params]
        super().__init__(masters, lr=lr, betas=betas, weight_decay=weight_decay, eps=eps)
        self.masters = masters

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        if closure is not None:
            raise ValueError("MasterWeightAdamW does not take a closure")
        for p, m in zip(self.model_params, self.masters):
            m.grad = None if p.grad is None else p.grad.detach().to(torch.float32)
        super().step()
        for p, m in zip(self.model_params, self.masters):
            if m.grad is not None:
                p.copy_(m)
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.model_params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()
        super().zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        sd = super().state_dict()
        sd["master_weights"] = [m.detach().clone() for m in self.masters]
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        masters = state_dict.pop("master_weights", None)
        super().load_state_dict(state_dict)
        if masters is not None:
            if len(masters) != len(self.masters):
                raise ValueError(f"checkpoint has {len(masters)} master weights, the model {len(self.masters)}")
            with torch.no_grad():
                for m, saved, p in zip(self.masters, masters, self.model_params):
                    m.copy_(saved)
                    p.copy_(m)


def build_optimizer(policy: Any, lr: float, betas: tuple[float, float] = (0.9, 0.98), weight_decay: float = 0.0,
                    precision: str = "auto") -> torch.optim.Optimizer:
    """AdamW over ``policy``'s trainable parameters that keeps updates of any size.

    ``policy``: anything with ``parameters()`` (a ``TransformersPolicy``, an ``nn.Module``).
    ``precision`` (see :func:`guiagent.policy.hf.resolve_precision`):

    * ``fp32`` / ``bf16-mixed``: fp32 trainable weights get ``torch.optim.AdamW`` (fp32 state);
      bf16/fp16 trainable weights get :class:`MasterWeightAdamW` (an fp32 master copy).
    * ``bf16``: plain AdamW on the weights as they are (a warning if they are not fp32).

    Raises ``ValueError`` when nothing is trainable or ``fp32`` meets low-precision weights.
    """
    params = [p for p in policy.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the policy has no trainable parameters")
    device = params[0].device
    plan = resolve_precision(precision, device) if precision != "bf16" else None
    low = [p for p in params if p.dtype in (torch.bfloat16, torch.float16)]
    if plan is None:  # pure bf16 on request: no master copy
        if low:
            warnings.warn(f"precision 'bf16': AdamW steps {len(low)} low-precision tensors in place; "
                          "updates below their resolution are lost", stacklevel=2)
        return _adamw(params, lr=lr, betas=betas, weight_decay=weight_decay)
    if low and plan.name == "fp32":
        raise ValueError(f"precision 'fp32' but {len(low)} trainable tensors are {low[0].dtype}: "
                         "load the policy with precision='fp32'")
    if low:
        if len(low) != len(params):
            raise ValueError("trainable parameters mix fp32 and low-precision dtypes")
        return MasterWeightAdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)
    return _adamw(params, lr=lr, betas=betas, weight_decay=weight_decay)


def _adamw(params: list[torch.Tensor], **kw: Any) -> torch.optim.AdamW:
    """``torch.optim.AdamW``, fused where :func:`_fusable`. The fused kernel writes the weights without
    moving their in-place version counters, which is how a policy knows its cached vision-tower outputs
    still hold (``TransformersPolicy._vision_inputs``); each step then marks them changed
    (``torch.autograd.graph.increment_version``: metadata only, no pass over the weights)."""
    fused = _fusable(params)
    opt = torch.optim.AdamW(params, fused=fused, **kw)
    if fused:
        opt.register_step_post_hook(_mark_changed)
    return opt


def _mark_changed(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    torch.autograd.graph.increment_version([p for g in opt.param_groups for p in g["params"]])


def _fusable(params: list[torch.Tensor]) -> bool | None:
    """torch's fused AdamW kernel (one pass over each tensor; on CPU a third of the for-loop's time on
    the tiny model) where it exists: floating tensors on CPU or CUDA, all on one device type, none
    sharded (FSDP's DTensors keep the default)."""
    kinds = {p.device.type for p in params}
    ok = (len(kinds) == 1 and kinds <= {"cpu", "cuda"} and all(p.is_floating_point() for p in params)
          and not any(hasattr(p, "device_mesh") for p in params))
    return True if ok else None


# ---- memory estimate ------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a training step needs on one device (before vLLM's share, if colocated).

    ``params``: all weights as stored; ``grads``: gradients of the trainable ones;
    ``optimizer``: AdamW's two moments (+ fp32 master weights when the model is low-precision);
    ``autocast``: bf16 copies of fp32 weights cached by autocast during a forward;
    ``activations``: a rough figure for one micro-batch (see :func:`estimate_memory`).
    """

    params: int
    grads: int
    optimizer: int
    autocast: int
    activations: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.autocast + self.activations

    def summary(self) -> str:
        parts = [f"{k} {getattr(self, k) / GiB:.2f}" for k in ("params", "grads", "optimizer", "autocast",
                                                             "activations")]
        return "memory estimate (GiB): " + ", ".join(parts) + f"; total {self.total / GiB:.2f}"


def estimate_memory(total_params: int, trainable_params: int, *, precision: str, hidden_size: int,
                    num_layers: int, vocab_size: int, micro_batch_size: int, seq_len: int,
                    completion_len: int, gradient_checkpointing: bool = False, lora: bool = False,
                    device: str = "cuda", master_weights: bool = False) -> MemoryEstimate:
    """A pure, rough estimate of training memory on one device.

    Bytes per parameter (``precision`` resolved for ``device``):

    ==============  ============  ===========  =====  ====================  ========
    precision       trainable w.  frozen w.    grads  optimizer             autocast
    ==============  ============  ===========  =====  ====================  ========
    fp32            4             4            4      8                     0
    bf16-mixed      4             2 (LoRA) /4  4      8                     2 x all
    bf16-mixed, M   2             2            2      8 + 4 (master)        0
    bf16            2             2            2      4                     0
    ==============  ============  ===========  =====  ====================  ========

    (M: ``master_weights`` -- bf16 weights with :class:`MasterWeightAdamW`.) Activations of a
    decoder layer per token: ~34 x hidden x 2 bytes in bf16 (Korthikanti et al., 2022, with
    flash attention, so no seq² term), doubled in fp32. With ``gradient_checkpointing`` only each
    layer's input (2 x hidden bytes) is kept, plus one layer's full activations during its
    recompute. Logits are computed for ``completion_len`` tokens only: ~10 bytes per vocabulary
    entry (bf16 logits, fp32 copy, fp32 log-softmax). The vision tower's activations are not
    counted (small next to the text model's for a few small screenshots; not for many large ones:
    on an H200, LoRA with 16 screenshots of 1,280 visual tokens a micro-batch peaked 66% over
    this figure, docs/benchmarks.md "`bench/gpu.py` and `tests/gpu` on an H200").
    """
    if total_params < trainable_params or trainable_params < 0:
        raise ValueError(f"trainable_params {trainable_params} must lie in [0, total_params {total_params}]")
    if min(hidden_size, num_layers, vocab_size, micro_batch_size, seq_len) <= 0 or completion_len < 0:
        raise ValueError("sizes must be positive")
    plan = resolve_precision(precision, device) if precision != "bf16" else None
    name = "bf16" if plan is None else plan.name
    frozen = total_params - trainable_params
    if name == "fp32":
        params, grads, opt, cast, act_bytes = 4 * total_params, 4 * trainable_params, 8 * trainable_params, 0, 4
    elif name == "bf16-mixed" and master_weights:
        params, grads, opt, cast, act_bytes = 2 * total_params, 2 * trainable_params, 12 * trainable_params, 0, 2
    elif name == "bf16-mixed":
        frozen_bytes = 2 if lora else 4
        params = 4 * trainable_params + frozen_bytes * frozen
        grads, opt, act_bytes = 4 * trainable_params, 8 * trainable_params, 2
        # autocast caches a bf16 copy of each fp32 weight it casts (frozen bf16 weights need none)
        cast = 2 * (trainable_params + (0 if lora else frozen))
    else:
        params, grads, opt, cast, act_bytes = 2 * total_params, 2 * trainable_params, 4 * trainable_params, 0, 2
    tokens = micro_batch_size * seq_len
    per_layer_full = 34 * hidden_size * act_bytes // 2 * tokens
    if gradient_checkpointing:
        acts = num_layers * tokens * hidden_size * act_bytes + per_layer_full
    else:
        acts = num_layers * per_layer_full
    acts += micro_batch_size * completion_len * vocab_size * 10
    return MemoryEstimate(params=params, grads=grads, optimizer=opt, autocast=cast, activations=acts)


def lora_trainable_params(shapes: Sequence[tuple[int, int]], rank: int) -> int:
    """Parameters of LoRA adapters of ``rank`` on linear layers of ``(in_features, out_features)``:
    ``Σ rank · (in + out)`` (A is ``rank x in``, B is ``out x rank``)."""
    return sum(rank * (i + o) for i, o in shapes)


def estimate_memory_for(model: Any, *, precision: str, micro_batch_size: int, seq_len: int,
                        completion_len: int, gradient_checkpointing: bool = False, lora_rank: int = 0,
                        lora_targets: str | None = None, device: str = "cuda") -> MemoryEstimate:
    """:func:`estimate_memory` for a Hugging Face Qwen-VL model (a real one, or one built on the
    ``meta`` device from a config: no memory, exact counts). ``lora_rank > 0`` counts LoRA adapters
    on the layers ``lora_targets`` (default: the language model's projections) of a plain model;
    a model already wrapped by peft is counted as it is."""
    text = getattr(model.config, "text_config", model.config)
    ps = list(model.parameters())
    seen: set[int] = set()
    total = 0
    for p in ps:  # tied weights (embeddings / lm_head) count once
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    is_peft = hasattr(model, "peft_config")
    if lora_rank and not is_peft:
        pat = re.compile(lora_targets or LANGUAGE_LINEAR_TARGETS)
        shapes = [(m.in_features, m.out_features) for n, m in model.named_modules()
                  if isinstance(m, torch.nn.Linear) and pat.fullmatch(n)]
        trainable = lora_trainable_params(shapes, lora_rank)
        total += trainable
        lora = True
    else:
        trainable = sum(p.numel() for p in ps if p.requires_grad)
        lora = is_peft
    return estimate_memory(total, trainable, precision=precision, hidden_size=text.hidden_size,
                           num_layers=text.num_hidden_layers, vocab_size=text.vocab_size,
                           micro_batch_size=micro_batch_size, seq_len=seq_len, completion_len=completion_len,
                           gradient_checkpointing=gradient_checkpointing, lora=lora, device=device)
