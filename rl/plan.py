"""One start-up resolution: flags, YAML and a resumed run turned into the run's effective config and plan;
and the run's phase schedule, what each iteration runs.

:func:`resolve_run` runs once per start, before anything is created, and both ``guiagent train``
and :class:`rl.trainer.Trainer` use what it returns: the config the run trains with (a resumed
run's own ``config.yaml``, with its total of iterations), its checkpoint (found and its trainer
state checked once), the output folder checked, the tasks (and those of the warm start and of the
held-out targets) and the recorded episodes to replay. A bad input is one line: ``ConfigError``
(a folder, a resumed run), ``KeyError`` (a task), ``CheckpointError`` (a torn checkpoint).

:class:`Schedule` gives each iteration its :class:`Phase`: the strategy whose credit and loss it takes,
whether it replays recorded episodes or runs live envs, its epochs, whether its steps count toward
--max-env-steps, and whether a staged run's replayed stage ends with it. The trainer, the producer
and the learner read the phase; none of them asks which strategy it holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from guiagent.config import ConfigError
from rl.checkpoint import CheckpointError, check_out, find_checkpoint, load_config, read_state, save_config
from rl.config import TrainConfig

if TYPE_CHECKING:
    from rl.checkpoint import TrainerState

__all__ = ["Phase", "RunPlan", "Schedule", "check_run_dir", "resolve_run", "with_demos"]


@dataclass
class RunPlan:
    """What a start resolved (see the module docstring)."""

    cfg: TrainConfig
    """the effective config: a resumed run's saved one, with its total of iterations"""
    out: Path
    tasks: list[str]
    """the tasks the run trains and evaluates on"""
    demo_tasks: list[str]
    """the tasks the warm start demonstrates (a part of ``tasks`` with --warm-start-tasks)"""
    unseen_tasks: list[str]
    """--targets seen: the tasks with targets held out of training (evaluated on them apart)"""
    recorded: list[Any] = field(default_factory=list)
    """the recorded episodes replayed by semi-online iterations (with --data; a staged run without it
    replays the warm start's demonstrations, read once they are recorded)"""
    checkpoint: Path | None = None
    """a resumed run's newest whole checkpoint (None: a new run, or a resume with no checkpoint yet)"""
    saved_state: "tuple[TrainerState, tuple[Any, ...]] | None" = None
    """that checkpoint's trainer state and Python RNG state, read and checked (rl.checkpoint.read_state)"""
    new_total: int | None = None
    """a resume that names another total of iterations: the total its config.yaml takes once the resume
    is under way (:meth:`save_total`), so that a later resume without --iterations goes on to it; None:
    unchanged"""

    def save_total(self) -> None:
        """A resume's new total into the run's config.yaml: called by the trainer once its checkpoint is
        restored (a resume refused as bad input, a damaged checkpoint, changes nothing; a resume killed
        after it, even by SIGKILL, has saved it)."""
        if self.new_total is not None:
            with contextlib.suppress(OSError):  # a full disk: the run's own line says so; the old total stays
                save_config(self.out, self.cfg)


def with_demos(cfg: TrainConfig, out: Path) -> TrainConfig:
    """``cfg`` as the run records it: a run that replays (staged, mixed) without --data replays the warm
    start's demonstrations (``out/demos``)."""
    if cfg.mode != "online" and not cfg.data:
        return dataclasses.replace(cfg, data=(str(out / "demos"),))
    return cfg


def check_run_dir(resume: str) -> Path:
    """``--resume``'s folder holds a training run (its config.yaml); ConfigError in one line otherwise."""
    run_dir = Path(resume)
    if not run_dir.is_dir():
        raise ConfigError(f"--resume {resume}: no such run directory")
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"--resume {resume}: holds no config.yaml (not a training run directory)")
    return run_dir


def resolve_run(cfg: TrainConfig, *, iterations_given: bool = True,
                check: Callable[[TrainConfig], None] | None = None) -> RunPlan:
    """The run's plan; creates nothing. ``iterations_given``: the user named --iterations (on the command
    line or in its config file), so a resumed run trains to that total; else to the total it was started
    with (the last one a resume gave). ``check``: more checks of the effective config, before its tasks
    are resolved (the CLI's of the environment: the suite's package, the devices, the model path)."""
    from rl.evaluate import tasks_with_held_out_targets  # lazy: the evaluation loads the env pool
    from rl.produce import resolve_tasks, warm_start_tasks  # lazy: as above
    from rl.replay import recorded_episodes  # lazy: as above

    ckpt = saved_state = new_total = None
    if cfg.resume:
        run_dir = check_run_dir(cfg.resume)
        saved = load_config(TrainConfig, run_dir)
        total = cfg.iterations if iterations_given else saved.iterations
        if total != saved.iterations:
            new_total = total
        cfg = dataclasses.replace(saved, iterations=total, resume=str(run_dir), out=str(run_dir), overwrite=False)
        try:
            ckpt = find_checkpoint(run_dir)
            if ckpt is not None:
                saved_state = read_state(ckpt)  # a torn or edited trainer_state.json: one line now
        except CheckpointError as e:
            raise ConfigError(f"--resume {run_dir}: {e}") from None
    else:  # a new run: an --out holding another is refused (or, with --overwrite, cleared by the trainer)
        check_out(cfg.out, resume=None, overwrite=cfg.overwrite, keep=(cfg.model, *cfg.data))
    if check is not None:
        check(cfg)
    tasks = resolve_tasks(cfg)
    plan = RunPlan(cfg=cfg, out=Path(cfg.out), tasks=tasks, demo_tasks=warm_start_tasks(cfg, tasks),
                   unseen_tasks=tasks_with_held_out_targets(cfg.env, tasks) if cfg.targets == "seen" else [],
                   recorded=recorded_episodes(cfg.data, cfg.tasks) if cfg.mode != "online" and cfg.data else [],
                   checkpoint=ckpt, saved_state=saved_state, new_total=new_total)
    if cfg.evaluation.eval_episodes > 0 and not tasks:
        raise KeyError(f"none of the recorded tasks is a {cfg.env} task to evaluate on: "
                       "give --eval-episodes 0, or --tasks of the suite")
    return plan


@dataclass(frozen=True)
class Phase:
    """What one iteration runs, from the run's :class:`Schedule`."""

    strategy: Any
    """its credit and loss: the run's --algo, or the semi-online credit of a replayed iteration"""
    replays: bool
    """its data: recorded episodes replayed with the policy's replies (no device) rather than live envs"""
    epochs: int
    """passes of the update over its batch (--semi.epochs for a replayed iteration, when set)"""
    counts_env_steps: bool
    """its rollouts count toward --max-env-steps (a replay takes no env step)"""
    stage_end: bool
    """a staged run's last replayed iteration: the KL reference re-anchored after it (--kl-reference
    stage) and a held-out evaluation"""


class Schedule:
    """A run's phases: ``at(iteration)`` is the :class:`Phase` of that iteration (--mode online: every
    iteration online; semi-online: every one replayed; mixed: --semi.per-online replayed, then one
    online, and again; staged: the first --semi.iterations replayed, then online)."""

    def __init__(self, cfg: TrainConfig, online: Any, replayed: Any = None):
        if cfg.mode != "online" and replayed is None:
            raise ValueError(f"--mode {cfg.mode} replays recorded episodes: its schedule needs the semi-online credit")
        self.cfg, self.online, self.replayed = cfg, online, replayed

    def at(self, iteration: int) -> Phase:
        cfg = self.cfg
        replays = cfg.is_semi_online(iteration)
        return Phase(strategy=self.replayed if replays else self.online, replays=replays,
                     epochs=(cfg.semi.epochs or cfg.update.epochs) if replays else cfg.update.epochs,
                     counts_env_steps=not replays,
                     stage_end=cfg.mode == "staged" and iteration + 1 == cfg.semi.iterations)
