"""Writing runs, episodes, judgements and metrics (crash-safe, many processes).

Visibility rule: an episode is written ``in_progress`` (hidden from every read
API) and becomes visible in the one transaction that marks it ``completed`` or
``aborted``. Each step is its own short transaction, so a writer killed at any
point leaves a database that opens, shows no partial episode, and keeps every
closed episode intact. :meth:`Store.recover` later marks the in-progress
episodes of dead writers aborted (their steps become visible then).

Example::

    store = Store.open("runs/demo")
    run_id = store.create_run("demo", env="guiagent/webapps.todo", algo="grpo")
    with store.begin_episode(run_id, spec, agent="oracle", group_id="g0") as ep:
        for step in steps:
            ep.add_step(step)
        ep.complete(success=1.0, final_observation=obs)
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from guiagent.store import _codec
from guiagent.store._proc import HOST, STALE_S, process_start, writer_alive
from guiagent.store.blobs import BlobStore
from guiagent.store.errors import EpisodeClosed, EpisodeNotFound, RunNotFound, StoreError
from guiagent.store.schema import BLOBS_DIR, closed_on_error, connect_rw
from guiagent.types import Observation, Step, TaskSpec, Trajectory

__all__ = ["Store", "EpisodeWriter", "check_run_id", "STALE_S", "DAMAGED_PREFIX"]

#: the start of the ``abort_reason`` of an episode :meth:`Store.mark_damaged` marked
DAMAGED_PREFIX = "damaged: "

_RUN_STATUSES = ("running", "finished", "failed", "interrupted")
#: a run id names the run in URLs and file names: letters, digits, ``_ . -``, no ``..``
_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
#: seconds between two heartbeats of a run from one step writer (steps come many per second)
HEARTBEAT_S = 10.0


def check_run_id(run_id: object) -> str:
    """Return ``run_id`` if it is a valid run id (1-128 of ``A-Z a-z 0-9 _ . -``, no ``..``,
    not starting with ``.`` or ``-``); raise :class:`StoreError` naming the rule otherwise."""
    if not isinstance(run_id, str) or _RUN_ID.fullmatch(run_id) is None or ".." in run_id:
        raise StoreError(f"invalid run id {str(run_id)[:80]!r}: use 1-128 letters, digits, '_', '.' or '-' "
                         "(not starting with '.' or '-', no '..')")
    return run_id
_INSERT_STEP = (f"INSERT INTO steps (episode_pk, {', '.join(_codec.STEP_COLUMNS)}) "
                f"VALUES ({', '.join('?' * (1 + len(_codec.STEP_COLUMNS)))})")
_FINALIZE = """
UPDATE episodes SET
    status = :status, abort_reason = :reason, success = :success, ended_at = :now, updated_at = :now,
    final_obs = coalesce(:final_obs, final_obs), metadata = :metadata,
    num_steps = (SELECT count(*) FROM steps WHERE episode_pk = :pk),
    total_reward = (SELECT coalesce(sum(reward), 0.0) FROM steps WHERE episode_pk = :pk),
    num_parse_errors = (SELECT count(*) FROM steps WHERE episode_pk = :pk AND parse_error IS NOT NULL),
    policy_version_min = (SELECT min(policy_version) FROM steps WHERE episode_pk = :pk),
    policy_version_max = (SELECT max(policy_version) FROM steps WHERE episode_pk = :pk)
WHERE pk = :pk AND status = 'in_progress'
"""
_RUN_HEARTBEAT = "UPDATE runs SET heartbeat = ? WHERE id = ?"
_REWARD_TOTALS = """
INSERT INTO episode_rewards (episode_pk, name, total)
SELECT s.episode_pk, j.key, sum(j.value) FROM steps AS s, json_each(s.reward_parts) AS j
WHERE s.episode_pk = ? GROUP BY j.key
"""


class Store:
    """Read-write handle on one run directory. Open with :meth:`Store.open`.

    Safe to share between threads (one lock around each transaction) and to open
    from several processes at once (WAL, ``busy_timeout``, ``BEGIN IMMEDIATE``).
    ``fsync=True`` also survives power loss (fsync of every blob, ``synchronous=FULL``);
    the default survives a killed process, which is what a crashed worker does.
    """

    def __init__(self, run_dir: Path, con: sqlite3.Connection, blobs: BlobStore) -> None:
        self.run_dir = run_dir
        self.blobs = blobs
        self._con = con
        self._lock = threading.RLock()
        self._host = HOST
        self._me_pid, self._me_start = os.getpid(), process_start(os.getpid())
        self.recovered: list[str] = []
        """episode ids that :meth:`open` recovered (aborted) from dead writers"""

    @property
    def _pid(self) -> int:
        return os.getpid()

    @property
    def _start(self) -> int | None:
        """This process's start time; looked up again in a forked child (its PID differs)."""
        pid = os.getpid()
        if pid != self._me_pid:
            self._me_pid, self._me_start = pid, process_start(pid)
        return self._me_start

    @classmethod
    def open(cls, run_dir: str | os.PathLike[str], *, fsync: bool = False, recover: bool = True) -> "Store":
        """Open the store in ``run_dir``, creating the directory and schema if needed.

        With ``recover`` (the default) it first cleans up after dead writers
        (:meth:`recover` with its defaults): their open episodes become ``aborted``
        and their runs ``interrupted``, so every command that writes a store leaves
        it consistent. The aborted episode ids are in :attr:`recovered`.
        """
        run_dir = Path(run_dir)
        con = connect_rw(run_dir, fsync=fsync)
        store = cls(run_dir, con, BlobStore(run_dir / BLOBS_DIR, fsync=fsync))
        if recover:  # a file that opens but is corrupt further in fails here, closed
            with closed_on_error(store, f"{run_dir / 'store.sqlite'} is not a usable trajectory store"):
                store.recovered = store.recover()
        return store

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A short write transaction holding the write lock from its start."""
        with self._lock:
            self._con.execute("BEGIN IMMEDIATE")
            try:
                yield self._con
            except BaseException:
                if self._con.in_transaction:  # SQLite may have rolled it back itself (an interrupted statement)
                    self._con.execute("ROLLBACK")
                raise
            self._con.execute("COMMIT")

    # -- runs -------------------------------------------------------------------------------

    def create_run(self, name: str, *, env: str = "", algo: str = "", model: str = "",
                   config: Mapping[str, Any] | None = None, run_id: str | None = None) -> str:
        """Register a run (status ``running``, this process its writer) and return its id
        (a new hex id unless given; see :func:`check_run_id`)."""
        run_id = uuid.uuid4().hex[:16] if run_id is None else check_run_id(run_id)
        for what, value in (("name", name), ("env", env), ("algo", algo), ("model", model)):
            if not isinstance(value, str):
                raise StoreError(f"run {what} must be a string, got {type(value).__name__}")
        cfg = _codec.json_mapping(config, "config")
        now = time.time()
        try:
            with self._tx() as con:
                con.execute("INSERT INTO runs (id, name, env, algo, model, config, status, created_at, "
                            "updated_at, writer_host, writer_pid, writer_start, heartbeat) "
                            "VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                            (run_id, name, env, algo, model, cfg, now, now, self._host, self._pid,
                             self._start, now))
        except sqlite3.IntegrityError:
            raise StoreError(f"a run with id {run_id!r} already exists") from None
        return run_id

    def set_run_status(self, run_id: str, status: str) -> None:
        """Mark a run ``running``, ``finished``, ``failed`` or ``interrupted``.

        ``running`` also makes this process the run's writer (a resumed run), whose
        death :meth:`recover` and the readers recognise.
        """
        if status not in _RUN_STATUSES:
            raise StoreError(f"run status must be one of {_RUN_STATUSES}, got {status!r}")
        now = time.time()
        with self._tx() as con:
            if status == "running":
                cur = con.execute("UPDATE runs SET status = ?, updated_at = ?, heartbeat = ?, writer_host = ?, "
                                  "writer_pid = ?, writer_start = ? WHERE id = ?",
                                  (status, now, now, self._host, self._pid, self._start, run_id))
            else:
                cur = con.execute("UPDATE runs SET status = ?, updated_at = ?, heartbeat = ? WHERE id = ?",
                                  (status, now, now, run_id))
            if cur.rowcount == 0:
                raise RunNotFound(run_id)

    def _check_run(self, con: sqlite3.Connection, run_id: str) -> None:
        if con.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise RunNotFound(f"no run {run_id!r} in {self.run_dir}")

    def grouped_outcomes(self, run_id: str) -> list[tuple[str, str, str, float]]:
        """(group id, suite, task id, success) of the run's completed episodes that belong to a group, in
        the order they began: what a trainer's task sampling reads of its own earlier rollouts. A group
        member played again (an iteration a killed run had begun, run again on resume) counts once,
        as its last play."""
        with self._lock:
            rows = self._con.execute(
                "SELECT group_id, json_extract(metadata, '$.member'), suite, task_id, success FROM episodes "
                "WHERE run_id = ? AND status = 'completed' AND group_id IS NOT NULL ORDER BY pk", (run_id,)).fetchall()
        last: dict[Any, tuple[str, str, str, float]] = {}
        for k, (group_id, member, suite, task_id, success) in enumerate(rows):
            key = (group_id, member) if isinstance(member, int) else k
            last.pop(key, None)  # a later play moves to the end
            last[key] = (group_id, suite, task_id, success)
        return list(last.values())

    # -- episodes ---------------------------------------------------------------------------

    def begin_episode(self, run_id: str, spec: TaskSpec, agent: str = "", *, group_id: str | None = None,
                      episode_id: str | None = None, metadata: Mapping[str, Any] | None = None,
                      started_at: float | None = None) -> "EpisodeWriter":
        """Start an episode (hidden until completed or aborted) and return its writer."""
        if not isinstance(spec, TaskSpec):
            raise StoreError(f"spec must be a TaskSpec, got {type(spec).__name__}")
        episode_id = episode_id or uuid.uuid4().hex
        meta = dict(metadata or {})
        _codec.json_mapping(meta, "metadata")
        with self._tx() as con:
            pk = self._insert_episode(con, run_id, episode_id, spec, agent, group_id, meta,
                                      started_at or time.time())
        return EpisodeWriter(self, pk, episode_id, run_id, meta)

    def _insert_episode(self, con: sqlite3.Connection, run_id: str, episode_id: str, spec: TaskSpec,
                        agent: str, group_id: str | None, metadata: Mapping[str, Any],
                        started_at: float) -> int:
        self._check_run(con, run_id)
        now = time.time()
        try:
            cur = con.execute(
                "INSERT INTO episodes (id, run_id, group_id, suite, task_id, seed, goal, max_steps, params, "
                "agent, status, started_at, updated_at, writer_host, writer_pid, writer_start, metadata) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'in_progress', ?, ?, ?, ?, ?, ?)",
                (episode_id, run_id, group_id, spec.suite, spec.task_id, _codec.integer(spec.seed, "task seed"),
                 spec.goal, _codec.integer(spec.max_steps, "task max_steps"),
                 _codec.json_mapping(spec.params, "task params"), agent, started_at,
                 now, self._host, self._pid, self._start, _codec.json_mapping(metadata, "metadata")))
        except sqlite3.IntegrityError:
            raise StoreError(f"an episode with id {episode_id!r} already exists") from None
        con.execute(_RUN_HEARTBEAT, (now, run_id))
        return int(cur.lastrowid)

    def _finalize(self, con: sqlite3.Connection, pk: int, status: str, *, success: float,
                  reason: str | None, final_obs: str | None, metadata: Mapping[str, Any]) -> None:
        cur = con.execute(_FINALIZE, {"status": status, "reason": reason, "success": _codec.number(success, "success"),
                                      "now": time.time(), "final_obs": final_obs, "pk": pk,
                                      "metadata": _codec.json_mapping(metadata, "metadata")})
        if cur.rowcount != 1:
            raise EpisodeClosed(f"episode pk={pk} is no longer in progress (recovered as aborted?)")
        con.execute(_REWARD_TOTALS, (pk,))
        con.execute("UPDATE runs SET heartbeat = ? WHERE id = (SELECT run_id FROM episodes WHERE pk = ?)",
                    (time.time(), pk))

    def write_trajectory(self, run_id: str, traj: Trajectory, *, started_at: float | None = None) -> str:
        """Write a whole trajectory in one transaction; return its episode id."""
        return self.write_trajectories(run_id, [traj], started_at=started_at)[0]

    def write_trajectories(self, run_id: str, trajs: Iterable[Trajectory], *,
                           started_at: float | None = None) -> list[str]:
        """Write many trajectories in one transaction (bulk import); all or nothing."""
        prepared = []
        for traj in trajs:  # blobs and JSON first, so bad input fails before the transaction
            if not isinstance(traj, Trajectory):
                raise StoreError(f"expected a Trajectory, got {type(traj).__name__}")
            if traj.status not in ("completed", "aborted"):
                raise StoreError(f"trajectory status must be 'completed' or 'aborted', got {traj.status!r}")
            _check_indices(s.index for s in traj.steps)
            _codec.number(traj.success, "success")
            rows = [_codec.step_row(s, self.blobs) for s in traj.steps]
            prepared.append((traj, rows, _codec.obs_json(traj.final_observation, self.blobs)))
        with self._tx() as con:
            for traj, rows, final_obs in prepared:
                pk = self._insert_episode(con, run_id, traj.episode_id, traj.task, traj.agent, traj.group_id,
                                          traj.metadata, started_at or time.time())
                con.executemany(_INSERT_STEP, [(pk, *r) for r in rows])
                self._finalize(con, pk, traj.status, success=traj.success, reason=traj.abort_reason,
                               final_obs=final_obs, metadata=traj.metadata)
        return [t.episode_id for t, _, _ in prepared]

    def recover(self, older_than: float = STALE_S, *, dead_local_writers: bool = True) -> list[str]:
        """Clean up after dead writers: their episodes become ``aborted``, their runs
        ``interrupted``; return the ids of the episodes aborted.

        An episode counts as abandoned when its writer has not written for
        ``older_than`` seconds, or (``dead_local_writers``) when it was written from
        this host by a process that no longer exists (PID gone, or reused by a later
        process). Its steps so far become visible under status ``aborted``. A
        ``running`` run is interrupted on the same evidence about the process that
        created (or last resumed) it, or when nothing was written into it for
        ``older_than`` seconds. Also removes blob temp files older than
        ``older_than``. :meth:`open` runs it; readers never write.
        """
        now = time.time()
        with self._lock:
            rows = self._con.execute("SELECT pk, id, updated_at, writer_host, writer_pid, writer_start "
                                     "FROM episodes WHERE status = 'in_progress'").fetchall()
            runs = self._con.execute("SELECT id, heartbeat, writer_host, writer_pid, writer_start FROM runs "
                                     "WHERE status = 'running'").fetchall()
        done = []
        for pk, eid, updated, host, pid, start in rows:
            if updated < now - older_than:
                reason = f"recovered: no write for {now - updated:.0f} s"
            elif dead_local_writers and writer_alive(host, pid, start) is False:
                reason = f"recovered: writer process {pid} on {host} is gone"
            else:
                continue
            try:
                with self._tx() as con:
                    meta = _codec.loads(con.execute("SELECT metadata FROM episodes WHERE pk = ?",
                                                    (pk,)).fetchone()[0], {})
                    self._finalize(con, pk, "aborted", success=0.0, reason=reason, final_obs=None,
                                   metadata=meta)
                done.append(eid)
            except EpisodeClosed:  # its writer closed it meanwhile
                pass
        for run_id, beat, host, pid, start in runs:
            dead = dead_local_writers and writer_alive(host, pid, start) is False
            if dead or (beat is not None and beat < now - older_than):
                with self._tx() as con:  # only if still running: its writer may have just finished it
                    con.execute("UPDATE runs SET status = 'interrupted', updated_at = ? "
                                "WHERE id = ? AND status = 'running'", (now, run_id))
        self.blobs.clean_temp(older_than)
        return done

    def mark_damaged(self, bad: Mapping[str, Iterable[str]]) -> set[str]:
        """Mark closed episodes whose screenshots are missing or altered (``episode id -> blob refs``, what
        ``guiagent store check`` found) ``aborted`` with reason ``damaged: ...`` and success 0, so that no
        trainer, export or metric takes them as they were; what they were (status, success, reason) and
        the blobs go into their metadata under ``damaged``. Nothing is deleted. Episodes still in progress
        are left to :meth:`recover`. Returns the ids marked."""
        marked: set[str] = set()
        now = time.time()
        with self._tx() as con:
            for eid, refs in bad.items():
                row = con.execute("SELECT pk, status, success, abort_reason, metadata FROM episodes WHERE id = ?",
                                  (eid,)).fetchone()
                if row is None or row[1] == "in_progress":
                    continue
                pk, status, success, reason, meta_text = row
                try:
                    meta = _codec.loads(meta_text, {})
                except ValueError:
                    meta = {}
                meta = meta if isinstance(meta, dict) else {}
                blobs = sorted(set(refs))
                meta["damaged"] = {"status": status, "success": success, "abort_reason": reason, "blobs": blobs[:100],
                                   "marked_at": now}
                con.execute("UPDATE episodes SET status = 'aborted', abort_reason = ?, success = 0, metadata = ?, "
                            "updated_at = ? WHERE pk = ?",
                            (f"{DAMAGED_PREFIX}{len(blobs)} screenshot blob(s) missing or altered on disk",
                             _codec.dumps(meta, "metadata"), now, pk))
                marked.add(eid)
        return marked

    # -- judgements, metrics, blobs ---------------------------------------------------------

    def add_judgement(self, episode_id: str, judge: str, score: float | None, *, step: int | None = None,
                      verdict: Mapping[str, Any] | None = None, reason: str = "") -> int:
        """Record a judge's verdict on an episode (``step=None``) or one of its steps; return its id."""
        verdict_json = _codec.json_mapping(verdict, "verdict")
        if score is not None:
            score = float(score)
        with self._tx() as con:
            row = con.execute("SELECT pk FROM episodes WHERE id = ?", (episode_id,)).fetchone()
            if row is None:
                raise EpisodeNotFound(f"no episode {episode_id!r}")
            if step is not None and con.execute("SELECT 1 FROM steps WHERE episode_pk = ? AND idx = ?",
                                                (row[0], int(step))).fetchone() is None:
                raise StoreError(f"episode {episode_id!r} has no step {step}")
            cur = con.execute("INSERT INTO judgements (episode_pk, step, judge, score, verdict, reason, "
                              "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                              (row[0], step, judge, score, verdict_json, reason, time.time()))
            return int(cur.lastrowid)

    def log_metrics(self, run_id: str, iteration: int, values: Mapping[str, float], *,
                    time_s: float | None = None) -> None:
        """Record training metrics of one iteration; re-logging an iteration replaces its values."""
        now = time.time() if time_s is None else time_s
        rows = [(run_id, str(k), int(iteration), _codec.number(v, f"metric {k!r}"), now)
                for k, v in values.items()]
        with self._tx() as con:
            self._check_run(con, run_id)
            con.execute(_RUN_HEARTBEAT, (time.time(), run_id))
            con.executemany("INSERT OR REPLACE INTO metrics (run_id, name, iteration, value, time) "
                            "VALUES (?, ?, ?, ?, ?)", rows)

    def add_step_credit(self, rows: Iterable[tuple[str, int, float, float | None, float | None, Mapping[str, Any]]],
                        *, iteration: int, algo: str) -> int:
        """Record the credit a trainer gave to steps in one iteration: rows of ``(episode_id, step
        index, advantage, value or None, return or None, detail)``. Re-recording a (step,
        iteration) replaces it. Steps of episodes this store does not hold (a replay buffer's
        demonstrations from another run directory) are skipped; returns how many rows were written."""
        out = []
        pks: dict[str, int | None] = {}
        with self._tx() as con:
            for eid, idx, adv, value, ret, detail in rows:
                if eid not in pks:
                    row = con.execute("SELECT pk FROM episodes WHERE id = ?", (eid,)).fetchone()
                    pks[eid] = None if row is None else int(row[0])
                pk = pks[eid]
                if pk is None:
                    continue
                nums = [None if x is None else _codec.number(x, what) for x, what in
                        ((adv, "advantage"), (value, "value"), (ret, "return"))]
                if nums[0] is None or any(x is not None and not math.isfinite(x) for x in nums):
                    raise StoreError(f"step credit of {eid!r} step {idx} must be finite numbers, got {nums}")
                out.append((pk, int(idx), int(iteration), algo, *nums, _codec.json_mapping(detail, "credit detail")))
            con.executemany("INSERT OR REPLACE INTO step_credit (episode_pk, idx, iteration, algo, advantage, "
                            "value, ret, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", out)
        return len(out)

    def put_blob(self, data: bytes) -> str:
        """Store image bytes once; return their hash (for observations that carry only a ref)."""
        return self.blobs.put(data)[0]


class EpisodeWriter:
    """Appends the steps of one episode, then completes or aborts it.

    As a context manager it aborts the episode when the block raises (or ends
    without :meth:`complete`), and re-raises.
    """

    def __init__(self, store: Store, pk: int, episode_id: str, run_id: str, metadata: Mapping[str, Any]):
        self._store = store
        self._pk = pk
        self.episode_id = episode_id
        self.run_id = run_id
        self._metadata = dict(metadata)
        self._last_index: int | None = None
        self._beat = time.time()  # begin_episode beat the run just now
        self.closed = False

    def _check_open(self) -> None:
        if self.closed:
            raise EpisodeClosed(f"episode {self.episode_id} is already closed")

    def add_step(self, step: Step) -> None:
        """Append one step (its screenshot goes to ``blobs/``); indices must increase."""
        self._check_open()
        if self._last_index is not None and step.index <= self._last_index:
            raise StoreError(f"step index {step.index} after {self._last_index}: indices must increase")
        row = _codec.step_row(step, self._store.blobs)
        now = time.time()
        with self._store._tx() as con:
            con.execute(_INSERT_STEP, (self._pk, *row))
            con.execute("UPDATE episodes SET updated_at = ? WHERE pk = ?", (now, self._pk))
            if now - self._beat >= HEARTBEAT_S:
                con.execute(_RUN_HEARTBEAT, (now, self.run_id))
                self._beat = now
        self._last_index = step.index

    def _close(self, status: str, success: float, reason: str | None, final_observation: Observation | None,
               metadata: Mapping[str, Any] | None) -> None:
        self._check_open()
        final_obs = _codec.obs_json(final_observation, self._store.blobs)
        meta = {**self._metadata, **dict(metadata or {})}
        with self._store._tx() as con:
            self._store._finalize(con, self._pk, status, success=success, reason=reason,
                                  final_obs=final_obs, metadata=meta)
        self.closed = True

    def complete(self, success: float, final_observation: Observation | None = None,
                 metadata: Mapping[str, Any] | None = None) -> None:
        """Close the episode as ``completed`` (visible from now on). ``metadata`` is merged in."""
        self._close("completed", success, None, final_observation, metadata)

    def abort(self, reason: str, final_observation: Observation | None = None,
              metadata: Mapping[str, Any] | None = None) -> None:
        """Close the episode as ``aborted`` with ``reason`` (visible from now on)."""
        self._close("aborted", 0.0, str(reason), final_observation, metadata)

    def __enter__(self) -> "EpisodeWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.closed:
            return
        if exc_type is None:
            self.abort("episode writer closed without complete()")
        else:
            try:
                self.abort(f"{exc_type.__name__}: {exc}")
            except Exception:  # the original error matters more than a failed abort
                pass


def _check_indices(indices: Iterable[int]) -> None:
    last = None
    for i in indices:
        if last is not None and i <= last:
            raise StoreError(f"step index {i} after {last}: indices must increase")
        last = i

