"""Evaluation and the SFT warm start: library functions the CLI and the trainer both call.

Episode ``i`` runs task ``tasks[i % len(tasks)]`` with seed ``seed + i // len(tasks)``.
Evaluation seeds start at 1,000,000 by default, a range training never samples
(training seeds lie below it), so results are on held-out task instances.

    >>> from rl.evaluate import EvalConfig, run_eval          # doctest: +SKIP
    >>> r = run_eval(EvalConfig(env="webapps", agent="oracle", episodes=4, out="runs/oracle"))
    >>> r.success_rate
    1.0
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Literal

from emulators.suites import get_suite, parse_env_id
from emulators.suites.mixed import split_env
from guiagent.config import Flat, build, check_model_path, to_mapping, validate_out_dir
from guiagent.policy.hf import load_transformers
from guiagent.policy.tiny import TinyModelSpec, build_tiny_model
from guiagent.progress import progress_bar
from guiagent.rewards import RewardConfig
from guiagent.store import Store
from guiagent.writing import disk_full
from rl.agents import AgentSettings, OraclePolicy, RandomPolicy, load_agent, tiny_model_settings
from rl.match import MatchConfig
from rl.offline_eval import RecordedPolicy, run_offline_eval
from rl.replay import recorded_episodes
from rl.rollout import EpisodeRequest, run_rollout
from rl.settings import MAX_EPISODES, TRAIN_SEED_RANGE, FleetSettings, SamplingSettings
from rl.sft import SFTConfig, load_examples, load_trajectories, train_sft
from rl.sop import semi_online_eval
from rl.timing import PhaseTimes

__all__ = ["EVAL_SEED_BASE", "MAX_EPISODES", "EvalConfig", "EvalResult", "NoEpisodeStarted", "pick_tasks",
           "make_policy", "episode_plan", "run_eval", "check_started", "run_status_after", "suite_of",
           "success_by_suite", "warm_start"]

log = logging.getLogger(__name__)

EVAL_SEED_BASE = TRAIN_SEED_RANGE
#: envs side by side recording the warm start's demonstrations (in-process: one browser, one context each)
DEMO_SLOTS = 4


@dataclass
class EvalConfig:
    """Run episodes of an agent on a suite and store them in a run directory."""

    env: str = "webapps"
    """suite name (webapps, miniwob, androidworld) or one env id such as guiagent/webapps.<task>"""
    mode: Literal["online", "semi-online", "offline"] = "online"
    """online: episodes on live envs; semi-online: replay the recorded episodes of --data once each,
    greedy, without patches, and report semi-online progress (SOP: share of recorded steps matched
    before the first mismatch) and success (every step matched); offline: one action at every recorded
    step with the recorded history, and the field's offline metrics (type accuracy, grounding accuracy,
    step success rate; overall and per action kind; --level high and/or low)"""
    data: tuple[str, ...] = ()
    """--mode semi-online or offline: run directories of recorded trajectories (successful episodes are
    replayed; of --tasks only, when given; at most --episodes of them)"""
    level: Literal["both", "high", "low"] = "both"
    """--mode offline: what the agent is told at each step: high (the goal alone), low (the goal and the
    step's instruction, AndroidControl's low level), or both (two passes)"""
    match: Literal["default", "uis1"] = "default"
    """--mode semi-online or offline: the matcher's rules (default; uis1: UI-S1's reference matcher, see
    docs/training.md, "Recorded data")"""
    agent: Literal["oracle", "random", "model"] = "oracle"
    """who acts: the tasks' scripted oracles (--mode offline: the recorded actions), uniform random actions,
    or a model"""
    episodes: int = 10
    """number of episodes, spread round-robin over the tasks"""
    out: str = "runs/eval"
    """run directory (created; several evals may share one)"""
    tasks: tuple[str, ...] = ()
    """task ids to run (default: every task of the suite that fits --difficulty)"""
    difficulty: str | None = None
    """only tasks of this difficulty (easy, medium, hard)"""
    hide: tuple[Literal["screenshot", "elements"], ...] = ()
    """--agent model: parts of every observation the model is not shown, to measure what it relies on:
    screenshot (a grey image of the same size), elements (no element list or tree in the prompt); the env
    acts on the full screen as always"""
    targets: Literal["all", "seen", "unseen", "renamed"] = "all"
    """which targets the episodes have: all; seen (none of the suite's held-out targets, which training
    with --targets seen never uses); unseen (a held-out target each: of the tasks that hold targets out,
    the others are left out); renamed (seen targets shown under made-up names, as --rename-targets
    trains on). See `guiagent tasks list --env webapps --json` for which tasks do"""
    seed: int = EVAL_SEED_BASE
    """first seed; held-out by default"""
    max_steps: int | None = None
    """override the tasks' step budgets"""
    model: str | None = None
    """--agent model: a local model folder, a hub id, or an http(s):// OpenAI-compatible server URL"""
    backend: Literal["auto", "transformers", "vllm", "openai"] = "auto"
    """--agent model: which policy backend (auto: openai for URLs, else transformers)"""
    served_model: str = "auto"
    """--model URL: the model name requests carry (the server's --served-model-name); auto: the one model
    the server lists at /v1/models (a server listing several needs the name; one that lists none is sent
    "default")"""
    request_timeout: float | None = None
    """--model URL: the seconds a request may take, from its start to the reply's last byte (default:
    $GUIAGENT_OPENAI_TIMEOUT, else 120)"""
    request_retries: int | None = None
    """--model URL: retries of a request that timed out, lost its connection or got a 429 or 5xx (default:
    $GUIAGENT_OPENAI_MAX_RETRIES, else 5)"""
    action_format: str = "auto"
    """--agent model: the action format the model speaks (json, uitars, uitars15, qwen_mobile, qwen_computer;
    auto: what the model folder's guiagent_agent.json says, else json)"""
    min_batch_share: float = 1.0
    """the rollout loop acts as soon as this share of the slots in flight have their next screen (1: every
    slot each turn; 0.5: half, so a slow gesture holds up no other slot; see docs/fleet.md)"""
    name: str = ""
    """run name shown in the web UI (default: <agent>-<env>)"""
    json: bool = False
    """print one JSON object with the figures as the last stdout line"""
    sampling: Flat[SamplingSettings] = field(default_factory=lambda: SamplingSettings(temperature=0.0,
                                                                                       max_new_tokens=96))
    fleet: Flat[FleetSettings] = field(default_factory=lambda: FleetSettings(slots=1, pool="inprocess"))

    @classmethod
    def build(cls, **fields: Any) -> "EvalConfig":
        """A config from field values by flag name or by section (:func:`guiagent.config.build`)."""
        return build(cls, **fields)

    def __post_init__(self) -> None:
        if not 0.0 < self.min_batch_share <= 1.0:
            raise ValueError(f"--min-batch-share must be in (0, 1], got {self.min_batch_share}")
        if not 0 < self.episodes <= MAX_EPISODES:
            raise ValueError(f"--episodes must lie in 1..{MAX_EPISODES:,} (a run keeps every finished episode in "
                             "memory); run several evaluations into the same --out for more")
        if self.max_steps is not None and self.max_steps <= 0:
            raise ValueError(f"--max-steps must be positive (leave it out for the tasks' own budgets), got "
                             f"{self.max_steps}")
        if self.agent == "model" and not self.model:
            raise ValueError("--agent model needs --model DIR|HUB_ID|URL")
        if self.hide and self.agent != "model":
            raise ValueError("--hide takes parts of the screen from a model's prompt: it needs --agent model")
        if self.request_timeout is not None and not (math.isfinite(self.request_timeout)
                                                     and 0 < self.request_timeout <= 86_400):
            raise ValueError(f"--request-timeout must lie in (0, 86400] seconds, got {self.request_timeout}")
        if self.request_retries is not None and not 0 <= self.request_retries <= 100:
            raise ValueError(f"--request-retries must lie in 0..100, got {self.request_retries}")
        if (self.request_timeout is not None or self.request_retries is not None) and not _on_a_server(self):
            raise ValueError("--request-timeout and --request-retries are for a model on a server: give --model "
                             f"http(s)://HOST:PORT/v1 (--model {self.model or '(none)'} is not a server)")
        if self.served_model != "auto":
            from guiagent.policy.openai_backend import check_model_name  # lazy: httpx, for servers only

            try:
                check_model_name(self.served_model)
            except ValueError as e:
                raise ValueError(f"--served-model: {e}") from None
            if not _on_a_server(self):
                raise ValueError("--served-model names the model on a server: give --model http(s)://HOST:PORT/v1 "
                                 f"(--model {self.model or '(none)'} is not a server)")
        if self.mode == "semi-online" and (not self.data or self.agent != "model"):
            raise ValueError("--mode semi-online replays recorded episodes with a model: give --data RUN_DIR "
                             "and --agent model --model DIR")
        if self.mode == "offline" and not self.data:
            raise ValueError("--mode offline scores an agent on recorded episodes: give --data RUN_DIR (a store, "
                             "e.g. from guiagent data import)")


@dataclass(frozen=True)
class EvalResult:
    """What one evaluation measured (``to_dict`` is the ``--json`` line)."""

    episodes: int
    success_rate: float
    aborted: int
    mean_steps: float
    steps_per_s: float
    seconds: float
    run_dir: str
    run_id: str
    agent: str
    env: str
    per_task: dict[str, float]
    time_share: dict[str, float]
    mode: str = "online"
    progress: float | None = None
    """--mode semi-online: mean share of recorded steps matched before the first mismatch (SOP)"""
    per_suite: dict[str, float] = field(default_factory=dict)
    offline: dict[str, Any] = field(default_factory=dict)
    """--mode offline: the metrics per level (rl.offline_metrics.OfflineMetrics.to_dict)"""
    """a mixed --env (webapps,miniwob): success per suite, aborted episodes counted as failures as in
    success_rate; empty for one suite"""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pick_tasks(suite: Any, cfg: EvalConfig) -> list[str]:
    """The task ids ``cfg`` selects in ``suite``; ``KeyError`` names unknown ids."""
    ids = list(cfg.tasks) or suite.task_ids()
    known = set(suite.task_ids())
    unknown = [t for t in ids if t not in known]
    if unknown:
        raise KeyError(f"unknown task(s) {unknown} in {suite.name}; see `guiagent tasks list --env {suite.name}`")
    if cfg.difficulty:
        ids = [t for t in ids if getattr(suite.task_class(t), "difficulty", None) == cfg.difficulty]
    if cfg.agent == "oracle":
        ids = [t for t in ids if getattr(suite.task_class(t), "has_oracle", True)]
    if cfg.targets == "unseen":
        ids = [t for t in ids if suite.task_class(t).has_held_out_targets()]
        if not ids:
            raise KeyError("--targets unseen: none of the selected tasks holds a target out of training")
    if not ids:
        raise KeyError("no task matches the selection")
    return ids


def _on_a_server(cfg: EvalConfig) -> bool:
    """The agent is a model on an OpenAI-compatible server (a URL, or the openai backend)."""
    return cfg.agent == "model" and (cfg.backend == "openai" or (cfg.backend == "auto" and bool(cfg.model)
                                     and cfg.model.startswith(("http://", "https://"))))


def make_policy(cfg: EvalConfig) -> Any:
    """The turn policy ``cfg.agent`` names."""
    if cfg.agent == "oracle":
        return OraclePolicy()
    if cfg.agent == "random":
        return RandomPolicy(seed=cfg.seed)
    settings = AgentSettings.load(cfg.model) if cfg.action_format == "auto" else None
    if settings is None:
        settings = AgentSettings(action_format="json" if cfg.action_format == "auto" else cfg.action_format)
    s = cfg.sampling
    server = {"model": cfg.served_model, "timeout": cfg.request_timeout,
              "max_retries": cfg.request_retries} if _on_a_server(cfg) else {}
    return load_agent(cfg.model, backend=cfg.backend, settings=settings, temperature=s.temperature, top_p=s.top_p,
                      min_p=s.min_p, max_new_tokens=s.max_new_tokens, resample_unparseable=s.resample_unparseable,
                      hide=cfg.hide, **server)


def episode_plan(ids: list[str], episodes: int, seed: int, max_steps: int | None, targets: str = "all") -> list[Any]:
    """Episode i runs task ids[i % n] with seed ``seed + i // n`` (on ``targets``: all, seen, unseen or renamed)."""
    n = len(ids)
    return [EpisodeRequest(ids[i % n], seed + i // n, "", max_steps, targets=targets) for i in range(episodes)]


def suite_of(traj: Any) -> str:
    """The suite a trajectory's task belongs to. A completed episode of a mixed run carries its own
    suite; one aborted at its reset carries the run's (``webapps,miniwob``) and a qualified task id."""
    suite = traj.task.suite
    return traj.task.task_id.partition(".")[0] if "," in suite else suite


def success_by_suite(trajectories: Any, suites: list[str]) -> dict[str, float]:
    """Success per suite of ``suites`` (each suite's share of successful episodes, aborted ones
    counted as failures); ``{}`` for fewer than two suites or a suite without episodes."""
    if len(suites) < 2:
        return {}
    by: dict[str, list[float]] = {s: [] for s in suites}
    for t in trajectories:
        by.setdefault(suite_of(t), []).append(float(t.success))
    return {s: sum(v) / len(v) for s, v in by.items() if v}


def resolve_env(cfg: EvalConfig) -> tuple[str, tuple[str, ...]]:
    """(suite name, task selection): an env id ``guiagent/<suite>.<task>`` selects one task."""
    if cfg.env.startswith("guiagent/"):
        env_name, task = parse_env_id(cfg.env)
        return env_name, (task,)
    return cfg.env, cfg.tasks


def run_eval(cfg: EvalConfig, *, policy: Any = None, pool: Any = None, rewards: RewardConfig | None = None
             ) -> EvalResult:
    """Run the evaluation; ``policy`` overrides the one ``cfg`` names (e.g. a model already in memory),
    ``pool`` an env pool to run on (left open) instead of a fresh in-process one; ``rewards`` the reward
    weights each step is stored with (a training run's, for demonstrations it learns from; default:
    :class:`~guiagent.rewards.RewardConfig`'s)."""
    # checked before any model loads or file is written: a typo costs nothing (ConfigError, one line)
    validate_out_dir(cfg.out)
    if policy is None and cfg.agent == "model" and cfg.backend != "openai":
        check_model_path(cfg.model or "")
    if cfg.mode == "semi-online":
        return _run_semi_online(cfg, policy)
    if cfg.mode == "offline":
        return _run_offline(cfg, policy)
    env_name, tasks_sel = resolve_env(cfg)
    suite = get_suite(env_name)
    ids = pick_tasks(suite, replace(cfg, env=env_name, tasks=tasks_sel))
    policy = policy or make_policy(cfg)
    store = Store.open(cfg.out)
    run_id = store.create_run(cfg.name or f"{cfg.agent}-{env_name}", env=env_name, algo="eval",
                              model=cfg.model or cfg.agent, config=to_mapping(cfg))
    per_task: dict[str, list[float]] = defaultdict(list)
    progress = _Progress(cfg.episodes, per_task, qualify="," in env_name)
    own_pool = pool is None
    try:
        with _closing_run(store, run_id):
            if own_pool:
                pool = cfg.fleet.open_pool(env_name)
            res = run_rollout(pool, policy, episode_plan(ids, cfg.episodes, cfg.seed, cfg.max_steps, cfg.targets),
                              rewards=rewards, store=store, run_id=run_id, suite=env_name, keep_turns=False,
                              on_episode=progress, min_batch_share=cfg.min_batch_share)
            check_started(res)  # a browser that cannot launch: the run failed, not "0% (N aborted)"
    finally:
        progress.close()
        if own_pool and pool is not None:
            pool.close()
    total = len(res.trajectories)
    return EvalResult(
        episodes=total, success_rate=sum(t.success for t in res.trajectories) / max(total, 1),
        aborted=res.aborted, mean_steps=res.env_steps / max(total, 1),
        steps_per_s=round(res.steps_per_second, 2), seconds=round(res.wall_seconds, 2),
        run_dir=cfg.out, run_id=run_id, agent=cfg.agent, env=env_name,
        per_task={k: sum(v) / len(v) for k, v in sorted(per_task.items())},
        time_share={k: round(v / max(res.wall_seconds, 1e-9), 3) for k, v in
                    (("env", res.env_seconds), ("policy", res.policy_seconds), ("store", res.store_seconds))},
        per_suite=success_by_suite(res.trajectories, split_env(env_name)),
    )


class NoEpisodeStarted(RuntimeError):
    """Every episode of a rollout failed at its reset, twice (a browser that cannot launch, a device or
    app server that is down): the run measured nothing and learns nothing."""


def check_started(res: Any) -> None:
    """Raise :class:`NoEpisodeStarted` (one line, the first reason) when a rollout ran episodes and none
    of them started; a rollout where some episode started (or none was asked for) passes."""
    tried = res.trajectories
    if not tried or not all(t.status == "aborted" and not t.steps and (t.abort_reason or "").startswith(
            "reset failed") for t in tried):
        return
    reason = tried[0].abort_reason.removeprefix("reset failed").lstrip(": ")
    first = " ".join((reason.splitlines() or [""])[0].split())[:300] or "no reason recorded"
    raise NoEpisodeStarted(f"no episode could start: all {len(tried)} failed at their reset ({first}); "
                           "check the suite's devices (e.g. --device chromium_path)")


def run_status_after(e: BaseException) -> str:
    """The status a run stores when ``e`` ended it: ``interrupted`` for Ctrl+C (SIGINT, SIGTERM) and a full disk
    (resumable once there is room), else ``failed``."""
    return "interrupted" if isinstance(e, KeyboardInterrupt) or disk_full(e) else "failed"


@contextlib.contextmanager
def _closing_run(store: Any, run_id: str) -> Iterator[None]:
    """The run is ``finished`` when the block ends, ``failed`` when it raises (``interrupted`` on Ctrl+C);
    the store is closed."""
    try:
        yield
        store.set_run_status(run_id, "finished")
    except BaseException as e:
        store.set_run_status(run_id, run_status_after(e))
        raise
    finally:
        store.close()


def _run_semi_online(cfg: EvalConfig, policy: Any) -> EvalResult:
    """Semi-online evaluation (SOP) of ``cfg.data``'s recorded episodes; stored like any eval run."""
    episodes = recorded_episodes(cfg.data, cfg.tasks)[:cfg.episodes]
    policy = policy or make_policy(cfg)
    store = Store.open(cfg.out)
    run_id = store.create_run(cfg.name or f"sop-{cfg.env}", env=cfg.env, algo="eval-semi-online",
                              model=cfg.model or cfg.agent, config=to_mapping(cfg))
    t0 = time.perf_counter()
    with _closing_run(store, run_id):
        sop = semi_online_eval(policy, episodes, store=store, run_id=run_id, match=MatchConfig.preset(cfg.match))
    seconds = time.perf_counter() - t0
    steps = sum(len(e.steps) for e in episodes)
    return EvalResult(
        episodes=len(episodes), success_rate=sop.success, aborted=0, mean_steps=steps / len(episodes),
        steps_per_s=round(steps / max(seconds, 1e-9), 2), seconds=round(seconds, 2), run_dir=cfg.out,
        run_id=run_id, agent=cfg.agent, env=cfg.env,
        per_task={k: t.success for k, t in sop.per_task.items()}, time_share={"policy": 1.0},
        mode="semi-online", progress=sop.progress)


def _run_offline(cfg: EvalConfig, policy: Any) -> EvalResult:
    """Offline metrics of ``cfg.data``'s recorded episodes (rl.offline_eval); stored like any eval run,
    the metrics as run metrics ``offline/<level>/...``."""
    episodes = recorded_episodes(cfg.data, cfg.tasks)[:cfg.episodes]
    if policy is None:
        policy = RecordedPolicy(episodes) if cfg.agent == "oracle" else make_policy(cfg)
    levels = ("high", "low") if cfg.level == "both" else (cfg.level,)
    suites = ",".join(sorted({e.task.suite for e in episodes}))  # the recorded data's, not --env's
    store = Store.open(cfg.out)
    run_id = store.create_run(cfg.name or f"offline-{cfg.agent}", env=suites, algo="eval-offline",
                              model=cfg.model or cfg.agent, config=to_mapping(cfg))
    steps = sum(len(e.steps) for e in episodes)
    tenth = max(1, steps * len(levels) // 10)
    shown = [0]

    def progress(done: int, total: int) -> None:
        if done - shown[0] >= tenth or done == total:
            shown[0] = done
            log.info("[%d/%d] steps scored", done, total)

    t0 = time.perf_counter()
    with _closing_run(store, run_id):
        res = run_offline_eval(policy, episodes, levels=levels, match=MatchConfig.preset(cfg.match),
                               batch_size=cfg.fleet.slots, store=store, run_id=run_id,
                               agent_name=f"offline:{cfg.agent}", on_batch=progress)
    seconds = time.perf_counter() - t0
    first = res[levels[0]]
    return EvalResult(
        episodes=len(episodes), success_rate=first.episode_success, aborted=0,
        mean_steps=steps / max(len(episodes), 1), steps_per_s=round(steps * len(levels) / max(seconds, 1e-9), 2),
        seconds=round(seconds, 2), run_dir=cfg.out, run_id=run_id, agent=cfg.agent, env=suites, per_task={},
        time_share={"policy": 1.0}, mode="offline", offline={k: v.to_dict() for k, v in res.items()})


class _Progress:
    """Counts finished episodes per task and shows the running success rate.

    When stderr is a terminal: a progress bar (episodes done, episodes/s, time left,
    success so far). Otherwise (a pipe, a CI log) a log line every tenth of the run.
    stdout is never touched, so ``--json`` output stays one clean line.
    """

    def __init__(self, episodes: int, per_task: dict[str, list[float]], *, qualify: bool = False):
        self.episodes, self.per_task, self.done, self.qualify = episodes, per_task, 0, qualify
        self.bar = progress_bar(episodes, "eval", "episode")

    def __call__(self, traj: Any) -> None:
        task = traj.task.task_id
        if self.qualify and "," not in traj.task.suite:  # a mixed run names its tasks <suite>.<task>
            task = f"{traj.task.suite}.{task}"
        self.per_task[task].append(traj.success)
        self.done += 1
        rate = sum(map(sum, self.per_task.values())) / self.done
        if not self.bar.disable:
            self.bar.update(1)
            self.bar.set_postfix(success=f"{rate:.2f}")
        elif self.done % max(1, self.episodes // 10) == 0 or self.done == self.episodes:
            log.info("[%d/%d] success so far %.2f", self.done, self.episodes, rate)

    def close(self) -> None:
        self.bar.close()


def tasks_with_held_out_targets(env: str, tasks: list[str]) -> list[str]:
    """The tasks of ``tasks`` (ids of the suite or mixed suite ``env``) that hold some targets out of training."""
    suite = get_suite(env)
    return [t for t in tasks if suite.task_class(t).has_held_out_targets()]


def _has_oracles(env: str, tasks: list[str]) -> bool:
    suite = get_suite(env)
    return any(getattr(suite.task_class(t), "has_oracle", True) for t in tasks)


def warm_start(out: Path, *, env: str, tasks: list[str], demos: int, steps: int, seed: int,
               max_pixels: int, threads: int | None = None, demos_from: tuple[str, ...] = (),
               action_format: str = "json", device: dict[str, str] | None = None,
               words: str = "prefixed", copy_steps: int = 0, copy_until: float = 0.0, copy_repeats: int = 0,
               name_weight: float = 1.0, action_weight: float = 1.0,
               goal_frames: float = 0.0, goal_relabel: float = 0.0, rename: float = 0.0, recover: float = 0.0,
               targets: str = "all",
               mark_states: bool = False, phases: PhaseTimes | None = None, rewards: RewardConfig | None = None) -> str:
    """A tiny model, SFT on ``demos`` oracle episodes of ``tasks`` (training seeds): the RL warm start.

    Tasks without oracles (AndroidWorld) are warm-started from the recorded episodes of
    ``demos_from`` (run directories) instead. ``action_format``: what the model learns to speak
    (:func:`rl.agents.tiny_model_settings`); ``device``: options of the devices the demonstrations
    are recorded on (the marks format needs ``{"marks": "true"}``, so that each step keeps its
    numbered elements); ``words``: the tiny model's tokenizer, ``copy_steps`` / ``copy_until`` /
    ``copy_repeats``: its copy warm-up (both :class:`TinyModelSpec`); ``name_weight``: the SFT loss weight of an element's name,
    ``action_weight`` that of the action's kind, ``goal_frames``: the share of examples whose goal is
    framed by neutral words, ``goal_relabel``: the share of first steps relabelled in hindsight, ``rename``
    the share renamed, ``recover`` the share after a failed turn (all :class:`rl.sft.SFTConfig`); ``targets``: which targets the demonstrations may have (``seen``:
    none of the suite's held-out ones); ``mark_states``: its prompts list the elements' states
    (:class:`rl.agents.AgentSettings`). ``phases`` gets the wall time of each part. ``rewards``: the
    training run's reward weights, which the demonstrations' steps are stored with, so that a learner
    reading them back (AWR's replay buffer, a staged run's replays) finds them on the scale of its own
    episodes. Returns the SFT model folder (``out/sft``); a finished warm start in ``out`` is reused.
    """
    phases = phases or PhaseTimes()
    sft_dir = out / "sft"
    if (sft_dir / "config.json").is_file():
        return str(sft_dir)
    demo_dirs = [str(out / "demos")]
    oracles = _has_oracles(env, tasks)
    if not oracles and not demos_from:
        raise KeyError(f"{env} tasks have no scripted solvers to warm-start from: give --model, or --data "
                       "RUN_DIR with recorded demonstrations")
    base = out / "base"
    log.info("warm start: building a tiny model in %s", base)
    with phases.timer("warm start: tiny model" + (" + copy warm-up" if copy_steps else "")):
        built = build_tiny_model(TinyModelSpec(size="tiny", seed=seed, max_pixels=max_pixels, words=words,
                                               copy_steps=copy_steps, copy_until=copy_until,
                                               copy_repeats=copy_repeats), base)
    if "copy_warmup" in built:
        log.info("warm start: copy warm-up %s", json.dumps(built["copy_warmup"]))
    if not oracles:
        demo_dirs = list(demos_from)
        log.info("warm start: %s has no scripted solvers; SFT on the recorded episodes of %s", env,
                 ", ".join(demo_dirs))
    else:
        log.info("warm start: recording %d oracle episodes of %d tasks%s", demos, len(tasks),
                 " (seen targets)" if targets == "seen" else "")
        with phases.timer("warm start: demonstrations"):
            run_eval(EvalConfig(env=env, agent="oracle", episodes=demos, out=demo_dirs[0], tasks=tuple(tasks),
                                seed=seed, name="warm-start demos", targets=targets,
                                fleet=FleetSettings(slots=DEMO_SLOTS, pool="inprocess", device=dict(device or {}))),
                     rewards=rewards)
    settings = tiny_model_settings(action_format, mark_states=mark_states)
    policy = load_transformers(str(base), threads=threads)
    sft_cfg = SFTConfig(steps=steps, seed=seed, name_weight=name_weight, action_weight=action_weight,
                        goal_frames=goal_frames, goal_relabel=goal_relabel, rename=rename, recover=recover)
    examples = load_examples(load_trajectories(demo_dirs), policy, settings.format(),
                             settings.prompt_config(), sft_cfg)
    log.info("warm start: SFT on %d examples for %d steps", len(examples), sft_cfg.steps)
    with phases.timer("warm start: SFT"):
        figs = train_sft(policy, examples, sft_cfg, out_dir=str(sft_dir), progress=sys.stderr.isatty(),
                         settings=settings)
    log.info("warm start: SFT loss %.3f -> %.3f in %s s", figs["loss_first"], figs["loss_last"], figs["seconds"])
    return str(sft_dir)
