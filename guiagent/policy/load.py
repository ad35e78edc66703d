"""Loading a Qwen-VL checkpoint, and what training sets up on it: precision and LoRA.

* :func:`load_pretrained`: model, tokenizer, image processor and chat template of a local
  folder or hub id, through the standard ``from_pretrained`` path. The processor is
  assembled from ``Qwen2VLImageProcessorPil``: ``AutoProcessor`` needs torchvision for the
  video processor, and the CPU install has none (scripts/setup.sh never installs it: its only
  wheel there is CUDA-linked and breaks transformers' processors; README, "Set-up"). A folder
  that does not load is a :class:`ModelLoadError` with a one-line reason.
* :func:`resolve_precision`: a precision setting (``auto``, ``fp32``, ``bf16-mixed``, ``bf16``)
  as the dtypes of trainable weights, frozen weights and the forward's autocast.
* :class:`LoraSettings`, :func:`apply_lora`, :func:`merged_weights`: LoRA adapters through
  ``peft`` and the merged inference weights of an adapted model.

:func:`guiagent.policy.hf.load_transformers` puts these together into a policy.
"""

from __future__ import annotations

import json
import pickle
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

import torch

from guiagent.config import ConfigError

__all__ = ["ModelLoadError", "load_pretrained", "pick_device", "model_class", "chat_template_file",
           "PRECISIONS", "Precision", "PrecisionPlan", "resolve_precision", "LANGUAGE_LINEAR_TARGETS",
           "LoraSettings", "apply_lora", "merged_weights", "is_peft"]


class ModelLoadError(ConfigError):
    """A model folder or hub id that transformers cannot load; the message is one line."""


def pick_device(device: str | None) -> torch.device:
    """``device`` as a torch device; CUDA when available if none is named."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def model_class(model_type: str) -> Any:
    """The transformers class that loads a checkpoint of ``model_type`` (``config.model_type``)."""
    import transformers

    name = {"qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration", "qwen3_vl": "Qwen3VLForConditionalGeneration",
            "qwen2_vl": "Qwen2VLForConditionalGeneration"}.get(model_type, "AutoModelForImageTextToText")
    return getattr(transformers, name)


def chat_template_file(path: str) -> str | None:
    """A chat template saved beside the processor (``chat_template.jinja`` / ``.json``), if any."""
    from transformers.utils import cached_file

    for fname in ("chat_template.jinja", "chat_template.json"):
        try:
            f = cached_file(path, fname, _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
        except OSError:
            f = None
        if f:
            text = Path(f).read_text()
            return json.loads(text)["chat_template"] if fname.endswith(".json") else text
    return None


def _load_failure(e: BaseException) -> str:
    """Why a model did not load, in one line (transformers' own messages run to several paragraphs)."""
    if isinstance(e, pickle.UnpicklingError):
        return ("its pickled weights (pytorch_model.bin) hold objects other than tensors and were not loaded, "
                "for safety (save the weights as safetensors)")
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first[:200]}" if first else type(e).__name__


def load_pretrained(path: str, device: torch.device, dtype: torch.dtype, *, min_pixels: int | None = None,
                    max_pixels: int | None = None, attn_implementation: str | None = None,
                    parts: str | None = None) -> tuple[Any, Any, Any, str | None]:
    """The parts of a Qwen-VL checkpoint (local folder or hub id): the model in ``dtype`` on ``device`` (eval
    mode), its tokenizer (left padding), its image processor (``min_pixels`` / ``max_pixels`` override the
    limits it was saved with) and its chat template (``None``: the tokenizer has none and none is saved
    beside it). ``parts``: where the tokenizer, processor and template come from when ``path`` holds the
    weights alone (default ``path``). A folder that does not load raises :class:`ModelLoadError` with a
    one-line reason."""
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    try:  # a folder that does not load (torn or pickled weights, a broken config): one line, no traceback
        config = AutoConfig.from_pretrained(path)
        kwargs: dict[str, Any] = {"dtype": dtype}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        model = model_class(config.model_type).from_pretrained(path, **kwargs).to(device).eval()
        src = parts or path  # the tokenizer, processor and template
        tokenizer = AutoTokenizer.from_pretrained(src)
        tokenizer.padding_side = "left"
        limits = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v}
        image_processor = Qwen2VLImageProcessorPil.from_pretrained(src, **limits)
        if max_pixels and not min_pixels and _min_pixels(image_processor) > max_pixels:
            # a max_pixels under the saved min_pixels (a published Qwen3-VL processor keeps 65,536):
            # the processor would scale small screens up past it; the cap asked for holds instead
            image_processor = Qwen2VLImageProcessorPil.from_pretrained(src, min_pixels=max_pixels,
                                                                       max_pixels=max_pixels)
        template = tokenizer.chat_template or chat_template_file(src)
    except (ImportError, MemoryError):
        raise
    except Exception as e:
        raise ModelLoadError(f"the model {path} cannot be loaded: {_load_failure(e)}") from e
    return model, tokenizer, image_processor, template


def _min_pixels(processor: Any) -> int:
    size = getattr(processor, "size", None)
    value = getattr(processor, "min_pixels", None)
    if value is None and size is not None:
        value = size.get("shortest_edge") if isinstance(size, dict) else getattr(size, "shortest_edge", None)
    return int(value or 0)


# ---- training set-up: precision, LoRA ---------------------------------------------------------

PRECISIONS = ("auto", "fp32", "bf16-mixed", "bf16")
Precision = Literal["auto", "fp32", "bf16-mixed", "bf16"]


@dataclass(frozen=True)
class PrecisionPlan:
    """How a training policy stores and computes.

    ``param_dtype``: trainable weights (the optimiser updates these, so its state has
    this dtype too); ``frozen_dtype``: weights that never change (a LoRA run's base);
    ``autocast_dtype``: the forward's compute dtype under ``torch.autocast`` (None: none).
    """

    name: str
    param_dtype: torch.dtype
    frozen_dtype: torch.dtype
    autocast_dtype: torch.dtype | None


def resolve_precision(precision: str, device: "torch.device | str") -> PrecisionPlan:
    """Turn a precision setting into dtypes.

    * ``auto``: ``fp32`` on CPU, ``bf16-mixed`` on CUDA.
    * ``fp32``: everything fp32.
    * ``bf16-mixed``: fp32 trainable weights and optimiser state, bf16 compute (autocast);
      frozen LoRA bases are stored in bf16. An AdamW step of 1e-6 on a weight of 0.02
      survives in fp32 (resolution ~2e-9) where bf16 (resolution ~1e-4) rounds it away.
    * ``bf16``: everything bf16, no master copy: small updates round away (warned).
    """
    dev = torch.device(device)
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if precision == "auto":
        precision = "bf16-mixed" if dev.type == "cuda" else "fp32"
    if precision == "fp32":
        return PrecisionPlan("fp32", torch.float32, torch.float32, None)
    if precision == "bf16-mixed":
        return PrecisionPlan("bf16-mixed", torch.float32, torch.bfloat16, torch.bfloat16)
    warnings.warn("precision 'bf16' keeps weights and AdamW state in bf16 with no fp32 master copy: "
                  "updates below ~0.4% of a weight round away (use 'bf16-mixed' to train)", stacklevel=2)
    return PrecisionPlan("bf16", torch.bfloat16, torch.bfloat16, None)


#: LoRA targets: the language model's attention and MLP projections (Qwen2-VL / 2.5-VL / 3-VL
#: names); the vision tower, which has projections of the same names, stays frozen.
LANGUAGE_LINEAR_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters (``peft``): ``W + (alpha / rank) · B A`` on ``target_modules`` (a regex)."""

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: str = LANGUAGE_LINEAR_TARGETS

    def __post_init__(self) -> None:
        if self.rank <= 0:
            raise ValueError(f"lora rank must be positive, got {self.rank}")
        if self.alpha <= 0:
            raise ValueError(f"lora alpha must be positive, got {self.alpha}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"lora dropout must lie in [0, 1), got {self.dropout}")


def apply_lora(model: Any, settings: LoraSettings, *, adapter: str | None = None,
               adapter_dtype_fp32: bool = True) -> Any:
    """Wrap ``model`` with trainable LoRA adapters (``peft``, the maintained implementation; merging
    and adapter files come with it). ``adapter``: a saved adapter folder to continue from.
    ``adapter_dtype_fp32`` keeps the adapters in fp32 over a bf16 base (their optimiser state too)."""
    try:
        from peft import LoraConfig, PeftModel, get_peft_model
    except ImportError as e:  # pragma: no cover - peft is a dependency of the training extras
        raise ImportError("LoRA needs peft: pip install peft") from e
    if adapter is not None:
        if not Path(adapter, "adapter_config.json").is_file():
            raise FileNotFoundError(f"no LoRA adapter in {adapter} (adapter_config.json missing)")
        return PeftModel.from_pretrained(model, adapter, is_trainable=True,
                                         autocast_adapter_dtype=adapter_dtype_fp32)
    config = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=settings.target_modules, bias="none")
    try:
        peft_model = get_peft_model(model, config, autocast_adapter_dtype=adapter_dtype_fp32)
    except ValueError as e:  # peft's NoMatchingPeftModuleError; one line naming the setting
        raise ValueError(f"LoRA target_modules {settings.target_modules!r} matched no layer") from e
    if not any(p.requires_grad for p in peft_model.parameters()):
        raise ValueError(f"LoRA target_modules {settings.target_modules!r} matched no layer")
    return peft_model


def is_peft(model: Any) -> bool:
    """Whether ``model`` is a peft (LoRA) wrapper."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def merged_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of a model's inference weights, under the names of the plain model.

    For a peft LoRA model each adapted layer's weight is ``W + ΔW`` (computed one layer at a time,
    so a weight sync streams without a second copy of the model); adapter tensors are left out.
    A plain model yields its ``state_dict()``.
    """
    if not is_peft(model):
        yield from model.state_dict().items()
        return
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    lora_layers = {n: m for n, m in base.named_modules() if isinstance(m, LoraLayer)}
    for key, t in base.state_dict().items():
        if ".lora_" in key:
            continue
        if ".base_layer." in key:
            owner, leaf = key.split(".base_layer.", 1)
            layer = lora_layers.get(owner)
            name = f"{owner}.{leaf}"
            if layer is not None and leaf == "weight":
                with torch.no_grad():
                    delta = sum((layer.get_delta_weight(a) for a in layer.active_adapters
                                 if a in layer.lora_A), torch.zeros((), dtype=t.dtype, device=t.device))
                    yield name, (t + delta.to(t.dtype)).detach()
                continue
            yield name, t
            continue
        yield key, t
