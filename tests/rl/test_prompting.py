"""Agent prompts (bounded history) and SFT targets."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from grounding import get_format
from guiagent.policy import check_chat
from guiagent.types import Click, Observation, ParseError, Step, TaskSpec, Trajectory, Type
from rl.prompting import PromptConfig, build_chat, sft_example, sft_target, summarize_step


def shot(i: int, w: int = 112, h: int = 112) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (i * 20 % 256, 100, 200)).save(buf, format="PNG")
    return buf.getvalue()


def obs(i: int, **kw) -> Observation:
    return Observation(screenshot=shot(i), width=112, height=112, **kw)


def history(n: int) -> list[Step]:
    steps = []
    for i in range(n):
        if i % 3 == 1:
            steps.append(Step(index=i, observation=obs(i), action=None, response="cl1ck here",
                              parse_error=ParseError("no_action", "no action found", "cl1ck here")))
        else:
            steps.append(Step(index=i, observation=obs(i), action=Click(0.25, 0.5), thought=f"thought {i}",
                              action_error="element is disabled" if i == 2 else None))
    return steps


def images(chat) -> list[bytes]:
    return [p["image"] for m in chat if not isinstance(m["content"], str)
            for p in m["content"] if p["type"] == "image"]


def user_text(chat) -> str:
    return "\n".join(p["text"] for p in chat[1]["content"] if p["type"] == "text")


@pytest.mark.parametrize("name", ["json", "uitars", "qwen_mobile"])
def test_chat_has_system_prompt_goal_and_current_screenshot(name):
    fmt = get_format(name)
    o = obs(9, last_action_error="tap missed")
    chat = build_chat("Open the clock", [], o, fmt)
    check_chat(chat)
    # the prompt is the format's for this screen (Qwen's states the resolution in its frame)
    assert chat[0] == {"role": "system", "content": fmt.system_prompt(o.size)}
    assert images(chat) == [shot(9)]
    text = user_text(chat)
    assert "Goal: Open the clock" in text and "The last action failed: tap missed" in text
    assert "Previous steps" not in text


def test_history_is_truncated_to_k_images_and_max_history_summaries():
    fmt = get_format("json")
    steps = history(20)
    cfg = PromptConfig(history_images=3, max_history=5)
    chat = build_chat("g", steps, obs(20), fmt, cfg)
    # the last two past screenshots and the current one
    assert images(chat) == [shot(18), shot(19), shot(20)]
    text = user_text(chat)
    # 18 steps are text-only: 5 kept, 13 omitted
    assert "(13 earlier steps omitted)" in text
    assert "Step 13:" not in text and all(f"Step {i}:" in text for i in range(14, 21))
    # summaries print the action as the format does, and errors
    assert fmt.format(Click(0.25, 0.5), (112, 112)) in text
    assert "invalid output (no_action" in text
    # prompt size does not grow with the episode
    long = build_chat("g", history(200), obs(200), fmt, cfg)
    assert len(images(long)) == 3 and abs(len(user_text(long)) - len(text)) < 40


def test_errors_and_thoughts_in_summaries():
    fmt = get_format("uitars")
    steps = history(4)
    line = summarize_step(steps[2], fmt, PromptConfig(include_thoughts=True))
    assert line.startswith("Step 3: ") and "error: element is disabled" in line and "thought 2" in line
    assert "thought" not in summarize_step(steps[2], fmt)
    assert "Step 2: invalid output" in summarize_step(steps[1], fmt)


def test_tree_is_optional_and_cut():
    fmt = get_format("json")
    o = obs(1, tree="button 'OK'\n" * 1000)
    assert "UI tree" not in user_text(build_chat("g", [], o, fmt))
    text = user_text(build_chat("g", [], o, fmt, PromptConfig(include_tree=True, max_tree_chars=100)))
    assert "UI tree:" in text and len(text) < 300


def test_prompt_config_checks():
    with pytest.raises(ValueError, match="history_images"):
        PromptConfig(history_images=0)
    with pytest.raises(ValueError, match="max_history"):
        PromptConfig(max_history=-1)


def test_sft_target_round_trips_through_the_format():
    traj = Trajectory(episode_id="e", task=TaskSpec("webapps", "t", 0, "Type hello"), steps=(
        Step(0, obs(0), Click(0.5, 0.5), thought="tap the field"),
        Step(1, obs(1), Type("hello", submit=True), thought="type it"),
    ))
    for name in ("json", "uitars", "qwen_mobile"):
        fmt = get_format(name)
        chat, target = sft_example(traj, 1, fmt, PromptConfig(history_images=2))
        assert target == sft_target(traj.steps[1], fmt)
        assert fmt.parse(target, (112, 112)) == Type("hello", submit=True)
        assert images(chat) == [shot(0), shot(1)]
    with pytest.raises(ValueError):
        sft_target(Step(0, obs(0), None), get_format("json"))


def test_repeat_goal_states_the_goal_again_after_the_screens_elements():
    from guiagent.types import Mark

    fmt = get_format("marks", names="plain", refer="name")
    o = obs(1, marks=(Mark(0, "link", "Clock", (0.1, 0.1, 0.2, 0.2)), Mark(1, "link", "Notes", (0.3, 0.1, 0.4, 0.2))))
    once = build_chat("Open the Clock app.", history(2), o, fmt)
    twice = build_chat("Open the Clock app.", history(2), o, fmt, PromptConfig(repeat_goal=True))
    check_chat(twice)
    assert images(twice) == images(once)
    last = twice[1]["content"][-1]
    assert last["type"] == "text" and last["text"].endswith("[1] link: Notes\nGoal: Open the Clock app.")
    assert user_text(twice).count("Goal: Open the Clock app.") == 2
    assert user_text(once).count("Goal: Open the Clock app.") == 1


def test_agent_settings_keep_repeat_goal_and_read_older_files_without_it(tmp_path):
    import json

    from rl.agents import AGENT_SETTINGS_FILE, AgentSettings

    s = AgentSettings(action_format="marks", mark_refer="name", repeat_goal=True)
    s.save(str(tmp_path))
    assert AgentSettings.load(str(tmp_path)) == s and s.prompt_config().repeat_goal
    assert s.in_format("json").repeat_goal  # another format keeps how the prompt is laid out
    old = {k: v for k, v in json.loads((tmp_path / AGENT_SETTINGS_FILE).read_text()).items() if k != "repeat_goal"}
    (tmp_path / AGENT_SETTINGS_FILE).write_text(json.dumps(old))
    assert AgentSettings.load(str(tmp_path)).repeat_goal is False
