"""Policy time per step on CPU: the tiny model generating for a batch of env slots, and scoring.

    python bench/policy.py                       # B=8 slots, 32 new tokens, 3 repeats; ~3 min on 2 cores
    python bench/policy.py --batch 4 --repeats 2 --new-tokens 16

The batch is what :func:`rl.rollout.run_rollout` hands the model in one ``act_batch``: one chat
per slot, a system prompt and one user turn (goal + a 360x640 screenshot-like PNG at the
training warm start's pixel limit, ~120 visual tokens), sampled at temperature 1 with per-row
seeds, ``--new-tokens`` at most. Three batches:

* ``distinct``: B different screens and goals, the compact system prompt (a rollout's later steps);
* ``groups``: B/G screens, G=``--group-size`` slots on each (a GRPO group's first step);
* ``distinct_full_prompt``: as ``distinct`` with the JSON format's full system prompt (~700 tokens),
  what a pretrained model is prompted with.

Each batch is generated in three modes, in rotating order within each repeat (same seeds, so
the same tokens):

* ``plain``: every row through the vision tower and the whole prompt prefilled a row
  (``share_prompts`` off, vision-output reuse off): the path before these changes;
* ``vision``: each distinct screenshot through the vision tower once (vision-output reuse on;
  its cache emptied before each call, as a rollout's next step brings new screens);
* ``shared``: that, and the system prompt's KV cache prefilled once and copied to every row
  (``share_prompts`` on: the defaults);
* ``shared_1_thread``: ``shared`` with one torch thread instead of ``--threads``: on a machine
  whose cores are busy with other work (a browser stepping envs), torch's worker threads wait for
  each other at every operation, so fewer threads can be faster.

Per mode: wall and process CPU seconds a batch, new tokens/s and **policy seconds per env
step** (batch seconds / B), medians over ``--repeats``. Then the learner's side on the
``groups`` batch and its generated tokens: re-scoring without grad right after generation at
the same weights (``plain`` vs the defaults, whose vision cache still holds the generation's
outputs) and scoring with backward (one padded forward a row vs a group's rows sharing their
prompt's forward). The load average is printed with the figures; the last stdout line is one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench.screens import screen  # noqa: E402

MODES = ("plain", "vision", "shared", "shared_1_thread")
GOALS = ("Open the Settings app.", "Turn on Wi-Fi in Settings.", "Open the Files app.",
         "Go to the home screen.", "Turn off Bluetooth.", "Open the clock and add an alarm.",
         "Search the contacts for Ann.", "Set the brightness to the lowest.")


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def set_mode(policy, mode: str, threads: int) -> None:
    import torch

    torch.set_num_threads(1 if mode == "shared_1_thread" else threads)
    policy.share_prompts = mode.startswith("shared")
    policy.vision_cache_bytes = 0 if mode == "plain" else 256 << 20
    policy._vision_cache.clear()
    policy._vision_cache_used = 0


def batches(b: int, g: int, full_prompt: str) -> dict[str, list]:
    from guiagent.policy import message
    from rl.agents import COMPACT_JSON_PROMPT

    def chat(i: int, system: str, shot: int):  # each slot its own chat and its own copy of the PNG
        return [{"role": "system", "content": system},
                message("user", f"Goal: {GOALS[i % len(GOALS)]}\nCurrent screenshot:",
                        bytes(bytearray(screen(shot))))]

    return {"distinct": [chat(i, COMPACT_JSON_PROMPT, i) for i in range(b)],
            "groups": [chat(i // g, COMPACT_JSON_PROMPT, i // g) for i in range(b)],
            "distinct_full_prompt": [chat(i, full_prompt, i) for i in range(b)]}


def timed(fn, *a) -> tuple[object, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    r = fn(*a)
    return r, time.perf_counter() - t0, time.process_time() - c0


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8, help="B: env slots acting together")
    ap.add_argument("--group-size", type=int, default=4, help="G of the groups batch")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", default="tiny", choices=["tiny", "small"])
    args = ap.parse_args()
    if args.batch < 2 or args.batch % args.group_size:
        sys.exit("--batch must be at least 2 and a multiple of --group-size")

    import torch

    from guiagent.policy import SamplingParams
    from guiagent.policy.hf import load_transformers
    from guiagent.policy.tiny import TinyModelSpec, build_tiny_model
    from rl.agents import AgentSettings
    from rl.config import TINY_MAX_PIXELS

    torch.manual_seed(0)
    rss_import = peak_rss_mb()
    out = tempfile.mkdtemp(prefix="guiagent-bench-policy-")
    info = build_tiny_model(TinyModelSpec(size=args.size, max_pixels=TINY_MAX_PIXELS), out)
    policy = load_transformers(out, device="cpu", threads=args.threads)
    full_prompt = AgentSettings().format(policy).system_prompt()
    chats = batches(args.batch, args.group_size, full_prompt)
    encs = {k: [policy.encoder.encode(c) for c in v] for k, v in chats.items()}
    print(f"model: {info['params']:,} parameters, {args.threads} threads; batch {args.batch}, "
          f"at most {args.new_tokens} new tokens, temperature 1, per-row seeds")
    for k, e in encs.items():
        print(f"  {k}: prompt {len(e[0].input_ids)} tokens ({sum(e[0].mm_token_type_ids)} visual), "
              f"{len({x.image_keys for x in e})} distinct screens, "
              f"shared prefix {policy._common_prefix(e)} tokens")
    loads = [load_avg()]

    def sampling(r: int) -> SamplingParams:
        return SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=r,
                              seeds=tuple(1000 * r + i for i in range(args.batch)))

    for mode in MODES:  # warm-up
        set_mode(policy, mode, args.threads)
        policy.generate(chats["distinct"][:2], SamplingParams(max_new_tokens=2, seed=0))
    runs: dict[str, dict[str, list]] = {k: {m: [] for m in MODES} for k in chats}
    gens_groups = None
    for r in range(args.repeats):
        for k, cs in chats.items():
            order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
            for mode in order:
                set_mode(policy, mode, args.threads)
                gens, wall, cpu = timed(policy.generate, cs, sampling(r))
                runs[k][mode].append((wall, cpu, sum(len(g.token_ids) for g in gens)))
                if k == "groups":
                    gens_groups = gens
            print(f"repeat {r + 1} {k}: " + ", ".join(
                f"{m} {runs[k][m][-1][0]:.2f} s ({runs[k][m][-1][1]:.2f} CPU s)" for m in MODES)
                + f"; load {load_avg()}", flush=True)
    loads.append(load_avg())

    result: dict = {"bench": "policy", "size": args.size, "params": info["params"], "threads": args.threads,
                    "batch": args.batch, "group_size": args.group_size, "new_tokens": args.new_tokens,
                    "repeats": args.repeats, "torch": torch.__version__}
    for k in chats:
        fig: dict = {"prompt_tokens": len(encs[k][0].input_ids), "shared_prefix_tokens":
                     policy._common_prefix(encs[k])}
        for m in MODES:
            wall, cpu, toks = (med([x[i] for x in runs[k][m]]) for i in range(3))
            fig[m] = {"generate_s": round(wall, 3), "generate_cpu_s": round(cpu, 3),
                      "tokens_per_s": round(toks / wall, 1), "policy_s_per_step": round(wall / args.batch, 4),
                      "runs_s": [round(x[0], 3) for x in runs[k][m]]}
        pairs = [p[0] / s[0] for p, s in zip(runs[k]["plain"], runs[k]["shared"])]
        fig["speedup_shared_vs_plain"] = round(med(pairs), 2)
        for m in ("vision", "shared_1_thread"):
            ratios = [p[0] / s[0] for p, s in zip(runs[k]["plain"], runs[k][m])]
            fig[f"speedup_{m}_vs_plain"] = round(med(ratios), 2)
        result[k] = fig
        step = {m: fig[m]["policy_s_per_step"] for m in MODES}
        print(f"{k}: policy s a step plain {step['plain']:.3f}, vision reuse {step['vision']:.3f}, "
              f"+ shared prefix {step['shared']:.3f} (x{fig['speedup_shared_vs_plain']:.2f}), "
              f"1 thread {step['shared_1_thread']:.3f}; "
              f"tokens/s {fig['plain']['tokens_per_s']} -> {fig['shared']['tokens_per_s']}")

    # the learner's side on the groups batch: re-scoring at the generation's weights, scoring with backward
    comps = [g.token_ids for g in gens_groups]
    learner: dict[str, dict[str, list]] = {"rescore": {"plain": [], "shared": []},
                                           "score_backward": {"plain": [], "shared": []}}
    for r in range(args.repeats):
        for mode in (("plain", "shared") if r % 2 == 0 else ("shared", "plain")):
            set_mode(policy, mode, args.threads)
            if mode == "shared":  # the generation's vision outputs, as right after a rollout
                policy.generate(chats["groups"], sampling(0))
            _, wall, cpu = timed(policy.score, chats["groups"], comps)
            learner["rescore"][mode].append((wall, cpu))

            def score_backward():
                sb = policy.score_batch(chats["groups"], comps, grad=True)
                (-(sb.logprobs * sb.mask).sum()).backward()
                policy.model.zero_grad(set_to_none=True)

            _, wall, cpu = timed(score_backward)
            learner["score_backward"][mode].append((wall, cpu))
    n_tok = sum(len(c) for c in comps)
    for k, v in learner.items():
        fig = {m: {"s": round(med([x[0] for x in v[m]]), 3), "cpu_s": round(med([x[1] for x in v[m]]), 3),
                   "tokens_per_s": round(n_tok / med([x[0] for x in v[m]]), 1)} for m in v}
        fig["speedup"] = round(med([p[0] / s[0] for p, s in zip(v["plain"], v["shared"])]), 2)
        result[f"groups_{k}"] = fig
        pl, sh = fig["plain"], fig["shared"]
        print(f"groups {k}: plain {pl['s']:.3f} s ({pl['cpu_s']:.3f} CPU s), "
              f"shared {sh['s']:.3f} s ({sh['cpu_s']:.3f} CPU s): x{fig['speedup']:.2f}")
    loads.append(load_avg())
    peak = peak_rss_mb()
    result.update(peak_rss_mb=round(peak), load_avg=loads)
    print(f"peak RSS {peak:.0f} MB (after importing torch+transformers: {rss_import:.0f} MB)")
    print(f"load average (1, 5, 15 min): {' -> '.join(loads)}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
