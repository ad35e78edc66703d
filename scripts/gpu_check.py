"""One check of the real-model training path on a bare GPU machine, and its preparation here.

    bash scripts/gpu_check.sh --prepare   # here (network, Chromium): demos + the missing wheels -> .gpu_check/
    bash scripts/gpu_check.sh             # on the GPU machine, with .gpu_check/ carried: offline, <= 8 min
    bash scripts/gpu_check.sh --cpu       # the same path on CPU with the tiny model (the test suite runs it)

The machine it is made for has one CUDA GPU, torch, transformers, peft and accelerate, no
network, no Ray, Playwright or browser, and takes at most 64 MiB of files along. What runs there
(``run``) is semi-online RL (the UI-S1 replay of recorded episodes) on oracle demonstrations
recorded here, through the same library functions ``guiagent train --mode semi-online`` composes
(``rl.replay.run_semi_online`` -> ``rl.strategies.SemiOnline`` -> ``rl.update.update``),
without the store, checkpoints and loggers around them (a full fine-tuning checkpoint of a 3B
model is ~45 GB a save), with:

* a randomly initialised model of the real Qwen2.5-VL-3B architecture (``qwen2_5_vl_3b_config``:
  the published config.json values, no download; the tiny model's tokenizer and image processor),
  bf16-mixed (fp32 trainable weights, bf16 autocast), gradient checkpointing; two variants, full
  fine-tuning and LoRA (rank 64 on the language model's projections);
* figures per variant over the iterations after a warm-up one: Hugging Face ``generate``
  tokens/s, update samples/s, peak GPU memory (and ``estimate_memory_for``'s figure beside it),
  achieved TFLOP/s and MFU against the card's bf16 dense peak;
* then supervised steps on the demonstrations' replies (``rl.sft``'s loss; ``--sft-steps``, in
  the 30% of the variant's budget kept for them): their samples/s, TFLOP/s, MFU and losses, and
  whether the loss fell.

FLOPs are model FLOPs counted by hooks on the model's parts (``FlopCounter``): 2 x parameters x
tokens for a forward pass (``generate``'s prefill and every decode step, the learner's scoring
passes), 6 x for a forward + backward of full fine-tuning, 4 x with LoRA (the frozen weights get
no weight gradient; the frozen vision tower no backward at all); the vision tower's parameters
count per image patch (its merger's per merged token), the decoder's per token (the embedding
lookup excluded), the LM head's per row it projects. Padding tokens count (the GPU computes them), attention's sequence-length term
and gradient checkpointing's recomputation do not (the usual MFU convention). The peak is NVIDIA's
datasheet figure for bf16 Tensor Core throughput "with sparsity", halved (``PEAK_BF16_DENSE``).

A random model's replies never parse, so every sample of a group gets the same reward and the
advantages are zero: the RL figures are throughput, not learning (the update still runs every
forward, backward and optimiser step: ``filter_zero_variance`` is off); the supervised phase is
where the loss must fall. The last stdout line is one JSON object.

``prepare`` records the demonstrations (``guiagent eval --agent oracle``), runs the ``--cpu``
path under an import tracer to find the distributions guiagent's own code imports on it, leaves
out those the GPU image has (torch, transformers, peft, accelerate and what they require), and
downloads wheels of the rest for CPython 3.11-3.13 on manylinux x86_64 (``pip download --no-deps
--only-binary=:all:``). ``install`` (on the GPU machine) installs the ones missing there with
``pip install --no-index --find-links --no-deps --target .gpu_check/site``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".gpu_check"
MAX_CARRY_BYTES = 64 << 20
#: CPython versions the wheels are fetched for (guiagent needs >= 3.11)
PYTHONS = ("3.11", "3.12", "3.13")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
#: what the GPU image brings (its Requires-Dist closure is assumed present as well)
IMAGE_DISTS = ("torch", "transformers", "peft", "accelerate")
#: guiagent's own top-level packages (the roots of the import graph)
OWN_PACKAGES = ("guiagent", "rl", "emulators", "grounding", "judge", "webui")
#: must never be imported on the semi-online path (absent from the GPU image)
FORBIDDEN = ("ray", "playwright", "flask", "greenlet", "pyarrow")
#: imported on the path but optional there, so not shipped: ``import emulators`` registers the
#: miniwob tasks with Gymnasium only when the package is installed
OPTIONAL = ("miniwob",)

#: bf16 dense Tensor Core TFLOP/s by device name (most specific first): NVIDIA's H100 and H200
#: datasheets give bf16 "with sparsity" (H100 SXM 1,979, H100 NVL 1,671, H100 PCIe 1,513; H200 SXM
#: 1,979, H200 NVL 1,671), the A100 datasheet 312 dense; dense is half the sparse figure.
PEAK_BF16_DENSE = (("H200 NVL", 835.5), ("H200", 989.5), ("H100 NVL", 835.5), ("H100 PCIe", 756.5),
                   ("H100", 989.5), ("A100", 312.0))


def peak_bf16_tflops(device_name: str) -> float | None:
    """The card's bf16 dense peak (TFLOP/s) from its name, or None for a card not in the table."""
    for key, tflops in PEAK_BF16_DENSE:
        if key.lower() in device_name.lower():
            return tflops
    return None


# ---- FLOPs ----------------------------------------------------------------------------------------

class FlopCounter:
    """Model FLOPs of a Qwen-VL model's forward (and backward) passes, by phase (see the module doc).

    Hooks on the vision tower (per patch; its merger per merged token), the decoder (per token, embedding excluded) and the LM
    head (per projected row); a pass under ``torch.is_grad_enabled()`` is a training pass and
    counts its backward too (x3 in all, x2 for the decoder with LoRA, x1 for a frozen vision tower).
    """

    def __init__(self, model: Any):
        import torch

        core = next((m for m in model.modules() if hasattr(m, "visual") and hasattr(m, "language_model")), None)
        head = next((m for n, m in model.named_modules() if n.endswith("lm_head")), None)
        if core is None or head is None:
            raise ValueError("FlopCounter: not a Qwen-VL model (no visual / language_model / lm_head)")
        lm = core.language_model
        emb = lm.get_input_embeddings().weight
        # the merger's MLP runs once per merged token (spatial_merge_size² patches), the rest per patch
        merger = getattr(core.visual, "merger", None)
        n_merger = sum(p.numel() for p in merger.parameters()) if merger is not None else 0
        unit = getattr(getattr(core.visual, "config", None), "spatial_merge_size", 1) ** 2
        self.n_vision = sum(p.numel() for p in core.visual.parameters()) - n_merger + n_merger / unit
        self.n_decoder = sum(p.numel() for p in lm.parameters()) - emb.numel()
        self.n_head = head.weight.numel()
        trains = lambda mod: any(p.requires_grad for p in mod.parameters())  # noqa: E731
        full = all(p.requires_grad for p in lm.parameters() if p is not emb)
        self.backward = {"vision": 2 if trains(core.visual) else 0, "decoder": 2 if full else 1,
                         "head": 2 if head.weight.requires_grad else 1}
        self.flops: dict[str, float] = {}
        self.phase = "other"
        self._torch = torch
        self._handles = [
            core.visual.register_forward_pre_hook(self._on("vision", self.n_vision, _patches), with_kwargs=True),
            lm.register_forward_pre_hook(self._on("decoder", self.n_decoder, _tokens), with_kwargs=True),
            head.register_forward_pre_hook(self._on("head", self.n_head, _rows), with_kwargs=True)]

    def _on(self, part: str, n_params: int, count: Any) -> Any:
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            n = count(args, kwargs)
            mult = 2 * (1 + (self.backward[part] if self._torch.is_grad_enabled() else 0))
            self.flops[self.phase] = self.flops.get(self.phase, 0.0) + mult * n_params * n
        return hook

    def close(self) -> None:
        for h in self._handles:
            h.remove()


def _first(args: tuple, kwargs: dict, *names: str) -> Any:
    for name in names:
        if kwargs.get(name) is not None:
            return kwargs[name]
    return args[0] if args else None


def _patches(args: tuple, kwargs: dict) -> int:
    x = _first(args, kwargs, "hidden_states", "pixel_values")
    return int(x.shape[0]) if x is not None else 0


def _tokens(args: tuple, kwargs: dict) -> int:
    x = kwargs.get("inputs_embeds")
    if x is None:
        x = _first(args, kwargs, "input_ids")
    return int(x.shape[0] * x.shape[1]) if x is not None else 0


def _rows(args: tuple, kwargs: dict) -> int:
    x = _first(args, kwargs, "input")
    return int(x.numel() // x.shape[-1]) if x is not None else 0


# ---- the check ------------------------------------------------------------------------------------

def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def build_models(work: Path, device: str, model: str | None) -> tuple[str, str]:
    """(model folder, what it is): ``model`` as given, the tiny model on CPU, or a random model of
    the Qwen2.5-VL-3B architecture (bf16) on CUDA with the tiny model's tokenizer."""
    from guiagent.policy.tiny import TinyModelSpec, build_tiny_model

    if model:
        return model, model
    tiny = work / "tiny"
    if not (tiny / "config.json").is_file():
        build_tiny_model(TinyModelSpec(size="tiny"), tiny)
    if device == "cpu":
        return str(tiny), "tiny (random init)"
    import torch

    from guiagent.policy.hf import build_random_model, qwen2_5_vl_3b_config

    out = build_random_model(qwen2_5_vl_3b_config(), work / "qwen2_5_vl_3b_random", tokenizer_from=str(tiny),
                             device="cuda", dtype=torch.bfloat16)
    torch.cuda.empty_cache()
    return str(out), "random Qwen2.5-VL-3B architecture (bf16 weights, tiny tokenizer)"


def run_variant(name: str, model_dir: str, episodes: list, args: argparse.Namespace, deadline: float,
                peak: float | None) -> dict[str, Any]:
    """Semi-online RL iterations of one variant (full fine-tuning or LoRA); its figures."""
    import torch

    from guiagent.policy.hf import LoraSettings, load_transformers
    from rl.agents import load_agent
    from rl.config import TrainConfig
    from rl.optim import GiB, build_optimizer, estimate_memory_for
    from rl.replay import run_semi_online
    from rl.strategies import SemiOnline
    from rl.strategies.semi_online import semi_online_turn_advantages
    from rl.update import update

    dev = args.device
    cuda = dev == "cuda"
    precision, checkpointing = args.precision, args.checkpointing
    lora = LoraSettings(rank=args.lora_rank, alpha=2 * args.lora_rank) if name == "lora" else None
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t_load = time.perf_counter()
    policy = load_transformers(model_dir, device=dev, precision=precision, lora=lora,
                               gradient_checkpointing=checkpointing)
    load_s = time.perf_counter() - t_load
    counter = FlopCounter(policy.model)
    cfg = TrainConfig.build(micro_batch_size=args.micro_batch, lr=1e-5 if lora else 1e-6,
                            max_new_tokens=args.new_tokens, filter_zero_variance=False, precision=precision,
                            group_size=args.group_size)
    strategy = SemiOnline(cfg, Path("."), None)  # grpo's credit and loss for the replayed turns
    opt = build_optimizer(policy, cfg.update.lr, betas=(0.9, 0.98), weight_decay=0.01, precision=precision)
    agent = load_agent(model_dir, loaded=policy, temperature=1.0, max_new_tokens=args.new_tokens,
                       keep_chats=True, frame=policy)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    est = estimate_memory_for(policy.model, precision=precision, micro_batch_size=args.micro_batch, seq_len=2048,
                              completion_len=args.new_tokens, gradient_checkpointing=checkpointing, device=dev)
    gen = {"tokens": 0, "seconds": 0.0}
    real_generate = policy.generate_encoded

    def timed_generate(*a: Any, **kw: Any) -> Any:  # the rollouts' generate calls, timed
        _sync(dev)
        t = time.perf_counter()
        out = real_generate(*a, **kw)
        _sync(dev)
        gen["seconds"] += time.perf_counter() - t
        gen["tokens"] += sum(len(g.token_ids) for g in out)
        return out

    policy.generate_encoded = timed_generate
    rng = random.Random(args.seed)
    rows: list[dict[str, float]] = []
    # the RL iterations get the variant's budget but what the supervised phase keeps back
    rl_deadline = deadline - (SFT_SHARE * (deadline - time.perf_counter()) if args.sft_steps else 0.0)
    try:
        last = 0.0
        for it in range(args.warmup + args.iterations):
            if it >= args.warmup + 1 and time.perf_counter() + last > rl_deadline:
                break  # another iteration as long as the last would overrun the budget (one measured ran)
            t_it = time.perf_counter()
            agent.seed = args.seed * 7919 + it
            picks = rng.sample(episodes, min(args.groups, len(episodes)))
            gen.update(tokens=0, seconds=0.0)
            counter.flops.clear()
            counter.phase = "generate"
            t0 = time.perf_counter()
            result = run_semi_online(agent, picks, group_size=args.group_size, tag=f"{name}{it}")
            rollout_s = time.perf_counter() - t0
            turns = list(result.turns)
            adv = semi_online_turn_advantages(result, normalize_std=True)
            counter.phase = "update"
            _sync(dev)
            t1 = time.perf_counter()
            stats = update(strategy, cfg.update, policy, None, opt, turns, adv, rng=random.Random(it))
            _sync(dev)
            update_s = time.perf_counter() - t1
            if not stats["optimizer_steps"]:
                raise RuntimeError(f"{name}: iteration {it} made no optimiser step ({len(turns)} turns)")
            rows.append({"warmup": float(it < args.warmup), "turns": float(len(turns)),
                         "gen_tokens": float(gen["tokens"]), "gen_s": gen["seconds"], "rollout_s": rollout_s,
                         "update_s": update_s, "gen_flops": counter.flops.get("generate", 0.0),
                         "update_flops": counter.flops.get("update", 0.0), "loss": float(stats["loss"])})
            last = time.perf_counter() - t_it
        policy.generate_encoded = real_generate
        del opt  # the RL optimiser's state goes before the supervised phase builds its own
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        sft = sft_phase(policy, model_dir, args, deadline, counter, lr=1e-3 if lora else 1e-4) if args.sft_steps else {}
    finally:
        counter.close()
        policy.generate_encoded = real_generate
    measured = [r for r in rows if not r["warmup"]] or rows
    tot = {k: sum(r[k] for r in measured) for k in measured[0]}
    gen_tflops = tot["gen_flops"] / max(tot["gen_s"], 1e-9) / 1e12
    upd_tflops = tot["update_flops"] / max(tot["update_s"], 1e-9) / 1e12
    out: dict[str, Any] = {
        "lora_rank": args.lora_rank if lora else 0, "precision": precision, "gradient_checkpointing": checkpointing,
        "trainable_params": sum(p.numel() for p in trainable), "load_s": round(load_s, 1),
        "iterations": len(measured), "warmup_iterations": len(rows) - len(measured),
        "turns_per_iteration": round(tot["turns"] / len(measured), 1),
        "gen_tokens_per_s": round(tot["gen_tokens"] / max(tot["gen_s"], 1e-9), 1),
        "update_samples_per_s": round(tot["turns"] / max(tot["update_s"], 1e-9), 2),
        "rollout_s_per_iteration": round(tot["rollout_s"] / len(measured), 2),
        "update_s_per_iteration": round(tot["update_s"] / len(measured), 2),
        "gen_tflops": round(gen_tflops, 3), "update_tflops": round(upd_tflops, 3),
        "gen_mfu": round(gen_tflops / peak, 4) if peak else None,
        "update_mfu": round(upd_tflops / peak, 4) if peak else None,
        "losses": [round(r["loss"], 6) for r in rows], "estimate_gib": round(est.total / GiB, 2)}
    if sft:
        sft_tflops = sft.pop("flops") / max(sft["seconds"], 1e-9) / 1e12
        out.update({f"sft_{k}": v for k, v in sft.items()}, sft_tflops=round(sft_tflops, 3),
                   sft_mfu=round(sft_tflops / peak, 4) if peak else None)
    if cuda:
        out["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / GiB, 2)
    return out


#: the part of a variant's budget kept for its supervised phase
SFT_SHARE = 0.3


def sft_phase(policy: Any, model_dir: str, args: argparse.Namespace, deadline: float, counter: FlopCounter, *,
              lr: float) -> dict[str, Any]:
    """Supervised steps on the demonstrations' replies (``rl.sft``'s loss, the warm start's), the
    variant's precision and trainable weights, ``args.micro_batch`` examples a step: the loss a
    random model's RL cannot show (its replies never parse, so its advantages are zero) must fall
    here. Up to ``args.sft_steps`` steps, fewer where the budget ends (at least two)."""
    import torch

    from rl.agents import AgentSettings
    from rl.optim import build_optimizer
    from rl.sft import SFTConfig, load_examples, load_trajectories, weighted_nll

    settings = AgentSettings.load(model_dir) or AgentSettings()
    examples = load_examples(load_trajectories([args.demos]), policy, settings.format(), settings.prompt_config(),
                             SFTConfig())
    if not examples:
        raise RuntimeError(f"no supervised examples in {args.demos}")
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = build_optimizer(policy, lr, betas=(0.9, 0.98), weight_decay=0.0, precision=args.precision)
    rng = random.Random(args.seed)
    order: list[int] = []
    losses: list[float] = []
    counter.flops.clear()
    counter.phase = "sft"
    seconds, samples, last = 0.0, 0, 0.0
    for step in range(args.sft_steps):
        if step >= 2 and time.perf_counter() + last > deadline:
            break
        _sync(args.device)
        t = time.perf_counter()
        for g in opt.param_groups:  # a short linear warm-up: a random model's first steps are large
            g["lr"] = lr * min(1.0, (step + 1) / 3)
        batch = []
        for _ in range(args.micro_batch):
            if not order:
                order = list(range(len(examples)))
                rng.shuffle(order)
            batch.append(examples[order.pop()])
        opt.zero_grad(set_to_none=True)
        loss, plain = weighted_nll(policy, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        policy.mark_updated()
        _sync(args.device)
        last = time.perf_counter() - t
        seconds += last
        samples += len(batch)
        losses.append(plain)
    del opt
    k = max(1, min(3, len(losses) // 3))
    first, final = sum(losses[:k]) / k, sum(losses[-k:]) / k
    return {"examples": len(examples), "steps": len(losses), "lr": lr, "seconds": round(seconds, 2),
            "samples_per_s": round(samples / max(seconds, 1e-9), 2), "flops": counter.flops.get("sft", 0.0),
            "losses": [round(x, 4) for x in losses], "loss_first": round(first, 4), "loss_last": round(final, 4),
            "loss_fell": final < first}


def cmd_run(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    t_start = time.perf_counter()
    deadline = t_start + args.budget_s
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible (run with --cpu for the CPU path)", file=sys.stderr)
        return 2
    demos = Path(args.demos)
    if not (demos / "store.sqlite").is_file():
        print(f"gpu_check: no recorded demonstrations in {demos} (bash scripts/gpu_check.sh --prepare records "
              "them)", file=sys.stderr)
        return 2
    from rl.replay import recorded_episodes

    episodes = recorded_episodes([str(demos)])
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    peak = args.peak_tflops or (peak_bf16_tflops(device_name) if args.device == "cuda" else None)
    import transformers

    report: dict[str, Any] = {
        "check": "gpu" if args.device == "cuda" else "cpu", "device": device_name, "torch": torch.__version__,
        "transformers": transformers.__version__, "python": platform.python_version(),
        "peak_bf16_tflops": peak, "demos": len(episodes), "groups": args.groups, "group_size": args.group_size,
        "new_tokens": args.new_tokens, "micro_batch": args.micro_batch,
        "flops": "2N a token forward, 6N forward+backward (4N with LoRA); N per part (module doc)"}
    t = time.perf_counter()
    model_dir, what = build_models(work, args.device, args.model)
    report["model"] = what
    report["build_s"] = round(time.perf_counter() - t, 1)
    report["variants"] = {}
    failed = False
    variants = [v for v in args.variants.split(",") if v]
    for i, name in enumerate(variants):
        # each variant gets an equal share of what is left of the budget
        share = (deadline - time.perf_counter()) / (len(variants) - i)
        try:
            report["variants"][name] = run_variant(name, model_dir, episodes, args, time.perf_counter() + share, peak)
        except Exception as e:  # noqa: BLE001 - an OOM or a broken path is a finding: report it, go on
            failed = True
            traceback.print_exc()  # where it broke, on stderr (the report keeps the one line)
            report["variants"][name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        gc.collect()  # the variant's model and optimiser (also those a failure's traceback held) go
        if args.device == "cuda":
            torch.cuda.empty_cache()
        print(f"{name}: {json.dumps(report['variants'][name])}", flush=True)
    if args.device == "cuda":
        report["params"] = _count_params(model_dir)
    report["wall_s"] = round(time.perf_counter() - t_start, 1)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report), flush=True)
    return 1 if failed else 0


def _count_params(model_dir: str) -> int:
    import torch
    from transformers import AutoConfig

    from guiagent.policy.hf import _model_class

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = _model_class(config.model_type)._from_config(config)
    return sum(p.numel() for p in model.parameters())


# ---- preparation here, installation there ---------------------------------------------------------

class ImportTracer:
    """Records which top-level package imported which while the path runs: every ``import``
    statement (``builtins.__import__``, also of modules imported before) and every first import
    through ``importlib`` (a ``sys.meta_path`` finder; the importer is the first frame outside
    importlib). The import graph of what actually ran."""

    def __init__(self) -> None:
        import builtins

        self.edges: set[tuple[str, str]] = set()
        self._builtins = builtins
        self._original = builtins.__import__

    def __enter__(self) -> "ImportTracer":
        self._builtins.__import__ = self._import
        sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._builtins.__import__ = self._original
        sys.meta_path.remove(self)

    def _import(self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and globals:
            self._add((globals.get("__name__") or "?").partition(".")[0], name)
        return self._original(name, globals, locals, fromlist, level)

    def _add(self, importer: str, name: str) -> None:
        top = name.partition(".")[0]
        if importer != top and not top.startswith("_"):
            self.edges.add((importer, top))

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] in sys.modules:
            return None
        frame = sys._getframe(1)
        while frame is not None and (frame.f_code.co_filename.startswith("<frozen") or "importlib" in
                                     frame.f_code.co_filename or frame.f_globals.get("__name__") == __name__):
            frame = frame.f_back
        if frame is not None:
            self._add((frame.f_globals.get("__name__") or "?").partition(".")[0], name)
        return None


def shipped_distributions(edges: set[tuple[str, str]] | list, *, roots=OWN_PACKAGES,
                          image=IMAGE_DISTS) -> tuple[dict[str, str], list[str]]:
    """From an import graph between top-level modules: the distributions guiagent's own packages
    import (directly, or through a distribution they import) that the GPU image lacks, with the
    versions installed here; and the image's assumed set. Imports made by the image's own
    packages (transformers probing for optional packages) are theirs, not followed."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    present: set[str] = set()
    for name in image:  # the image's packages and what they require directly (as installed here): a
        present.add(_canon(name))  # deeper dependency may differ between their versions, so it ships
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for r in reqs:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                present.add(_canon(req.name))
    dists_of = md.packages_distributions()
    own = set(roots)
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    seen: set[str] = set()
    ship: dict[str, str] = {}
    stack = [r for r in own]
    while stack:
        mod = stack.pop()
        if mod in seen:
            continue
        seen.add(mod)
        for dep in graph.get(mod, ()):
            if dep in own:
                stack.append(dep)
                continue
            dists = [_canon(d) for d in dists_of.get(dep, [])]
            if dep in sys.stdlib_module_names or not dists or any(d in present or d in OPTIONAL for d in dists):
                continue  # the standard library's or the image's (their imports are theirs), or optional
            for d in dists:
                ship[d] = md.version(d)
            stack.append(dep)
    todo = list(ship)
    while todo:  # what a shipped distribution requires (it may import that later, or lazily)
        for r in md.requires(todo.pop()) or []:
            req = Requirement(r)
            name = _canon(req.name)
            if (req.marker is None or req.marker.evaluate({"extra": ""})) and name not in present | ship.keys():
                try:
                    ship[name] = md.version(name)
                except md.PackageNotFoundError:
                    continue  # not needed on this platform / Python
                todo.append(name)
    return dict(sorted(ship.items())), sorted(present)


def _canon(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def cmd_trace(args: argparse.Namespace) -> int:
    """:func:`cmd_run` under :class:`ImportTracer`; writes the graph, the distributions to ship and
    the forbidden ones imported (exit status 1 when there are any) to ``args.trace_out``."""
    with ImportTracer() as tracer:
        rc = cmd_run(args)
    ship, present = shipped_distributions(tracer.edges)
    forbidden = sorted({b for _, b in tracer.edges if b in FORBIDDEN})
    Path(args.trace_out).write_text(json.dumps({"ship": ship, "image": present, "forbidden_imported": forbidden,
                                                "edges": sorted(tracer.edges)}, indent=1))
    if forbidden:
        print(f"gpu_check: the semi-online path imported {', '.join(forbidden)} (absent on the GPU machine)",
              file=sys.stderr)
        return 1
    return rc


def cmd_prepare(args: argparse.Namespace) -> int:
    """Demonstrations, the import trace and the wheels, into ``args.dir`` (checked against 64 MiB)."""
    out = Path(args.dir)
    wheels, demos = out / "wheels", out / "demos"
    out.mkdir(parents=True, exist_ok=True)
    # a site installed by an earlier --install (here, or copied back) would travel and shadow what
    # the GPU machine's own install decides; it is rebuilt there from the wheels
    shutil.rmtree(out / "site", ignore_errors=True)
    if not (demos / "store.sqlite").is_file():
        print(f"gpu_check: recording {args.episodes} oracle demonstrations of webapps -> {demos}", flush=True)
        subprocess.run([sys.executable, "-m", "guiagent", "eval", "--env", "webapps", "--agent", "oracle",
                        "--episodes", str(args.episodes), "--seed", "0", "--slots", "2", "--out", str(demos)],
                       check=True, cwd=ROOT)
    trace = out / "imports.json"
    print("gpu_check: running the --cpu path under the import tracer", flush=True)
    subprocess.run([sys.executable, str(Path(__file__)), "run", "--device", "cpu", "--demos", str(demos),
                    "--trace-out", str(trace)], check=True, cwd=ROOT)
    info = json.loads(trace.read_text())
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir()
    for dist, version in info["ship"].items():
        for py in PYTHONS:
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                   "--dest", str(wheels), "--python-version", py, "--implementation", "cp",
                   "--abi", "cp" + py.replace(".", ""), "--abi", "abi3", "--abi", "none",
                   *[a for p in PLATFORMS for a in ("--platform", p)], "--platform", "any", f"{dist}=={version}"]
            subprocess.run(cmd, check=True)
    files = sorted(p for p in out.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    manifest = {"ship": info["ship"], "image": info["image"], "pythons": list(PYTHONS), "platforms": list(PLATFORMS),
                "wheels": {p.name: p.stat().st_size for p in sorted(wheels.iterdir())}, "bytes": total}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    mib = total / (1 << 20)
    print(f"gpu_check: {len(manifest['wheels'])} wheels of {len(info['ship'])} distributions "
          f"({', '.join(f'{k} {v}' for k, v in info['ship'].items())}); {out} holds {mib:.1f} MiB", flush=True)
    if total > MAX_CARRY_BYTES:
        print(f"gpu_check: {out} holds {mib:.1f} MiB, over the 64 MiB that travel with the tree", file=sys.stderr)
        return 1
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    """Install, without network, the carried wheels of the distributions this Python lacks."""
    import importlib.metadata as md

    out = Path(args.dir)
    manifest = out / "manifest.json"
    if not manifest.is_file():
        print(f"gpu_check: {manifest} is missing (run bash scripts/gpu_check.sh --prepare where there is network, "
              "and carry .gpu_check)", file=sys.stderr)
        return 2
    ship = json.loads(manifest.read_text())["ship"]
    missing = []
    for dist, version in ship.items():
        try:
            have = md.version(dist)
            print(f"gpu_check: {dist} {have} is installed (prepared {version})")
        except md.PackageNotFoundError:
            missing.append(f"{dist}=={version}")
    site = out / "site"
    shutil.rmtree(site, ignore_errors=True)  # never a stale one on the path (the check puts it first)
    if not missing:
        return 0
    print(f"gpu_check: installing {' '.join(missing)} -> {site}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links",
                           str(out / "wheels"), "--no-deps", "--target", str(site), *missing])
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run",):
        p = sub.add_parser(name)
        p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
        p.add_argument("--demos", default=str(DEFAULT_DIR / "demos"), help="a store of recorded demonstrations")
        p.add_argument("--model", default="", help="a model folder instead of the random 3B (or tiny on CPU)")
        p.add_argument("--work", default="", help="folder for the built models (default: a temporary one)")
        p.add_argument("--variants", default="full,lora")
        p.add_argument("--budget-s", type=float, default=390.0,
                       help="seconds for the whole run; no iteration starts that would end after them")
        p.add_argument("--iterations", type=int, default=None, help="measured iterations a variant, at most")
        p.add_argument("--warmup", type=int, default=None, help="iterations before the measured ones")
        p.add_argument("--groups", type=int, default=None, help="recorded episodes an iteration")
        p.add_argument("--group-size", type=int, default=None, help="samples of each (G)")
        p.add_argument("--new-tokens", type=int, default=None)
        p.add_argument("--micro-batch", type=int, default=None)
        p.add_argument("--sft-steps", type=int, default=None,
                       help="supervised steps on the demonstrations after the RL iterations, at most (0: none)")
        p.add_argument("--lora-rank", type=int, default=64)
        p.add_argument("--precision", choices=("fp32", "bf16-mixed"), default=None,
                       help="default: bf16-mixed on CUDA, fp32 on CPU")
        p.add_argument("--checkpointing", action=argparse.BooleanOptionalAction, default=None,
                       help="gradient checkpointing (default: on with CUDA)")
        p.add_argument("--peak-tflops", type=float, default=None, help="the card's bf16 dense peak, if not in the table")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--trace-out", default="", help="run under the import tracer; its graph and the "
                       "distributions to ship go to this JSON file")
    p = sub.add_parser("prepare")
    p.add_argument("--dir", default=str(DEFAULT_DIR))
    p.add_argument("--episodes", type=int, default=24)
    p = sub.add_parser("install")
    p.add_argument("--dir", default=str(DEFAULT_DIR))
    args = ap.parse_args(argv)
    if args.cmd == "run":  # sizes: a GPU's, or the tiny model's on CPU (a CI check: seconds)
        gpu = args.device == "cuda"
        for key, on_gpu, on_cpu in (("warmup", 1, 0), ("iterations", 4, 1), ("groups", 4, 1), ("group_size", 4, 2),
                                    ("new_tokens", 64, 8), ("micro_batch", 4, 8), ("sft_steps", 40, 2)):
            if getattr(args, key) is None:
                setattr(args, key, on_gpu if gpu else on_cpu)
        for key in ("iterations", "groups", "group_size", "new_tokens", "micro_batch", "lora_rank"):
            if getattr(args, key) < 1:
                ap.error(f"--{key.replace('_', '-')} must be at least 1")
        if args.precision is None:
            args.precision = "bf16-mixed" if gpu else "fp32"
        if args.checkpointing is None:
            args.checkpointing = gpu
        if args.warmup < 0 or args.budget_s <= 0 or args.sft_steps < 0:
            ap.error("--warmup and --sft-steps must be >= 0 and --budget-s > 0")
        if args.sft_steps == 1:
            ap.error("--sft-steps: 0 (none) or at least 2 (whether the loss fell needs two)")
        bad = [v for v in args.variants.split(",") if v not in ("full", "lora")]
        if bad or not args.variants:
            ap.error(f"--variants: full and/or lora, comma-separated (got {args.variants!r})")
    if args.cmd == "run" and args.trace_out:
        return cmd_trace(args)
    return {"run": cmd_run, "prepare": cmd_prepare, "install": cmd_install}[args.cmd](args)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
