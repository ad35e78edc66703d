"""Moved to :mod:`guiagent.offline_metrics` (the web UI reads the metrics back and may not import rl);
this name stays importable."""

from guiagent.offline_metrics import (
    LEVELS, POINT_KINDS, KindMetrics, OfflineMetrics, StepOutcome, from_run_metrics, kind_row, offline_metrics,
    to_run_metrics,
)

__all__ = ["StepOutcome", "KindMetrics", "OfflineMetrics", "offline_metrics", "kind_row", "to_run_metrics",
           "from_run_metrics", "LEVELS", "POINT_KINDS"]
