"""The MiniWoB++ benchmark table: a run's held-out success per task beside the published figures.

    python bench/miniwob_table.py runs/miniwob-bench [--agents human cc_net synapse rci prior_best]
    python bench/miniwob_table.py runs/miniwob-bench-s0 runs/miniwob-bench-s1 ...   # several seeds

Reads the run's held-out evaluations (``eval-before``: the warm start, ``eval-after``: after RL; the benchmark's
own success, raw reward > 0, as the suite scores it) and ``docs/miniwob_published.csv`` (task, agent, success,
where the figure comes from, the table it was read from), and prints a Markdown table, one row a task of the
run plus the mean over the set, each agent's mean over the tasks it reports. Episodes are counted from the
stores, so a row says how many episodes its figure rests on.

Given several runs (one a seed of the same recipe), a cell is the mean over the runs with each run's figure
after it in the order given (``55% (48/62)``), and the last row gives each run's mean over the set and the
worst of them beside the mean.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the published agents shown by default, in this order, with their column heads
AGENTS = {"human": "human", "cc_net": "CC-Net (BC+RL)", "synapse": "Synapse", "rci": "RCI",
          "prior_best": "best before CC-Net (WGE, DOM-Q-Net, ...)"}
#: the column heads of the other agents docs/miniwob_published.csv holds
OTHER_AGENTS = {"cc_net_bc": "CC-Net (BC only)", "webn_t5": "WebN-T5", "webgum": "WebGUM", "adaplanner": "AdaPlanner",
                "pix2act": "Pix2Act (BC+RL)", "pix2act_bc": "Pix2Act (BC only)"}


def per_task(store_dir: Path) -> dict[str, tuple[int, int]]:
    """``{task: (successes, episodes)}`` over the completed and aborted episodes of a held-out evaluation."""
    from guiagent.store import EpisodeFilter, StoreReader

    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    reader = StoreReader(store_dir)
    for status in ("completed", "aborted"):
        for e in reader.list_episodes(EpisodeFilter(status=status), limit=10_000).items:
            counts[e.task_id][0] += int(bool(e.success and e.success > 0))
            counts[e.task_id][1] += 1
    return {t: (s, n) for t, (s, n) in counts.items()}


def published(path: Path) -> dict[tuple[str, str], float]:
    with open(path, newline="", encoding="utf-8") as f:
        return {(row["task"], row["agent"]): float(row["success"]) for row in csv.DictReader(f)}


Counts = dict[str, tuple[int, int]]


def evaluation(run: Path, part: str) -> Path | None:
    """The folder of ``run``'s held-out evaluation ``part`` (``eval-before`` or ``eval-after``); a run in which no
    iteration ran (``summary.json``'s ``iterations`` 0) evaluated once, so its ``eval-before`` stands for both."""
    if (run / part / "store.sqlite").is_file():
        return run / part
    if part == "eval-after" and (run / "eval-before" / "store.sqlite").is_file():
        try:
            summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if isinstance(summary, dict) and summary.get("iterations") == 0:
            return run / "eval-before"
    return None


def table(runs: list[Path], agents: list[str], csv_path: Path) -> str:
    """The Markdown table of ``runs`` (one, or several of one recipe, one a seed) beside ``agents``.
    One run: a cell is its share and counts (``50% (1/2)``), the last row its mean over the set. Several:
    a cell is the mean of the runs' shares with each run's after it (``55% (48/62)``), the last row each
    run's mean over the set, the mean of those and the worst (a run with no episode of the set shows "–"
    and counts in neither)."""
    stages = [[per_task(evaluation(run, part) or run / part) for run in runs] for part in ("eval-before", "eval-after")]
    pub = published(csv_path)
    tasks = sorted({t for stage in stages for counts in stage for t in counts})
    n = len(runs)
    seeds = f" ({n} seeds)" if n > 1 else ""
    head = ["task", f"ours: warm start{seeds}", f"ours: after RL{seeds}",
            *({**AGENTS, **OTHER_AGENTS}.get(a, a) for a in agents)]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(stage: list[Counts], t: str) -> str:
        if n == 1:
            if t not in stage[0]:
                return "–"
            s, k = stage[0][t]
            return f"{100 * s / k:.0f}% ({s}/{k})"
        shares = [100 * c[t][0] / c[t][1] if t in c and c[t][1] else None for c in stage]
        got = [x for x in shares if x is not None]
        if not got:
            return "–"
        return f"{sum(got) / len(got):.0f}% (" + "/".join("–" if x is None else f"{x:.0f}" for x in shares) + ")"

    def mean(stage: list[Counts]) -> str:
        per_run = []
        for c in stage:
            shares = [s / k for t, (s, k) in c.items() if t in tasks and k]
            per_run.append(100 * sum(shares) / len(shares) if shares else None)
        if n == 1:
            return "–" if per_run[0] is None else f"**{per_run[0]:.1f}%**"
        got = [x for x in per_run if x is not None]
        if not got:
            return "–"
        each = " / ".join("–" if x is None else f"{x:.1f}" for x in per_run)
        return f"**{sum(got) / len(got):.1f}%** ({each}; worst {min(got):.1f})"

    for t in tasks:
        cells = [f"`{t}`", cell(stages[0], t), cell(stages[1], t)]
        cells += [f"{100 * pub[(t, a)]:.0f}%" if (t, a) in pub else "–" for a in agents]
        rows.append("| " + " | ".join(cells) + " |")
    last = ["mean over the set", mean(stages[0]), mean(stages[1])]
    for a in agents:
        got = [pub[(t, a)] for t in tasks if (t, a) in pub]
        last.append(f"{100 * sum(got) / len(got):.1f}% ({len(got)} tasks)" if got else "–")
    rows.append("| " + " | ".join(last) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, nargs="+", metavar="run",
                   help="a training run's folder (holding eval-before/ and eval-after/, or eval-before/ alone after "
                        "--iterations 0); several: one a seed")
    p.add_argument("--agents", nargs="*", default=list(AGENTS), help="published agents to show (the CSV's names)")
    p.add_argument("--published", type=Path, default=ROOT / "docs" / "miniwob_published.csv")
    a = p.parse_args(argv)
    for run in a.runs:
        for part in ("eval-before", "eval-after"):
            if evaluation(run, part) is None:
                print(f"miniwob_table: {run / part} holds no held-out evaluation", file=sys.stderr)
                return 2
    print(table(a.runs, a.agents, a.published))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
