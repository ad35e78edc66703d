"""``guiagent eval``: run episodes with an agent on a suite and store every trajectory.

Examples::

    guiagent eval --env webapps --agent oracle --episodes 20 --out runs/oracle
    guiagent eval --env miniwob --agent random --episodes 50 --out runs/random --json
    guiagent eval --env webapps --agent model --model runs/sft/model --episodes 40 --out runs/eval-sft

Episode ``i`` runs task ``tasks[i % len(tasks)]`` with seed ``seed + i // len(tasks)``.
Evaluation seeds start at 1,000,000 by default, a range training never samples
(training seeds lie below it), so results are on held-out task instances.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal

from guiagent.cli._common import emit_json, log
from guiagent.config import parse_config, to_mapping

EVAL_SEED_BASE = 1_000_000


@dataclass
class EvalConfig:
    """Run episodes of an agent on a suite and store them in a run directory."""

    env: str = "webapps"
    """suite name (webapps, miniwob, androidworld) or one env id such as guiagent/webapps.<task>"""
    agent: Literal["oracle", "random", "model"] = "oracle"
    """who acts: the tasks' scripted oracles, uniform random actions, or a model"""
    episodes: int = 10
    """number of episodes, spread round-robin over the tasks"""
    out: str = "runs/eval"
    """run directory (created; several evals may share one)"""
    tasks: tuple[str, ...] = ()
    """task ids to run (default: every task of the suite that fits --difficulty)"""
    difficulty: str | None = None
    """only tasks of this difficulty (easy, medium, hard)"""
    seed: int = EVAL_SEED_BASE
    """first seed; held-out by default"""
    max_steps: int | None = None
    """override the tasks' step budgets"""
    model: str | None = None
    """--agent model: a local model folder, a hub id, or an http(s):// OpenAI-compatible server URL"""
    backend: Literal["auto", "transformers", "vllm", "openai"] = "auto"
    """--agent model: which policy backend (auto: openai for URLs, else transformers)"""
    action_format: str = "auto"
    """--agent model: the action format the model speaks (json, uitars, uitars15, qwen_mobile, qwen_computer;
    auto: what the model folder's guiagent_agent.json says, else json)"""
    temperature: float = 0.0
    """--agent model: sampling temperature (0 = greedy)"""
    top_p: float = 1.0
    """--agent model: nucleus sampling when temperature > 0"""
    min_p: float = 0.0
    """--agent model: min-p sampling when temperature > 0 (0: off)"""
    name: str = ""
    """run name shown in the web UI (default: <agent>-<env>)"""
    json: bool = False
    """print one JSON object with the figures as the last stdout line"""
    slots: int = 1
    """envs run side by side (a model then generates for all of them in one batch)"""
    device: dict[str, str] = field(default_factory=dict)
    """extra device options passed to the suite (e.g. chromium_path)"""

    def __post_init__(self) -> None:
        if self.episodes <= 0:
            raise ValueError("--episodes must be positive")
        if self.agent == "model" and not self.model:
            raise ValueError("--agent model needs --model DIR|HUB_ID|URL")


def _pick_tasks(suite, cfg: EvalConfig) -> list[str]:
    ids = list(cfg.tasks) or suite.task_ids()
    known = set(suite.task_ids())
    unknown = [t for t in ids if t not in known]
    if unknown:
        raise KeyError(f"unknown task(s) {unknown} in {suite.name}; see `guiagent tasks list --env {suite.name}`")
    if cfg.difficulty:
        ids = [t for t in ids if getattr(suite.task_class(t), "difficulty", None) == cfg.difficulty]
    if cfg.agent == "oracle":
        ids = [t for t in ids if getattr(suite.task_class(t), "has_oracle", True)]
    if not ids:
        raise KeyError("no task matches the selection")
    return ids


def make_policy(cfg: EvalConfig):
    from rl.agents import AgentSettings, OraclePolicy, RandomPolicy, load_model_policy

    if cfg.agent == "oracle":
        return OraclePolicy()
    if cfg.agent == "random":
        return RandomPolicy(seed=cfg.seed)
    settings = AgentSettings.load(cfg.model) if cfg.action_format == "auto" else None
    if settings is None:
        settings = AgentSettings(action_format="json" if cfg.action_format == "auto" else cfg.action_format)
    return load_model_policy(cfg.model, backend=cfg.backend, settings=settings, temperature=cfg.temperature,
                             top_p=cfg.top_p, min_p=cfg.min_p)


def episode_plan(ids: list[str], episodes: int, seed: int, max_steps: int | None):
    """Episode i runs task ids[i % n] with seed ``seed + i // n``."""
    from rl.rollout import EpisodeRequest

    n = len(ids)
    return [EpisodeRequest(ids[i % n], seed + i // n, "", max_steps) for i in range(episodes)]


def run(cfg: EvalConfig, *, policy=None, pool=None) -> dict:
    """Run the evaluation; ``policy`` overrides the one ``cfg`` names (e.g. a model already in memory),
    ``pool`` an env pool to run on (left open) instead of a fresh in-process one."""
    from emulators.pool import InProcessPool
    from emulators.suites import get_suite, parse_env_id
    from guiagent.store import Store
    from rl.rollout import run_rollout

    env_name, tasks_sel = cfg.env, cfg.tasks
    if env_name.startswith("guiagent/"):
        env_name, task = parse_env_id(env_name)
        tasks_sel = (task,)
    suite = get_suite(env_name)
    ids = _pick_tasks(suite, EvalConfig(**{**cfg.__dict__, "env": env_name, "tasks": tasks_sel}))
    policy = policy or make_policy(cfg)
    store = Store.open(cfg.out)
    run_id = store.create_run(cfg.name or f"{cfg.agent}-{env_name}", env=env_name, algo="eval",
                              model=cfg.model or cfg.agent, config=to_mapping(cfg))
    per_task: dict[str, list[float]] = defaultdict(list)
    done = [0]

    def on_episode(traj) -> None:
        per_task[traj.task.task_id].append(traj.success)
        done[0] += 1
        if done[0] % max(1, cfg.episodes // 10) == 0 or done[0] == cfg.episodes:
            rate = sum(map(sum, per_task.values())) / done[0]
            log(f"[{done[0]}/{cfg.episodes}] success so far {rate:.2f}")

    own_pool = pool is None
    if own_pool:
        pool = InProcessPool(env_name, num_slots=cfg.slots, device_options=dict(cfg.device))
    try:
        res = run_rollout(pool, policy, episode_plan(ids, cfg.episodes, cfg.seed, cfg.max_steps),
                          store=store, run_id=run_id, suite=env_name, keep_turns=False, on_episode=on_episode)
        store.set_run_status(run_id, "finished")
    except BaseException:
        store.set_run_status(run_id, "failed")
        raise
    finally:
        if own_pool:
            pool.close()
        store.close()
    total = len(res.trajectories)
    return {
        "episodes": total, "success_rate": sum(t.success for t in res.trajectories) / max(total, 1),
        "aborted": res.aborted, "mean_steps": res.env_steps / max(total, 1),
        "steps_per_s": round(res.steps_per_second, 2), "seconds": round(res.wall_seconds, 2),
        "run_dir": cfg.out, "run_id": run_id, "agent": cfg.agent, "env": env_name,
        "per_task": {k: sum(v) / len(v) for k, v in sorted(per_task.items())},
        "time_share": {k: round(v / max(res.wall_seconds, 1e-9), 3) for k, v in
                       (("env", res.env_seconds), ("policy", res.policy_seconds), ("store", res.store_seconds))},
    }


def main(argv: list[str]) -> int:
    cfg = parse_config(EvalConfig, argv, prog="guiagent eval")
    try:
        result = run(cfg)
    except (KeyError, ImportError) as e:
        print(f"guiagent eval: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1
    print(f"{result['agent']} on {result['env']}: success {result['success_rate']:.1%} over "
          f"{result['episodes']} episodes ({result['aborted']} aborted, {result['mean_steps']:.1f} steps each, "
          f"{result['steps_per_s']:.1f} steps/s) -> {result['run_dir']}")
    if cfg.json:
        emit_json(result)
    return 0
