"""Checkpoints: the trainer's state beside the weights, written so that a kill loses nothing.

Layout of ``RUN_DIR/checkpoint/``::

    config.json, model.safetensors, ...   a full policy's weights (``policy.save_weights``); a LoRA
    or lora_adapter/                      policy's adapter alone (``policy.save_adapter``)
    trainer_state.json                    TrainerState and Python's RNG state (plain JSON)
    optimizer.pt                          optimiser state and torch's RNG state: tensors only,
                                          loaded with ``torch.load(weights_only=True)``
    COMPLETE                              written last: the folder is whole

A checkpoint holds what training changes and nothing else: no tokenizer, image processor or chat
template (they are the starting model's, ``TrainerState.model_dir``, which a resume loads them from,
as it loads a LoRA run's base), and for a LoRA run no merged weights (a resume rebuilds them from the
base and the adapter). ``model/``, ``model-best/`` and ``reference/`` are whole models that load alone
(:func:`save_model`).

Weights are written once per version of the policy: a save whose policy has not changed since another
folder of the run took its weights (``model-best/`` and the same iteration's checkpoint; at the end,
``model/``, the last checkpoint and ``model-best/``) hard-links those files instead of writing them
again (:func:`note_weights`; a copy where the file system has no hard links). Every such folder is
written anew and swapped in, never rewritten in place, so a link never sees its file change.

Nothing in a checkpoint is unpickled as arbitrary objects: a crafted ``optimizer.pt`` is
refused with :class:`CheckpointError`, never executed. ``trainer_state.json`` is checked field by
field against :class:`TrainerState` (types strictly, counts non-negative) before a resume uses it;
the tensors of ``optimizer.pt`` by shape (:func:`load_checkpoint`: torch's RNG state, the optimiser
state's structure; :func:`restore_optimizer`: that it fits the run's optimiser).

A new run's ``--out`` (:func:`check_out`) is missing or empty; one that holds a training run is
continued with ``--resume`` or started again with ``--overwrite``, which first deletes what a
training run writes there (:data:`RUN_OUTPUTS`) and nothing else. A folder holds a training run
when a run marked it (:data:`RUN_MARKER`, written as the run starts) or, for runs from before the
marker, when its ``config.yaml`` is a whole saved training config; any other folder that holds
what a run would write (a ``config.yaml``, ``model/``, ``wandb/`` of the user's) is refused, even
with ``--overwrite``: nothing of it is deleted or written over.

A save writes ``checkpoint.tmp/``, moves the old ``checkpoint/`` to ``checkpoint.old/`` and the
new one into place. A kill between those two moves leaves no ``checkpoint/``;
:func:`find_checkpoint` then resumes from the newest whole folder of the three. A folder that
is there but not whole, with no whole one beside it, is damaged and refused, never taken for a
run with no checkpoint (which would start it again from iteration 0).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import math
import os
import random
import re
import shutil
import time
import typing
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import yaml

from guiagent import __version__
from guiagent.config import ConfigError, from_mapping, load_yaml, read_yaml, to_mapping
from guiagent.faults import fault
from guiagent.writing import NoSpace, writing
from guiagent.written import entries, foreign, shown

__all__ = ["TrainerState", "CheckpointError", "checkpoint_dir", "save_checkpoint", "find_checkpoint",
           "load_checkpoint", "restore_optimizer", "read_state", "save_config", "load_config", "check_out",
           "clear_previous_run", "mark_run", "holds_run", "begin_session", "end_session", "not_written",
           "save_model", "note_weights", "RUN_MARKER", "RUN_OUTPUTS"]

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
    """read from checkpoints written before strategies kept their own state: --algo awr's replay buffer, as
    [run directory, episode id] pairs (AWR now keeps it itself, in the checkpoint's ``replay.json``)"""
    data_cursor: int | None = None
    """async: the data iteration to produce next; ahead of ``iteration`` by the results dropped
    for lagging (None: a sync run, or an async one from before this field: ``iteration``)"""
    env_steps: int = 0
    """env steps the run's rollouts took so far, over all iterations (what --max-env-steps caps)"""


def checkpoint_dir(out: Path) -> Path:
    return out / "checkpoint"


# ---- weights on disk: written once a version, hard-linked where another folder of the run holds them ------

#: a plain model's weight files as ``save_pretrained`` names them (beside them a folder may hold anything)
_WEIGHT_FILE = re.compile(r"config\.json|generation_config\.json|model(-[0-9]+-of-[0-9]+)?\.safetensors"
                          r"|model\.safetensors\.index\.json")
ADAPTER_DIR = "lora_adapter"

#: per policy: the folders holding its weights at its current version, and a folder holding its
#: tokenizer, processor and template (with their file names), which never change
_ON_DISK: "weakref.WeakKeyDictionary[Any, dict[str, Any]]" = weakref.WeakKeyDictionary()


def _on_disk(policy: Any) -> dict[str, Any]:
    try:
        return _ON_DISK.setdefault(policy, {"weights": [], "parts": None})
    except TypeError:  # an object without weak references: nothing is remembered, everything written
        return {"weights": [], "parts": None}


def note_weights(policy: Any, folder: Path) -> None:
    """``folder`` (a folder of the run, written anew and swapped in) now holds ``policy``'s weights as they
    are (``policy.version``): a later save at the same version links its files instead of writing them."""
    version = getattr(policy, "version", None)
    if version is None:
        return
    rec = _on_disk(policy)
    folder = Path(folder)
    rec["weights"] = [(v, f) for v, f in rec["weights"] if v == version and f != folder] + [(version, folder)]


def _weight_files(folder: Path) -> list[str]:
    try:
        names = sorted(e.name for e in os.scandir(folder) if _WEIGHT_FILE.fullmatch(e.name) and e.is_file())
    except OSError:
        return []
    return names if any(n.endswith(".safetensors") for n in names) and "config.json" in names else []


def _adapter_files(folder: Path) -> list[str]:
    names = [f"{ADAPTER_DIR}/{e}" for e in entries(folder / ADAPTER_DIR)] if (folder / ADAPTER_DIR).is_dir() else []
    needed = {f"{ADAPTER_DIR}/adapter_config.json", f"{ADAPTER_DIR}/adapter_model.safetensors"}
    return names if needed <= set(names) else []


def _saved(policy: Any, dst: Path, files: Callable[[Path], list[str]]) -> tuple[Path, list[str]] | None:
    """A folder of ``dst``'s run that holds ``policy``'s weights at its current version, and the files of
    it that ``files`` names (None: none holds them)."""
    version = getattr(policy, "version", None)
    for v, folder in reversed(_on_disk(policy)["weights"]):
        if v == version and folder.parent.resolve() == dst.parent.resolve():
            names = files(folder)
            if names:
                return folder, names
    return None


def _link(src: Path, dst: Path, names: list[str]) -> None:
    """Hard-link ``names`` (relative paths) from ``src`` into ``dst``; a copy where links cannot be made."""
    for name in names:
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src / name, target)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise
            shutil.copy2(src / name, target)


def _save_trainable(policy: Any, folder: Path) -> None:
    """What a checkpoint keeps of the policy: a LoRA policy's adapter, a full policy's weights; linked
    from a folder of the run that holds them at this version."""
    lora = getattr(policy, "lora", None) is not None
    got = _saved(policy, folder, _adapter_files if lora else _weight_files)
    if got is not None:
        _link(got[0], folder, got[1])
    elif lora:
        policy.save_adapter(folder)
    else:
        policy.save_weights(folder)


def save_model(policy: Any, folder: Path, settings: Any = None) -> None:
    """A whole model that loads alone (``model/``, ``model-best/``, ``reference/``): the inference weights
    (a LoRA policy's merged, and its adapter), tokenizer, processor and chat template, and ``settings``'
    ``guiagent_agent.json`` when given. Written to ``folder.tmp`` and swapped in (a folder that another
    holds links into is never rewritten in place); what another folder of the run holds already (the
    same weights, the parts) is hard-linked rather than written again."""
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    rec = _on_disk(policy)
    parts = rec["parts"]
    if parts is not None and parts[0].parent.resolve() == folder.parent.resolve() and \
            all((parts[0] / n).is_file() for n in parts[1]):
        _link(parts[0], tmp, parts[1])
        names = parts[1]
    else:
        policy.save_parts(tmp)
        names = entries(tmp)
    got = _saved(policy, folder, _weight_files)
    if got is not None:
        _link(got[0], tmp, got[1])
    else:
        policy.save_weights(tmp)
    if getattr(policy, "lora", None) is not None:
        got = _saved(policy, folder, _adapter_files)
        if got is not None:
            _link(got[0], tmp, got[1])
        else:
            policy.save_adapter(tmp)
    if settings is not None:
        settings.save(str(tmp))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    rec["parts"] = (folder, names)
    note_weights(policy, folder)


def save_checkpoint(out: Path, policy: Any, opt: torch.optim.Optimizer, state: TrainerState, *,
                    extra: Callable[[Path], None] | None = None) -> None:
    """Write the checkpoint to a fresh folder, then swap it in: a kill never leaves a torn one.

    The weights are what training changes (see the module docstring: a LoRA policy's adapter alone, no
    tokenizer); ``extra(folder)`` writes more weights into the folder before it is marked whole (the
    critic's ``critic.safetensors``)."""
    tmp = out / "checkpoint.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with writing("the checkpoint", tmp):
            tmp.mkdir(parents=True)
            _save_trainable(policy, tmp)
            fault("checkpoint_write")  # tests: a signal in the middle of a save
            if extra is not None:
                extra(tmp)
            torch.save({"optimizer": opt.state_dict(), "torch_rng": torch.get_rng_state()}, tmp / OPTIM_FILE)
            version, internal, gauss = random.getstate()
            (tmp / STATE_FILE).write_text(json.dumps({"state": dataclasses.asdict(state),
                                                      "python_rng": [version, list(internal), gauss]}))
            (tmp / COMPLETE).write_text("")
    except NoSpace:  # the torn folder goes at once: the space it took is the run's to resume with
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final, old = checkpoint_dir(out), out / "checkpoint.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
        fault("checkpoint_swap")  # the moment with no checkpoint/: find_checkpoint covers it
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    note_weights(policy, final)


def _whole(folder: Path) -> bool:
    return (folder / COMPLETE).is_file() and (folder / STATE_FILE).is_file() and (folder / OPTIM_FILE).is_file()


def _what_is_wrong(folder: Path) -> str:
    """Why ``folder`` is not a whole checkpoint, in a few words."""
    if not folder.is_dir():
        return "not a folder"
    wrong = [f"{name} {'is not a file' if (folder / name).exists() else 'is missing'}"
             for name in (COMPLETE, STATE_FILE, OPTIM_FILE) if not (folder / name).is_file()]
    return ", ".join(wrong)


def find_checkpoint(out: Path) -> Path | None:
    """The newest whole checkpoint folder of a run, or None when it has none.

    ``checkpoint/`` when whole; else ``checkpoint.tmp/`` (a save finished writing but was killed
    before the swap) or ``checkpoint.old/`` (killed between the two moves of the swap). A
    ``checkpoint/`` or ``checkpoint.old/`` that is there but not whole, with no whole folder to
    resume from, is damaged (a save never leaves either so): :class:`CheckpointError`, never taken
    for a run with no checkpoint, which would start it again from iteration 0. A torn
    ``checkpoint.tmp/`` alone is a first save that was killed: no checkpoint yet.
    """
    final = checkpoint_dir(out)
    for name in ("checkpoint", "checkpoint.tmp", "checkpoint.old"):
        folder = out / name
        if _whole(folder):
            if name != "checkpoint":
                if final.exists() or final.is_symlink():
                    log.warning("%s is not a whole checkpoint (%s): resuming from %s", final,
                                _what_is_wrong(final), folder)
                else:
                    log.info("resuming from %s: the run was killed while swapping checkpoints", folder)
            return folder
    if (final / "trainer_state.pt").is_file():
        raise CheckpointError(f"{final} was written by an older guiagent (a pickled "
                              "trainer_state.pt); it is not loaded, for safety: start a new run")
    for folder in (final, out / "checkpoint.old"):
        if folder.exists() or folder.is_symlink():
            raise CheckpointError(f"{folder} is not a whole checkpoint ({_what_is_wrong(folder)}) and the run "
                                  "holds no other to resume from: restore it, or start the run again with "
                                  "--overwrite")
    return None


@dataclass(frozen=True)
class Restored:
    state: TrainerState
    optimizer: dict[str, Any]
    torch_rng: torch.Tensor
    python_rng: tuple[Any, ...]
    path: Path | None = None
    """the ``optimizer.pt`` it was read from (named by :func:`restore_optimizer`'s refusals)"""


def _state_from(raw: Any) -> TrainerState:
    """A TrainerState from the JSON of ``trainer_state.json``, every field type-checked strictly and
    every count in range; ValueError (one line) names the field otherwise."""
    from pydantic import TypeAdapter, ValidationError

    if not isinstance(raw, dict):
        raise ValueError(f"state: expected a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(TrainerState)
    unknown = sorted(k for k in raw if k not in hints)
    if unknown:
        raise ValueError(f"unknown field(s) {unknown} (written by a newer guiagent?)")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        try:
            values[name] = TypeAdapter(hints[name]).validate_python(value, strict=True)
        except ValidationError:
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            expected = str(hints[name]).replace("<class '", "").replace("'>", "").replace("typing.", "")
            raise ValueError(f"{name}: {shown} is not valid (expected {expected})") from None
    state = TrainerState(**values)
    for name in ("iteration", "rollbacks", "best_iteration", "data_cursor", "env_steps"):
        v = getattr(state, name)
        if v is not None and not 0 <= v < 2**63:
            raise ValueError(f"{name}: {v} is out of range (a count, 0 or more)")
    if state.data_cursor is not None and state.data_cursor < state.iteration:
        raise ValueError(f"data_cursor {state.data_cursor} lies before iteration {state.iteration}")
    if state.best_iteration is not None and state.best_iteration > state.iteration:
        raise ValueError(f"best_iteration {state.best_iteration} lies after iteration {state.iteration}")
    for name in ("eval_before", "best_success"):  # NaN: an evaluation that did not run
        v = getattr(state, name)
        if v is not None and not math.isnan(v) and not 0.0 <= v <= 1.0:
            raise ValueError(f"{name}: {v} is not a success rate in [0, 1]")
    if state.kl_coef is not None and not (math.isfinite(state.kl_coef) and state.kl_coef >= 0):
        raise ValueError(f"kl_coef: {state.kl_coef} is not a finite β >= 0")
    if not all(isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r) for r in state.replay):
        raise ValueError("replay: expected [run directory, episode id] pairs of strings")
    return state


def read_state(folder: Path) -> tuple[TrainerState, tuple[Any, ...]]:
    """The trainer state and Python's RNG state of a checkpoint folder, checked (no tensors read):
    :class:`CheckpointError` in one line when the file is torn, foreign or out of range."""
    path = folder / STATE_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError(f"expected a JSON object, got {type(raw).__name__}")
        state = _state_from(raw.get("state"))
        try:
            version, internal, gauss = raw["python_rng"]
            python_rng = (int(version), tuple(int(v) for v in internal), gauss)
            random.Random().setstate(python_rng)  # the shape random.setstate takes, before a resume relies on it
        except (ValueError, KeyError, TypeError, OverflowError) as e:
            raise ValueError(f"python_rng: not a state of Python's random ({' '.join(str(e).split())[:80]})") from None
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError) as e:
        msg = " ".join(str(e).split())[:200]
        why = msg if type(e) is ValueError else f"{type(e).__name__}: {msg}"
        raise CheckpointError(f"{path} is not a valid trainer state ({why})") from None
    return state, python_rng


def load_checkpoint(folder: Path, read: tuple[TrainerState, tuple[Any, ...]] | None = None) -> Restored:
    """Read a checkpoint folder written by :func:`save_checkpoint`, as plain data only, its shapes
    checked (:func:`_check_blob`): :class:`CheckpointError` in one line otherwise. What only the
    optimiser can tell (its groups, its parameters' shapes) :func:`restore_optimizer` checks.
    ``read``: the folder's :func:`read_state`, when the caller read it already (rl.plan)."""
    state, python_rng = read if read is not None else read_state(folder)
    path = folder / OPTIM_FILE
    try:
        with warnings.catch_warnings():  # torch warns of a foreign pickle protocol before refusing the file
            warnings.simplefilter("ignore")
            blob = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # UnpicklingError for foreign objects, RuntimeError/EOFError for torn files
        raise CheckpointError(f"{path} is not a plain tensor file and was not loaded "
                              f"({_load_error(e)})") from None
    try:
        _check_blob(blob)
    except (ValueError, TypeError, RuntimeError) as e:
        raise CheckpointError(f"{path} does not hold a valid optimiser and RNG state "
                              f"({' '.join(str(e).split())[:200]})") from None
    return Restored(state, blob["optimizer"], blob["torch_rng"], python_rng, path)


def _load_error(e: Exception) -> str:
    """torch.load's reason in one short line (its weights-only refusal: the object it stopped at)."""
    text = str(e)
    _, marker, reason = text.partition("WeightsUnpickler error:")
    lines = [line.strip() for line in (reason if marker else text).splitlines() if line.strip()]
    why = lines[0] if lines else ""
    return f"{type(e).__name__}: {why[:200]}" if why else type(e).__name__


#: settings of an optimiser's parameter group torch fills in when a saved group lacks them (an older torch)
_GROUP_DEFAULTED = frozenset({"amsgrad", "maximize", "foreach", "capturable", "differentiable", "fused",
                              "decoupled_weight_decay"})
#: a saved group's own entries, not settings
_GROUP_PARAMS = ("params", "param_names")


def _plain(value: Any) -> bool:
    """A group setting's value as optimisers hold one: None, a bool, a finite number, a string, or a
    tuple/list of those."""
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (bool, int, str))


def _check_tensor(name: str, t: Any, *, integer_ok: bool = False) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a tensor, got {type(t).__name__}")
    if t.layout != torch.strided or t.is_quantized:
        raise ValueError(f"{name}: a {t.layout} tensor, expected a dense one")
    if t.is_floating_point():
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name}: holds values that are not finite")
    elif not (integer_ok and not t.is_complex() and t.dtype != torch.bool):
        raise ValueError(f"{name}: a {t.dtype} tensor, expected a floating-point one")


def _check_blob(blob: Any) -> None:
    """What ``optimizer.pt`` holds is what :func:`save_checkpoint` writes: torch's RNG state (a byte
    tensor torch's generator takes) and an optimiser state dict (parameter groups of plain settings
    over distinct parameter indices; per parameter, a state of dense finite tensors and a scalar step;
    a master-weight optimiser's fp32 copies). ValueError (one line) names what is not."""
    if not isinstance(blob, dict):
        raise ValueError(f"expected a mapping, got {type(blob).__name__}")
    unknown = sorted(repr(k) for k in blob if k not in ("optimizer", "torch_rng"))
    if unknown or "optimizer" not in blob or "torch_rng" not in blob:
        raise ValueError("expected the entries 'optimizer' and 'torch_rng'" + (f", not {', '.join(unknown)}"
                                                                               if unknown else ""))
    rng = blob["torch_rng"]
    expected = torch.get_rng_state()
    if (not isinstance(rng, torch.Tensor) or rng.dtype != torch.uint8 or rng.layout != torch.strided
            or rng.shape != expected.shape):
        shown = f"a {rng.dtype} tensor of shape {tuple(rng.shape)}" if isinstance(rng, torch.Tensor) else \
            type(rng).__name__
        raise ValueError(f"torch_rng: {shown}, expected a torch.uint8 tensor of shape "
                         f"{tuple(expected.shape)}")
    try:
        torch.Generator().set_state(rng)  # the state torch's generator takes, before a resume relies on it
    except RuntimeError as e:
        raise ValueError(f"torch_rng: not a state of torch's generator "
                         f"({str(e).splitlines()[0][:80]})") from None
    opt = blob["optimizer"]
    if not isinstance(opt, dict):
        raise ValueError(f"optimizer: expected a state dict (a mapping), got {type(opt).__name__}")
    unknown = sorted(repr(k) for k in opt if k not in ("state", "param_groups", "master_weights"))
    if unknown or not isinstance(opt.get("state"), dict) or not isinstance(opt.get("param_groups"), list):
        raise ValueError("optimizer: expected 'state' (a mapping) and 'param_groups' (a list)"
                         + (f", not {', '.join(unknown)}" if unknown else ""))
    if not opt["param_groups"]:
        raise ValueError("optimizer: no parameter groups")
    seen: set[int] = set()
    for i, group in enumerate(opt["param_groups"]):
        if not isinstance(group, dict) or not all(isinstance(k, str) for k in group):
            raise ValueError(f"optimizer: param_groups[{i}]: expected a mapping of settings")
        params = group.get("params")
        if not isinstance(params, list) or not all(type(p) is int and p >= 0 for p in params):
            raise ValueError(f"optimizer: param_groups[{i}]: params: expected a list of parameter indices")
        if seen & set(params) or len(set(params)) != len(params):
            raise ValueError(f"optimizer: param_groups[{i}]: a parameter index listed twice")
        seen |= set(params)
        for k, v in group.items():
            if k not in _GROUP_PARAMS and not _plain(v):
                shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
                raise ValueError(f"optimizer: param_groups[{i}]: {k}: {shown} is not a plain setting")
    for k, entry in opt["state"].items():
        if type(k) is not int or k not in seen:
            raise ValueError(f"optimizer: state of {k!r}, which no parameter group lists")
        if not isinstance(entry, dict) or not all(isinstance(n, str) for n in entry):
            raise ValueError(f"optimizer: state[{k}]: expected a mapping of named tensors")
        for n, t in entry.items():
            _check_tensor(f"optimizer: state[{k}][{n!r}]", t, integer_ok=n == "step")
            if n == "step" and (t.numel() != 1 or float(t.reshape(())) < 0):
                raise ValueError(f"optimizer: state[{k}]['step']: expected one count, 0 or more")
    masters = opt.get("master_weights", [])
    if not isinstance(masters, list):
        raise ValueError(f"optimizer: master_weights: expected a list of tensors, "
                         f"got {type(masters).__name__}")
    for i, t in enumerate(masters):
        _check_tensor(f"optimizer: master_weights[{i}]", t)


def restore_optimizer(opt: torch.optim.Optimizer, restored: Restored) -> None:
    """Load a checkpoint's optimiser state into ``opt`` once it fits: as many parameter groups, each of as
    many parameters, each state tensor of its parameter's shape, each setting the optimiser has of its
    type and in range. :class:`CheckpointError` (one line, ``opt`` unchanged) otherwise."""
    where = restored.path or OPTIM_FILE
    try:
        _check_fits(restored.optimizer, opt)
    except ValueError as e:
        raise CheckpointError(f"{where} does not fit this run's optimiser "
                              f"({' '.join(str(e).split())[:200]})") from None
    try:
        opt.load_state_dict(restored.optimizer)
    except (ValueError, KeyError, TypeError, RuntimeError) as e:  # anything _check_fits did not foresee
        raise CheckpointError(f"{where} does not fit this run's optimiser "
                              f"({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None


def _check_fits(saved: dict[str, Any], opt: torch.optim.Optimizer) -> None:
    groups, saved_groups = opt.param_groups, saved["param_groups"]
    if len(saved_groups) != len(groups):
        raise ValueError(f"{len(saved_groups)} parameter group(s), the optimiser has {len(groups)}")
    shapes: dict[int, torch.Size] = {}
    for i, (group, sg) in enumerate(zip(groups, saved_groups)):
        if len(sg["params"]) != len(group["params"]):
            raise ValueError(f"parameter group {i} holds {len(sg['params'])} parameters, the optimiser's "
                             f"{len(group['params'])}")
        shapes.update((k, p.shape) for k, p in zip(sg["params"], group["params"]))
        for k in sorted(set(group) - set(sg) - _GROUP_DEFAULTED - set(_GROUP_PARAMS)):
            raise ValueError(f"parameter group {i} lacks the setting {k}")
        for k, v in sg.items():
            if k in _GROUP_PARAMS:
                continue
            if k not in group:
                raise ValueError(f"parameter group {i}: unknown setting {k}")
            _check_setting(f"parameter group {i}: {k}", k, v, group[k])
    for k, entry in saved["state"].items():
        for n, t in entry.items():
            if n != "step" and t.shape != shapes[k]:
                raise ValueError(f"state[{k}][{n!r}] has shape {tuple(t.shape)}, its parameter "
                                 f"{tuple(shapes[k])}")
    masters = saved.get("master_weights")
    own = getattr(opt, "masters", None)
    if masters is not None and own is not None and (
            len(masters) != len(own) or any(m.shape != o.shape for m, o in zip(masters, own))):
        raise ValueError("master_weights do not match the model's trainable parameters")


def _check_setting(name: str, key: str, value: Any, current: Any) -> None:
    """A saved group setting has the type of the optimiser's own (None or a bool where it takes either)
    and, for AdamW's numbers, a value in range."""
    if key in ("foreach", "fused"):
        ok = value is None or isinstance(value, bool)
    elif isinstance(current, bool) or isinstance(value, bool):
        ok = isinstance(value, bool) and isinstance(current, bool)
    elif isinstance(current, (int, float)):
        ok = isinstance(value, (int, float))
    elif isinstance(current, (tuple, list)):
        ok = (isinstance(value, (tuple, list)) and len(value) == len(current)
              and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))
    else:
        ok = current is None or isinstance(value, type(current))
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    if not ok:
        raise ValueError(f"{name}: {shown} is not valid (the optimiser's is {current!r})")
    if key in ("lr", "eps") and not value > 0 or key == "weight_decay" and not value >= 0:
        raise ValueError(f"{name}: {shown} is out of range")
    if key == "betas" and not all(0 <= b < 1 for b in value):
        raise ValueError(f"{name}: {shown} is out of range (each in [0, 1))")


def save_config(out: Path, cfg: Any) -> None:
    class Dumper(yaml.SafeDumper):  # every value written out: the config loader refuses YAML aliases
        def ignore_aliases(self, data: Any) -> bool:
            return True

    # whole or not at all: a kill mid-write never leaves a torn config.yaml that a resume refuses
    tmp = out / "config.yaml.tmp"
    try:
        tmp.write_text(yaml.dump(to_mapping(cfg), Dumper=Dumper, sort_keys=False))
        os.replace(tmp, out / "config.yaml")
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def load_config(cls: type, run_dir: Path, **overrides: Any) -> Any:
    """The config a run was started with (``run_dir/config.yaml``), with ``overrides`` applied."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise CheckpointError(f"{run_dir} holds no config.yaml: is it a training run directory?")
    cfg = load_yaml(cls, path)
    return dataclasses.replace(cfg, **overrides)


#: the file a training run writes first in its folder: what tells ``--overwrite`` the folder's outputs are a
#: run's (a small JSON object, ``{"written_by": "guiagent train", ...}``)
RUN_MARKER = ".guiagent-train.json"
_MARKED_BY = "guiagent train"

#: what a training run writes in its folder (besides the trajectory store, which it shares with
#: other runs and which keeps every run's episodes, and its held-out evaluations' ``eval-<tag>``
#: folders): ``--overwrite`` deletes these, nothing else
RUN_OUTPUTS = (RUN_MARKER, RUN_MARKER + ".tmp", "config.yaml", "config.yaml.tmp", "summary.json", "checkpoint",
               "checkpoint.tmp", "checkpoint.old",
               "model", "model.tmp", "model-best", "model-best.tmp", "reference", "reference.tmp", "base", "sft",
               "demos",
               "tensorboard", "wandb")
#: the held-out evaluations a run writes (Trainer.evaluate's tags)
_EVAL_DIR = re.compile(r"eval-(before|after|after-semi-online|iter-[0-9]+)")


#: the marker's size limit (it holds the record of the run's outputs: a path per file it wrote)
_MARKER_MAX = 64 * 2**20
#: the run's own plain files at the top of its folder (every other output is a folder)
_TOP_FILES = frozenset({RUN_MARKER, RUN_MARKER + ".tmp", "config.yaml", "config.yaml.tmp", "summary.json"})
#: slack under a session's start time: the file system stamps files from a coarser clock than time.time()
_CLOCK_SLACK_S = 1.0


def _write_marker(out: Path, record: dict[str, Any]) -> None:
    tmp = out / (RUN_MARKER + ".tmp")
    try:
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, out / RUN_MARKER)  # whole or not at all: a torn marker would disown the run
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def mark_run(out: Path) -> None:
    """Write :data:`RUN_MARKER` in ``out`` (a new run, before anything else of it; a resumed run from
    before the marker): the evidence ``--overwrite`` later asks for before it deletes anything."""
    if not (out / RUN_MARKER).is_file():
        _write_marker(out, {"written_by": _MARKED_BY, "version": __version__, "outputs": {}})


def _read_marker(out: Path) -> dict[str, Any] | None:
    marker = out / RUN_MARKER
    try:
        if not marker.is_file() or marker.is_symlink() or marker.stat().st_size > _MARKER_MAX:
            return None
        raw = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) and raw.get("written_by") == _MARKED_BY else None


def _marked(out: Path) -> bool:
    return _read_marker(out) is not None


# ---- what the run wrote: --overwrite deletes that and nothing else ------------------------------------
# The marker records, per output folder, the entries the run wrote there ("outputs": {name: [paths]}).
# A session of the run (a start or a resume) sets "session_since" as it begins: until it ends, what was
# created or changed in the run's output folders since then (the file system's ctime, which no user tool
# sets back) is the run's too; as it ends (however, but a SIGKILL) :func:`end_session` adds those entries to
# the record and clears "session_since". A file of the user's in an output folder (base/mynotes.txt) is
# in no record: --overwrite refuses the run folder, naming it, and deletes nothing.


def _output_names(out: Path) -> list[str]:
    """The output folders of the run in ``out``, present now (:data:`RUN_OUTPUTS` folders, ``eval-<tag>``)."""
    return [n for n in _run_outputs(out) if n not in _TOP_FILES]


def _since_entries(folder: Path, since: float) -> list[str]:
    """The entries under ``folder`` (relative) created or changed at ``since`` or later."""
    got = []
    for e in entries(folder, folders=True):
        try:
            if os.lstat(folder / e).st_ctime >= since:
                got.append(e)
        except OSError:
            pass
    return got


def _record(out: Path) -> dict[str, Any] | None:
    """The marker's record of the run's outputs, with ``outputs`` (name -> entries) and ``session_since``;
    None for a run that keeps none (marked by an earlier guiagent, or from before the marker: every entry of
    its output folders counts as the run's)."""
    raw = _read_marker(out)
    outputs = raw.get("outputs") if raw is not None else None
    if not isinstance(outputs, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
            for k, v in outputs.items()):
        return None
    since = raw.get("session_since")
    return {**raw, "outputs": outputs,
            "session_since": float(since) if isinstance(since, (int, float)) and math.isfinite(since) else None}


def begin_session(out: Path) -> None:
    """A session of the run in ``out`` begins writing (after :func:`mark_run`): what changes in its output
    folders from now on is the run's (see above). A run whose marker keeps no record yet (an earlier
    guiagent's) gets one holding everything its output folders hold now."""
    record = _record(out)
    if record is None:
        raw = _read_marker(out) or {"written_by": _MARKED_BY}
        record = {**raw, "outputs": {n: entries(out / n, folders=True) if (out / n).is_dir() else []
                                     for n in _output_names(out)}, "session_since": None}
    if record["session_since"] is None:  # a session killed before it ended keeps its earlier, wider start
        record["session_since"] = time.time() - _CLOCK_SLACK_S
    record["version"] = __version__
    _write_marker(out, record)


def end_session(out: Path) -> None:
    """The session ends (a finished, failed or interrupted run): what it created or changed in the output
    folders joins the record; later entries there are not the run's."""
    record = _record(out)
    if record is None or record["session_since"] is None:
        return
    since, outputs = record["session_since"], record["outputs"]
    for name in _output_names(out):
        folder = out / name
        mine = name in outputs or os.lstat(folder).st_ctime >= since
        if mine:
            fresh = _since_entries(folder, since) if folder.is_dir() and not folder.is_symlink() else []
            outputs[name] = sorted(set(outputs.get(name, [])) | set(fresh))
    record["session_since"] = None
    _write_marker(out, record)


def not_written(out: Path, keep: tuple[str, ...] = ()) -> list[str]:
    """The entries in the run's output folders of ``out`` that the run did not write (paths relative to
    ``out``): an output folder no session wrote, or an entry in one that no record holds. Folders that hold
    a path in ``keep`` are not looked into (--overwrite keeps them)."""
    record = _record(out)
    if record is None:  # an earlier guiagent's run: its output folders hold nothing else, as it recorded none
        return []
    kept = [Path(k).resolve() for k in keep if k]
    since, outputs = record["session_since"], record["outputs"]
    found: list[str] = []
    for name in _output_names(out):
        folder = out / name
        if any(k == folder.resolve() or folder.resolve() in k.parents for k in kept):
            continue
        try:
            fresh = since is not None and os.lstat(folder).st_ctime >= since
        except OSError:
            continue
        if name not in outputs and not fresh:
            found.append(name)
            continue
        if folder.is_symlink() or not folder.is_dir():
            continue
        written = set(outputs.get(name, []))
        if since is not None:
            written |= set(_since_entries(folder, since))
        found += [f"{name}/{e}" for e in foreign(folder, written, sqlite_companions=True)]
    return found


def _not_written_error(out: str, names: list[str]) -> ConfigError:
    return ConfigError(f"--out {out}: --overwrite deletes what the earlier run wrote, and its folders hold what it "
                       f"did not write ({shown(names)}): nothing was deleted; move those away, or give another "
                       "--out")


def _saved_train_config(path: Path) -> bool:
    """``path`` is a config :func:`save_config` wrote for a training run: every field of the training
    config at its top, and it loads as one (a run from before :data:`RUN_MARKER`)."""
    from rl.config import TrainConfig  # lazy: rl.config loads the strategies' modules (a cycle at import)

    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 1_000_000:
            return False
        data = read_yaml(path)
        if not isinstance(data, dict) or set(data) != set(to_mapping(TrainConfig())):
            return False
        from_mapping(TrainConfig, data, where="")
    except Exception:  # any reason it does not load: not a run's config (a file of the user's)
        return False
    return True


def holds_run(out: Path) -> bool:
    """``out`` holds what a guiagent training run wrote: its :data:`RUN_MARKER`, or (a run from before
    the marker) a ``config.yaml`` that is a whole saved training config."""
    return _marked(out) or _saved_train_config(out / "config.yaml")


def _run_outputs(out: Path) -> list[str]:
    """The entries of ``out`` named as a training run names its outputs (:data:`RUN_OUTPUTS`, its
    held-out evaluations' folders)."""
    names = [n for n in RUN_OUTPUTS if (out / n).exists() or (out / n).is_symlink()]
    return names + sorted(p.name for p in out.glob("eval-*") if _EVAL_DIR.fullmatch(p.name) and p.is_dir()
                          and not p.is_symlink())


def _foreign(out: str, names: list[str]) -> ConfigError:
    shown = ", ".join(sorted(n for n in names if n != RUN_MARKER))
    marker = Path(out) / RUN_MARKER
    why = (f"its {RUN_MARKER} is not a run marker guiagent train wrote, and no config.yaml a run saved is there"
           if marker.exists() or marker.is_symlink() else f"no run marker {RUN_MARKER}, nor a config.yaml a run saved")
    return ConfigError(f"--out {out} holds {shown or RUN_MARKER}, which no guiagent training run wrote ({why}): "
                       "nothing there is deleted or written over, even with --overwrite; move them away or give "
                       "another --out")


def check_out(out: str, *, resume: str | None, overwrite: bool, keep: tuple[str, ...] = ()) -> None:
    """A new run's ``--out`` is missing or empty, or ``--overwrite`` is given over an earlier run whose output
    folders hold only what it wrote (:func:`not_written`; ``keep``: the new run's --model and --data, kept)
    or over a folder that holds nothing a run writes; a ConfigError (one line, saying how to go on)
    otherwise. Creates and deletes nothing; ``--resume`` runs are not checked."""
    p = Path(out)
    if resume or not p.is_dir():
        return
    try:
        empty = next(p.iterdir(), None) is None
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot be read ({e.strerror or e})") from None
    if empty:
        return
    if holds_run(p):
        if overwrite:
            foreign_here = not_written(p, keep)
            if foreign_here:
                raise _not_written_error(out, foreign_here)
            return
        raise ConfigError(f"--out {out} holds a training run: continue it with --resume {out}, start it "
                          f"again with --overwrite, or give another --out")
    clashing = _run_outputs(p)
    if clashing:  # the user's own config.yaml, model/, wandb/...: never taken for a run's
        raise _foreign(out, clashing)
    if overwrite:
        return
    raise ConfigError(f"--out {out} is not empty and holds no training run: give a new or empty folder, or "
                      "--overwrite to write the run into it (nothing already there is deleted)")


def clear_previous_run(out: Path, keep: tuple[str, ...] = ()) -> list[str]:
    """``--overwrite``: delete what an earlier training run wrote in ``out`` (:data:`RUN_OUTPUTS` and
    its ``eval-<tag>`` stores) when ``out`` holds one (:func:`holds_run`); the store and anything else
    stay. Entries that hold a path in ``keep`` (the new run's --model or --data) stay too. A folder
    that holds a run's names but no run, or a run whose output folders hold what it did not write
    (:func:`not_written`: a file of the user's in ``base/``), is refused (a ConfigError), nothing deleted.
    Returns the names deleted."""
    if not out.is_dir():
        return []
    names = _run_outputs(out)
    if not holds_run(out):
        if names:
            raise _foreign(str(out), names)
        return []
    foreign_here = not_written(out, keep)
    if foreign_here:  # checked before the first deletion: all or nothing
        raise _not_written_error(str(out), foreign_here)
    kept = [Path(k).resolve() for k in keep if k]
    gone = []
    for name in names:
        entry = out / name
        if any(k == entry.resolve() or entry.resolve() in k.parents for k in kept):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        gone.append(name)
    if gone:
        log.info("--overwrite: deleted the earlier run's %s in %s (its episodes stay in the store)",
                 ", ".join(gone), out)
    return gone
