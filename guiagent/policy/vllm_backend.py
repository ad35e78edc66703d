"""The vLLM backend (GPU): fast batched generation and in-place weight sync from a trainer.

Install with ``pip install guiagent[vllm]``. The engine holds the model on the
GPU; :meth:`VLLMPolicy.load_weights` pushes a trainer's (name, tensor) pairs into
it without a restart, through ``LLM.collective_rpc`` (each worker calls its
model's ``load_weights``; vLLM maps Hugging Face names itself) and drops the
prefix cache, which holds activations of the old weights.

Per-request seeds are ``seed + i`` so that a group of identical chats still
gets different samples. Log-probs are vLLM's raw log-probs (before temperature
and top-p), the same convention as :class:`~guiagent.policy.hf.TransformersPolicy`.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Sequence

from guiagent.policy.base import Chat, Generation, SamplingParams, chat_images, check_chat, to_pil

__all__ = ["VLLMPolicy"]

INSTALL_HINT = "the vllm backend needs vLLM and a CUDA GPU: pip install guiagent[vllm]"


def _load_weights_on_worker(worker: Any, weights: list[tuple[str, Any]]) -> int:
    """Runs inside each vLLM worker (``collective_rpc``): load the given tensors into its model."""
    model = worker.model_runner.model
    device = next(model.parameters()).device
    model.load_weights(weights=[(n, t.to(device)) for n, t in weights])
    return len(weights)


class VLLMPolicy:
    """A generation-only policy on a vLLM engine; weights follow a trainer's via :meth:`load_weights`."""

    def __init__(self, model: str, *, max_images: int = 4, max_model_len: int = 8192,
                 gpu_memory_utilization: float = 0.5, dtype: str = "auto", min_pixels: int | None = None,
                 max_pixels: int | None = None, enforce_eager: bool = False, seed: int = 0,
                 **engine_kwargs: Any):
        try:
            import vllm
        except ImportError as e:
            raise ImportError(INSTALL_HINT) from e
        # callables sent through collective_rpc need vLLM's pickle-based serialisation
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        from transformers import AutoTokenizer

        from guiagent.policy.hf import ChatEncoder, _chat_template_file

        mm_kwargs = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v}
        self.llm = vllm.LLM(
            model=model, limit_mm_per_prompt={"image": max_images, "video": 0}, max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, enforce_eager=enforce_eager,
            seed=seed, mm_processor_kwargs=mm_kwargs or None, **engine_kwargs)
        self.tokenizer = AutoTokenizer.from_pretrained(model)

        class _NoImages:  # ChatEncoder.render needs only the tokenizer and template
            merge_size = 2

        self.encoder = ChatEncoder(self.tokenizer, _NoImages(),
                                   self.tokenizer.chat_template or _chat_template_file(model))
        self.max_images = max_images
        self.version = 0
        self.name = model

    def generate(self, chats: Sequence[Chat], sampling: SamplingParams = SamplingParams()) -> list[Generation]:
        import vllm

        prompts = []
        for c in chats:
            check_chat(c)
            images = [to_pil(im) for im in chat_images(c)]
            if len(images) > self.max_images:
                raise ValueError(f"a chat has {len(images)} images; this engine allows {self.max_images} "
                                 "(max_images) - lower PromptConfig.history_images")
            p: dict[str, Any] = {"prompt": self.encoder.render(c)}
            if images:
                p["multi_modal_data"] = {"image": images}
            prompts.append(p)
        params = [vllm.SamplingParams(
            max_tokens=sampling.max_new_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
            min_p=sampling.min_p,
            seed=None if sampling.seed is None else sampling.seed + i, stop=list(sampling.stop) or None,
            logprobs=0, include_stop_str_in_output=True, skip_special_tokens=True)
            for i in range(len(prompts))]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        gens = []
        for o in outs:
            c = o.outputs[0]
            ids = tuple(int(t) for t in c.token_ids)
            lps = tuple(float(step[t].logprob) for step, t in zip(c.logprobs or [], ids))
            gens.append(Generation(text=c.text, token_ids=ids, logprobs=lps,
                                   prompt_tokens=len(o.prompt_token_ids or ()),
                                   finish_reason="length" if c.finish_reason == "length" else "stop",
                                   policy_version=self.version))
        return gens

    def load_weights(self, weights: Iterable[tuple[str, Any]] | dict[str, Any]) -> int:
        """Copy a trainer's weights (``state_dict()`` or (name, tensor) pairs) into the engine.

        Returns the new :attr:`version`.
        """
        items = list(weights.items()) if isinstance(weights, dict) else list(weights)
        items = [(n, t.detach().cpu()) for n, t in items]
        self.llm.collective_rpc(_load_weights_on_worker, args=(items,))
        self.llm.reset_prefix_cache()
        self.version += 1
        return self.version

    def close(self) -> None:
        del self.llm
