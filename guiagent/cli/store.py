"""``guiagent store check RUN_DIR [--repair] [--json]``: a run directory's integrity.

Reports SQLite's own check, screenshot blobs that are missing, truncated or replaced (their bytes
hashed against their names), episodes and runs left open by dead writers, and, as notes, orphan
blobs and temp files (:mod:`guiagent.store.check`). ``--repair`` marks episodes with bad blobs
aborted/damaged (nothing deleted), closes what dead writers left open, removes old temp files; it
holds the run folder's lock, so it never races a writer. Exit status: 0 clean, 1 problems found
(with ``--repair`` too: a later check is clean), 2 bad input (no run directory, the folder in use).
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass

import tyro

from guiagent.cli._common import emit_json, one_line
from guiagent.config import parse_config
from guiagent.runlock import run_lock
from guiagent.store.check import check_store

USAGE = "usage: guiagent store check RUN_DIR [--repair] [--json]"


@dataclass
class StoreCheckConfig:
    """Check a run directory's trajectory store: SQLite's integrity, every screenshot blob against its hash,
    episodes and runs left open by dead writers; --repair fixes what it can without deleting data."""

    run_dir: tyro.conf.Positional[str]
    """the run directory (what guiagent eval/train --out or data import wrote)"""
    repair: bool = False
    """mark episodes with missing or altered blobs aborted/damaged, close what dead writers left open,
    remove old temp files (nothing else is deleted)"""
    json: bool = False
    """print the report as JSON, the last stdout line"""


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] != "check":
        print(f"guiagent store: unknown subcommand {argv[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    cfg = parse_config(StoreCheckConfig, argv[1:], prog="guiagent store check")
    if cfg.repair:  # a writer of this folder (train, eval, import) refuses to start meanwhile, and the reverse
        with run_lock(cfg.run_dir, "guiagent store " + shlex.join(argv)):
            report = check_store(cfg.run_dir, repair=True)
    else:
        report = check_store(cfg.run_dir)
    if cfg.json:
        emit_json(report.to_dict())
        return 0 if report.clean else 1
    out = sys.stdout
    print(f"{cfg.run_dir}: {report.episodes} episodes, {report.steps} steps, {report.blobs} blobs checked", file=out)
    print(f"  SQLite integrity: {'; '.join(report.integrity[:3]) if report.integrity else 'ok'}", file=out)
    for f in report.findings:
        label = f.kind.replace("_", " ")
        mark = "problem" if f.problem else "note"
        done = f" -> {f.repaired}" if f.repaired else ""
        print(f"  {mark}: {label} {one_line(f.name)}: {one_line(f.detail)}{done}", file=out)
    problems = len(report.problems)
    if problems:
        hint = "" if cfg.repair else " (guiagent store check --repair marks, closes and cleans what it can)"
        print(f"{problems} problem{'s' if problems != 1 else ''} found{hint}", file=out)
    else:
        print("clean", file=out)
    return 0 if report.clean else 1
