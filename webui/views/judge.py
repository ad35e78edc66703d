"""Judge pages: ``guiagent judge eval`` reports (figures, disagreements) and reward weights for templates.

``/judge`` lists the reports found under the runs folder (``judge_eval*.json`` in
it, one or two levels down, and in every run directory); ``/judge/report/<n>``
shows one: agreement, precision, recall and Cohen's κ of the judge against the
tasks' rule outcomes, the missing verdicts by reason, and each disagreement with
both sides — the judge's reason, the rule outcome — and a link to its replay.
Only files this scan found are ever opened (a report is addressed by its index
in the scan, never by a path from the request), and each is read as JSON of at
most a few megabytes.

The template global ``reward_weights_of(run_key)`` gives each stored reward part's
weight from the run's stored config (:func:`judge.compose.reward_weights`), so
replays and charts show the parts with the weights the trainer used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flask import Blueprint, render_template

from judge.compose import reward_weights
from webui.registry import NotFound, discover_run_dirs
from webui.views import registry

bp = Blueprint("judge", __name__)

#: reports larger than this are listed but not opened (a report is figures plus disagreements)
MAX_REPORT_BYTES = 8 * 1024 * 1024
_PATTERN = "judge_eval*.json"


def find_reports(root: Path) -> list[Path]:
    """Report files under ``root``: in it, one or two folders down, and in every run directory."""
    found: set[Path] = set()
    for pattern in (_PATTERN, f"*/{_PATTERN}", f"*/*/{_PATTERN}"):
        found |= set(root.glob(pattern))
    for d in discover_run_dirs(root):
        found |= set(d.glob(_PATTERN))
    real_root = root.resolve()
    # regular files inside --runs only: a planted link to a file elsewhere is not read
    return sorted(p for p in found if p.is_file() and not p.is_symlink() and p.resolve().is_relative_to(real_root)
                  and not any(part.startswith(".") for part in p.parts[-3:]))


def _read(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            return None, f"larger than {MAX_REPORT_BYTES // (1024 * 1024)} MB; not opened"
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"unreadable: {type(e).__name__}"
    if not isinstance(data, dict) or not isinstance(data.get("calibration"), dict):
        return None, "not a judge eval report"
    return data, None


def _label(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


@bp.app_template_global("reward_weights_of")
def reward_weights_of(run_key: str | None) -> dict[str, float]:
    """Each reward part's weight in the run ``run_key`` (the defaults when the run is unknown)."""
    config = None
    if run_key:
        try:
            config = registry().run(run_key).info.config
        except NotFound:
            config = None
    return reward_weights(config)


@bp.get("/judge")
def reports():
    root = registry().root
    rows = []
    for n, path in enumerate(find_reports(root)):
        data, problem = _read(path)
        rows.append({"n": n, "label": _label(root, path), "problem": problem,
                     "report": data or {}, "cal": (data or {}).get("calibration", {})})
    return render_template("judge.html", rows=rows, report=None, root=str(root))


@bp.get("/judge/report/<int:n>")
def report(n: int):
    root = registry().root
    paths = find_reports(root)
    if not 0 <= n < len(paths):
        raise NotFound(f"no judge report #{n}")
    data, problem = _read(paths[n])
    if data is None:
        raise NotFound(f"judge report {_label(root, paths[n])}: {problem}")
    rows = []
    for d in data.get("disagreements", [])[:1000]:
        if not isinstance(d, dict):
            continue
        eid = d.get("episode_id")
        try:
            registry().find_episode(str(eid))
            link = True
        except NotFound:  # its run is not under this UI's runs folder
            link = False
        rows.append({**d, "link": link})
    missing = [m for m in data.get("missing_episodes", [])[:1000] if isinstance(m, dict)]
    return render_template("judge.html", rows=None, report=data, n=n, label=_label(root, paths[n]),
                           cal=data.get("calibration", {}), disagreements=rows, missing=missing,
                           root=str(root))
