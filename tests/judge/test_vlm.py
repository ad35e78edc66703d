"""The VLM judge end to end: prompts, evidence mode, cache, budget, rate limit, store, the tiny model.

Most tests drive the judge with :class:`GoalDirectedJudge`, a deterministic
policy (it implements the Policy protocol: chats in, generations out) whose
answer is written in the task goal, e.g. ``"Turn on Wi-Fi [reply: success 0.9
cite 1,7 pick 0,2]"``. The last tests use the real tiny Qwen2.5-VL.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from PIL import Image

from guiagent.policy.base import BackendError, Generation, SamplingParams, check_chat, to_pil
from guiagent.types import Click, Finish, Observation, ParseError, Step, TaskSpec, Trajectory, Type
from judge.vlm import (
    BUDGET_EXHAUSTED, JudgeConfig, Verdict, VLMJudge, disagreeing_episodes, judge_disagreement, store_verdict,
)
from judge.vlm_cache import RateLimiter, VerdictCache
from judge.vlm_prompt import prepare_image


class GoalDirectedJudge:
    """A judge model whose answers are spelled out in the goal it reads (deterministic)."""

    name = "goal-directed"

    def __init__(self, fail: bool = False) -> None:
        self.version = 0
        self.fail = fail
        self.chats: list = []
        self.generate_calls = 0

    def generate(self, chats, sampling: SamplingParams = SamplingParams()):
        self.generate_calls += 1
        if self.fail:
            raise BackendError("judge server unreachable after 3 retries")
        out = []
        for chat in chats:
            check_chat(chat)
            self.chats.append(chat)
            text = "\n".join(p["text"] for m in chat if not isinstance(m["content"], str)
                             for p in m["content"] if p["type"] == "text")
            goal = re.search(r"^Task: (.*)$", text, re.M).group(1)
            directive = re.search(r"\[reply: (.*)\]", goal)
            d = directive.group(1) if directive else "success 1"
            if '{"steps"' in text:  # evidence mode's first call
                pick = re.search(r"pick ([\d,]+)", d)
                out.append(Generation(text=f'{{"steps": [{pick.group(1) if pick else ""}]}}'))
                continue
            raw = re.search(r"raw=(.*)", d)
            if raw:
                out.append(Generation(text=raw.group(1).replace("\\n", "\n")))
                continue
            verdict, score = re.match(r"(success|failure) ([\d.]+)", d).groups()
            cite = re.search(r"cite ([\d,]+)", d)
            out.append(Generation(text=(
                f'Looking at the final screen.\n```json\n{{"success": {str(verdict == "success").lower()}, '
                f'"score": {score}, "reason": "judged {verdict}", '
                f'"evidence_steps": [{cite.group(1) if cite else ""}]}}\n```')))
        return out

    def close(self) -> None:
        pass


def png(color: tuple[int, int, int], size: tuple[int, int] = (64, 48), dot: int = 0) -> bytes:
    im = Image.new("RGB", size, color)
    im.putpixel((0, 0), (dot, dot, dot))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def make_traj(goal: str = "Turn on Wi-Fi", *, n: int = 4, success: float = 1.0, episode_id: str = "ep",
              size: tuple[int, int] = (64, 48), final: bool = True) -> Trajectory:
    steps = []
    for i in range(n):
        obs = Observation(screenshot=png((40 * i % 256, 100, 200), size), width=size[0], height=size[1])
        if i == 1:
            steps.append(Step(i, obs, None, response="click(??",
                              parse_error=ParseError("malformed", "bad call")))
        elif i == 2:
            steps.append(Step(i, obs, Type(text="hello world", x=0.2, y=0.3),
                              thought="type the greeting " * 20,
                              action_error="no editable element at (0.2, 0.3)"))
        elif i == n - 1:
            steps.append(Step(i, obs, Finish(status="success"), thought="done"))
        else:
            steps.append(Step(i, obs, Click(x=0.5, y=0.25), thought="open the settings"))
    final_obs = Observation(screenshot=png((0, 0, 0), size), width=size[0], height=size[1]) if final else None
    return Trajectory(episode_id=episode_id, task=TaskSpec("webapps", "wifi", 0, goal), steps=tuple(steps),
                      success=success, final_observation=final_obs)


def images_of(chat) -> list[bytes]:
    return [p["image"] for m in chat if not isinstance(m["content"], str) for p in m["content"]
            if p["type"] == "image"]


def text_of(chat) -> str:
    return "\n".join(p["text"] for m in chat if not isinstance(m["content"], str) for p in m["content"]
                     if p["type"] == "text")


# -- prompts and verdicts ------------------------------------------------------------------------


def test_last_k_shows_goal_history_last_k_screens_and_final_screen():
    policy = GoalDirectedJudge()
    traj = make_traj("Turn on Wi-Fi [reply: success 0.9 cite 1,7]")
    v = VLMJudge(policy, JudgeConfig(k=2, thought_chars=12)).judge(traj)
    assert (v.success, v.score, v.reason, v.error) == (True, 0.9, "judged success", None)
    assert v.cited_steps == (1,)  # step 7 does not exist
    assert v.shown_steps == (2, 3) and v.calls == 1 and not v.cached
    assert v.judge == "vlm" and v.model == "goal-directed" and "```json" in v.raw
    (chat,) = policy.chats
    text = text_of(chat)
    assert "Task: Turn on Wi-Fi" in text
    assert "Step 0: click(x=0.5, y=0.25) | thought: open the set…" in text
    assert "Step 1: (no action) | unparsable output (malformed: bad call)" in text
    assert "ERROR: no editable element at (0.2, 0.3)" in text and "type(text='hello world'" in text
    assert "Step 3: finish(status='success')" in text
    assert "Step 2 (the screen before" in text and "Step 0 (the screen before" not in text
    shots = images_of(chat)
    assert shots == [traj.steps[2].observation.screenshot, traj.steps[3].observation.screenshot,
                     traj.final_observation.screenshot]


def test_failure_verdict_and_a_missing_final_screen():
    policy = GoalDirectedJudge()
    v = VLMJudge(policy, JudgeConfig(k=1)).judge(make_traj("Send the note [reply: failure 0.2]", final=False))
    assert (v.success, v.score) == (False, 0.2)
    assert len(images_of(policy.chats[0])) == 1  # the last step's screen stands for the final screen


def test_evidence_mode_picks_steps_from_the_text_history_in_a_first_call():
    policy = GoalDirectedJudge()
    judge = VLMJudge(policy, JudgeConfig(mode="evidence", k=2))
    traj = make_traj("Find the price [reply: success 0.8 pick 2,0]")
    v = judge.judge(traj)
    assert v.calls == 2 and judge.calls_made == 2
    assert v.shown_steps == (0, 2) and v.selection_raw == '{"steps": [2,0]}'
    first, second = policy.chats
    assert images_of(first) == [] and "at most 2 step numbers" in text_of(first)
    assert images_of(second) == [traj.steps[0].observation.screenshot, traj.steps[2].observation.screenshot,
                                 traj.final_observation.screenshot]
    # an unusable choice falls back to the last k screens
    v = judge.judge(make_traj("Find the price [reply: success 0.8 pick 9]"))
    assert v.shown_steps == (2, 3) and v.error is None


def test_large_screenshots_are_downscaled_small_ones_pass_unchanged():
    small = png((1, 2, 3), (40, 30))
    assert prepare_image(small, 40 * 30) is small
    big = png((1, 2, 3), (400, 300))
    w, h = to_pil(prepare_image(big, 10_000)).size
    assert w * h <= 10_000 and abs(w / h - 4 / 3) < 0.05
    with pytest.raises(ValueError, match="not a readable image"):
        prepare_image(b"not an image", 10_000)
    policy = GoalDirectedJudge()
    VLMJudge(policy, JudgeConfig(k=1, max_image_pixels=5_000)).judge(make_traj(size=(300, 200)))
    assert all(to_pil(im).size[0] * to_pil(im).size[1] <= 5_000 for im in images_of(policy.chats[0]))


def test_malformed_output_is_a_verdict_with_an_error():
    v = VLMJudge(GoalDirectedJudge()).judge(make_traj("Open maps [reply: raw=I think it might have worked]"))
    assert v.success is None and v.score is None and v.reward is None
    assert v.error == "no verdict found in the judge output" and v.raw == "I think it might have worked"
    v = VLMJudge(GoalDirectedJudge()).judge(make_traj("Open maps [reply: raw=Status: success\\nFAILURE]"))
    assert v.success is True  # the labelled line decides; the stray keyword does not


def test_backend_failure_is_a_verdict_with_an_error_and_is_not_cached(tmp_path):
    policy = GoalDirectedJudge(fail=True)
    judge = VLMJudge(policy, JudgeConfig(cache_dir=str(tmp_path)))
    v = judge.judge(make_traj())
    assert v.success is None and v.error.startswith("backend error: BackendError: judge server unreachable")
    assert judge.judge(make_traj()).cached is False and policy.generate_calls == 2


def test_broken_screenshot_or_input_gives_an_error_and_refunds_the_budget():
    traj = make_traj()
    broken = replace(traj, steps=traj.steps[:-1] + (replace(traj.steps[-1], observation=Observation(
        screenshot=b"\x89PNG garbage", width=10, height=10)),))
    judge = VLMJudge(GoalDirectedJudge(), JudgeConfig(budget=1))
    v = judge.judge(broken)
    assert v.error.startswith("cannot build the judge prompt") and judge.calls_made == 0
    not_a_traj: Any = "not a trajectory"
    assert judge.judge(not_a_traj).error.startswith("cannot judge this input")
    assert judge.judge(traj).error is None and judge.calls_made == 1


def test_identical_trajectories_in_a_batch_are_judged_once():
    policy = GoalDirectedJudge()
    a, b = make_traj("A [reply: success 0.9]"), make_traj("B [reply: failure 0.1]")
    verdicts = VLMJudge(policy).judge_batch([a, b, a])
    assert [v.success for v in verdicts] == [True, False, True]
    assert len(policy.chats) == 2 and policy.generate_calls == 1


def test_verdict_round_trips_through_a_dict():
    v = Verdict(True, 0.75, "ok", (1, 2), raw="{...}", judge="vlm", model="m", shown_steps=(2,), calls=1)
    assert Verdict.from_dict(v.to_dict()) == v
    assert Verdict.from_dict({**v.to_dict(), "unknown_field": 1}) == v


@pytest.mark.parametrize("kwargs,message", [
    ({"mode": "all"}, "mode must be"), ({"k": 0}, "k must be"), ({"temperature": -1}, "temperature"),
    ({"budget": -1}, "budget"), ({"rate_limit": 0}, "rate_limit"),
    ({"max_image_pixels": 10}, "max_image_pixels"),
    ({"name": ""}, "name"),
])
def test_config_rejects_bad_values_with_a_clear_message(kwargs, message):
    with pytest.raises(ValueError, match=message):
        JudgeConfig(**kwargs)


# -- cache ---------------------------------------------------------------------------------------


def test_cache_hit_returns_the_stored_verdict_without_calling_the_policy(tmp_path):
    cfg = JudgeConfig(k=2, cache_dir=str(tmp_path))
    policy = GoalDirectedJudge()
    traj = make_traj("Turn on Wi-Fi [reply: success 0.9 cite 2]")
    first = VLMJudge(policy, cfg).judge(traj)
    again = VLMJudge(policy, cfg).judge(traj)  # a new judge on the same cache directory (a restarted run)
    assert policy.generate_calls == 1
    assert again.cached and not first.cached and again.calls == 0
    assert replace(again, cached=False, calls=1) == first
    # a different judge name does not change the answer: still a hit, reported under the new name
    renamed = VLMJudge(policy, replace(cfg, name="other")).judge(traj)
    assert renamed.cached and renamed.judge == "other"


def test_cache_misses_when_content_config_or_model_changes(tmp_path):
    cfg = JudgeConfig(k=2, cache_dir=str(tmp_path))
    policy = GoalDirectedJudge()
    judge = VLMJudge(policy, cfg)
    traj = make_traj()
    base = judge.key(traj)
    judge.judge(traj)
    # one screenshot byte: a pixel changed in an early step the judge is not even shown
    step0 = traj.steps[0]
    changed = replace(traj, steps=(replace(step0, observation=replace(step0.observation, screenshot=png(
        (0, 100, 200), dot=1))),) + traj.steps[1:])
    assert judge.judge(changed).cached is False
    # one raw byte anywhere in the bytes changes the key
    raw = bytearray(traj.final_observation.screenshot)
    raw[-5] ^= 1
    flipped = replace(traj.final_observation, screenshot=bytes(raw))
    assert judge.key(replace(traj, final_observation=flipped)) != base
    assert judge.key(replace(traj, task=replace(traj.task, goal="Turn off Wi-Fi"))) != base
    assert judge.key(replace(traj, steps=traj.steps[:-1] + (replace(traj.steps[-1], thought="x"),))) != base
    assert VLMJudge(policy, replace(cfg, k=3)).key(traj) != base
    assert VLMJudge(policy, replace(cfg, mode="evidence")).key(traj) != base
    assert VLMJudge(policy, replace(cfg, model_id="judge-7b@rev2")).key(traj) != base
    policy.version = 1  # the judge's weights changed
    assert judge.key(traj) != base
    policy.version = 0
    # what does not shape the answer keeps the key
    assert VLMJudge(policy, replace(cfg, budget=3, rate_limit=5.0, batch_size=2)).key(traj) == base
    assert judge.key(replace(traj, episode_id="other", success=0.0)) == base
    assert len(VerdictCache(tmp_path)) == 2


def test_cache_is_shared_safely_by_concurrent_processes(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from judge.vlm_cache import VerdictCache
        cache = VerdictCache({str(tmp_path)!r})
        tag = sys.argv[1]
        for i in range(60):
            cache.put(f"{{tag}}-{{i}}", {{"success": True, "score": i / 60, "writer": tag}})
            assert cache.get(f"{{tag}}-{{i}}")["writer"] == tag
        cache.put("shared", {{"writer": tag}})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, tag], cwd=str(__import__("pathlib").Path(
        __file__).parents[2])) for tag in ("a", "b", "c")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    cache = VerdictCache(tmp_path)
    assert len(cache) == 181
    assert cache.get("b-59") == {"success": True, "score": 59 / 60, "writer": "b"}
    assert cache.get("shared")["writer"] in ("a", "b", "c")
    # a damaged entry reads as a miss
    cache._con.execute("UPDATE verdicts SET verdict = '{broken' WHERE key = 'a-0'")
    assert cache.get("a-0") is None and cache.get("missing") is None


# -- budget and rate limit -----------------------------------------------------------------------


def test_budget_exhaustion_gives_error_verdicts_and_cache_hits_stay_free(tmp_path):
    policy = GoalDirectedJudge()
    judge = VLMJudge(policy, JudgeConfig(budget=2, cache_dir=str(tmp_path)))
    trajs = [make_traj(f"task {i} [reply: success 0.9]", episode_id=str(i)) for i in range(3)]
    verdicts = judge.judge_batch(trajs)
    assert [v.error for v in verdicts] == [None, None, BUDGET_EXHAUSTED]
    assert verdicts[2].success is None and verdicts[2].calls == 0 and len(policy.chats) == 2
    assert judge.judge(trajs[0]).cached  # already judged: no budget needed
    assert judge.judge(trajs[2]).error == BUDGET_EXHAUSTED
    # evidence mode needs two calls a trajectory: with three left, the second one is refused
    judge = VLMJudge(GoalDirectedJudge(), JudgeConfig(mode="evidence", budget=3))
    verdicts = judge.judge_batch(trajs[:2])
    assert [v.error for v in verdicts] == [None, BUDGET_EXHAUSTED] and judge.budget.remaining == 1


def test_rate_limiter_spaces_calls_across_threads():
    limiter = RateLimiter(rate=50.0, burst=1)
    t0 = time.monotonic()
    for _ in range(6):
        limiter.acquire()
    assert time.monotonic() - t0 >= 5 / 50 * 0.95
    limiter = RateLimiter(rate=50.0, burst=3)
    stamps: list[float] = []
    lock = threading.Lock()

    def worker():
        for _ in range(3):
            limiter.acquire()
            with lock:
                stamps.append(time.monotonic())

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stamps.sort()
    assert len(stamps) == 12
    assert stamps[2] - t0 < 0.05  # the burst goes at once
    assert stamps[-1] - t0 >= (12 - 3) / 50 * 0.95  # the rest at 50 per second
    assert RateLimiter(None).acquire() == 0.0


def test_judge_calls_are_rate_limited():
    judge = VLMJudge(GoalDirectedJudge(), JudgeConfig(rate_limit=40.0, batch_size=2))
    t0 = time.monotonic()
    verdicts = judge.judge_batch([make_traj(f"t{i}", episode_id=str(i)) for i in range(5)])
    assert time.monotonic() - t0 >= 4 / 40 * 0.95
    assert all(v.error is None for v in verdicts)


# -- the store -----------------------------------------------------------------------------------


def test_store_verdict_and_judge_vs_rule_disagreement(tmp_path):
    from guiagent.store import Store, StoreReader

    # the task's rule says success for a and b, failure for c and d; the judge disagrees on b and c
    spec = {"a": (1.0, "success 0.9"), "b": (1.0, "failure 0.2"), "c": (0.0, "success 0.7"),
            "d": (0.0, "failure 0.0"), "e": (0.0, "raw=unclear")}
    trajs = [make_traj(f"task {eid} [reply: {reply}]", success=succ, episode_id=eid)
             for eid, (succ, reply) in spec.items()]
    verdicts = VLMJudge(GoalDirectedJudge(), JudgeConfig(name="vlm-test")).judge_batch(trajs)
    with Store.open(tmp_path) as store:
        run = store.create_run("judge-test")
        store.write_trajectories(run, trajs)
        ids = [store_verdict(store, t.episode_id, v) for t, v in zip(trajs, verdicts)]
    assert len(set(ids)) == 5
    assert disagreeing_episodes(trajs, verdicts) == ("b", "c")
    with StoreReader(tmp_path) as reader:
        (j,) = reader.judgements("c")
        assert (j.judge, j.score, j.reason, j.step) == ("vlm-test", 0.7, "judged success", None)
        assert j.verdict["success"] is True and j.verdict["shown_steps"] == [1, 2, 3]
        (j,) = reader.judgements("e")
        assert j.score is None and j.reason == "judge missing (garbage): no verdict found in the judge output"
        report = judge_disagreement(reader, run, judge="vlm-test")
        assert report.judged == 5
        assert sorted(e.episode_id for e in report.episodes) == ["b", "c"]
        assert report.false_positives == ("c",) and report.false_negatives == ("b",)
        assert report.rate == pytest.approx(2 / 5)
        assert judge_disagreement(reader, run, judge="nobody").rate is None


# -- the real tiny model -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    from guiagent.policy.hf import load_transformers
    from guiagent.policy.tiny import TinyModelSpec, build_tiny_model

    out = tmp_path_factory.mktemp("tiny-judge")
    build_tiny_model(TinyModelSpec(size="tiny", seed=0), out)
    policy = load_transformers(str(out), device="cpu", threads=2)
    yield policy
    policy.close()


def test_tiny_model_judges_end_to_end_and_caches(tiny_policy, tmp_path):
    cfg = JudgeConfig(k=2, max_new_tokens=12, max_image_pixels=56 * 56, cache_dir=str(tmp_path))
    judge = VLMJudge(tiny_policy, cfg)
    trajs = [make_traj("Turn on Wi-Fi", episode_id="x"), make_traj("Open the notes app", episode_id="y")]
    verdicts = judge.judge_batch(trajs)
    for v in verdicts:
        # a random model's text is no verdict, but it is data: an error, never an exception
        assert isinstance(v.raw, str) and v.calls == 1 and v.shown_steps == (2, 3)
        assert (v.error is None) == (v.success is not None)
        assert v.model == tiny_policy.name
    again = VLMJudge(tiny_policy, cfg).judge_batch(trajs)
    assert all(v.cached for v in again) and [v.raw for v in again] == [v.raw for v in verdicts]
    # greedy decoding: the same trajectory judged afresh gives the same text
    fresh = VLMJudge(tiny_policy, replace(cfg, cache_dir=None)).judge(trajs[0])
    assert fresh.raw == verdicts[0].raw and not fresh.cached


def test_tiny_model_in_evidence_mode(tiny_policy):
    cfg = JudgeConfig(mode="evidence", k=2, max_new_tokens=8, max_image_pixels=56 * 56)
    judge = VLMJudge(tiny_policy, cfg)
    v = judge.judge(make_traj("Set an alarm for 7 am"))
    assert v.calls == 2 and judge.calls_made == 2
    assert 1 <= len(v.shown_steps) <= 2 and set(v.shown_steps) <= {0, 1, 2, 3}
    assert isinstance(v.selection_raw, str)
