"""SFT: the weighted loss, and `guiagent sft` end to end on stored oracle demonstrations."""

import json
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


def test_sft_cli_trains_and_saves_a_loadable_model(tmp_path, tiny_model_dir, capsys):
    """The command in this process (python -m guiagent's start-up is tested with eval and model init)."""
    from guiagent.cli.main import main

    demos = tmp_path / "demos"
    run_eval(EvalConfig(env="webapps", agent="oracle", episodes=2, tasks=("open_app",), seed=0, out=str(demos)))
    out = tmp_path / "sft"
    assert main(["sft", "--data", str(demos), "--model", tiny_model_dir, "--out", str(out), "--compact-prompt",
                 "--train.steps", "3", "--train.batch-size", "2", "--train.micro-batch-size", "1",
                 "--train.warmup-steps", "1", "--train.coord-weight", "2", "--json"]) == 0
    figs = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figs["examples"] == 4 and figs["steps"] == 3  # 2 episodes x (tap + finish)
    assert figs["loss_last"] < figs["loss_first"]
    settings = json.loads((Path(out) / "guiagent_agent.json").read_text())
    assert settings["action_format"] == "json" and settings["system_prompt"]
    from guiagent.policy.hf import load_transformers

    assert load_transformers(str(out)).version == 0
    # the same --out again: refused before the model loads (one line, exit 2); no episodes to imitate: one line
    capsys.readouterr()
    again = ["sft", "--data", str(demos), "--model", tiny_model_dir, "--train.steps", "1"]
    assert main([*again, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (f"guiagent sft: --out {out}: holds files already (an earlier model or "
                                               "run); give a new or empty folder, or --overwrite to write over it")
    assert main([*again, "--out", str(tmp_path / "none"), "--tasks", "go_home"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"guiagent sft: --data {demos}: no successful episodes of --tasks go_home (--include-failures "
                   "also imitates the others)"), err
    assert not (tmp_path / "none").exists()


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
    with pytest.raises(ValueError, match="--warm-start-action-weight must be positive"):
        WarmStartSettings(warm_start_action_weight=0.0)


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


def _home(goal: str, action, *, index: int = 0):
    from guiagent.types import Mark, Observation, Step, TaskSpec, Trajectory

    marks = (Mark(0, "link", "Navigate up", (0.0, 0.0, 0.1, 0.05)),  # a link too, but not one of the icons
             Mark(1, "link", "Clock", (0.1, 0.2, 0.3, 0.3)),
             Mark(2, "link", "Notes", (0.4, 0.2, 0.6, 0.3)),
             Mark(3, "link", "Files", (0.7, 0.2, 0.9, 0.3)),
             Mark(4, "link", "Notes", (0.1, 0.4, 0.3, 0.5)),   # a name twice: only the first one's reply names it
             Mark(5, "switch", "Wi-Fi", (0.1, 0.6, 0.9, 0.65)),
             Mark(6, "switch", "Bluetooth", (0.1, 0.7, 0.9, 0.75)))
    obs = Observation(screenshot=b"\x89PNG fake", width=360, height=640, marks=marks)
    steps = tuple(Step(i, obs, action if i == index else None) for i in range(index + 1))
    return Trajectory("e0", TaskSpec("webapps", "open_app", 0, goal), steps, success=1.0)


def _relabels(traj, index: int = 0):
    from rl.agents import tiny_model_settings
    from rl.prompting import sft_example
    from rl.sft import goal_relabels

    st = tiny_model_settings("marks")
    chat, target = sft_example(traj, index, st.format(), st.prompt_config())
    return target, goal_relabels(traj, index, st.format(), chat, target)


def test_goal_relabels_swap_the_named_element_for_its_siblings():
    from guiagent.types import Click, ClickElement

    target, out = _relabels(_home("Open the Clock app.", ClickElement(1)))
    assert json.loads(target)["action"] == {"kind": "click_element", "name": "Clock"}
    # the icons of the same size and role, each once; not the small back arrow, not the toggles
    assert {g: json.loads(t)["action"]["name"] for g, t in out} == {
        "Open the Notes app.": "Notes", "Open the Files app.": "Files"}
    # a recorded tap at a point on the icon is the same step
    _, by_point = _relabels(_home("Open the Clock app.", Click(0.2, 0.25)))
    assert by_point == out


@pytest.mark.parametrize("goal, action, index", [
    ("Open the Clock app.", "switch", 0),            # a toggle: which way it stands is not in the marks
    ("Open Clock, then open Clock again.", 1, 0),    # the name twice in the goal
    ("Open the clock app.", 1, 0),                   # the reply's name not in the goal as written
    ("Open the Clock app.", 1, 1),                   # a later step: its history would contradict the goal
    ("Open the Clocks app.", 1, 0),                  # not as whole words
])
def test_goal_relabels_leave_steps_they_cannot_swap_truly(goal, action, index):
    from guiagent.types import ClickElement

    act = ClickElement(5) if action == "switch" else ClickElement(action)
    goal = "Turn on Wi-Fi." if action == "switch" else goal
    assert _relabels(_home(goal, act, index=index), index)[1] == []


def test_goal_relabels_of_recorded_demonstrations_and_their_share_in_training(tmp_path, tiny_model_dir, monkeypatch):
    """Oracle episodes of the webapps suite: every relabelling names an element of its screen, changes
    only the name in the goal, and train_sft draws relabelled first steps at the share asked for."""
    import re

    import rl.sft as sft
    from guiagent.policy.hf import load_transformers
    from rl.agents import tiny_model_settings

    demos = tmp_path / "demos"
    run_eval(EvalConfig(env="webapps", agent="oracle", episodes=12, out=str(demos), seed=3,
                        tasks=("open_app", "files_open_folder", "settings_turn_on"),
                        fleet=__import__("rl.settings", fromlist=["FleetSettings"]).FleetSettings(
                            slots=1, pool="inprocess", device={"marks": "true"})))
    pol = load_transformers(str(tiny_model_dir), threads=1)
    st = tiny_model_settings("marks")
    trajs = sft.load_trajectories([str(demos)])
    ex = sft.load_examples(trajs, pol, st.format(), st.prompt_config(), sft.SFTConfig(goal_relabel=0.5))
    plain = sft.load_examples(trajs, pol, st.format(), st.prompt_config(), sft.SFTConfig())
    assert all(not e.relabels for e in plain)  # built only when asked for
    by_task = {t.episode_id: t.task.task_id for t in trajs}
    relabelled = [e for e in ex if e.relabels]
    assert {by_task[e.episode_id] for e in relabelled} == {"open_app", "files_open_folder"}  # toggles: none
    for e in relabelled:
        name = json.loads(e.target)["action"]["name"]
        listed = re.findall(r"\] link: ([^\n]*)", _texts(e.chat))
        for r in e.relabels:
            other = json.loads(r.target)["action"]["name"]
            assert other != name and any(x.startswith(other) for x in listed)
            assert r.goal == e.goal.replace(name, other)
            assert list(r.completion_ids) == pol.encode_completion(r.target)
            applied = r.apply(e)
            assert f"Goal: {r.goal}" in _texts(applied.chat) and f"Goal: {e.goal}" not in _texts(applied.chat)
            assert applied.chat[0] is e.chat[0] or applied.chat[0] == e.chat[0]

    seen: list[str] = []

    def fake_nll(policy, batch):
        seen.extend(e.target != recorded[e.episode_id] for e in batch)
        return sum((p * 0).sum() for p in policy.parameters()) + next(iter(policy.parameters())).sum(), 0.0

    monkeypatch.setattr(sft, "weighted_nll", fake_nll)
    recorded = {e.episode_id: e.target for e in relabelled}
    for share in (0.0, 1.0):
        seen.clear()
        sft.train_sft(pol, relabelled, sft.SFTConfig(steps=10, batch_size=8, micro_batch_size=8, warmup_steps=1,
                                                     goal_relabel=share), progress=False)
        assert sum(seen) / len(seen) == share  # a relabelling always names another element


def test_bad_goal_relabel_is_one_clear_error():
    from rl.settings import WarmStartSettings
    from rl.sft import SFTConfig

    with pytest.raises(ValueError, match=r"goal_relabel must be in \[0, 1\]"):
        SFTConfig(goal_relabel=-0.5)
    with pytest.raises(ValueError, match=r"--warm-start-goal-relabel must be in \[0, 1\]"):
        WarmStartSettings(warm_start_goal_relabel=2.0)


def test_goal_relabels_never_ask_for_a_name_held_out_of_training():
    from guiagent.types import ClickElement
    from rl.agents import tiny_model_settings
    from rl.prompting import sft_example
    from rl.sft import goal_relabels

    traj = _home("Open the Clock app.", ClickElement(1))
    st = tiny_model_settings("marks")
    chat, target = sft_example(traj, 0, st.format(), st.prompt_config())
    out = goal_relabels(traj, 0, st.format(), chat, target, frozenset({"Notes"}))
    assert [g for g, _ in out] == ["Open the Files app."]


class _Completer(_Tok):
    """A tokenizer with the policy's ``encode_completion``."""

    def encode_completion(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]


@pytest.mark.parametrize("goal, element, name", [("Open the Clock app.", 1, "Clock"), ("Turn on Wi-Fi.", 5, "Wi-Fi")])
def test_renaming_swaps_the_target_name_everywhere_and_nothing_else(goal, element, name):
    import random

    from guiagent.types import ClickElement
    from rl.agents import tiny_model_settings
    from rl.prompting import sft_example
    from rl.sft import SFTConfig, made_up_name, rename_target, token_weights

    traj = _home(goal, ClickElement(element))
    st = tiny_model_settings("marks")
    chat, target = sft_example(traj, 0, st.format(), st.prompt_config())
    policy, cfg = _Completer("bare"), SFTConfig(name_weight=5.0, rename=1.0)
    ids = policy.encode_completion(target)
    e = SFTExample(chat, target, tuple(ids), token_weights(policy, ids, target, "click_element", action_weight=1.0,
                                                           coord_weight=1.0, name_weight=5.0),
                   "e0", 0, goal=goal, name=name, suite="webapps")
    new = made_up_name(random.Random(4), name)
    r = rename_target(e, new, policy, cfg)
    before, after = _texts(e.chat), _texts(r.chat)
    assert name in before and name not in after and after == before.replace(name, new)
    assert json.loads(r.target)["action"]["name"] == new and r.goal == goal.replace(name, new)
    assert list(r.completion_ids) == policy.encode_completion(r.target)
    heavy = "".join(policy.tokenizer.decode([i]) for i, w in zip(r.completion_ids, r.weights) if w == 5.0)
    assert heavy.strip() == new  # the name's weight moved with it
    assert r.chat[0]["content"] == e.chat[0]["content"] or name not in _texts([e.chat[0]])
    assert e.target == target and name in _texts(e.chat)  # the example itself is left as it was


def test_made_up_names_keep_the_shape_and_avoid_held_out_names():
    import random
    import re

    from rl.sft import made_up_name

    rng = random.Random(0)
    for like in ("Clock", "About phone", "Do not disturb", "Wi-Fi", "road_trip.mp3", "invoice_march.pdf"):
        for _ in range(200):
            n = made_up_name(rng, like)
            assert len(n.split()) == len(like.split()) and n.count("-") == like.count("-") and n != like
            if "." in like:
                assert re.fullmatch(r"[a-z]+(_[a-z]+)*\.\w+", n) and n.count("_") == like.count("_")
            else:
                assert all(w[0].isupper() == v[0].isupper() for w, v in zip(n.split(), like.split()))
    # a name to avoid is never drawn (every one-syllable name is banned here: a third of the draws)
    banned = frozenset(o.upper() + v for o in "bcdfghjklmnprstvwz" for v in "aeiou")
    banned |= frozenset(o.upper() + v + c for o in "bcdfghjklmnprstvwz" for v in "aeiou" for c in "klmnrst")
    draws = {made_up_name(random.Random(s), "Xy", banned, words=0.0) for s in range(300)}
    assert len(draws) > 250 and not {d.casefold() for d in draws} & {b.casefold() for b in banned}


def test_made_up_names_mix_real_words_that_are_no_word_of_a_name_to_avoid():
    """Half the words of a made-up name are real words (names on screens mostly are, and a tokenizer holds
    many as one token), never a word of a name to avoid; words=0 gives syllables only."""
    import random

    from emulators.names import _WORDS, made_up_name

    avoid = frozenset({"Garden", "Screen time", "photo_album.jpg", "Wi-Fi"})
    taken = {"garden", "screen", "time", "photo", "album"}  # words of those names that are real words
    parts = [p for s in range(400) for p in made_up_name(random.Random(s), "Do not disturb", avoid).lower().split()]
    real = [p for p in parts if p in _WORDS]
    assert 0.4 < len(real) / len(parts) < 0.6 and len(set(real)) > 40 and not set(real) & taken
    stems = made_up_name(random.Random(2), "road_trip.mp3", avoid).rsplit(".", 1)[0].split("_")
    assert len(stems) == 2 and all(p.islower() for p in stems)
    plain = [p for s in range(200) for p in made_up_name(random.Random(s), "Wi-Fi", words=0.0).lower().split("-")]
    assert not set(plain) & set(_WORDS)
    with pytest.raises(ValueError, match="words must be between 0 and 1"):
        made_up_name(random.Random(0), "Wi-Fi", words=1.5)


def test_the_webapps_suite_names_every_held_out_target():
    from emulators.suites import get_suite

    names = get_suite("webapps").held_out_names()
    assert {"Clock", "Tasks", "Location", "Storage", "Pictures", "road_trip.mp3", "beach.jpg"} <= names
    assert not {"Files", "Wi-Fi", "Display", "Music", "report.pdf"} & names
    assert get_suite("webapps,miniwob").held_out_names() == names


def test_bad_rename_is_one_clear_error():
    from rl.settings import WarmStartSettings
    from rl.sft import SFTConfig

    with pytest.raises(ValueError, match=r"rename must be in \[0, 1\]"):
        SFTConfig(rename=2.0)
    with pytest.raises(ValueError, match=r"--warm-start-rename must be in \[0, 1\]"):
        WarmStartSettings(warm_start_rename=-1.0)


def test_copy_repeats_without_the_copy_warm_up_is_one_clear_error():
    from rl.settings import WarmStartSettings

    with pytest.raises(ValueError, match="--warm-start-copy-repeats follows the copy warm-up"):
        WarmStartSettings(warm_start_copy_repeats=200)
    with pytest.raises(ValueError, match="--warm-start-copy-repeats must be between"):
        WarmStartSettings(warm_start_copy_steps=1000, warm_start_copy_repeats=-1)
    assert WarmStartSettings(warm_start_copy_steps=1000, warm_start_copy_repeats=200).warm_start_copy_repeats == 200


# ----------------------------------------------------------------------------- failed turns (--train.recover)


def test_failed_turns_put_one_failure_before_the_step_and_keep_its_reply():
    """The kinds of failure a small model makes, each only where it fails on the screen: the name cut to its
    first half or with its last letter doubled, a name the goal quotes that the screen does not list, the
    reply broken off; in the history and as the screen's error note, as a rollout prompts them."""
    from guiagent.types import ClickElement
    from rl.agents import tiny_model_settings
    from rl.prompting import sft_example
    from rl.sft import failed_turns

    st = tiny_model_settings("marks")
    traj = _home('Open the Clock app, not "Calendar".', ClickElement(1))
    chat, target = sft_example(traj, 0, st.format(), st.prompt_config())
    out = failed_turns(traj, 0, st.format(), st.prompt_config(), target)
    texts = [_texts(c) for c in out]
    assert len(out) == 4
    for name in ("Cl", "Clockk", "Calendar"):
        reply = target.replace('"Clock"', json.dumps(name))
        line = [t for t in texts if repr(reply) in t]
        assert len(line) == 1, (name, texts)
        assert f"Step 1: invalid output (bad_arguments: no element named {name!r}" in line[0]
        assert "The last action failed: could not parse the action: bad_arguments" in line[0]
    assert any("(malformed:" in t and repr(target[: len(target) // 2]) in t for t in texts)
    assert all(t.startswith(_texts(chat).split(" | ")[0]) for t in texts)  # the same system prompt and goal
    # a later step: the failure follows the steps before it; a name that does find an element is no failure
    later = _home("Open the Clock app.", ClickElement(4), index=1)  # "Notes": "Note" finds nothing, "Notess" nothing
    chat2, target2 = sft_example(later, 1, st.format(), st.prompt_config())
    texts2 = [_texts(c) for c in failed_turns(later, 1, st.format(), st.prompt_config(), target2)]
    assert texts2 and all("Step 1: " in t and "Step 2: invalid output" in t for t in texts2)


def test_failed_turns_read_as_a_real_failed_turn_reads(tmp_path):
    """The chat after a synthetic failure is the chat a rollout builds after the env was sent that very reply
    (webapps on Chromium): the same history line, the same error note, the same element list."""
    import dataclasses

    from emulators.suites import get_suite
    from guiagent.types import ParseError, Step
    from rl.agents import tiny_model_settings
    from rl.prompting import build_chat, sft_example
    from rl.settings import FleetSettings
    from rl.sft import failed_turns, load_trajectories

    demos = tmp_path / "demos"
    run_eval(EvalConfig(env="webapps", agent="oracle", episodes=1, out=str(demos), seed=5, tasks=("open_app",),
                        fleet=FleetSettings(slots=1, pool="inprocess", device={"marks": "true"})))
    traj = load_trajectories([str(demos)])[0]
    st = tiny_model_settings("marks")
    fmt, pc = st.format(), st.prompt_config()
    _, target = sft_example(traj, 0, fmt, pc)
    synthetic = failed_turns(traj, 0, fmt, pc, target)
    assert synthetic
    env = get_suite("webapps").make_env(traj.task.task_id, marks=True)
    try:
        obs, _ = env.reset_typed(seed=traj.task.seed)
        assert obs.marks == traj.steps[0].observation.marks  # the demonstration's first screen
        reply = target[: len(target) // 2]
        error = fmt.parse_on(reply, obs)
        assert isinstance(error, ParseError)
        after, _, _, info = env.step_typed(error)
        real = Step(0, obs, None, response=reply, parse_error=error, action_error=info.action_error)
        want = _texts(build_chat(traj.task.goal, [real], after, fmt, pc))
    finally:
        env.close()
    assert want in [_texts(c) for c in synthetic]


def test_train_sft_draws_failed_turns_at_the_share_asked(tiny_model_dir, monkeypatch):
    import rl.sft as sft
    from guiagent.policy.hf import load_transformers
    from guiagent.types import ClickElement
    from rl.agents import tiny_model_settings

    pol = load_transformers(str(tiny_model_dir), threads=1)
    st = tiny_model_settings("marks")
    trajs = [_home("Open the Clock app.", ClickElement(1)), _home("Open the Files app.", ClickElement(3))]
    plain = sft.load_examples(trajs, pol, st.format(), st.prompt_config(), sft.SFTConfig())
    ex = sft.load_examples(trajs, pol, st.format(), st.prompt_config(), sft.SFTConfig(recover=0.5))
    assert all(not e.failed for e in plain) and all(len(e.failed) == 3 for e in ex)
    assert [e.target for e in ex] == [e.target for e in plain]
    seen: list[bool] = []

    def fake_nll(policy, batch):
        seen.extend("The last action failed" in _texts(e.chat) for e in batch)
        return sum((p * 0).sum() for p in policy.parameters()) + next(iter(policy.parameters())).sum(), 0.0

    monkeypatch.setattr(sft, "weighted_nll", fake_nll)
    for share in (0.0, 1.0):
        seen.clear()
        sft.train_sft(pol, ex, sft.SFTConfig(steps=4, batch_size=4, micro_batch_size=4, warmup_steps=1, recover=share),
                      progress=False)
        assert sum(seen) / len(seen) == share


def test_bad_recover_is_one_clear_error():
    from rl.settings import WarmStartSettings
    from rl.sft import SFTConfig

    with pytest.raises(ValueError, match=r"recover must be in \[0, 1\]"):
        SFTConfig(recover=1.5)
    with pytest.raises(ValueError, match=r"--warm-start-recover must be in \[0, 1\]"):
        WarmStartSettings(warm_start_recover=-0.1)
