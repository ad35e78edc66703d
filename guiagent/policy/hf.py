"""The transformers backend: Qwen2.5-VL / Qwen3-VL (and Qwen2-VL) on CPU or CUDA.

Loads a local folder or a hub id through the standard ``from_pretrained`` path.
The processor is assembled here from the tokenizer and
``Qwen2VLImageProcessorPil``: ``AutoProcessor`` needs torchvision for the video
processor, and the CPU install has none (scripts/setup.sh never installs it: its only
wheel there is CUDA-linked and breaks transformers' processors; README, "Set-up").

Two details decide whether log-probs are exact:

* ``mm_token_type_ids`` (1 on image tokens, 0 elsewhere, extended with zeros
  over completion tokens) and ``image_grid_thw`` go into every forward pass; without
  them the model silently falls back to 1-D positions.
* prompts are LEFT padded, so that in :meth:`TransformersPolicy.score_batch` all
  completions start at the same column and only their logits are computed.

Example::

    >>> policy = load_transformers("runs/tiny")                  # doctest: +SKIP
    >>> [g] = policy.generate([chat], SamplingParams(temperature=0))  # doctest: +SKIP
    >>> policy.score([chat], [g.token_ids])[0] == list(g.logprobs)    # doctest: +SKIP
"""

from __future__ import annotations

from collections import OrderedDict

import contextlib
import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import torch

from guiagent.config import ConfigError
from guiagent.policy.base import (
    Chat, ChatError, Generation, SamplingParams, ScoreBatch, chat_images, check_chat, to_pil,
)

__all__ = ["TransformersPolicy", "load_transformers", "ModelLoadError", "image_processor_for", "ChatEncoder", "Encoded",
           "PRECISIONS", "PrecisionPlan", "resolve_precision", "LoraSettings", "apply_lora"]

IMAGE_TOKEN = "<|image_pad|>"
VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


def image_processor_for(patch_size: int = 14, min_pixels: int = 28 * 28 * 4, max_pixels: int = 28 * 28 * 256):
    """A Qwen2-VL PIL image processor with the given patch size and pixel limits."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(patch_size=patch_size, merge_size=2, temporal_patch_size=2,
                                    min_pixels=min_pixels, max_pixels=max_pixels)


@dataclass(frozen=True)
class Encoded:
    """One chat as model inputs (no batch dimension)."""

    input_ids: list[int]
    mm_token_type_ids: list[int]
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    #: a content digest of each image (what the vision-feature cache is keyed by)
    image_keys: tuple[bytes, ...] = ()


class ChatEncoder:
    """Chat -> token ids with each image expanded to its grid's number of ``<|image_pad|>`` tokens."""

    def __init__(self, tokenizer: Any, image_processor: Any, chat_template: str | None = None,
                 image_cache_bytes: int = 1 << 30):
        self.tokenizer = tokenizer
        # Preprocessed images by their encoded bytes (LRU within a byte budget): a rollout's
        # screenshot is encoded for generation and again for the update, an SFT example every epoch.
        self._image_cache: "OrderedDict[bytes, tuple[torch.Tensor, torch.Tensor, bytes]]" = OrderedDict()
        self._image_cache_bytes = image_cache_bytes
        self._image_cache_used = 0
        self._chat_cache: "OrderedDict[int, tuple[Chat, Encoded]]" = OrderedDict()
        #: encoded chats kept (each holds its image patches: ~2 MB for 128 visual tokens)
        self.chat_cache_size = 128
        self.image_processor = image_processor
        self.chat_template = chat_template or tokenizer.chat_template
        if self.chat_template is None:
            from guiagent.policy.tiny import QWEN2_VL_CHAT_TEMPLATE

            self.chat_template = QWEN2_VL_CHAT_TEMPLATE
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        self.merge = int(image_processor.merge_size)

    def render(self, chat: Chat) -> str:
        """The prompt text with one ``<|image_pad|>`` per image and the assistant header."""
        plain = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str) else [
            {"type": "image"} if p["type"] == "image" else {"type": "text", "text": p["text"]}
            for p in m["content"]]} for m in chat]
        return self.tokenizer.apply_chat_template(
            plain, tokenize=False, add_generation_prompt=True, chat_template=self.chat_template)

    def encode(self, chat: Chat) -> Encoded:
        """Model inputs of ``chat``. The same chat object encoded again (a rollout's prompt scored in
        the update) is served from a small cache; chats are never mutated after they are built."""
        hit = self._chat_cache.get(id(chat))
        if hit is not None and hit[0] is chat:
            self._chat_cache.move_to_end(id(chat))
            return hit[1]
        enc = self._encode(chat)
        self._chat_cache[id(chat)] = (chat, enc)  # holding the chat keeps its id from being reused
        if len(self._chat_cache) > self.chat_cache_size:
            self._chat_cache.popitem(last=False)
        return enc

    def _encode(self, chat: Chat) -> Encoded:
        check_chat(chat)
        return self.encode_rendered(self.render(chat), chat_images(chat))

    def encode_rendered(self, text: str, images: Sequence[Any]) -> Encoded:
        """Model inputs of an already rendered prompt (one ``<|image_pad|>`` per image) and its images:
        what a vLLM-style engine receives."""
        pieces = text.split(IMAGE_TOKEN)
        if len(pieces) - 1 != len(images):
            raise ChatError(f"the chat template produced {len(pieces) - 1} image slots for {len(images)} images")
        pixel_values = grid = None
        keys: tuple[bytes, ...] = ()
        if images:
            done = [self._preprocess(im) for im in images]
            pixel_values = torch.cat([d[0] for d in done]) if len(done) > 1 else done[0][0]
            grid = torch.cat([d[1] for d in done])
            keys = tuple(d[2] for d in done)
        ids: list[int] = []
        types: list[int] = []
        for i, piece in enumerate(pieces):
            if piece:
                t = self.tokenizer.encode(piece, add_special_tokens=False)
                ids += t
                types += [0] * len(t)
            if i < len(images):
                n = int(grid[i].prod()) // (self.merge ** 2)
                ids += [self.image_token_id] * n
                types += [1] * n
        return Encoded(ids, types, pixel_values, grid, keys)


    def _preprocess(self, image: Any) -> tuple[torch.Tensor, torch.Tensor, bytes]:
        """One image's patches, grid and content digest (Qwen-VL concatenates images' patches, so
        per-image is exact)."""
        key = bytes(image) if isinstance(image, (bytes, bytearray)) and self._image_cache_bytes else None
        if key is not None and key in self._image_cache:
            self._image_cache.move_to_end(key)
            return self._image_cache[key]
        out = self.image_processor(images=[to_pil(image)], return_tensors="pt")
        pv, grid = out["pixel_values"], out["image_grid_thw"]
        digest = _digest(key) if key is not None else _patches_digest(pv, grid)
        hit = (pv, grid, digest)
        if key is not None:
            size = hit[0].numel() * hit[0].element_size()
            self._image_cache[key] = hit
            self._image_cache_used += size
            while self._image_cache_used > self._image_cache_bytes and self._image_cache:
                _, (pv, _, _) = self._image_cache.popitem(last=False)
                self._image_cache_used -= pv.numel() * pv.element_size()
        return hit


def _pick_device(device: str | None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _model_class(model_type: str):
    import transformers

    name = {"qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration", "qwen3_vl": "Qwen3VLForConditionalGeneration",
            "qwen2_vl": "Qwen2VLForConditionalGeneration"}.get(model_type, "AutoModelForImageTextToText")
    return getattr(transformers, name)


def _chat_template_file(path: str) -> str | None:
    """A chat template saved beside the processor (``chat_template.jinja`` / ``.json``), if any."""
    import json

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


class ModelLoadError(ConfigError):
    """A model folder or hub id that transformers cannot load; the message is one line."""


def _load_failure(e: BaseException) -> str:
    """Why a model did not load, in one line (transformers' own messages run to several paragraphs)."""
    import pickle
    import re

    if isinstance(e, pickle.UnpicklingError):
        return ("its pickled weights (pytorch_model.bin) hold objects other than tensors and were not loaded, "
                "for safety (save the weights as safetensors)")
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first[:200]}" if first else type(e).__name__


def load_transformers(path: str, *, device: str | None = None, dtype: str | None = None,
                      min_pixels: int | None = None, max_pixels: int | None = None,
                      threads: int | None = None, attn_implementation: str | None = None,
                      precision: str | None = None, lora: "LoraSettings | None" = None,
                      adapter: str | None = None, gradient_checkpointing: bool = False) -> "TransformersPolicy":
    """Load a Qwen-VL checkpoint (local folder or hub id) as a :class:`TransformersPolicy`.

    ``dtype`` (without ``precision``) stores every weight in that dtype; it defaults
    to bfloat16 on CUDA and float32 on CPU (inference). For training pass
    ``precision`` instead (see :func:`resolve_precision`): ``bf16-mixed`` keeps the
    trainable weights in fp32 and runs the forward under bf16 autocast.
    ``lora`` adds LoRA adapters (only they train); ``adapter`` loads a saved adapter
    folder (``<checkpoint>/lora_adapter``) onto ``path``, the base it was trained on.
    ``gradient_checkpointing`` recomputes each decoder layer in the backward pass.
    ``min_pixels`` / ``max_pixels`` override the image processor's limits (its ``size``).
    ``threads`` sets torch's intra-op threads.
    """
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if precision is not None and dtype is not None:
        raise ValueError("give either dtype (inference) or precision (training), not both")
    if adapter is not None and lora is None:
        raise ValueError("adapter needs lora=LoraSettings(...) (the adapter is trained further)")
    if threads:
        torch.set_num_threads(int(threads))
    dev = _pick_device(device)
    plan = resolve_precision(precision, dev) if precision is not None else None
    if plan is not None:
        torch_dtype = plan.frozen_dtype if lora is not None else plan.param_dtype
    else:
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    try:  # a folder that does not load (torn or pickled weights, a broken config): one line, no traceback
        config = AutoConfig.from_pretrained(path)
        kwargs: dict[str, Any] = {"dtype": torch_dtype}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        model = _model_class(config.model_type).from_pretrained(path, **kwargs).to(dev).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        tokenizer.padding_side = "left"
        limits = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v}
        image_processor = Qwen2VLImageProcessorPil.from_pretrained(path, **limits)
        template = tokenizer.chat_template or _chat_template_file(path)
    except (ImportError, MemoryError):
        raise
    except Exception as e:
        raise ModelLoadError(f"the model {path} cannot be loaded: {_load_failure(e)}") from e
    policy = TransformersPolicy(model, tokenizer, image_processor, chat_template=template, name=str(path))
    if plan is not None or lora is not None or gradient_checkpointing:
        configure_training(policy, plan=plan, lora=lora, adapter=adapter,
                           gradient_checkpointing=gradient_checkpointing)
    return policy


# ---- training set-up: precision, LoRA, gradient checkpointing ---------------------------------

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


def configure_training(policy: "TransformersPolicy", *, plan: PrecisionPlan | None,
                       lora: LoraSettings | None = None, adapter: str | None = None,
                       gradient_checkpointing: bool = False) -> None:
    """Set a loaded policy up for training: precision (autocast), LoRA, gradient checkpointing."""
    if lora is not None:
        policy.model = apply_lora(policy.model, lora, adapter=adapter,
                                  adapter_dtype_fp32=plan is None or plan.param_dtype == torch.float32)
        policy.model.eval()
        policy.lora = lora
    if plan is not None:
        policy.precision = plan
        policy.autocast_dtype = plan.autocast_dtype
    if gradient_checkpointing:
        # Non-reentrant checkpointing needs no input that requires grad (LoRA's frozen embeddings).
        policy.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        policy.gradient_checkpointing = True


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def merged_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of a model's inference weights, under the names of the plain model.

    For a peft LoRA model each adapted layer's weight is ``W + ΔW`` (computed one layer at a time,
    so a weight sync streams without a second copy of the model); adapter tensors are left out.
    A plain model yields its ``state_dict()``.
    """
    if not _is_peft(model):
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


class TransformersPolicy:
    """A trainable policy holding a Hugging Face Qwen-VL model in this process."""

    def __init__(self, model: Any, tokenizer: Any, image_processor: Any, *, chat_template: str | None = None,
                 name: str = ""):
        self.model = model
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.encoder = ChatEncoder(tokenizer, image_processor, chat_template)
        self.name = name
        self.version = 0
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
        eos.add(tokenizer.eos_token_id)
        eos.add(self.pad_id)  # padding after a finished row must end that row
        self.eos_ids = sorted(int(e) for e in eos if e is not None)
        # Vision placeholders are never sampled: a completion holding one could not be scored
        # (the model would look for image features behind it). Only the sampling distribution is
        # masked; reported log-probs stay those of the unmodified model.
        unk = tokenizer.unk_token_id
        self.suppressed_ids = sorted({i for i in (tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS)
                                      if isinstance(i, int) and i != unk})
        self.end_turn_id = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
        # Training set-up (configure_training): autocast compute dtype, LoRA, checkpointing.
        self.precision: PrecisionPlan | None = None
        self.autocast_dtype: torch.dtype | None = None
        self.lora: LoraSettings | None = None
        self.gradient_checkpointing = False
        #: rows with identical prompts share one prompt forward in scoring (see :meth:`score_encoded`)
        self.share_prompts = True
        #: byte budget of the vision-feature cache (see :meth:`_vision_inputs`); 0: no reuse
        self.vision_cache_bytes = 256 << 20
        self._vision_cache: OrderedDict[bytes, tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = OrderedDict()
        self._vision_cache_used = 0
        self._vision_weights: tuple = ()
        self._vision_output_type: Any = None
        #: vision-tower runs and images served without one (cache hits and repeats within a call)
        self.vision_stats = {"encoded": 0, "reused": 0}

    @contextlib.contextmanager
    def _compute(self, *, train: bool = False) -> Iterator[None]:
        """The forward's context: bf16 autocast under ``bf16-mixed``; train mode while a
        checkpointed backward is built (transformers only checkpoints in train mode; Qwen-VL has
        no dropout, so the numbers do not change)."""
        ac = (torch.autocast(self.device.type, dtype=self.autocast_dtype) if self.autocast_dtype is not None
              else contextlib.nullcontext())
        flip = train and self.gradient_checkpointing and not self.model.training
        if flip:
            self.model.train()
        try:
            with ac:
                yield
        finally:
            if flip:
                self.model.eval()

    def image_geometry(self):
        """How this model's image processor resizes screenshots (patch/merge size, pixel limits):
        the coordinate frame action formats must share (see ``guiagent.policy.geometry.image_geometry``)."""
        from guiagent.policy.geometry import image_geometry

        return image_geometry(self.image_processor)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ---- batching -------------------------------------------------------------------------------

    def _collate(self, encs: Sequence[Encoded], completions: Sequence[Sequence[int]] | None = None, *,
                 pixels: bool = True) -> dict[str, torch.Tensor]:
        """Left-pad prompts to one length; right-pad completions (if any) after them; the images'
        patches and grids unless ``pixels`` is false."""
        plen = max(len(e.input_ids) for e in encs)
        clen = max((len(c) for c in completions), default=0) if completions is not None else 0
        b = len(encs)
        ids = torch.full((b, plen + clen), self.pad_id, dtype=torch.long)
        mask = torch.zeros((b, plen + clen), dtype=torch.long)
        types = torch.zeros((b, plen + clen), dtype=torch.int)
        for i, e in enumerate(encs):
            n = len(e.input_ids)
            ids[i, plen - n:plen] = torch.tensor(e.input_ids)
            mask[i, plen - n:plen] = 1
            types[i, plen - n:plen] = torch.tensor(e.mm_token_type_ids, dtype=torch.int)
            if completions is not None and len(completions[i]):
                c = completions[i]
                ids[i, plen:plen + len(c)] = torch.tensor(list(c), dtype=torch.long)
                mask[i, plen:plen + len(c)] = 1
        batch = {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": types}
        pv = [e.pixel_values for e in encs if e.pixel_values is not None] if pixels else []
        if pv:
            batch["pixel_values"] = torch.cat(pv).to(_weight_dtype(self.model))
            batch["image_grid_thw"] = torch.cat([e.image_grid_thw for e in encs if e.image_grid_thw is not None])
        return {k: v.to(self.device) for k, v in batch.items()}

    # ---- generation -----------------------------------------------------------------------------

    def generate(self, chats: Sequence[Chat], sampling: SamplingParams = SamplingParams()) -> list[Generation]:
        """Batched sampling (greedy when ``temperature == 0``); log-probs under the unmodified model."""
        if not chats:
            return []
        return self.generate_encoded([self.encoder.encode(c) for c in chats], sampling)

    def generate_encoded(self, encs: Sequence[Encoded], sampling: SamplingParams = SamplingParams()
                         ) -> list[Generation]:
        """:meth:`generate` on encoded prompts (:meth:`ChatEncoder.encode_rendered`).

        Every image is encoded once (:meth:`_vision_inputs`); with :attr:`share_prompts` the text the
        prompts begin with in common (the system prompt) is prefilled once and its KV cache copied
        to every row (:meth:`_shared_prefix_cache`).
        """
        from transformers import GenerationConfig

        row_seeds = sampling.for_rows(len(encs))
        batch = self._collate(encs, pixels=False)
        greedy = sampling.temperature == 0
        # per-chat seeds: each row samples from its own generator (Gumbel-max over the warped
        # scores, picked by greedy search), so a reply does not depend on the rest of the batch
        per_row = row_seeds is not None and not greedy
        warped = not greedy and not per_row
        gen_config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens, do_sample=warped,
            temperature=sampling.temperature if warped else None, top_p=sampling.top_p if warped else None,
            min_p=sampling.min_p if warped and sampling.min_p else None, top_k=None, repetition_penalty=None,
            eos_token_id=self.eos_ids, pad_token_id=self.pad_id,
            stop_strings=list(sampling.stop) or None, output_logits=True, return_dict_in_generate=True,
            suppress_tokens=self.suppressed_ids or None,
        )
        processors = _row_seeded_sampler(sampling, row_seeds, self.device) if per_row else None
        rng = contextlib.nullcontext()
        if sampling.seed is not None:
            rng = torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else [])
        with rng, torch.inference_mode(), self._compute():
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
            batch.update(self._vision_inputs(encs, grad=False))
            prefix = self._common_prefix(encs)
            if prefix:
                batch = self._shared_prefix_cache(batch, prefix)
            out = self.model.generate(**batch, generation_config=gen_config, logits_processor=processors,
                                      tokenizer=self.tokenizer if sampling.stop else None)
        plen = batch["input_ids"].shape[1]
        new = out.sequences[:, plen:].cpu()
        logp = torch.stack(out.logits, dim=1).float().log_softmax(-1).cpu()
        tok_lp = logp.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [self._finish(new[i].tolist(), tok_lp[i].tolist(), len(encs[i].input_ids), sampling)
                for i in range(len(encs))]

    #: a shared prefix shorter than this is prefilled with the rest (a separate forward costs more)
    min_shared_prefix = 16

    def _common_prefix(self, encs: Sequence[Encoded]) -> int:
        """Tokens every prompt begins with, before any image and leaving each prompt one token of its
        own (0 when sharing is off or does not pay)."""
        if len(encs) < 2 or not self.share_prompts or self._distributed():
            return 0
        if not hasattr(self._core(), "rope_deltas"):
            return 0
        first = encs[0]
        limit = min(len(e.input_ids) for e in encs) - 1
        if 1 in first.mm_token_type_ids[:limit]:
            limit = first.mm_token_type_ids.index(1)
        n = 0
        for column in zip(*(e.input_ids[:limit] for e in encs)):
            if any(t != column[0] for t in column):
                break
            n += 1
        return n if n >= self.min_shared_prefix else 0

    def _shared_prefix_cache(self, batch: dict[str, Any], n: int) -> dict[str, Any]:
        """``batch`` re-laid as [shared prefix][padding][rest of the prompt] a row, with the prefix's KV
        cache (prefilled once, copied to every row) for ``generate`` to continue from. Positions are
        counted over real tokens (generate's own rule for padded rows), so they are those of the
        left-padded layout and the log-probs do not change."""
        ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["mm_token_type_ids"]
        b, plen = ids.shape
        out = {k: torch.zeros_like(batch[k]) for k in ("input_ids", "attention_mask", "mm_token_type_ids")}
        out["input_ids"].fill_(self.pad_id)
        for i, m in enumerate(mask.sum(1).tolist()):
            for key, src in (("input_ids", ids), ("attention_mask", mask), ("mm_token_type_ids", types)):
                out[key][i, :n] = src[i, plen - m:plen - m + n]
                out[key][i, plen - (m - n):] = src[i, plen - m + n:]
        pre = self.model(input_ids=out["input_ids"][:1, :n], attention_mask=out["attention_mask"][:1, :n],
                         position_ids=torch.arange(n, device=self.device).view(1, 1, n).expand(3, 1, n),
                         use_cache=True, logits_to_keep=1)
        cache = _output_cache(pre)
        cache.batch_repeat_interleave(b)
        self._core().rope_deltas = None  # generate computes the positions of the new layout itself
        return {**batch, **out, _cache_kwarg(self._core()): cache}

    def _finish(self, ids: list[int], lps: list[float], prompt_tokens: int, sampling: SamplingParams
                ) -> Generation:
        eos = set(self.eos_ids)
        cut, reason = len(ids), "length"
        for j, t in enumerate(ids):
            if t in eos:
                before = self.tokenizer.decode(ids[:j], skip_special_tokens=False)
                # a row stopped by a stop string is padded after it; an emitted eos is kept
                stopped = any(s in before for s in sampling.stop)
                cut, reason = (j if stopped else j + 1), "stop"
                break
        else:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            if sampling.stop and any(text.endswith(s) or s in text for s in sampling.stop):
                reason = "stop"
        ids, lps = ids[:cut], lps[:cut]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(text=text, token_ids=tuple(ids), logprobs=tuple(lps), prompt_tokens=prompt_tokens,
                          finish_reason=reason, policy_version=self.version)  # type: ignore[arg-type]

    # ---- teacher forcing ------------------------------------------------------------------------

    def score_batch(self, chats: Sequence[Chat], completions: Sequence[Sequence[int]], *,
                    grad: bool = True) -> ScoreBatch:
        """Teacher-forced log-probs ``[B, T]`` of the completion tokens and their mask.

        With ``grad`` the graph is kept for a loss downstream (the model is not
        switched to train mode: Qwen-VL has no dropout, and eval mode keeps the
        numbers equal to generation's).
        """
        if len(chats) != len(completions):
            raise ValueError(f"{len(chats)} chats but {len(completions)} completions")
        if not chats:
            raise ValueError("score_batch needs at least one chat")
        return self.score_encoded([self.encoder.encode(c) for c in chats], completions, grad=grad)

    def score_encoded(self, encs: Sequence[Encoded], completions: Sequence[Sequence[int]], *,
                      grad: bool = True) -> ScoreBatch:
        """:meth:`score_batch` on encoded prompts.

        Rows with identical prompts (a GRPO group's samples of one screen) share one prompt
        forward when :attr:`share_prompts` allows it: the distinct prompts run once (vision tower
        included) with a KV cache, each row's completion runs on its prompt's cache rows. The
        prompt's activations do not depend on what follows them (causal attention), so the
        log-probs are those of one padded forward per row, and so are the gradients (a shared
        prompt's gradient is the sum over its rows, as with duplicated rows).
        """
        if len(encs) != len(completions):
            raise ValueError(f"{len(encs)} prompts but {len(completions)} completions")
        t = max(len(c) for c in completions)
        if t == 0:
            z = torch.zeros((len(encs), 0), device=self.device)
            return ScoreBatch(z, z.bool())
        owner = _prompt_owners(encs) if self._can_share_prompts() else None
        if owner is not None and len(set(owner)) < len(encs):
            return self._score_shared(encs, completions, owner, t, grad)
        batch = self._collate(encs, completions, pixels=False)
        with torch.set_grad_enabled(grad), self._compute(train=grad):
            batch.update(self._vision_inputs(encs, grad=grad))
            logits = self.model(**batch, logits_to_keep=t + 1, use_cache=False).logits[:, :t]
            target = batch["input_ids"][:, -t:]
            lp = _token_logprobs(logits, target)
        mask = batch["attention_mask"][:, -t:].bool()
        return ScoreBatch(lp.masked_fill(~mask, 0.0), mask)

    def _can_share_prompts(self) -> bool:
        # A checkpointed model turns its KV cache off in train mode; DDP / FSDP expect one forward
        # per backward. Both keep the one-pass path.
        if not self.share_prompts or self.gradient_checkpointing or self._distributed():
            return False
        return hasattr(self._core(), "get_rope_index")

    def _core(self) -> Any:
        """The Qwen-VL model under the LM head (through a peft wrapper): it has ``get_rope_index``."""
        model = self.model.get_base_model() if _is_peft(self.model) else self.model
        return getattr(model, "model", model)

    def _score_shared(self, encs: Sequence[Encoded], completions: Sequence[Sequence[int]], owner: list[int],
                      t: int, grad: bool) -> ScoreBatch:
        """:meth:`score_encoded` with one prompt forward per distinct prompt; ``owner[b]`` is the
        first row whose prompt equals row ``b``'s."""
        full = self._collate(encs, completions, pixels=False)
        ids, mask = full["input_ids"], full["attention_mask"]
        b, plen = ids.shape[0], ids.shape[1] - t
        grids = [e.image_grid_thw for e in encs if e.image_grid_thw is not None]
        if grids:  # the 3-D rope positions the one-pass forward computes for these rows
            pos, _ = self._core().get_rope_index(ids, mm_token_type_ids=full["mm_token_type_ids"],
                                                 image_grid_thw=torch.cat(grids).to(self.device),
                                                 attention_mask=mask)
        else:  # text only: the model's own default, positions counted from the first column
            pos = torch.arange(plen + t, device=self.device).view(1, 1, -1).expand(3, b, -1)
        rows = sorted(set(owner))
        first = {r: k for k, r in enumerate(rows)}
        sel = torch.tensor([first[o] for o in owner], device=self.device)
        u = torch.tensor(rows, device=self.device)
        prompt = {"input_ids": ids[u, :plen], "attention_mask": mask[u, :plen],
                  "position_ids": pos[:, u, :plen]}
        if grids:
            prompt["mm_token_type_ids"] = full["mm_token_type_ids"][u, :plen]
        with torch.set_grad_enabled(grad), self._compute(train=grad):
            prompt.update(self._vision_inputs([encs[r] for r in rows], grad=grad))
            out = self.model(**prompt, use_cache=True, logits_to_keep=1)
            logits = out.logits[sel]  # [B, 1, V]: each row's first completion token
            if t > 1:
                cache = _output_cache(out)
                cache.batch_select_indices(sel)
                end = plen + t - 1
                rest = self.model(input_ids=ids[:, plen:end], attention_mask=mask[:, :end],
                                  position_ids=pos[:, :, plen:end], use_cache=True,
                                  **{_cache_kwarg(self._core()): cache}).logits
                logits = torch.cat([logits, rest], dim=1)
            lp = _token_logprobs(logits, ids[:, plen:])
        cmask = mask[:, plen:].bool()
        return ScoreBatch(lp.masked_fill(~cmask, 0.0), cmask)

    # ---- vision features ---------------------------------------------------------------------------

    def _vision_inputs(self, encs: Sequence[Encoded], *, grad: bool) -> dict[str, Any]:
        """The image inputs of ``encs`` (in order) for a forward.

        Where no gradient has to reach the vision tower (no grad, or a frozen tower as under LoRA)
        its outputs are reused: each distinct image (by content digest) goes through the tower
        once a call, and outputs are kept across calls (LRU within :attr:`vision_cache_bytes`) for
        as long as the tower's weights are unchanged (their tensors, storage and in-place version
        counters: an optimiser step or a ``load_state_dict`` invalidates the cache without being told). A
        group's G samples of one screen, the re-scoring of a rollout's turns at the weights that
        generated them and a LoRA update all reuse the generation's vision outputs. Otherwise the
        patches go to the model as they are.
        """
        with_img = [e for e in encs if e.pixel_values is not None]
        if not with_img:
            return {}
        grid = torch.cat([e.image_grid_thw for e in with_img]).to(self.device)  # type: ignore[misc]
        visual = getattr(self._core(), "visual", None)
        if (self.vision_cache_bytes <= 0 or visual is None or not hasattr(self._core(), "get_image_features")
                or not _takes_encoder_outputs(self._core())  # transformers before mm_encoder_outputs (5.17)
                or (grad and any(p.requires_grad for p in visual.parameters())) or self._distributed()):
            pv = torch.cat([e.pixel_values for e in with_img])  # type: ignore[misc]
            return {"pixel_values": pv.to(self.device, _weight_dtype(self.model)), "image_grid_thw": grid}
        weights = (self.autocast_dtype, *((id(p), p.data_ptr(), p._version) for p in visual.parameters()))
        if weights != self._vision_weights:
            self._vision_cache.clear()
            self._vision_cache_used = 0
            self._vision_weights = weights
        images = [im for e in with_img for im in _split_images(e)]  # (key, patches, grid) in order
        here: dict[bytes, tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = {}
        todo: dict[bytes, tuple[torch.Tensor, torch.Tensor]] = {}
        for key, pv, g in images:
            if key in here or key in todo:
                continue
            hit = self._vision_cache.get(key)
            if hit is not None:
                self._vision_cache.move_to_end(key)
                here[key] = hit
            else:
                todo[key] = (pv, g)
        if todo:
            # ordinary tensors even inside generation's inference mode: a later forward may need grad
            with torch.inference_mode(False), torch.no_grad():
                pv = torch.cat([v[0] for v in todo.values()]).to(self.device, _weight_dtype(self.model))
                g = torch.cat([v[1] for v in todo.values()]).to(self.device)
                out = self._core().get_image_features(pv, g, return_dict=True)
            self._vision_output_type = type(out)
            deep = getattr(out, "deepstack_features", None) or []
            for i, key in enumerate(todo):
                item = (out.pooler_output[i], tuple(layer[i] for layer in deep))
                here[key] = item
                self._remember_vision(key, item)
        self.vision_stats["encoded"] += len(todo)
        self.vision_stats["reused"] += len(images) - len(todo)
        pooled = tuple(here[k][0] for k, _, _ in images)
        deep_n = len(here[images[0][0]][1])
        fields: dict[str, Any] = {"pooler_output": pooled}
        if deep_n:
            fields["deepstack_features"] = [tuple(here[k][1][j] for k, _, _ in images) for j in range(deep_n)]
        # the model's own output type (set by the call that filled the cache)
        return {"mm_encoder_outputs": {"image": self._vision_output_type(**fields)}, "image_grid_thw": grid}

    def _remember_vision(self, key: bytes, item: tuple[torch.Tensor, tuple[torch.Tensor, ...]]) -> None:
        size = sum(t.numel() * t.element_size() for t in (item[0], *item[1]))
        if size > self.vision_cache_bytes:
            return
        self._vision_cache[key] = item
        self._vision_cache_used += size
        while self._vision_cache_used > self.vision_cache_bytes:
            _, (a, b) = self._vision_cache.popitem(last=False)
            self._vision_cache_used -= sum(t.numel() * t.element_size() for t in (a, *b))

    def _distributed(self) -> bool:
        return getattr(self, "ddp", None) is not None or (
            torch.distributed.is_available() and torch.distributed.is_initialized())

    def score(self, chats: Sequence[Chat], completions: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per-token log-probs of the given completion token ids (no grad)."""
        return self.score_batch(chats, completions, grad=False).to_lists()

    def encode_completion(self, text: str, *, end_turn: bool = True) -> list[int]:
        """Token ids of an assistant reply, followed by ``<|im_end|>`` when ``end_turn``."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return ids + [self.end_turn_id] if end_turn else ids

    # ---- weights --------------------------------------------------------------------------------

    def parameters(self):
        return self.model.parameters()

    def state_dict(self) -> dict[str, Any]:
        """The inference weights under the plain model's names (a LoRA policy's adapters merged):
        what a rollout copy, vLLM or :meth:`save` takes."""
        if self.lora is None:
            return self.model.state_dict()
        return dict(merged_weights(self.model))

    @contextlib.contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        """A LoRA policy computes as its frozen base inside this block: the KL reference without a
        second copy of the model (``with policy.adapters_disabled(): ref = policy.score_batch(...)``)."""
        if self.lora is None:
            raise ValueError("adapters_disabled needs a LoRA policy")
        with self.model.disable_adapter():
            yield

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """As :meth:`state_dict`, one tensor at a time (LoRA layers merged as they are reached)."""
        return merged_weights(self.model)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.lora is not None and not any(".lora_" in k for k in state):
            raise ValueError("a LoRA policy loads its own state_dict (adapter keys); merged weights go "
                             "into a plain policy")
        self.model.load_state_dict(state)
        self.mark_updated()

    def mark_updated(self) -> int:
        self.version += 1
        return self.version

    def save(self, path: str | os.PathLike) -> None:
        """Save model, tokenizer, image processor and chat template: loadable by :func:`load_transformers`.

        A LoRA policy saves the merged weights (a standalone model, what inference and vLLM load)
        and its adapter in ``path/lora_adapter`` (to continue training: ``load_transformers(base,
        lora=..., adapter=path/"lora_adapter")``). fp32 training weights are saved as they are.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.lora is not None:
            base = self.model.get_base_model()
            merged = {k: v.contiguous() for k, v in merged_weights(self.model)}
            _plain_save(base, path, merged)
            self.model.save_pretrained(path / "lora_adapter")
        else:
            self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        self.image_processor.save_pretrained(path)
        (path / "chat_template.jinja").write_text(self.encoder.chat_template)

    def close(self) -> None:
        pass


def _plain_save(model: Any, path: Path, state: dict[str, torch.Tensor]) -> None:
    """``save_pretrained`` of a model whose modules carry LoRA wrappers, with the merged
    ``state`` under the plain names (the config is the base model's)."""
    model.save_pretrained(path, state_dict=state)


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


def _cache_kwarg(model: Any) -> str:
    """The KV-cache keyword of ``model``'s forward (and ``generate``): ``cache`` in recent
    transformers 5 releases, ``past_key_values`` before (5.17 has the old name)."""
    import inspect

    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def _takes_encoder_outputs(model: Any) -> bool:
    """Whether ``model``'s forward takes precomputed vision outputs (``mm_encoder_outputs``)."""
    import inspect

    return "mm_encoder_outputs" in inspect.signature(type(model).forward).parameters


def _output_cache(out: Any) -> Any:
    """The KV cache of a forward's output, under either name (see :func:`_cache_kwarg`)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _token_logprobs(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)`` at ``target``: ``[B, T, V]``, ``[B, T]`` -> float ``[B, T]``."""
    return logits.float().log_softmax(-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _patches_digest(pixel_values: torch.Tensor, grid: torch.Tensor) -> bytes:
    """A digest of preprocessed patches (an image that came without its encoded bytes)."""
    return _digest(grid.numpy().tobytes() + pixel_values.detach().cpu().contiguous().numpy().tobytes())


def _split_images(e: Encoded) -> list[tuple[bytes, torch.Tensor, torch.Tensor]]:
    """(digest, patches, grid) of each image of an encoded prompt."""
    assert e.pixel_values is not None and e.image_grid_thw is not None
    sizes = e.image_grid_thw.prod(-1).tolist()
    parts = torch.split(e.pixel_values, sizes)
    grids = [e.image_grid_thw[i:i + 1] for i in range(len(sizes))]
    keys = e.image_keys if len(e.image_keys) == len(sizes) else tuple(
        _patches_digest(pv, g) for pv, g in zip(parts, grids))
    return list(zip(keys, parts, grids))


def _prompt_owners(encs: Sequence[Encoded]) -> list[int]:
    """For each prompt the index of the first equal one (same token ids and the same image patches)."""
    seen: dict[tuple[int, ...], list[int]] = {}
    owner: list[int] = []
    for i, e in enumerate(encs):
        same = seen.setdefault(tuple(e.input_ids), [])
        j = next((j for j in same if _same_images(encs[j], e)), None)
        if j is None:
            same.append(i)
        owner.append(i if j is None else j)
    return owner


def _same_images(a: Encoded, b: Encoded) -> bool:
    pa, pb = a.pixel_values, b.pixel_values
    if pa is None or pb is None or pa is pb:
        return pa is pb
    return (pa.shape == pb.shape and torch.equal(a.image_grid_thw, b.image_grid_thw)  # type: ignore[arg-type]
            and torch.equal(pa, pb))


def _weight_dtype(model: Any) -> torch.dtype:
    """The model's dtype, also through wrappers without a ``dtype`` attribute (DDP)."""
    dt = getattr(model, "dtype", None)
    return dt if isinstance(dt, torch.dtype) else next(model.parameters()).dtype


_TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "image_token_id", "video_token_id",
                    "vision_start_token_id", "vision_end_token_id", "vision_token_id")


def build_random_model(config: Any, out: str | os.PathLike, *, tokenizer_from: str, device: str = "cpu",
                       dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """Save a randomly initialised model of ``config``'s architecture, with the tokenizer, image
    processor and chat template of the model folder ``tokenizer_from`` (its special-token ids are
    copied into the config, so images and end-of-turn work; the vocabulary must fit). For
    real-size checks without a download: ``build_random_model(qwen2_5_vl_3b_config(), dir,
    tokenizer_from=tiny_dir, device="cuda")``. Returns ``out``."""
    import shutil

    from transformers import AutoConfig

    out = Path(out)
    src = AutoConfig.from_pretrained(tokenizer_from)
    for field in _TOKEN_ID_FIELDS:  # the small tokenizer's ids, at whichever level each config keeps them
        for s_obj, d_obj in ((src, config), (getattr(src, "text_config", None), getattr(config, "text_config", None))):
            v = getattr(s_obj, field, None) if s_obj is not None else None
            if v is not None and d_obj is not None:
                setattr(d_obj, field, v)
    torch.manual_seed(seed)
    with torch.device(device):
        model = _model_class(config.model_type)._from_config(config, dtype=dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    del model
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "preprocessor_config.json",
              "special_tokens_map.json", "generation_config.json"):
        if Path(tokenizer_from, f).is_file():
            shutil.copy(Path(tokenizer_from, f), out / f)
    return out


class _GumbelRows:
    """Adds Gumbel noise drawn from one generator per row; the argmax of the result is a sample
    of the (already warped) distribution. Finished rows keep drawing, from their own stream only."""

    def __init__(self, seeds: Sequence[int], device: torch.device):
        self.gens = [torch.Generator(device="cpu").manual_seed(int(x)) for x in seeds]
        self.device = device

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        v = scores.shape[-1]
        u = torch.stack([torch.rand(v, generator=g, dtype=torch.float64) for g in self.gens])
        gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
        return scores.float() + gumbel.to(device=scores.device, dtype=torch.float32)


def _row_seeded_sampler(sampling: SamplingParams, seeds: Sequence[int], device: torch.device) -> Any:
    """transformers' own temperature / top-p / min-p warpers, then per-row Gumbel noise."""
    from transformers.generation.logits_process import (
        LogitsProcessorList, MinPLogitsWarper, TemperatureLogitsWarper, TopPLogitsWarper,
    )

    steps: list[Any] = [TemperatureLogitsWarper(sampling.temperature)]
    if sampling.top_p < 1.0:
        steps.append(TopPLogitsWarper(sampling.top_p))
    if sampling.min_p:
        steps.append(MinPLogitsWarper(sampling.min_p))
    steps.append(_GumbelRows(seeds, device))
    return LogitsProcessorList(steps)
