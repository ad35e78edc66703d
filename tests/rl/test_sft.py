"""SFT: the weighted loss, and `guiagent sft` end to end on stored oracle demonstrations."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rl.evaluate import EvalConfig, run_eval
from rl.sft import SFTExample, _place

pytestmark = pytest.mark.browser


def test_weights_land_on_the_completion_tokens():
    mask = torch.tensor([[False, True, True], [True, True, True]])
    batch = [SFTExample([], "", (1, 2), (1.0, 3.0), "a", 0), SFTExample([], "", (1, 2, 3), (1.0, 1.0, 2.0), "b", 0)]
    w = _place(mask, batch, torch.float32)
    assert w.tolist() == [[0.0, 1.0, 3.0], [1.0, 1.0, 2.0]]
    with pytest.raises(RuntimeError, match="completion of 2 tokens"):
        _place(torch.ones(1, 3, dtype=torch.bool), batch[:1], torch.float32)


def test_sft_cli_trains_and_saves_a_loadable_model(tmp_path, tiny_model_dir):
    demos = tmp_path / "demos"
    run_eval(EvalConfig(env="webapps", agent="oracle", episodes=2, tasks=("open_app",), seed=0, out=str(demos)))
    out = tmp_path / "sft"
    r = subprocess.run([sys.executable, "-m", "guiagent", "sft", "--data", str(demos), "--model", tiny_model_dir,
                        "--out", str(out), "--compact-prompt", "--train.steps", "3", "--train.batch-size", "2",
                        "--train.micro-batch-size", "1", "--train.warmup-steps", "1", "--train.coord-weight", "2",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    figs = json.loads(r.stdout.strip().splitlines()[-1])
    assert figs["examples"] == 4 and figs["steps"] == 3  # 2 episodes x (tap + finish)
    assert figs["loss_last"] < figs["loss_first"]
    settings = json.loads((Path(out) / "guiagent_agent.json").read_text())
    assert settings["action_format"] == "json" and settings["system_prompt"]
    from guiagent.policy.hf import load_transformers

    assert load_transformers(str(out)).version == 0
