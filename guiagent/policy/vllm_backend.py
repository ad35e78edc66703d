"""The vLLM backend (GPU): fast batched rollouts, colocated with the learner, weights synced in place.

Install with ``pip install guiagent[vllm]`` on a CUDA machine. Without vLLM or CUDA,
constructing :class:`VLLMPolicy` raises :class:`VLLMUnavailable` with one line saying so.

**Colocated with a learner on one GPU** (``colocate=True, enable_sleep_mode=True``): the engine
runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so weights pass to it as GPU tensors
by reference, and GPU memory changes hands each iteration::

    engine = VLLMPolicy(model_dir, colocate=True, enable_sleep_mode=True, gpu_memory_utilization=0.35)
    sync = ColocatedSync(engine, learner)          # learner: a TransformersPolicy
    gens = engine.generate(chats, sampling)        # rollouts: text, token ids, sampled log-probs
    with sync.update_phase():                      # engine.sleep(level=1): weights to CPU, KV cache freed
        update(...)                                # the learner has the GPU
    # on exit: wake_up(["weights"]), push_weights(learner.named_weights()), wake_up(["kv_cache"])

This follows vLLM's sleep-mode API (``LLM(enable_sleep_mode=True)``, ``llm.sleep(level=1)``,
``llm.wake_up(tags=...)``) and the way TRL's colocated GRPO trainer and verl sync weights: the
engine's model ``load_weights`` takes (Hugging Face name, tensor) pairs and maps names itself; the
prefix cache, which holds activations of the old weights, is reset. When the engine runs in its own
process the pairs go through ``LLM.collective_rpc`` (copied to CPU, in chunks) instead.

Per-request seeds are ``seed + i`` so that a group of identical chats still gets different
samples. Log-probs are vLLM's raw log-probs (before temperature and top-p), the same convention as
:class:`~guiagent.policy.hf.TransformersPolicy`; the learner re-scores them for the loss and
corrects for the difference with truncated importance sampling (:func:`rl.losses.tis_weights`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterable, Iterator, Sequence

from guiagent.policy.base import Chat, Generation, SamplingParams, chat_images, check_chat, to_pil

__all__ = ["ColocatedSync", "VLLMPolicy", "VLLMUnavailable", "chunk_weights", "require_vllm", "to_generation"]

INSTALL_HINT = "the vllm backend needs vLLM and a CUDA GPU: pip install guiagent[vllm] on a CUDA machine"


class VLLMUnavailable(RuntimeError):
    """vLLM is not installed or no CUDA GPU is visible (the message is one line)."""


def require_vllm() -> Any:
    """The ``vllm`` module; :class:`VLLMUnavailable` (one line) without it or without a CUDA GPU."""
    return _require_vllm()


def _require_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise VLLMUnavailable(f"{INSTALL_HINT} (import vllm failed: {e})") from None
    import torch

    if not torch.cuda.is_available():
        raise VLLMUnavailable(f"{INSTALL_HINT} (no CUDA device visible)")
    return vllm


def _load_weights_on_worker(worker: Any, weights: list[tuple[str, Any]]) -> int:
    """Runs inside each vLLM worker (``collective_rpc``): load the given tensors into its model."""
    model = worker.model_runner.model
    device = next(model.parameters()).device
    model.load_weights(weights=[(n, t.to(device)) for n, t in weights])
    return len(weights)


#: where an in-process engine keeps its model (vLLM V1 with an in-process engine core; V0)
_MODEL_PATHS = (("llm_engine", "model_executor", "driver_worker", "worker", "model_runner", "model"),
                ("llm_engine", "model_executor", "driver_worker", "model_runner", "model"))


def _in_process_model(llm: Any) -> Any | None:
    for path in _MODEL_PATHS:
        obj = llm
        for attr in path:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if obj is not None and hasattr(obj, "load_weights"):
            return obj
    return None


def chunk_weights(weights: Iterable[tuple[str, Any]], chunk_bytes: int) -> Iterator[list[tuple[str, Any]]]:
    """Group (name, tensor) pairs into lists of at most ``chunk_bytes`` (a bigger tensor goes alone),
    so a sync never holds more than one chunk of copies."""
    chunk: list[tuple[str, Any]] = []
    size = 0
    for name, t in weights:
        n = t.numel() * t.element_size()
        if chunk and size + n > chunk_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append((name, t))
        size += n
    if chunk:
        yield chunk


def to_generation(output: Any, version: int) -> Generation:
    """One vLLM ``RequestOutput`` (its first completion) as a :class:`Generation`: text, token ids,
    the sampled tokens' log-probs, prompt length, finish reason."""
    c = output.outputs[0]
    ids = tuple(int(t) for t in c.token_ids)
    lps = tuple(float(step[t].logprob) for step, t in zip(c.logprobs or [], ids))
    return Generation(text=c.text, token_ids=ids, logprobs=lps, prompt_tokens=len(output.prompt_token_ids or ()),
                      finish_reason="length" if c.finish_reason == "length" else "stop", policy_version=version)


class VLLMPolicy:
    """A generation-only policy on a vLLM engine; weights follow a trainer's via :meth:`push_weights`.

    ``colocate``: run the engine in this process (a learner shares the GPU; weights are pushed by
    reference). ``enable_sleep_mode``: allow :meth:`sleep` / :meth:`wake_up` (vLLM's memory pool
    that can hand the GPU to the learner).
    """

    def __init__(self, model: str, *, max_images: int = 4, max_model_len: int = 8192,
                 gpu_memory_utilization: float = 0.5, dtype: str = "auto", min_pixels: int | None = None,
                 max_pixels: int | None = None, enforce_eager: bool = False, seed: int = 0,
                 enable_sleep_mode: bool = False, colocate: bool = False, **engine_kwargs: Any):
        vllm = _require_vllm()
        # callables sent through collective_rpc need vLLM's pickle-based serialisation (our own
        # function, never anything read from a file or a model)
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        if colocate:  # the engine core in this process: its model is reachable, tensors pass by reference
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from transformers import AutoTokenizer

        from guiagent.policy.hf import _chat_template_file

        mm_kwargs = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v}
        llm = vllm.LLM(
            model=model, limit_mm_per_prompt={"image": max_images, "video": 0}, max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, enforce_eager=enforce_eager,
            seed=seed, mm_processor_kwargs=mm_kwargs or None, enable_sleep_mode=enable_sleep_mode,
            **engine_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(model)
        self._attach(llm, tokenizer, tokenizer.chat_template or _chat_template_file(model), name=model,
                     max_images=max_images, sleep_mode=enable_sleep_mode)

    @classmethod
    def from_engine(cls, llm: Any, tokenizer: Any, chat_template: str | None = None, *, name: str = "",
                    max_images: int = 4, sleep_mode: bool = True) -> "VLLMPolicy":
        """Wrap an engine built elsewhere (``vllm.LLM`` or anything with its methods)."""
        self = cls.__new__(cls)
        self._attach(llm, tokenizer, chat_template, name=name, max_images=max_images, sleep_mode=sleep_mode)
        return self

    def _attach(self, llm: Any, tokenizer: Any, chat_template: str | None, *, name: str, max_images: int,
                sleep_mode: bool) -> None:
        from guiagent.policy.hf import ChatEncoder

        class _NoImages:  # ChatEncoder.render needs only the tokenizer and template
            merge_size = 2

        self.llm = llm
        self.tokenizer = tokenizer
        self.encoder = ChatEncoder(tokenizer, _NoImages(), chat_template)
        self.max_images = max_images
        self.version = 0
        self.name = name
        self.sleep_mode = sleep_mode
        self.sleep_level = 0  # 0: awake
        self._awake_tags: set[str] = {"weights", "kv_cache"}

    # ---- rollouts -----------------------------------------------------------------------------------

    def prompts(self, chats: Sequence[Chat]) -> list[dict[str, Any]]:
        """vLLM prompt dicts: the chat template's text and the images (checked against ``max_images``)."""
        out = []
        for c in chats:
            check_chat(c)
            images = [to_pil(im) for im in chat_images(c)]
            if len(images) > self.max_images:
                raise ValueError(f"a chat has {len(images)} images; this engine allows {self.max_images} "
                                 "(max_images) - lower PromptConfig.history_images")
            p: dict[str, Any] = {"prompt": self.encoder.render(c)}
            if images:
                p["multi_modal_data"] = {"image": images}
            out.append(p)
        return out

    def generate(self, chats: Sequence[Chat], sampling: SamplingParams = SamplingParams()) -> list[Generation]:
        """One :class:`Generation` per chat (an asleep engine is woken first)."""
        import vllm

        if not chats:
            return []
        prompts = self.prompts(chats)
        self.wake_up()
        rows = sampling.for_rows(len(prompts))  # per-chat seeds win over seed + i
        params = [vllm.SamplingParams(
            max_tokens=sampling.max_new_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
            min_p=sampling.min_p,
            seed=rows[i] if rows is not None else (None if sampling.seed is None else sampling.seed + i),
            stop=list(sampling.stop) or None,
            logprobs=0, include_stop_str_in_output=True, skip_special_tokens=True)
            for i in range(len(prompts))]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        return [to_generation(o, self.version) for o in outs]

    # ---- memory hand-over ---------------------------------------------------------------------------

    @property
    def asleep(self) -> bool:
        return self.sleep_level > 0

    def sleep(self, level: int = 1) -> None:
        """Free the GPU for the learner: level 1 moves the weights to CPU memory and drops the KV cache
        (what a colocated update wants: the next push overwrites the weights anyway, but level 1 keeps
        buffers such as rotary tables and lets a failed update resume with the old weights)."""
        if not self.sleep_mode:
            raise RuntimeError("this engine was built without enable_sleep_mode=True")
        if level not in (1, 2):
            raise ValueError(f"sleep level is 1 or 2, got {level}")
        if self.asleep:
            return
        self.llm.sleep(level=level)
        self.sleep_level = level
        self._awake_tags = set()

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Take GPU memory back: ``["weights"]`` first (then push new weights), ``["kv_cache"]`` after,
        so weights and a stale KV cache never need the memory at once; ``None``: both."""
        if not self.sleep_mode or not self.asleep:
            return
        want = {"weights", "kv_cache"} if tags is None else set(tags)
        todo = want - self._awake_tags
        if not todo:
            return
        self.llm.wake_up(tags=sorted(todo))
        self._awake_tags |= todo
        if self._awake_tags >= {"weights", "kv_cache"}:
            self.sleep_level = 0

    # ---- weights ------------------------------------------------------------------------------------

    def push_weights(self, weights: Iterable[tuple[str, Any]] | dict[str, Any], *, dtype: Any = None,
                     chunk_bytes: int = 512 << 20) -> int:
        """Load a learner's weights ((Hugging Face name, tensor) pairs or a state dict) into the engine.

        ``dtype`` casts each tensor first (the engine's, e.g. ``torch.bfloat16``, halves what moves when
        the learner keeps fp32 weights). In process the engine's model loads GPU tensors directly;
        otherwise chunks of ``chunk_bytes`` go to every worker through ``collective_rpc`` on CPU. The
        prefix cache is reset; returns the new :attr:`version`.
        """
        items: Iterable[tuple[str, Any]] = weights.items() if isinstance(weights, dict) else weights
        if self.asleep and "weights" not in self._awake_tags:
            self.wake_up(["weights"])
        model = _in_process_model(self.llm)
        for chunk in chunk_weights(((n, t.detach() if dtype is None else t.detach().to(dtype)) for n, t in items),
                                   chunk_bytes):
            if model is not None:
                model.load_weights(weights=chunk)
            else:
                self.llm.collective_rpc(_load_weights_on_worker, args=([(n, t.cpu()) for n, t in chunk],))
        if not self.asleep:
            self.llm.reset_prefix_cache()
        self.version += 1
        return self.version

    def load_weights(self, weights: Iterable[tuple[str, Any]] | dict[str, Any]) -> int:
        """:meth:`push_weights` with the defaults (kept for callers of the earlier name)."""
        return self.push_weights(weights)

    def close(self) -> None:
        self.llm = None


class ColocatedSync:
    """The GPU hand-over between a colocated engine and a learner (see the module docstring)."""

    def __init__(self, engine: VLLMPolicy, learner: Any, *, dtype: Any = None, level: int = 1):
        self.engine, self.learner, self.dtype, self.level = engine, learner, dtype, level

    @contextlib.contextmanager
    def update_phase(self) -> Iterator[None]:
        """Engine asleep while the body (the update) runs; then new weights in, KV cache back."""
        self.engine.sleep(level=self.level)
        _empty_cuda_cache()
        try:
            yield
        except BaseException:
            self.engine.wake_up()  # level 1 kept the old weights: the engine still serves them
            raise
        self.push()

    def push(self) -> int:
        """Weights only, then the KV cache: the two never compete for memory."""
        self.engine.wake_up(["weights"])
        weights = self.learner.named_weights() if hasattr(self.learner, "named_weights") else \
            self.learner.state_dict().items()
        self.engine.push_weights(weights, dtype=self.dtype)
        _empty_cuda_cache()
        self.engine.wake_up(["kv_cache"])
        self.engine.llm.reset_prefix_cache()
        self.engine.version = self.learner.version
        return self.engine.version


def _empty_cuda_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
