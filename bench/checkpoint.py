"""Bytes and seconds of one training checkpoint (``rl.checkpoint.save_checkpoint``), full weights and LoRA.

    python bench/checkpoint.py                       # tiny and small, full and LoRA rank 16, 5 saves each
    python bench/checkpoint.py --sizes tiny --rounds 3
    python bench/checkpoint.py --real-size           # also the byte counts of Qwen2.5-VL-3B (meta device)

For each model size (random-initialised, built offline: ``guiagent.policy.tiny``) and each variant (full
fine-tuning in fp32; LoRA rank 16 on the language model's projections, fp32), the policy takes one AdamW
step (so the optimiser holds its moments), then ``save_checkpoint`` runs ``--rounds`` times into one run
folder, as a training run saves after each iteration. Printed per case: the median seconds of a save,
the bytes the checkpoint folder holds, by part (weights, adapter, optimiser, the tokenizer / processor /
chat template, the rest), and the load average beside them (the machine is shared).

Then the end of a run as ``Trainer.finish`` writes it, after an evaluation that kept the model as the
best: the final model (``model/``), the best (``model-best/``) and the last checkpoint; printed: their
seconds and the bytes the three folders take on disk (a file hard-linked into several counted once).

``--real-size``: the same parts counted for Qwen2.5-VL-3B from its config (``qwen2_5_vl_3b_config()``,
built on the meta device: parameter counts without memory), LoRA rank 16 on the usual projections, in
the precisions a GPU run uses (``bf16-mixed``: frozen base in bf16, trainable weights and AdamW moments
in fp32; full fine-tuning keeps fp32 weights). The script runs on any checkout (the old layout's
checkpoint holds what the new one does not), so one command measures before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from guiagent.cli._common import quiet_library_bars  # noqa: E402
from guiagent.policy.tiny import TinyModelSpec, build_tiny_model  # noqa: E402
from rl.agents import AgentSettings  # noqa: E402
from rl.checkpoint import TrainerState, save_checkpoint  # noqa: E402
from rl.config import TrainConfig  # noqa: E402
from rl.learner import Learner  # noqa: E402

#: tokenizer, image processor and chat template files (what save_pretrained of those writes)
PARTS = re.compile(r"(tokenizer.*|special_tokens_map\.json|vocab\.json|merges\.txt|added_tokens\.json|"
                   r"preprocessor_config\.json|processor_config\.json|chat_template\.(jinja|json))")
WEIGHTS = re.compile(r"(model.*\.safetensors|model\.safetensors\.index\.json|config\.json"
                     r"|generation_config\.json)")


def _part(rel: str) -> str:
    if rel.startswith("lora_adapter/"):
        return "adapter"
    if rel == "optimizer.pt":
        return "optimizer"
    if PARTS.fullmatch(rel):
        return "parts"
    if WEIGHTS.fullmatch(rel):
        return "weights"
    return "rest"


def folder_bytes(folder: Path) -> dict[str, int]:
    """Bytes under ``folder`` by part, and ``new``: the bytes of files no other name links to (what the
    save wrote rather than linked)."""
    out = {"weights": 0, "adapter": 0, "optimizer": 0, "parts": 0, "rest": 0, "total": 0, "new": 0}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            out[_part(p.relative_to(folder).as_posix())] += st.st_size
            out["total"] += st.st_size
            out["new"] += st.st_size if st.st_nlink == 1 else 0
    return out


def disk_bytes(*folders: Path) -> int:
    """Bytes the folders take on disk, a file linked under several names counted once."""
    seen: dict[tuple[int, int], int] = {}
    for folder in folders:
        for p in folder.rglob("*"):
            if p.is_file() and not p.is_symlink():
                st = p.stat()
                seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


def measure(model_dir: str, lora_rank: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        cfg = TrainConfig.build(model=model_dir, out=str(out), lora_rank=lora_rank,
                                lora_alpha=2.0 * max(lora_rank, 1), precision="fp32", lr=1e-4)
        state = TrainerState(run_id="bench", model_dir=model_dir)
        learner = Learner(cfg, out, state, model_dir)  # the policy and AdamW as a training run builds them
        policy, opt = learner.policy, learner.opt

        def step() -> None:  # an update: the optimiser's moments, new weights, a new policy version
            for p in policy.parameters():
                if p.requires_grad:
                    p.grad = torch.randn_like(p) * 1e-3
            opt.step()
            opt.zero_grad()
            policy.mark_updated()

        params = sum(p.numel() for p in policy.parameters())
        trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
        seconds = []
        for i in range(rounds):
            step()
            state.iteration = i + 1
            t0 = time.perf_counter()
            save_checkpoint(out, policy, opt, state)
            seconds.append(time.perf_counter() - t0)
        sizes = folder_bytes(out / "checkpoint")
        # the end of a run: the final model, an evaluation that keeps it as the best, the checkpoint again
        settings = AgentSettings()
        t0 = time.perf_counter()
        if hasattr(learner, "save_model"):
            learner.save_model(out / "model", settings)
        else:  # a checkout from before save_model: what Trainer.finish did there
            policy.save(out / "model")
            settings.save(str(out / "model"))
        learner.keep_best(1.0, state.iteration, settings)
        save_checkpoint(out, policy, opt, state)
        finish = time.perf_counter() - t0
        folders = [out / "model", out / "model-best", out / "checkpoint"]
        end = {"seconds": round(finish, 4), "disk_bytes": disk_bytes(*folders),
               "apparent_bytes": sum(folder_bytes(f)["total"] for f in folders)}
    return {"params": params, "trainable": trainable, "seconds": round(statistics.median(seconds), 4),
            "seconds_all": [round(s, 4) for s in seconds], "bytes": sizes, "end_of_run": end}


def real_size(rank: int = 16) -> dict:
    """Qwen2.5-VL-3B's parts in bytes, counted on the meta device."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    from guiagent.policy.load import LANGUAGE_LINEAR_TARGETS
    from guiagent.policy.tiny import qwen2_5_vl_3b_config

    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration._from_config(qwen2_5_vl_3b_config())
    params = sum(p.numel() for p in model.parameters())
    # tied input and output embeddings are one tensor: counted once above, as safetensors stores them
    target = re.compile(LANGUAGE_LINEAR_TARGETS)
    lora = sum(rank * (m.in_features + m.out_features) for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and target.fullmatch(n))
    gib = 2**30
    full_fp32, base_bf16, adapter_fp32 = 4 * params, 2 * params, 4 * lora
    adam = lambda n: 8 * n  # noqa: E731  two fp32 moments a trainable weight (AdamW's step counts: a few bytes)
    return {
        "params": params, "lora_rank": rank, "lora_params": lora,
        "full_weights_fp32_gib": round(full_fp32 / gib, 2), "base_bf16_gib": round(base_bf16 / gib, 2),
        "adapter_fp32_mib": round(adapter_fp32 / 2**20, 1), "adam_full_gib": round(adam(params) / gib, 2),
        "adam_lora_mib": round(adam(lora) / 2**20, 1),
        "lora_checkpoint_before_gib": round((base_bf16 + adapter_fp32 + adam(lora)) / gib, 2),
        "lora_checkpoint_after_gib": round((adapter_fp32 + adam(lora)) / gib, 3),
        "full_checkpoint_gib": round((full_fp32 + adam(params)) / gib, 2),
        # the end of a run: model/, model-best/ and the checkpoint, each with its own copy before; now the
        # weights once (hard links), the merged bf16 weights once for LoRA
        "lora_end_of_run_before_gib": round((3 * (base_bf16 + adapter_fp32) + adam(lora)) / gib, 2),
        "lora_end_of_run_after_gib": round((base_bf16 + adapter_fp32 + adam(lora)) / gib, 2),
        "full_end_of_run_before_gib": round((3 * full_fp32 + adam(params)) / gib, 2),
        "full_end_of_run_after_gib": round((full_fp32 + adam(params)) / gib, 2),
    }


def _show(r: dict, rounds: int) -> None:
    b, e, mib = r["bytes"], r["end_of_run"], 2**20
    print(f"{r['size']:5} {r['variant']:9} {r['params'] / 1e6:5.1f}M params "
          f"({r['trainable'] / 1e6:.2f}M trained): {r['seconds'] * 1000:7.1f} ms a checkpoint "
          f"(median of {rounds}), {b['total'] / mib:6.2f} MiB: weights {b['weights'] / mib:.2f}, "
          f"adapter {b['adapter'] / mib:.2f}, optimiser {b['optimizer'] / mib:.2f}, "
          f"tokenizer/processor/template {b['parts'] / mib:.2f}, rest {b['rest'] / 2**10:.1f} KiB "
          f" (load {r['load']})")
    print(f"{'':15} end of run (model/, model-best/, checkpoint/): {e['seconds'] * 1000:7.1f} ms, "
          f"{e['disk_bytes'] / mib:6.2f} MiB on disk ({e['apparent_bytes'] / mib:.2f} MiB "
          "counting each name)")


def _show_real(q: dict) -> None:
    print(f"Qwen2.5-VL-3B: {q['params'] / 1e9:.2f}B params, LoRA r{q['lora_rank']} "
          f"{q['lora_params'] / 1e6:.1f}M; a LoRA checkpoint {q['lora_checkpoint_before_gib']} GiB "
          f"with the merged bf16 weights, {q['lora_checkpoint_after_gib']} GiB adapter and optimiser "
          f"alone; a full fp32 checkpoint {q['full_checkpoint_gib']} GiB. End of run (model/, "
          f"model-best/, checkpoint/): LoRA {q['lora_end_of_run_before_gib']} GiB with a copy each, "
          f"{q['lora_end_of_run_after_gib']} GiB linked; full {q['full_end_of_run_before_gib']} -> "
          f"{q['full_end_of_run_after_gib']} GiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="*", default=["tiny", "small"], choices=["tiny", "small"],
                    help="model sizes to save (none: only --real-size's counts)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--real-size", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    quiet_library_bars()
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as models:
        for size in args.sizes:
            model_dir = str(Path(models) / size)
            build_tiny_model(TinyModelSpec(size=size), model_dir)
            for rank in (0, args.lora_rank):
                r = measure(model_dir, rank, args.rounds)
                variant = f"lora r{rank}" if rank else "full"
                r.update(size=size, variant=variant, load=round(os.getloadavg()[0], 2))
                rows.append(r)
                _show(r, args.rounds)
    summary: dict = {"rows": rows, "load_before": round(load_before, 2),
                     "load_after": round(os.getloadavg()[0], 2)}
    if args.real_size:
        summary["qwen2_5_vl_3b"] = real_size(args.lora_rank)
        _show_real(summary["qwen2_5_vl_3b"])
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
