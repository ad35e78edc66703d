"""The real vLLM engine (vLLM's CPU build) through the project's own backend and learner.

These run inside the CPU vLLM environment (``bash scripts/vllm_env.sh``, then
``.venv-vllm/bin/python -m pytest -m vllm_engine tests/vllm``); elsewhere the module is skipped with one
line. One engine serves the module (its core in this process: ``colocate=True``), fp32 like the CPU
learner, so engine and learner log-probs agree to float rounding when they hold the same weights.
"""

from __future__ import annotations

import io
import logging

import pytest

try:
    import vllm  # noqa: F401
except ImportError:
    pytest.skip("the CPU vLLM environment is absent: bash scripts/vllm_env.sh, then "
                ".venv-vllm/bin/python -m pytest -m vllm_engine tests/vllm", allow_module_level=True)

import torch  # noqa: E402

from grounding import FORMAT_NAMES, get_format  # noqa: E402
from guiagent.policy import SamplingParams, message  # noqa: E402
from guiagent.types import Action, Click, Observation, ParseError, Step, TaskSpec  # noqa: E402

pytestmark = pytest.mark.vllm_engine


def png(w: int, h: int, seed: int) -> bytes:
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    buf = io.BytesIO()
    Image.fromarray((torch.rand((h, w, 3), generator=g) * 255).to(torch.uint8).numpy()).save(buf, format="PNG")
    return buf.getvalue()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def pair(tiny_model_dir):
    """(learner, engine, what the engine said while starting): the tiny model in fp32 on both sides, the
    engine given the learner's encoder, asked for sleep mode (the CPU build has none)."""
    from guiagent.policy.hf import load_transformers
    from guiagent.policy.vllm_backend import VLLMPolicy

    learner = load_transformers(tiny_model_dir, device="cpu", precision="fp32")
    said = _Lines()
    logging.getLogger("guiagent.policy.vllm_backend").addHandler(said)
    try:
        engine = VLLMPolicy(tiny_model_dir, colocate=True, enable_sleep_mode=True, gpu_memory_utilization=0.05,
                            max_model_len=4096, enforce_eager=True, dtype="float32", max_images=2, seed=0,
                            encoder=learner.encoder)
    finally:
        logging.getLogger("guiagent.policy.vllm_backend").removeHandler(said)
    yield learner, engine, said.lines
    engine.close()


def _restore(learner, engine, state):
    learner.load_state_dict(state)
    learner.mark_updated()
    engine.push_weights(learner.named_weights())


def _learner_rows(learner, encs, comps):
    sb = learner.score_encoded(encs, comps)
    return [sb.logprobs[i][sb.mask[i]].tolist() for i in range(len(comps))]


def _max_diff(a_rows, b_rows):
    return max(abs(a - b) for a, b_ in zip(a_rows, b_rows) for a, b in zip(a, b_))


def obs(i: int) -> Observation:
    return Observation(screenshot=png(112, 112, i), width=112, height=112)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_generates_from_screenshots_in_every_action_format(pair, fmt):
    """2a: the agent's chats (the current screenshot and one from the history) through the engine in each
    action format; every reply becomes an action or a typed parse error, with the engine's token ids and
    log-probs, which the learner's own scoring of the same encoding reproduces."""
    from rl.agents import ModelAgent, TurnContext
    from rl.prompting import PromptConfig

    learner, engine, _ = pair
    agent = ModelAgent(engine, get_format(fmt), PromptConfig(history_images=2),
                       SamplingParams(max_new_tokens=16, temperature=1.0, seed=0), keep_chats=True, seed=1)
    history = (Step(0, obs(1), Click(0.25, 0.5)),)
    spec = TaskSpec("webapps", "t", 0, "Open the clock")
    turns = agent.act_batch([TurnContext(spec, (), obs(0), 0, "a"), TurnContext(spec, history, obs(2), 1, "b")])
    assert [len(t.encoded.images) for t in turns] == [1, 2]  # the history's screenshot went in too
    for t in turns:
        assert isinstance(t.action, (Action, ParseError))
        assert 0 < len(t.completion_ids) == len(t.logprobs)
    rows = _learner_rows(learner, [t.encoded for t in turns], [list(t.completion_ids) for t in turns])
    assert _max_diff([t.logprobs for t in turns], rows) <= 1e-3


def test_token_in_token_out(pair):
    """2b: the learner scores the ids the engine sampled, on the prompt ids the engine saw; a reply whose
    decode-then-encode round trip changes its ids is scored as sampled, and its re-tokenization is not what
    was sampled."""
    from rl.loop import TrainTurn
    from rl.update import rescore

    learner, engine, _ = pair
    chats = [[message("user", png(84, 84, 10 + i), f"Goal: item {i}.")] for i in range(16)]
    encs = [engine.encoder.encode(c) for c in chats]
    gens = engine.generate_encoded(encs, SamplingParams(max_new_tokens=24, temperature=1.0, seed=5))
    tok = engine.tokenizer
    drift = [(e, g) for e, g in zip(encs, gens)
             if tok.encode(tok.decode(g.token_ids), add_special_tokens=False) != list(g.token_ids)]
    assert drift, "no reply whose round trip through text changes its ids"
    assert all(g.prompt_tokens == len(e.input_ids) for e, g in zip(encs, gens))  # the engine saw the encoding
    turns = [TrainTurn(f"g{i}", f"e{i}", 0, None, g.token_ids, g.logprobs, 0, False, encoded=e)
             for i, (e, g) in enumerate(drift)]
    rows, stats = rescore(learner, turns, micro_batch_size=4)
    assert [len(r) for r in rows] == [len(g.token_ids) for _, g in drift]
    assert _max_diff([g.logprobs for _, g in drift], rows) <= 1e-3 and stats["mismatch_mean_abs"] <= 1e-3
    e, g = drift[0]
    retok = tok.encode(tok.decode(g.token_ids), add_special_tokens=False)
    [as_text] = _learner_rows(learner, [e], [retok])
    assert len(retok) != len(g.token_ids) or _max_diff([g.logprobs], [as_text]) > 1e-2


@pytest.mark.parametrize("lora", [False, True])
def test_weight_sync_proven_by_log_probs(pair, tiny_model_dir, lora):
    """2c: after an update the engine's log-probs of fixed replies differ from the learner's; after the
    sync they equal them (fp32, max |diff| <= 1e-3); a LoRA learner's adapters go in merged."""
    from guiagent.policy.hf import LoraSettings, load_transformers
    from guiagent.policy.vllm_backend import ColocatedSync

    base, engine, _ = pair
    learner = base
    if lora:
        learner = load_transformers(tiny_model_dir, device="cpu", precision="fp32", lora=LoraSettings(rank=4, alpha=8))
    start = {k: v.clone() for k, v in base.state_dict().items()}
    chats = [[message("user", png(112, 84, 20 + i), f"Goal: open app {i}.")] for i in range(4)]
    encs = [engine.encoder.encode(c) for c in chats]
    comps = [list(g.token_ids) for g in engine.generate_encoded(encs, SamplingParams(max_new_tokens=12,
                                                                                       temperature=1.0, seed=9))]
    assert _max_diff(engine.engine_logprobs(encs, comps), _learner_rows(learner, encs, comps)) <= 1e-3
    with torch.no_grad():  # an "update": the learner's trainable weights move
        for name, p in learner.model.named_parameters():
            if p.requires_grad and (not lora or "lora_B" in name):
                p.add_(torch.randn_like(p) * (0.05 if not lora else 0.2))
    learner.mark_updated()
    want = _learner_rows(learner, encs, comps)
    before = _max_diff(engine.engine_logprobs(encs, comps), want)
    with ColocatedSync(engine, learner, dtype=torch.float32, level=0).update_phase():
        pass
    after = _max_diff(engine.engine_logprobs(encs, comps), want)
    print(f"lora={lora}: max |engine - learner| before the sync {before:.4f}, after {after:.2e}")
    assert before > 1e-2 and after <= 1e-3 and engine.version == learner.version
    _restore(base, engine, start)


def test_stale_weights_gap_and_guard(pair):
    """2d: turns the engine sampled with stale weights show the gap in rescore's figures, and the guard
    stops on it with one line; after the sync the gap is gone."""
    from rl.loop import TrainTurn
    from rl.metrics import guard_tripped
    from rl.settings import GuardSettings
    from rl.update import rescore

    learner, engine, _ = pair
    start = {k: v.clone() for k, v in learner.state_dict().items()}
    chats = [[message("user", png(84, 112, 30 + i), f"Goal: task {i}.")] for i in range(6)]
    encs = [engine.encoder.encode(c) for c in chats]

    def turns():
        gens = engine.generate_encoded(encs, SamplingParams(max_new_tokens=12, temperature=1.0, seed=3))
        return [TrainTurn(f"g{i}", f"e{i}", 0, None, g.token_ids, g.logprobs, 0, False, encoded=e)
                for i, (e, g) in enumerate(zip(encs, gens))]

    with torch.no_grad():
        for p in learner.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    learner.mark_updated()
    _, stale = rescore(learner, turns(), micro_batch_size=3, tis_cap=2.0)
    line = guard_tripped(GuardSettings(), {"parse_error_rate": 0.0, **stale})
    assert stale["mismatch_mean_abs"] > 0.1 and stale["mismatch_kl"] > 0 and 0 <= stale["tis_clip_frac"] <= 1
    assert line and "stale weights" in line and "\n" not in line
    engine.push_weights(learner.named_weights())
    _, synced = rescore(learner, turns(), micro_batch_size=3, tis_cap=2.0)
    print(f"gap before the sync: mean |diff| {stale['mismatch_mean_abs']:.4f} k3 {stale['mismatch_kl']:.4f}; "
          f"after: {synced['mismatch_mean_abs']:.2e} {synced['mismatch_kl']:.2e}")
    assert synced["mismatch_mean_abs"] <= 1e-3 and synced["mismatch_max_abs"] <= 1e-3
    assert guard_tripped(GuardSettings(), {"parse_error_rate": 0.0, **synced}) is None
    _restore(learner, engine, start)


def test_sleep_mode_on_the_cpu_build_is_one_clear_line(pair):
    """2e: the CPU build has no sleep mode: asked for it, the engine says so once and stays awake; a
    colocated hand-over then pushes the weights after the update."""
    from guiagent.policy.vllm_backend import NO_SLEEP_ON_CPU

    _, engine, said = pair
    assert said.count(NO_SLEEP_ON_CPU) == 1 and "\n" not in NO_SLEEP_ON_CPU
    assert engine.sleep_mode is False
    engine.wake_up()  # nothing to wake: no error
    with pytest.raises(RuntimeError, match="enable_sleep_mode"):
        engine.sleep()


def test_a_turn_is_encoded_once(pair):
    """2f: on the vLLM path the agent encodes each chat once; rescoring and two epochs of updates score
    that encoding (the chat is not encoded again)."""
    import random

    from rl.agents import ModelAgent, TurnContext
    from rl.config import TrainConfig
    from rl.loop import TrainTurn
    from rl.prompting import PromptConfig
    from rl.strategies import make_strategy
    from rl.update import update

    learner, engine, _ = pair
    start = {k: v.clone() for k, v in learner.state_dict().items()}
    base = learner.encoder
    calls = []
    real = base._encode
    base._encode = lambda chat: calls.append(1) or real(chat)
    try:
        agent = ModelAgent(engine, get_format("json"), PromptConfig(), SamplingParams(max_new_tokens=8, temperature=1.0,
                                                                                     seed=0), keep_chats=True, seed=2)
        spec = TaskSpec("webapps", "t", 0, "Open the clock")
        acted = agent.act_batch([TurnContext(spec, (), obs(40 + i), i, f"k{i}") for i in range(4)])
        turns = [TrainTurn(f"g{i // 2}", f"e{i}", 0, t.prompt, t.completion_ids, t.logprobs, 0, True, encoded=t.encoded)
                 for i, t in enumerate(acted)]
        cfg = TrainConfig.build(micro_batch_size=2, epochs=2, rescore="on", algo="grpo")
        opt = torch.optim.SGD([p for p in learner.parameters() if p.requires_grad], lr=1e-3)
        stats = update(make_strategy(cfg, ".", None), cfg.update, learner, None, opt, turns,
                       torch.tensor([1.0, -1.0, 0.5, -0.5]), rng=random.Random(0))
    finally:
        base._encode = real
    assert len(calls) == 4 and stats["optimizer_steps"] > 0 and stats["mismatch_mean_abs"] <= 1e-3
    _restore(learner, engine, start)


def test_torch_threads_hold_after_the_engine_started(pair):
    """vLLM's CPU worker replaces torch.set_num_threads with a no-op for the whole process; with the engine in
    this process the backend puts it back (one line), so a learner's --threads holds after the engine started."""
    assert torch.set_num_threads is torch._C.set_num_threads
    before = torch.get_num_threads()
    try:
        for n in (1, 2, 1):
            torch.set_num_threads(n)
            assert torch.get_num_threads() == n
    finally:
        torch.set_num_threads(before)


def test_the_cpu_build_gets_a_kv_cache_of_its_own_size_not_a_share_of_host_memory(pair, tiny_model_dir):
    """On the CPU build the engine's KV cache is sized by cpu_kv_cache_bytes (the tiny model: its 256 MiB
    floor), not by gpu_memory_utilization, which vLLM takes there as a share of host memory."""
    from guiagent.policy.vllm_backend import cpu_kv_cache_bytes, kv_bytes_per_token

    _, engine, _ = pair
    cache = engine.llm.llm_engine.vllm_config.cache_config
    want = cpu_kv_cache_bytes(tiny_model_dir, 4096, "float32")
    assert cache.kv_cache_memory_bytes == want == 256 << 20
    assert kv_bytes_per_token(tiny_model_dir, "float32") == 2 * 3 * 2 * 48 * 4  # layers, KV heads, head dim, fp32


def _finite(xs):
    import math

    return bool(xs) and all(isinstance(x, float) and math.isfinite(x) for x in xs)


def test_guiagent_train_on_the_real_engine(tiny_model_dir, tmp_path):
    """Part 3 in small: ``guiagent train --rollout-engine vllm`` end to end on the real engine (2 iterations of
    one group in real Chromium, 2 held-out episodes): the run finishes, every iteration stores the engine-learner
    gap (mean |diff|, max |diff|, k3 KL) and the truncated importance weights, finite and small (the engine holds
    the learner's weights after each sync), the web UI charts them, and --threads holds with the engine in the
    trainer's process."""
    import json
    import os
    import subprocess
    import sys

    from guiagent.store import StoreReader
    from webui import AppConfig, create_app

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "guiagent", "train", "--model", tiny_model_dir, "--tasks", "go_home",
           "--algo", "grpo", "--iterations", "2", "--groups-per-iteration", "1", "--group-size", "2", "--slots", "2",
           "--pool", "inprocess", "--max-new-tokens", "8", "--eval-episodes", "2", "--no-filter-zero-variance",
           "--rollout-engine", "vllm", "--vllm.max-model-len", "4096", "--threads", "1", "--seed", "3",
           "--out", str(out), "--json"]
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads(p.stdout.strip().splitlines()[-1])
    assert result["iterations"] == 2 and result["stopped_by"] is None
    assert "torch threads: 1" in p.stderr  # the learner's --threads, put back after the engine started
    names = ["mismatch_mean_abs", "mismatch_max_abs", "mismatch_kl", "tis_weight_mean", "tis_clip_frac"]
    with StoreReader(out) as reader:
        run = reader.get_run(result["run_id"])
        assert run.status == "finished"
        got = {n: [p.value for p in pts] for n, pts in reader.metrics(run.run_id, names).items()}
    assert sorted(got) == sorted(names) and all(len(v) == 2 and _finite(v) for v in got.values())
    print("gap per iteration:", {n: [f"{x:.2e}" for x in v] for n, v in got.items()})
    assert max(got["mismatch_mean_abs"]) <= 1e-3 and max(got["mismatch_max_abs"]) <= 1e-2  # synced weights
    assert all(abs(w - 1) <= 1e-2 for w in got["tis_weight_mean"]) and max(got["tis_clip_frac"]) == 0.0
    client = create_app(AppConfig(runs=tmp_path)).test_client()
    (key,) = [r["key"] for r in client.get("/api/runs").get_json()["runs"] if r["run_id"] == run.run_id]
    charts = {c["title"]: c["series"] for c in client.get(f"/api/runs/{key}/metrics").get_json()["charts"]}
    assert sorted(charts["Engine-learner log-prob gap"]) == ["mismatch_kl", "mismatch_max_abs", "mismatch_mean_abs"]
    assert sorted(charts["Truncated importance weights"]) == ["tis_clip_frac", "tis_weight_mean"]
