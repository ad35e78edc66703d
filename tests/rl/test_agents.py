"""The model-backed turn policy: one batched generation per batch of turns, parsing that never raises."""

from __future__ import annotations

import dataclasses
import io
import threading
import typing

import pytest
from PIL import Image

from grounding import get_format
from guiagent.policy import Generation, SamplingParams
from guiagent.policy.hf import load_transformers
from guiagent.types import Action, Click, Observation, ParseError, Step, TaskSpec
from rl.agents import ModelAgent, TurnContext
from rl.prompting import PromptConfig


def obs(i: int) -> Observation:
    buf = io.BytesIO()
    Image.new("RGB", (112, 112), (i * 20 % 256, 100, 200)).save(buf, format="PNG")
    return Observation(screenshot=buf.getvalue(), width=112, height=112)


def context(goal: str, i: int, history: tuple[Step, ...] = (), slot: int = 0, key: str = "") -> TurnContext:
    return TurnContext(TaskSpec("webapps", "t", 0, goal), history, obs(i), slot, key)


class Echo:
    """A backend that answers every chat with one fixed, valid action text, and records its sampling."""

    version = 3

    def __init__(self, text: str):
        self.text, self.calls = text, []

    def generate(self, chats, sampling=SamplingParams()):
        self.calls.append(sampling)
        return [Generation(text=self.text, token_ids=(1, 2), logprobs=(-0.5, -0.25)) for _ in chats]

    def close(self):
        pass


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return load_transformers(tiny_model_dir, device="cpu")


def test_model_agent_acts_for_a_batch_and_never_raises(backend):
    agent = ModelAgent(backend, get_format("json"), PromptConfig(history_images=2),
                       SamplingParams(max_new_tokens=12, temperature=1.0, seed=0), keep_chats=True)
    history = (Step(0, obs(1), Click(0.25, 0.5)), Step(1, obs(2), None, response="cl1ck",
                                                        parse_error=ParseError("no_action", "none", "cl1ck")))
    turns = agent.act_batch([context("Open the clock", 0), context("Send hi", 5, history, slot=1)], None)
    assert len(turns) == 2
    for t in turns:
        # an untrained model: whatever it says becomes an action or a typed parse error
        assert isinstance(t.action, (ParseError, *typing.get_args(Action))) and t.response
        assert len(t.completion_ids) > 0 and len(t.logprobs) == len(t.completion_ids)
        assert t.prompt and t.prompt[0]["role"] == "system" and t.policy_version == backend.version
    # what a trainer scores is exactly what was generated
    scored = backend.score([t.prompt for t in turns], [list(t.completion_ids) for t in turns])
    for t, s in zip(turns, scored):
        assert max(abs(a - b) for a, b in zip(t.logprobs, s)) < 1e-4
    assert agent.act_batch([], None) == []


def test_a_reply_the_token_budget_cut_says_so(backend):
    """A real model stopped by max_new_tokens: its parse error names the budget; a reply that ended on
    its own does not."""
    agent = ModelAgent(backend, get_format("json"), PromptConfig(),
                       SamplingParams(max_new_tokens=2, temperature=1.0, seed=0))
    [t] = agent.act_batch([context("Open the clock", 0)], None)
    assert isinstance(t.action, ParseError) and len(t.completion_ids) == 2
    assert "cut off at max_new_tokens=2" in t.action.message and "--max-new-tokens" in t.action.message
    [whole] = ModelAgent(Echo("tap somewhere"), get_format("json")).act_batch([context("g", 0)], None)
    assert "max_new_tokens" not in whole.action.message


def test_model_agent_parses_a_well_formed_reply():
    fmt = get_format("json")
    agent = ModelAgent(Echo(fmt.format(Click(0.5, 0.25), (112, 112), "tap")), fmt)
    [t] = agent.act_batch([context("g", 0)], None)
    assert t.action == Click(0.5, 0.25) and t.thought == "tap" and t.policy_version == 3
    assert t.prompt is None and t.completion_ids == (1, 2) and t.logprobs == (-0.5, -0.25)
    [bad] = ModelAgent(Echo("tap somewhere"), fmt).act_batch([context("g", 0)], None)
    assert isinstance(bad.action, ParseError) and bad.response == "tap somewhere"


def test_each_turn_samples_from_its_own_seed_only_when_sampling():
    hot = SamplingParams(max_new_tokens=8, temperature=1.0)
    echo = Echo("{}")
    agent = ModelAgent(echo, get_format("json"), sampling=hot)
    agent.act_batch([context("g", 0)], None)
    assert echo.calls[-1] == hot  # no seed: the agent's sampling as it is
    agent.seed = 7
    ctxs = [context("g", 0, key="g0/m0"),
            context("g", 0, (Step(0, obs(1), Click(0.1, 0.1)),), slot=1, key="g0/m1")]
    agent.act_batch(ctxs, None)
    first = echo.calls[-1].seeds
    assert len(first) == 2 and first[0] != first[1]
    agent.act_batch(ctxs[::-1], None)  # a turn's seed follows its episode and turn, not its batch place
    assert echo.calls[-1].seeds == first[::-1]
    greedy = ModelAgent(echo, get_format("json"), sampling=SamplingParams(temperature=0.0), seed=7)
    greedy.act_batch(ctxs, None)
    assert echo.calls[-1].seeds is None


def test_generation_holds_the_lock():
    lock = threading.Lock()
    held = []

    class Probe(Echo):
        def generate(self, chats, sampling=SamplingParams()):
            held.append(lock.locked())
            return super().generate(chats, sampling)

    agent = ModelAgent(Probe("{}"), get_format("json"), lock=lock)
    agent.act_batch([context("g", 0)], None)
    agent.generate([[{"role": "user", "content": "hi"}]], SamplingParams())
    assert held == [True, True] and not lock.locked()


class Flaky:
    """A backend whose reply to a chat depends on how often that chat was drawn: the first ``bad``
    draws of a chat whose goal starts with "flaky" do not parse; every other draw is a valid tap."""

    version = 1

    def __init__(self, bad: int):
        self.bad, self.calls, self.draws = bad, [], {}

    def generate(self, chats, sampling=SamplingParams()):
        self.calls.append((len(chats), sampling))
        out = []
        for chat in chats:
            goal = str(chat[-1]["content"])
            n = self.draws[goal] = self.draws.get(goal, 0) + 1
            flaky = "flaky" in goal
            text = f"not json, draw {n}" if flaky and n <= self.bad else get_format("json").format(
                Click(0.5, 0.25), (112, 112), "")
            out.append(Generation(text=text, token_ids=(n, n), logprobs=(-0.1 * n, -0.1 * n)))
        return out


def test_an_unparseable_sample_is_drawn_again_from_fresh_streams_up_to_the_budget():
    hot = SamplingParams(max_new_tokens=8, temperature=1.0)
    backend = Flaky(bad=2)
    agent = ModelAgent(backend, get_format("json"), sampling=hot, seed=5, resample_unparseable=3)
    ctxs = [context("flaky goal", 0, key="g0/m0"), context("steady goal", 1, slot=1, key="g0/m1")]
    flaky, steady = agent.act_batch(ctxs, None)
    # the flaky turn acts on its third draw; the two set aside are kept, in order
    assert flaky.action == Click(0.5, 0.25) and flaky.rejected == ("not json, draw 1", "not json, draw 2")
    assert flaky.completion_ids == (3, 3) and flaky.logprobs == (-0.1 * 3, -0.1 * 3)  # the kept reply's tokens
    assert steady.action == Click(0.5, 0.25) and steady.rejected == ()
    # one batch, then only the failing chat is drawn again, each time from a stream of its own
    assert [n for n, _ in backend.calls] == [2, 1, 1]
    seeds = [s.seeds for _, s in backend.calls]
    assert len({seeds[0][0], seeds[1][0], seeds[2][0]}) == 3 and seeds[0][1] not in (seeds[1][0], seeds[2][0])
    # the same turn redrawn in another batch draws from the same streams
    again = ModelAgent(Flaky(bad=2), get_format("json"), sampling=hot, seed=5, resample_unparseable=3)
    again.act_batch(ctxs[:1], None)
    assert [s.seeds for _, s in again.backend.calls] == [(seeds[0][0],), seeds[1], seeds[2]]


def test_a_reply_still_unparseable_after_the_budget_is_a_parse_error_and_greedy_never_redraws():
    hot = SamplingParams(max_new_tokens=8, temperature=1.0)
    agent = ModelAgent(Flaky(bad=5), get_format("json"), sampling=hot, seed=5, resample_unparseable=2)
    [t] = agent.act_batch([context("flaky goal", 0, key="k")], None)
    assert isinstance(t.action, ParseError) and t.response == "not json, draw 3"
    assert t.rejected == ("not json, draw 1", "not json, draw 2")
    greedy = ModelAgent(Flaky(bad=5), get_format("json"), sampling=SamplingParams(temperature=0.0),
                        seed=5, resample_unparseable=2)
    [g] = greedy.act_batch([context("flaky goal", 0, key="k")], None)
    assert isinstance(g.action, ParseError) and g.rejected == () and len(greedy.backend.calls) == 1
    off = ModelAgent(Flaky(bad=5), get_format("json"), sampling=hot, seed=5)
    [o] = off.act_batch([context("flaky goal", 0, key="k")], None)
    assert isinstance(o.action, ParseError) and o.rejected == () and len(off.backend.calls) == 1
    # no run seed, but a seeded sampling: the redraws get streams of their own from it, not its repeat
    batch_seeded = ModelAgent(Flaky(bad=5), get_format("json"), sampling=dataclasses.replace(hot, seed=9),
                              resample_unparseable=2)
    batch_seeded.act_batch([context("flaky goal", 0, key="k")], None)
    [first, *redraws] = [s for _, s in batch_seeded.backend.calls]
    assert first.seeds is None and len({r.seeds for r in redraws}) == 2 and all(r.seeds for r in redraws)
    with pytest.raises(ValueError, match="resample_unparseable"):
        ModelAgent(Flaky(bad=0), get_format("json"), resample_unparseable=-1)


def test_a_redrawn_turn_of_a_real_model_is_scored_as_the_reply_it_kept(backend):
    """An untrained model at temperature 1 rarely writes a parseable action: every reply set aside
    is unparseable, and the kept reply's tokens and log-probs are what the learner scores."""
    agent = ModelAgent(backend, get_format("json"), PromptConfig(),
                       SamplingParams(max_new_tokens=12, temperature=1.0), keep_chats=True, seed=3,
                       resample_unparseable=2)
    turns = agent.act_batch([context("Open the clock", 0, key="a"), context("Send hi", 5, slot=1, key="b")], None)
    fmt = get_format("json")
    assert any(t.rejected for t in turns)
    for t in turns:
        assert all(isinstance(fmt.parse(r, (112, 112)), ParseError) for r in t.rejected)
        assert len(t.rejected) == 2 or not isinstance(t.action, ParseError)
    scored = backend.score([t.prompt for t in turns], [list(t.completion_ids) for t in turns])
    for t, s in zip(turns, scored):
        assert max(abs(a - b) for a, b in zip(t.logprobs, s)) < 1e-4


def test_random_policy_taps_only_and_checks_its_mix():
    from rl.agents import RandomPolicy

    taps = RandomPolicy(seed=1, actions="taps")
    acts = [t.action for t in taps.act_batch([None] * 200, None)]  # type: ignore[list-item]
    assert all(isinstance(a, Click) and 0.0 <= a.x <= 1.0 and 0.0 <= a.y <= 1.0 for a in acts)
    assert len({(a.x, a.y) for a in acts}) > 150, "random points, not one spot"
    mixed = [t.action for t in RandomPolicy(seed=1).act_batch([None] * 200, None)]  # type: ignore[list-item]
    assert {type(a).__name__ for a in mixed} > {"Click"}, "the default mix still types, scrolls and swipes"
    with pytest.raises(ValueError, match="actions must be one of"):
        RandomPolicy(actions="swipes")


class Recorder(Echo):
    """:class:`Echo` that keeps every chat it is asked to continue."""

    def __init__(self, text: str):
        super().__init__(text)
        self.chats: list = []

    def generate(self, chats, sampling=SamplingParams()):
        self.chats.extend(chats)
        return super().generate(chats, sampling)


def _images(chat) -> list[bytes]:
    return [part["image"] for m in chat for part in (m["content"] if isinstance(m["content"], list) else [])
            if isinstance(part, dict) and part.get("type") == "image"]


def _text(chat) -> str:
    return "".join(m["content"] if isinstance(m["content"], str) else
                   "".join(p.get("text", "") for p in m["content"] if isinstance(p, dict)) for m in chat)


def test_hidden_parts_of_the_screen_never_reach_the_prompt_and_replies_still_parse_on_it():
    from guiagent.types import ClickElement, Mark

    fmt = get_format("marks", names="plain", refer="name")
    marks = (Mark(0, "link", "Calendar", (0.0, 0.0, 0.5, 0.1)), Mark(1, "link", "Clock", (0.5, 0.0, 1.0, 0.1)))
    screen = dataclasses.replace(obs(3), marks=marks)
    history = (Step(0, dataclasses.replace(obs(1), marks=marks), Click(0.1, 0.1)),)
    ctx = TurnContext(TaskSpec("webapps", "open_app", 0, "Open the Clock app."), history, screen, 0, "")
    reply = '{"action": {"kind": "click_element", "name": "Clock"}}'
    seen = Recorder(reply)
    [full] = ModelAgent(seen, fmt, PromptConfig(history_images=2)).act_batch([ctx], None)
    assert screen.screenshot in _images(seen.chats[-1]) and "Calendar" in _text(seen.chats[-1])
    for hide in (("screenshot",), ("elements",), ("screenshot", "elements")):
        rec = Recorder(reply)
        [turn] = ModelAgent(rec, fmt, PromptConfig(history_images=2), hide=hide).act_batch([ctx], None)
        images, text = _images(rec.chats[-1]), _text(rec.chats[-1])
        assert len(images) == 2 and "Open the Clock app." in text
        if "screenshot" in hide:  # every image grey, the current one and the history's
            assert screen.screenshot not in images and history[0].observation.screenshot not in images
            assert all(Image.open(io.BytesIO(b)).getcolors() == [(112 * 112, (128, 128, 128))] for b in images)
        else:
            assert screen.screenshot in images
        assert ("Calendar" in text) is ("elements" not in hide)
        # the reply names an element of the full screen: parsed against it, as without hiding
        assert turn.action == full.action and isinstance(turn.action, ClickElement)
    with pytest.raises(ValueError, match="cannot hide pixels"):
        ModelAgent(Echo(reply), fmt, hide=("pixels",))
