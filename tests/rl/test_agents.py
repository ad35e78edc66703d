"""The model-backed turn policy: one batched generation per batch of turns, parsing that never raises."""

from __future__ import annotations

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
