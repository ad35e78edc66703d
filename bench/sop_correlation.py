"""How well semi-online evaluation (SOP) predicts online success: checkpoints of one SFT run.

    python bench/sop_correlation.py --out runs/sop-corr                 # ~20-30 min on 2 cores
    python bench/sop_correlation.py --out runs/sop-corr --steps 80 120 160 200 240 280 320 400

Pipeline (each step is a ``guiagent`` command, printed before it runs; finished steps are reused):

1. a tiny model (``model init --size tiny --max-pixels 100352``);
2. oracle demonstrations on training seeds (``--seed 0``) of the fixed-layout webapps tasks;
3. ``sft`` for the largest step in ``--steps``, a checkpoint every 40 steps;
4. held-out oracle demonstrations on other held-out instances than the online evaluation's
   (seeds from 2,000,000; the online evaluation uses seeds from 1,000,000) to replay semi-online;
5. for each checkpoint in ``--steps``: online held-out success (``eval --agent model``) and
   semi-online progress and success (``eval --mode semi-online`` on the held-out demonstrations).
   Each checkpoint's figures are kept in ``OUT/figures-<step>.json`` and reused.

Prints a table and Spearman's rank correlation of SOP progress / SOP success with online
success, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TASKS = ["open_app", "settings_turn_on", "settings_turn_off", "settings_open_section", "files_open_folder",
         "go_home"]


def sh(args: list[str]) -> dict:
    cmd = [sys.executable, "-m", "guiagent", *args, "--json"]
    print("$ guiagent " + " ".join(args), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(args)}\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def ranks(xs: list[float]) -> list[float]:
    """Ranks from 1, ties get the mean of their ranks."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/sop-corr")
    ap.add_argument("--steps", type=int, nargs="+", default=[80, 120, 160, 200, 240, 280, 320, 400])
    ap.add_argument("--demos", type=int, default=120)
    ap.add_argument("--eval-episodes", type=int, default=24)
    ap.add_argument("--sop-episodes", type=int, default=24)
    a = ap.parse_args()
    out = Path(a.out)
    tasks = ["--tasks", *TASKS]
    t0 = time.perf_counter()
    if not (out / "tiny" / "config.json").is_file():
        sh(["model", "init", "--size", "tiny", "--max-pixels", "100352", "--out", str(out / "tiny")])
    if not (out / "demos" / "store.sqlite").is_file():
        sh(["eval", "--env", "webapps", "--agent", "oracle", "--seed", "0", "--episodes", str(a.demos),
            "--out", str(out / "demos"), *tasks])
    sft = out / "sft"
    last = max(a.steps)
    if not (sft / "checkpoints" / f"step-{last}" / "config.json").is_file():
        sh(["sft", "--data", str(out / "demos"), "--model", str(out / "tiny"), "--compact-prompt", "--out", str(sft),
            "--train.steps", str(last), "--train.checkpoint-every", "40"])
    held = out / "heldout-demos-2m"
    if not (held / "store.sqlite").is_file():
        sh(["eval", "--env", "webapps", "--agent", "oracle", "--seed", "2000000", "--episodes", str(a.sop_episodes),
            "--out", str(held), *tasks])
    rows = []
    for step in a.steps:
        ck = sft / "checkpoints" / f"step-{step}"
        saved = out / f"figures-{step}.json"
        if saved.is_file():
            rows.append(json.loads(saved.read_text()))
            continue
        online = sh(["eval", "--env", "webapps", "--agent", "model", "--model", str(ck), "--episodes",
                     str(a.eval_episodes), "--slots", "4", "--out", str(out / f"eval-{step}"), *tasks])
        sop = sh(["eval", "--mode", "semi-online", "--data", str(held), "--agent", "model", "--model", str(ck),
                  "--episodes", str(a.sop_episodes), "--out", str(out / f"sop2m-{step}")])
        rows.append({"step": step, "online_success": online["success_rate"], "sop_progress": sop["progress"],
                     "sop_success": sop["success_rate"]})
        saved.write_text(json.dumps(rows[-1]))
        print(f"step {step:4d}: online {online['success_rate']:.3f}  SOP progress {sop['progress']:.3f}  "
              f"SOP success {sop['success_rate']:.3f}", flush=True)
    on = [r["online_success"] for r in rows]
    rho_p = spearman([r["sop_progress"] for r in rows], on)
    rho_s = spearman([r["sop_success"] for r in rows], on)
    print("\n| SFT step | online held-out success | SOP progress | SOP success |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['step']} | {r['online_success']:.1%} | {r['sop_progress']:.1%} | {r['sop_success']:.1%} |")
    print(f"\nSpearman rho (SOP progress vs online success): {rho_p:.3f}; (SOP success vs online): {rho_s:.3f}")
    print(f"load average {os.getloadavg()}, {time.perf_counter() - t0:.0f} s")
    print(json.dumps({"rows": rows, "spearman_progress": rho_p, "spearman_success": rho_s,
                      "eval_episodes": a.eval_episodes, "sop_episodes": a.sop_episodes,
                      "loadavg": os.getloadavg()}))


if __name__ == "__main__":
    main()
