"""Helpers shared by the command modules."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from guiagent.config import (  # the path checks, re-exported for the commands
    ConfigError, check_model_path, check_out_free, hub_offline, looks_local, validate_out_dir,
)
from guiagent.store import StoreError, StoreReader

__all__ = ["emit_json", "log", "not_built", "CLIError", "validate_out_dir", "check_out_free", "check_model_path", "hub_offline",
           "looks_local", "check_run_dirs", "check_suite_tasks", "quiet_library_bars", "printable",
           "one_line", "fail", "Terminated", "TERMINATED_EXIT", "sigterm_interrupts", "check_server_model"]


def emit_json(obj: Any) -> None:
    """Print ``obj`` as the command's last stdout line (the ``--json`` contract)."""
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def not_built(command: str, issue: str) -> int:
    print(f"guiagent {command}: not built yet ({issue}).", file=sys.stderr)
    return 2


def printable(text: str) -> str:
    """``text`` with every control or other unprintable character escaped as ``repr`` writes it
    (``\\x00``, ``\\x1b``, ``\\u202e``): a value typed on the command line or read from a file reaches
    the terminal as visible text, never as a raw NUL or an escape sequence."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def one_line(e: object) -> str:
    """An error (or its message) as one printable line: whitespace runs become one space, control
    characters are escaped (:func:`printable`). A KeyError's message is its argument, unquoted."""
    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    return printable(" ".join(text.split())) or type(e).__name__


def fail(command: str, e: object, code: int = 2) -> int:
    """Print ``guiagent <command>: <e>`` as one line on stderr; returns ``code`` (2: bad input)."""
    print(f"guiagent {command}: {one_line(e)}", file=sys.stderr)
    return code


TERMINATED_EXIT = 143
"""the exit status of a command stopped by SIGTERM (128 + 15, as a shell reports a process killed by it)"""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a container or service stopping): the run stops as on Ctrl+C (a
    KeyboardInterrupt, so it is stored ``interrupted`` and can be resumed); the command exits 143."""


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread (as Ctrl+C raises
    KeyboardInterrupt); later ones are ignored while the run winds down and stores its status (SIGKILL
    still ends it). The handler before the block is restored after it. Off the main thread: no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def check_server_model(model: str, backend: str, *, flag: str = "--model") -> None:
    """An agent's ``model`` and ``backend`` agree: the openai backend (``auto`` picks it for an
    http(s) URL) takes a server URL with a host, and its options from the environment
    (``GUIAGENT_OPENAI_*``) are valid; the transformers and vllm backends load weights here and take
    no URL. Raises :class:`CLIError` (one line); creates nothing."""
    url = model.startswith(("http://", "https://"))
    if backend in ("transformers", "vllm") and url:
        raise CLIError(f"{flag} {model}: --backend {backend} loads the model's weights here; a server URL takes "
                       "--backend openai (or auto)")
    if backend != "openai" and not url:
        return
    from guiagent.policy.openai_backend import check_server_url, options_from_env  # lazy: httpx (0.2 s)

    try:
        check_server_url(model)
    except ValueError as e:
        raise CLIError(f"{flag}: --backend {backend}: {e}") from None
    try:
        options_from_env()
    except ValueError as e:
        raise CLIError(str(e)) from None


def log(msg: str) -> None:
    """Progress lines go to stderr so stdout stays machine-readable with --json."""
    print(msg, file=sys.stderr, flush=True)


def quiet_library_bars() -> None:
    """One progress display: the command's own lines. transformers draws a "Loading weights" and a
    "Writing model shards" bar for every model it loads or saves (a training run: every checkpoint),
    which would interleave with the iteration lines; huggingface_hub draws download bars."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a core dependency
        return
    hf_logging.disable_progress_bar()


# -- checks made before a command creates anything ----------------------------------------------
# The path checks live in guiagent.config (library code such as rl.evaluate runs them too).

CLIError = ConfigError
"""Bad input to a command, found before anything was written: one line, exit code 2."""


def check_run_dirs(paths, *, flag: str = "--data") -> None:
    """Every path is a run directory holding a readable store."""
    for d in paths:
        if not Path(d).is_dir():
            raise CLIError(f"{flag} {d}: no such directory")
        try:
            StoreReader(d).close()
        except StoreError as e:
            raise CLIError(f"{flag} {d}: {e}") from None


def check_device_options(env: str, device, *, flag: str = "--device") -> None:
    """The ``--device`` options of every suite ``env`` runs, checked as its devices would take them
    (a bad name or value: one :class:`CLIError` line); starts no browser or server, creates nothing.
    ``<suite>.<key>`` options go to that suite only, the others to every suite (as the pools give them)."""
    device = device or {}  # none given: still checked ($GUIAGENT_CHROMIUM stands in for chromium_path)
    from emulators.suites import get_suite  # lazy: gymnasium (0.25 s); most commands take no --env
    from emulators.suites.mixed import split_env, suite_options  # lazy: as above (the emulators package)

    names = [n.removeprefix("guiagent/").partition(".")[0] for n in split_env(env)]
    for name in names:
        own = suite_options(name, names, device)
        try:
            get_suite(name).check_device_options(own)
        except (KeyError, ImportError):
            return  # an unknown suite or a missing package: check_suite_tasks says so
        except ValueError as e:
            raise CLIError(str(e) if getattr(e, "from_environment", False) else f"{flag}: {e}") from None


def check_suite_tasks(env: str, tasks=(), *, flag_env: str = "--env", flag_tasks: str = "--tasks"):
    """The suite ``env`` names (a suite name or an env id ``guiagent/<suite>.<task>``), after
    checking that it exists, that its package is installed, and that every task is known.

    Raises :class:`CLIError` (one line) otherwise; creates nothing.
    """
    from emulators.suites import (  # lazy: gymnasium (0.25 s); most commands take no --env
        get_suite,
        parse_env_id,
    )

    name, selected = env, tuple(tasks)
    if env.startswith("guiagent/"):
        try:
            name, task = parse_env_id(env)
        except ValueError as e:
            raise CLIError(f"{flag_env} {env}: {e}") from None
        selected = (task,)
    try:
        suite = get_suite(name)
        known = set(suite.task_ids())  # androidworld imports its package only here
    except (KeyError, ImportError) as e:  # an unknown suite, or one whose package is missing here
        raise CLIError(f"{flag_env} {env}: {e.args[0] if e.args else e}") from None
    unknown = [t for t in selected if t not in known]
    if unknown:
        raise CLIError(f"{flag_tasks}: unknown task(s) {unknown} in {name}; see `guiagent tasks list --env {name}`")
    return suite
