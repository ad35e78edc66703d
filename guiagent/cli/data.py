"""``guiagent data import --format F SRC --out RUN_DIR``: recorded trajectories into the store."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass

import tyro

from guiagent.cli._common import emit_json, log, one_line, sigterm_interrupts
from guiagent.config import parse_config
from guiagent.runlock import run_lock
from guiagent.store.errors import StoreError

USAGE = (
    "usage: guiagent data import --format {androidcontrol,uis1,guiodyssey,parquet,hf} SRC --out RUN_DIR "
    "[--images DIR] [--placeholders WxH|auto] [--swipe-convention auto|finger|scroll] [--run-name NAME] [--json]"
)


@dataclass
class DataImportConfig:
    """Import recorded episodes (a published dataset or our own export) as a run of the trajectory store."""

    src: tyro.conf.Positional[str]
    """the file or folder to import"""
    format: str = ""
    """androidcontrol, uis1, guiodyssey, parquet or hf (required)"""
    out: str = ""
    """a new run directory (refused when it exists and is not empty)"""
    images: str | None = None
    """folder of the screenshots when the data's paths do not resolve (uis1, guiodyssey)"""
    placeholders: str | None = None
    """WxH or auto: a blank screenshot of that size stands in for each missing one (uis1, guiodyssey; auto:
    the size the episode's coordinates imply, or GUI-Odyssey's device_info); for matching and offline
    metrics on files published without their screenshots"""
    swipe_convention: str | None = None
    """uis1: how action_content swipe coordinates run: finger (the finger's path), scroll (the way the view
    scrolls), auto (finger for steps with check_options, scroll without: UI-S1's two files)"""
    run_name: str | None = None
    """the run's name (default import:FORMAT)"""
    json: bool = False
    """print a JSON summary as the last stdout line"""


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] != "import":
        print(f"guiagent data: unknown subcommand {argv[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    cfg = parse_config(DataImportConfig, argv[1:], prog="guiagent data import")
    # lazy: the importers load protobuf, crc32c and PIL (~50 ms); `guiagent data --help` needs none
    from guiagent.datasets import FORMATS, DatasetError, import_dataset

    if not cfg.format:
        print(f"guiagent data import: --format is required ({', '.join(FORMATS)})", file=sys.stderr)
        return 2
    if cfg.format not in FORMATS:
        print(
            f"guiagent data import: unknown format {cfg.format!r}; known: {', '.join(FORMATS)}",
            file=sys.stderr,
        )
        return 2
    if not cfg.out:
        print("guiagent data import: --out RUN_DIR is required", file=sys.stderr)
        return 2
    try:
        # SIGTERM stops it as Ctrl+C does (exit 143): the hidden staging folder is removed on the way out
        with sigterm_interrupts(), run_lock(cfg.out, "guiagent data " + shlex.join(argv)):  # one writer per run folder
            res = import_dataset(cfg.format, cfg.src, cfg.out, run_name=cfg.run_name, images_dir=cfg.images,
                                 placeholders=cfg.placeholders, swipe_convention=cfg.swipe_convention)
    except DatasetError as e:  # bad input: one line, nothing written
        print(f"guiagent data import: {one_line(e)}", file=sys.stderr)
        return 2
    except StoreError as e:
        print(f"guiagent data import: {one_line(e)}", file=sys.stderr)
        return 1
    for line in res.notes.warnings:
        print(f"guiagent data import: warning: {one_line(line)}", file=sys.stderr)
    if res.notes.placeholders:
        log(f"{res.notes.placeholders} steps have blank placeholder screenshots")
    log(
        f"imported {res.episodes} episodes ({res.steps} steps) from {cfg.src} "
        f"into {res.out_dir} (run {res.run_id})"
    )
    if cfg.json:
        emit_json(res.to_dict())
    return 0
