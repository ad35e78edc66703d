"""``guiagent <command> ...`` dispatcher.

Each command lives in ``guiagent/cli/<name>.py`` and exposes ``main(argv) -> int``.
Commands are imported only when run, so ``guiagent --help`` stays fast and a
command's heavy dependencies (torch, ray, playwright) load only when needed.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sqlite3
import sys

from guiagent import __version__

#: command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "tasks": ("guiagent.cli.tasks", "list the tasks of a suite"),
    "eval": ("guiagent.cli.eval", "run episodes with an oracle, random or model agent and store them"),
    "model": ("guiagent.cli.model", "build models (init a tiny local Qwen2.5-VL-architecture model)"),
    "sft": ("guiagent.cli.sft", "supervised fine-tuning on stored successful trajectories"),
    "train": ("guiagent.cli.train", "RL (GRPO family): online, semi-online on recorded trajectories, or both"),
    "export": ("guiagent.cli.export", "export a run's steps as a Hugging Face dataset or Parquet"),
    "ui": ("guiagent.cli.ui", "web UI: trajectory replay and training dashboards"),
    "farm": ("guiagent.cli.farm", "Android emulator farm: up, down, status, heal"),
    "data": ("guiagent.cli.data", "import recorded trajectories (AndroidControl, UI-S1, GUI-Odyssey)"),
    "judge": ("guiagent.cli.judge", "score a VLM judge on stored episodes against their rule outcomes"),
    "store": ("guiagent.cli.store", "check a run's store: SQLite integrity, blob hashes, open episodes (--repair)"),
}

#: the commands that store a run: SIGTERM stops them as Ctrl+C does (the run stored `interrupted`, exit 143)
STORES_RUNS = frozenset({"eval", "train"})


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: guiagent <command> [options]   (guiagent <command> --help for a command's options)",
             "", "Train and evaluate GUI agents with reinforcement learning.", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        import difflib  # lazy: only for a mistyped command

        near = {"webui": "ui", "web": "ui", "serve": "ui", "import": "data", "list": "tasks", "init": "model"}.get(
            name.lower()) or next(iter(difflib.get_close_matches(name, COMMANDS, n=1)), None)
        hint = f" (did you mean {near!r}?)" if near else ""
        print(f"guiagent: unknown command {name!r}{hint}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    # lazy: `guiagent --help` and `--version` load none of these (the store alone takes 0.1 s)
    from guiagent.cli._common import (  # lazy: as above (it loads guiagent.config and the store)
        TERMINATED_EXIT,
        Terminated,
        one_line,
        sigterm_interrupts,
    )
    from guiagent.config import ConfigError  # lazy: as above
    from guiagent.policy.base import BackendError  # lazy: as above
    from guiagent.policy.vllm_backend import VLLMUnavailable  # lazy: as above
    from guiagent.store import StoreError  # lazy: as above
    from guiagent.writing import NoSpace, describe  # lazy: as above
    if name in STORES_RUNS:  # what the run starts (browsers, Ray, model servers) ends with it, even on SIGKILL
        from guiagent.reaper import watch  # lazy: as above

        watch()
    try:
        # a run stopped by SIGTERM (kill, a container stopping) is stored `interrupted`, as on Ctrl+C
        with sigterm_interrupts() if name in STORES_RUNS else contextlib.nullcontext():
            return int(module.main(rest) or 0)
    except NoSpace as e:
        # a full disk: no fault of the input (exit 1, not 2); the line says what was being written, and where
        print(f"guiagent {name}: {one_line(e)}", file=sys.stderr)
        return 1
    except (ConfigError, StoreError, VLLMUnavailable) as e:
        # bad input (flags, config files, paths, stores): one line, no traceback, exit 2
        print(f"guiagent {name}: {one_line(e)}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as e:
        # a damaged store ("database disk image is malformed", "file is not a database") or one
        # SQLite cannot open or lock: bad input, one line; a misuse of the API stays a traceback
        if type(e) not in (sqlite3.DatabaseError, sqlite3.OperationalError) or os.environ.get("GUIAGENT_TRACEBACK"):
            raise
        if describe(e):  # "database or disk is full": the disk, not the store, and no fault of the input
            print(f"guiagent {name}: {one_line(describe(e))}", file=sys.stderr)
            return 1
        print(f"guiagent {name}: trajectory store: {one_line(e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`guiagent tasks list | head`): nothing more to say, as other command-line tools do
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the interpreter's last flush is quiet
        return 141
    except (OSError, OverflowError) as e:
        # what no check foresaw: a path the file system refuses ([Errno ...]: a folder that refuses
        # files), a number past what a library takes. As the README promises for bad input: one line,
        # exit 2; GUIAGENT_TRACEBACK=1 shows where it came from. A full disk is exit 1 (guiagent.writing)
        if os.environ.get("GUIAGENT_TRACEBACK"):
            raise
        if describe(e):  # a full disk no write of the run named: exit 1 all the same, with the file the system names
            print(f"guiagent {name}: {one_line(describe(e))}", file=sys.stderr)
            return 1
        print(f"guiagent {name}: {one_line(e)}", file=sys.stderr)
        return 2
    except BackendError as e:
        # an outside server (a model or judge server) failed, after its retries: a runtime failure, not
        # bad input; the run it ended is stored `failed`. One line naming the server (its own words escaped)
        if os.environ.get("GUIAGENT_TRACEBACK"):
            raise
        print(f"guiagent {name}: {one_line(e)}", file=sys.stderr)
        return 1
    except Terminated:
        print(f"guiagent {name}: terminated (SIGTERM)", file=sys.stderr)
        return TERMINATED_EXIT
    except KeyboardInterrupt:
        print(f"guiagent {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if not describe(e) or os.environ.get("GUIAGENT_TRACEBACK"):  # a full disk a library words its own way
            raise
        print(f"guiagent {name}: {one_line(describe(e))}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
