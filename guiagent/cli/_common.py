"""Helpers shared by the command modules."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from guiagent.config import ConfigError


def emit_json(obj: Any) -> None:
    """Print ``obj`` as the command's last stdout line (the ``--json`` contract)."""
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def not_built(command: str, issue: str) -> int:
    print(f"guiagent {command}: not built yet ({issue}).", file=sys.stderr)
    return 2


def log(msg: str) -> None:
    """Progress lines go to stderr so stdout stays machine-readable with --json."""
    print(msg, file=sys.stderr, flush=True)


# -- checks made before a command creates anything ----------------------------------------------



class CLIError(ConfigError):
    """Bad input to a command, found before anything was written: one line, exit code 2."""


def validate_out_dir(path: str | Path, *, flag: str = "--out") -> Path:
    """Check that ``path`` is, or can be created as, a writable directory; create nothing.

    Raises :class:`CLIError` when it is a file, or when it (or the nearest existing folder
    above it, where it would be created) is not a writable directory.
    """
    p = Path(path).expanduser()
    if str(path).strip() == "":
        raise CLIError(f"{flag} needs a directory path")
    if "\x00" in str(path):
        raise CLIError(f"{flag} {str(path)!r}: a path cannot contain NUL")
    if p.exists() or p.is_symlink():
        if not p.is_dir():
            raise CLIError(f"{flag} {path}: exists and is not a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise CLIError(f"{flag} {path}: the directory is not writable")
        return p
    parent = p.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise CLIError(f"{flag} {path}: cannot be created, {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CLIError(f"{flag} {path}: cannot be created, {parent} is not writable")
    return p


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` set to a true value (as huggingface_hub reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def looks_local(model: str) -> bool:
    """A path rather than a hub id: absolute, ``./``/``../``/``~``, a trailing slash, more than one
    ``/`` (hub ids are ``name`` or ``org/name``), or an existing file system entry."""
    return (model.startswith(("/", "./", "../", "~", ".\\")) or model in (".", "..") or model.endswith("/")
            or model.count("/") > 1 or os.sep != "/" and os.sep in model or Path(model).exists())


def check_model_path(model: str, *, flag: str = "--model") -> None:
    """Fail at once, in one line, on a model that cannot load: a local-looking path that does
    not exist or is not a model folder, a malformed hub id, or (``HF_HUB_OFFLINE``) a hub id
    missing from the local cache. URLs of OpenAI-compatible servers are left to the backend."""
    if not model:
        raise CLIError(f"{flag} is empty")
    if model.startswith(("http://", "https://")):
        return
    if looks_local(model):
        p = Path(model).expanduser()
        if not p.exists():
            raise CLIError(f"{flag} {model}: no such model folder")
        if not p.is_dir():
            raise CLIError(f"{flag} {model}: not a folder (a model folder holds config.json and weights)")
        if not (p / "config.json").is_file():
            raise CLIError(f"{flag} {model}: not a model folder (no config.json)")
        return
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:  # pragma: no cover - transformers depends on huggingface_hub
        return
    try:
        validate_repo_id(model)
    except HFValidationError:
        raise CLIError(f"{flag} {model!r}: neither an existing folder nor a valid hub id (org/name)") from None
    if hub_offline():
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(model, "config.json"), str):
            raise CLIError(f"{flag} {model}: not in the local Hugging Face cache, and HF_HUB_OFFLINE is set")


def check_run_dirs(paths, *, flag: str = "--data") -> None:
    """Every path is a run directory holding a readable store."""
    from guiagent.store import StoreError, StoreReader

    for d in paths:
        if not Path(d).is_dir():
            raise CLIError(f"{flag} {d}: no such directory")
        try:
            StoreReader(d).close()
        except StoreError as e:
            raise CLIError(f"{flag} {d}: {e}") from None


def check_suite_tasks(env: str, tasks=(), *, flag_env: str = "--env", flag_tasks: str = "--tasks"):
    """The suite ``env`` names (a suite name or an env id ``guiagent/<suite>.<task>``), after
    checking that it exists, that its package is installed, and that every task is known.

    Raises :class:`CLIError` (one line) otherwise; creates nothing.
    """
    from emulators.suites import get_suite, parse_env_id

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
