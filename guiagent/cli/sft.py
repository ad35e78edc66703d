"""``guiagent sft``: supervised fine-tuning on stored successful trajectories.

Example (oracle demonstrations of the easy webapps tasks, then SFT of a tiny model)::

    guiagent model init --size tiny --out runs/tiny
    guiagent eval --env webapps --agent oracle --difficulty easy --seed 0 --episodes 200 --out runs/demos
    guiagent sft --data runs/demos --model runs/tiny --out runs/sft --train.steps 300
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field

from guiagent.cli._common import (
    CLIError, check_model_path, check_out_free, check_run_dirs, emit_json, log, quiet_library_bars, validate_out_dir,
)
from guiagent.config import Flat, parse_config
from guiagent.policy import load_policy
from guiagent.runlock import run_lock
from rl.agents import AgentSettings, compact_prompt
from rl.sft import SFTConfig, load_examples, load_trajectories, train_sft


@dataclass
class SFTCommandConfig:
    """Fine-tune a model on the successful episodes of stored runs (loss on the assistant's action tokens)."""

    data: tuple[str, ...] = ()
    """run directories holding the demonstrations"""
    model: str = ""
    """base model: a local folder or a hub id"""
    out: str = "runs/sft"
    """where the fine-tuned model is saved (loadable with the same from_pretrained path); a new or empty folder"""
    overwrite: bool = False
    """write into an --out that holds files already (an earlier model's are replaced, others stay)"""
    agent: Flat[AgentSettings] = field(default_factory=AgentSettings)
    """how the model is prompted and its replies parsed (--action-format, --coord-decimals,
    --history-images, --max-history, --system-prompt); saved beside the model"""
    compact_prompt: bool = False
    """a short system prompt instead of the format's full one (tiny models trained from scratch): the
    marks format's own for --action-format marks, a JSON one otherwise"""
    tasks: tuple[str, ...] = ()
    """only episodes of these task ids"""
    include_failures: bool = False
    """also imitate unsuccessful completed episodes (normally off)"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    train: SFTConfig = field(default_factory=SFTConfig)
    """optimisation settings (--train.lr, --train.steps, --train.coord_weight, ...)"""
    json: bool = False
    """print one JSON object with the figures as the last stdout line"""

    def __post_init__(self) -> None:
        if not 0 <= self.threads <= 1024:
            raise ValueError(f"--threads must lie in 0..1024 (0: torch's default), got {self.threads}")
        if not self.data:
            raise ValueError("--data needs at least one run directory (e.g. from guiagent eval --agent oracle)")
        if not self.model:
            raise ValueError("--model needs a model folder or hub id (guiagent model init --out DIR makes one)")
        if self.compact_prompt and self.agent.system_prompt is not None:
            raise ValueError("--compact-prompt replaces the system prompt: give it or --system-prompt, not both")


def main(argv: list[str]) -> int:
    cfg = parse_config(SFTCommandConfig, argv, prog="guiagent sft")
    check_run_dirs(cfg.data)  # every check before any model loads or file is written
    check_model_path(cfg.model)
    validate_out_dir(cfg.out)
    check_out_free(cfg.out, overwrite=cfg.overwrite)
    quiet_library_bars()
    trajs = load_trajectories(cfg.data, successful_only=not cfg.include_failures, tasks=cfg.tasks)
    if not trajs:
        which = "completed" if cfg.include_failures else "successful"
        raise CLIError(f"--data {' '.join(cfg.data)}: no {which} episodes"
                       + (f" of --tasks {' '.join(cfg.tasks)}" if cfg.tasks else "")
                       + ("" if cfg.include_failures else " (--include-failures also imitates the others)"))
    log(f"sft: {len(trajs)} episodes from {', '.join(cfg.data)}")
    policy = load_policy(cfg.model, backend="transformers", threads=cfg.threads or None)
    settings = (dataclasses.replace(cfg.agent, system_prompt=compact_prompt(cfg.agent.action_format,
                                                                            cfg.agent.mark_refer))
                if cfg.compact_prompt else cfg.agent)
    examples = load_examples(trajs, policy, settings.format(), settings.prompt_config(), cfg.train)
    if not examples:
        raise CLIError(f"--data {' '.join(cfg.data)}: the episodes hold no steps with actions to imitate")
    log(f"sft: {len(examples)} examples; training {cfg.train.steps} steps")
    with run_lock(cfg.out, "guiagent sft " + shlex.join(argv)):  # one writer per output folder
        check_out_free(cfg.out, overwrite=cfg.overwrite)  # again: what another command wrote meanwhile
        figures = train_sft(policy, examples, cfg.train, out_dir=cfg.out, settings=settings)
    figures.update(out=cfg.out, episodes=len(trajs), action_format=settings.action_format)
    print(f"sft: loss {figures['loss_first']:.3f} -> {figures['loss_last']:.3f} over {figures['steps']} steps "
          f"({figures['examples']} examples, {figures['seconds']} s) -> {cfg.out}")
    if cfg.json:
        emit_json(figures)
    return 0
