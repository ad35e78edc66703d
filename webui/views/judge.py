"""Judge pages: ``guiagent judge eval`` reports (figures, disagreements) and reward weights for templates.

``/judge`` lists the reports found under the runs folder (``judge_eval*.json`` in
it, one or two levels down, and in every run directory); ``/judge/report/<n>``
shows one: agreement, precision, recall and Cohen's κ of the judge against the
tasks' rule outcomes, the missing verdicts by reason, and each disagreement with
both sides — the judge's reason, the rule outcome — and a link to its replay.
Only files this scan found are ever opened (a report is addressed by its index
in the scan, never by a path from the request), and each is read as JSON of at
most a few megabytes and checked against the report's schema (:class:`Report`, strictly
typed with pydantic): a report with a field of the wrong type is listed with the reason
and its page is a 404 that says it; it never takes the list or the other reports down.

The template global ``reward_weights_of(run_key)`` gives each stored reward part's
weight from the run's stored config (:func:`guiagent.rewards.reward_weights`), so
replays and charts show the parts with the weights the trainer used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Required

from flask import Blueprint, render_template
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from guiagent.rewards import reward_weights
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


class JudgeInfo(TypedDict, total=False):
    model: str
    served_model: str
    votes: int
    aggregation: str
    temperature: float
    evidence: str
    screens: int
    token_budget: int
    max_new_tokens: int


class Figures(TypedDict, total=False):
    """:class:`judge.calibration.Calibration` as JSON (``None``: undefined)."""

    n: int
    tp: int
    fp: int
    tn: int
    fn: int
    agreement: float | None
    precision: float | None
    recall: float | None
    kappa: float | None


class Disagreement(TypedDict, total=False):
    run_dir: str
    run_id: str
    episode_id: str
    task_id: str
    seed: int | None
    goal: str
    rule_success: float | None
    judge_success: bool | None
    judge_score: float | None
    judge_reason: str | None
    shown_steps: list[int]
    cited_steps: list[int]


class MissingVerdict(TypedDict, total=False):
    run_dir: str
    run_id: str
    episode_id: str
    task_id: str
    seed: int | None
    goal: str
    missing: str
    error: str | None


class Report(TypedDict, total=False):
    """What ``guiagent judge eval`` writes (guiagent/cli/judge.py); unknown keys are ignored."""

    version: int
    created_at: float
    runs: list[str]
    judge: JudgeInfo
    episodes: int
    judged: int
    missing: int
    missing_reasons: dict[str, int]
    calls: int
    seconds: float
    calibration: Required[Figures]
    disagreements: list[Disagreement]
    missing_episodes: list[MissingVerdict]


def _report_adapter() -> Any:
    from pydantic import TypeAdapter

    global _ADAPTER
    if _ADAPTER is None:
        _ADAPTER = TypeAdapter(Report)
    return _ADAPTER


_ADAPTER: Any = None


def _read(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The report in ``path``, typed (:class:`Report`), or None and why it is not shown."""
    from pydantic import ValidationError

    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            return None, f"larger than {MAX_REPORT_BYTES // (1024 * 1024)} MB; not opened"
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        return None, f"unreadable: {type(e).__name__}"
    if not isinstance(data, dict) or "calibration" not in data:
        return None, "not a judge eval report"
    try:
        return _report_adapter().validate_python(data, strict=True), None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "report"
        return None, f"not a judge eval report: {where}: {first.get('msg', 'invalid')}"[:200]


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
        eid = d.get("episode_id")
        link = False
        if eid:
            try:
                registry().find_episode(eid)
                link = True
            except NotFound:  # its run is not under this UI's runs folder
                link = False
        rows.append({**d, "link": link})
    missing = data.get("missing_episodes", [])[:1000]
    return render_template("judge.html", rows=None, report=data, n=n, label=_label(root, paths[n]),
                           cal=data.get("calibration", {}), disagreements=rows, missing=missing,
                           root=str(root))
