"""GPU throughput and precision of the real-model path (needs CUDA; vLLM for the rollout figures).

A randomly initialised Qwen2.5-VL with the 3B architecture (published config.json values, no
download) and the tiny model's tokenizer, or ``--model DIR`` for a real checkpoint. Measures:

* rollout tokens/s: vLLM (colocated, bf16) against transformers ``generate`` (bf16 autocast);
* update samples/s: score + backward + AdamW step (bf16-mixed, gradient checkpointing, LoRA or full),
  the median of ``--updates`` updates after a first one (which allocates the optimiser's state);
* peak GPU memory of the update, next to ``estimate_memory``'s figure;
* model TFLOP/s and MFU of ``generate`` and of the update (FLOPs counted as ``scripts/gpu_check.py``
  counts them, against the card's bf16 dense peak);
* mismatch KL between vLLM's sampled log-probs and the learner's re-scored ones, and the TIS
  clip fraction.

    python bench/gpu.py [--model DIR] [--batch 16] [--micro-batch 4] [--new-tokens 128] [--lora-rank 64] [--no-vllm]
    python bench/gpu.py --no-vllm --screen 1080x2400 --max-pixels 1003520   # a phone screenshot, 1,280 visual tokens
    python bench/gpu.py --no-vllm --profile $OUT/profile   # where one update's time goes (torch.profiler)

``--profile DIR`` runs one more update under :mod:`torch.profiler` after the timed ones and writes
``DIR/update_ops.txt`` (the operators by their own device time, then by CPU time) and
``DIR/update_parts.json`` (device and CPU time inside the vision tower's and the language model's
forward passes, and inside every forward of their blocks, which under gradient checkpointing
includes each block's recomputation in the backward pass, against the whole update); with
``--profile-trace`` also ``DIR/update_trace.json`` (Chrome's trace format; large).

The last stdout line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the checkout first: bench/ (this script's folder, first on the path) holds a webui.py of its own
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def png(w: int, h: int, seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    img = Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _gpu_check() -> Any:
    """scripts/gpu_check.py as a module (its FLOP counter and the cards' peaks)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "gpu_check.py")
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


#: the parts of a Qwen-VL model whose forward passes ``--profile`` times apart: attribute path -> label
PROFILED_PARTS = {"visual": "vision tower", "model.visual": "vision tower", "language_model": "language model",
                  "model.language_model": "language model"}


def _submodule(model: Any, path: str) -> Any:
    for name in path.split("."):
        model = getattr(model, name, None)
        if model is None:
            return None
    return model


def profile_update(fn: Any, model: Any, out_dir: str, *, cuda: bool, trace: bool = False) -> dict[str, Any]:
    """Run ``fn`` (one update) once under :mod:`torch.profiler`; write the operator tables and the
    parts' times to ``out_dir`` and return them: ``{label: {"device_ms", "cpu_ms", "calls"}}`` with
    ``"update"`` the whole. The parts are the forward passes of the model's vision tower and language
    model, and (``"<part> blocks"``) every forward of their blocks' submodules (attention, MLP, norms
    of the elements of their module lists): a block checkpointed for the backward pass runs them
    again there, so the blocks' time less the part's own forward time is about the recomputation
    (``calls`` counts the submodule calls). Each range is a
    :func:`torch.profiler.record_function` opened and closed by forward hooks; the backward passes
    themselves fall outside every range but the whole. With ``cuda``, each part's forward also
    reports ``"peak_gib"``: the most memory it allocated above what was allocated when it began (its
    largest call), and ``"update"`` the update's peak (``torch.cuda.max_memory_allocated``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    os.makedirs(out_dir, exist_ok=True)
    inner = getattr(getattr(model, "base_model", None), "model", None) or model  # under a peft wrapper
    parts: dict[str, Any] = {}
    for path, label in PROFILED_PARTS.items():
        mod = _submodule(inner, path)
        if mod is not None and label not in parts and mod is not inner:
            parts[label] = mod
    handles, open_ranges = [], []
    # memory: a part's forward peak above its start (the peak counter is reset as a part begins, so
    # the update's own peak is folded in before every reset)
    mem: dict[str, Any] = {"overall": 0, "peaks": {}, "start": []}

    def enter(label: str, memory: bool = False) -> Any:
        def pre(_m: Any, _a: Any) -> None:
            if memory:
                torch.cuda.synchronize()
                mem["overall"] = max(mem["overall"], torch.cuda.max_memory_allocated())
                mem["start"].append(torch.cuda.memory_allocated())
                torch.cuda.reset_peak_memory_stats()
            r = record_function(f"part: {label}")
            r.__enter__()
            open_ranges.append(r)
        return pre

    def leave(label: str, memory: bool = False) -> Any:
        def post(_m: Any, _a: Any, _o: Any) -> None:
            if open_ranges:
                open_ranges.pop().__exit__(None, None, None)
            if memory and mem["start"]:
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated()
                mem["overall"] = max(mem["overall"], peak)
                mem["peaks"][label] = max(mem["peaks"].get(label, 0), peak - mem["start"].pop())
        return post

    for label, mod in parts.items():
        handles.append(mod.register_forward_pre_hook(enter(label, cuda)))
        handles.append(mod.register_forward_hook(leave(label, cuda)))
        for child in mod.children():
            if isinstance(child, torch.nn.ModuleList):
                # the blocks' own submodules: a checkpointed block's forward runs them again in the
                # backward pass (transformers checkpoints a block's forward, keeping its hooks outside)
                for block in child:
                    for inner_mod in block.children():
                        handles.append(inner_mod.register_forward_pre_hook(enter(f"{label} blocks")))
                        handles.append(inner_mod.register_forward_hook(leave(f"{label} blocks")))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    try:
        with profile(activities=activities) as prof:
            with record_function("part: update"):
                fn()
    finally:
        for h in handles:
            h.remove()
    if cuda:
        torch.cuda.synchronize()
        mem["overall"] = max(mem["overall"], torch.cuda.max_memory_allocated())
    events = prof.key_averages()
    dev = "device_time_total" if hasattr(events[0], "device_time_total") else "cuda_time_total"
    self_dev = "self_" + dev
    with open(os.path.join(out_dir, "update_ops.txt"), "w") as f:
        if cuda:
            f.write(events.table(sort_by=self_dev, row_limit=40) + "\n\n")
        f.write(events.table(sort_by="self_cpu_time_total", row_limit=40) + "\n")
    summary: dict[str, Any] = {}
    for e in events:
        if e.key.startswith("part: "):
            summary[e.key[len("part: "):]] = {"device_ms": round(getattr(e, dev, 0.0) / 1e3, 2),
                                             "cpu_ms": round(e.cpu_time_total / 1e3, 2), "calls": e.count}
    if cuda:
        for label, peak in mem["peaks"].items():
            summary.setdefault(label, {})["peak_gib"] = round(peak / 2**30, 3)
        summary.setdefault("update", {})["peak_gib"] = round(mem["overall"] / 2**30, 3)
    with open(os.path.join(out_dir, "update_parts.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if trace:
        prof.export_chrome_trace(os.path.join(out_dir, "update_trace.json"))
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="", help="a model folder (default: random Qwen2.5-VL-3B architecture)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--lora-rank", type=int, default=64, help="0: full fine-tuning")
    ap.add_argument("--screen", default="360x640", help="screenshot size WxH (random pixels)")
    ap.add_argument("--max-pixels", type=int, default=0,
                    help="the image processor's pixel cap (0: the tiny processor's 200,704, 256 visual tokens)")
    ap.add_argument("--updates", type=int, default=3, help="timed updates after the first (median reported)")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    ap.add_argument("--profile", default="", metavar="DIR",
                    help="one more update under torch.profiler: operator tables and the parts' times in DIR")
    ap.add_argument("--profile-trace", action="store_true", help="with --profile: also a Chrome trace (large)")
    args = ap.parse_args()
    try:
        sw, sh = (int(v) for v in args.screen.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--screen must be WxH, got {args.screen!r}") from None

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("bench/gpu.py needs a CUDA GPU")
    from guiagent.policy import SamplingParams, message
    from guiagent.policy.hf import LoraSettings, build_random_model, load_transformers, qwen2_5_vl_3b_config
    from guiagent.policy.tiny import TinyModelSpec, build_tiny_model
    from rl.losses import mismatch_kl, ppo_clip_loss, tis_weights
    from rl.optim import GiB, build_optimizer, estimate_memory_for

    work = tempfile.mkdtemp(prefix="bench-gpu-")
    model_dir = args.model
    if not model_dir:
        tiny = os.path.join(work, "tiny")
        spec = TinyModelSpec(size="tiny", max_pixels=args.max_pixels) if args.max_pixels else TinyModelSpec(size="tiny")
        build_tiny_model(spec, tiny)
        model_dir = str(build_random_model(qwen2_5_vl_3b_config(), os.path.join(work, "qwen25vl-3b"),
                                           tokenizer_from=tiny, device="cuda"))
        torch.cuda.empty_cache()
    chats = [[{"role": "system", "content": "You control a phone."},
              message("user", png(sw, sh, i), f"Goal: open the settings ({i}).")] for i in range(args.batch)]
    sp = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)
    out: dict[str, object] = {"bench": "gpu", "model": args.model or "random-qwen2.5-vl-3b",
                              "device": torch.cuda.get_device_name(), "batch": args.batch,
                              "micro_batch": args.micro_batch, "screen": f"{sw}x{sh}",
                              "new_tokens": args.new_tokens, "lora_rank": args.lora_rank, "torch": torch.__version__}

    engine = None
    if not args.no_vllm:
        from guiagent.policy.vllm_backend import VLLMPolicy

        engine = VLLMPolicy(model_dir, max_images=1, max_model_len=4096, dtype="bfloat16", colocate=True,
                            enable_sleep_mode=True, gpu_memory_utilization=args.gpu_memory_utilization)
        engine.generate(chats[:2], SamplingParams(max_new_tokens=8))  # warm-up
        t = time.perf_counter()
        vgens = engine.generate(chats, sp)
        dt = time.perf_counter() - t
        out["vllm_tokens_per_s"] = round(sum(len(g.token_ids) for g in vgens) / dt, 1)
        engine.sleep(level=1)
        torch.cuda.empty_cache()

    lora = LoraSettings(rank=args.lora_rank, alpha=2 * args.lora_rank) if args.lora_rank else None
    learner = load_transformers(model_dir, device="cuda", precision="bf16-mixed", lora=lora,
                                gradient_checkpointing=True)
    gpu_check = _gpu_check()
    counter = gpu_check.FlopCounter(learner.model)  # model FLOPs, counted as scripts/gpu_check.py does
    peak = gpu_check.peak_bf16_tflops(out["device"])
    learner.generate(chats[:2], SamplingParams(max_new_tokens=8))  # warm-up
    counter.flops.clear()
    counter.phase = "generate"
    t = time.perf_counter()
    hgens = learner.generate(chats, sp)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    out["hf_tokens_per_s"] = round(sum(len(g.token_ids) for g in hgens) / dt, 1)
    out["hf_generate_tflops"] = round(counter.flops.get("generate", 0.0) / dt / 1e12, 3)
    counter.phase = "other"

    gens = vgens if engine is not None else hgens
    comps = [list(g.token_ids) for g in gens]
    if engine is not None:  # the learner re-scores vLLM's samples: the train-inference mismatch
        sb = learner.score_batch(chats, comps, grad=False)
        rollout = torch.zeros_like(sb.logprobs)
        for b, g in enumerate(gens):
            rollout[b, :len(g.logprobs)] = torch.tensor(g.logprobs, device=rollout.device)
        _, st = tis_weights(sb.logprobs, rollout, sb.mask, cap=2.0)
        out["mismatch_kl"] = float(mismatch_kl(sb.logprobs, rollout, sb.mask))
        out["tis_clip_frac"] = st.tis_clip_frac

    seq = max(g.prompt_tokens for g in gens) + args.new_tokens
    out["prompt_tokens"] = max(g.prompt_tokens for g in gens)
    est = estimate_memory_for(learner.model, precision="bf16-mixed", micro_batch_size=args.micro_batch,
                              seq_len=seq, completion_len=args.new_tokens, gradient_checkpointing=True)
    print(est.summary())
    opt = build_optimizer(learner, lr=1e-5 if lora else 1e-6, precision="bf16-mixed")
    adv = torch.randn(args.batch)

    def one_update() -> None:
        opt.zero_grad(set_to_none=True)
        for i in range(0, args.batch, args.micro_batch):
            sb = learner.score_batch(chats[i:i + args.micro_batch], comps[i:i + args.micro_batch], grad=True)
            loss, _ = ppo_clip_loss(sb.logprobs, sb.logprobs.detach(), adv[i:i + args.micro_batch].cuda(), sb.mask)
            (loss * len(sb.mask) / args.batch).backward()
        opt.step()
        torch.cuda.synchronize()

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    one_update()  # the first allocates the optimiser's state: timed apart
    out["first_update_s"] = round(time.perf_counter() - t, 2)
    times = []
    counter.flops.clear()
    counter.phase = "update"
    for _ in range(args.updates):
        t = time.perf_counter()
        one_update()
        times.append(time.perf_counter() - t)
    dt = statistics.median(times) if times else float(out["first_update_s"])
    out["updates_timed"] = len(times)
    counter.close()
    if times:
        out["update_tflops"] = round(counter.flops.get("update", 0.0) / sum(times) / 1e12, 3)
        if peak:
            out["update_mfu"] = round(out["update_tflops"] / peak, 4)
            out["hf_generate_mfu"] = round(out["hf_generate_tflops"] / peak, 4)
    out["update_samples_per_s"] = round(args.batch / dt, 2)
    out["peak_update_gib"] = round(torch.cuda.max_memory_allocated() / GiB, 2)
    out["estimate_gib"] = round(est.total / GiB, 2)
    if args.profile:
        out["profile"] = profile_update(one_update, learner.model, args.profile, cuda=True, trace=args.profile_trace)
    if engine is not None:
        from guiagent.policy.vllm_backend import ColocatedSync

        learner.mark_updated()
        t = time.perf_counter()
        ColocatedSync(engine, learner, dtype=torch.bfloat16).push()
        out["weight_sync_s"] = round(time.perf_counter() - t, 2)
        engine.close()
    for k, v in out.items():
        if k != "bench":
            print(f"{k}: {v}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
