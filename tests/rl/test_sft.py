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


def _marks_chat(repeat_goal: bool):
    from guiagent.types import Mark, Observation
    from rl.agents import tiny_model_settings
    from rl.prompting import PromptConfig, build_chat

    st = tiny_model_settings("marks")
    cfg = PromptConfig(**{**vars(st.prompt_config()), "repeat_goal": repeat_goal})
    obs = Observation(screenshot=b"\x89PNG fake", width=360, height=640,
                      marks=(Mark(0, "link", "Clock", (0.1, 0.1, 0.2, 0.2)),
                             Mark(1, "link", "Notes", (0.3, 0.1, 0.4, 0.2))))
    return build_chat("Open the Clock app.", [], obs, st.format(), cfg)


def _texts(chat):
    out = []
    for m in chat:
        c = m["content"]
        out += [c] if isinstance(c, str) else [p["text"] for p in c if p.get("type") == "text"]
    return " | ".join(out)


@pytest.mark.parametrize("repeat_goal", [False, True])
def test_goal_frames_change_the_goals_length_not_what_it_asks(repeat_goal):
    import copy
    import random
    import re

    from rl.sft import GOAL_FRAMES, frame_goal

    chat = _marks_chat(repeat_goal)
    before = copy.deepcopy(chat)
    rng = random.Random(0)
    framed = [frame_goal(chat, "Open the Clock app.", rng) for _ in range(200)]
    assert chat == before  # the example's own chat is left as it was
    lengths = set()
    for f in framed:
        text = _texts(f)
        goals = re.findall(r"Goal: ([^\n|]*)", text)
        assert len(goals) == (2 if repeat_goal else 1) and len(set(goals)) == 1  # one frame, everywhere
        goal = goals[0]
        assert "Open the Clock app." in goal
        pre, _, post = goal.partition("Open the Clock app.")
        assert pre in GOAL_FRAMES[0] and post in GOAL_FRAMES[1]
        lengths.add(len(goal.split()))
        # the rest of the chat is untouched: the elements, the system prompt, the image part
        assert text.replace(goal, "Open the Clock app.") == _texts(chat)
        assert [p.get("type") for m in f if isinstance(m["content"], list) for p in m["content"]] == \
            [p.get("type") for m in chat if isinstance(m["content"], list) for p in m["content"]]
    assert len(lengths) >= 5  # 4 to 10 words: the length no longer names the target
    assert frame_goal(chat, "", rng) is chat  # no goal recorded: nothing to frame


def test_train_sft_frames_the_share_of_goals_asked_for(monkeypatch):
    import rl.sft as sft

    chat = _marks_chat(False)
    ex = [SFTExample(chat, "x", (1, 2), (1.0, 1.0), f"e{i}", 0, goal="Open the Clock app.") for i in range(4)]
    seen: list[str] = []

    class _Pol:
        w = torch.nn.Parameter(torch.zeros(1))

        def parameters(self):
            return [self.w]

        def mark_updated(self):
            pass

    def fake_nll(policy, batch):
        seen.extend(_texts(e.chat) for e in batch)
        return (policy.w * 0).sum() + policy.w.sum(), 0.0

    monkeypatch.setattr(sft, "weighted_nll", fake_nll)
    for share, lo, hi in ((0.0, 0, 0), (1.0, 0.75, 1.0)):
        seen.clear()
        sft.train_sft(_Pol(), ex, sft.SFTConfig(steps=50, batch_size=4, micro_batch_size=4, warmup_steps=1,
                                                goal_frames=share), progress=False)
        framed = sum("Goal: Open the Clock app. |" not in t and "Goal: Open the Clock app.\n" not in t for t in seen)
        # a frame pair may be the empty pair (1 in 36), so a share of 1 frames ~97% of the goals
        assert lo <= framed / len(seen) <= hi, (share, framed, len(seen))


def test_bad_goal_frames_are_one_clear_error():
    from rl.settings import WarmStartSettings
    from rl.sft import SFTConfig

    with pytest.raises(ValueError, match=r"goal_frames must be in \[0, 1\]"):
        SFTConfig(goal_frames=1.5)
    with pytest.raises(ValueError, match=r"--warm-start-goal-frames must be in \[0, 1\]"):
        WarmStartSettings(warm_start_goal_frames=-0.1)
