"""vLLM in the training loop: re-scoring, the train-inference mismatch, truncated importance
sampling, and a run whose rollouts a colocated engine generates.

vLLM needs CUDA, so on CPU the engine is a stand-in for ``vllm.LLM`` behind the real
:class:`~guiagent.policy.vllm_backend.VLLMPolicy`, built from the newest release that
``scripts/contracts.sh`` recorded (``tests/guiagent/vllm_standin.py``: every call binds to that
release's signatures, ``SamplingParams`` and outputs carry its fields only). It receives what
vLLM would (rendered prompts, PIL images, one ``SamplingParams`` per request, sleep / wake-up
calls, weights through ``collective_rpc`` to the worker's ``get_model().load_weights``) and
generates with its own copy of the tiny model, computing in bfloat16 as an engine's kernels
would, so its log-probs really differ from the fp32 learner's. ``tests/gpu/test_gpu_paths.py``
runs the real engine on a GPU.
"""

from __future__ import annotations

import dataclasses
import io
import math
from types import SimpleNamespace

import pytest
import torch

from rl.config import TrainConfig
from rl.rollout import TrainTurn
from rl.strategies import make_strategy
from rl.update import rescore, update
from tests.guiagent.vllm_standin import VERSIONS, RecordedLLM, install


def png(seed: int) -> bytes:
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    buf = io.BytesIO()
    Image.fromarray((torch.rand((112, 84, 3), generator=g) * 255).to(torch.uint8).numpy()).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def learner_and_turns(tiny_model_dir):
    """The tiny model and four sampled turns of it (its own log-probs as the rollout's)."""
    from guiagent.policy import SamplingParams, message
    from guiagent.policy.hf import load_transformers

    pol = load_transformers(tiny_model_dir, device="cpu")
    chats = [[message("user", png(i), f"Goal: task {i}.")] for i in range(4)]
    gens = pol.generate(chats, SamplingParams(max_new_tokens=6, temperature=1.0, seeds=(1, 2, 3, 4)))
    turns = [TrainTurn(group_id=f"g{i // 2}", episode_id=f"e{i}", step_index=0, prompt=c, completion_ids=g.token_ids,
                       old_logprobs=g.logprobs, policy_version=0, parse_ok=True)
             for i, (c, g) in enumerate(zip(chats, gens))]
    return pol, turns


def _shifted(turns, delta):
    """The same turns as an engine that reports every sampled token's log-prob ``delta`` off."""
    return [dataclasses.replace(u, old_logprobs=tuple(x + delta for x in u.old_logprobs)) for u in turns]


def test_rescore_of_the_learners_own_samples_shows_no_mismatch(learner_and_turns):
    pol, turns = learner_and_turns
    rows, st = rescore(pol, turns, micro_batch_size=3, tis_cap=2.0)
    assert [len(r) for r in rows] == [len(u.completion_ids) for u in turns]
    assert st["mismatch_kl"] < 1e-6 and st["mismatch_max_abs"] < 1e-3
    assert st["tis_clip_frac"] == 0.0 and abs(st["tis_weight_mean"] - 1.0) < 1e-3


@pytest.mark.parametrize("delta, clip_frac, weight", [
    (-0.5, 0.0, math.exp(0.5)),   # engine under-rates its tokens: w = e^0.5 = 1.649 < C = 2
    (-1.0, 1.0, 2.0),             # w = e^1 = 2.718 is capped at C = 2
    (0.5, 0.0, math.exp(-0.5)),   # engine over-rates them: w = 0.607
])
def test_mismatch_kl_and_tis_weights_by_hand(learner_and_turns, delta, clip_frac, weight):
    pol, turns = learner_and_turns
    _, st = rescore(pol, _shifted(turns, delta), micro_batch_size=2, tis_cap=2.0)
    # d = log π_rollout − log π_learner = delta for every token; k3 = e^{−d} + d − 1
    assert st["mismatch_kl"] == pytest.approx(math.exp(-delta) + delta - 1, abs=1e-4)
    assert st["mismatch_max_abs"] == pytest.approx(abs(delta), abs=1e-3)
    assert st["mismatch_mean_abs"] == pytest.approx(abs(delta), abs=1e-3)
    assert st["tis_clip_frac"] == clip_frac
    assert st["tis_weight_mean"] == pytest.approx(weight, abs=1e-3)
    _, no_cap = rescore(pol, _shifted(turns, delta), micro_batch_size=2, tis_cap=0.0)
    assert "tis_weight_mean" not in no_cap and no_cap["mismatch_kl"] == pytest.approx(st["mismatch_kl"])


def _sgd_update(pol, turns, adv, **cfg_kw):
    """One plain-SGD step (gradients scale linearly with the advantages) from the same weights."""
    start = {k: v.clone() for k, v in pol.model.state_dict().items()}
    cfg = TrainConfig.build(micro_batch_size=2, lr=0.05, max_grad_norm=1e9, **cfg_kw)
    opt = torch.optim.SGD([p for p in pol.parameters() if p.requires_grad], lr=cfg.update.lr)
    stats = update(make_strategy(cfg, ".", None), cfg.update, pol, None, opt, turns, adv)
    after = {k: v.clone() for k, v in pol.model.state_dict().items()}
    pol.model.load_state_dict(start)
    return stats, after


def test_rescored_update_uses_the_learners_ratio_and_tis_weights_the_advantages(learner_and_turns):
    pol, turns = learner_and_turns
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    exact, w_exact = _sgd_update(pol, turns, adv)                      # old = the rollout's, which is exact
    off = _shifted(turns, -0.5)                                       # an engine 0.5 nats off on every token
    naive, _ = _sgd_update(pol, off, adv)                             # its log-probs taken as the old ones
    assert naive["clip_frac"] > 0.2 and exact["clip_frac"] == 0.0     # ratio e^0.5 = 1.65: clipped for A > 0
    plain, w_plain = _sgd_update(pol, off, adv, rescore="on", tis_cap=0.0)
    assert plain["clip_frac"] == 0.0 and plain["mismatch_kl"] == pytest.approx(math.exp(0.5) - 1.5, abs=1e-4)
    assert all(torch.allclose(w_plain[k], w_exact[k], atol=1e-6) for k in w_exact)  # ratio from the learner
    tis, w_tis = _sgd_update(pol, off, adv, rescore="on", tis_cap=2.0)
    _, w_scaled = _sgd_update(pol, turns, adv * math.exp(0.5))        # every weight is e^0.5: the same step
    assert tis["tis_weight_mean"] == pytest.approx(math.exp(0.5), abs=1e-3)
    moved = [k for k in w_exact if not torch.equal(w_exact[k], pol.model.state_dict()[k])]
    assert moved and all(torch.allclose(w_tis[k], w_scaled[k], atol=1e-6) for k in w_tis)


def test_a_stale_engine_stops_the_run_with_one_line():
    """The gap between the engine's log-probs and the learner's (mean |diff| a token) over
    --max-engine-gap trips the stale-weights guard, whatever --guard-action; under it, nothing."""
    from rl.metrics import guard_tripped
    from rl.settings import GuardSettings

    m = {"parse_error_rate": 0.0, "mismatch_mean_abs": 0.2}
    line = guard_tripped(GuardSettings(), m)
    assert line and "\n" not in line and "stale weights" in line and "0.200" in line and m["alarm/engine_gap"] == 1.0
    ok = {"parse_error_rate": 0.0, "mismatch_mean_abs": 0.015}
    assert guard_tripped(GuardSettings(), ok) is None and "alarm/engine_gap" not in ok
    assert guard_tripped(GuardSettings(max_engine_gap=0.0), dict(m)) is None  # 0: off
    assert guard_tripped(GuardSettings(), {"parse_error_rate": 0.0}) is None  # not measured (no rescore)


def test_rescore_config():
    assert TrainConfig().update.rescore == "off" and TrainConfig.build(rollout_engine="vllm").update.rescore == "on"
    assert TrainConfig.build(rollout_engine="vllm", rescore="off").update.rescore == "off"
    for kw, msg in ((dict(rollout_engine="vllm", rollout="async", model="m"), "sync mode"), (dict(tis_cap=-1.0), "tis-cap"),
                    (dict(algo="awr", rescore="on"), "no ratio"),
                    (dict(vllm={"gpu_memory_utilization": 1.5}), "gpu-memory-utilization"),
                    (dict(vllm={"kv_cache_gib": -1.0}), "kv-cache-gib")):
        with pytest.raises(ValueError, match=msg):
            if "vllm" in kw:
                from rl.config import VLLMSettings

                TrainConfig.build(vllm=VLLMSettings(**kw["vllm"]))
            else:
                TrainConfig.build(**kw)


# ---- a run on a colocated engine -----------------------------------------------------------------


class _StandInEngine(RecordedLLM):
    """``vllm.LLM`` on CPU: its own copy of the model, bf16 compute, vLLM's request and output shapes
    (the newest recorded release's signatures and fields: tests/guiagent/vllm_standin.py)."""

    engines: list = []

    def __init__(self, **kw):
        super().__init__(**kw)
        from guiagent.policy.hf import load_transformers

        self.pol = load_transformers(kw["model"], device="cpu")
        self.pol.autocast_dtype = torch.bfloat16  # an engine's kernels: another precision than the learner's
        self.worker = SimpleNamespace(get_model=lambda: SimpleNamespace(
            load_weights=self._load_weights, parameters=self.pol.model.parameters))
        _StandInEngine.engines.append(self)

    def _load_weights(self, weights):
        params = self.pol.model.state_dict()
        with torch.no_grad():
            for n, t in weights:
                params[n].copy_(t)
        self.calls.append(("load_weights", len(weights)))

    def _generate(self, prompts, params):
        from guiagent.policy import SamplingParams

        # a token prompt (what the backend sends, its images' pads collapsed) read back as vLLM would
        encs = [self.pol.encoder.encode_rendered(self.pol.tokenizer.decode(p["prompt_token_ids"]) if "prompt_token_ids"
                                                 in p else p["prompt"], p.get("multi_modal_data", {}).get("image", []))
                for p in prompts]
        p0 = params[0]
        sampling = SamplingParams(max_new_tokens=p0.max_tokens, temperature=p0.temperature, top_p=p0.top_p,
                                  min_p=p0.min_p, seeds=tuple(p.seed for p in params) if p0.seed is not None else None)
        return [self.output(e.input_ids, g.text, list(g.token_ids), list(g.logprobs), g.finish_reason)
                for e, g in zip(encs, self.pol.generate_encoded(encs, sampling))]


@pytest.mark.parametrize("kv_cache_gib, want", [(0.0, 256 << 20), (0.5, 1 << 29)])
def test_the_rollout_engine_on_the_cpu_build(tiny_model_dir, monkeypatch, kv_cache_gib, want):
    """--rollout-engine vllm on vLLM's CPU build (its recorded 0.32.0 API): the engine computes in the learner's
    fp32, eagerly, without sleep mode, and its KV cache is --vllm.kv-cache-gib (0: the CPU default), not the
    GPU's share of memory; the learner's weights are in it from the start."""
    import guiagent.policy.vllm_backend as vb
    from guiagent.policy.hf import load_transformers
    from rl.config import VLLMSettings
    from rl.engine import RolloutEngine

    _StandInEngine.engines = []
    install(monkeypatch, "0.32.0", _StandInEngine)
    monkeypatch.setattr(vb, "on_cpu", lambda: True)
    learner = load_transformers(tiny_model_dir, device="cpu")
    cfg = TrainConfig.build(model=tiny_model_dir, rollout_engine="vllm", vllm=VLLMSettings(kv_cache_gib=kv_cache_gib))
    eng = RolloutEngine(cfg, learner, tiny_model_dir)
    (llm,) = _StandInEngine.engines
    assert llm.kwargs["kv_cache_memory_bytes"] == want and llm.kwargs["dtype"] == "float32"
    assert llm.kwargs["enforce_eager"] is True and llm.kwargs["enable_sleep_mode"] is False
    assert eng.colocated.level == 0 and ("load_weights", len(learner.state_dict())) in llm.calls


@pytest.mark.browser
@pytest.mark.slow  # ~27 s (the suite's 12-minute budget)
def test_a_run_on_a_colocated_engine_pushes_weights_and_stores_the_mismatch(tiny_model_dir, tmp_path, monkeypatch):
    from guiagent.policy.hf import load_transformers
    from guiagent.store import StoreReader
    from rl.config import VLLMSettings
    from rl.trainer import Trainer

    _StandInEngine.engines = []
    install(monkeypatch, VERSIONS[-1], _StandInEngine)
    cfg = TrainConfig.build(model=tiny_model_dir, tasks=("go_home",), iterations=2, groups_per_iteration=1, group_size=2,
                      slots=2, pool="inprocess", max_new_tokens=8, eval_episodes=2, filter_zero_variance=False,
                      temperature=1.0, out=str(tmp_path / "run"), seed=3, rollout_engine="vllm",
                      vllm=VLLMSettings(gpu_memory_utilization=0.4, sleep_level=1))
    learner_calls = []
    policy_cls = type(load_transformers(tiny_model_dir, device="cpu"))
    real = policy_cls.generate_encoded

    def counting(self, *a, **k):  # the learner computes in fp32, the stand-in engine in bf16
        if self.autocast_dtype is None:
            learner_calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(policy_cls, "generate_encoded", counting)
    t = Trainer(cfg)
    result = t.run()
    (engine,) = _StandInEngine.engines
    kw = engine.kwargs
    geom = t.policy.image_geometry()
    assert kw["enable_sleep_mode"] is True and kw["gpu_memory_utilization"] == 0.4 and kw["seed"] == 3
    assert kw["mm_processor_kwargs"] == {"min_pixels": geom.min_pixels, "max_pixels": geom.max_pixels}
    # every reply came from the engine: the learner generated nothing (evaluation included)
    assert not learner_calls and sum(n for c, n in (c for c in engine.calls if c[0] == "generate")) > 0
    # each iteration: asleep for the update, weights woken and loaded first, then the KV cache
    kinds = [c[0] if c[0] != "wake_up" else f"wake_up{c[1]}" for c in engine.calls if c[0] != "rpc"]
    assert kinds.count("sleep") == 2
    for i in [i for i, k in enumerate(kinds) if k == "sleep"]:
        nxt = [k for k in kinds[i + 1:] if k != "generate"][:3]
        assert nxt == ["wake_up('weights',)", "load_weights", "wake_up('kv_cache',)"]
    # the engine holds the learner's final weights
    final = load_transformers(result.model, device="cpu").model.state_dict()
    held = engine.pol.model.state_dict()
    assert all(torch.allclose(final[k], held[k]) for k in final)
    # the mismatch of a bf16 engine against the fp32 learner is measured, stored and corrected for
    with StoreReader(tmp_path / "run") as reader:
        mk = [p.value for p in reader.metrics(result.run_id, ["mismatch_kl"])["mismatch_kl"]]
    assert len(mk) == 2 and all(0 < v < 0.5 for v in mk)
    last = t.history[-1]
    assert 0.5 < last["tis_weight_mean"] < 2.0 and last["mismatch_max_abs"] > 0
    assert last["policy_version"] == float(engine_version(t))


def engine_version(t):
    return t.engine.colocated.engine.version
