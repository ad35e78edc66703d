"""Semi-online RL: matcher, rewards and advantages, the replay driver with patches, SOP."""

import io
import json

import math

import pytest
import torch
from PIL import Image

from guiagent.store import Store, StoreReader
from guiagent.types import (
    Answer,
    Click,
    Drag,
    Finish,
    Key,
    LongPress,
    NavigateBack,
    NavigateHome,
    Observation,
    OpenApp,
    ParseError,
    Scroll,
    Step,
    Swipe,
    TaskSpec,
    Trajectory,
    Type,
    Wait,
)
from rl.advantages import (
    SemiOnlineRewardConfig,
    grpo_advantages,
    semi_online_advantages,
    semi_online_returns,
    semi_online_step_rewards,
)
from rl.agents import PolicyTurn
from rl.match import MatchConfig, match_action, text_similarity
from rl.patching import PatchConfig
from rl.replay import run_semi_online
from rl.sop import EpisodeOutcome, semi_online_eval, sop_from_outcomes
from rl.strategies.semi_online import semi_online_turn_advantages

SIZE = (1000, 2000)
BOX = (0.4, 0.4, 0.6, 0.5)  # enlarged 1.2x: x 0.38..0.62, y 0.39..0.51
PX10 = MatchConfig(point_tolerance_px=10)

# (pred, recorded, target_box, config, matched, kind_match, exact)
CASES = [
    # taps: the target box (enlarged 1.2x) or the point tolerance (0.04 normalised)
    (Click(0.5, 0.45), Click(0.5, 0.45), None, MatchConfig(), True, True, True),
    (Click(0.52, 0.45), Click(0.5, 0.45), None, MatchConfig(), True, True, False),
    (Click(0.55, 0.45), Click(0.5, 0.45), None, MatchConfig(), False, True, False),
    (Click(0.5, 0.48), Click(0.5, 0.45), None, MatchConfig(), True, True, False),
    (Click(0.59, 0.49), Click(0.5, 0.45), BOX, MatchConfig(), True, True, False),
    (Click(0.61, 0.45), Click(0.5, 0.45), BOX, MatchConfig(), True, True, False),  # inside the enlarged box
    (Click(0.63, 0.45), Click(0.5, 0.45), BOX, MatchConfig(), False, True, False),
    (Click(0.5, 0.515), Click(0.5, 0.45), BOX, MatchConfig(), False, True, False),
    (
        Click(0.5, 0.484),
        Click(0.5, 0.45),
        (0.45, 0.44, 0.46, 0.46),
        MatchConfig(),
        True,
        True,
        False,
    ),  # box miss, point hit
    (Click(0.505, 0.45), Click(0.5, 0.45), None, PX10, True, True, False),  # 5 px
    (Click(0.5, 0.4545), Click(0.5, 0.45), None, PX10, True, True, False),  # 9 px
    (Click(0.5, 0.456), Click(0.5, 0.45), None, PX10, False, True, False),  # 12 px
    (Click(0.5005, 0.45), Click(0.5, 0.45), None, PX10, True, True, True),  # 0.5 px: exact
    (LongPress(0.5, 0.45), Click(0.5, 0.45), None, MatchConfig(), False, False, False),
    (LongPress(0.5, 0.45), LongPress(0.51, 0.45), None, MatchConfig(), True, True, False),
    (Click(0.5, 0.45), LongPress(0.5, 0.45), None, MatchConfig(), False, False, False),
    (ParseError("malformed", "x"), Click(0.5, 0.45), None, MatchConfig(), False, False, False),
    (None, NavigateBack(), None, MatchConfig(), False, False, False),
    # typed text: casefold, whitespace, containment, difflib ratio
    (Type("Hello World"), Type("hello   world"), None, MatchConfig(), True, True, True),
    (Type("hello"), Type("hello world"), None, MatchConfig(), True, True, False),
    (Type("hello"), Type("hello world"), None, MatchConfig(text_rule="similarity"), False, True, False),
    (Type("welsh cake"), Type("Welsh cakes"), None, MatchConfig(text_rule="similarity"), True, True, False),
    (Type("pizza"), Type("Welsh cakes"), None, MatchConfig(), False, True, False),
    (Type(""), Type("abc"), None, MatchConfig(), False, True, False),
    (Type("abc", 0.1, 0.1), Type("abc"), None, MatchConfig(), True, True, True),
    (Click(0.5, 0.5), Type("abc"), None, MatchConfig(), False, False, False),
    # scroll / swipe by the direction the content moves
    (Scroll("down"), Scroll("down"), None, MatchConfig(), True, True, True),
    (Scroll("up"), Scroll("down"), None, MatchConfig(), False, True, False),
    (
        Swipe(0.5, 0.8, 0.5, 0.2),
        Scroll("down"),
        None,
        MatchConfig(),
        True,
        True,
        False,
    ),  # finger up: reveals below
    (Swipe(0.5, 0.2, 0.5, 0.8), Scroll("down"), None, MatchConfig(), False, True, False),
    (Swipe(0.9, 0.5, 0.1, 0.5), Scroll("right"), None, MatchConfig(), True, True, False),
    (Scroll("left"), Swipe(0.1, 0.5, 0.9, 0.55), None, MatchConfig(), True, True, False),
    (Swipe(0.5, 0.2, 0.5, 0.8), Swipe(0.4, 0.3, 0.45, 0.9), None, MatchConfig(), True, True, True),
    # apps, answers, keys, finishes, kind-only actions
    (OpenApp("Zoho Meet"), OpenApp("zoho meeting"), None, MatchConfig(), True, True, False),
    (OpenApp("Gmail"), OpenApp("Chrome"), None, MatchConfig(), False, True, False),
    (Answer("42 apples"), Answer("42 Apples"), None, MatchConfig(), True, True, True),
    (Answer("no"), Answer("yes, three"), None, MatchConfig(), False, True, False),
    (Key("enter"), Key("Enter"), None, MatchConfig(), True, True, True),
    (Key("Tab"), Key("Enter"), None, MatchConfig(), False, True, False),
    (NavigateBack(), NavigateBack(), None, MatchConfig(), True, True, True),
    (NavigateHome(), NavigateBack(), None, MatchConfig(), False, True, False),  # system buttons: kind credit
    (NavigateHome(), NavigateBack(), None, MatchConfig(button_kind=False), False, False, False),
    (Wait(2), Wait(1), None, MatchConfig(), True, True, True),
    (Finish("success"), Finish("success", "done"), None, MatchConfig(), True, True, True),
    (Finish("failure"), Finish("success"), None, MatchConfig(), False, True, False),
    (Answer("x"), Finish("success"), None, MatchConfig(), False, False, False),
    (Drag(0.1, 0.1, 0.5, 0.5), Drag(0.11, 0.1, 0.5, 0.52), None, MatchConfig(), True, True, False),
    (Drag(0.1, 0.1, 0.5, 0.5), Drag(0.1, 0.1, 0.9, 0.5), None, MatchConfig(), False, True, False),
]


@pytest.mark.parametrize("pred,rec,box,cfg,matched,kind,exact", CASES)
def test_matcher_table(pred, rec, box, cfg, matched, kind, exact):
    r = match_action(pred, rec, size=SIZE, target_box=box, config=cfg)
    assert (r.matched, r.kind_match, r.exact) == (matched, kind, exact), r.reason
    assert r.reason


def test_matcher_table_is_large_and_text_similarity():
    assert len(CASES) >= 40
    assert text_similarity("  A  b ", "a b") == 1.0 and text_similarity("", "") == 1.0
    assert 0.0 < text_similarity("cake", "cakes") < 1.0


# -- rewards, returns, advantages ------------------------------------------------------------


def test_step_rewards_by_hand():
    f = torch.tensor([True, True, True, False, True])
    k = torch.tensor([True, True, False, False, False])
    m = torch.tensor([True, False, False, False, False])
    r = semi_online_step_rewards(f, k, m)
    assert r.tolist() == pytest.approx([0.1 + 0.9, 0.1 + 0.45, 0.1 + 0.09, 0.0, 0.19])
    cfg = SemiOnlineRewardConfig(format_weight=0.0, action_weight=1.0, kind_score=0.25, parsed_score=0.0)
    assert semi_online_step_rewards(f, k, m, cfg).tolist() == pytest.approx([1.0, 0.25, 0.0, 0.0, 0.0])


def test_point_distance_reward_by_hand():
    """σ = 0.1: a miss at distance σ scores 0.5 + 0.5·e^(-1/2) = 0.80327 of the action part, one at
    2σ 0.5 + 0.5·e^(-2) = 0.56767; a match keeps 1.0; steps without a distance (NaN) keep 0.5."""
    cfg = SemiOnlineRewardConfig(point_sigma=0.1)
    t = torch.tensor
    r = semi_online_step_rewards(t([True] * 4), t([True] * 4), t([False, False, True, False]), cfg,
                                 distance=t([0.1, 0.2, 0.0, float("nan")]))
    assert r.tolist() == pytest.approx([0.1 + 0.9 * 0.80327, 0.1 + 0.9 * 0.56767, 1.0, 0.1 + 0.45], abs=1e-4)
    # off by default (UI-S1's flat kind score), and the distance changes nothing then
    assert semi_online_step_rewards(t([True]), t([True]), t([False]), distance=t([0.0])).tolist() == \
        pytest.approx([0.55])
    with pytest.raises(ValueError):
        SemiOnlineRewardConfig(point_sigma=-1)


def test_matcher_reports_the_distance_to_the_target():
    size = (1000, 1000)
    far = match_action(Click(0.9, 0.5), Click(0.5, 0.5), size=size)
    assert not far.matched and far.distance == pytest.approx(0.4)
    box = (0.4, 0.45, 0.6, 0.55)  # enlarged by 1.2 about its centre: x 0.38..0.62, y 0.44..0.56
    beside = match_action(Click(0.72, 0.60), Click(0.5, 0.5), size=size, target_box=box)
    assert beside.distance == pytest.approx(math.hypot(0.10, 0.04))
    assert match_action(Click(0.5, 0.52), Click(0.5, 0.5), size=size, target_box=box).distance == 0.0
    assert match_action(Type("x"), Type("x"), size=size).distance is None


def _loop_returns(rewards, matched, gamma):
    """The reference definition as a plain loop over one episode."""
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        if matched[t]:
            running = rewards[t] + gamma * running
            out[t] = running
        else:
            running = 0.0
            out[t] = rewards[t]
    return out


def test_returns_stop_at_mismatches_by_hand_and_against_a_loop():
    r = torch.tensor([[1.0, 0.55, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    m = torch.tensor([[True, False, True, True], [True, True, True, False]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    out = semi_online_returns(r, m, mask, gamma=0.5)
    # row 0: G3 = 1, G2 = 1 + .5 = 1.5, G1 = .55 (mismatch), G0 = 1 + .5 * 0 = 1
    # row 1 (3 real steps): G2 = 1, G1 = 1.5, G0 = 1.75, padding 0
    assert out.tolist() == [pytest.approx([1.0, 0.55, 1.5, 1.0]), pytest.approx([1.75, 1.5, 1.0, 0.0])]
    g = torch.Generator().manual_seed(0)
    R = torch.rand(6, 7, generator=g)
    M = torch.rand(6, 7, generator=g) > 0.3
    got = semi_online_returns(R, M, gamma=0.9)
    for b in range(6):
        assert got[b].tolist() == pytest.approx(_loop_returns(R[b].tolist(), M[b].tolist(), 0.9))


def test_dual_level_advantages_by_hand_and_against_a_loop():
    # one group, two samples of a 2-step episode
    ret = torch.tensor([1.5, 1.0, 0.19, 0.19])
    ep = torch.tensor([2.0, 2.0, 0.38, 0.38])
    gid = torch.tensor([0, 0, 0, 0])
    idx = torch.tensor([0, 1, 0, 1])
    a = semi_online_advantages(ret, ep, gid, idx, step_weight=0.5, episode_weight=2.0, normalize_std=False)
    # A_E = ±0.81, A_S(step 0) = ±0.655, A_S(step 1) = ±0.405
    assert a.tolist() == pytest.approx(
        [2 * 0.81 + 0.5 * 0.655, 2 * 0.81 + 0.5 * 0.405, -2 * 0.81 - 0.5 * 0.655, -2 * 0.81 - 0.5 * 0.405]
    )
    # std-normalised, random groups, against a plain loop
    g = torch.Generator().manual_seed(1)
    n = 40
    ret, ep = torch.rand(n, generator=g), torch.rand(n, generator=g)
    gid, idx = torch.randint(0, 3, (n,), generator=g), torch.randint(0, 4, (n,), generator=g)
    got = semi_online_advantages(ret, ep, gid, idx, step_weight=0.7)
    for i in range(n):
        same_g = [j for j in range(n) if gid[j] == gid[i]]
        same_s = [j for j in same_g if idx[j] == idx[i]]

        def norm(vals, v):
            t = torch.tensor(vals)
            std = t.std().item() if len(vals) > 1 else 0.0
            return (v - t.mean().item()) / (std + 1e-6)

        want = norm([ep[j].item() for j in same_g], ep[i].item()) + 0.7 * norm(
            [ret[j].item() for j in same_s], ret[i].item()
        )
        assert got[i].item() == pytest.approx(want, rel=1e-4, abs=1e-4)
    assert torch.equal(semi_online_advantages(ret, ep, gid, idx, step_weight=0.0), grpo_advantages(ep, gid))


# -- the driver ----------------------------------------------------------------------------


def _png(color):
    buf = io.BytesIO()
    Image.new("RGB", (20, 40), color).save(buf, format="PNG")
    return buf.getvalue()


def _episode(eid="rec1", task="t1"):
    acts = [Click(0.5, 0.45), Type("hello"), Scroll("down"), Finish("success")]
    steps = []
    for i, a in enumerate(acts):
        meta = {"target_box": list(BOX), "tap_point": [0.5, 0.45]} if i == 0 else {}
        steps.append(
            Step(i, Observation(_png((i * 40, 10, 200)), 20, 40), a, thought=f"recorded {i}", metadata=meta)
        )
    return Trajectory(
        eid,
        TaskSpec("import:test", task, 0, f"goal of {eid}"),
        tuple(steps),
        success=1.0,
        agent="import:test",
    )


class ScriptedPolicy:
    """Answers from per-sample scripts ({recorded screen index: action}); records what it saw."""

    name = "scripted"

    def __init__(self, scripts):
        self.scripts = scripts  # indexed by the context's slot (the sample's number)
        self.calls = []
        self.histories = []

    def act_batch(self, contexts, pool):
        self.calls.append(len(contexts))
        turns = []
        for c in contexts:
            self.histories.append((c.slot, tuple(c.history)))
            rec_i = _SCREENS.index(c.observation.screenshot)
            a = self.scripts[c.slot][rec_i]
            text = "bad" if isinstance(a, ParseError) else f"act {a.kind}"
            turns.append(
                PolicyTurn(
                    text,
                    a,
                    f"my thought {rec_i}",
                    3,
                    prompt={"sample": c.slot},
                    completion_ids=(1, 2, 3),
                    logprobs=(-0.1, -0.2, -0.3),
                )
            )
        return turns


_SCREENS = [_png((i * 40, 10, 200)) for i in range(4)]


def _run(scripts, patch, **kw):
    ep = _episode()
    pol = ScriptedPolicy(scripts)
    # one sample per run keeps the sample identity trivial
    return pol, run_semi_online(pol, [ep], group_size=1, patch=patch, **kw)


GOOD = {0: Click(0.5, 0.46), 1: Type("Hello"), 2: Swipe(0.5, 0.8, 0.5, 0.2), 3: Finish("success")}


def test_all_matched_episode_succeeds_with_own_history(tmp_path):
    store = Store.open(tmp_path)
    run = store.create_run("semi")
    pol, res = _run([GOOD], PatchConfig(), store=store, run_id=run)
    store.close()
    (t,) = res.trajectories
    assert (
        t.success == 1.0 and t.num_steps == 4 and t.metadata["progress"] == 1.0 and t.metadata["patches"] == 0
    )
    assert all(s.metadata["matched"] and not s.metadata.get("patched") for s in t.steps)
    assert t.steps[-1].terminated and not any(s.terminated for s in t.steps[:-1])
    # the history the policy saw is its own replies, not the recorded ones
    last_hist = pol.histories[-1][1]
    assert [s.thought for s in last_hist] == ["my thought 0", "my thought 1", "my thought 2"]
    assert [s.action for s in last_hist] == [GOOD[0], GOOD[1], GOOD[2]]
    assert len(res.turns) == 4 and all(res.reward_of(tt) == pytest.approx(1.0) for tt in res.turns)
    assert res.turns[0].completion_ids == (1, 2, 3) and res.turns[0].old_logprobs == (-0.1, -0.2, -0.3)
    # stored with its step metadata, readable by the web UI's reader
    back = StoreReader(tmp_path).load_trajectory(t.episode_id)
    assert back.steps == t.steps and back.agent == "semi:scripted"
    assert back.steps[0].metadata["target_box"] == list(BOX)
    # where the recorded step tapped goes beside the recorded action, never as the replayed step's own tap
    assert back.steps[0].metadata["recorded_tap_point"] == [0.5, 0.45] and "tap_point" not in back.steps[0].metadata


@pytest.mark.parametrize("mode,thought", [("recorded", "recorded 1"), ("none", "")])
def test_mismatch_is_patched_with_the_recorded_action(mode, thought):
    script = {**GOOD, 1: Type("something else entirely")}
    pol, res = _run([script], PatchConfig(mode=mode, budget=1))
    (t,) = res.trajectories
    assert t.num_steps == 4 and t.success == 0.0 and t.metadata["patches"] == 1
    assert t.metadata["matched_prefix"] == 1 and t.metadata["progress"] == 0.25
    s1 = t.steps[1]
    # the stored (trained) step is the policy's own reply, marked as patched
    assert s1.action == Type("something else entirely") and s1.metadata["patched"] is True
    assert s1.metadata["matched"] is False and s1.metadata["kind_match"] is True
    assert s1.metadata["recorded_action"] == {
        "kind": "type",
        "text": "hello",
        "x": None,
        "y": None,
        "submit": False,
    }
    # the next turn's history holds the recorded action with the patch thought
    hist = pol.histories[2][1]
    assert hist[1].action == Type("hello") and hist[1].thought == thought
    assert [res.reward_of(tt) for tt in res.turns] == pytest.approx([1.0, 0.55, 1.0, 1.0])
    assert res.turns[1].completion_ids == (1, 2, 3)  # trained on its own completion only


def test_format_can_require_a_thought():
    class NoThought(ScriptedPolicy):
        def act_batch(self, contexts, pool):
            from dataclasses import replace

            return [replace(t, thought="") for t in super().act_batch(contexts, pool)]

    _, res = _run([GOOD], PatchConfig())
    assert res.reward_of(res.turns[0]) == pytest.approx(1.0)
    res = run_semi_online(NoThought([GOOD]), [_episode()],
                          rewards=SemiOnlineRewardConfig(format_requires_thought=True))
    assert [res.reward_of(t) for t in res.turns] == pytest.approx([0.9] * 4)


def test_budget_exhausted_ends_the_episode_at_the_mismatch():
    script = {**GOOD, 1: Click(0.1, 0.1), 2: Scroll("up")}
    _, res = _run([script], PatchConfig(budget=1))
    (t,) = res.trajectories
    assert t.num_steps == 3 and t.metadata["patches"] == 1
    assert t.steps[1].metadata.get("patched") and not t.steps[2].metadata.get("patched")
    assert t.steps[2].terminated and t.steps[2].metadata["matched"] is False
    _, res0 = _run([script], PatchConfig(budget=0))
    assert res0.trajectories[0].num_steps == 2 and res0.trajectories[0].metadata["patches"] == 0
    _, res_inf = _run([{**script, 3: Answer("x")}], PatchConfig(budget=-1))
    assert res_inf.trajectories[0].num_steps == 4 and res_inf.trajectories[0].metadata["patches"] == 3


def test_parse_error_gets_no_format_reward_and_policy_patch_uses_explainer():
    script = {**GOOD, 0: ParseError("malformed", "no json", "bad")}
    asked = []

    def explainer(reqs):
        asked.extend(reqs)
        return [f"because {r.action.kind}" for r in reqs]

    pol, res = _run([script], PatchConfig(mode="policy", budget=2), explainer=explainer)
    (t,) = res.trajectories
    assert t.steps[0].parse_error is not None and t.steps[0].action is None
    assert res.reward_of(res.turns[0]) == 0.0 and res.turns[0].parse_ok is False
    assert len(asked) == 1 and asked[0].action == Click(0.5, 0.45) and asked[0].goal == "goal of rec1"
    assert pol.histories[1][1][0].thought == "because click" and pol.histories[1][1][0].action == Click(
        0.5, 0.45
    )
    with pytest.raises(ValueError, match="explainer"):
        run_semi_online(pol, [_episode()], patch=PatchConfig(mode="policy"))


def test_groups_are_batched_per_turn_and_advantages_line_up():
    eps = [_episode("a", "t1"), _episode("b", "t2")]
    pol = ScriptedPolicy([GOOD] * 6)
    res = run_semi_online(pol, eps, group_size=3, patch=PatchConfig(budget=0))
    assert pol.calls == [6, 6, 6, 6]  # one generation call per turn index for 2 episodes x 3 samples
    assert len({t.group_id for t in res.trajectories}) == 2 and len(res.trajectories) == 6
    adv = semi_online_turn_advantages(res)
    assert adv.shape == (len(res.turns),) and torch.allclose(adv, torch.zeros_like(adv))  # equal samples


def test_turn_advantages_reward_the_sample_that_matched():
    ep = _episode()
    bad = {**GOOD, 1: Type("zzz qqq")}
    pol = ScriptedPolicy([GOOD, bad])
    res = run_semi_online(pol, [ep], group_size=2, patch=PatchConfig(budget=0))
    assert sorted(t.num_steps for t in res.trajectories) == [2, 4]
    adv = semi_online_turn_advantages(res, normalize_std=False)
    good_ep = [t.episode_id for t in res.trajectories if t.num_steps == 4][0]
    for tt, a in zip(res.turns, adv.tolist()):
        if tt.step_index == 1:
            assert (a > 0) == (tt.episode_id == good_ep)


def test_episode_advantage_counts_each_episode_once():
    """A^E normalises episode totals over the group's episodes, not over their turns: a longer
    episode does not weigh more (the paper's definition). Totals 3, 0.55, 1.19, 2.55 over
    3, 1, 2 and 3 turns: mean-only A^E = R - 1.8225 for every turn of each episode."""
    totals, lengths = [3.0, 0.55, 1.19, 2.55], [3, 1, 2, 3]
    ep = torch.tensor([t for t, n in zip(totals, lengths) for _ in range(n)], dtype=torch.float64)
    te = torch.tensor([e for e, n in enumerate(lengths) for _ in range(n)])
    steps = torch.tensor([i for n in lengths for i in range(n)])
    zero = torch.zeros_like(ep)
    gid = torch.zeros_like(te)
    got = semi_online_advantages(zero, ep, gid, steps, step_weight=0.0, normalize_std=False, turn_episode=te)
    want = [t - sum(totals) / 4 for t, n in zip(totals, lengths) for _ in range(n)]
    assert got.tolist() == pytest.approx(want)
    # weighted by turns the mean would be 2.2 and every value differs
    per_turn = semi_online_advantages(zero, ep, gid, steps, step_weight=0.0, normalize_std=False)
    assert per_turn.tolist() != pytest.approx(want)
    with pytest.raises(ValueError, match="share its group"):
        semi_online_advantages(zero, ep + torch.arange(len(ep)), gid, steps, turn_episode=te)
    # a run's turns go through it: two samples of one recording, of 2 and 4 steps
    res = run_semi_online(ScriptedPolicy([GOOD, {**GOOD, 1: Type("zzz qqq")}]), [_episode()], group_size=2,
                          patch=PatchConfig(budget=0))
    adv = semi_online_turn_advantages(res, step_weight=0.0, normalize_std=False)
    total = {t.episode_id: sum(s.reward for s in t.steps) for t in res.trajectories}
    mean = sum(total.values()) / 2
    assert adv.tolist() == pytest.approx([total[t.episode_id] - mean for t in res.turns], abs=1e-6)


def test_bad_recorded_episodes_are_refused():
    ep = _episode()
    no_pixels = Trajectory(
        "x", ep.task, (Step(0, Observation(None, 20, 40, screenshot_ref="0" * 64), Click(0.1, 0.1)),)
    )
    with pytest.raises(ValueError, match="screenshot"):
        run_semi_online(ScriptedPolicy([GOOD]), [no_pixels])
    with pytest.raises(ValueError, match="no steps"):
        run_semi_online(ScriptedPolicy([GOOD]), [Trajectory("y", ep.task, ())])


# -- SOP -------------------------------------------------------------------------------------


def test_sop_aggregation_by_hand():
    r = sop_from_outcomes([EpisodeOutcome("a", 4, 4), EpisodeOutcome("a", 4, 1), EpisodeOutcome("b", 2, 0)])
    assert r.episodes == 3
    assert r.progress == pytest.approx((1 + 0.25 + 0) / 3) and r.success == pytest.approx(1 / 3)
    assert r.per_task["a"].progress == pytest.approx(0.625) and r.per_task["a"].success == 0.5
    assert r.per_task["b"].episodes == 1 and r.per_task["b"].success == 0.0
    assert sop_from_outcomes([]).progress == 0.0


def test_semi_online_eval_stops_at_first_mismatch():
    pol = ScriptedPolicy([GOOD, {**GOOD, 2: Scroll("up")}])
    r = semi_online_eval(pol, [_episode("a", "t1"), _episode("b", "t2")])
    assert r.per_task["t1"].success == 1.0 and r.per_task["t2"].progress == 0.5
    assert r.progress == pytest.approx(0.75) and r.success == 0.5


def test_tiny_model_semi_online_rollout(tiny_model_dir, tmp_path):
    from rl.agents import load_agent
    from rl.patching import ModelExplainer

    real = [_episode("a", "t1")]
    real = [
        Trajectory(
            e.episode_id,
            e.task,
            tuple(
                Step(
                    s.index,
                    Observation(_big_png(i), 224, 448),
                    s.action,
                    thought=s.thought,
                    metadata=s.metadata,
                )
                for i, s in enumerate(e.steps[:2])
            ),
            agent=e.agent,
        )
        for e in real
    ]
    policy = load_agent(tiny_model_dir, temperature=1.0, max_new_tokens=6, keep_chats=True)
    store = Store.open(tmp_path)
    run = store.create_run("semi")
    res = run_semi_online(
        policy,
        real,
        group_size=2,
        patch=PatchConfig(mode="policy", budget=-1),
        explainer=ModelExplainer(policy, max_new_tokens=4),
        store=store,
        run_id=run,
    )
    store.close()
    # an untrained model matches nothing: every step is patched, every turn is kept for training
    assert len(res.trajectories) == 2 and all(t.num_steps == 2 for t in res.trajectories)
    assert all(
        s.metadata["patched"] and "patch_thought" in s.metadata for t in res.trajectories for s in t.steps
    )
    assert len(res.turns) == 4 and all(tt.completion_ids and tt.prompt for tt in res.turns)
    assert all(len(tt.completion_ids) == len(tt.old_logprobs) for tt in res.turns)
    adv = semi_online_turn_advantages(res)
    assert adv.shape == (4,) and torch.isfinite(adv).all()
    assert StoreReader(tmp_path).count_episodes() == 2


def _big_png(i):
    buf = io.BytesIO()
    Image.new("RGB", (224, 448), (i * 50, 100, 30)).save(buf, format="PNG")
    return buf.getvalue()


class ReplayPolicy:
    """Says exactly what the recording did (a perfect policy for the pipeline check)."""

    name = "replay"

    def __init__(self, episodes):
        self.by_screen = {s.observation.screenshot: s.action for e in episodes for s in e.steps}

    def act_batch(self, contexts, pool):
        return [PolicyTurn("x", self.by_screen[c.observation.screenshot]) for c in contexts]


def test_imported_uis1_episodes_replay_through_semi_online(tmp_path):
    from guiagent.datasets import import_dataset
    from rl.replay import load_recorded_episodes

    img = tmp_path / "img"
    img.mkdir()
    for i in range(3):
        Image.new("RGB", (100, 200), (i * 60, 0, 0)).save(img / f"s{i}.png")
    steps = [{"action_content": {"action": "click", "coordinate": [50, 100], "bbox": [40, 90, 60, 110]},
              "screenshot": "img/s0.png"},
             {"action_content": {"action": "type", "text": "hi"}, "screenshot": "img/s1.png"},
             {"action_content": {"action": "terminate", "status": "success"}, "screenshot": "img/s2.png"}]
    (tmp_path / "d.jsonl").write_text(json.dumps({"goal": "g", "is_successful": True, "steps": steps}) + "\n")
    import_dataset("uis1", tmp_path / "d.jsonl", tmp_path / "run")
    eps = load_recorded_episodes(tmp_path / "run")
    assert len(eps) == 1 and eps[0].steps[0].metadata["target"]["boxes"] == [pytest.approx([0.4, 0.45, 0.6, 0.55])]
    r = semi_online_eval(ReplayPolicy(eps), eps)
    assert (r.progress, r.success, r.episodes) == (1.0, 1.0, 1)
    # a tap inside the (enlarged) recorded box but 0.05 from the point still matches
    res = run_semi_online(_ByIndex(eps), eps, patch=PatchConfig(budget=0))
    assert res.trajectories[0].metadata["progress"] == 1.0


class _ByIndex:
    name = "by-index"

    def __init__(self, eps):
        self.script = {s.observation.screenshot: a for s, a in
                       zip(eps[0].steps, [Click(0.55, 0.5), Type("HI"), Finish("success")])}

    def act_batch(self, contexts, pool):
        return [PolicyTurn("x", self.script[c.observation.screenshot]) for c in contexts]


def _record_oracle_demos(tmp_path):
    """Oracle episodes of ``open_app`` and ``settings_turn_on`` recorded in real Chromium into a store
    at ``tmp_path``, read back as recorded episodes."""
    from emulators.pool import InProcessPool
    from rl.agents import OraclePolicy
    from rl.rollout import make_groups, run_rollout
    from rl.replay import load_recorded_episodes

    store = Store.open(tmp_path)
    run = store.create_run("demos", env="webapps")
    with InProcessPool("webapps", num_slots=2) as pool:
        run_rollout(pool, OraclePolicy(), make_groups(["open_app", "settings_turn_on"], [3, 4], 1),
                    store=store, run_id=run, suite="webapps")
    store.close()
    return load_recorded_episodes(tmp_path)


@pytest.mark.slow
@pytest.mark.browser
def test_oracle_demonstrations_replay_perfectly(tmp_path):
    """Oracle demonstrations recorded in real Chromium, then replayed semi-online by a perfect policy."""
    eps = _record_oracle_demos(tmp_path)
    assert len(eps) == 2 and all(e.num_steps >= 1 for e in eps)
    r = semi_online_eval(ReplayPolicy(eps), eps)
    assert r.progress == 1.0 and r.success == 1.0 and set(r.per_task) == {"open_app", "settings_turn_on"}


class _OffCentrePolicy(ReplayPolicy):
    """The recording's actions, but every tap moved to a corner of the element the recording tapped."""

    def __init__(self, episodes):
        self.by_screen = {}
        for e in episodes:
            for s in e.steps:
                box = s.metadata.get("target_box")
                a = s.action
                if isinstance(a, Click) and box:
                    a = Click(box[0] + 0.9 * (box[2] - box[0]), box[1] + 0.9 * (box[3] - box[1]))
                self.by_screen[s.observation.screenshot] = a


@pytest.mark.browser
def test_recorded_browser_taps_carry_their_target_box_and_replays_match_the_whole_element(tmp_path):
    """Oracle demonstrations in real Chromium store the box of each tapped element; a replay that taps
    another point of the same element matches (the oracle taps centres: by the point tolerance alone
    those taps would be misses)."""
    eps = _record_oracle_demos(tmp_path)
    taps = [s for e in eps for s in e.steps if isinstance(s.action, Click)]
    assert len(taps) >= 2
    for s in taps:
        x0, y0, x1, y1 = s.metadata["target_box"]
        assert x0 <= s.action.x <= x1 and y0 <= s.action.y <= y1 and (x1 - x0) * (y1 - y0) < 0.25
    moved = [math.hypot(0.4 * (b[2] - b[0]), 0.4 * (b[3] - b[1])) for b in (s.metadata["target_box"] for s in taps)]
    assert max(moved) > MatchConfig().point_tolerance  # outside the point tolerance, inside the element
    r = semi_online_eval(_OffCentrePolicy(eps), eps)
    assert r.progress == 1.0 and r.success == 1.0


def test_the_trainer_keeps_only_groups_whose_samples_differ():
    """As online (DAPO's dynamic sampling): a semi-online group whose samples all replied alike has no
    advantage anywhere; the trainer counts the informative groups and leaves the others out of the update."""

    from rl.checkpoint import TrainerState
    from rl.config import TrainConfig
    from rl.strategies import SemiOnline
    from rl.strategies.semi_online import semi_informative_groups

    eps = [_episode("a", "t1"), _episode("b", "t2")]
    bad = {**GOOD, 1: Type("zzz qqq")}
    # episode a: samples 0, 1 differ at the typed text; episode b: samples 2, 3 reply alike
    res = run_semi_online(ScriptedPolicy([GOOD, bad, GOOD, GOOD]), eps, group_size=2, patch=PatchConfig(budget=0))
    assert semi_informative_groups(res) == 1
    by_group = {t.group_id: t.steps[0].metadata["recorded_episode"] for t in res.trajectories}
    for keep_all in (False, True):
        cfg = TrainConfig.build(mode="semi-online", data=("x",), filter_zero_variance=not keep_all)
        turns, adv, stats = SemiOnline(cfg, ".", TrainerState()).batch(res, None, 0)
        metrics = stats
        assert len(turns) == len(adv) and stats["groups"] == 2
        if keep_all:
            assert len(turns) == len(res.turns) and stats["groups_kept"] == 2
        else:
            assert {by_group[u.group_id] for u in turns} == {"a"} and stats["groups_equal"] == 1
            assert len(turns) == 2 + 4 and (adv != 0).any()  # both samples of a: 2 and 4 turns
        assert 0.0 < metrics["semi/match_rate"] < 1.0


@pytest.mark.parametrize("scripts, rounds", [([GOOD, {**GOOD, 1: Type("zzz qqq")}], 2), ([GOOD, GOOD], 3)])
def test_semi_online_replays_more_episodes_until_enough_groups_differ(scripts, rounds):
    """--min-informative-groups in a semi-online iteration: another round of recorded episodes while too
    few groups differ, at most --max-sampling-rounds rounds."""
    from rl.checkpoint import TrainerState
    from rl.config import TrainConfig
    from rl.produce import Producer
    from rl.strategies import SemiOnline

    cfg = TrainConfig.build(mode="semi-online", data=("x",), groups_per_iteration=1, group_size=2,
                            min_informative_groups=2, max_sampling_rounds=3)
    produce = Producer(cfg, [], [_episode("a", "t1"), _episode("b", "t2")], ScriptedPolicy(scripts), store=None,
                       run_id="", judge=None, pool=lambda: None)
    from rl.plan import Schedule

    res = produce(0, Schedule(cfg, None, SemiOnline(cfg, ".", TrainerState())).at(0))
    assert len(res.trajectories) == 2 * rounds and len({t.group_id for t in res.trajectories}) == rounds
