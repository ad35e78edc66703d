"""The transformers backend: Qwen2.5-VL / Qwen3-VL (and Qwen2-VL) on CPU or CUDA.

:class:`TransformersPolicy` generates, scores completions teacher-forced and trains;
:func:`load_transformers` builds one from a local folder or a hub id. The parts live
beside it: chat encoding in :mod:`guiagent.policy.encode`, loading, precision and LoRA
in :mod:`guiagent.policy.load`, random-initialised models in :mod:`guiagent.policy.tiny`
(their public names are importable from here too).

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

import contextlib
import inspect
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from guiagent.policy.base import Chat, Generation, SamplingParams, ScoreBatch
from guiagent.policy.encode import IMAGE_TOKEN, VISION_TOKENS, ChatEncoder, Encoded, patches_digest
from guiagent.policy.geometry import ImageGeometry, image_geometry, image_processor_for
from guiagent.policy.load import (
    LANGUAGE_LINEAR_TARGETS, PRECISIONS, LoraSettings, ModelLoadError, Precision, PrecisionPlan, apply_lora,
    chat_template_file, is_peft, load_pretrained, merged_weights, model_class, pick_device, resolve_precision,
)
from guiagent.policy.tiny import build_random_model, qwen2_5_vl_3b_config

__all__ = ["TransformersPolicy", "load_transformers", "configure_training",
           # re-exported from the modules that define them (encode, load, geometry, tiny)
           "ModelLoadError", "image_processor_for", "ChatEncoder", "Encoded", "IMAGE_TOKEN", "VISION_TOKENS",
           "PRECISIONS", "Precision", "PrecisionPlan", "resolve_precision", "LANGUAGE_LINEAR_TARGETS",
           "LoraSettings", "apply_lora", "merged_weights", "build_random_model", "qwen2_5_vl_3b_config"]

#: the old private names, kept for scripts that import them from here
_model_class = model_class
_chat_template_file = chat_template_file


def load_transformers(path: str, *, device: str | None = None, dtype: str | None = None,
                      min_pixels: int | None = None, max_pixels: int | None = None,
                      threads: int | None = None, attn_implementation: str | None = None,
                      precision: str | None = None, lora: "LoraSettings | None" = None,
                      adapter: str | None = None, gradient_checkpointing: bool = False,
                      parts: str | None = None) -> "TransformersPolicy":
    """Load a Qwen-VL checkpoint (local folder or hub id) as a :class:`TransformersPolicy`.

    ``dtype`` (without ``precision``) stores every weight in that dtype; it defaults
    to bfloat16 on CUDA and float32 on CPU (inference). For training pass
    ``precision`` instead (see :func:`resolve_precision`): ``bf16-mixed`` keeps the
    trainable weights in fp32 and runs the forward under bf16 autocast.
    ``lora`` adds LoRA adapters (only they train); ``adapter`` loads a saved adapter
    folder (``<checkpoint>/lora_adapter``) onto ``path``, the base it was trained on.
    ``gradient_checkpointing`` recomputes each decoder layer in the backward pass.
    ``min_pixels`` / ``max_pixels`` override the image processor's limits (its ``size``).
    ``threads`` sets torch's intra-op threads. ``parts``: the folder the tokenizer, image processor and
    chat template come from when ``path`` holds weights alone (a training checkpoint: the run's
    starting model); default ``path``.
    """
    if precision is not None and dtype is not None:
        raise ValueError("give either dtype (inference) or precision (training), not both")
    if adapter is not None and lora is None:
        raise ValueError("adapter needs lora=LoraSettings(...) (the adapter is trained further)")
    if threads:
        torch.set_num_threads(int(threads))
    dev = pick_device(device)
    plan = resolve_precision(precision, dev) if precision is not None else None
    if plan is not None:
        torch_dtype = plan.frozen_dtype if lora is not None else plan.param_dtype
    else:
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    model, tokenizer, image_processor, template = load_pretrained(
        path, dev, torch_dtype, min_pixels=min_pixels, max_pixels=max_pixels,
        attn_implementation=attn_implementation, parts=parts)
    policy = TransformersPolicy(model, tokenizer, image_processor, chat_template=template, name=str(path))
    if plan is not None or lora is not None or gradient_checkpointing:
        configure_training(policy, plan=plan, lora=lora, adapter=adapter,
                           gradient_checkpointing=gradient_checkpointing)
    return policy


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

    def image_geometry(self) -> ImageGeometry:
        """How this model's image processor resizes screenshots (patch/merge size, pixel limits):
        the coordinate frame action formats must share (see ``guiagent.policy.geometry.image_geometry``)."""
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
                    grad: bool = True, entropy: bool = False) -> ScoreBatch:
        """Teacher-forced log-probs ``[B, T]`` of the completion tokens and their mask.

        With ``grad`` the graph is kept for a loss downstream (the model is not
        switched to train mode: Qwen-VL has no dropout, and eval mode keeps the
        numbers equal to generation's). With ``entropy`` the batch's ``extra["entropy"]``
        holds the entropy ``[B, T]`` (nats) of the policy's whole next-token distribution at
        each completion token, from the same forward (differentiable with ``grad``).
        """
        if len(chats) != len(completions):
            raise ValueError(f"{len(chats)} chats but {len(completions)} completions")
        if not chats:
            raise ValueError("score_batch needs at least one chat")
        return self.score_encoded([self.encoder.encode(c) for c in chats], completions, grad=grad, entropy=entropy)

    def score_encoded(self, encs: Sequence[Encoded], completions: Sequence[Sequence[int]], *,
                      grad: bool = True, entropy: bool = False) -> ScoreBatch:
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
            return ScoreBatch(z, z.bool(), {"entropy": z} if entropy else {})
        owner = _prompt_owners(encs) if self._can_share_prompts() else None
        if owner is not None and len(set(owner)) < len(encs):
            return self._score_shared(encs, completions, owner, t, grad, entropy)
        batch = self._collate(encs, completions, pixels=False)
        with torch.set_grad_enabled(grad), self._compute(train=grad):
            batch.update(self._vision_inputs(encs, grad=grad))
            logits = self.model(**batch, logits_to_keep=t + 1, use_cache=False).logits[:, :t]
            target = batch["input_ids"][:, -t:]
            lp, ent = _token_logprobs(logits, target, entropy=entropy)
        mask = batch["attention_mask"][:, -t:].bool()
        return _score_batch(lp, ent, mask)

    def _can_share_prompts(self) -> bool:
        # A checkpointed model turns its KV cache off in train mode; DDP / FSDP expect one forward
        # per backward. Both keep the one-pass path.
        if not self.share_prompts or self.gradient_checkpointing or self._distributed():
            return False
        return hasattr(self._core(), "get_rope_index")

    def _core(self) -> Any:
        """The Qwen-VL model under the LM head (through a peft wrapper): it has ``get_rope_index``."""
        model = self.model.get_base_model() if is_peft(self.model) else self.model
        return getattr(model, "model", model)

    def _score_shared(self, encs: Sequence[Encoded], completions: Sequence[Sequence[int]], owner: list[int],
                      t: int, grad: bool, entropy: bool = False) -> ScoreBatch:
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
            lp, ent = _token_logprobs(logits, ids[:, plen:], entropy=entropy)
        cmask = mask[:, plen:].bool()
        return _score_batch(lp, ent, cmask)

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
        The three parts: :meth:`save_weights`, :meth:`save_adapter`, :meth:`save_parts`.
        """
        self.save_weights(path)
        if self.lora is not None:
            self.save_adapter(path)
        self.save_parts(path)

    def save_weights(self, path: str | os.PathLike) -> None:
        """The inference weights and the model's config (``config.json``, ``generation_config.json``,
        ``model*.safetensors``): a LoRA policy's merged, a full policy's as they are."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.lora is not None:
            base = self.model.get_base_model()
            merged = {k: v.contiguous() for k, v in merged_weights(self.model)}
            _plain_save(base, path, merged)
        else:
            self.model.save_pretrained(path)

    def save_adapter(self, path: str | os.PathLike) -> None:
        """A LoRA policy's adapter alone, in ``path/lora_adapter`` (what training changes; a few MB
        where the merged weights are GB)."""
        if self.lora is None:
            raise ValueError("save_adapter needs a LoRA policy")
        self.model.save_pretrained(Path(path) / "lora_adapter")

    def save_parts(self, path: str | os.PathLike) -> None:
        """Tokenizer, image processor and chat template: what training never changes (a folder of
        weights alone loads with them: ``load_transformers(weights, parts=folder)``)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save_pretrained(path)
        self.image_processor.save_pretrained(path)
        (path / "chat_template.jinja").write_text(self.encoder.chat_template)

    def close(self) -> None:
        pass


def _plain_save(model: Any, path: Path, state: dict[str, torch.Tensor]) -> None:
    """``save_pretrained`` of a model whose modules carry LoRA wrappers, with the merged
    ``state`` under the plain names (the config is the base model's)."""
    model.save_pretrained(path, state_dict=state)


def _cache_kwarg(model: Any) -> str:
    """The KV-cache keyword of ``model``'s forward (and ``generate``): ``cache`` in recent
    transformers 5 releases, ``past_key_values`` before (5.17 has the old name)."""
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def _takes_encoder_outputs(model: Any) -> bool:
    """Whether ``model``'s forward takes precomputed vision outputs (``mm_encoder_outputs``)."""
    return "mm_encoder_outputs" in inspect.signature(type(model).forward).parameters


def _output_cache(out: Any) -> Any:
    """The KV cache of a forward's output, under either name (see :func:`_cache_kwarg`)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _token_logprobs(logits: torch.Tensor, target: torch.Tensor, *,
                    entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log_softmax(logits)`` at ``target``: ``[B, T, V]``, ``[B, T]`` -> float ``[B, T]``; with
    ``entropy`` also the entropy ``[B, T]`` of each row's distribution, from the same log-softmax
    (else None)."""
    logp = logits.float().log_softmax(-1)
    lp = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return lp, (-(logp.exp() * logp).sum(-1) if entropy else None)


def _score_batch(lp: torch.Tensor, ent: torch.Tensor | None, mask: torch.Tensor) -> ScoreBatch:
    """The padded batch, zeros off the completion tokens (the entropy's too, when it was asked for)."""
    return ScoreBatch(lp.masked_fill(~mask, 0.0), mask, {} if ent is None else {"entropy": ent.masked_fill(~mask, 0.0)})


def _split_images(e: Encoded) -> list[tuple[bytes, torch.Tensor, torch.Tensor]]:
    """(digest, patches, grid) of each image of an encoded prompt."""
    assert e.pixel_values is not None and e.image_grid_thw is not None
    sizes = e.image_grid_thw.prod(-1).tolist()
    parts = torch.split(e.pixel_values, sizes)
    grids = [e.image_grid_thw[i:i + 1] for i in range(len(sizes))]
    keys = e.image_keys if len(e.image_keys) == len(sizes) else tuple(
        patches_digest(pv, g) for pv, g in zip(parts, grids))
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
