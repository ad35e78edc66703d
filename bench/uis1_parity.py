"""Our matcher against UI-S1's, on UI-S1's own AndroidControl files (which this repository does not ship).

    git clone https://github.com/X-PLUG/MobileAgent      # UI-S1/datasets/*.jsonl
    python bench/uis1_parity.py --eval MobileAgent/UI-S1/datasets/android_control_evaluation_std.jsonl \\
        --train MobileAgent/UI-S1/datasets/android_control_train_example.jsonl

Each file is imported the way a user would (``guiagent data import --format uis1 --placeholders
auto``: the files carry screenshot paths, not screenshots; blank placeholders of each episode's
screen size stand in), read back from the store, and every step is probed (:func:`rl.match_parity.probes`:
taps around the point and in, beside and outside each candidate box, the four swipe directions,
every system button, texts, a wait and a finish). Each probe is scored by UI-S1's matcher semantics
with its box bug fixed (:func:`rl.match_parity.uis1_reference`) and by ours: the ``default`` rules,
the ``uis1`` preset, and ``point only`` (our default rules on the recorded point alone: what the import
gave before it kept the candidate boxes). A probe agrees when both give the same (type match, match)
pair. Printed: agreement per action kind, each disagreement's reason, how many probes UI-S1's box bug
itself changes, the import's round trip, and one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guiagent.datasets import import_dataset  # noqa: E402
from guiagent.datasets._common import iter_lines, json_record  # noqa: E402
from guiagent.datasets.uis1 import read_uis1  # noqa: E402
from guiagent.store import StoreReader  # noqa: E402
from rl.match import MatchConfig  # noqa: E402
from rl.match_parity import compare, pair_records, probes  # noqa: E402


def _lines(path: Path) -> dict[int, dict]:
    return {n: json_record(raw, f"{path}: line {n}") for n, raw in iter_lines(path) if raw.strip()}


def run(path: Path, seed: int) -> dict:
    out: dict = {"file": path.name}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = import_dataset("uis1", path, Path(tmp) / "run", placeholders="auto")
        out["import_seconds"] = round(time.perf_counter() - t0, 2)
        out.update(episodes=res.episodes, steps=res.steps, warnings=res.notes.warnings,
                   swipe_check=res.notes.swipes.to_dict())
        reader = StoreReader(Path(tmp) / "run")
        stored = {t.task.seed: t for t in reader.iter_trajectories(pixels=False)}
        reader.close()
    direct = {t.task.seed: t for t in read_uis1(path, placeholders="auto")}
    out["round_trip_equal"] = all(
        stored[n].steps == tuple(s for s in direct[n].steps) or
        [(s.action, dict(s.metadata), s.observation.size) for s in stored[n].steps]
        == [(s.action, dict(s.metadata), s.observation.size) for s in direct[n].steps]
        for n in direct)
    lines = _lines(path)
    order = sorted(lines)
    records = pair_records([stored[n] for n in order], [lines[n] for n in order])
    configs = {"default": MatchConfig(), "uis1": MatchConfig.preset("uis1")}
    t0 = time.perf_counter()
    reports = compare(records, configs, seed=seed, point_only=True)
    out["compare_seconds"] = round(time.perf_counter() - t0, 2)
    out["probes"] = sum(reports["default"].probes.values())
    out["agreement"] = {name: r.to_dict() for name, r in reports.items()}
    out["examples"] = {name: {k: v[:1] for k, v in r.examples.items()} for name, r in reports.items()}
    # what UI-S1's box bug changes on its own: the reference with and without the fix, same probes
    import random

    from rl.match import step_target
    from rl.match_parity import to_uis1, uis1_reference

    rng, changed, crashed, n = random.Random(seed), 0, 0, 0
    for st, truth in records:
        if truth.get("action") not in ("click", "long_press", "open"):
            continue
        w, h = st.observation.size
        for p in probes(step_target(st), rng):
            try:
                pred = to_uis1(p, w, h)
            except ValueError:
                continue
            n += 1
            try:
                changed += uis1_reference(pred, truth, w, h, fix_boxes=False) != uis1_reference(pred, truth, w, h)
            except TypeError:
                crashed += 1
    out["box_bug"] = {"tap_and_open_probes": n, "verdicts_changed": changed, "crashes": crashed}
    return out


def _print(r: dict) -> None:
    print(f"\n{r['file']}: {r['episodes']} episodes, {r['steps']} steps, imported in {r['import_seconds']} s "
          f"(placeholders), round trip equal: {r['round_trip_equal']}; {r['probes']} probes in "
          f"{r['compare_seconds']} s")
    for w in r["warnings"]:
        print(f"  import warning: {w}")
    kinds = sorted(r["agreement"]["default"]["per_kind"])
    names = list(r["agreement"])
    print(f"  {'kind':20s} {'probes':>7s} " + " ".join(f"{n:>11s}" for n in names))
    for k in kinds:
        row = [r["agreement"][n]["per_kind"][k]["agree"] for n in names]
        print(f"  {k:20s} {r['agreement']['default']['per_kind'][k]['probes']:7d} "
              + " ".join(f"{100 * v:10.2f}%" for v in row))
    print(f"  {'overall':20s} {r['probes']:7d} " + " ".join(f"{100 * r['agreement'][n]['overall']:10.2f}%"
                                                         for n in names))
    for n in names:
        for k, reasons in r["agreement"][n]["reasons"].items():
            for why, c in reasons.items():
                print(f"  [{n}] {k}: {c} probes differ: {why}")
    b = r["box_bug"]
    print(f"  UI-S1's box bug alone changes {b['verdicts_changed']} of {b['tap_and_open_probes']} tap/open "
          f"verdicts and crashes on {b['crashes']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eval", type=Path, help="UI-S1's android_control_evaluation_std.jsonl")
    ap.add_argument("--train", type=Path, help="UI-S1's android_control_train_example.jsonl")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random tap probes")
    args = ap.parse_args()
    files = [p for p in (args.eval, args.train) if p is not None]
    if not files:
        ap.error("give --eval and/or --train (UI-S1's JSONL files)")
    results = []
    for p in files:
        if not p.is_file():
            ap.error(f"{p}: no such file")
        r = run(p, args.seed)
        _print(r)
        results.append(r)
    summary = {"bench": "uis1_parity", "seed": args.seed, "files": [
        {k: v for k, v in r.items() if k != "examples"} for r in results]}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
