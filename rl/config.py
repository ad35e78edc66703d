"""The trainer's configuration: one dataclass, its CLI flags and YAML keys, and the constants
that tie training, evaluation and the warm start together.

Seeds: training samples task seeds below ``TRAIN_SEED_RANGE`` (1,000,000); evaluation starts
at ``rl.evaluate.EVAL_SEED_BASE`` (1,000,000), so evaluation is on held-out task instances.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from judge.compose import RewardConfig
from judge.settings import JudgeSettings
from rl.advantages import SemiOnlineRewardConfig
from rl.semi_online import MatchConfig, PatchConfig

__all__ = ["EMBEDDED_RECIPE", "TINY_MAX_PIXELS", "TRAIN_SEED_RANGE", "WARM_START_TASKS", "SemiOnlineSettings", "TrainConfig",
           "VLLMSettings", "sample_tasks"]

#: tasks whose targets sit at fixed places for every seed: what a tiny model trained from
#: scratch on CPU can learn (docs/training.md, "Learning checks"), so the embedded default trains on them
WARM_START_TASKS = ("open_app", "settings_turn_on", "settings_turn_off", "settings_open_section",
                    "files_open_folder", "go_home")
TRAIN_SEED_RANGE = 1_000_000
#: ~128 visual tokens a screenshot: enough for fixed layouts, and 5x cheaper than the default
TINY_MAX_PIXELS = 28 * 28 * 128

#: ``guiagent train`` with no ``--model``, ``--resume`` or ``--config`` (README command (a)): a short
#: SFT warm start that leaves something to learn, semi-online RL on its demonstrations, then online RL,
#: each stage adding to the last within ~10 minutes on 2 CPU cores (docs/training.md, "The embedded
#: default"; configs/train_webapps_tiny.yaml spells it out). Flags override any of it.
EMBEDDED_RECIPE: dict[str, Any] = {
    "warm_start_steps": 160, "iterations": 30, "semi": {"iterations": 20, "epochs": 1},
    "groups_per_iteration": 8, "group_size": 8, "slots": 8, "algo": "dr_grpo", "lr": 3e-4, "epochs": 2,
    "mini_batch_size": 32, "temperature": 1.0, "min_p": 0.05, "kl_coef": 0.1, "neg_adv_min_scale": 0.5,
    "min_informative_groups": 6, "max_sampling_rounds": 4, "resample_unparseable": 2, "eval_episodes": 192,
    "kl_reference": "stage",
}


@dataclass(frozen=True)
class SemiOnlineSettings:
    """Semi-online RL (after UI-S1): recorded episodes replayed with the policy's own history."""

    patch: PatchConfig = field(default_factory=PatchConfig)
    """what a mismatch does: --semi.patch.mode none|recorded|policy (the thought that goes with the
    substituted recorded action), --semi.patch.budget N (patches an episode; -1: no limit)"""
    match: MatchConfig = field(default_factory=MatchConfig)
    """tolerances of the matcher (--semi.match.point-tolerance 0.04, --semi.match.text-threshold 0.8, ...)"""
    rewards: SemiOnlineRewardConfig = field(default_factory=SemiOnlineRewardConfig)
    """per-step reward: format validity, kind match and match (UI-S1's weights by default)"""
    gamma: float = 0.5
    """γ of the step returns, which stop accumulating at a mismatch"""
    step_weight: float = 1.0
    """weight of the step-level group advantage (same recorded step across the G samples)"""
    episode_weight: float = 1.0
    """weight of the episode-level group advantage"""
    per_online: int = 1
    """--mode mixed: semi-online iterations before each online one"""
    iterations: int = 4
    """--mode staged: semi-online iterations before the online ones"""
    epochs: int = 0
    """passes over a semi-online iteration's turns (0: --epochs). Replays need no device, so fresh
    samples are cheap: one pass over twice the iterations learned more per minute than two passes
    (docs/training.md, semi-online learning check)"""

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError("--semi.gamma must lie in [0, 1]")
        if self.per_online < 1 or self.iterations < 0:
            raise ValueError("--semi.per-online must be >= 1 and --semi.iterations >= 0")
        if self.epochs < 0:
            raise ValueError("--semi.epochs must be >= 0 (0: the run's --epochs)")


@dataclass(frozen=True)
class VLLMSettings:
    """``--rollout-engine vllm``: a vLLM engine colocated with the learner on its GPU."""

    gpu_memory_utilization: float = 0.35
    """share of the GPU's memory vLLM takes for weights and KV cache (the learner has the rest; during
    an update the engine sleeps and hands its memory back)"""
    max_model_len: int = 8192
    """longest prompt + reply in tokens"""
    sleep_level: int = 1
    """how the engine hands its memory over during each update: 1 weights to CPU and KV cache dropped,
    2 both dropped (least memory; the pushed weights replace them), 0 no sleep (both stay on the GPU)"""
    enforce_eager: bool = False
    """no CUDA graphs (slower generation, faster start, less memory)"""
    dtype: str = "auto"
    """the engine's weight dtype (auto: the checkpoint's, bf16 for Qwen-VL); pushed weights are cast to it"""

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization < 1.0:
            raise ValueError("--vllm.gpu-memory-utilization must lie in (0, 1)")
        if self.max_model_len <= 0 or self.sleep_level not in (0, 1, 2):
            raise ValueError("--vllm.max-model-len must be positive and --vllm.sleep-level 0, 1 or 2")
        if self.dtype not in ("auto", "bfloat16", "float16", "float32"):
            raise ValueError("--vllm.dtype is auto, bfloat16, float16 or float32")


@dataclass
class TrainConfig:
    """Online RL on a suite: GRPO / Dr. GRPO with PPO-clip updates."""

    env: str = "webapps"
    """suite: webapps, miniwob or androidworld; several, comma-separated (webapps,miniwob), for one run
    over a mixed fleet whose tasks read <suite>.<task> (e.g. --tasks webapps.open_app miniwob.click-button)"""
    env_weights: dict[str, float] = field(default_factory=dict)
    """mixed --env: sampling weight of each suite's tasks (e.g. --env-weights webapps 2 miniwob 1; default:
    every task equally likely)"""
    mode: Literal["auto", "online", "semi-online", "mixed", "staged"] = "auto"
    """online: episodes on live envs; semi-online: recorded episodes (--data) replayed with the
    policy's own replies in the history and a patch step on mismatches (no device during rollouts);
    mixed: --semi.per-online semi-online iterations, then one online, and again; staged: the first
    --semi.iterations iterations semi-online, the rest online, with a held-out evaluation between;
    auto: staged on the warm start's demonstrations when no --model is given, else online"""
    data: tuple[str, ...] = ()
    """--mode semi-online|mixed: run directories of recorded trajectories (e.g. from
    guiagent eval --agent oracle, or guiagent data import); episodes of --tasks only, when given"""
    semi: SemiOnlineSettings = field(default_factory=SemiOnlineSettings)
    """semi-online settings (--semi.patch.mode, --semi.gamma, ...)"""
    algo: Literal["grpo", "dr_grpo", "gigpo", "ppo", "awr"] = "grpo"
    """grpo: std-normalised group advantages, token-mean loss; dr_grpo: no std, constant-length normaliser;
    gigpo: episode advantage + step advantage within anchor-state groups (same screen); ppo: a
    turn-level critic on the policy's hidden state, GAE over turns; awr: advantage-weighted
    regression over a replay buffer that starts from --data (or the warm start's demos), see
    rl/algos.py"""
    step_weight: float = 1.0
    """gigpo: ω, the weight of the step-level (anchor-state) advantage"""
    gigpo_norm: Literal["mean", "mean_std"] = "mean"
    """gigpo: subtract the group mean only (the reference code's default) or also divide by the std"""
    anchor_match: Literal["exact", "tolerant"] = "exact"
    """gigpo: anchor states are equal screenshot hashes (exact) or screens whose thumbnails differ in at
    most --anchor-tolerance of their pixels (tolerant: a clock, a cursor)"""
    anchor_tolerance: float = 0.01
    """gigpo --anchor-match tolerant: largest share of differing thumbnail pixels"""
    gae_lambda: float = 0.95
    """ppo: λ of GAE over turns"""
    critic_lr: float = 1e-3
    """ppo, awr: Adam learning rate of the value head"""
    critic_epochs: int = 100
    """ppo, awr: passes of the value head over each iteration's turns (the head is small and reads
    fixed features: 100 passes over ~200 turns take ~0.2 s; 4 leave it near a constant, see
    bench/critic_fit.py)"""
    value_clip: float = 0.5
    """ppo, awr: ε of the clipped value loss around the rollout's values (0: plain squared error)"""
    critic_features: Literal["start", "policy"] = "start"
    """ppo, awr: the hidden states the value head reads. start: the frozen starting model's (the KL
    reference when there is one, else a frozen copy; a LoRA learner's base with its adapters off),
    so the head's inputs stay put while the actor moves; policy: the learner's own, which shift with
    every update under a head fitted on the last iteration's"""
    critic_warmup: int = 0
    """ppo: the first N iterations fit the critic only, the actor does not move (its first
    advantages then come from a critic that has seen returns)"""
    awr_beta: float = 1.0
    """awr: temperature β of the weights exp(A/β)"""
    awr_max_weight: float = 20.0
    """awr: cap of the weights"""
    replay_size: int = 2048
    """awr: episodes the replay buffer keeps (oldest leave first)"""
    replay_episodes: int = 0
    """awr: episodes sampled from the buffer each iteration (0: --groups-per-iteration x --group-size)"""
    offline_iterations: int = 0
    """awr: the first N iterations train on the buffer only (no rollouts): offline, then online"""
    horizon_schedule: str = ""
    """step budget growing over iterations: ITERATION:STEPS pairs, e.g. 0:3,4:5,8:0 (0: the task's own);
    empty: the tasks' own budgets throughout"""
    adv_norm: Literal["auto", "none", "batch", "per-task"] = "auto"
    """advantage normalisation on top of the method's: per-task (Dr. MAS: each task's own mean and std),
    batch (whitening), none; auto: batch for ppo, none otherwise"""
    entropy_modulation: float = 0.0
    """AEM's α: scale each reply's advantage by 1 + α·sign(A)·(relative response surprisal), clamped to
    [1/2, 2] (> 0 favours exploration, < 0 exploitation; 0: off)"""
    action_format: str = "auto"
    """the action format the policy is prompted in and parsed with (json, uitars15, qwen_mobile,
    qwen_computer, ...; auto: the model folder's guiagent_agent.json, written by sft and train, else
    json). A pretrained model starts best in the format it was trained on: qwen_mobile for
    Qwen2.5-VL on a phone screen, uitars15 for UI-TARS-1.5"""
    tasks: tuple[str, ...] = ()
    """task ids to train on (default: every task of the suite; without --model, where a tiny model is
    warm-started from scratch, webapps' fixed-layout family, the tasks such a model can learn on CPU)"""
    model: str = ""
    """policy to train: a local folder or hub id (empty: a tiny model with an SFT warm start)"""
    out: str = "runs/train"
    """run directory (store, checkpoints, final model)"""
    resume: str | None = None
    """continue the run in this directory from its last checkpoint (its saved config is used)"""
    overwrite: bool = False
    """start a new run in an --out that is not empty: what an earlier training run wrote there (its
    config, checkpoints, models, warm start and evaluations) is deleted first; its episodes stay in
    the store, and other files stay. Without it, such an --out is refused (--resume continues a run)"""
    iterations: int = 8
    """total training iterations (with --resume: the total to reach)"""
    groups_per_iteration: int = 6
    """(task, seed) groups sampled per iteration"""
    group_size: int = 4
    """G: episodes per group"""
    slots: int = 4
    """envs stepping side by side"""
    pool: Literal["inprocess", "ray"] = "ray"
    """ray: a Ray actor fleet (a local Ray, or --ray-address), which keeps browsers and app servers
    out of the learner's process and spreads slots over machines (on one 2-core machine its env
    steps/s are about those of inprocess, docs/benchmarks.md); inprocess: envs in this process (no
    Ray; sync runs exactly repeatable)"""
    ray_address: str | None = None
    """join this Ray cluster (e.g. auto or host:6379); default: start a local Ray"""
    workers: int = 2
    """--pool ray: number of worker actors (slots are spread over them)"""
    worker_resources: dict[str, float] = field(default_factory=dict)
    """--pool ray: custom Ray resources per worker (e.g. --worker-resources androidworld 1 pins
    AndroidWorld workers to farm hosts started with ray start --resources '{"androidworld": N}')"""
    device: dict[str, str] = field(default_factory=dict)
    """device options passed to the suite's make_device (e.g. --device farm runs/farm/endpoints.json
    for androidworld, --device chromium_path /usr/bin/chromium for the browser suites)"""
    rollout: Literal["sync", "async"] = "sync"
    """async: rollouts of the next iteration run while the learner updates (bounded by --max-lag);
    sync runs are reproducible with the same --seed, async runs are not (see docs/training.md)"""
    max_lag: int = 1
    """async: drop rollouts produced more than this many policy versions ago"""
    rollout_engine: Literal["transformers", "vllm"] = "transformers"
    """what generates the rollouts' replies: the learner's own transformers model, or a vLLM engine
    colocated on the learner's GPU (weights pushed after every update, GPU memory handed over with
    vLLM's sleep mode; needs pip install guiagent[vllm] and CUDA; sync rollouts)"""
    vllm: VLLMSettings = field(default_factory=VLLMSettings)
    """--rollout-engine vllm: --vllm.gpu-memory-utilization, --vllm.sleep-level, ..."""
    rescore: Literal["auto", "on", "off"] = "auto"
    """re-score every rollout turn with the learner before the update: the PPO ratio's old log-probs
    become the learner's own and the train-inference mismatch (KL between the engine's and the
    learner's log-probs of the sampled tokens) is stored as the metric mismatch_kl (auto: on with
    --rollout-engine vllm)"""
    tis_cap: float = 2.0
    """when re-scoring: truncated importance sampling, each token's advantage weighted by
    min(pi_learner / pi_rollout, C) with this C (0: measure the mismatch, no correction)"""
    lr: float = 2e-4
    """AdamW learning rate"""
    epochs: int = 1
    """passes over each iteration's turns"""
    mini_batch_size: int = 0
    """turns per optimiser step (0: all of an iteration's turns, one step per epoch); e.g. 16 with
    --epochs 2 takes 2 x ceil(turns / 16) PPO steps an iteration"""
    micro_batch_size: int = 8
    """turns per forward/backward pass (gradient accumulation covers the mini-batch)"""
    clip_eps_low: float = 0.2
    """PPO ε below 1"""
    clip_eps_high: float = 0.28
    """PPO ε above 1 (> clip_eps_low: clip-higher)"""
    kl_coef: float = 0.0
    """β of the KL(π‖π_ref) loss term (0: no reference model is kept)"""
    kl_kind: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator"""
    kl_reference: Literal["start", "stage"] = "start"
    """π_ref of the KL term: start, the run's starting policy throughout (kept across resumes);
    stage, with --mode staged, the policy where the online stage begins (saved as
    RUN_DIR/reference at the stage boundary, read back on a resume), so the online stage is
    held near what the semi-online stage learned rather than pulled back to the warm start
    (other modes have one stage: there it is the start)"""
    kl_target: float = 0.0
    """adaptive KL (a soft trust region around the reference): β starts at --kl-coef and is
    adapted so the KL stays near this value (0: β fixed)"""
    kl_horizon: int = 1000
    """adaptive KL: turns over which β may change by ±20%"""
    max_kl_old: float = 0.0
    """trust region on each update: stop its remaining mini-batches once the approximate KL to
    the policy that sampled them exceeds this (0: never stop early)"""
    loss_agg: str = ""
    """token_mean, seq_mean_token_mean, seq_mean_token_sum, seq_mean_token_sum_norm, group_token_mean
    (default: token_mean for grpo, seq_mean_token_sum_norm for dr_grpo)"""
    advantage: Literal["episode", "step"] = "episode"
    """episode: one group advantage per episode; step: group-normalised discounted returns per turn"""
    gamma: float = 1.0
    """discount of step-level returns"""
    filter_zero_variance: bool = True
    """skip groups whose episodes all got the same reward (no GRPO signal); semi-online: groups whose
    samples got the same step rewards throughout"""
    min_informative_groups: int = 0
    """dynamic sampling (DAPO): while fewer groups than this have unequal rewards, sample another
    --groups-per-iteration groups, at most --max-sampling-rounds rounds an iteration (0: off); a
    semi-online iteration replays more recorded episodes the same way (no device: cheap)"""
    max_sampling_rounds: int = 3
    """dynamic sampling: most rollout rounds in one iteration"""
    neg_adv_min_scale: float = 1.0
    """success-adaptive scaling of negative advantages: scale = m + (1-m)·group success (1: off)"""
    precision: Literal["auto", "fp32", "bf16-mixed", "bf16"] = "auto"
    """auto: fp32 on CPU, bf16-mixed on CUDA; bf16-mixed: fp32 weights and optimiser state with bf16
    compute (autocast), so small updates are not rounded away; bf16: bf16 weights and AdamW state
    with no fp32 master copy (least memory; an update below ~0.4% of a weight rounds away, and a
    warning says so)"""
    lora_rank: int = 0
    """LoRA rank of adapters on the language model (peft; 0: full fine-tuning); the KL reference is
    then the same model with its adapters switched off, so no second copy is loaded"""
    lora_alpha: float = 32.0
    """LoRA α (the adapters are scaled by α / rank)"""
    gradient_checkpointing: bool = False
    """recompute activations in the backward pass (less memory, ~30% more compute)"""
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    """rollout sampling temperature"""
    top_p: float = 1.0
    """rollout nucleus sampling (< 1 cuts the low-probability tail, e.g. malformed replies of a
    weak warm start; log-probs for the loss stay those of the unmodified model)"""
    min_p: float = 0.0
    """rollout min-p sampling: drop tokens below min_p x the most likely one (0: off); keeps
    exploring coordinates while cutting malformed replies"""
    max_new_tokens: int = 64
    """longest reply per turn"""
    resample_unparseable: int = 0
    """rollouts: draw a reply that does not parse again, up to N times, from fresh seeds; the turn
    acts on the first that parses (the ones set aside are kept in the step's metadata and counted in
    the metric resampled_rate; still unparseable after N: a parse error and its penalty). 0: off"""
    rewards: RewardConfig = field(default_factory=RewardConfig)
    """reward components (--rewards.progress 0.5, --rewards.parse-penalty -0.1, ...)"""
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    """a VLM judge scoring each finished episode inside the rollout (--judge.model M --judge.weight 0.5,
    or --judge.mode log to only record and calibrate its verdicts); its weighted score is the final
    step's reward part "judge", stored before the step"""
    eval_episodes: int = 24
    """held-out episodes evaluated greedily before and after training (0: skip)"""
    eval_every: int = 0
    """also evaluate every N iterations (stored as the metric eval_success; 0: only before and after)"""
    warm_start_demos: int = 120
    """no --model: oracle episodes recorded for the SFT warm start"""
    warm_start_steps: int = 400
    """no --model: SFT optimiser steps of the warm start"""
    seed: int = 0
    """seeds the task and seed plan, the sampling generators of the rollout slots, the order of
    turns in the update and the model's initialisation: in sync mode, one seed gives one run"""
    max_parse_error_rate: float = 0.0
    """stability guard: when the sampled parse-error rate of an iteration exceeds this, take the
    --guard-action (0: off)"""
    max_kl_ref: float = 0.0
    """stability guard: when the KL to the reference (starting) policy exceeds this after an
    update, take the --guard-action (0: off; needs --kl-coef > 0 to be measured)"""
    guard_action: Literal["rollback", "stop"] = "rollback"
    """what a tripped guard does: rollback restores the last checkpoint's weights and optimiser
    and goes on with the next iteration's data; stop ends the run (the last good model is saved)"""
    min_entropy: float = 0.0
    """alarm (logged, stored as the metric alarm/entropy) when the sampled entropy per token falls
    below this (0: off)"""
    log_to: tuple[Literal["tensorboard", "wandb"], ...] = ()
    """also log every metric to TensorBoard (RUN_DIR/tensorboard) and/or W&B (offline unless WANDB_MODE
    says otherwise); the store always gets them"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    json: bool = False
    """print one JSON object with the figures as the last stdout line"""

    @classmethod
    def embedded(cls, **overrides: Any) -> "TrainConfig":
        """The embedded default's recipe (:data:`EMBEDDED_RECIPE`) with ``overrides`` on top: what
        ``guiagent train`` runs when no ``--model``, ``--resume`` or ``--config`` is given."""
        semi = overrides.pop("semi", None)
        recipe = {k: v for k, v in EMBEDDED_RECIPE.items() if k != "semi"}
        base = SemiOnlineSettings()
        return cls(**{**recipe, **overrides,
                      "semi": semi or replace(base, **EMBEDDED_RECIPE.get("semi", {}))})

    def __post_init__(self) -> None:
        from rl.evaluate import MAX_EPISODES

        if self.group_size < 2:
            raise ValueError("--group-size must be >= 2: group advantages compare episodes of one task")
        if not 0 <= self.threads <= 1024:
            raise ValueError(f"--threads must lie in 0..1024 (0: torch's default), got {self.threads}")
        if self.resume and self.overwrite:
            raise ValueError("--resume continues a run and --overwrite starts one again: give one of them")
        for name, n in (("--groups-per-iteration x --group-size", self.groups_per_iteration * self.group_size),
                        ("--eval-episodes", self.eval_episodes), ("--warm-start-demos", self.warm_start_demos)):
            if n > MAX_EPISODES:
                raise ValueError(f"{name} is {n:,}: at most {MAX_EPISODES:,} episodes a round (each is kept in "
                                 "memory)")
        if (self.iterations < 0 or self.groups_per_iteration <= 0 or self.slots <= 0 or self.eval_every < 0
                or self.mini_batch_size < 0 or self.micro_batch_size <= 0 or self.epochs <= 0
                or self.min_informative_groups < 0 or self.max_sampling_rounds <= 0):
            raise ValueError("--iterations, --eval-every, --mini-batch-size and --min-informative-groups must be "
                             ">= 0; --groups-per-iteration, --slots, --epochs, --micro-batch-size and "
                             "--max-sampling-rounds positive")
        if self.resample_unparseable < 0:
            raise ValueError("--resample-unparseable must be >= 0 (0: off)")
        if self.clip_eps_low <= 0 or self.clip_eps_high <= 0:
            raise ValueError("clip epsilons must be positive")
        if self.kl_target < 0 or self.max_kl_old < 0 or self.kl_horizon <= 0:
            raise ValueError("--kl-target and --max-kl-old must be >= 0, --kl-horizon positive")
        if self.kl_target > 0 and self.kl_coef <= 0:
            raise ValueError("--kl-target adapts β from --kl-coef: give a positive --kl-coef too")
        if self.algo in ("gigpo", "ppo", "awr"):
            if self.mode == "auto":
                self.mode = "online"
            elif self.mode != "online":
                raise ValueError(f"--algo {self.algo} trains on online rollouts: drop --mode {self.mode} "
                                 "(awr reads recorded runs through --data without it)")
        if self.algo == "awr" and self.entropy_modulation:
            raise ValueError("--entropy-modulation needs the sampling log-probs of each reply; awr trains on "
                             "replayed and demonstrated turns that have none")
        if self.algo == "awr" and self.kl_coef > 0:
            raise ValueError("--kl-coef is a term of the PPO-clip loss; awr's weighted regression has none: drop it")
        if self.algo != "awr" and self.offline_iterations:
            raise ValueError("--offline-iterations is for --algo awr")
        if self.critic_features not in ("start", "policy"):
            raise ValueError(f"--critic-features {self.critic_features!r}: choose start or policy")
        if self.critic_warmup and self.algo != "ppo":
            raise ValueError("--critic-warmup is for --algo ppo (awr starts its critic offline: "
                             "--offline-iterations)")
        if self.critic_warmup < 0 or (self.critic_warmup and self.critic_warmup >= self.iterations):
            raise ValueError(f"--critic-warmup must be >= 0 and below --iterations ({self.iterations}): "
                             "the actor would never move")
        if (self.critic_lr <= 0 or self.critic_epochs <= 0 or self.awr_beta <= 0 or self.awr_max_weight <= 0
                or self.replay_size <= 0 or self.replay_episodes < 0 or self.offline_iterations < 0
                or self.value_clip < 0 or not 0 <= self.gae_lambda <= 1 or not 0 <= self.anchor_tolerance < 1):
            raise ValueError("--critic-lr, --critic-epochs, --awr-beta, --awr-max-weight and --replay-size must be "
                             "positive; --replay-episodes, --offline-iterations and --value-clip >= 0; "
                             "--gae-lambda in [0, 1]; --anchor-tolerance in [0, 1)")
        from rl.algos import parse_horizon_schedule

        parse_horizon_schedule(self.horizon_schedule)  # a malformed schedule fails before anything starts
        if self.mode == "auto":
            self.mode = "staged" if not self.model and not self.resume else "online"
        if self.kl_reference == "stage" and self.mode == "staged" and self.lora_rank:
            raise ValueError("--kl-reference stage re-anchors the KL term on full weights where the online stage "
                             "begins; a LoRA learner's reference is its frozen base: drop --lora-rank or use start")
        if self.mode in ("semi-online", "mixed") and not self.data:
            raise ValueError(f"--mode {self.mode} replays recorded trajectories: give --data RUN_DIR [RUN_DIR ...]")
        if self.mode == "staged" and not self.data and self.model:
            raise ValueError("--mode staged with --model replays recorded trajectories: give --data RUN_DIR "
                             "(without --model, the warm start's demonstrations are replayed)")
        if self.mode != "online" and self.rollout == "async":
            raise ValueError("--rollout async is for online rollouts; semi-online iterations need no device wait")
        if self.rollout_engine == "vllm" and self.rollout == "async":
            raise ValueError("--rollout-engine vllm generates in sync mode (the engine sleeps during each update): "
                             "drop --rollout async")
        if self.tis_cap < 0:
            raise ValueError("--tis-cap must be >= 0 (0: measure the mismatch without correcting it)")
        if self.algo == "awr" and self.rescore == "on":
            raise ValueError("--rescore on re-scores the PPO ratio's old log-probs; awr's weighted regression has "
                             "no ratio: drop it")
        if self.action_format != "auto":
            from grounding import FORMAT_NAMES

            if self.action_format not in FORMAT_NAMES:
                raise ValueError(f"--action-format {self.action_format!r}: choose auto or one of "
                                 f"{', '.join(FORMAT_NAMES)}")
        if self.lora_rank < 0 or self.lora_alpha <= 0:
            raise ValueError("--lora-rank must be >= 0 (0: full fine-tuning) and --lora-alpha positive")
        for name in ("max_parse_error_rate", "max_kl_ref", "min_entropy"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0 (0 turns it off)")
        suites = [e.strip() for e in self.env.split(",")]
        for name, w in self.env_weights.items():
            if name not in suites or not w > 0:
                raise ValueError(f"--env-weights {name} {w}: weights are positive and name suites of --env {self.env}")
        if self.rescore == "auto":
            self.rescore = "on" if self.rollout_engine == "vllm" and self.algo != "awr" else "off"
        if self.loss_agg == "":
            self.loss_agg = "seq_mean_token_sum_norm" if self.algo == "dr_grpo" else "token_mean"


def sample_tasks(rng, tasks, n: int, weights=None) -> list[str]:
    """``n`` tasks drawn from ``tasks``: uniformly, or (``weights``: suite -> weight, a mixed run whose
    tasks read ``<suite>.<task>``) a suite by its weight (1 when not given), then a task of it."""
    if not weights:
        return [rng.choice(tasks) for _ in range(n)]
    by_suite: dict[str, list[str]] = {}
    for t in tasks:
        by_suite.setdefault(t.partition(".")[0], []).append(t)
    names = list(by_suite)
    w = [float(weights.get(s, 1.0)) for s in names]
    return [rng.choice(by_suite[rng.choices(names, w)[0]]) for _ in range(n)]
