"""Fault injection at named points, for tests and the fault soak: ``GUIAGENT_FAULT=<point>[:<how>]``.

When the process reaches the point the variable names, it sends itself a signal there, as an outside
``kill`` at that moment would:

* ``kill`` (the default): SIGKILL (a crash, the OOM killer: nothing runs after it);
* ``term``: SIGTERM to this process (``kill PID``, a container stopping);
* ``int``: SIGINT to this process's group, as a terminal's Ctrl+C sends it (to every process of the job).

Points: ``run_opened`` (the training run's record is in the store, before the env pool or Ray starts),
``ray_up`` (a Ray env pool's workers answered), ``checkpoint_write`` (inside a checkpoint save, the weights
written and the optimiser's state not yet), ``checkpoint_swap`` (between moving the old checkpoint away
and the new one in). Unset, :func:`fault` costs one dictionary look-up.
"""

from __future__ import annotations

import os
import signal

__all__ = ["VARIABLE", "fault"]

VARIABLE = "GUIAGENT_FAULT"


def fault(point: str) -> None:
    """Signal this process as ``GUIAGENT_FAULT`` says, when it names ``point``; otherwise nothing."""
    spec = os.environ.get(VARIABLE)
    if not spec:
        return
    name, _, how = spec.partition(":")
    if name != point:
        return
    if how in ("", "kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "term":
        os.kill(os.getpid(), signal.SIGTERM)
    elif how == "int":
        os.killpg(os.getpgrp(), signal.SIGINT)
    else:
        raise ValueError(f"${VARIABLE}={spec!r}: the way to fail is kill, term or int")
