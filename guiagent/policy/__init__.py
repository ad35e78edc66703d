"""Policy backends behind one interface (see :mod:`guiagent.policy.base`).

* :class:`~guiagent.policy.hf.TransformersPolicy` — Qwen2.5-VL / Qwen3-VL in this
  process, CPU or CUDA; generation, exact teacher-forced scoring, training.
* :class:`~guiagent.policy.vllm_backend.VLLMPolicy` — vLLM on a GPU, in-place weight sync.
* :class:`~guiagent.policy.openai_backend.OpenAIPolicy` — any OpenAI-compatible server.

:func:`load_policy` picks one from a string. Heavy imports (torch, vllm) happen
only when a backend is built.
"""

from __future__ import annotations

from typing import Any

from guiagent.policy.base import (
    BackendError, Chat, ChatError, Generation, ImagePart, Message, Policy, SamplingParams, ScoreBatch,
    TextPart, TrainablePolicy, check_chat, image_part, message, text_part,
)
from guiagent.policy.vllm_backend import VLLMPolicy

__all__ = [
    "BackendError", "Chat", "ChatError", "Generation", "ImagePart", "Message", "Policy", "SamplingParams",
    "ScoreBatch", "TextPart", "TrainablePolicy", "check_chat", "image_part", "message", "text_part",
    "load_policy",
]


def load_policy(spec: str, *, backend: str | None = None, **opts: Any) -> Policy:
    """Build a policy from ``spec``.

    * ``http://...`` / ``https://...`` -> :class:`OpenAIPolicy` (``opts``: ``model``, ``api_key_env``,
      ``timeout``, ``max_retries``, ``max_concurrency``, ...);
    * anything else (a local folder or a hub id) -> :class:`TransformersPolicy` (``opts``: ``device``,
      ``dtype``, ``min_pixels``, ``max_pixels``, ``threads``);
    * ``backend="vllm"`` -> :class:`VLLMPolicy` (GPU), never chosen implicitly.
    """
    backend = backend or ("openai" if spec.startswith(("http://", "https://")) else "transformers")
    if backend == "openai":
        from guiagent.policy.openai_backend import OpenAIPolicy  # lazy: httpx (0.2 s), for HTTP policies only

        return OpenAIPolicy(spec, **opts)
    if backend == "transformers":
        from guiagent.policy.hf import load_transformers  # lazy: torch; the interface stays light

        return load_transformers(spec, **opts)
    if backend == "vllm":
        return VLLMPolicy(spec, **opts)
    raise ValueError(f"unknown policy backend {backend!r}; choose transformers, vllm or openai")
