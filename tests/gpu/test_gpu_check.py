"""scripts/gpu_check.sh on a CUDA GPU: semi-online RL on a random Qwen2.5-VL-3B, full and LoRA.

``pytest -m gpu tests/gpu/test_gpu_check.py -s`` (needs demonstrations: the prepared
``.gpu_check/demos``, or Chromium to record two). On a bare GPU machine run the script itself
(``bash scripts/gpu_check.sh``, docs/training.md "A real checkpoint on a GPU").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_measures_both_variants(tmp_path):
    demos = ROOT / ".gpu_check" / "demos"
    if not (demos / "store.sqlite").is_file():
        demos = tmp_path / "demos"
        subprocess.run([sys.executable, "-m", "guiagent", "eval", "--env", "webapps", "--agent", "oracle",
                        "--episodes", "4", "--seed", "0", "--out", str(demos)], check=True, timeout=300)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "run", "--device", "cuda",
                           "--demos", str(demos), "--budget-s", "400"], capture_output=True, text=True, timeout=560)
    print(proc.stdout[-4000:])
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["check"] == "gpu" and report["params"] > 3e9
    for name in ("full", "lora"):
        v = report["variants"][name]
        assert "error" not in v, v
        assert v["peak_gpu_gib"] > 0 and v["gen_tokens_per_s"] > 0 and v["update_samples_per_s"] > 0
        assert v["sft_loss_fell"], v["sft_losses"]
        if report["peak_bf16_tflops"]:
            assert 0 < v["update_mfu"] < 1 and 0 < v["gen_mfu"] < 1
