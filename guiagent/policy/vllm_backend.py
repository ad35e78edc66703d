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
engine's model ``load_weights`` takes (Hugging Face name, tensor) pairs and maps names itself
(its ``hf_to_vllm_mapper``); the prefix cache, which holds activations of the old weights, is
reset. The pairs reach the model through the public ``LLM.collective_rpc`` with a function run on
each worker (``worker.get_model().load_weights(...)``): in process the call is direct and GPU
tensors pass by reference; an engine in its own process gets CPU copies, in chunks.

Per-request seeds are ``seed + i`` so that a group of identical chats still gets different
samples. Log-probs are vLLM's raw log-probs (before temperature and top-p; asked for with
``logprobs_mode="raw_logprobs"``), the same convention as
:class:`~guiagent.policy.hf.TransformersPolicy`; the learner re-scores them for the loss and
corrects for the difference with truncated importance sampling (:func:`rl.losses.tis_weights`).

**Versions.** ``scripts/contracts.sh`` checks every class, method, argument and attribute path used
here against installed vLLM releases (on CPU, by introspection and with vLLM's own objects) and
records them in ``tests/guiagent/vllm_api.json``, which the CPU tests' engine stand-in is built
from. What differs between the releases in range is read from the installed package by
:func:`vllm_api` (features, not version numbers): a release that still has the V0 engine
(``VLLM_USE_V1`` exists, before 0.11) is told to use V1, whose log-probs are raw and whose engine
core runs in this process on request; ``logprobs_mode`` is passed where the engine has it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

from guiagent.policy.base import Chat, Generation, SamplingParams, chat_images, check_chat, to_pil

__all__ = ["ColocatedSync", "VLLMPolicy", "VLLMUnavailable", "VllmApi", "chunk_weights", "engine_kwargs",
           "require_vllm", "sampling_kwargs", "to_generation", "vllm_api", "SUPPORTED"]

INSTALL_HINT = "the vllm backend needs vLLM and a CUDA GPU: pip install guiagent[vllm] on a CUDA machine"
#: the releases scripts/contracts.sh checked (pyproject.toml's vllm extra allows this range)
SUPPORTED = ">=0.10,<0.34"

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


@dataclass(frozen=True)
class VllmApi:
    """What the installed vLLM offers of the API this backend uses (read by :func:`vllm_api`)."""

    version: str
    #: keyword arguments ``vllm.LLM`` takes: its own parameters and the ``EngineArgs`` fields its
    #: ``**kwargs`` go to
    engine_fields: frozenset[str]
    #: the V0 engine still exists (``VLLM_USE_V1`` is one of vLLM's environment variables)
    has_v0: bool

    @property
    def logprobs_mode(self) -> bool:
        """The engine can be told which log-probs to return (``logprobs_mode``)."""
        return "logprobs_mode" in self.engine_fields


def vllm_api(vllm: Any) -> VllmApi:
    """:class:`VllmApi` of the imported ``vllm`` module, read from the package itself (no engine starts)."""
    from vllm import envs
    from vllm.engine.arg_utils import EngineArgs

    own = [p.name for p in inspect.signature(vllm.LLM.__init__).parameters.values()
           if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"]
    fields = frozenset(own) | frozenset(f.name for f in dataclasses.fields(EngineArgs))
    return VllmApi(version=str(getattr(vllm, "__version__", "?")), engine_fields=fields,
                   has_v0="VLLM_USE_V1" in getattr(envs, "environment_variables", {}))


def engine_kwargs(api: VllmApi, model: str, *, max_images: int = 4, max_model_len: int = 8192,
                  gpu_memory_utilization: float = 0.5, dtype: str = "auto", min_pixels: int | None = None,
                  max_pixels: int | None = None, enforce_eager: bool = False, seed: int = 0,
                  enable_sleep_mode: bool = False, **extra: Any) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` for this backend; :class:`VLLMUnavailable` (one line)
    when the installed vLLM lacks one of them."""
    mm_kwargs = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v}
    kw: dict[str, Any] = dict(
        model=model, limit_mm_per_prompt={"image": max_images, "video": 0}, max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, enforce_eager=enforce_eager, seed=seed,
        mm_processor_kwargs=mm_kwargs or None, enable_sleep_mode=enable_sleep_mode)
    if api.logprobs_mode:  # the convention the learner's re-scoring assumes, whatever the default becomes
        kw["logprobs_mode"] = "raw_logprobs"
    kw.update(extra)
    missing = sorted(k for k in kw if k not in api.engine_fields)
    if missing:
        raise VLLMUnavailable(f"vLLM {api.version} has no engine argument {', '.join(missing)}; "
                              f"guiagent's vllm backend supports vllm{SUPPORTED}")
    return kw


def sampling_kwargs(sampling: SamplingParams, n: int) -> list[dict[str, Any]]:
    """The keyword arguments of ``vllm.SamplingParams`` for ``n`` requests: per-chat seeds when
    given, else ``seed + i``; the sampled tokens' log-probs only (``logprobs=0``)."""
    rows = sampling.for_rows(n)  # per-chat seeds win over seed + i
    return [dict(max_tokens=sampling.max_new_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
                 min_p=sampling.min_p,
                 seed=rows[i] if rows is not None else (None if sampling.seed is None else sampling.seed + i),
                 stop=list(sampling.stop) or None, logprobs=0, include_stop_str_in_output=True,
                 skip_special_tokens=True) for i in range(n)]


def _load_weights_on_worker(worker: Any, weights: list[tuple[str, Any]]) -> int:
    """Runs on each vLLM worker (``LLM.collective_rpc``): load (HF name, tensor) pairs into its model
    (``Worker.get_model()``; the model's ``load_weights`` maps the names)."""
    model = worker.get_model()
    device = next(model.parameters()).device
    model.load_weights(weights=[(n, t.to(device)) for n, t in weights])
    return len(weights)


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
    that can hand the GPU to the learner). Other keyword arguments go to ``vllm.LLM`` (engine
    arguments of the installed release).
    """

    def __init__(self, model: str, *, max_images: int = 4, max_model_len: int = 8192,
                 gpu_memory_utilization: float = 0.5, dtype: str = "auto", min_pixels: int | None = None,
                 max_pixels: int | None = None, enforce_eager: bool = False, seed: int = 0,
                 enable_sleep_mode: bool = False, colocate: bool = False, **engine_kwargs_extra: Any):
        vllm = _require_vllm()
        api = vllm_api(vllm)
        kwargs = engine_kwargs(api, model, max_images=max_images, max_model_len=max_model_len,
                               gpu_memory_utilization=gpu_memory_utilization, dtype=dtype,
                               min_pixels=min_pixels, max_pixels=max_pixels, enforce_eager=enforce_eager,
                               seed=seed, enable_sleep_mode=enable_sleep_mode, **engine_kwargs_extra)
        # callables sent through collective_rpc to an engine in another process need vLLM's
        # pickle-based serialisation (our own function, never anything read from a file or a model)
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        if api.has_v0:  # before 0.11: V1, never a silent fall-back to V0 (log-probs after temperature)
            os.environ["VLLM_USE_V1"] = "1"
        if colocate:  # the engine core in this process: collective_rpc calls the worker directly
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from transformers import AutoTokenizer

        from guiagent.policy.load import chat_template_file  # lazy: torch (see _attach)

        llm = vllm.LLM(**kwargs)
        tokenizer = AutoTokenizer.from_pretrained(model)
        self._attach(llm, tokenizer, tokenizer.chat_template or chat_template_file(model), name=model,
                     max_images=max_images, sleep_mode=enable_sleep_mode, in_process=colocate)

    @classmethod
    def from_engine(cls, llm: Any, tokenizer: Any, chat_template: str | None = None, *, name: str = "",
                    max_images: int = 4, sleep_mode: bool = True, in_process: bool = False) -> "VLLMPolicy":
        """Wrap an engine built elsewhere (``vllm.LLM`` or anything with its methods).
        ``in_process``: its engine core runs in this process (weights then pass by reference)."""
        self = cls.__new__(cls)
        self._attach(llm, tokenizer, chat_template, name=name, max_images=max_images, sleep_mode=sleep_mode,
                     in_process=in_process)
        return self

    def _attach(self, llm: Any, tokenizer: Any, chat_template: str | None, *, name: str, max_images: int,
                sleep_mode: bool, in_process: bool) -> None:
        # lazy: encode imports torch; this module is imported by every command (VLLMUnavailable)
        from guiagent.policy.encode import ChatEncoder

        class _NoImages:  # ChatEncoder.render needs only the tokenizer and template
            merge_size = 2

        self.llm = llm
        self.tokenizer = tokenizer
        self.encoder = ChatEncoder(tokenizer, _NoImages(), chat_template)
        self.max_images = max_images
        self.version = 0
        self.name = name
        self.sleep_mode = sleep_mode
        self.in_process = in_process
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
        params = [vllm.SamplingParams(**kw) for kw in sampling_kwargs(sampling, len(prompts))]
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
        the learner keeps fp32 weights). Chunks of ``chunk_bytes`` go to every worker through
        ``LLM.collective_rpc``: by reference to an engine in this process, as CPU copies to one in
        another. The prefix cache is reset; returns the new :attr:`version`.
        """
        items: Iterable[tuple[str, Any]] = weights.items() if isinstance(weights, dict) else weights
        if self.asleep and "weights" not in self._awake_tags:
            self.wake_up(["weights"])
        for chunk in chunk_weights(((n, t.detach() if dtype is None else t.detach().to(dtype)) for n, t in items),
                                   chunk_bytes):
            payload = chunk if self.in_process else [(n, t.cpu()) for n, t in chunk]
            self.llm.collective_rpc(_load_weights_on_worker, args=(payload,))
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
