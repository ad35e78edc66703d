"""Store records -> JSON-able dicts, query-string -> EpisodeFilter, and chart grouping.

Pure functions: the JSON API and the templates use the same shapes, so a notebook
reading ``/api/...`` sees exactly what the pages show.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from guiagent.store import SORT_KEYS, SUCCESS_THRESHOLD, EpisodeFilter, StoreError
from guiagent.store.records import (
    EpisodeDetail, EpisodeSummary, JudgementRecord, MetricPoint, RunInfo, StepRecord, TaskStats,
)
from guiagent.types import action_from_dict, action_to_dict

from webui.overlay import mark_shapes, overlay_shapes

__all__ = [
    "BadQuery", "ListQuery", "parse_list_query", "run_json", "summary_json", "step_json",
    "judgement_json", "credit_by_step", "detail_json", "metrics_json", "chart_groups", "task_stats_json", "num", "int_arg",
    "integer", "broken_json", "branch_base", "branches_json", "malformed",
]

MAX_PAGE = 500


class BadQuery(ValueError):
    """A query-string value the API cannot use (HTTP 400, the message says which and why)."""


def num(x: float | None) -> float | None:
    """JSON has no NaN/inf: map them (and anything not a number) to null."""
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):  # SQLite keeps whatever another tool wrote into a REAL column
        return None
    return x if math.isfinite(x) else None


def run_json(key: str, label: str, info: RunInfo) -> dict[str, Any]:
    return {
        "key": key, "run_id": info.run_id, "dir": label, "name": info.name, "env": info.env,
        "algo": info.algo, "model": info.model, "status": info.status, "created_at": num(info.created_at),
        "updated_at": num(info.updated_at), "num_episodes": info.num_episodes,
        "num_completed": info.num_completed, "num_aborted": info.num_aborted,
        "num_success": info.num_success, "mean_reward": num(info.mean_reward),
        "success_rate": (info.num_success / info.num_episodes) if info.num_episodes else None,
    }


def broken_json(label: str, reason: str) -> dict[str, Any]:
    """A run directory whose store cannot be read (listed apart from the runs)."""
    return {"dir": label, "status": "broken", "error": reason}


def summary_json(s: EpisodeSummary) -> dict[str, Any]:
    """One row of the episode list. A field another tool stored with the wrong type (``success`` as
    text, ``metadata`` as a list) reads as null (``{}`` for ``params`` and ``metadata``) and is named
    in ``damaged``, present only then: the episode stays listed, marked, and its run reads as usual."""
    c = _Checked()
    success = c.real("success", s.success)
    out = {
        "episode_id": c.text("episode_id", s.episode_id), "run_id": c.text("run_id", s.run_id),
        "group_id": c.text("group_id", s.group_id, null=True), "suite": c.text("suite", s.suite),
        "task_id": c.text("task_id", s.task_id), "seed": c.integral("seed", s.seed),
        "goal": c.text("goal", s.goal), "max_steps": c.integral("max_steps", s.max_steps),
        "params": c.mapping("params", s.params), "agent": c.text("agent", s.agent),
        "policy_version_min": c.integral("policy_version_min", s.policy_version_min, null=True),
        "policy_version_max": c.integral("policy_version_max", s.policy_version_max, null=True),
        "status": c.text("status", s.status), "abort_reason": c.text("abort_reason", s.abort_reason, null=True),
        "success": success, "succeeded": None if success is None else success >= SUCCESS_THRESHOLD,
        "total_reward": c.real("total_reward", s.total_reward), "num_steps": c.integral("num_steps", s.num_steps),
        "num_parse_errors": c.integral("num_parse_errors", s.num_parse_errors),
        "started_at": c.real("started_at", s.started_at), "ended_at": c.real("ended_at", s.ended_at, null=True),
        "metadata": c.mapping("metadata", s.metadata),
    }
    if c.damaged:
        out["damaged"] = c.damaged
    return out


class _Checked:
    """Stored values checked against their column's type; the names of those that fail, in ``damaged``.

    SQLite keeps whatever another tool wrote (text in a REAL column, a list where a JSON object
    belongs, a BLOB in a TEXT column): such a value reads as null instead of failing the page."""

    def __init__(self) -> None:
        self.damaged: list[str] = []

    def _bad(self, name: str, default: Any = None) -> Any:
        self.damaged.append(name)
        return default

    def real(self, name: str, x: Any, *, null: bool = False) -> float | None:
        if x is None and null:
            return None
        return num(x) if _is_real(x) else self._bad(name)

    def integral(self, name: str, x: Any, *, null: bool = False) -> int | None:
        if x is None and null:
            return None
        return x if _is_int(x) else self._bad(name)

    def text(self, name: str, x: Any, *, null: bool = False) -> str | None:
        if x is None and null:
            return None
        return x if isinstance(x, str) else self._bad(name)

    def mapping(self, name: str, x: Any) -> dict[str, Any]:
        return dict(x) if isinstance(x, Mapping) else self._bad(name, {})


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def malformed(episode_id: Any, where: str) -> StoreError:
    """The error for an episode's row that another tool mangled: its run's 503, for that episode only
    (the same error the store's reader raises for a row it cannot decode)."""
    return StoreError(f"episode {str(episode_id)[:200]!r} has a malformed stored row ({where})")


def step_json(r: StepRecord, screenshot_url: str | None) -> dict[str, Any]:
    """One step, with its screenshot URL and the overlay shapes in the screenshot's pixel frame.

    A step row of the wrong shape (a non-positive size, ``reward_parts`` that is not a JSON object,
    a BLOB where text belongs) raises :func:`malformed`."""
    _check_step(r)
    return {
        "index": r.index, "screenshot_ref": r.screenshot_ref, "screenshot_url": screenshot_url,
        "width": r.width, "height": r.height, "url": r.url, "tree": r.tree,
        "last_action_error": r.last_action_error, "thought": r.thought, "response": r.response,
        "action": None if r.action is None else action_to_dict(r.action),
        "parse_error": None if r.parse_error is None else r.parse_error.to_dict(),
        "action_error": r.action_error, "reward": num(r.reward),
        "reward_parts": {k: num(v) for k, v in r.reward_parts.items()},
        "milestones": list(r.milestones), "terminated": r.terminated, "truncated": r.truncated,
        "policy_version": r.policy_version, "latency_ms": num(r.latency_ms),
        "overlay": overlay_shapes(r.action if r.parse_error is None else r.parse_error, r.width, r.height,
                                  r.marks, tap_point(r.metadata)),
        "marks": mark_shapes(r.marks, r.width, r.height),
        "metadata": dict(r.metadata),
        "semi": semi_online_json(r),
        "rejected_replies": rejected_replies(r.metadata),
    }


def tap_point(meta: Any, key: str = "tap_point") -> tuple[float, float] | None:
    """The point a step's element action was carried out at (``metadata[key]``, normalised; ``recorded_tap_point``:
    the recorded step's, beside a replayed one), or ``None`` where the store holds none or something else there
    (a store written by another tool)."""
    p = meta.get(key) if isinstance(meta, Mapping) else None
    if not (isinstance(p, list) and len(p) == 2 and all(_is_real(v) for v in p)):
        return None
    try:
        x, y = float(p[0]), float(p[1])
    except OverflowError:  # an integer of 400 digits, as JSON allows
        return None
    return (x, y) if 0.0 <= x <= 1.0 and 0.0 <= y <= 1.0 else None


def _check_step(r: StepRecord) -> None:
    where = f"step {r.index}" if _is_int(r.index) else "a step"
    if not _is_int(r.index) or r.index < 0:
        raise malformed(r.episode_id, f"{where}: index {repr(r.index)[:40]}")
    for name in ("width", "height"):
        v = getattr(r, name)
        if not _is_int(v) or v <= 0:
            raise malformed(r.episode_id, f"{where}: {name} {repr(v)[:40]} is not a positive integer")
    for name in ("reward_parts", "metadata"):
        if not isinstance(getattr(r, name), Mapping):
            raise malformed(r.episode_id, f"{where}: {name} is not a JSON object")
    for name in ("screenshot_ref", "tree", "url", "last_action_error", "action_error", "response", "thought"):
        v = getattr(r, name)
        if not (isinstance(v, str) or (v is None and name not in ("response", "thought"))):
            raise malformed(r.episode_id, f"{where}: {name} is not text")


#: most branches read per branch point, and most branch points, on one episode's page
MAX_BRANCHES, MAX_BRANCH_POINTS = 64, 100


def branch_base(s: EpisodeSummary) -> tuple[str, str | None] | None:
    """Where an episode sits in a branched rollout (``--branch-at``): ``(base group id, trunk
    episode id)``, or None for an episode of no tree. A trunk's group id is ``<base>:trunk``; a
    branch's is ``<base>@<step>`` and its metadata names its trunk (None for a captured start)."""
    gid = s.group_id or ""
    if gid.endswith(":trunk"):
        return gid.removesuffix(":trunk"), s.episode_id
    meta = s.metadata if isinstance(s.metadata, Mapping) else {}
    if "branch_step" in meta and "@" in gid:
        trunk = meta.get("branch_of")
        return gid.rpartition("@")[0], trunk if isinstance(trunk, str) and trunk else None
    return None


def branches_json(reader: Any, s: EpisodeSummary, url_of: Any) -> dict[str, Any] | None:
    """An episode's branch tree for its page: the trunk (if any) and, per branch point, the G
    branches side by side (each with its first screen, first action and outcome); None when the
    episode is in no tree."""
    where = branch_base(s)
    if where is None:
        return None
    base, trunk_id = where
    trunk = None
    if trunk_id is not None:
        found = reader.list_episodes(EpisodeFilter(run_id=s.run_id, group_id=f"{base}:trunk"), limit=2).items
        trunk = next((summary_json(e) for e in found if e.episode_id == trunk_id), None)
    steps = trunk["num_steps"] if trunk else 1
    points = []
    for k in range(min(max(steps, 1), MAX_BRANCH_POINTS)):
        eps = reader.list_episodes(EpisodeFilter(run_id=s.run_id, group_id=f"{base}@{k}"), limit=MAX_BRANCHES).items
        if not eps:
            continue
        rows = []
        for e in sorted(eps, key=_member):
            row = summary_json(e)
            try:
                first = reader.get_step(e.episode_id, 0)
            except StoreError:
                first = None
            row["first_action"] = (None if first is None or first.action is None else action_to_dict(first.action))
            row["first_parse_error"] = first is not None and first.parse_error is not None
            row["first_screenshot_url"] = url_of(first.screenshot_ref) if first and first.screenshot_ref else None
            rows.append(row)
        rewards = [r["total_reward"] for r in rows if isinstance(r["total_reward"], (int, float))]
        points.append({"step": k, "group_id": f"{base}@{k}", "branches": rows,
                       "screenshot_url": rows[0]["first_screenshot_url"],
                       "mean_reward": num(sum(rewards) / len(rewards)) if rewards else None})
    return {"base": base, "trunk": trunk, "points": points, "current": s.episode_id}


def _member(e: EpisodeSummary) -> float:
    """A branch's place among its siblings (``metadata["member"]``; 0 when absent or not a number)."""
    m = e.metadata.get("member", 0) if isinstance(e.metadata, Mapping) else 0
    return float(m) if _is_real(m) and math.isfinite(m) else 0.0


def rejected_replies(meta: Any) -> list[str]:
    """The unparseable replies drawn and set aside before the step's reply (``--resample-unparseable``):
    strings only, whatever else a store written by another tool holds there."""
    got = meta.get("rejected_replies") if isinstance(meta, Mapping) else None
    return [x for x in got if isinstance(x, str)] if isinstance(got, (list, tuple)) else []


def semi_online_json(r: StepRecord) -> dict[str, Any] | None:
    """A semi-online step's recorded action beside the policy's: match, patch, the recorded overlay."""
    meta = r.metadata
    if "recorded_action" not in meta:
        return None
    try:
        recorded = action_from_dict(meta["recorded_action"])
    except (ValueError, TypeError, KeyError):  # a store written by another tool: show the step without it
        return None
    return {"recorded_action": action_to_dict(recorded), "matched": bool(meta.get("matched")),
            "kind_match": bool(meta.get("kind_match")), "patched": bool(meta.get("patched")),
            "reason": str(meta.get("match_reason", "")), "patch_thought": str(meta.get("patch_thought", "")),
            "recorded_index": meta.get("recorded_index"),
            "overlay": overlay_shapes(recorded, r.width, r.height, r.marks,
                                      tap_point(meta, "recorded_tap_point"))}


def credit_by_step(rows: Any) -> dict[int, list[dict[str, Any]]]:
    """The credit trainers gave each step (``StoreReader.step_credit``), latest iteration first."""
    out: dict[int, list[dict[str, Any]]] = {}
    for c in rows:
        if not (_is_int(c.index) and _is_int(c.iteration) and isinstance(c.detail, Mapping)):
            raise malformed(c.episode_id, f"the credit of step {repr(c.index)[:40]}, iteration "
                                          f"{repr(c.iteration)[:40]}")
        out.setdefault(c.index, []).append({
            "iteration": c.iteration, "algo": c.algo, "advantage": num(c.advantage), "value": num(c.value),
            "return": num(c.ret), "detail": {k: num(v) if isinstance(v, (int, float)) else v
                                             for k, v in c.detail.items()}})
    for v in out.values():
        v.sort(key=lambda r: -r["iteration"])
    return out


def judgement_json(j: JudgementRecord) -> dict[str, Any]:
    if not isinstance(j.verdict, Mapping):
        raise malformed(j.episode_id, f"judgement {j.judgement_id}: its verdict is not a JSON object")
    if not (j.step is None or _is_int(j.step)):
        raise malformed(j.episode_id, f"judgement {j.judgement_id}: step {repr(j.step)[:40]}")
    return {"id": j.judgement_id, "step": j.step, "judge": j.judge, "score": num(j.score),
            "verdict": dict(j.verdict), "reason": j.reason, "created_at": num(j.created_at)}


def detail_json(d: EpisodeDetail, run_key: str | None, blob_url) -> dict[str, Any]:
    """The episode with its steps; ``blob_url(ref)`` makes a screenshot URL."""
    fo = d.final_observation
    final = None if fo is None else {
        "screenshot_ref": fo.screenshot_ref, "width": fo.width, "height": fo.height, "url": fo.url,
        "last_action_error": fo.last_action_error,
        "screenshot_url": blob_url(fo.screenshot_ref) if fo.screenshot_ref else None}
    return {
        "run": run_key, "episode": summary_json(d.summary), "final_observation": final,
        "reward_totals": {k: num(v) for k, v in d.reward_totals.items()},
        "judgements": [judgement_json(j) for j in d.judgements],
        "steps": [step_json(s, blob_url(s.screenshot_ref) if s.screenshot_ref else None) for s in d.steps],
    }


def task_stats_json(stats: tuple[TaskStats, ...]) -> list[dict[str, Any]]:
    return [{"suite": t.suite, "task_id": t.task_id, "num_episodes": t.num_episodes,
             "num_success": t.num_success or 0,
             "success_rate": (t.num_success or 0) / t.num_episodes if t.num_episodes else None,
             "mean_reward": num(t.mean_reward), "mean_length": num(t.mean_length)} for t in stats]


# -- charts ----------------------------------------------------------------------------------

#: (chart title, pattern over metric names), first match wins; the rest get one chart each
_CHART_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # a mixed fleet's per-suite metrics (suite/<name>/...): one curve per suite
    ("Success rate by suite", re.compile(r"^suite/[^/]+/(eval_)?success", re.I)),
    ("Reward by suite", re.compile(r"^suite/[^/]+/reward", re.I)),
    ("Episodes by suite", re.compile(r"^suite/[^/]+/(episodes|aborted)$", re.I)),
    ("Success rate", re.compile(r"success", re.I)),
    ("Reward components", re.compile(r"^(rewards?|returns?)([/._:-]|$)", re.I)),
    ("Episode length", re.compile(r"(length|num_steps|steps_per_episode|ep_len)", re.I)),
    ("Parse errors", re.compile(r"parse", re.I)),
    # the sampled replies' entropy (rollouts) beside the updated policy's (--entropy-coef)
    ("Policy entropy", re.compile(r"^(entropy|update_entropy)$")),
    # the rollout engine against the learner (rescored runs, e.g. --rollout-engine vllm): the gap, then TIS
    ("Engine-learner log-prob gap", re.compile(r"^mismatch_(kl|mean_abs|max_abs)$")),
    ("Truncated importance weights", re.compile(r"^tis_(weight_mean|clip_frac)$")),
)


def chart_groups(names: list[str] | tuple[str, ...]) -> list[dict[str, Any]]:
    """Group metric names into charts: the four standard ones first, then one per other metric."""
    groups: dict[str, list[str]] = {title: [] for title, _ in _CHART_RULES}
    rest: list[str] = []
    offline: list[str] = []
    for name in sorted(names):
        if name.startswith("offline/"):  # an offline evaluation: its table is on the run page; one chart here
            if name.count("/") == 2 and name.rsplit("/", 1)[1] in ("type_acc", "grounding_acc", "step_sr"):
                offline.append(name)
            continue
        for title, pattern in _CHART_RULES:
            if pattern.search(name):
                groups[title].append(name)
                break
        else:
            rest.append(name)
    charts = [{"title": t, "series": s} for t, s in groups.items() if s]
    charts += [{"title": n, "series": [n]} for n in rest]
    if offline:
        charts.append({"title": "offline metrics", "series": offline})
    return charts


def metrics_json(metrics: Mapping[str, tuple[MetricPoint, ...]]) -> dict[str, list[list[float | None]]]:
    """``{name: [[iteration, value, time], ...]}`` (compact: a run may log thousands of points)."""
    return {name: [[p.iteration, num(p.value), p.time] for p in pts] for name, pts in metrics.items()}


# -- the episode-list query ------------------------------------------------------------------

@dataclass(frozen=True)
class ListQuery:
    filter: EpisodeFilter
    sort: str
    descending: bool
    limit: int
    cursor: str | None
    args: dict[str, str]
    """the filter/sort arguments as given (non-empty only), for links that keep them"""


_FILTER_ARGS = ("task", "outcome", "status", "min_reward", "max_reward", "min_length", "max_length",
                "policy_version", "agent", "group", "seed", "judge", "disagreement", "judged", "suite")


_KINDS = {"_finite": "finite number", "integer": "64-bit integer", "_boolean": "boolean (true/false)",
          "str": "text"}
_INT_RE = re.compile(r"[+-]?[0-9]{1,19}")
_FLOAT_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
MAX_ARG = 1000


def _opt(args: Mapping[str, str], name: str, conv) -> Any:
    raw = args.get(name, "")
    raw = raw.strip() if isinstance(raw, str) else raw
    if raw in ("", None):
        return None
    if len(raw) > MAX_ARG:
        raise BadQuery(f"{name} is too long ({len(raw)} characters, at most {MAX_ARG})")
    try:
        return conv(raw)
    except (TypeError, ValueError, OverflowError):
        # the message names the argument and the kind of value, never a function of ours
        raise BadQuery(f"{name}={raw[:60]!r} is not a valid {_KINDS.get(conv.__name__, 'value')}") from None


def _finite(raw: str) -> float:
    if _FLOAT_RE.fullmatch(raw) is None:  # float() would also take "nan", "1_0" and other digits
        raise ValueError(raw)
    x = float(raw)
    if not math.isfinite(x):
        raise ValueError(raw)
    return x


def integer(raw: str) -> int:
    """A base-10 integer SQLite can hold (64-bit); ASCII digits only (``int()`` would also take
    ``"1_0"`` and other scripts' digits, ``str.isdigit`` even ``"²"``, which ``int()`` refuses)."""
    if _INT_RE.fullmatch(raw) is None:
        raise ValueError(raw)
    x = int(raw)
    if not -2**63 <= x < 2**63:
        raise ValueError(raw)
    return x


def int_arg(args: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    """A query-string integer in ``[lo, hi]`` (``default`` when absent); BadQuery otherwise."""
    x = _opt(args, name, integer)
    if x is None:
        return default
    if not lo <= x <= hi:
        raise BadQuery(f"{name} must lie in [{lo}, {hi}], got {x}")
    return x


def _boolean(raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def parse_list_query(run_id: str, args: Mapping[str, str], *, default_limit: int = 50) -> ListQuery:
    """Query-string arguments of the episode list -> filter, sort and page (raises BadQuery)."""
    outcome = _opt(args, "outcome", str)
    status = _opt(args, "status", str)
    try:
        f = EpisodeFilter(
            run_id=run_id, task_id=_opt(args, "task", str), suite=_opt(args, "suite", str), outcome=outcome,
            status=status, min_reward=_opt(args, "min_reward", _finite),
            max_reward=_opt(args, "max_reward", _finite), min_length=_opt(args, "min_length", integer),
            max_length=_opt(args, "max_length", integer),
            policy_version=_opt(args, "policy_version", integer), agent=_opt(args, "agent", str),
            group_id=_opt(args, "group", str), seed=_opt(args, "seed", integer),
            judge=_opt(args, "judge", str), judged=_opt(args, "judged", _boolean),
            disagreement=_opt(args, "disagreement", _boolean))
    except ValueError as e:
        if isinstance(e, BadQuery):
            raise
        raise BadQuery(str(e)) from None
    sort = _opt(args, "sort", str) or "started"
    if sort not in SORT_KEYS:
        raise BadQuery(f"sort must be one of {sorted(SORT_KEYS)}, got {sort!r}")
    order = _opt(args, "order", str) or "desc"
    if order not in ("asc", "desc"):
        raise BadQuery(f"order must be asc or desc, got {order!r}")
    limit = _opt(args, "limit", integer)
    limit = default_limit if limit is None else limit
    if not 1 <= limit <= MAX_PAGE:
        raise BadQuery(f"limit must lie in [1, {MAX_PAGE}], got {limit}")
    kept = {k: str(args[k]).strip() for k in _FILTER_ARGS + ("sort", "order", "limit")
            if str(args.get(k, "")).strip()}
    return ListQuery(filter=f, sort=sort, descending=order == "desc", limit=limit,
                     cursor=_opt(args, "cursor", str), args=kept)
