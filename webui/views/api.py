"""JSON API under ``/api``: the same data the pages show, for notebooks and scripts.

Shapes are documented in ``docs/webui.md``; errors are ``{"error": message, "status": code}``
with 400 (bad query), 401 (token), 404 (unknown run, episode, step or blob) or 503 (the run's
store, or one episode's rows in it, cannot be read).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from flask import Blueprint, current_app, jsonify, request

from guiagent.store import EpisodeFilter, InvalidCursor, StoreError
from guiagent.store.records import EpisodeSummary
from webui.data import (
    BadQuery, ListQuery, branches_json, broken_json, chart_groups, credit_by_step, int_arg, detail_json, metrics_json, parse_list_query, run_json, step_json,
    summary_json, task_stats_json,
)
from webui.registry import NotFound, RunRef
from webui.views import blob_url, registry

bp = Blueprint("api", __name__)


def list_page(ref: RunRef, args, *, with_total: bool) -> tuple[ListQuery, dict[str, Any]]:
    """One page of a run's episode list (shared by the API and the episodes page)."""
    q = parse_list_query(ref.info.run_id, args, default_limit=current_app.config["GUIAGENT_UI"].page_size)
    try:
        page = ref.reader.list_episodes(q.filter, sort=q.sort, descending=q.descending, limit=q.limit,
                                        cursor=q.cursor)
    except (InvalidCursor, StoreError) as e:
        raise BadQuery(str(e)) from None
    except OverflowError:  # a cursor carrying a number SQLite cannot hold
        raise BadQuery("cursor values out of range") from None
    out: dict[str, Any] = {"items": [summary_json(s) for s in page.items], "next_cursor": page.next_cursor}
    if with_total:
        out["total"] = ref.reader.count_episodes(q.filter)
    return q, out


_OPTION_QUERIES = {
    "tasks": lambda r, rid: r.task_ids(rid),
    "agents": lambda r, rid: r.distinct("agent", rid),
    "suites": lambda r, rid: r.distinct("suite", rid),
    "judges": lambda r, rid: r.judges(rid),
    "reward_components": lambda r, rid: r.reward_components(rid),
}
def filter_options(ref: RunRef, fields: tuple[str, ...] = tuple(_OPTION_QUERIES)) -> dict[str, Any]:
    """Values for the filter menus. Each scans the run's episodes (tens of ms at 100k), so
    they are cached for the registry's rescan interval: a menu may miss a brand-new task
    for a few seconds, the list itself never does."""
    ttl = registry().ttl_s
    cache: dict[tuple[str, str], tuple[float, list]] = current_app.extensions.setdefault(
        "guiagent_options", {})
    out: dict[str, Any] = {}
    now = time.monotonic()
    for field in fields:
        key = (str(ref.run_dir), ref.info.run_id + "/" + field)
        hit = cache.get(key)
        if hit is None or now - hit[0] >= ttl:
            hit = cache[key] = (now, list(_OPTION_QUERIES[field](ref.reader, ref.info.run_id)))
        out[field] = hit[1]
    return out


@bp.get("/runs")
def runs():
    cfg = current_app.config["GUIAGENT_UI"]
    return jsonify({"runs": [run_json(r.key, r.label, r.info) for r in registry().runs()],
                    "broken": [broken_json(b.label, b.reason) for b in registry().broken()],
                    "refresh_s": cfg.refresh_s})


@bp.get("/runs/<run>")
def run(run: str):
    ref = registry().run(run, fresh=True)
    out = run_json(ref.key, ref.label, ref.info)
    config = ref.info.config
    out["config"] = dict(config) if isinstance(config, Mapping) else config  # as stored, whatever wrote it
    out["metric_names"] = list(ref.reader.metric_names(ref.info.run_id))
    out.update(filter_options(ref))
    return jsonify(out)


@bp.get("/runs/<run>/metrics")
def metrics(run: str):
    ref = registry().run(run)
    names = [n for n in request.args.get("names", "").split(",") if n][:200] or None
    data = ref.reader.metrics(ref.info.run_id, names)
    return jsonify({"run": ref.key, "status": ref.info.status, "metrics": metrics_json(data),
                    "charts": chart_groups(list(data)),
                    "tasks": task_stats_json(ref.reader.task_stats(ref.info.run_id)) if not data else []})


@bp.get("/runs/<run>/tasks")
def tasks(run: str):
    ref = registry().run(run)
    return jsonify({"run": ref.key, "tasks": task_stats_json(ref.reader.task_stats(ref.info.run_id))})


@bp.get("/runs/<run>/filters")
def filters(run: str):
    return jsonify(filter_options(registry().run(run)))


@bp.get("/runs/<run>/episodes")
def episodes(run: str):
    ref = registry().run(run)
    _, out = list_page(ref, request.args, with_total=request.args.get("count", "") in ("1", "true"))
    out["run"] = ref.key
    return jsonify(out)


@bp.get("/episodes/<eid:episode_id>", merge_slashes=False)
def episode(episode_id: str):
    reader, summary, key = registry().find_episode(episode_id)
    detail = reader.get_episode(episode_id)
    out = detail_json(detail, key, lambda ref: blob_url(key, ref))
    out["step_credit"] = {str(k): v for k, v in credit_by_step(reader.step_credit(episode_id)).items()}
    # the branch tree the page shows (trunk, branch points, each branch's first action and outcome); null
    # for an episode of no tree
    out["branches"] = branches_json(reader, summary, lambda ref: blob_url(key, ref))
    return jsonify(out)


#: a sub-route's tail as the raw request wrote it, "/" and all
_ROUTE_TAIL = re.compile(r"/(siblings|steps/[0-9]+)$")


def _sub_route(episode_id: str, answer: Callable[[Any, EpisodeSummary, str | None], Any]):
    """``answer(reader, summary, run key)`` for the episode a sub-route (``/steps/<n>``,
    ``/siblings``) names, or the episode whose id is the whole path after ``/api/episodes/``.

    An id may end like a sub-route (``a/siblings``). Links write an id's ``/`` as ``%2F``; where the
    server passes the raw request line on (werkzeug, gunicorn), a tail written ``%2Fsiblings`` is taken
    as part of the id first. Otherwise the sub-route wins while ``episode_id`` exists, and the whole
    path is tried as one id when it does not."""
    whole = request.path.removeprefix("/api/episodes/")
    raw = (request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI") or "").split("?", 1)[0]
    if raw and not _ROUTE_TAIL.search(raw):
        try:
            return episode(whole)
        except NotFound:
            pass
    try:
        found = registry().find_episode(episode_id)
    except NotFound:
        if whole == episode_id:
            raise
        return episode(whole)
    return answer(*found)


@bp.get("/episodes/<eid:episode_id>/steps/<int:index>", merge_slashes=False)
def step(episode_id: str, index: int):
    def answer(reader: Any, _: EpisodeSummary, key: str | None):
        if not 0 <= index < 2**63:  # the route's int converter takes any length of digits
            raise NotFound(f"episode {episode_id[:200]!r} has no step {str(index)[:40]}")
        try:
            r = reader.get_step(episode_id, index)
        except StoreError:
            # no such step, or a row another tool mangled: the whole episode tells which (its 503 if mangled)
            if any(s.index == index for s in reader.get_episode(episode_id).steps):
                raise
            raise NotFound(f"episode {episode_id[:200]!r} has no step {index}") from None
        return jsonify(step_json(r, blob_url(key, r.screenshot_ref)))

    return _sub_route(episode_id, answer)


@bp.get("/episodes/<eid:episode_id>/siblings", merge_slashes=False)
def siblings(episode_id: str):
    """Other episodes of the same task in the same run, newest first (``limit``, default 50)."""
    def answer(reader: Any, s: EpisodeSummary, key: str | None):
        limit = int_arg(request.args, "limit", 50, 1, 500)
        items = reader.list_episodes(EpisodeFilter(run_id=s.run_id, task_id=s.task_id), limit=limit).items
        return jsonify({"run": key, "task_id": s.task_id,
                        "items": [summary_json(e) for e in items if e.episode_id != episode_id]})

    return _sub_route(episode_id, answer)
