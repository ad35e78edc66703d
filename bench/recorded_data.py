"""Import and matching speed on ~8k recorded steps (UI-S1's evaluation file has 8,444).

    python bench/recorded_data.py                                  # a synthetic file of the same shape
    python bench/recorded_data.py --file android_control_evaluation_std.jsonl   # UI-S1's own file

The synthetic file has UI-S1's evaluation layout (``action_content``, ``check_options`` with 0-3
candidate boxes, ``step_instruction``, ``episode_id``) and its mix of action kinds (60% taps, 14%
swipes, 7% typing, 7% app openings, 7% waits, 4% system buttons), screens of 1080x2400 and 1440x3120,
about 5.5 steps an episode; written by a seeded generator, no real data. Screenshots are placeholders
(``--placeholders auto``), as for UI-S1's published files.

Timed, ``--rounds`` times each (median and spread printed):

* **import**: ``import_dataset("uis1", ...)`` into a new store (parse, validate, targets, placeholder
  PNGs stored once per size, SQLite writes, the atomic rename);
* **load**: the episodes read back from the store with pixels (what semi-online and offline runs do);
* **targets**: :func:`rl.match.step_target` for every step;
* **match**: :func:`rl.match.match_action` for ten probe actions at every step (default rules);
* **offline oracle**: :func:`rl.offline_eval.run_offline_eval` with the recorded actions, both levels;
* **round trip**: export to Parquet and import back, every step compared.

The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guiagent.datasets import import_dataset  # noqa: E402
from guiagent.store import StoreReader  # noqa: E402
from guiagent.store.export import export_parquet  # noqa: E402
from rl.match import MatchConfig, match_action, step_target  # noqa: E402
from rl.match_parity import probes  # noqa: E402
from rl.offline_eval import RecordedPolicy, run_offline_eval  # noqa: E402
from rl.replay import load_recorded_episodes  # noqa: E402

KINDS = [("click", 0.60), ("swipe", 0.14), ("type", 0.075), ("open", 0.072), ("wait", 0.067),
         ("system_button", 0.041), ("long_press", 0.005)]


def synthetic_file(path: Path, steps: int, seed: int) -> int:
    """Write a UI-S1 evaluation-shaped JSONL of about ``steps`` steps; returns the steps written."""
    rng = random.Random(seed)
    names, weights = zip(*KINDS)
    n, ep = 0, 0
    with open(path, "w") as f:
        while n < steps:
            w, h = (1080, 2400) if rng.random() < 0.985 else (1440, 3120)
            k = max(1, min(steps - n, int(rng.expovariate(1 / 5.5)) + 1))
            out = []
            for i in range(k):
                kind = rng.choices(names, weights)[0]
                x, y = rng.randint(20, w - 20), rng.randint(60, h - 60)
                if kind in ("click", "long_press"):
                    boxes = [[max(0, x - rng.randint(20, 300)), max(0, y - rng.randint(20, 200)),
                              min(w, x + rng.randint(20, 300)), min(h, y + rng.randint(20, 200))]
                             for _ in range(rng.choice([0, 1, 1, 1, 2, 3]))]
                    ac = {"action": kind, "coordinate": [x, y]}
                    co = {"action": kind, "candidate_bbox": boxes, "coordinate": [x, y]}
                    instr = "click on the button"
                elif kind == "swipe":
                    d = rng.choice(["up", "down", "left", "right"])
                    fx = {"down": ((w / 2, h * 3 / 4), (w / 2, h / 4)), "up": ((w / 2, h / 4), (w / 2, h * 3 / 4)),
                          "right": ((w * 3 / 4, h / 2), (w / 4, h / 2)), "left": ((w / 4, h / 2), (w * 3 / 4, h / 2))}[d]
                    ac = {"action": "swipe", "coordinate": list(fx[0]), "coordinate2": list(fx[1])}
                    co = {"action": "swipe", "direction": d}
                    instr = f"swipe {'up' if d == 'down' else 'down' if d == 'up' else 'left' if d == 'right' else 'right'}"
                elif kind in ("type", "open"):
                    text = rng.choice(["Welsh cakes", "Zoho Meeting", "weather in Paris", "Gmail", "sofa"])
                    ac = co = {"action": kind, "text": text}
                    instr = f"{kind} {text}"
                elif kind == "wait":
                    ac = co = {"action": "wait", "time": 2}
                    instr = "wait"
                else:
                    ac = co = {"action": "system_button", "button": rng.choice(["Back", "Home"])}
                    instr = "go back"
                out.append({"action_content": ac, "screenshot": f"/datasets/AndroidControl/images/{ep}_{i}.png",
                            "step_instruction": instr, "check_options": co})
            f.write(json.dumps({"goal": f"goal {ep}", "is_successful": True, "episode_id": ep, "steps": out}) + "\n")
            n += k
            ep += 1
    return n


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def one_round(src: Path, tmp: Path, r: int) -> dict:
    out_dir = tmp / f"run{r}"
    t_import, res = _timed(lambda: import_dataset("uis1", src, out_dir, placeholders="auto"))
    t_load, eps = _timed(lambda: load_recorded_episodes(out_dir))
    steps = [s for t in eps for s in t.steps]
    t_targets, targets = _timed(lambda: [step_target(s) for s in steps])
    rng = random.Random(r)
    work = [(p, t, s.observation.size) for s, t in zip(steps, targets) for p in probes(t, rng)[:10]]
    cfg = MatchConfig()
    t_match, _ = _timed(lambda: [match_action(p, t, size=size, config=cfg) for p, t, size in work])
    t_offline, off = _timed(lambda: run_offline_eval(RecordedPolicy(eps), eps, batch_size=512))
    exp = tmp / f"x{r}.parquet"
    t_export, _ = _timed(lambda: export_parquet(out_dir, exp))
    t_back, _ = _timed(lambda: import_dataset("parquet", exp, tmp / f"back{r}"))
    a, b = StoreReader(out_dir), StoreReader(tmp / f"back{r}")
    same = all(a.load_trajectory(t.episode_id).steps == b.load_trajectory(t.episode_id).steps for t in eps)
    a.close()
    b.close()
    return {"steps": res.steps, "episodes": res.episodes, "import_s": t_import, "load_s": t_load,
            "targets_s": t_targets, "match_s": t_match, "match_calls": len(work), "offline_oracle_s": t_offline,
            "offline_step_sr_high": off["high"].step_sr, "export_s": t_export, "reimport_s": t_back,
            "round_trip_equal": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", type=Path, help="a UI-S1 JSONL file (default: a synthetic one of --steps steps)")
    ap.add_argument("--steps", type=int, default=8444)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        src = args.file
        if src is None:
            src = tmp / "synthetic.jsonl"
            synthetic_file(src, args.steps, args.seed)
        rounds = [one_round(src, tmp, r) for r in range(args.rounds)]
    n = rounds[0]["steps"]
    print(f"{src.name}: {rounds[0]['episodes']} episodes, {n} steps; {args.rounds} rounds "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    summary = {"bench": "recorded_data", "file": src.name, "steps": n, "episodes": rounds[0]["episodes"],
               "rounds": args.rounds}
    for key, label, per in (("import_s", "import", n), ("load_s", "load with pixels", n),
                            ("targets_s", "step targets", n), ("match_s", "match (10 probes a step)", None),
                            ("offline_oracle_s", "offline oracle, 2 levels", 2 * n),
                            ("export_s", "export Parquet", n), ("reimport_s", "import Parquet back", n)):
        xs = [r[key] for r in rounds]
        med = statistics.median(xs)
        units = per if per is not None else rounds[0]["match_calls"]
        what = "steps" if per is not None else "calls"
        print(f"  {label:28s} {med:7.2f} s (min {min(xs):.2f}, max {max(xs):.2f})  {units / med:10,.0f} {what}/s")
        summary[key] = round(med, 3)
        summary[key.replace("_s", "_per_s")] = round(units / med, 1)
    summary["match_calls"] = rounds[0]["match_calls"]
    summary["round_trip_equal"] = all(r["round_trip_equal"] for r in rounds)
    summary["offline_oracle_step_sr_high"] = rounds[0]["offline_step_sr_high"]
    print(f"  round trip (Parquet export, import back, every step equal): {summary['round_trip_equal']}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
