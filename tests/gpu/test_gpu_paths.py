"""The real-model paths on a CUDA GPU: a randomly initialised Qwen2.5-VL of the 3B architecture.

Never run in the default suite (no GPU there): ``pytest -m gpu tests/gpu -s`` on a CUDA machine
(~80 GB for full fine-tuning, ~30 GB with LoRA; the vLLM checks need ``pip install guiagent[vllm]``
and skip without it). The two bf16-mixed training tests passed on an H200 (docs/benchmarks.md); the vLLM
ones have not run yet. On a bare GPU machine without vLLM or a browser, ``bash scripts/gpu_check.sh`` is
the check that fits (tests/gpu/test_gpu_check.py).
The model is built from the published config.json values (``qwen2_5_vl_3b_config``) with random
weights and the tiny model's tokenizer: no download. Figures are printed (``-s``).
"""

from __future__ import annotations

import io
import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

GiB = 1 << 30


def png(w: int, h: int, seed: int) -> bytes:
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    buf = io.BytesIO()
    Image.fromarray((torch.rand((h, w, 3), generator=g) * 255).to(torch.uint8).numpy()).save(buf, format="PNG")
    return buf.getvalue()


def chats(n: int = 4):
    from guiagent.policy import message

    return [[{"role": "system", "content": "You control a phone."},
             message("user", png(360, 640, i), f"Goal: open the settings ({i}).")] for i in range(n)]


@pytest.fixture(scope="module")
def model_3b(tmp_path_factory):
    from guiagent.policy.hf import build_random_model, qwen2_5_vl_3b_config
    from guiagent.policy.tiny import TinyModelSpec, build_tiny_model

    tiny = tmp_path_factory.mktemp("tiny")
    build_tiny_model(TinyModelSpec(size="tiny"), tiny)
    out = tmp_path_factory.mktemp("qwen25vl-3b-random")
    t = time.perf_counter()
    build_random_model(qwen2_5_vl_3b_config(), out, tokenizer_from=str(tiny), device="cuda")
    torch.cuda.empty_cache()
    print(f"\nrandom Qwen2.5-VL-3B architecture built and saved in {time.perf_counter() - t:.0f} s")
    return str(out)


def _train(policy, opt, iterations: int = 3, micro_batch: int = 4, new_tokens: int = 32):
    from guiagent.policy import SamplingParams
    from rl.losses import ppo_clip_loss

    losses = []
    for it in range(iterations):
        cs = chats(micro_batch)
        gens = policy.generate(cs, SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=it))
        comps = [list(g.token_ids) for g in gens]
        sb = policy.score_batch(cs, comps, grad=True)
        old = sb.logprobs.detach()
        adv = torch.tensor([1.0, -1.0] * (micro_batch // 2), device=sb.logprobs.device)
        loss, _ = ppo_clip_loss(sb.logprobs, old, adv, sb.mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in policy.parameters() if p.requires_grad], 1.0)
        opt.step()
        policy.mark_updated()
        losses.append(float(loss))
    return losses


@pytest.mark.parametrize("lora_rank", [0, 64])
def test_bf16_mixed_training_of_3b(model_3b, lora_rank):
    from guiagent.policy.hf import LoraSettings, load_transformers
    from rl.optim import build_optimizer, estimate_memory_for

    torch.cuda.reset_peak_memory_stats()
    lora = LoraSettings(rank=lora_rank, alpha=2 * lora_rank) if lora_rank else None
    policy = load_transformers(model_3b, device="cuda", precision="bf16-mixed", lora=lora,
                               gradient_checkpointing=True)
    est = estimate_memory_for(policy.model, precision="bf16-mixed", micro_batch_size=4, seq_len=700,
                              completion_len=32, gradient_checkpointing=True)
    print(f"\nLoRA rank {lora_rank}: {est.summary()}")
    opt = build_optimizer(policy, lr=1e-6 if not lora_rank else 1e-5, precision="bf16-mixed")
    trainable = [p for p in policy.parameters() if p.requires_grad]
    assert all(p.dtype == torch.float32 for p in trainable)
    before = [p.detach().clone() for p in trainable[:20]]
    t = time.perf_counter()
    losses = _train(policy, opt)
    dt = time.perf_counter() - t
    peak = torch.cuda.max_memory_allocated()
    print(f"losses {losses}; 3 iterations (generate + update of 4 samples) in {dt:.1f} s; "
          f"peak {peak / GiB:.1f} GiB vs estimate {est.total / GiB:.1f} GiB")
    assert all(l == l for l in losses)  # finite
    moved = sum(int((a != b.detach()).sum()) for a, b in zip(before, trainable[:20]))
    assert moved > 0.5 * sum(a.numel() for a in before)  # lr 1e-6 updates survive in fp32 weights
    assert peak < 1.5 * est.total


def test_vllm_colocated_rollouts_with_weight_sync_3b(model_3b):
    pytest.importorskip("vllm")
    from guiagent.policy import SamplingParams
    from guiagent.policy.hf import LoraSettings, load_transformers
    from guiagent.policy.vllm_backend import ColocatedSync, VLLMPolicy
    from rl.losses import mismatch_kl, ppo_clip_loss, tis_advantages, tis_weights
    from rl.optim import build_optimizer

    engine = VLLMPolicy(model_3b, max_images=1, max_model_len=4096, gpu_memory_utilization=0.35,
                        dtype="bfloat16", colocate=True, enable_sleep_mode=True)
    learner = load_transformers(model_3b, device="cuda", precision="bf16-mixed", lora=LoraSettings(rank=32, alpha=64),
                                gradient_checkpointing=True)
    opt = build_optimizer(learner, lr=1e-5, precision="bf16-mixed")
    sync = ColocatedSync(engine, learner, dtype=torch.bfloat16)
    sp = SamplingParams(max_new_tokens=64, temperature=1.0, seed=0)
    for it in range(3):
        cs = chats(8)
        t = time.perf_counter()
        gens = engine.generate(cs, sp)
        gen_s = time.perf_counter() - t
        assert all(g.policy_version == learner.version for g in gens)
        comps = [list(g.token_ids) for g in gens]
        with sync.update_phase():
            free_asleep = torch.cuda.mem_get_info()[0]
            sb_old = learner.score_batch(cs, comps, grad=False)  # the learner re-scores
            rollout = torch.zeros_like(sb_old.logprobs)
            for b, g in enumerate(gens):
                rollout[b, :len(g.logprobs)] = torch.tensor(g.logprobs, device=rollout.device)
            w, st = tis_weights(sb_old.logprobs, rollout, sb_old.mask, cap=2.0)
            sb = learner.score_batch(cs, comps, grad=True)
            adv = torch.tensor([1.0, -1.0] * 4, device=sb.logprobs.device)
            loss, _ = ppo_clip_loss(sb.logprobs, sb_old.logprobs, tis_advantages(adv, w), sb.mask)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            learner.mark_updated()
        toks = sum(len(g.token_ids) for g in gens)
        print(f"\niteration {it}: vLLM {toks / gen_s:.0f} tokens/s; mismatch_kl "
              f"{float(mismatch_kl(sb_old.logprobs, rollout, sb_old.mask)):.2e}, tis_clip_frac "
              f"{st.tis_clip_frac:.3f}; free while asleep {free_asleep / GiB:.1f} GiB")
        assert engine.version == learner.version == it + 1
        assert st.mismatch_kl < 0.5
    engine.close()


@pytest.mark.browser
def test_trainer_on_a_colocated_vllm_engine_3b(model_3b, tmp_path):
    """``guiagent train --rollout-engine vllm`` end to end: webapps in real Chromium, rollouts on the
    engine, LoRA learner in bf16-mixed, mismatch and TIS stored each iteration."""
    pytest.importorskip("vllm")
    from guiagent.store import StoreReader
    from rl.config import TrainConfig, VLLMSettings
    from rl.trainer import Trainer

    torch.cuda.reset_peak_memory_stats()
    cfg = TrainConfig.build(model=model_3b, tasks=("go_home", "open_app"), iterations=2, groups_per_iteration=2,
                      group_size=4, slots=4, pool="inprocess", max_new_tokens=48, eval_episodes=2,
                      filter_zero_variance=False, action_format="qwen_mobile", precision="bf16-mixed",
                      lora_rank=32, lora_alpha=64, gradient_checkpointing=True, lr=1e-5, rollout_engine="vllm",
                      vllm=VLLMSettings(gpu_memory_utilization=0.35, max_model_len=4096), out=str(tmp_path / "run"))
    t = time.perf_counter()
    trainer = Trainer(cfg)
    result = trainer.run()
    print(f"\n2 iterations in {time.perf_counter() - t:.0f} s; peak learner memory "
          f"{torch.cuda.max_memory_allocated() / GiB:.1f} GiB; "
          + "; ".join(f"it {i}: mismatch_kl {h['mismatch_kl']:.2e}, tis_clip_frac {h['tis_clip_frac']:.3f}"
                      for i, h in enumerate(trainer.history)))
    with StoreReader(tmp_path / "run") as reader:
        mk = reader.metrics(result.run_id, ["mismatch_kl"])["mismatch_kl"]
    assert len(mk) == 2 and all(0 <= p.value < 1.0 for p in mk)
    assert trainer.engine.colocated.engine.version == trainer.policy.version
