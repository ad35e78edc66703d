"""``guiagent eval``: run episodes with an agent on a suite and store every trajectory.

Examples::

    guiagent eval --env webapps --agent oracle --episodes 20 --out runs/oracle
    guiagent eval --env miniwob --agent random --episodes 50 --out runs/random --json
    guiagent eval --env webapps --agent model --model runs/sft/model --episodes 40 --out runs/eval-sft
    guiagent eval --mode semi-online --data runs/demos --agent model --model runs/sft/model --out runs/sop

Episode ``i`` runs task ``tasks[i % len(tasks)]`` with seed ``seed + i // len(tasks)``.
Evaluation seeds start at 1,000,000 by default, a range training never samples
(training seeds lie below it), so results are on held-out task instances.
"""

from __future__ import annotations

import sys

from guiagent.cli._common import emit_json
from guiagent.config import parse_config
from guiagent.logs import show_progress
from rl.evaluate import EvalConfig, run_eval

__all__ = ["EvalConfig", "main"]


def main(argv: list[str]) -> int:
    cfg = parse_config(EvalConfig, argv, prog="guiagent eval")
    show_progress()
    try:
        r = run_eval(cfg)
    except (KeyError, ImportError) as e:
        print(f"guiagent eval: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1
    if r.mode == "semi-online":
        print(f"semi-online on {r.episodes} recorded episodes: progress {r.progress:.1%}, success "
              f"{r.success_rate:.1%} ({r.mean_steps:.1f} steps each, {r.steps_per_s:.1f} steps/s) -> {r.run_dir}")
    else:
        print(f"{r.agent} on {r.env}: success {r.success_rate:.1%} over {r.episodes} episodes ({r.aborted} aborted, "
              f"{r.mean_steps:.1f} steps each, {r.steps_per_s:.1f} steps/s) -> {r.run_dir}")
    if cfg.json:
        emit_json(r.to_dict())
    return 0
