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


class _Tok:
    """A policy stand-in carrying only the tiny model's tokenizer (token_weights reads nothing else)."""

    made: dict = {}

    def __init__(self, words: str):
        from guiagent.policy.tiny import train_tokenizer

        if words not in self.made:
            self.made[words] = train_tokenizer(words=words)
        self.tokenizer = self.made[words]


@pytest.mark.parametrize("words", ["prefixed", "bare"])
@pytest.mark.parametrize("name", ["Expenses", "Wi-Fi", "Tab #2", 'say "hi"', "About phone"])
def test_name_weight_lands_on_the_element_name_and_nowhere_else(words, name):
    from grounding.marks import MarksFormat
    from guiagent.types import ClickElement
    from rl.sft import token_weights

    policy = _Tok(words)
    target = MarksFormat(refer="name").format(ClickElement(3), (360, 640)).replace('"element": 3', '"name": '
                                                                                   + json.dumps(name))
    ids = policy.tokenizer(target + "<|im_end|>", add_special_tokens=False)["input_ids"]
    w = token_weights(policy, ids, target + "<|im_end|>", "click", action_weight=1.0, coord_weight=1.0,
                      name_weight=5.0)
    heavy = "".join(policy.tokenizer.decode([i]) for i, x in zip(ids, w) if x == 5.0)
    assert heavy.strip() == json.dumps(name)[1:-1], (heavy, target)
    assert all(x in (1.0, 5.0) for x in w)
    # a reply that names no element (a tap by number, a finish) keeps plain weights
    for plain in ('{"action": {"kind": "click_element", "element": 3}}', '{"action": {"kind": "finish"}}'):
        pids = policy.tokenizer(plain, add_special_tokens=False)["input_ids"]
        assert set(token_weights(policy, pids, plain, "click", action_weight=1.0, coord_weight=1.0,
                                 name_weight=5.0)) == {1.0}


def test_bad_loss_weights_are_one_clear_error():
    from rl.settings import WarmStartSettings
    from rl.sft import SFTConfig

    with pytest.raises(ValueError, match="name_weight must be positive"):
        SFTConfig(name_weight=0.0)
    with pytest.raises(ValueError, match="--warm-start-name-weight must be positive"):
        WarmStartSettings(warm_start_name_weight=-1.0)
