"""Training metrics to where people look: the run's store, TensorBoard, Weights & Biases.

One interface, :class:`MetricsLogger` (``log(iteration, metrics)``, ``close()``), and
backends that all use the metric names the store uses (``success_rate``, ``loss``,
``kl``...), unchanged, so a curve has the same name in the web UI, in TensorBoard and in
W&B:

* ``store``: :meth:`guiagent.store.Store.log_metrics` (what the web UI's dashboards read);
* ``tensorboard``: event files under ``<out_dir>/tensorboard/<run_name>/`` written with
  ``tensorboardX`` (``pip install 'guiagent[tensorboard]'``). tensorboardX rather than
  ``torch.utils.tensorboard``: the latter needs the whole ``tensorboard`` package
  (grpc, werkzeug, the web server) just to write; tensorboardX needs numpy and protobuf.
  View with ``tensorboard --logdir <out_dir>/tensorboard``;
* ``wandb``: a W&B run (``pip install 'guiagent[wandb]'``), offline unless ``WANDB_MODE``
  says otherwise: files under ``<out_dir>/wandb/``, uploaded later with ``wandb sync``.

The trainer's ``--log-to tensorboard wandb`` picks the extra backends; the store is
always written. Example::

    logger = make_loggers(("tensorboard",), "runs/grpo", "grpo", config)
    logger.log(0, {"success_rate": 0.25, "loss": 0.71})
    logger.close()
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["MetricsLogger", "StoreLogger", "TensorBoardLogger", "WandbLogger", "MultiLogger", "make_loggers",
           "BACKENDS"]

#: backend names accepted by :func:`make_loggers` (and the trainer's ``--log-to``)
BACKENDS = ("store", "tensorboard", "wandb")


class MetricsLogger(ABC):
    """Where one run's per-iteration metrics go."""

    @abstractmethod
    def log(self, iteration: int, metrics: Mapping[str, float]) -> None:
        """Record ``metrics`` (name -> number) of training iteration ``iteration`` (0-based)."""

    def close(self) -> None:
        """Flush and release; safe to call twice."""

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in metrics.items():
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError
            out[str(name)] = float(value)  # ints, floats, numpy and 0-d torch scalars
        except (TypeError, ValueError):
            raise TypeError(f"metric {name!r} must be a number, got {type(value).__name__}") from None
    return out


def _plain(config: Any) -> dict[str, Any]:
    """A JSON-able dict of ``config`` (a dataclass, a mapping or ``None``)."""
    if config is None:
        return {}
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    return json.loads(json.dumps(dict(config), default=str))


class StoreLogger(MetricsLogger):
    """Metrics into the run's trajectory store (``store.log_metrics(run_id, ...)``).

    Non-finite values (``judge_agreement`` with nothing judged is NaN) are left out:
    the store's metric column holds numbers only.
    """

    def __init__(self, store: Any, run_id: str):
        self.store = store
        self.run_id = run_id

    def log(self, iteration: int, metrics: Mapping[str, float]) -> None:
        values = {k: v for k, v in _numbers(metrics).items() if math.isfinite(v)}
        if values:
            self.store.log_metrics(self.run_id, int(iteration), values)


class TensorBoardLogger(MetricsLogger):
    """Scalars (tag = the metric's name, step = the iteration) in a tfevents file.

    The run's config goes in once as a text summary (``config``). tensorboardX writes
    from a background thread; with ``flush_secs=1`` an iteration is on disk (and in
    TensorBoard) about a second after :meth:`log`, and :meth:`close` writes the rest.
    """

    def __init__(self, log_dir: str | os.PathLike[str], config: Any = None):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError("the tensorboard logger needs tensorboardX: pip install 'guiagent[tensorboard]'") from None
        self.log_dir = Path(log_dir)
        self._writer = SummaryWriter(logdir=str(self.log_dir), flush_secs=1)
        if config is not None:
            text = json.dumps(_plain(config), indent=2, sort_keys=True)
            self._writer.add_text("config", "```\n" + text + "\n```", 0)

    def log(self, iteration: int, metrics: Mapping[str, float]) -> None:
        for name, value in _numbers(metrics).items():
            self._writer.add_scalar(name, value, int(iteration))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class WandbLogger(MetricsLogger):
    """A W&B run, offline by default (``WANDB_MODE=offline`` unless the environment sets a mode).

    ``wandb`` is imported here, not at module import. Non-finite values are left out
    (W&B charts cannot draw them; the store keeps them).
    """

    def __init__(self, out_dir: str | os.PathLike[str], run_name: str, config: Any = None, *,
                 project: str | None = None):
        try:
            import wandb
        except ImportError:
            raise ImportError("the wandb logger needs wandb: pip install 'guiagent[wandb]'") from None
        mode = os.environ.get("WANDB_MODE", "offline")
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(project=project or os.environ.get("WANDB_PROJECT", "guiagent"), name=run_name,
                               dir=str(out_dir), config=_plain(config), mode=mode, reinit="create_new")

    def log(self, iteration: int, metrics: Mapping[str, float]) -> None:
        values = {k: v for k, v in _numbers(metrics).items() if math.isfinite(v)}
        self._run.log({**values, "iteration": int(iteration)}, step=int(iteration))

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None


class MultiLogger(MetricsLogger):
    """Every backend gets every call, in order."""

    def __init__(self, loggers: Sequence[MetricsLogger]):
        self.loggers = tuple(loggers)

    def log(self, iteration: int, metrics: Mapping[str, float]) -> None:
        for lg in self.loggers:
            lg.log(iteration, metrics)

    def close(self) -> None:
        for lg in self.loggers:
            lg.close()


def make_loggers(names: Sequence[str], out_dir: str | os.PathLike[str], run_name: str, config: Any = None, *,
                 store: Any = None, run_id: str | None = None) -> MetricsLogger:
    """The loggers ``names`` asks for (``store``, ``tensorboard``, ``wandb``), as one :class:`MetricsLogger`.

    ``out_dir`` is the run's output folder (TensorBoard writes under
    ``out_dir/tensorboard/run_name``, W&B under ``out_dir/wandb``); ``config`` (a
    dataclass or mapping) is recorded with the run. ``store``/``run_id`` are needed for
    ``store``. Unknown names raise ``ValueError`` and a missing package ``ImportError``,
    both before any logger is created, so a run fails at start, not mid-way.
    """
    names = tuple(dict.fromkeys(names))  # keep order, drop repeats
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise ValueError(f"unknown logger(s) {unknown}; known: {', '.join(BACKENDS)}")
    if "store" in names and (store is None or run_id is None):
        raise ValueError("the store logger needs store= and run_id=")
    for name, module, extra in (("tensorboard", "tensorboardX", "tensorboard"), ("wandb", "wandb", "wandb")):
        if name in names and importlib.util.find_spec(module) is None:
            raise ImportError(f"--log-to {name} needs {module}: pip install 'guiagent[{extra}]'")
    out: list[MetricsLogger] = []
    for name in names:
        if name == "store":
            out.append(StoreLogger(store, run_id))  # type: ignore[arg-type]
        elif name == "tensorboard":
            out.append(TensorBoardLogger(Path(out_dir) / "tensorboard" / run_name, config))
        else:
            out.append(WandbLogger(out_dir, run_name, config))
    return out[0] if len(out) == 1 else MultiLogger(out)  # no names: a logger that drops everything
