"""GPU throughput and precision of the real-model path (needs CUDA; vLLM for the rollout figures).

A randomly initialised Qwen2.5-VL with the 3B architecture (published config.json values, no
download) and the tiny model's tokenizer, or ``--model DIR`` for a real checkpoint. Measures:

* rollout tokens/s: vLLM (colocated, bf16) against transformers ``generate`` (bf16 autocast);
* update samples/s: score + backward + AdamW step (bf16-mixed, gradient checkpointing, LoRA or full);
* peak GPU memory of the update, next to ``estimate_memory``'s figure;
* mismatch KL between vLLM's sampled log-probs and the learner's re-scored ones, and the TIS
  clip fraction.

    python bench/gpu.py [--model DIR] [--batch 16] [--new-tokens 128] [--lora-rank 64] [--no-vllm]

The last stdout line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def png(w: int, h: int, seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    img = Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="", help="a model folder (default: random Qwen2.5-VL-3B architecture)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--lora-rank", type=int, default=64, help="0: full fine-tuning")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    args = ap.parse_args()

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
        build_tiny_model(TinyModelSpec(size="tiny"), tiny)
        model_dir = str(build_random_model(qwen2_5_vl_3b_config(), os.path.join(work, "qwen25vl-3b"),
                                           tokenizer_from=tiny, device="cuda"))
        torch.cuda.empty_cache()
    chats = [[{"role": "system", "content": "You control a phone."},
              message("user", png(360, 640, i), f"Goal: open the settings ({i}).")] for i in range(args.batch)]
    sp = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)
    out: dict[str, object] = {"bench": "gpu", "model": args.model or "random-qwen2.5-vl-3b",
                              "device": torch.cuda.get_device_name(), "batch": args.batch,
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
    learner.generate(chats[:2], SamplingParams(max_new_tokens=8))  # warm-up
    t = time.perf_counter()
    hgens = learner.generate(chats, sp)
    dt = time.perf_counter() - t
    out["hf_tokens_per_s"] = round(sum(len(g.token_ids) for g in hgens) / dt, 1)

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
    est = estimate_memory_for(learner.model, precision="bf16-mixed", micro_batch_size=args.micro_batch,
                              seq_len=seq, completion_len=args.new_tokens, gradient_checkpointing=True)
    print(est.summary())
    opt = build_optimizer(learner, lr=1e-5 if lora else 1e-6, precision="bf16-mixed")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    adv = torch.randn(args.batch)
    for i in range(0, args.batch, args.micro_batch):
        sb = learner.score_batch(chats[i:i + args.micro_batch], comps[i:i + args.micro_batch], grad=True)
        loss, _ = ppo_clip_loss(sb.logprobs, sb.logprobs.detach(), adv[i:i + args.micro_batch].cuda(), sb.mask)
        (loss * len(sb.mask) / args.batch).backward()
    opt.step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    out["update_samples_per_s"] = round(args.batch / dt, 2)
    out["peak_update_gib"] = round(torch.cuda.max_memory_allocated() / GiB, 2)
    out["estimate_gib"] = round(est.total / GiB, 2)
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
