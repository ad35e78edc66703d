"""The marks route for tiny models trained from scratch: how they are prompted (compact prompt, names
written plain and cut short), saved beside the model, and what the embedded default trains on."""

import json

import pytest

from grounding import get_format
from guiagent.types import ClickElement, Mark, Observation
from rl.agents import (
    COMPACT_JSON_PROMPT,
    COMPACT_MARKS_NAME_PROMPT,
    COMPACT_MARKS_PROMPT,
    TINY_MARK_NAME_CHARS,
    AgentSettings,
    compact_prompt,
    tiny_model_settings,
)


def _screen(*names):
    marks = tuple(Mark(i, "link", n, (0.0, 0.1 * i, 0.5, 0.1 * i + 0.1)) for i, n in enumerate(names))
    return Observation(screenshot=b"", width=360, height=640, marks=marks)


def test_compact_prompts_are_the_formats_own():
    assert COMPACT_MARKS_PROMPT == get_format("marks", compact=True).system_prompt()
    assert compact_prompt("marks") == COMPACT_MARKS_PROMPT
    assert compact_prompt("marks", "name") == COMPACT_MARKS_NAME_PROMPT == get_format(
        "marks", compact=True, refer="name").system_prompt()
    assert compact_prompt("json") == COMPACT_JSON_PROMPT
    assert compact_prompt("uitars15") == COMPACT_JSON_PROMPT  # as before formats had their own


def test_tiny_model_settings_write_names_plain_and_short():
    s = tiny_model_settings("marks")
    assert (s.action_format, s.mark_names, s.mark_name_chars, s.system_prompt, s.mark_refer) == (
        "marks", "plain", TINY_MARK_NAME_CHARS, COMPACT_MARKS_NAME_PROMPT, "name")
    fmt = s.format()
    long = "Kitchen scale Shopping · Sun, Jun 1 $126.47"
    text = fmt.observation_text(_screen("Files", long))
    assert "[0] link: Files" in text.splitlines()
    [row] = [line for line in text.splitlines() if line.startswith("[1]")]
    assert row == "[1] link: " + long[:TINY_MARK_NAME_CHARS - 1] + "…"
    assert fmt.parse('{"action": {"kind": "click_element", "element": 1}}', (360, 640)) == ClickElement(1)
    screen = _screen("Files", long)
    assert fmt.parse_on('{"action": {"kind": "click_element", "name": "Files"}}', screen) == ClickElement(0)
    cut = long[:TINY_MARK_NAME_CHARS - 1] + "…"  # a long name is read as the list writes it
    assert fmt.parse_on('{"action": {"kind": "click", "name": "%s"}}' % cut, screen) == ClickElement(1)
    # and answered by its first words where they find it again
    assert fmt.format_on(ClickElement(1), screen) == '{"action": {"kind": "click_element", "name": "Kitchen"}}'
    assert fmt.parse_on(fmt.format_on(ClickElement(1), screen), screen) == ClickElement(1)
    assert tiny_model_settings() == AgentSettings(system_prompt=COMPACT_JSON_PROMPT)  # json: as it always was


def test_mark_name_chars_is_saved_beside_the_model_and_checked(tmp_path):
    s = tiny_model_settings("marks")
    s.save(str(tmp_path))
    assert AgentSettings.load(str(tmp_path)) == s
    assert json.loads((tmp_path / "guiagent_agent.json").read_text())["mark_name_chars"] == TINY_MARK_NAME_CHARS
    (tmp_path / "guiagent_agent.json").write_text(json.dumps({"action_format": "marks"}))  # saved before the field
    assert AgentSettings.load(str(tmp_path)).mark_name_chars == 80
    for bad in (0, -3, 10_001):
        with pytest.raises(ValueError, match="--mark-name-chars must lie in 1..10000"):
            AgentSettings(action_format="marks", mark_name_chars=bad)


def test_the_marks_format_needs_the_devices_marks():
    from rl.config import TrainConfig

    with pytest.raises(ValueError, match="--device marks true"):
        TrainConfig.build(action_format="marks")
    assert TrainConfig.build(action_format="marks", device={"marks": "true"}).action_format == "marks"
    assert TrainConfig.build(action_format="marks", device={"with_marks": "true"}).action_format == "marks"
    with pytest.raises(ValueError, match="--device marks true"):  # named, but off
        TrainConfig.build(action_format="marks", device={"marks": "false"})


@pytest.mark.slow  # ~7 s; the embedded default's test below checks the same through the command
@pytest.mark.browser
def test_a_warm_start_in_the_marks_format_records_marks_and_saves_its_settings(tmp_path):
    """No --model and --action-format marks: the demonstrations are recorded with the screen's marks (each
    oracle tap becomes a click on a numbered element), the tiny model is fine-tuned in the marks format
    and saved with the settings it was trained with; evaluation and rollouts list the marks to it."""
    from rl.config import TrainConfig
    from rl.sft import load_trajectories
    from rl.trainer import train

    out = tmp_path / "run"
    r = train(TrainConfig.build(action_format="marks", device={"marks": "true"}, tasks=("open_app_shuffled",),
                                warm_start_demos=2, warm_start_steps=2, iterations=0, eval_episodes=2, slots=2,
                                pool="inprocess", max_new_tokens=24, out=str(out), seed=0))
    assert AgentSettings.load(str(out / "sft")) == tiny_model_settings("marks")
    assert AgentSettings.load(r.model) == tiny_model_settings("marks")
    demos = load_trajectories([str(out / "demos")])
    assert len(demos) == 2 and all(s.observation.marks for t in demos for s in t.steps)
    evaluated = load_trajectories([str(out / "eval-before")], successful_only=False)
    assert evaluated and all(s.observation.marks for t in evaluated for s in t.steps)
    assert 0.0 <= r.success_before <= 1.0


@pytest.mark.browser
def test_the_embedded_default_on_webapps_runs_online_awr_on_its_warm_start_on_a_tiny_budget(tmp_path, capsys):
    """The embedded recipe on webapps (README command (a)) with a tiny budget, through the command: a tiny
    model warm-started in the marks format on goal-conditioned tasks, then online AWR whose replay buffer
    holds the warm start's demonstrations, with held-out success per task before and after."""
    from guiagent.cli.main import main
    from guiagent.store import StoreReader
    from rl.config import GOAL_CONDITIONED_TASKS, TrainConfig
    from rl.sft import load_trajectories

    assert (TrainConfig.embedded().tasks, TrainConfig.embedded().algo) == (GOAL_CONDITIONED_TASKS, "awr")
    out = tmp_path / "run"
    assert main(["train", "--tasks", "open_app", "open_app_shuffled", "--warm-start-demos", "4",
                 "--warm-start-steps", "4", "--warm-start-copy-steps", "3", "--warm-start-action-weight", "2.5",
                 "--iterations", "1",
                 "--groups-per-iteration", "1", "--group-size", "2",
                 "--slots", "2", "--pool", "inprocess", "--eval-episodes", "2", "--max-new-tokens", "24",
                 "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    r = json.loads(lines[-1])
    assert AgentSettings.load(r["model"]) == tiny_model_settings("marks")
    assert r["iterations"] == 1 and set(r["task_success_before"]) == set(r["task_success_after"]) == {
        "open_app", "open_app_shuffled"}
    [by_task] = [line for line in lines if line.startswith("held-out success by task: ")]
    assert "open_app " in by_task and "open_app_shuffled " in by_task and " -> " in by_task
    [replay] = [m.value for m in StoreReader(out).metrics(r["run_id"])["replay"]]
    assert replay >= 4  # the warm start's demonstrations, then the iteration's own episodes
    [copied] = [line for line in captured.err.splitlines() if "warm start: copy warm-up {" in line]
    assert json.loads(copied[copied.index("{"):])["steps"] == 3  # what the copy warm-up reached, in the log
    saved = (out / "config.yaml").read_text()  # the run's record: bare words, the copy warm-up asked for
    assert "warm_start_copy_steps: 3" in saved and "warm_start_words: bare" in saved
    sft = json.loads((out / "sft" / "sft_log.json").read_text())["config"]  # what the warm start's SFT ran with
    assert (sft["action_weight"], sft["name_weight"], sft["steps"]) == (2.5, 5.0, 4)
    # the warm start in the marks format: demonstrations recorded with the screen's marks, the model
    # fine-tuned and saved with its settings, evaluation listing the marks to it
    assert AgentSettings.load(str(out / "sft")) == tiny_model_settings("marks")
    demos = load_trajectories([str(out / "demos")])
    assert len(demos) == 4 and all(s.observation.marks for t in demos for s in t.steps)
    evaluated = load_trajectories([str(out / "eval-before")], successful_only=False)
    assert evaluated and all(s.observation.marks for t in evaluated for s in t.steps)


def _first_iteration_replies(run_dir):
    """The replies of a run's first iteration (policy version 0): (group, member, turn, reply), sorted."""
    from guiagent.store import EpisodeFilter, StoreReader

    with StoreReader(run_dir) as reader:
        eps = [e for e in reader.iter_episodes(EpisodeFilter(status="completed", policy_version=0))
               if e.agent != "oracle"]
        return sorted((e.group_id, e.metadata.get("member"), s.index, s.response)
                      for e in eps for s in reader.load_trajectory(e.episode_id, pixels=False).steps)


@pytest.mark.slow
@pytest.mark.browser
def test_a_runs_rl_stage_repeats_from_its_saved_warm_start_with_its_own_config(tmp_path):
    """`guiagent train --config RUN/config.yaml --model RUN/sft` runs the RL stage of an embedded-default run
    again from its saved warm start with the run's own settings: the same groups, the same sampled replies
    (per-turn seeds) and the same held-out figures. (--model alone leaves the embedded recipe out: other
    sampling and update settings, another RL stage.)"""
    from guiagent.cli.main import main

    common = ["--iterations", "1", "--groups-per-iteration", "2", "--group-size", "2", "--slots", "2",
              "--pool", "inprocess", "--eval-episodes", "2", "--max-new-tokens", "24", "--json"]
    run = tmp_path / "run"
    assert main(["train", "--tasks", "open_app", "open_app_shuffled", "--warm-start-demos", "4",
                 "--warm-start-steps", "4", "--warm-start-copy-steps", "3", *common, "--out", str(run)]) == 0
    again = tmp_path / "again"
    assert main(["train", "--config", str(run / "config.yaml"), "--model", str(run / "sft"),
                 "--out", str(again), "--json"]) == 0
    first, second = _first_iteration_replies(run), _first_iteration_replies(again)
    assert len(first) >= 4 and len({r[3] for r in first}) > 1  # sampled replies, not one fixed answer
    assert first == second
    a, b = (json.loads((d / "summary.json").read_text()) for d in (run, again))
    assert (a["success_before"], a["success_after"]) == (b["success_before"], b["success_after"])
