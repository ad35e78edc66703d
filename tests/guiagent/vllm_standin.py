"""A ``vllm`` stand-in built from the recorded contract, for the CPU tests of the vLLM backend.

vLLM cannot run here (no CUDA), so the tests drive :mod:`guiagent.policy.vllm_backend` through
this stand-in. It is not written from the backend's assumptions: ``vllm_api.json`` is what
``bash scripts/contracts.sh --update`` read from installed vLLM releases (signatures of the
``vllm.LLM`` methods the backend calls, ``SamplingParams`` fields, engine arguments, output
fields, environment variables, memory-pool tags). Every call binds its arguments to the recorded
signature of that release, so a backend change that a release would refuse fails here too; the
worker reaches the model only through ``get_model()`` (the path ``contracts.sh`` checked through
vLLM's own ``WorkerWrapperBase`` and ``run_method``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

API: dict[str, dict[str, Any]] = json.loads(Path(__file__).with_name("vllm_api.json").read_text())
VERSIONS = list(API)
#: ``TokensPrompt``'s keys where a release's record has none (the releases recorded before the backend
#: sent token prompts; vLLM has had them since 0.4)
TOKENS_PROMPT = ("prompt_token_ids", "multi_modal_data")


def signature(row: list[str]) -> inspect.Signature:
    """An ``inspect.Signature`` from a recorded row (``["self", "level=", "*", "mode=", "**kw"]``)."""
    params, kind = [], inspect.Parameter.POSITIONAL_OR_KEYWORD
    for item in row:
        if item == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        if item.startswith("**"):
            params.append(inspect.Parameter(item[2:], inspect.Parameter.VAR_KEYWORD))
        elif item.startswith("*"):
            params.append(inspect.Parameter(item[1:], inspect.Parameter.VAR_POSITIONAL))
            kind = inspect.Parameter.KEYWORD_ONLY
        else:
            name = item.rstrip("=")
            default = None if item.endswith("=") else inspect.Parameter.empty
            params.append(inspect.Parameter(name, kind, default=default))
    return inspect.Signature(params)


class Strict(SimpleNamespace):
    """An object with exactly the recorded fields: reading any other attribute fails."""

    def __init__(self, allowed: list[str], **fields: Any):
        unknown = set(fields) - set(allowed)
        if unknown:
            raise TypeError(f"no field(s) {sorted(unknown)} in this release")
        super().__init__(**fields)


class RecordedLLM:
    """``vllm.LLM`` of one recorded release, on CPU. Subclasses implement ``_generate(prompts, params)``
    (returning :meth:`output` objects) and give :attr:`worker` a ``get_model()``."""

    version = VERSIONS[-1]

    def __init__(self, **kwargs: Any):
        api = API[self.version]
        unknown = set(kwargs) - set(api["engine_kwargs"])
        if unknown:  # the contract recorded which engine arguments the release takes of ours
            raise TypeError(f"vllm {self.version}: engine arguments {sorted(unknown)} were not checked")
        self.kwargs = kwargs
        self.calls: list[tuple] = []
        self.asleep: set[str] = set()
        self.worker: Any = None

    def _bind(self, name: str, *a: Any, **k: Any) -> dict[str, Any]:
        bound = signature(API[self.version]["LLM"][name]).bind(self, *a, **k)
        return {key: v for key, v in bound.arguments.items() if key != "self"}

    def generate(self, *a: Any, **k: Any) -> list:
        args = self._bind("generate", *a, **k)
        text_keys = set(API[self.version]["TextPrompt"])
        token_keys = set(API[self.version].get("TokensPrompt", TOKENS_PROMPT))
        assert all(set(p) <= (token_keys if "prompt_token_ids" in p else text_keys) for p in args["prompts"]), \
            "a prompt key vLLM's TextPrompt / TokensPrompt lacks"
        assert not self.asleep, f"generate while {sorted(self.asleep)} sleep"
        self.calls.append(("generate", len(args["prompts"])))
        return self._generate(args["prompts"], args["sampling_params"])

    def sleep(self, *a: Any, **k: Any) -> None:
        level = self._bind("sleep", *a, **k).get("level") or 1
        self.calls.append(("sleep", level))
        self.asleep = {"weights", "kv_cache"}

    def wake_up(self, *a: Any, **k: Any) -> None:
        tags = self._bind("wake_up", *a, **k).get("tags")
        api = API[self.version]
        assert tags is None or set(tags) <= set(api.get("deferrable_tags", api["memory_tags"]))
        self.calls.append(("wake_up", tuple(tags or ())))
        self.asleep -= set(tags or self.asleep)

    def reset_prefix_cache(self, *a: Any, **k: Any) -> None:
        self._bind("reset_prefix_cache", *a, **k)
        self.calls.append(("reset_prefix_cache",))

    def collective_rpc(self, *a: Any, **k: Any) -> list:
        args = self._bind("collective_rpc", *a, **k)
        assert callable(args["method"])
        payload = tuple(args.get("args") or ())
        self.calls.append(("rpc", len(payload[0]) if payload else 0))
        return [args["method"](self.worker, *payload, **(args.get("kwargs") or {}))]

    def expand(self, prompt: dict[str, Any]) -> list[int]:
        """A token prompt's ids as vLLM reports them back: each image's one ``<|image_pad|>`` expanded to its
        grid's number of tokens by the model folder's image processor at the engine's pixel limits (what
        vLLM's multimodal processor does with ``mm_processor_kwargs``)."""
        ids, images = prompt["prompt_token_ids"], prompt.get("multi_modal_data", {}).get("image", [])
        if not images:
            return list(ids)
        from transformers import AutoTokenizer
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        model = self.kwargs["model"]
        proc = Qwen2VLImageProcessorPil.from_pretrained(model, **(self.kwargs.get("mm_processor_kwargs") or {}))
        pad = AutoTokenizer.from_pretrained(model).convert_tokens_to_ids("<|image_pad|>")
        out: list[int] = []
        left = list(images)
        for t in ids:
            if t == pad:
                grid = proc(images=[left.pop(0)], return_tensors="pt")["image_grid_thw"][0]
                out += [pad] * (int(grid.prod()) // proc.merge_size ** 2)
            else:
                out.append(t)
        return out

    @classmethod
    def output(cls, prompt_token_ids: list[int], text: str, token_ids: list[int], logprobs: list[float],
               finish_reason: str) -> Strict:
        """A ``RequestOutput`` with one ``CompletionOutput``, their recorded fields only; log-probs
        as vLLM gives them with ``logprobs=0`` (one ``{token: Logprob}`` a position)."""
        api = API[cls.version]
        steps = [{t: SimpleNamespace(logprob=lp, rank=1, decoded_token=None)}
                 for t, lp in zip(token_ids, logprobs)]
        comp = Strict(api["CompletionOutput"], index=0, text=text, token_ids=list(token_ids), logprobs=steps,
                      finish_reason=finish_reason, cumulative_logprob=sum(logprobs))
        return Strict(api["RequestOutput"], request_id="0", prompt=None,
                      prompt_token_ids=list(prompt_token_ids), outputs=[comp], finished=True)


def sampling_params_class(version: str) -> type:
    """``vllm.SamplingParams`` of a release: takes its recorded fields only."""
    fields = API[version]["SamplingParams"]

    class SamplingParams(Strict):
        def __init__(self, **kw: Any):
            super().__init__(fields, **kw)

    return SamplingParams


def vllm_module(version: str, llm_cls: type[RecordedLLM]) -> dict[str, ModuleType]:
    """``sys.modules`` entries of a ``vllm`` package of ``version`` whose ``LLM`` is ``llm_cls``
    (what ``vllm_api`` and the backend import): install with ``monkeypatch.setitem``."""
    api = API[version]
    vllm = ModuleType("vllm")
    vllm.__version__ = version
    vllm.LLM = type(f"LLM_{version.replace('.', '_')}", (llm_cls,), {"version": version})
    vllm.SamplingParams = sampling_params_class(version)
    envs = ModuleType("vllm.envs")
    envs.environment_variables = {name: None for name in api["env"]}
    vllm.envs = envs
    engine, arg_utils = ModuleType("vllm.engine"), ModuleType("vllm.engine.arg_utils")
    arg_utils.EngineArgs = dataclasses.make_dataclass("EngineArgs",
                                                      [(f, Any, None) for f in api["engine_kwargs"]])
    engine.arg_utils = arg_utils
    vllm.engine = engine
    return {"vllm": vllm, "vllm.envs": envs, "vllm.engine": engine, "vllm.engine.arg_utils": arg_utils}


def install(monkeypatch: Any, version: str, llm_cls: type[RecordedLLM]) -> ModuleType:
    """Put the stand-in ``vllm`` of ``version`` in place for the backend (CUDA check included)."""
    import guiagent.policy.vllm_backend as vb

    mods = vllm_module(version, llm_cls)
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(vb, "_require_vllm", lambda: mods["vllm"])
    for var in ("VLLM_USE_V1", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_ALLOW_INSECURE_SERIALIZATION"):
        monkeypatch.delenv(var, raising=False)
    return mods["vllm"]
