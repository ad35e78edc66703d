"""The trainer's configuration: :class:`TrainConfig`, made of the sections of :mod:`rl.settings`,
and the constants that tie training, evaluation and the warm start together.

Each section validates its own fields; :meth:`TrainConfig.__post_init__` checks what spans
sections and asks the chosen algorithm's declaration (:meth:`rl.algorithms.Algorithm.check`) to
refuse what it cannot honour. Flags and YAML keys stay flat (``--lr``, ``temperature: 0.7``);
a YAML file may also group a section's keys under its name (``update: {lr: 3e-4}``), and
:meth:`TrainConfig.build` takes either form in Python. The forms merge (``lr: 3e-4`` beside
``update: {epochs: 3}`` sets both); one setting given both ways with two values is refused.

Seeds: training samples task seeds below ``TRAIN_SEED_RANGE`` (1,000,000); evaluation starts
at ``rl.evaluate.EVAL_SEED_BASE`` (1,000,000), so evaluation is on held-out task instances.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from guiagent.config import Flat, build
from judge.compose import RewardConfig
from judge.settings import JudgeSettings
from rl.algorithms import algorithm
from rl.settings import (
    MAX_EPISODES,
    TRAIN_SEED_RANGE,
    WARM_START_TASKS,
    AWRSettings,
    BranchSettings,
    CreditSettings,
    CriticSettings,
    EvalSettings,
    FleetSettings,
    GiGPOSettings,
    GroupSettings,
    GuardSettings,
    LearnerSettings,
    RolloutSettings,
    SamplingSettings,
    SemiOnlineSettings,
    UpdateSettings,
    VLLMSettings,
    WarmStartSettings,
)

__all__ = [
    "EMBEDDED_RECIPE",
    "GOAL_CONDITIONED_TASKS",
    "STAGED_ONLY",
    "TINY_MAX_PIXELS",
    "TRAIN_SEED_RANGE",
    "WARM_START_TASKS",
    "WEBAPPS_RECIPE",
    "SemiOnlineSettings",
    "TrainConfig",
    "VLLMSettings",
    "embedded_recipe",
]

#: ~128 visual tokens a screenshot: enough for fixed layouts, and 5x cheaper than the default
TINY_MAX_PIXELS = 28 * 28 * 128

#: ``guiagent train`` with no ``--model``, ``--resume`` or ``--config`` on suites other than webapps (and
#: under :data:`WEBAPPS_RECIPE` on webapps): a short SFT warm start that leaves something to learn,
#: semi-online RL on its demonstrations, then online RL, each stage adding to the last within minutes on
#: 2 CPU cores on webapps' fixed-layout tasks (measured: docs/results.md, "The former default";
#: configs/train_webapps_fixed_json.yaml spells it out there). Flags override any of it.
EMBEDDED_RECIPE: dict[str, Any] = {
    "warm_start_steps": 160, "iterations": 30, "semi": {"iterations": 20, "epochs": 1},
    "groups_per_iteration": 8, "group_size": 8, "slots": 8, "algo": "dr_grpo", "lr": 3e-4, "epochs": 2,
    "mini_batch_size": 32, "temperature": 1.0, "min_p": 0.05, "kl_coef": 0.1, "neg_adv_min_scale": 0.5,
    "min_informative_groups": 6, "max_sampling_rounds": 4, "resample_unparseable": 2, "eval_episodes": 192,
    "kl_reference": "stage",
}

#: the embedded default's tasks on webapps: the fixed-layout family, each task with its shuffled variant
#: (the seed also permutes the layout, so the target sits wherever the screen puts it), and go_home
GOAL_CONDITIONED_TASKS: tuple[str, ...] = (
    "open_app", "open_app_shuffled", "settings_turn_on", "settings_turn_on_shuffled", "settings_turn_off",
    "settings_turn_off_shuffled", "settings_open_section", "settings_open_section_shuffled", "files_open_folder",
    "files_open_folder_shuffled", "go_home")

#: on top of :data:`EMBEDDED_RECIPE` (less its :data:`STAGED_ONLY` settings) for ``--env webapps`` (the default
#: env): goal-conditioned grounding.
#: The marks format (the screen's elements listed beside the screenshot, the tiny model answering by the
#: element's name), the fixed-layout tasks and their shuffled variants, a warm start on demonstrations of
#: them (bare words, so that a name is the same tokens in the goal and the reply, and a copy warm-up, so
#: that the tiny model copies the goal's name rather than learning a map from goal to answer),
#: then online AWR with the warm start's demonstrations in its replay buffer (the route on which RL adds
#: for a tiny model; the staged GRPO recipe took away from the warm start there: docs/results.md,
#: "Goal-conditioned grounding" and "The embedded default")
WEBAPPS_RECIPE: dict[str, Any] = {
    "action_format": "marks", "device": {"marks": "true"}, "tasks": GOAL_CONDITIONED_TASKS,
    "warm_start_demos": 1200, "warm_start_steps": 800, "warm_start_words": "bare",
    "warm_start_copy_steps": 1000, "warm_start_name_weight": 5.0, "mode": "online", "algo": "awr",
    "iterations": 10, "group_size": 4, "groups_per_iteration": 16, "resample_unparseable": 0,
}

#: the settings of :data:`EMBEDDED_RECIPE` that only its staged Dr. GRPO reads (the replayed stage, the KL
#: term and its reference, the scaling of negative group advantages, dynamic sampling): the webapps recipe's
#: online AWR leaves them out, so that it lists only what it uses (an unused setting given is refused)
STAGED_ONLY = ("semi", "kl_coef", "kl_reference", "neg_adv_min_scale", "min_informative_groups",
               "max_sampling_rounds")


def embedded_recipe(env: str = "webapps") -> dict[str, Any]:
    """The embedded default's recipe for ``env``: :data:`EMBEDDED_RECIPE`; on webapps, without its
    :data:`STAGED_ONLY` settings and with :data:`WEBAPPS_RECIPE` on top (other suites and mixed fleets keep
    the JSON format, their own tasks and devices, and the staged recipe)."""
    if env != "webapps":
        return dict(EMBEDDED_RECIPE)
    return {**{k: v for k, v in EMBEDDED_RECIPE.items() if k not in STAGED_ONLY}, **WEBAPPS_RECIPE}


@dataclass
class TrainConfig:
    """Online and semi-online RL on a suite: GRPO family, GiGPO, PPO with a critic, AWR."""

    env: str = "webapps"
    """suite: webapps, miniwob or androidworld; several, comma-separated (webapps,miniwob), for one run
    over a mixed fleet whose tasks read <suite>.<task> (e.g. --tasks webapps.open_app miniwob.click-button)"""
    env_weights: dict[str, float] = field(default_factory=dict)
    """mixed --env: sampling weight of each suite's tasks (e.g. --env-weights webapps 2 miniwob 1; default:
    every task equally likely)"""
    tasks: tuple[str, ...] = ()
    """task ids to train on (default: every task of the suite; without --model, where a tiny model is
    warm-started from scratch, webapps' fixed-layout family, the tasks such a model can learn on CPU)"""
    mode: Literal["auto", "online", "semi-online", "mixed", "staged"] = "auto"
    """online: episodes on live envs; semi-online: recorded episodes (--data) replayed with the
    policy's own replies in the history and a patch step on mismatches (no device during rollouts);
    mixed: --semi.per-online semi-online iterations, then one online, and again; staged: the first
    --semi.iterations iterations semi-online, the rest online, with a held-out evaluation between;
    auto: staged on the warm start's demonstrations when no --model is given, else online"""
    targets: Literal["all", "seen"] = "all"
    """which targets training may use: all, or seen (the suite's held-out targets, e.g. two of webapps'
    apps and one setting, section and folder, are the target of no demonstration and no training rollout;
    the held-out evaluation then reports episodes on seen and on unseen targets apart). Suites without
    held-out targets have seen targets only"""
    rename_targets: float = 0.0
    """share of online training groups whose targets are shown under made-up names, on the screens and in
    the goal (with --targets seen: a seen target renamed, never to a name of the phone): names that no
    model can memorise, so that what the model's own successes reward is copying the goal's name to the
    screen, which carries over to the held-out targets (0: none; suites without targets to rename ignore it)"""
    data: tuple[str, ...] = ()
    """--mode semi-online|mixed: run directories of recorded trajectories (e.g. from
    guiagent eval --agent oracle, or guiagent data import); episodes of --tasks only, when given"""
    algo: str = "grpo"
    """the training algorithm, one declared in rl/algorithms.py: grpo: std-normalised group advantages, token-mean loss; dr_grpo: no std, constant-length normaliser;
    gigpo: episode advantage + step advantage within anchor-state groups (same screen); ppo: a
    turn-level critic on the policy's hidden state, GAE over turns; awr: advantage-weighted
    regression over a replay buffer that starts from --data (or the warm start's demos), see
    rl/strategies/"""
    action_format: str = "auto"
    """the action format the policy is prompted in and parsed with (json, uitars15, qwen_mobile,
    qwen_computer, marks, ...; auto: the model folder's guiagent_agent.json, written by sft and train,
    else json). A pretrained model starts best in the format it was trained on: qwen_mobile for
    Qwen2.5-VL on a phone screen, uitars15 for UI-TARS-1.5"""
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
    max_env_steps: int = 0
    """a budget of env steps: the run stops after the iteration whose rollouts reach it, so that
    methods that spend steps differently (branched rollouts, resampling rounds) compare at equal
    env steps; 0: no budget (--iterations alone). Semi-online replays take no env step"""
    seed: int = 0
    """seeds the task and seed plan, the sampling generators of the rollout slots, the order of
    turns in the update and the model's initialisation: in sync mode, one seed gives one run"""
    groups: Flat[GroupSettings] = field(default_factory=GroupSettings)
    sampling: Flat[SamplingSettings] = field(default_factory=SamplingSettings)
    fleet: Flat[FleetSettings] = field(default_factory=FleetSettings)
    rollouts: Flat[RolloutSettings] = field(default_factory=RolloutSettings)
    credit: Flat[CreditSettings] = field(default_factory=CreditSettings)
    update: Flat[UpdateSettings] = field(default_factory=UpdateSettings)
    learner: Flat[LearnerSettings] = field(default_factory=LearnerSettings)
    gigpo: Flat[GiGPOSettings] = field(default_factory=GiGPOSettings)
    branch: Flat[BranchSettings] = field(default_factory=BranchSettings)
    critic: Flat[CriticSettings] = field(default_factory=CriticSettings)
    awr: Flat[AWRSettings] = field(default_factory=AWRSettings)
    evaluation: Flat[EvalSettings] = field(default_factory=EvalSettings)
    guards: Flat[GuardSettings] = field(default_factory=GuardSettings)
    warm_start: Flat[WarmStartSettings] = field(default_factory=WarmStartSettings)
    semi: SemiOnlineSettings = field(default_factory=SemiOnlineSettings)
    """semi-online settings (--semi.patch.mode, --semi.gamma, ...)"""
    vllm: VLLMSettings = field(default_factory=VLLMSettings)
    """--rollout-engine vllm: --vllm.gpu-memory-utilization, --vllm.sleep-level, ..."""
    rewards: RewardConfig = field(default_factory=RewardConfig)
    """reward components (--rewards.progress 0.5, --rewards.parse-penalty -0.1, ...)"""
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    """a VLM judge scoring each finished episode inside the rollout (--judge.model M --judge.weight 0.5,
    or --judge.mode log to only record and calibrate its verdicts); its weighted score is the final
    step's reward part "judge", stored before the step"""
    log_to: tuple[Literal["tensorboard", "wandb"], ...] = ()
    """also log every metric to TensorBoard (RUN_DIR/tensorboard) and/or W&B (offline unless WANDB_MODE
    says otherwise); the store always gets them"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    json: bool = False
    """print one JSON object with the figures as the last stdout line"""

    @classmethod
    def build(cls, **fields: Any) -> "TrainConfig":
        """A config from field values, flat (``lr=3e-4``) or by section (``update=UpdateSettings(...)``
        or ``update={"lr": 3e-4}``), checked as strictly as YAML (:func:`guiagent.config.build`)."""
        return build(cls, **fields)

    @classmethod
    def embedded(cls, env: str = "webapps", **overrides: Any) -> "TrainConfig":
        """The embedded default's recipe for ``env`` (:func:`embedded_recipe`) with ``overrides`` on top:
        what ``guiagent train`` runs when no ``--model``, ``--resume`` or ``--config`` is given."""
        return build(cls, base=build(cls, env=env, **embedded_recipe(env)), **overrides)

    def __post_init__(self) -> None:
        strategy = algorithm(self.algo)
        if self.resume and self.overwrite:
            raise ValueError("--resume continues a run and --overwrite starts one again: give one of them")
        if self.iterations < 0:
            raise ValueError("--iterations must be >= 0")
        if self.max_env_steps < 0:
            raise ValueError("--max-env-steps must be >= 0 (0: no budget)")
        if not 0 <= self.threads <= 1024:
            raise ValueError(f"--threads must lie in 0..1024 (0: torch's default), got {self.threads}")
        for name, n in (("--groups-per-iteration x --group-size", self.groups.groups_per_iteration
                         * self.groups.group_size),
                        ("--eval-episodes", self.evaluation.eval_episodes),
                        ("--warm-start-demos", self.warm_start.warm_start_demos)):
            if n > MAX_EPISODES:
                raise ValueError(f"{name} is {n:,}: at most {MAX_EPISODES:,} episodes a round (each is kept in "
                                 "memory)")
        if not 0.0 <= self.rename_targets <= 1.0:
            raise ValueError(f"--rename-targets is a share of the training groups, in [0, 1]; got "
                             f"{self.rename_targets}")
        if self.rename_targets and self.targets != "seen":
            raise ValueError("--rename-targets shows seen targets under made-up names: give --targets seen too")
        if strategy.online_only and self.mode == "auto":
            self.mode = "online"
        strategy.check(self)
        auto = self.mode == "auto"
        if auto:
            self.mode = "staged" if not self.model and not self.resume else "online"
        self._check_mode(auto)
        if self.action_format != "auto":
            from grounding import FORMAT_NAMES  # lazy: the action formats' package, only when one is named

            if self.action_format not in FORMAT_NAMES:
                raise ValueError(f"--action-format {self.action_format!r}: choose auto or one of "
                                 f"{', '.join(FORMAT_NAMES)}")
            marks_on = [v for k, v in self.fleet.device.items() if k in ("marks", "with_marks")
                        and str(v).lower() in ("true", "1", "yes")]
            if self.action_format == "marks" and not marks_on:
                raise ValueError("--action-format marks acts on the screen's numbered elements: turn them on with "
                                 "--device marks true (browser suites) or --device with_marks true (Android)")
        if self.warm_start.warm_start_mark_states and self.action_format != "marks":
            raise ValueError("--warm-start-mark-states lists the elements' states in the marks format's prompts: "
                             "give --action-format marks too")
        suites = [e.strip() for e in self.env.split(",")]
        for name, w in self.env_weights.items():
            if name not in suites or not w > 0:
                raise ValueError(f"--env-weights {name} {w}: weights are positive and name suites of --env {self.env}")
        u = self.update
        if u.rescore == "auto" or not u.loss_agg:  # each algorithm's own defaults, written out
            rescore = u.rescore if u.rescore != "auto" else (
                "on" if self.rollouts.rollout_engine == "vllm" and strategy.ratio else "off")
            self.update = replace(u, rescore=rescore, loss_agg=u.loss_agg or strategy.default_loss_agg)

    def _check_mode(self, auto: bool = False) -> None:
        """The checks of --mode against the rest (one line each, saying how to fix it); ``auto``: the mode
        was auto, and is what it became."""
        if self.update.kl_reference == "stage" and self.mode == "staged" and self.learner.lora_rank:
            raise ValueError("--kl-reference stage re-anchors the KL term on full weights where the online stage "
                             "begins; a LoRA learner's reference is its frozen base: drop --lora-rank or use start")
        if self.mode in ("semi-online", "mixed") and not self.data:
            raise ValueError(f"--mode {self.mode} replays recorded trajectories: give --data RUN_DIR [RUN_DIR ...]")
        if self.mode == "staged" and not self.data and self.model:
            raise ValueError("--mode staged with --model replays recorded trajectories: give --data RUN_DIR "
                             "(without --model, the warm start's demonstrations are replayed)")
        if self.mode != "online" and self.rollouts.rollout == "async":
            raise ValueError("--rollout async is for online rollouts; semi-online iterations need no device wait")
        if self.branch.branch_at != "none" and self.mode != "online":
            why = {"staged": f"replays recorded ones in its first stage (--semi.iterations {self.semi.iterations})",
                   "mixed": "replays recorded ones between its online iterations"}.get(self.mode, "replays recorded ones")
            became = " (--mode auto, without --model)" if auto else ""
            raise ValueError(f"--branch-at branches live episodes; --mode {self.mode}{became} {why}: give --mode online")

    def check_given(self, given: frozenset[str]) -> None:
        """Refuse a setting the user gave (a flag or a config file's key: ``given``, key paths) that
        this run leaves unused: another algorithm's, one the mode's iterations never read, one whose
        feature is off (:meth:`unused`). Called by :func:`guiagent.config.parse_config` and
        :meth:`build`; defaults and the embedded recipe's values are never refused."""
        unused = self.unused()
        for key in sorted(given):
            why = unused.get(key) or next((w for k, w in unused.items() if k.endswith(".") and key.startswith(k)),
                                          None)
            if why is not None:
                raise ValueError(f"--{key.replace('_', '-')} {why}")

    def unused(self) -> dict[str, str]:
        """The settings this config leaves unused: key path (or section prefix, ``semi.``) -> why (the
        words after the flag). The algorithm's (:meth:`rl.algorithms.Algorithm.unused`), then the mode's."""
        out = algorithm(self.algo).unused(self)
        replays = "replays recorded episodes"
        if self.mode == "online":
            out["semi."] = "configures replayed iterations (--mode semi-online, mixed or staged); --mode online has none"
        elif self.mode == "semi-online":
            for key, why in (
                    ("gamma", f"discounts online step returns; --mode semi-online {replays}, whose returns "
                              "--semi.gamma discounts"),
                    ("rewards.", f"weighs online rewards; --mode semi-online {replays}, rewarded by the matcher "
                                 "(--semi.rewards.*)"),
                    ("max_env_steps", f"is a budget of env steps; --mode semi-online {replays} and takes none"),
                    ("horizon_schedule", f"sets online step budgets; --mode semi-online {replays} to their "
                                         "recorded length"),
                    ("advantage", f"is an online advantage; --mode semi-online {replays}, whose advantages "
                                  "--semi.step-weight and --semi.episode-weight weigh"),
                    ("neg_adv_min_scale", f"scales online group advantages; --mode semi-online {replays}, whose "
                                          "advantages it does not scale"),
                    ("rename_targets", f"renames the targets of online rollouts; --mode semi-online {replays}"),
                    ("semi.iterations", "is for --mode staged"), ("semi.per_online", "is for --mode mixed")):
                out[key] = why
        elif self.mode == "mixed":
            out["semi.iterations"] = "is for --mode staged (--mode mixed alternates: --semi.per-online)"
        elif self.mode == "staged":
            out["semi.per_online"] = "is for --mode mixed (--mode staged replays first: --semi.iterations)"
        u = self.update
        if u.kl_coef == 0:
            for key in ("kl_kind", "kl_target", "kl_horizon", "kl_reference", "max_kl_ref"):
                out.setdefault(key, "concerns the KL term to a reference policy, and there is none (--kl-coef 0)")
        elif self.mode != "staged":
            out.setdefault("kl_reference", f"picks the KL reference of a staged run's online stage; --mode {self.mode} "
                                           "has one stage, held to its start")
        if not self.groups.min_informative_groups:
            out["max_sampling_rounds"] = "bounds dynamic sampling, which is off (--min-informative-groups 0)"
        if self.mode == "semi-online":
            out.setdefault("task_sampling", "draws the tasks of online groups; --mode semi-online replays recorded "
                                            "episodes")
        if self.mode == "semi-online" or self.groups.task_sampling == "uniform":
            for key in ("task_sampling_floor", "task_sampling_decay"):
                out.setdefault(key, "shapes --task-sampling learnability, which this run does not use")
        return out

    def is_semi_online(self, iteration: int) -> bool:
        """Whether iteration ``iteration`` replays recorded episodes (--mode semi-online / mixed / staged)."""
        mode, semi = self.mode, self.semi
        return (mode == "semi-online" or (mode == "mixed" and iteration % (semi.per_online + 1) != semi.per_online)
                or (mode == "staged" and iteration < semi.iterations))
