"""Generate tokens/s on CPU: the vLLM backend (vLLM's CPU build) against the transformers backend, one run.

    .venv-vllm/bin/python bench/vllm_generate.py                    # 16 chats x 32 new tokens, 3 repeats
    .venv-vllm/bin/python bench/vllm_generate.py --batch 8 --new-tokens 16 --model runs/train/model

(Not ``bench/vllm.py``: Python puts ``bench/`` on the path, where that name would shadow vLLM itself.)
Runs inside the CPU vLLM environment (``bash scripts/vllm_env.sh``). Both backends get the same chats
(a system prompt, a goal and a 360x640 screenshot-like PNG each), one encoding per chat made by the
learner's encoder, temperature 1 with per-chat seeds, ``max_new_tokens`` at most (a stop token may end a
reply sooner: the figure counts the tokens generated). Each repeat times one batch on each backend in
turn; the first batch of each is a warm-up and is not counted. Prints the medians and the load average
beside them (the machine is shared: compare only figures taken in one run), then one JSON line.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout first (bench/webui.py would shadow webui)


def chats(n: int) -> list:
    from PIL import Image, ImageDraw

    from guiagent.policy import message

    out = []
    for i in range(n):
        img = Image.new("RGB", (360, 640), (240, 240, 240))
        d = ImageDraw.Draw(img)
        for k in range(9):
            d.rectangle([40 + (k % 3) * 100, 120 + (k // 3) * 120, 110 + (k % 3) * 100, 190 + (k // 3) * 120],
                        fill=((i * 37 + k * 53) % 256, 120, 200))
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        out.append([{"role": "system", "content": "You control a phone. Answer with one action."},
                    message("user", buf.getvalue(), f"Goal: open app number {i}.")])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="", help="a model folder (default: a tiny model built into a temp dir)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-pixels", type=int, default=100352)
    args = ap.parse_args(argv)

    import tempfile

    import torch

    from guiagent.policy import SamplingParams
    from guiagent.policy.hf import load_transformers
    from guiagent.policy.vllm_backend import VLLMPolicy

    model = args.model
    if not model:
        from guiagent.policy.tiny import TinyModelSpec, build_tiny_model

        model = tempfile.mkdtemp(prefix="bench-vllm-")
        build_tiny_model(TinyModelSpec(size="tiny", seed=0), model)
    hf = load_transformers(model, device="cpu", precision="fp32", max_pixels=args.max_pixels)
    t0 = time.perf_counter()
    g = hf.image_geometry()
    engine = VLLMPolicy(model, colocate=True, gpu_memory_utilization=0.05, max_model_len=4096, enforce_eager=True,
                        dtype="float32", max_images=1, min_pixels=g.min_pixels, max_pixels=g.max_pixels,
                        encoder=hf.encoder)
    start_s = time.perf_counter() - t0
    cs = chats(args.batch)
    encs = [engine.encoder.encode(c) for c in cs]
    rows: dict[str, list[float]] = {"vllm": [], "transformers": []}
    loads: list[float] = []
    for rep in range(args.repeats + 1):
        sp = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seeds=tuple(range(rep * 100, rep * 100 + len(cs))))
        for name, run in (("vllm", lambda: engine.generate_encoded(encs, sp)),
                          ("transformers", lambda: hf.generate_encoded(encs, sp))):
            t = time.perf_counter()
            gens = run()
            dt = time.perf_counter() - t
            if rep:  # the first batch warms each backend up
                rows[name].append(sum(len(x.token_ids) for x in gens) / dt)
        if rep:
            loads.append(os.getloadavg()[0])
    engine.close()
    out = {"model": model if args.model else "tiny (built)", "batch": args.batch, "new_tokens": args.new_tokens,
           "repeats": args.repeats, "engine_start_s": round(start_s, 1), "torch_threads": torch.get_num_threads()}
    for name, r in rows.items():
        out[f"{name}_tokens_per_s"] = round(statistics.median(r), 1)
    out["vllm_over_transformers"] = round(out["vllm_tokens_per_s"] / out["transformers_tokens_per_s"], 2)
    out["load_avg_1min"] = [round(x, 2) for x in loads]
    print(f"generate tokens/s, {args.batch} chats x {args.new_tokens} new tokens, median of {args.repeats}: "
          f"vLLM {out['vllm_tokens_per_s']}, transformers {out['transformers_tokens_per_s']} "
          f"({out['vllm_over_transformers']}x); load average {', '.join(map(str, out['load_avg_1min']))}; "
          f"engine start {out['engine_start_s']} s")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
