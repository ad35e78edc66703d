"""Offline metrics on recorded episodes: the pure aggregation by hand, the driver with the oracle, a random
and a scripted agent at both levels, ``guiagent eval --mode offline`` end to end, and the web UI's panel."""

import json
import subprocess
import sys

import pytest

from guiagent.store import Store, StoreReader
from guiagent.types import (
    Click,
    Finish,
    NavigateBack,
    NavigateHome,
    Observation,
    ParseError,
    Step,
    StepTarget,
    Swipe,
    TaskSpec,
    Trajectory,
    Type,
)
from rl.agents import PolicyTurn, RandomPolicy
from rl.offline_eval import RecordedPolicy, context_key, run_offline_eval, step_goal
from rl.offline_metrics import StepOutcome, from_run_metrics, kind_row, offline_metrics, to_run_metrics
from tests.webui.conftest import png


def test_metrics_by_hand():
    o = [
        StepOutcome("a", "click", True, True, True),      # a tap on target
        StepOutcome("a", "click", True, True, False),     # right kind, missed: grounding counts it
        StepOutcome("a", "click", True, False, False),    # wrong kind: not a grounding step
        StepOutcome("b", "swipe", True, True, True),
        StepOutcome("b", "type", False, False, False),    # did not parse
        StepOutcome("c", "wait", True, True, True),
    ]
    m = offline_metrics(o)
    assert (m.steps, m.episodes) == (6, 3)
    assert m.type_acc == pytest.approx(4 / 6) and m.step_sr == pytest.approx(3 / 6)
    assert m.grounding_acc == pytest.approx(1 / 2) and m.grounding_steps == 2
    assert m.parse_rate == pytest.approx(5 / 6) and m.episode_success == pytest.approx(1 / 3)
    assert m.per_kind["click"].type_acc == pytest.approx(2 / 3) and m.per_kind["click"].step_sr == pytest.approx(1 / 3)
    assert m.per_kind["swipe"].grounding_acc is None and m.per_kind["type"].step_sr == 0.0
    flat = to_run_metrics(m, "low")
    assert flat["offline/low/type_acc"] == pytest.approx(4 / 6) and flat["offline/low/click/grounding_acc"] == 0.5
    assert "offline/low/swipe/grounding_acc" not in flat
    back = from_run_metrics({**flat, "loss": 1.0, "offline//x": 2.0})
    assert set(back) == {"low"} and back["low"]["overall"]["step_sr"] == pytest.approx(0.5)
    assert back["low"]["per_kind"]["click"]["steps"] == 3
    empty = offline_metrics([])
    assert empty.steps == 0 and empty.type_acc == 0.0 and empty.grounding_acc is None


@pytest.mark.parametrize("kind,button,row", [("scroll", None, "swipe"), ("swipe", None, "swipe"), ("back", "back",
                         "system_button"), ("key", "enter", "system_button"), ("key", None, "key"), ("click", None, "click")])
def test_kind_rows(kind, button, row):
    assert kind_row(kind, button) == row


def _episodes():
    size = (90, 160)

    def obs(i):
        return Observation(png(i), 360, 640)

    tgt = lambda t: {"target": t.to_dict()}  # noqa: E731
    e1 = Trajectory("e1", TaskSpec("uis1", "f:1", 1, "open the list"), (
        Step(0, obs(1), Click(0.5, 0.2), thought="do not leak",
             metadata={**tgt(StepTarget("click", boxes=((0.4, 0.1, 0.6, 0.3), (0.0, 0.0, 1.0, 0.5)), point=(0.5, 0.2))),
                       "step_instruction": "tap the list"}),
        Step(1, obs(2), Swipe(0.5, 0.75, 0.5, 0.25),
             metadata={**tgt(StepTarget("swipe", direction="down", convention="scroll")),
                       "step_instruction": "swipe up"}),
        Step(2, obs(3), Type("milk"), metadata={**tgt(StepTarget("type", text="milk"))}),
    ), success=1.0)
    e2 = Trajectory("e2", TaskSpec("uis1", "f:2", 2, "go back"), (
        Step(0, obs(4), NavigateBack(), metadata={**tgt(StepTarget("back", button="back")),
                                                  "step_instruction": "press back"}),
        Step(1, obs(5), Finish("success")),   # no stored target: derived from the action
    ), success=1.0)
    del size
    return [e1, e2]


class Scripted:
    """Replies by (level, episode, step); records what it was shown."""

    name = "scripted"

    def __init__(self, replies):
        self.replies, self.seen = replies, []

    def act_batch(self, contexts, pool):
        out = []
        for c in contexts:
            _, level, rest = c.key.split(":", 2)
            eid, _, idx = rest.rpartition(":")
            self.seen.append((level, eid, int(idx), c.spec.goal, [s.thought for s in c.history]))
            a = self.replies.get((level, eid, int(idx)), ParseError("malformed", "?"))
            out.append(PolicyTurn("r", a, thought="t"))
        return out


def test_oracle_is_perfect_and_scripted_agent_is_scored_per_level(tmp_path):
    eps = _episodes()
    res = run_offline_eval(RecordedPolicy(eps), eps, batch_size=2)
    for m in res.values():
        assert (m.type_acc, m.grounding_acc, m.step_sr, m.episode_success, m.parse_rate) == (1.0, 1.0, 1.0, 1.0, 1.0)
    replies = {("high", "e1", 0): Click(0.9, 0.45),            # inside the second (big) candidate box
               ("high", "e1", 1): Swipe(0.5, 0.25, 0.5, 0.75),  # the wrong way
               ("high", "e1", 2): Type("milk"),
               ("high", "e2", 0): NavigateHome(),               # another system button: kind credit
               ("low", "e1", 0): Click(0.9, 0.9),               # off target
               ("low", "e1", 1): Swipe(0.5, 0.75, 0.5, 0.25),
               ("low", "e1", 2): Type("milk"),
               ("low", "e2", 0): NavigateBack(),
               ("low", "e2", 1): Finish("success")}
    agent = Scripted(replies)
    store = Store.open(tmp_path / "run")
    run = store.create_run("offline")
    res = run_offline_eval(agent, eps, batch_size=3, store=store, run_id=run)
    store.close()
    hi, lo = res["high"], res["low"]
    assert hi.steps == lo.steps == 5
    assert (hi.type_acc, hi.step_sr, hi.grounding_acc, hi.parse_rate) == (4 / 5, 2 / 5, 1.0, 4 / 5)
    assert hi.per_kind["system_button"].type_acc == 1.0 and hi.per_kind["system_button"].step_sr == 0.0
    assert (lo.type_acc, lo.step_sr, lo.grounding_acc, lo.episode_success) == (1.0, 4 / 5, 0.0, 1 / 2)
    # the low level adds the step instruction to the goal; history thoughts never reach the agent
    goals = {(lv, e, i): g for lv, e, i, g, _ in agent.seen}
    assert goals[("high", "e1", 0)] == "open the list"
    assert goals[("low", "e1", 0)] == "open the list\nStep instruction: tap the list"
    assert goals[("low", "e1", 2)] == "open the list"   # no instruction recorded
    assert all(t == "" for *_, hist in agent.seen for t in hist)
    # stored: one episode per recorded episode and level, and the metrics as run metrics
    r = StoreReader(tmp_path / "run")
    assert r.count_episodes() == 4
    names = r.metric_names(run)
    assert "offline/high/step_sr" in names and "offline/low/click/grounding_acc" in names
    t = next(x for x in r.iter_trajectories(pixels=False) if x.metadata["level"] == "low"
             and x.metadata["recorded_episode"] == "e1")
    assert [s.metadata["matched"] for s in t.steps] == [False, True, True]
    assert t.steps[0].metadata["recorded_action"]["kind"] == "click" and t.success == 0.0


def test_random_agent_and_bad_arguments():
    eps = _episodes()
    res = run_offline_eval(RandomPolicy(seed=0), eps, levels=("high",))
    assert set(res) == {"high"} and 0.0 <= res["high"].type_acc <= 1.0
    with pytest.raises(ValueError, match="level"):
        run_offline_eval(RandomPolicy(0), eps, levels=("mid",))
    bad = [Trajectory("x", eps[0].task, (Step(0, eps[0].steps[0].observation, None),))]
    with pytest.raises(ValueError, match="no action and no target"):
        run_offline_eval(RandomPolicy(0), bad)
    assert context_key("low", "a:b", 3) == "offline:low:a:b:3"
    assert step_goal("g", eps[0].steps[0], "high") == "g"


class Logged:
    """A policy that keeps each act_batch call's step keys and slots, and answers like the oracle."""

    def __init__(self, episodes, answer_less=False):
        self.oracle, self.calls, self.answer_less = RecordedPolicy(episodes), [], answer_less

    def act_batch(self, contexts, pool):
        self.calls.append([(c.key, c.slot, len(c.history)) for c in contexts])
        turns = self.oracle.act_batch(contexts, pool)
        return turns[:-1] if self.answer_less else turns


def test_the_steps_run_through_the_rollout_loop_on_a_side_over_recorded_steps(monkeypatch):
    """Offline evaluation had a loop of its own beside the one every other rollout takes; its steps now
    run through rl.loop.RolloutLoop, on OfflineSide (one request a recorded step and level)."""
    from rl.loop import RolloutLoop
    from rl.offline_eval import OfflineRequest, OfflineSide

    eps = _episodes()
    runs = []
    real = RolloutLoop.run

    def spy(self, requests):
        runs.append((type(self.side).__name__, [r.key for r in requests]))
        return real(self, requests)

    monkeypatch.setattr(RolloutLoop, "run", spy)
    res = run_offline_eval(RecordedPolicy(eps), eps, batch_size=2)
    assert res["high"].step_sr == res["low"].step_sr == 1.0
    assert [side for side, _ in runs] == ["OfflineSide", "OfflineSide"]  # a loop per level
    assert runs[1][1] == [context_key("low", t.episode_id, i) for t in eps for i in range(len(t.steps))]
    # the side on its own: a request is one turn at the step's screen, scored against its target
    req = OfflineRequest(eps[0], 1, "low", StepTarget("swipe", direction="down", convention="scroll"))
    out = real(RolloutLoop(OfflineSide(1), RecordedPolicy(eps), keep_turns=False), [req])
    [t] = out.trajectories
    assert t.status == "completed" and t.success == 1.0 and out.env_steps == 1
    assert t.task.goal == "open the list\nStep instruction: swipe up" and t.steps[0].metadata["matched"]
    assert t.metadata["recorded_episode"] == "e1" and t.metadata["level"] == "low"


def test_the_steps_reach_the_policy_in_recorded_order_batch_by_batch():
    """What a policy that draws from one stream in call order (RandomPolicy) depends on: each level's steps
    in the recorded order, batch_size to a call, in slots 0.., each with the recorded steps before it."""
    eps = _episodes()
    agent = Logged(eps)
    run_offline_eval(agent, eps, batch_size=2)
    steps = [(t.episode_id, i) for t in eps for i in range(len(t.steps))]
    want = []
    for level in ("high", "low"):
        keys = [(context_key(level, e, i), i) for e, i in steps]
        want += [[(k, slot, i) for slot, (k, i) in enumerate(keys[j:j + 2])] for j in range(0, len(keys), 2)]
    assert agent.calls == want
    with pytest.raises(RuntimeError, match="the policy answered 1 of 2 turns"):
        run_offline_eval(Logged(eps, answer_less=True), eps, batch_size=2)


#: (type, grounding, step SR, episodes all right) per seed and level, from the driver with its own loop
EXPECTED_RANDOM = {
    0: {"high": (32 / 48, 22 / 32, 22 / 48, 0.0), "low": (34 / 48, 22 / 34, 22 / 48, 2 / 12)},
    1: {"high": (29 / 48, 22 / 29, 22 / 48, 1 / 12), "low": (32 / 48, 22 / 32, 22 / 48, 2 / 12)},
    2: {"high": (33 / 48, 24 / 33, 24 / 48, 0.0), "low": (35 / 48, 25 / 35, 25 / 48, 2 / 12)},
}


def test_a_random_agent_scores_as_it_did_before_the_loop_ran_its_steps():
    """RandomPolicy's figures, seeds 0-2, on a set where it scores: the same to the digit as the driver
    with its own loop gave (computed with it before the change)."""
    eps = []
    for n in range(12):
        obs = Observation(png(n), 360, 640)
        steps = tuple(Step(i, obs, Click(0.5, 0.5), metadata={"target": StepTarget(
            "click", boxes=((0.0, 0.0, 1.0, 0.5 + 0.1 * i),), point=(0.5, 0.25)).to_dict()}) for i in range(4))
        eps.append(Trajectory(f"r{n}", TaskSpec("uis1", f"f:{n}", n, "tap the top"), steps, success=1.0))
    got = {seed: {lv: (m.type_acc, m.grounding_acc, m.step_sr, m.episode_success)
                  for lv, m in run_offline_eval(RandomPolicy(seed=seed), eps, batch_size=5).items()}
           for seed in (0, 1, 2)}
    assert got == EXPECTED_RANDOM, got


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "guiagent", "eval", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow  # ~14 s (the suite's 12-minute budget)
def test_eval_cli_offline_mode_and_the_run_page(tmp_path):
    lines = []
    for n in range(3):
        lines.append({"goal": f"goal {n}", "is_successful": True, "episode_id": 100 + n, "steps": [
            {"action_content": {"action": "click", "coordinate": [540, 1200]}, "screenshot": "a.png",
             "step_instruction": "tap the middle",
             "check_options": {"action": "click", "coordinate": [540, 1200], "candidate_bbox": [[400, 1100, 700, 1300]]}},
            {"action_content": {"action": "swipe", "coordinate": [540, 1800], "coordinate2": [540, 600]},
             "screenshot": "b.png", "step_instruction": "swipe up",
             "check_options": {"action": "swipe", "direction": "down"}},
            {"action_content": {"action": "system_button", "button": "Back"}, "screenshot": "c.png",
             "step_instruction": "go back", "check_options": {"action": "system_button", "button": "Back"}}]})
    src = tmp_path / "eval.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    p = subprocess.run([sys.executable, "-m", "guiagent", "data", "import", "--format", "uis1", str(src), "--out",
                        str(tmp_path / "data"), "--placeholders", "auto", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1])["placeholder_screenshots"] == 9
    p = _cli("--mode", "offline", "--data", str(tmp_path / "data"), "--agent", "oracle", "--out",
             str(tmp_path / "oracle"), "--json", "--slots", "4")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["mode"] == "offline" and out["env"] == "uis1"
    assert out["offline"]["high"]["step_sr"] == 1.0 and out["offline"]["low"]["per_kind"]["swipe"]["steps"] == 3
    assert "offline (high level) on 3 recorded episodes, 9 steps: type 100.0%" in p.stdout
    p = _cli("--mode", "offline", "--data", str(tmp_path / "data"), "--agent", "random", "--level", "low",
             "--match", "uis1", "--out", str(tmp_path / "random"), "--json")
    assert p.returncode == 0, p.stderr
    assert set(json.loads(p.stdout.splitlines()[-1])["offline"]) == {"low"}
    # bad input: one line, exit 2, nothing written
    p = _cli("--mode", "offline", "--agent", "oracle", "--out", str(tmp_path / "x"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and not (tmp_path / "x").exists()
    p = _cli("--mode", "offline", "--data", str(tmp_path / "nothing"), "--out", str(tmp_path / "y"))
    assert p.returncode == 2 and "no trajectory store" in p.stderr and "Traceback" not in p.stderr
    # the web UI's run page shows the same figures
    from webui import AppConfig, create_app

    client = create_app(AppConfig(runs=tmp_path, refresh_s=0.5)).test_client()
    runs = client.get("/api/runs").get_json()
    items = runs["runs"] if isinstance(runs, dict) else runs
    key = next(r["key"] for r in items if r["name"] == "offline-oracle")
    html = client.get(f"/runs/{key}").get_data(as_text=True)
    assert 'id="offline-metrics"' in html and "high level" in html and "low level" in html
    assert "system_button" in html and "100.0%" in html
    other = next(r["key"] for r in items if r["name"] == "import:uis1")
    assert 'id="offline-metrics"' not in client.get(f"/runs/{other}").get_data(as_text=True)


def test_runs_page_charts_group_the_offline_metrics_into_one():
    from webui.data import chart_groups

    m = offline_metrics([StepOutcome("a", "click", True, True, True), StepOutcome("a", "swipe", True, False, False)])
    names = list(to_run_metrics(m, "high")) + list(to_run_metrics(m, "low")) + ["loss"]
    charts = chart_groups(names)
    assert [c["title"] for c in charts] == ["loss", "offline metrics"]
    assert sorted(charts[1]["series"]) == sorted(f"offline/{lv}/{k}" for lv in ("high", "low")
                                                 for k in ("type_acc", "grounding_acc", "step_sr"))
