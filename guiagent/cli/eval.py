"""``guiagent eval``: run episodes with an agent on a suite and store every trajectory.

Examples::

    guiagent eval --env webapps --agent oracle --episodes 20 --out runs/oracle
    guiagent eval --env miniwob --agent random --episodes 50 --out runs/random --json
    guiagent eval --env webapps --agent model --model runs/sft/model --episodes 40 --out runs/eval-sft
    guiagent eval --mode semi-online --data runs/demos --agent model --model runs/sft/model --out runs/sop
    guiagent eval --mode offline --data runs/ac-eval --agent model --model http://127.0.0.1:8000/v1 --out runs/ac

With a model server (``--model http(s)://HOST:PORT/v1``), a server that fails (an error reply, no
whole reply within ``$GUIAGENT_OPENAI_TIMEOUT`` seconds, a reply that is malformed or too large), after
its retries, ends the run: it is stored ``failed`` and the command exits 1 with one line naming the
server. SIGTERM stops a run as Ctrl+C does: stored ``interrupted``, exit 143 (Ctrl+C: 130).

Episode ``i`` runs task ``tasks[i % len(tasks)]`` with seed ``seed + i // len(tasks)``.
Evaluation seeds start at 1,000,000 by default, a range training never samples
(training seeds lie below it), so results are on held-out task instances.
"""

from __future__ import annotations

import shlex

from guiagent.cli._common import (
    check_device_options,
    check_server_model,
    check_suite_tasks,
    emit_json,
    fail,
    quiet_library_bars,
)
from guiagent.config import ConfigError, parse_config
from guiagent.logs import show_progress
from guiagent.runlock import run_lock
from guiagent.writing import writing
from rl.evaluate import EvalConfig, NoEpisodeStarted, run_eval

__all__ = ["EvalConfig", "main"]


def main(argv: list[str]) -> int:
    cfg = parse_config(EvalConfig, argv, prog="guiagent eval")
    if cfg.agent == "model" and cfg.model:  # a server URL for the openai backend, weights for the others
        check_server_model(cfg.model, cfg.backend)
    if cfg.mode == "online" and "androidworld" in _suite_names(cfg.env):
        _check_android(cfg)  # the agent, adb, the emulators, android_world: one line each, nothing written
    if cfg.mode != "offline":  # offline: --tasks names recorded tasks, not a suite's
        check_suite_tasks(cfg.env, cfg.tasks)  # the suite, its package and the tasks, before anything is created
    if cfg.mode == "online":
        check_device_options(cfg.env, cfg.fleet.device)  # --device names and values, before anything is created
    show_progress()
    quiet_library_bars()
    try:
        with run_lock(cfg.out, "guiagent eval " + shlex.join(argv)), writing("the episodes", cfg.out):  # one writer
            r = run_eval(cfg)
    except (KeyError, ValueError) as e:  # an unknown suite or task, a malformed env id: bad input
        if isinstance(e, ConfigError):
            raise
        return fail("eval", e)
    except (ImportError, NoEpisodeStarted) as e:  # a suite's package missing here; no browser would start
        return fail("eval", e, 1)
    if r.mode == "offline":
        for level, m in r.offline.items():
            g = "n/a" if m["grounding_acc"] is None else f"{m['grounding_acc']:.1%}"
            print(f"offline ({level} level) on {r.episodes} recorded episodes, {m['steps']} steps: type {m['type_acc']:.1%}, "
                  f"grounding {g}, step SR {m['step_sr']:.1%}, episodes all right {m['episode_success']:.1%} -> {r.run_dir}")
    elif r.mode == "semi-online":
        print(f"semi-online on {r.episodes} recorded episodes: progress {r.progress:.1%}, success "
              f"{r.success_rate:.1%} ({r.mean_steps:.1f} steps each, {r.steps_per_s:.1f} steps/s) -> {r.run_dir}")
    else:
        print(f"{r.agent} on {r.env}: success {r.success_rate:.1%} over {r.episodes} episodes ({r.aborted} aborted, "
              f"{r.mean_steps:.1f} steps each, {r.steps_per_s:.1f} steps/s) -> {r.run_dir}")
    if cfg.json:
        emit_json(r.to_dict())
    return 0


def _suite_names(env: str) -> list[str]:
    """The suites ``--env`` names: ``androidworld``, ``guiagent/androidworld.X`` or ``androidworld,webapps``."""
    return [e.strip().removeprefix("guiagent/").partition(".")[0] for e in env.split(",") if e.strip()]


def _check_android(cfg: EvalConfig) -> None:
    from emulators.android.preflight import (  # lazy: the env pool modules (0.3 s); --help does not
        AndroidSetupError,
        check_androidworld_eval,
    )
    from emulators.pool_mixed import suite_options  # lazy: the env pool modules (0.3 s); --help does not

    try:
        check_androidworld_eval(env=cfg.env, agent=cfg.agent, slots=cfg.fleet.slots,
                                device=suite_options("androidworld", _suite_names(cfg.env), cfg.fleet.device))
    except AndroidSetupError as e:
        raise ConfigError(str(e)) from None
