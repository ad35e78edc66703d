"""bench/fault_soak.py, shortened: a training run under browser kills, trainer SIGKILLs and a full disk ends with
a whole store, no episode scored from a fault and no checkpointed iteration missing (the full 30 minutes:
docs/results.md, "Fault-injection soak")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~4-5 min: a real trainer, Chromium and a tmpfs under faults for three minutes
@pytest.mark.browser
@pytest.mark.timeout(1200)
def test_a_short_fault_soak_keeps_the_run_whole(tiny_model_dir):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "fault_soak.py"), "--minutes", "3", "--fault-every",
                        "20", "--seed", "1", "--model", tiny_model_dir], capture_output=True, text=True, timeout=1100)
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode == 0 and result["ok"], r.stdout[-3000:] + r.stderr[-2000:]
    assert all(result["checks"].values()) and result["failures"] == []
    kinds = result["kinds"]
    assert all(result["faults_injected"][k] >= 1 for k in kinds if k != "browser"), result
    assert result["faults_survived"] == result["faults_injected"]
    assert result["iterations"] >= 3 and result["episodes_aborted"] >= 1
    assert result["orphans_ended_within_s_max"] < 10
