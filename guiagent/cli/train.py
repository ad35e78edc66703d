"""``guiagent train``: online RL (GRPO family) on a suite.

With no flags, the embedded default: a tiny model, warm-started by SFT on oracle
demonstrations, trained with GRPO on the fixed-layout webapps tasks on CPU, with
held-out success printed before and after::

    guiagent train
    guiagent train --env webapps --algo grpo --iterations 20 --out runs/grpo --json
    guiagent train --resume runs/grpo --iterations 30          # continue a killed run to 30 in total

A start that fails before the run has written more than its marker and config (a model that does
not load) leaves nothing behind. SIGTERM stops a run as Ctrl+C does: stored ``interrupted``
(resumable), exit 143 (Ctrl+C: 130).
"""

from __future__ import annotations

import logging
import math
import os
import shlex
from pathlib import Path

from guiagent.cli._common import (
    CLIError,
    check_device_options,
    check_model_path,
    check_suite_tasks,
    emit_json,
    fail,
    quiet_library_bars,
    validate_out_dir,
)
from guiagent.config import parse_config, read_yaml
from guiagent.logs import show_progress
from guiagent.runlock import run_lock
from guiagent.writing import writing


def preflight(cfg) -> None:
    """The checks of the environment that need no model loaded, on the run's effective config (a resumed
    run's own), before anything is created: the suite and tasks (and the suite's package), the devices,
    the model path, the judge, the recorded data, vLLM. Raises ConfigError (one line, exit code 2). The
    run to resume and a new run's output folder are checked by the plan (rl.plan.resolve_run)."""
    if "androidworld" in suite_names(cfg.env):  # the model, adb, the emulators, android_world: one line each
        check_android(cfg)
    # in --mode semi-online, --tasks may name tasks of imported data that the suite lacks
    check_suite_tasks(cfg.env, cfg.tasks if cfg.mode != "semi-online" else ())
    if cfg.mode != "semi-online":  # semi-online replays recorded screens: no device
        check_device_options(cfg.env, cfg.fleet.device)
    if cfg.model and not cfg.resume:  # a resumed run continues from its own checkpoint
        check_trainable_model(cfg.model)
    if cfg.judge.model:
        check_model_path(cfg.judge.model, flag="--judge.model")
    for d in cfg.data:
        if not (Path(d) / "store.sqlite").is_file():
            raise CLIError(f"--data {d}: no trajectory store there (record one with guiagent eval --agent oracle "
                           "--out DIR, or import one with guiagent data import)")
    if cfg.rollouts.rollout_engine == "vllm":  # vLLM and a CUDA GPU, before any file or model
        from guiagent.policy.vllm_backend import require_vllm  # lazy: the optional vllm extra

        require_vllm()


def check_trainable_model(model: str) -> None:
    """A model training can load here: a model folder or a hub id (check_model_path), never a server
    URL (a server generates, it cannot be trained), whose config transformers reads (a hub id's
    config.json is fetched, or taken from the cache). Raises CLIError (one line); creates nothing."""
    if model.startswith(("http://", "https://")):
        raise CLIError(f"--model {model}: training loads the model's weights here; give a model folder or a hub id "
                       "(a server URL serves guiagent eval)")
    check_model_path(model)
    from transformers import AutoConfig  # lazy: as below (the trainer loads it anyway)

    try:
        AutoConfig.from_pretrained(model)
    except (ImportError, MemoryError):
        raise
    except Exception as e:  # a broken or unknown config, a hub id that does not exist
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise CLIError(f"--model {model}: cannot be loaded: {type(e).__name__}{': ' + first if first else ''}") from None


def suite_names(env: str) -> list[str]:
    """The suites ``--env`` names: ``webapps``, ``guiagent/androidworld.X`` or ``webapps,miniwob``."""
    return [e.strip().removeprefix("guiagent/").partition(".")[0] for e in env.split(",") if e.strip()]


def check_android(cfg) -> None:
    """What an AndroidWorld run needs (emulators.android.preflight), as a one-line CLIError."""
    from emulators.android.preflight import (  # lazy: the env pool modules (0.3 s); --help does not
        AndroidSetupError,
        check_androidworld,
    )
    from emulators.pool_mixed import suite_options  # lazy: the env pool modules (0.3 s); --help does not

    f = cfg.fleet
    slots = f.workers * math.ceil(f.slots / f.workers) if f.pool == "ray" else f.slots
    try:
        check_androidworld(env=cfg.env, model=cfg.model, data=cfg.data, resume=cfg.resume, slots=slots,
                           device=suite_options("androidworld", suite_names(cfg.env), f.device))
    except AndroidSetupError as e:
        raise CLIError(str(e)) from None


def _entries(out: Path) -> set[str] | None:
    """The names in ``out`` (None: no such folder)."""
    try:
        return set(os.listdir(out))
    except (FileNotFoundError, NotADirectoryError):
        return None


def _undo_failed_start(cfg, before: set[str] | None) -> None:
    """A new run that failed at its start (the model would not load, Ctrl+C while it loaded), having
    written nothing but its marker and its config: those two are removed (and ``--out`` when this run
    created it), so that ``train --out`` starts afresh rather than being refused as holding a run.
    A run that got further (a store, a warm start, a checkpoint) keeps its folder: it is a run."""
    from rl.checkpoint import RUN_MARKER  # lazy: the trainer loads torch (2 s); --help does not

    if cfg.resume:
        return
    out = Path(cfg.out)
    now = _entries(out)
    new = (now or set()) - (before or set())
    if not new or not new <= {RUN_MARKER, "config.yaml"}:
        return
    try:
        for name in new:
            (out / name).unlink()
        if before is None and not os.listdir(out):
            out.rmdir()
    except OSError:  # left as it is: the failure itself is what the user needs to see
        pass


def _gives_iterations(argv: list[str]) -> bool:
    """``--iterations`` on the command line or in its ``--config`` file: a resumed run then trains to that
    total; without it, to the total the run was started with (its saved config.yaml)."""
    if any(a == "--iterations" or a.startswith("--iterations=") for a in argv):
        return True
    for i, a in enumerate(argv):
        path = a.split("=", 1)[1] if a.startswith("--config=") else argv[i + 1] if a == "--config" and i + 1 < len(
            argv) else None
        if path is not None:
            data = read_yaml(path)  # read (and checked) by parse_args already
            if isinstance(data, dict) and "iterations" in data:
                return True
    return False


def _hint_run_config(cfg, argv: list[str]) -> None:
    """``--model RUN/sft`` (a training run's own warm start) without ``--config``: one line saying that the
    run's RL settings are in its config.yaml, which this run does not take (the class defaults apply where
    the run had the embedded recipe's), and how to repeat them."""
    if not cfg.model or cfg.resume or any(a.split("=", 1)[0] == "--config" for a in argv):
        return
    from rl.checkpoint import RUN_MARKER  # lazy: as in _undo_failed_start

    run = Path(cfg.model).parent
    if (run / RUN_MARKER).is_file() and (run / "config.yaml").is_file():
        logging.getLogger(__name__).warning(
            "--model %s is the warm start of the run %s; this run takes the class defaults, not that run's settings: "
            "to run its RL stage again, give --config %s too", cfg.model, run, run / "config.yaml")


def _names_a_start(argv: list[str]) -> bool:
    """A model, a run to resume or a config file on the command line: the class defaults apply; without
    any of them (or with --help) the embedded default's recipe does (rl.config.EMBEDDED_RECIPE)."""
    return any(a.split("=", 1)[0] in ("--model", "--resume", "--config") for a in argv)


def parse_args(argv: list[str]):
    """The run's TrainConfig: the embedded default's recipe under the flags, unless a model, a run
    to resume or a config file is named (then the class defaults)."""
    from rl.config import TrainConfig  # lazy: 0.4 s (no torch), which other commands' --help need not pay

    if _names_a_start(argv):
        return parse_config(TrainConfig, argv, prog="guiagent train")
    default = TrainConfig.embedded(_env_of(argv))
    return parse_config(TrainConfig, _on_top_of(argv, "--device", default.fleet.device), prog="guiagent train",
                        default=default)


def _on_top_of(argv: list[str], flag: str, pairs: dict[str, str]) -> list[str]:
    """``flag K V ...`` as given, after the recipe's own ``pairs`` (a key given wins): ``--device tree none``
    on the embedded default keeps its ``marks true``."""
    if not pairs or flag not in argv:
        return argv
    i = argv.index(flag) + 1
    given = next((j for j in range(i, len(argv)) if argv[j].startswith("--")), len(argv)) - i
    if given % 2:  # left as typed: the parser's one line then shows the user's own words
        return argv
    return [*argv[:i], *(w for kv in pairs.items() for w in kv), *argv[i:]]


def _env_of(argv: list[str]) -> str:
    """The --env a command line names (webapps when none): the embedded recipe differs by suite."""
    for i, a in enumerate(argv):
        if a == "--env" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--env="):
            return a.split("=", 1)[1]
    return "webapps"


def _pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.1%}"


def _by_task(result) -> str:
    """Held-out success per task, before -> after; seen and unseen targets apart when both were run."""
    def cell(before: dict[str, float], after: dict[str, float], t: str) -> str:
        if t not in after:
            return ""
        return f"{before[t]:.0%} -> {after[t]:.0%}" if t in before else f"{after[t]:.0%}"

    tasks = list(result.task_success_after)
    if not result.unseen_task_success_after:
        return "held-out success by task: " + ", ".join(
            f"{t} {cell(result.task_success_before, result.task_success_after, t)}" for t in tasks)
    width = max(len(t) for t in tasks)
    rows = [f"{'held-out success by task':<{width}}  {'seen targets':<14}  unseen targets"]
    rows += [f"{t:<{width}}  {cell(result.task_success_before, result.task_success_after, t):<14}  "
             f"{cell(result.unseen_task_success_before, result.unseen_task_success_after, t)}".rstrip() for t in tasks]
    return "\n".join(rows)


def _phase_table(seconds: dict[str, float], total: float) -> str:
    from rl.timing import PhaseTimes  # lazy: as the trainer above (this module loads no rl at import)

    times = PhaseTimes()
    for phase, s in seconds.items():
        times.add(phase, s)
    return times.table(total or None)


def main(argv: list[str]) -> int:
    cfg = parse_args(argv)  # --help and bad flags end here, before the trainer (0.3 s more than the config) is loaded
    from rl.checkpoint import CheckpointError  # lazy: the trainer loads torch (2 s); --help does not
    from rl.evaluate import NoEpisodeStarted  # lazy: as below
    from rl.plan import check_run_dir, resolve_run  # lazy: as below
    from rl.trainer import train, write_summary  # lazy: the trainer loads torch (2 s); --help does not

    if cfg.resume:  # a folder the lock beside it can be taken for (the plan checks again under the lock)
        check_run_dir(cfg.resume)
    else:
        validate_out_dir(cfg.out)
    show_progress()
    quiet_library_bars()
    _hint_run_config(cfg, argv)
    # one writer per run folder: a second train, eval --out, sft --out or import into it is refused
    with run_lock(cfg.resume or cfg.out, "guiagent train " + shlex.join(argv)):
        # one resolution of the start (a resumed run's config and total, its checkpoint, the folder, the
        # tasks), under the lock: what it checked holds for the run
        try:
            plan = resolve_run(cfg, iterations_given=_gives_iterations(argv), check=preflight)
        except (KeyError, CheckpointError) as e:  # an unknown task, recorded data without the tasks
            return fail("train", e)
        json_line, cfg = cfg.json, plan.cfg  # --json is this command's output, not the resumed run's setting
        before = None if cfg.resume else _entries(Path(cfg.out))
        try:
            result = train(plan)
        except (KeyError, CheckpointError) as e:  # an unknown task, a torn checkpoint: bad input
            _undo_failed_start(cfg, before)
            return fail("train", e)
        except NoEpisodeStarted as e:  # no browser (or device) would start: the run is stored as failed
            return fail("train", e, 1)
        except BaseException:
            _undo_failed_start(cfg, before)
            raise
        with writing("the run's summary", Path(result.run_dir) / "summary.json"):
            write_summary(result)
    best = (f"; best {result.best_success:.1%} at iteration {result.best_iteration} -> {result.best_model}"
            if result.best_model else "")
    stopped = f"; stopped early: {result.stopped_by}" if result.stopped_by else ""
    if result.budget_reached:
        stopped += f"; stopped at the env-step budget ({result.env_steps:,} of --max-env-steps {cfg.max_env_steps:,})"
    held = ("no held-out evaluation (--eval-episodes 0)"
            if math.isnan(result.success_before) and math.isnan(result.success_after) else
            f"held-out success {result.success_before:.1%} before, {result.success_after:.1%} after")
    if result.unseen_success_after is not None:
        held = held.replace("held-out success", "held-out success on seen targets", 1)
        held += (f"; on unseen targets {_pct(result.unseen_success_before)} before, "
                 f"{_pct(result.unseen_success_after)} after")
    print(f"trained {result.iterations} iterations -> {result.model}; {held}{best}{stopped} ({result.run_dir})")
    if result.task_success_after and len(result.task_success_after) > 1:
        print(_by_task(result))
    if result.phase_seconds:
        print("wall time by phase:\n" + _phase_table(result.phase_seconds, result.wall_seconds))
    if json_line:
        emit_json(result.to_dict())
    return 0
