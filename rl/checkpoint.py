"""Checkpoints: the trainer's state beside the weights, written so that a kill loses nothing.

Layout of ``RUN_DIR/checkpoint/``::

    config.json, model.safetensors, ...   the policy (``policy.save``)
    trainer_state.json                    TrainerState and Python's RNG state (plain JSON)
    optimizer.pt                          optimiser state and torch's RNG state: tensors only,
                                          loaded with ``torch.load(weights_only=True)``
    COMPLETE                              written last: the folder is whole

Nothing in a checkpoint is unpickled as arbitrary objects: a crafted ``optimizer.pt`` is
refused with :class:`CheckpointError`, never executed.

A save writes ``checkpoint.tmp/``, moves the old ``checkpoint/`` to ``checkpoint.old/`` and the
new one into place. A kill between those two moves leaves no ``checkpoint/``;
:func:`find_checkpoint` then resumes from the newest whole folder of the three.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["TrainerState", "CheckpointError", "checkpoint_dir", "save_checkpoint", "find_checkpoint",
           "load_checkpoint", "save_config", "load_config"]

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
OPTIM_FILE = "optimizer.pt"
COMPLETE = "COMPLETE"


class CheckpointError(RuntimeError):
    """A checkpoint or saved run config that cannot be used (torn, foreign, or not plain data)."""


@dataclass
class TrainerState:
    """What a checkpoint holds beside the weights: enough to resume exactly."""

    iteration: int = 0
    """next iteration to run (the data cursor: iteration i samples its groups from seed and i)"""
    run_id: str = ""
    model_dir: str = ""
    """the starting policy: the KL reference for the whole run, across any number of resumes"""
    eval_before: float | None = None
    kl_coef: float | None = None
    """β of the adaptive KL controller (None: --kl-coef)"""
    best_success: float | None = None
    """best held-out success seen at an --eval-every evaluation (its model is in model-best/)"""
    best_iteration: int | None = None
    rollbacks: int = 0
    """how often a stability guard rolled the run back"""
    replay: list = dataclasses.field(default_factory=list)
    """--algo awr: the replay buffer, as [run directory, episode id] pairs (the episodes stay in their stores)"""
    data_cursor: int | None = None
    """async: the data iteration to produce next; ahead of ``iteration`` by the results dropped
    for lagging (None: a sync run, or an async one from before this field: ``iteration``)"""


def checkpoint_dir(out: Path) -> Path:
    return out / "checkpoint"


def _fault(point: str) -> None:
    """Fault injection for tests: ``GUIAGENT_FAULT=<point>`` kills the process here."""
    if os.environ.get("GUIAGENT_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def save_checkpoint(out: Path, policy: Any, opt: torch.optim.Optimizer, state: TrainerState, *,
                    extra: Callable[[Path], None] | None = None) -> None:
    """Write the checkpoint to a fresh folder, then swap it in: a kill never leaves a torn one.

    ``extra(folder)`` writes more weights into the folder before it is marked whole (the
    critic's ``critic.safetensors``)."""
    tmp = out / "checkpoint.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save(tmp)
    if extra is not None:
        extra(tmp)
    torch.save({"optimizer": opt.state_dict(), "torch_rng": torch.get_rng_state()}, tmp / OPTIM_FILE)
    version, internal, gauss = random.getstate()
    (tmp / STATE_FILE).write_text(json.dumps({"state": dataclasses.asdict(state),
                                              "python_rng": [version, list(internal), gauss]}))
    (tmp / COMPLETE).write_text("")
    final, old = checkpoint_dir(out), out / "checkpoint.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
        _fault("checkpoint_swap")  # the moment with no checkpoint/: find_checkpoint covers it
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _whole(folder: Path) -> bool:
    return (folder / COMPLETE).is_file() and (folder / STATE_FILE).is_file() and (folder / OPTIM_FILE).is_file()


def find_checkpoint(out: Path) -> Path | None:
    """The newest whole checkpoint folder of a run, or None when it has none.

    ``checkpoint/`` when whole; else ``checkpoint.tmp/`` (a save finished writing but was killed
    before the swap) or ``checkpoint.old/`` (killed between the two moves of the swap).
    """
    for name in ("checkpoint", "checkpoint.tmp", "checkpoint.old"):
        folder = out / name
        if _whole(folder):
            if name != "checkpoint":
                log.info("resuming from %s: the run was killed while swapping checkpoints", folder)
            return folder
    if (out / "checkpoint" / "trainer_state.pt").is_file():
        raise CheckpointError(f"{out / 'checkpoint'} was written by an older guiagent (a pickled "
                              "trainer_state.pt); it is not loaded, for safety: start a new run")
    return None


@dataclass(frozen=True)
class Restored:
    state: TrainerState
    optimizer: dict[str, Any]
    torch_rng: torch.Tensor
    python_rng: tuple[Any, ...]


def load_checkpoint(folder: Path) -> Restored:
    """Read a checkpoint folder written by :func:`save_checkpoint`, as plain data only."""
    try:
        raw = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
        state = TrainerState(**raw["state"])
        version, internal, gauss = raw["python_rng"]
        python_rng = (int(version), tuple(int(v) for v in internal), gauss)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{folder / STATE_FILE} is not a valid trainer state ({type(e).__name__}: {e})") from None
    try:
        blob = torch.load(folder / OPTIM_FILE, weights_only=True, map_location="cpu")
    except Exception as e:  # UnpicklingError for foreign objects, RuntimeError/EOFError for torn files
        raise CheckpointError(f"{folder / OPTIM_FILE} is not a plain tensor file and was not loaded "
                              f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None
    if not isinstance(blob, dict) or "optimizer" not in blob or not isinstance(blob.get("torch_rng"), torch.Tensor):
        raise CheckpointError(f"{folder / OPTIM_FILE} does not hold an optimiser state and an RNG state")
    return Restored(state, blob["optimizer"], blob["torch_rng"], python_rng)


def save_config(out: Path, cfg: Any) -> None:
    import yaml

    from guiagent.config import to_mapping

    (out / "config.yaml").write_text(yaml.safe_dump(to_mapping(cfg), sort_keys=False))


def load_config(cls: type, run_dir: Path, **overrides: Any) -> Any:
    """The config a run was started with (``run_dir/config.yaml``), with ``overrides`` applied."""
    from guiagent.config import load_yaml

    path = run_dir / "config.yaml"
    if not path.is_file():
        raise CheckpointError(f"{run_dir} holds no config.yaml: is it a training run directory?")
    cfg = load_yaml(cls, path)
    return dataclasses.replace(cfg, **overrides)
