"""``guiagent train``: online RL (GRPO family) on a suite.

With no flags, the embedded default: a tiny model, warm-started by SFT on oracle
demonstrations, trained with GRPO on the fixed-layout webapps tasks on CPU, with
held-out success printed before and after::

    guiagent train
    guiagent train --env webapps --algo grpo --iterations 20 --out runs/grpo --json
    guiagent train --resume runs/grpo --iterations 30          # continue a killed run to 30 in total
"""

from __future__ import annotations

import sys

from guiagent.cli._common import emit_json
from guiagent.config import parse_config
from guiagent.logs import show_progress


def main(argv: list[str]) -> int:
    from rl.checkpoint import CheckpointError
    from rl.trainer import TrainConfig, train, write_summary

    cfg = parse_config(TrainConfig, argv, prog="guiagent train")
    show_progress()
    try:
        result = train(cfg)
    except (KeyError, CheckpointError) as e:
        print(f"guiagent train: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1
    write_summary(result)
    best = (f"; best {result.best_success:.1%} at iteration {result.best_iteration} -> {result.best_model}"
            if result.best_model else "")
    stopped = f"; stopped early: {result.stopped_by}" if result.stopped_by else ""
    print(f"trained {result.iterations} iterations -> {result.model}; held-out success "
          f"{result.success_before:.1%} before, {result.success_after:.1%} after{best}{stopped} ({result.run_dir})")
    if cfg.json:
        emit_json(result.to_dict())
    return 0
