"""Read-only access to a run directory: what the web UI, trainers and exporters use.

Only completed and aborted episodes exist for a reader; in-progress ones are
invisible to every method. The database is opened with ``mode=ro`` and
``query_only``, so a reader cannot write even by mistake. One connection per
thread (Flask serves requests from several threads).

Example::

    reader = StoreReader("runs/demo")
    run = reader.list_runs()[0]
    f = EpisodeFilter(run_id=run.run_id, outcome="failure", min_length=3)
    page = reader.list_episodes(f, sort="reward", descending=True, limit=50)
    while page.next_cursor:
        page = reader.list_episodes(f, sort="reward", limit=50, cursor=page.next_cursor)
    detail = reader.get_episode(page.items[0].episode_id)   # steps with blob refs
    png = reader.read_blob(detail.steps[0].screenshot_ref)
    traj = reader.load_trajectory(detail.summary.episode_id)  # a guiagent.types.Trajectory
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from guiagent.store import _codec
from guiagent.store._proc import STALE_S, writer_alive
from guiagent.store.blobs import BlobStore
from guiagent.store.errors import EpisodeNotFound, InvalidCursor, RunNotFound, StoreError
from guiagent.store.records import (
    SORT_KEYS, SUCCESS_THRESHOLD, EpisodeDetail, EpisodeFilter, EpisodePage, EpisodeSummary,
    JudgementRecord, MetricPoint, RunInfo, StepCredit, StepRecord, TaskStats,
)
from guiagent.store.schema import BLOBS_DIR, connect_ro, schema_version
from guiagent.types import Observation, Step, TaskSpec, Trajectory

__all__ = ["StoreReader"]

_VISIBLE = "e.status != 'in_progress'"
_EPISODE_COLS = (
    "e.id, e.run_id, e.group_id, e.suite, e.task_id, e.seed, e.goal, e.max_steps, e.params, e.agent, "
    "e.policy_version_min, e.policy_version_max, e.status, e.abort_reason, e.success, e.total_reward, "
    "e.num_steps, e.num_parse_errors, e.started_at, e.ended_at, e.metadata"
)
_STEP_COLS = ", ".join(f"s.{c}" for c in _codec.STEP_COLUMNS)
# A store written before steps.metadata existed and not opened for writing since (a
# read-only reader cannot migrate it) reads as empty step metadata; one written before
# steps.marks existed (schema 2) reads as steps without marks.
_STEP_COLS_NO_META = _STEP_COLS.replace("s.metadata", "'{}'")
_RUN_COLS = "r.id, r.name, r.env, r.algo, r.model, r.config, r.status, r.created_at, r.updated_at"
MAX_LIMIT = 10_000


class StoreReader:
    """Read-only view of the store in ``run_dir``."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        con = connect_ro(self.run_dir)  # fail now, with a clear error, if there is no usable store
        try:
            # a store not yet migrated by a writer has no writer columns: read NULLs instead
            self._runs_sql = _RUNS_SQL if schema_version(con) >= 2 else _RUNS_SQL_V1
            # nor (before steps.metadata existed) step metadata: it reads as empty
            columns = {r[1] for r in con.execute("PRAGMA table_info(steps)")}
            self._step_cols_sql = _STEP_COLS if "metadata" in columns else _STEP_COLS_NO_META
            if "marks" not in columns:
                self._step_cols_sql = self._step_cols_sql.replace("s.marks", "NULL")
        except sqlite3.Error as e:
            raise StoreError(f"{self.run_dir} is not a readable trajectory store ({e})") from None
        finally:
            con.close()
        self._blobs = BlobStore(self.run_dir / BLOBS_DIR)
        self._local = threading.local()
        self._idle: list[sqlite3.Connection] = []
        self._idle_lock = threading.Lock()

    #: connections kept for reuse after :meth:`release` (more are closed)
    max_idle = 4

    @property
    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            with self._idle_lock:
                con = self._idle.pop() if self._idle else None
            self._local.con = con = con or connect_ro(self.run_dir)
        return con

    def release(self) -> None:
        """Hand this thread's connection back for reuse by any thread.

        A server that answers each request on a fresh thread (werkzeug) calls it when
        a request ends: connections are then reused instead of one being opened per
        thread, and open file descriptors stay bounded (``max_idle`` kept, more closed).
        """
        con = getattr(self._local, "con", None)
        if con is None:
            return
        self._local.con = None
        with self._idle_lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(con)
                return
        con.close()

    @property
    def _step_cols(self) -> str:
        return self._step_cols_sql

    def close(self) -> None:
        """Close this thread's connection and the idle ones (other threads' close when they end)."""
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def __enter__(self) -> "StoreReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction, so several queries see the same state."""
        con = self._con
        con.execute("BEGIN")
        try:
            yield con
        finally:
            con.execute("COMMIT")

    # -- runs -------------------------------------------------------------------------------

    def list_runs(self) -> tuple[RunInfo, ...]:
        """All runs, newest first, with counts over their visible episodes."""
        sql = self._runs_sql + " GROUP BY r.id ORDER BY r.created_at DESC, r.id"
        return tuple(_run(r) for r in self._con.execute(sql))

    def get_run(self, run_id: str) -> RunInfo:
        row = self._con.execute(self._runs_sql + " WHERE r.id = ? GROUP BY r.id", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id!r}")
        return _run(row)

    def task_ids(self, run_id: str | None = None) -> tuple[str, ...]:
        """Distinct task ids with visible episodes (of one run, or of all)."""
        where, args = _where(EpisodeFilter(run_id=run_id))
        return tuple(r[0] for r in self._con.execute(
            f"SELECT DISTINCT e.task_id FROM episodes e WHERE {where} ORDER BY e.task_id", args))

    def task_stats(self, run_id: str | None = None) -> tuple[TaskStats, ...]:
        """Per-task episode count, successes, mean reward and mean length."""
        where, args = _where(EpisodeFilter(run_id=run_id))
        sql = (f"SELECT e.suite, e.task_id, count(*), sum(e.success >= {SUCCESS_THRESHOLD}), "
               f"avg(e.total_reward), avg(e.num_steps) FROM episodes e WHERE {where} "
               "GROUP BY e.suite, e.task_id ORDER BY e.suite, e.task_id")
        return tuple(TaskStats(*r) for r in self._con.execute(sql, args))

    def distinct(self, column: str, run_id: str | None = None) -> tuple[Any, ...]:
        """Distinct values of ``agent``, ``suite``, ``group_id`` or ``task_id`` (filter menus)."""
        if column not in ("agent", "suite", "group_id", "task_id"):
            raise StoreError(f"distinct() supports agent, suite, group_id, task_id; not {column!r}")
        where, args = _where(EpisodeFilter(run_id=run_id))
        return tuple(r[0] for r in self._con.execute(
            f"SELECT DISTINCT e.{column} FROM episodes e WHERE {where} AND e.{column} IS NOT NULL "
            f"ORDER BY 1", args))

    def judges(self, run_id: str | None = None) -> tuple[str, ...]:
        """Names of the judges with a verdict on a visible episode."""
        where, args = _where(EpisodeFilter(run_id=run_id))
        return tuple(r[0] for r in self._con.execute(
            f"SELECT DISTINCT j.judge FROM judgements j JOIN episodes e ON e.pk = j.episode_pk "
            f"WHERE {where} ORDER BY 1", args))

    def reward_components(self, run_id: str | None = None) -> tuple[str, ...]:
        """Names of the reward components seen in visible episodes."""
        where, args = _where(EpisodeFilter(run_id=run_id))
        return tuple(r[0] for r in self._con.execute(
            f"SELECT DISTINCT er.name FROM episode_rewards er JOIN episodes e ON e.pk = er.episode_pk "
            f"WHERE {where} ORDER BY 1", args))

    # -- episode lists ----------------------------------------------------------------------

    def list_episodes(self, filter: EpisodeFilter = EpisodeFilter(), *, sort: str = "started",
                      descending: bool = True, limit: int = 50, cursor: str | None = None,
                      offset: int | None = None) -> EpisodePage:
        """One page of visible episodes matching ``filter``, sorted by ``sort``.

        ``sort`` is one of ``started``, ``ended``, ``reward``, ``length``, ``success``;
        ties break on insertion order. Pass the previous page's ``next_cursor`` as
        ``cursor`` (keyset pagination: as fast on page 2,000 as on page 1), or an
        ``offset`` for jump-to-page (cost grows with the offset).
        """
        sql, args = _list_sql(filter, sort=sort, descending=descending, limit=limit, cursor=cursor,
                              offset=offset)
        rows = self._con.execute(sql, args).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        nxt = _encode_cursor(sort, descending, rows[-1][-1], rows[-1][-2]) if more and rows else None
        return EpisodePage(items=tuple(_summary(r) for r in rows), next_cursor=nxt)

    def iter_episodes(self, filter: EpisodeFilter = EpisodeFilter(), *, sort: str = "started",
                      descending: bool = False, page_size: int = 500) -> Iterator[EpisodeSummary]:
        """Every matching episode, page by page (oldest first by default)."""
        cursor = None
        while True:
            page = self.list_episodes(filter, sort=sort, descending=descending, limit=page_size,
                                      cursor=cursor)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def count_episodes(self, filter: EpisodeFilter = EpisodeFilter()) -> int:
        """How many visible episodes match ``filter``."""
        where, args = _where(filter)
        return int(self._con.execute(f"SELECT count(*) FROM episodes e WHERE {where}", args).fetchone()[0])

    def episodes_of_task(self, task_id: str, *, run_id: str | None = None, seed: int | None = None,
                         limit: int = 100) -> tuple[EpisodeSummary, ...]:
        """Visible episodes of one task (optionally one seed), newest first: the comparison page."""
        f = EpisodeFilter(run_id=run_id, task_id=task_id, seed=seed)
        return self.list_episodes(f, limit=limit).items

    # -- one episode ------------------------------------------------------------------------

    def get_summary(self, episode_id: str) -> EpisodeSummary:
        return _summary(self._episode_row(self._con, episode_id))

    def get_episode(self, episode_id: str) -> EpisodeDetail:
        """An episode with its steps (blob refs, no pixels), judgements and reward totals."""
        with self._snapshot() as con:
            row = self._episode_row(con, episode_id)
            pk = row[-1]
            steps = con.execute(f"SELECT {self._step_cols} FROM steps s WHERE s.episode_pk = ? "
                                "ORDER BY s.idx",
                                (pk,)).fetchall()
            judgements = con.execute(
                "SELECT id, step, judge, score, verdict, reason, created_at FROM judgements "
                "WHERE episode_pk = ? ORDER BY id", (pk,)).fetchall()
            totals = con.execute("SELECT name, total FROM episode_rewards WHERE episode_pk = ? ORDER BY name",
                                 (pk,)).fetchall()
            final = con.execute("SELECT final_obs FROM episodes WHERE pk = ?", (pk,)).fetchone()[0]
        try:
            return self._detail(episode_id, row, steps, judgements, totals, final)
        except (ValueError, TypeError, KeyError) as e:  # a row some other tool mangled
            raise StoreError(f"episode {episode_id!r} has a malformed stored row ({type(e).__name__})") from None

    @staticmethod
    def _detail(episode_id: str, row, steps, judgements, totals, final) -> EpisodeDetail:
        return EpisodeDetail(
            summary=_summary(row),
            steps=tuple(_step(episode_id, r) for r in steps),
            judgements=tuple(JudgementRecord(j[0], episode_id, j[1], j[2], j[3], _json(j[4], {}), j[5], j[6])
                             for j in judgements),
            reward_totals=dict(totals),
            final_observation=_codec.obs_from_json(final, None),
        )

    def get_step(self, episode_id: str, index: int) -> StepRecord:
        """One step of a visible episode (the replay page's keyboard navigation)."""
        if not isinstance(index, int) or not -2**63 <= index < 2**63:
            raise StoreError(f"episode {episode_id!r} has no step {str(index)[:40]}")
        with self._snapshot() as con:
            pk = self._episode_row(con, episode_id)[-1]
            row = con.execute(f"SELECT {self._step_cols} FROM steps s WHERE s.episode_pk = ? AND s.idx = ?",
                              (pk, int(index))).fetchone()
        if row is None:
            raise StoreError(f"episode {episode_id!r} has no step {index}")
        try:
            return _step(episode_id, row)
        except (ValueError, TypeError, KeyError) as e:  # a row some other tool mangled
            raise StoreError(f"episode {episode_id!r} step {index} is malformed ({type(e).__name__})") from None

    def step_credit(self, episode_id: str) -> tuple[StepCredit, ...]:
        """The credit trainers gave the episode's steps (advantages, critic values and returns), by
        step then iteration; empty for an episode never trained on, or a store older than the table."""
        with self._snapshot() as con:
            pk = self._episode_row(con, episode_id)[-1]
            if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'step_credit'"
                           ).fetchone() is None:
                return ()
            rows = con.execute("SELECT idx, iteration, algo, advantage, value, ret, detail FROM step_credit "
                               "WHERE episode_pk = ? ORDER BY idx, iteration", (pk,)).fetchall()
        return tuple(StepCredit(episode_id, r[0], r[1], r[2], r[3], r[4], r[5], _json(r[6], {})) for r in rows)

    def judgements(self, episode_id: str) -> tuple[JudgementRecord, ...]:
        return self.get_episode(episode_id).judgements

    def load_trajectory(self, episode_id: str, pixels: bool = True) -> Trajectory:
        """The episode as the :class:`~guiagent.types.Trajectory` that was written.

        With ``pixels=True`` each observation carries its screenshot bytes (and
        ``screenshot_ref=None``, as when it was captured); with ``pixels=False``
        ``screenshot=None`` and ``screenshot_ref`` names the blob.
        """
        d = self.get_episode(episode_id)
        s = d.summary
        final = d.final_observation
        if pixels and final is not None and final.screenshot_ref is not None:
            final = dataclasses.replace(final, screenshot=self.read_blob(final.screenshot_ref),
                                        screenshot_ref=None)
        return Trajectory(
            episode_id=s.episode_id,
            task=TaskSpec(suite=s.suite, task_id=s.task_id, seed=s.seed, goal=s.goal, max_steps=s.max_steps,
                          params=dict(s.params)),
            steps=tuple(self._to_step(r, pixels) for r in d.steps),
            success=s.success, status=s.status, abort_reason=s.abort_reason, final_observation=final,
            agent=s.agent, group_id=s.group_id, metadata=dict(s.metadata),
        )

    def iter_trajectories(self, filter: EpisodeFilter = EpisodeFilter(), *,
                          pixels: bool = True) -> Iterator[Trajectory]:
        """Every matching episode as a Trajectory, oldest first (trainers, replay)."""
        for s in self.iter_episodes(filter):
            yield self.load_trajectory(s.episode_id, pixels=pixels)

    def _to_step(self, r: StepRecord, pixels: bool) -> Step:
        with_bytes = pixels and r.screenshot_ref is not None
        obs = Observation(screenshot=self.read_blob(r.screenshot_ref) if with_bytes else None,
                          width=r.width, height=r.height,
                          screenshot_ref=None if with_bytes else r.screenshot_ref,
                          tree=r.tree, url=r.url, last_action_error=r.last_action_error, marks=r.marks)
        return Step(index=r.index, observation=obs, action=r.action, response=r.response, thought=r.thought,
                    parse_error=r.parse_error, action_error=r.action_error, reward=r.reward,
                    reward_parts=dict(r.reward_parts), milestones=r.milestones, terminated=r.terminated,
                    truncated=r.truncated, policy_version=r.policy_version, latency_ms=r.latency_ms,
                    metadata=dict(r.metadata))

    @staticmethod
    def _episode_row(con: sqlite3.Connection, episode_id: str) -> tuple:
        row = con.execute(f"SELECT {_EPISODE_COLS}, e.pk FROM episodes e WHERE e.id = ? AND {_VISIBLE}",
                          (episode_id,)).fetchone()
        if row is None:
            raise EpisodeNotFound(f"no completed or aborted episode {episode_id!r}")
        return row

    # -- blobs and metrics ------------------------------------------------------------------

    def blob_path(self, ref: str) -> Path:
        """Path of a screenshot blob. ``ref`` must be 64 lowercase hex chars
        (:class:`InvalidBlobRef` otherwise: nothing outside ``blobs/`` can be named);
        :class:`BlobNotFound` when absent."""
        return self._blobs.path(ref)

    def read_blob(self, ref: str) -> bytes:
        """The bytes of a screenshot blob, exactly as captured."""
        return self._blobs.read(ref)

    def metric_names(self, run_id: str) -> tuple[str, ...]:
        return tuple(r[0] for r in self._con.execute(
            "SELECT DISTINCT name FROM metrics WHERE run_id = ? ORDER BY name", (run_id,)))

    def metrics(self, run_id: str, names: tuple[str, ...] | list[str] | None = None
                ) -> dict[str, tuple[MetricPoint, ...]]:
        """Training curves of a run: ``{name: points in iteration order}``."""
        sql, args = "SELECT name, iteration, value, time FROM metrics WHERE run_id = ?", [run_id]
        if names is not None:
            sql += f" AND name IN ({', '.join('?' * len(names))})"
            args += list(names)
        out: dict[str, list[MetricPoint]] = {}
        for name, it, value, t in self._con.execute(sql + " ORDER BY name, iteration", args):
            out.setdefault(name, []).append(MetricPoint(it, value, t))
        return {k: tuple(v) for k, v in out.items()}


_RUNS_SQL = (
    f"SELECT {_RUN_COLS}, count(e.pk), sum(e.status = 'completed'), sum(e.status = 'aborted'), "
    f"sum(e.success >= {SUCCESS_THRESHOLD}), avg(e.total_reward), "
    "r.writer_host, r.writer_pid, r.writer_start, r.heartbeat "
    f"FROM runs r LEFT JOIN episodes e ON e.run_id = r.id AND {_VISIBLE}"
)
_RUNS_SQL_V1 = _RUNS_SQL.replace("r.writer_host, r.writer_pid, r.writer_start, r.heartbeat",
                                 "NULL, NULL, NULL, r.updated_at")


def _run(r: tuple) -> RunInfo:
    status, host, pid, start, beat = r[6], r[14], r[15], r[16], r[17]
    # A run whose writer is gone reads as interrupted at once, before any writer records it
    # (readers never write): its process is missing on this host, or it went silent.
    if status == "running" and (writer_alive(host, pid, start) is False
                                or (beat is not None and beat < time.time() - STALE_S)):
        status = "interrupted"
    return RunInfo(run_id=r[0], name=r[1], env=r[2], algo=r[3], model=r[4], config=_json(r[5], {}),
                   status=status, created_at=r[7], updated_at=r[8], num_episodes=r[9], num_completed=r[10] or 0,
                   num_aborted=r[11] or 0, num_success=r[12] or 0, mean_reward=r[13], writer_host=host,
                   writer_pid=pid, heartbeat=beat)


def _json(text: str | None, default: Any) -> Any:
    """A JSON column; a value some other tool mangled reads as ``default`` rather than failing
    the whole run list."""
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def _summary(r: tuple) -> EpisodeSummary:
    return EpisodeSummary(
        episode_id=r[0], run_id=r[1], group_id=r[2], suite=r[3], task_id=r[4], seed=r[5], goal=r[6],
        max_steps=r[7], params=_json(r[8], {}), agent=r[9], policy_version_min=r[10],
        policy_version_max=r[11], status=r[12], abort_reason=r[13], success=r[14], total_reward=r[15],
        num_steps=r[16], num_parse_errors=r[17], started_at=r[18], ended_at=r[19], metadata=_json(r[20], {}),
    )


def _step(episode_id: str, r: tuple) -> StepRecord:
    return StepRecord(
        episode_id=episode_id, index=r[0], screenshot_ref=r[1], width=r[2], height=r[3], tree=r[4], url=r[5],
        last_action_error=r[6], response=r[7], thought=r[8], action=_codec.parse_action(r[9]),
        parse_error=_codec.parse_error(r[10]), action_error=r[11], reward=r[12],
        reward_parts=_json(r[13], {}), milestones=tuple(_json(r[14], [])), terminated=bool(r[15]),
        truncated=bool(r[16]), policy_version=r[17], latency_ms=r[18], metadata=_json(r[19], {}),
        marks=_codec.parse_marks(r[20]),
    )


def _where(f: EpisodeFilter) -> tuple[str, list[Any]]:
    """SQL condition (on alias ``e``) and arguments for a filter; always hides in-progress episodes."""
    if not isinstance(f, EpisodeFilter):
        raise StoreError(f"filter must be an EpisodeFilter, got {type(f).__name__}")
    clauses, args = [_VISIBLE], []
    for field, column in (("run_id", "run_id"), ("task_id", "task_id"), ("suite", "suite"),
                          ("status", "status"), ("agent", "agent"), ("group_id", "group_id"),
                          ("seed", "seed")):
        value = getattr(f, field)
        if value is not None:
            clauses.append(f"e.{column} = ?")
            args.append(value)
    # Range terms carry a unary "+": it keeps SQLite from choosing the index of the
    # filtered column (then sorting everything in a temp B-tree) over walking the sort
    # key's index in order and stopping at LIMIT, which is what keeps pages fast.
    if f.outcome == "success":
        clauses.append(f"+e.success >= {SUCCESS_THRESHOLD}")
    elif f.outcome == "failure":
        clauses.append(f"+e.success < {SUCCESS_THRESHOLD}")
    for value, cond in ((f.min_reward, "+e.total_reward >= ?"), (f.max_reward, "+e.total_reward <= ?"),
                        (f.min_length, "+e.num_steps >= ?"), (f.max_length, "+e.num_steps <= ?")):
        if value is not None:
            clauses.append(cond)
            args.append(value)
    if f.policy_version is not None:
        clauses.append("+e.policy_version_min <= ? AND +e.policy_version_max >= ?")
        args += [f.policy_version, f.policy_version]
    if f.episode_ids is not None:
        clauses.append(f"e.id IN ({', '.join('?' * len(f.episode_ids)) or 'NULL'})")
        args += list(f.episode_ids)
    judged = "j.episode_pk = e.pk AND j.step IS NULL" + (" AND j.judge = ?" if f.judge else "")
    judge_args = [f.judge] if f.judge else []
    disagrees = (f"j.score IS NOT NULL AND (j.score >= {SUCCESS_THRESHOLD}) != "
                 f"(e.success >= {SUCCESS_THRESHOLD})")
    if f.judged is not None or (f.judge and f.disagreement is None):
        # ``judge`` alone keeps the episodes that judge has judged
        exists = "NOT EXISTS" if f.judged is False else "EXISTS"
        clauses.append(f"{exists} (SELECT 1 FROM judgements j WHERE {judged})")
        args += judge_args
    if f.disagreement is True:
        clauses.append(f"EXISTS (SELECT 1 FROM judgements j WHERE {judged} AND {disagrees})")
        args += judge_args
    elif f.disagreement is False:
        clauses.append(f"EXISTS (SELECT 1 FROM judgements j WHERE {judged}) AND "
                       f"NOT EXISTS (SELECT 1 FROM judgements j WHERE {judged} AND {disagrees})")
        args += judge_args + judge_args
    return " AND ".join(clauses), args


def _list_sql(f: EpisodeFilter, *, sort: str, descending: bool, limit: int, cursor: str | None,
              offset: int | None) -> tuple[str, list[Any]]:
    """The episode-list query: one more row than ``limit`` tells whether a next page exists."""
    col = SORT_KEYS.get(sort)
    if col is None:
        raise StoreError(f"sort must be one of {sorted(SORT_KEYS)}, got {sort!r}")
    if not 1 <= int(limit) <= MAX_LIMIT:
        raise StoreError(f"limit must lie in [1, {MAX_LIMIT}], got {limit}")
    if cursor is not None and offset is not None:
        raise StoreError("pass a cursor or an offset, not both")
    where, args = _where(f)
    op, direction = ("<", "DESC") if descending else (">", "ASC")
    if cursor is not None:
        value, pk = _decode_cursor(cursor, sort, descending)
        # row-value comparison: SQLite seeks the (run_id, col) index straight to the cursor
        where += f" AND (e.{col}, e.pk) {op} (?, ?)"
        args += [value, pk]
    sql = (f"SELECT {_EPISODE_COLS}, e.pk, e.{col} FROM episodes e WHERE {where} "
           f"ORDER BY e.{col} {direction}, e.pk {direction} LIMIT ?")
    args.append(int(limit) + 1)
    if offset is not None:
        if offset < 0:
            raise StoreError(f"offset must be >= 0, got {offset}")
        sql += " OFFSET ?"
        args.append(int(offset))
    return sql, args


def _encode_cursor(sort: str, descending: bool, value: Any, pk: int) -> str:
    raw = json.dumps([sort, bool(descending), value, pk], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, sort: str, descending: bool) -> tuple[Any, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        c_sort, c_desc, value, pk = json.loads(raw)
    except Exception:
        raise InvalidCursor(f"malformed cursor {cursor[:40]!r}") from None
    if c_sort != sort or c_desc != descending:
        raise InvalidCursor(f"cursor was made for sort={c_sort!r} descending={c_desc}, "
                            f"not sort={sort!r} descending={descending}")
    if (not isinstance(pk, int) or isinstance(pk, bool) or not isinstance(value, (int, float))
            or isinstance(value, bool)):
        raise InvalidCursor("malformed cursor values")
    # NaN, 1e400 (inf) and integers past 64 bits cannot be compared in SQLite
    if not (math.isfinite(value) and -2**63 <= pk < 2**63 and (isinstance(value, float) or -2**63 <= value < 2**63)):
        raise InvalidCursor("cursor values out of range")
    return value, pk
