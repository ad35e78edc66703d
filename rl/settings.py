"""The sections of the training and evaluation configs: one frozen dataclass per concern, each
validating its own fields in ``__post_init__``.

:class:`rl.config.TrainConfig` and :class:`rl.evaluate.EvalConfig` nest them with
``Flat[...]`` (:mod:`guiagent.config`): a section's fields keep their flat flag and YAML names
(``--temperature``, ``lr: 3e-4``), and a YAML file may also group them under the section's
name (``sampling: {temperature: 0.7}``); the two forms merge, and one setting given both ways with two
values is refused. A section's own defaults stand for the keys a file leaves out (``guiagent eval``'s
greedy ``temperature: 0`` stays when a file sets ``top_p``). Train and eval share :class:`SamplingSettings` and
:class:`FleetSettings`. Checks that span sections (``--kl-target`` needs ``--kl-coef``; an
algorithm's own rules) live in ``TrainConfig.__post_init__`` and in each algorithm's strategy
(:meth:`rl.strategies.Strategy.check`).

Hyperparameters keep the papers' symbols: γ ``gamma``, λ ``gae_lambda``, ε ``clip_eps_*``,
β ``kl_coef`` / ``awr_beta``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from guiagent.config import KeyValues
from rl.match import MatchConfig
from rl.patching import PatchConfig

__all__ = [
    "AWRSettings", "CreditSettings", "CriticSettings", "EvalSettings", "FleetSettings", "GiGPOSettings",
    "GroupSettings", "GuardSettings", "LearnerSettings", "RolloutSettings", "SamplingSettings",
    "SemiOnlineSettings", "UpdateSettings", "VLLMSettings", "WarmStartSettings", "parse_horizon_schedule",
    "horizon_at", "TRAIN_SEED_RANGE", "WARM_START_TASKS",
]


#: training samples task seeds below this; evaluation starts at it (rl.evaluate.EVAL_SEED_BASE), so
#: evaluation is on held-out task instances
TRAIN_SEED_RANGE = 1_000_000
#: most episodes one evaluation (or one training iteration) runs: every finished trajectory is kept
#: in memory for the run's figures, so a larger count is refused up front instead of growing until
#: the machine runs out (several evaluations may share one --out)
MAX_EPISODES = 100_000
#: tasks whose targets sit at fixed places for every seed: what a tiny model trained from scratch
#: on CPU can learn (docs/training.md, "Learning from scratch on CPU"), so the embedded default
#: trains on them
WARM_START_TASKS = ("open_app", "settings_turn_on", "settings_turn_off", "settings_open_section",
                    "files_open_folder", "go_home")


# ---- shared by train and eval ---------------------------------------------------------------------


@dataclass(frozen=True)
class SemiOnlineRewardConfig:
    """Per-step reward of semi-online RL (UI-S1's ``gui_traj`` score).

    ``r = format_weight · format_ok + action_weight · s`` with ``s = match_score`` when
    the action matched the recorded one, ``kind_score`` when only its kind did,
    ``parsed_score`` when it parsed but was of another kind, 0 when it did not parse.
    UI-S1: 0.1 / 0.9 with scores 1.0 / 0.5 / 0.1. ``format_requires_thought``: the
    format counts as valid only when the reply also has a thought (UI-S1's check; the
    driver applies it, this function takes ``format_ok`` as given).
    """

    format_weight: float = 0.1
    action_weight: float = 0.9
    match_score: float = 1.0
    kind_score: float = 0.5
    parsed_score: float = 0.1
    format_requires_thought: bool = False
    point_sigma: float = 0.0
    """> 0: a point action of the right kind that missed scores between ``kind_score`` and
    ``match_score`` by a Gaussian of its distance to the target, ``exp(-d² / 2σ²)`` (σ in
    normalised screen units), so a near miss earns more than a far one (a dense signal toward
    the target, after GUI-G²'s Gaussian point rewards); 0: UI-S1's flat ``kind_score``"""

    def __post_init__(self) -> None:
        if self.point_sigma < 0:
            raise ValueError("point_sigma must be >= 0")


@dataclass(frozen=True)
class SamplingSettings:
    """How a model's replies are drawn (rollouts in training; ``guiagent eval --agent model``)."""

    temperature: float = 1.0
    """sampling temperature (0: greedy)"""
    top_p: float = 1.0
    """nucleus sampling (< 1 cuts the low-probability tail, e.g. malformed replies of a weak warm
    start; log-probs for the loss stay those of the unmodified model)"""
    min_p: float = 0.0
    """min-p sampling: drop tokens below min_p x the most likely one (0: off); keeps exploring
    coordinates while cutting malformed replies"""
    max_new_tokens: int = 64
    """longest reply per turn"""
    resample_unparseable: int = 0
    """when sampling, draw a reply that does not parse again, up to N times, from fresh seeds; the
    turn acts on the first that parses (the ones set aside are kept in the step's metadata and
    counted in the metric resampled_rate; still unparseable after N: a parse error and its
    penalty). 0: off"""

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or not 0 <= self.min_p < 1:
            raise ValueError("--temperature must be >= 0, --top-p in (0, 1] and --min-p in [0, 1)")
        if self.max_new_tokens <= 0:
            raise ValueError("--max-new-tokens must be positive")
        if self.resample_unparseable < 0:
            raise ValueError("--resample-unparseable must be >= 0 (0: off)")


@dataclass(frozen=True)
class FleetSettings:
    """Where episodes run: envs side by side, in this process or on a Ray fleet."""

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
    device: KeyValues = field(default_factory=dict)
    """device options passed to the suite's make_device (e.g. --device farm runs/farm/endpoints.json
    for androidworld, --device chromium_path /usr/bin/chromium for the browser suites)"""

    def __post_init__(self) -> None:
        if self.slots <= 0 or self.workers <= 0:
            raise ValueError("--slots and --workers must be positive")

    def open_pool(self, env: str) -> object:
        """The env pool of ``env`` (one suite, or several: ``webapps,miniwob``) these settings describe."""
        from emulators.pool_mixed import open_pool  # lazy: starts no browser or Ray until a pool is needed

        return open_pool(env, kind=self.pool, slots=self.slots, workers=self.workers, device_options=self.device,
                         worker_resources=self.worker_resources, ray_address=self.ray_address)


# ---- training -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupSettings:
    """What one iteration samples: (task, seed) groups of G episodes, more while too few differ."""

    groups_per_iteration: int = 6
    """(task, seed) groups sampled per iteration"""
    group_size: int = 4
    """G: episodes per group"""
    min_informative_groups: int = 0
    """dynamic sampling (DAPO): while fewer groups than this have unequal rewards, sample another
    --groups-per-iteration groups, at most --max-sampling-rounds rounds an iteration (0: off); a
    semi-online iteration replays more recorded episodes the same way (no device: cheap)"""
    max_sampling_rounds: int = 3
    """dynamic sampling: most rollout rounds in one iteration"""
    filter_zero_variance: bool = True
    """skip groups whose episodes all got the same reward (no GRPO signal); semi-online: groups whose
    samples got the same step rewards throughout"""
    task_sampling: Literal["uniform", "learnability"] = "uniform"
    """how an online iteration draws its groups' tasks: uniform, or learnability (a task in proportion
    to p(1 - p), p its success rate over the run's earlier online rollouts, so that groups go where
    outcomes still differ; a task always or never solved is drawn at --task-sampling-floor of the rate
    of one solved half the time)"""
    task_sampling_floor: float = 0.1
    """learnability: the least a task is drawn, as a share of a task at p = 1/2"""
    task_sampling_decay: float = 0.8
    """learnability: how much an iteration's rollouts count against the next one's (0.8: the last ~5
    iterations make p; 0: the last iteration alone)"""

    def __post_init__(self) -> None:
        if not 0.0 < self.task_sampling_floor <= 1.0:
            raise ValueError(f"--task-sampling-floor must be in (0, 1], got {self.task_sampling_floor}")
        if not 0.0 <= self.task_sampling_decay < 1.0:
            raise ValueError(f"--task-sampling-decay must be in [0, 1), got {self.task_sampling_decay}")
        if self.group_size < 2:
            raise ValueError("--group-size must be >= 2: group advantages compare episodes of one task")
        if self.groups_per_iteration <= 0 or self.max_sampling_rounds <= 0 or self.min_informative_groups < 0:
            raise ValueError("--groups-per-iteration and --max-sampling-rounds must be positive, "
                             "--min-informative-groups >= 0")


def parse_horizon_schedule(text: str) -> tuple[tuple[int, int], ...]:
    """``"0:3,4:5,8:0"`` → ``((0, 3), (4, 5), (8, 0))``: from iteration 0 a budget of 3 steps, from
    4 one of 5, from 8 the tasks' own (0). ``ValueError`` (one line) on anything else."""
    if not text.strip():
        return ()
    out = []
    for part in text.split(","):
        try:
            it, steps = (int(x) for x in part.split(":"))
        except ValueError:
            raise ValueError(f"--horizon-schedule {text!r}: give ITERATION:STEPS pairs, e.g. 0:3,4:5,8:0 "
                             "(STEPS 0: the task's own budget)") from None
        if it < 0 or steps < 0:
            raise ValueError(f"--horizon-schedule {text!r}: iterations and steps must be >= 0")
        out.append((it, steps))
    if [i for i, _ in out] != sorted({i for i, _ in out}) or out[0][0] != 0:
        raise ValueError(f"--horizon-schedule {text!r}: iterations must start at 0 and increase")
    return tuple(out)


def horizon_at(schedule: tuple[tuple[int, int], ...], iteration: int) -> int | None:
    """The step budget of ``iteration`` under ``schedule`` (None: the tasks' own).

    >>> horizon_at(((0, 3), (4, 5), (8, 0)), 5)
    5
    """
    steps = 0
    for it, s in schedule:
        if iteration >= it:
            steps = s
    return steps or None


@dataclass(frozen=True)
class CreditSettings:
    """How rewards become advantages, for every algorithm (each adds its own: rl/strategies/)."""

    advantage: Literal["episode", "step"] = "episode"
    """grpo, dr_grpo: episode, one group advantage per episode; step, group-normalised discounted
    returns per turn"""
    gamma: float = 1.0
    """γ of step-level returns (grpo/dr_grpo --advantage step, gigpo, ppo, awr)"""
    neg_adv_min_scale: float = 1.0
    """success-adaptive scaling of negative advantages: scale = m + (1-m)·group success (1: off)"""
    adv_norm: Literal["auto", "none", "batch", "per-task"] = "auto"
    """advantage normalisation on top of the method's: per-task (Dr. MAS: each task's own mean and std),
    batch (whitening), none; auto: each algorithm's own default (batch for ppo, none otherwise)"""
    entropy_modulation: float = 0.0
    """AEM's α: scale each reply's advantage by 1 + α·sign(A)·(relative response surprisal), clamped to
    [1/2, 2] (> 0 favours exploration, < 0 exploitation; 0: off)"""
    horizon_schedule: str = ""
    """step budget growing over iterations: ITERATION:STEPS pairs, e.g. 0:3,4:5,8:0 (0: the task's own);
    empty: the tasks' own budgets throughout"""

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError("--gamma must lie in [0, 1]")
        if not 0.0 <= self.neg_adv_min_scale <= 1.0:
            raise ValueError("--neg-adv-min-scale must lie in [0, 1] (1: off)")
        parse_horizon_schedule(self.horizon_schedule)  # a malformed schedule fails before anything starts

    def max_steps(self, iteration: int) -> int | None:
        """The step budget of ``iteration`` under --horizon-schedule (None: the tasks' own)."""
        return horizon_at(parse_horizon_schedule(self.horizon_schedule), iteration)


@dataclass(frozen=True)
class UpdateSettings:
    """The learner's update: PPO-clip steps (the loss is each algorithm's), KL term, trust region."""

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
    (default: each algorithm's own: seq_mean_token_sum_norm for dr_grpo, token_mean otherwise)"""
    max_grad_norm: float = 1.0
    """gradient clipping: largest global norm of an optimiser step's gradient"""
    entropy_coef: float = 0.0
    """entropy bonus: the loss less this times the policy's mean entropy per completion token (of its
    whole next-token distribution, aggregated as the loss is), against the entropy collapse of long
    runs; stored as the metric update_entropy (0: off, nothing extra computed)"""
    rescore: Literal["auto", "on", "off"] = "auto"
    """re-score every rollout turn with the learner before the update: the PPO ratio's old log-probs
    become the learner's own and the train-inference mismatch (KL between the engine's and the
    learner's log-probs of the sampled tokens) is stored as the metric mismatch_kl (auto: on with
    --rollout-engine vllm)"""
    tis_cap: float = 2.0
    """when re-scoring: truncated importance sampling, each token's advantage weighted by
    min(pi_learner / pi_rollout, C) with this C (0: measure the mismatch, no correction)"""

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.epochs <= 0 or self.micro_batch_size <= 0 or self.mini_batch_size < 0:
            raise ValueError("--lr, --epochs and --micro-batch-size must be positive, --mini-batch-size >= 0")
        if self.clip_eps_low <= 0 or self.clip_eps_high <= 0:
            raise ValueError("clip epsilons must be positive")
        if self.kl_coef < 0 or self.kl_target < 0 or self.max_kl_old < 0 or self.kl_horizon <= 0:
            raise ValueError("--kl-coef, --kl-target and --max-kl-old must be >= 0, --kl-horizon positive")
        if self.kl_target > 0 and self.kl_coef <= 0:
            raise ValueError("--kl-target adapts β from --kl-coef: give a positive --kl-coef too")
        if self.tis_cap < 0:
            raise ValueError("--tis-cap must be >= 0 (0: measure the mismatch without correcting it)")
        if self.max_grad_norm <= 0:
            raise ValueError("--max-grad-norm must be positive")
        if not 0 <= self.entropy_coef < 1:
            raise ValueError(f"--entropy-coef {self.entropy_coef}: give a bonus in [0, 1) (0: off)")
        aggs = ("", "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm",
                "group_token_mean")
        if self.loss_agg not in aggs:
            raise ValueError(f"--loss-agg {self.loss_agg!r}: choose one of {', '.join(a for a in aggs if a)}")


@dataclass(frozen=True)
class LearnerSettings:
    """How the learner holds its weights: precision, LoRA adapters, activation memory."""

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

    def __post_init__(self) -> None:
        if self.lora_rank < 0 or self.lora_alpha <= 0:
            raise ValueError("--lora-rank must be >= 0 (0: full fine-tuning) and --lora-alpha positive")


@dataclass(frozen=True)
class RolloutSettings:
    """When rollouts run (beside the update or between updates) and what generates them."""

    rollout: Literal["sync", "async"] = "sync"
    """async: rollouts of the next iteration run while the learner updates (bounded by --max-lag);
    sync runs are reproducible with the same --seed, async runs are not (see docs/training.md)"""
    max_lag: int = 1
    """async: drop rollouts produced more than this many policy versions ago"""
    rollout_engine: Literal["transformers", "vllm"] = "transformers"
    """what generates the rollouts' replies: the learner's own transformers model, or a vLLM engine
    colocated on the learner's GPU (weights pushed after every update, GPU memory handed over with
    vLLM's sleep mode; needs pip install guiagent[vllm] and CUDA; sync rollouts)"""
    min_batch_share: float = 1.0
    """the rollout loop acts as soon as this share of the slots in flight have their next screen,
    while the others' pages still settle (1: every slot each turn; 0.5: half): a slow gesture then
    holds up no other slot (docs/fleet.md; a Ray worker's slots come back together; a fleet of
    several suites takes turns)"""

    def __post_init__(self) -> None:
        if self.max_lag < 0:
            raise ValueError("--max-lag must be >= 0")
        if not 0.0 < self.min_batch_share <= 1.0:
            raise ValueError(f"--min-batch-share must be in (0, 1], got {self.min_batch_share}")
        if self.rollout_engine == "vllm" and self.rollout == "async":
            raise ValueError("--rollout-engine vllm generates in sync mode (the engine sleeps during each update): "
                             "drop --rollout async")


@dataclass(frozen=True)
class GuardSettings:
    """Stability guards, checked after every update, and alarms."""

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
    max_engine_gap: float = 0.1
    """stale-weights guard: when the rollout engine's log-probs of its own samples are further than this
    from the learner's (mean |diff| a token, measured with --rescore on, as on --rollout-engine vllm),
    the run stops whatever --guard-action says (0: off)"""

    def __post_init__(self) -> None:
        for name in ("max_parse_error_rate", "max_kl_ref", "min_entropy", "max_engine_gap"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0 (0 turns it off)")


@dataclass(frozen=True)
class EvalSettings:
    """Held-out evaluation during training (greedy, seeds from 1,000,000)."""

    eval_episodes: int = 24
    """held-out episodes evaluated greedily before and after training (0: skip)"""
    eval_every: int = 0
    """also evaluate every N iterations (stored as the metric eval_success; 0: only before and after)"""
    eval_unseen_episodes: int = -1
    """--targets seen: held-out episodes on unseen targets (the suite's held-out targets) evaluated beside
    the --eval-episodes on seen ones (the metric eval_success_unseen); -1: as many as --eval-episodes, 0:
    none"""

    def __post_init__(self) -> None:
        if self.eval_episodes < 0 or self.eval_every < 0 or self.eval_unseen_episodes < -1:
            raise ValueError("--eval-episodes and --eval-every must be >= 0, --eval-unseen-episodes >= -1")


@dataclass(frozen=True)
class WarmStartSettings:
    """No --model: a tiny model built here and fine-tuned on oracle demonstrations first."""

    warm_start_demos: int = 120
    """no --model: oracle episodes recorded for the SFT warm start"""
    warm_start_steps: int = 400
    """no --model: SFT optimiser steps of the warm start"""
    warm_start_words: Literal["prefixed", "bare"] = "prefixed"
    """no --model: the tiny model's tokenizer (guiagent model init --words): prefixed, as GPT-2 and Qwen
    split, or bare, where a word is the same tokens in a goal and in a quoted element name"""
    warm_start_copy_steps: int = 0
    """no --model: steps of the tiny model's copy warm-up before its SFT (guiagent model init
    --copy-steps): random token runs written twice, so that it can copy a name from the goal"""
    warm_start_copy_until: float = 0.0
    """no --model: end the copy warm-up once it copies this share of a probe's tokens (guiagent model init
    --copy-until), so that it stops where the circuit formed on this machine; --warm-start-copy-steps is
    then its most (0: all of them)"""
    warm_start_copy_repeats: int = 0
    """no --model: steps of the copy warm-up after it formed, half of its runs drawn from a few short tokens
    so that the copy keeps its place where tokens repeat (guiagent model init --copy-repeats; 0: none)"""
    warm_start_name_weight: float = 1.0
    """no --model: the warm start's loss weight on the element's name in replies that name one (the
    marks format; guiagent sft --train.name-weight)"""
    warm_start_action_weight: float = 1.0
    """no --model: the warm start's loss weight on the action's kind in each reply (guiagent sft
    --train.action-weight): against a large name weight, it keeps the reply's choice of action from
    being drowned by the name"""
    warm_start_goal_frames: float = 0.0
    """no --model: the share of the warm start's examples whose goal is framed by neutral words
    ("Please ... Thanks."), so that a goal's length does not give its target away (guiagent sft
    --train.goal-frames)"""
    warm_start_goal_relabel: float = 0.0
    """no --model: the share of the warm start's first steps that name their element in the goal
    drawn relabelled in hindsight: the goal names a sibling element on the same screen and the reply
    acts on it (guiagent sft --train.goal-relabel)"""
    warm_start_tasks: tuple[str, ...] = ()
    """no --model: the tasks the warm start's demonstrations cover, a part of --tasks (default: all of
    them); the others the run meets only in RL, learned from the model's own samples"""
    warm_start_rename: float = 0.0
    """no --model: the share of the warm start's examples whose target name is replaced by a made-up one
    of the same shape in the whole prompt and the reply (guiagent sft --train.rename): names that never
    repeat leave copying the goal's name as the only way, which carries over to targets held out of
    training (0: the names as recorded)"""
    warm_start_recover: float = 0.0
    """no --model: the share of the warm start's examples that follow one failed turn on the same screen (a
    name the screen does not list, a reply broken off, with the error the env reports; guiagent sft
    --train.recover): demonstrations never fail, so without them a model's first failed reply leaves it
    on prompts it never learned on (0: the chats as recorded; measured once, worse: no recipe uses it)"""

    warm_start_mark_states: bool = False
    """no --model, the marks format: the tiny model's prompts list each element's states after its role
    (checked, selected, expanded or collapsed, disabled), so that it can see which boxes it ticked and
    which tab or section is open (saved with the model: its evaluations are prompted the same way)"""

    def __post_init__(self) -> None:
        if self.warm_start_demos <= 0 or self.warm_start_steps < 0:
            raise ValueError("--warm-start-demos must be positive and --warm-start-steps >= 0")
        if not 0.0 <= self.warm_start_copy_until <= 1.0:
            raise ValueError(f"--warm-start-copy-until must be between 0 and 1, got {self.warm_start_copy_until}")
        if not 0 <= self.warm_start_copy_steps <= 100_000:
            raise ValueError(f"--warm-start-copy-steps must be between 0 and 100000, got {self.warm_start_copy_steps}")
        if not 0 <= self.warm_start_copy_repeats <= 100_000:
            raise ValueError(f"--warm-start-copy-repeats must be between 0 and 100000, got {self.warm_start_copy_repeats}")
        if self.warm_start_copy_repeats and not self.warm_start_copy_steps:
            raise ValueError("--warm-start-copy-repeats follows the copy warm-up: give --warm-start-copy-steps too")
        if not self.warm_start_name_weight > 0:
            raise ValueError(f"--warm-start-name-weight must be positive, got {self.warm_start_name_weight}")
        if not self.warm_start_action_weight > 0:
            raise ValueError(f"--warm-start-action-weight must be positive, got {self.warm_start_action_weight}")
        if not 0.0 <= self.warm_start_goal_frames <= 1.0:
            raise ValueError(f"--warm-start-goal-frames must be in [0, 1], got {self.warm_start_goal_frames}")
        if not 0.0 <= self.warm_start_rename <= 1.0:
            raise ValueError(f"--warm-start-rename must be in [0, 1], got {self.warm_start_rename}")
        if not 0.0 <= self.warm_start_recover <= 1.0:
            raise ValueError(f"--warm-start-recover must be in [0, 1], got {self.warm_start_recover}")
        if not 0.0 <= self.warm_start_goal_relabel <= 1.0:
            raise ValueError(f"--warm-start-goal-relabel must be in [0, 1], got {self.warm_start_goal_relabel}")


# ---- one section per algorithm that has settings of its own (rl/strategies/) ----------------------


@dataclass(frozen=True)
class BranchSettings:
    """Branched rollouts (``rl.branch``): G continuations sampled from the very same env state."""

    branch_at: Literal["none", "first", "every", "uncertain"] = "none"
    """none: each of a group's G episodes starts from its own reset; first: one reset per (task,
    seed) is captured and its G branches restored from it; every: a trunk episode is sampled
    first and G branches start from each of its states (the trunk's turns are not trained);
    uncertain: from the --branch-points states of each trunk where its reply was least certain.
    Needs envs that can snapshot (webapps, miniwob; docs/gymnasium.md, "Snapshots")"""
    branch_points: int = 1
    """--branch-at uncertain: states of each trunk to branch from"""

    def __post_init__(self) -> None:
        if self.branch_points < 1:
            raise ValueError(f"--branch-points must be >= 1, got {self.branch_points}")


@dataclass(frozen=True)
class GiGPOSettings:
    """gigpo: episode advantage + step advantage within anchor-state groups."""

    step_weight: float = 1.0
    """gigpo: ω, the weight of the step-level (anchor-state) advantage"""
    gigpo_norm: Literal["mean", "mean_std"] = "mean"
    """gigpo: subtract the group mean only (the reference code's default) or also divide by the std"""
    anchor_match: Literal["exact", "tolerant"] = "exact"
    """gigpo: anchor states are equal screenshot hashes (exact) or screens whose thumbnails differ in at
    most --anchor-tolerance of their pixels (tolerant: a clock, a cursor)"""
    anchor_tolerance: float = 0.01
    """gigpo --anchor-match tolerant: largest share of differing thumbnail pixels"""

    def __post_init__(self) -> None:
        if not 0 <= self.anchor_tolerance < 1:
            raise ValueError("--anchor-tolerance must lie in [0, 1)")


@dataclass(frozen=True)
class CriticSettings:
    """ppo, awr: the turn-level value head."""

    gae_lambda: float = 0.95
    """ppo: λ of GAE over turns"""
    critic_lr: float = 1e-3
    """ppo, awr: Adam learning rate of the value head"""
    critic_epochs: int = 100
    """ppo, awr: passes of the value head over each iteration's turns (the head is small and reads
    fixed features, so 100 passes are cheap; 4 leave it near a constant: docs/results.md, "The
    critic's fit")"""
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

    def __post_init__(self) -> None:
        if self.critic_lr <= 0 or self.critic_epochs <= 0 or self.value_clip < 0 or self.critic_warmup < 0:
            raise ValueError("--critic-lr and --critic-epochs must be positive; --value-clip and --critic-warmup "
                             ">= 0")
        if not 0 <= self.gae_lambda <= 1:
            raise ValueError("--gae-lambda must lie in [0, 1]")
        if self.critic_features not in ("start", "policy"):
            raise ValueError(f"--critic-features {self.critic_features!r}: choose start or policy")


@dataclass(frozen=True)
class AWRSettings:
    """awr: advantage-weighted regression over a replay buffer of stored episodes."""

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
    replay_demos: bool = True
    """awr: seed the replay buffer with the recorded episodes (--data, else the warm start's
    demonstrations); --no-replay-demos: the buffer holds the run's own rollouts only, so that every update learns
    from the model's own samples (no imitation of recorded episodes)"""
    awr_positive_returns: bool = False
    """awr: the actor regresses only on turns whose return is positive (the turns that led to reward), each
    still weighted by exp(A/β); the critic fits every turn. Without it a failure the critic expected (a quit
    on a task never solved) weighs about as much as a success, and the model imitates its own failures"""

    def __post_init__(self) -> None:
        if self.awr_beta <= 0 or self.awr_max_weight <= 0 or self.replay_size <= 0:
            raise ValueError("--awr-beta, --awr-max-weight and --replay-size must be positive")
        if self.replay_episodes < 0 or self.offline_iterations < 0:
            raise ValueError("--replay-episodes and --offline-iterations must be >= 0")


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
    (docs/results.md, "Semi-online RL")"""

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
    an update the engine sleeps and hands its memory back). Not used on vLLM's CPU build, where vLLM
    would take it of host memory: there --vllm.kv-cache-gib sizes the KV cache"""
    kv_cache_gib: float = 0.0
    """the engine's KV cache in GiB (vLLM's kv_cache_memory_bytes; 0: auto: on a GPU what
    --vllm.gpu-memory-utilization leaves after the weights, on vLLM's CPU build room for 4 prompts of
    --vllm.max-model-len tokens, at least 0.25 GiB of host memory)"""
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
        if self.kv_cache_gib < 0:
            raise ValueError("--vllm.kv-cache-gib must be >= 0 (0: auto)")
        if self.max_model_len <= 0 or self.sleep_level not in (0, 1, 2):
            raise ValueError("--vllm.max-model-len must be positive and --vllm.sleep-level 0, 1 or 2")
        if self.dtype not in ("auto", "bfloat16", "float16", "float32"):
            raise ValueError("--vllm.dtype is auto, bfloat16, float16 or float32")
