"""SQLite schema and connection set-up of a run directory.

Layout of a run directory::

    run_dir/
      store.sqlite        (+ -wal, -shm while open: WAL mode)
      blobs/ab/abcdef....png

Times are Unix seconds (REAL). JSON columns hold ``json.dumps`` text. Episodes
have an integer ``pk`` (what steps, rewards and judgements point at, and the
tie-breaker of keyset pagination) and a public string ``id``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from guiagent.store.errors import StoreError

__all__ = ["SCHEMA_VERSION", "DB_NAME", "BLOBS_DIR", "connect_rw", "connect_ro", "db_path"]

SCHEMA_VERSION = 1
DB_NAME = "store.sqlite"
BLOBS_DIR = "blobs"
BUSY_TIMEOUT_MS = 30_000

_DDL = """
CREATE TABLE IF NOT EXISTS runs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    env         TEXT NOT NULL DEFAULT '',
    algo        TEXT NOT NULL DEFAULT '',
    model       TEXT NOT NULL DEFAULT '',
    config      TEXT NOT NULL DEFAULT '{}',
    status      TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'finished', 'failed')),
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at);

CREATE TABLE IF NOT EXISTS episodes (
    pk                  INTEGER PRIMARY KEY,
    id                  TEXT NOT NULL UNIQUE,
    run_id              TEXT NOT NULL REFERENCES runs (id),
    group_id            TEXT,
    suite               TEXT NOT NULL,
    task_id             TEXT NOT NULL,
    seed                INTEGER NOT NULL,
    goal                TEXT NOT NULL,
    max_steps           INTEGER NOT NULL,
    params              TEXT NOT NULL DEFAULT '{}',
    agent               TEXT NOT NULL DEFAULT '',
    policy_version_min  INTEGER,
    policy_version_max  INTEGER,
    status              TEXT NOT NULL CHECK (status IN ('in_progress', 'completed', 'aborted')),
    abort_reason        TEXT,
    success             REAL NOT NULL DEFAULT 0,
    total_reward        REAL NOT NULL DEFAULT 0,
    num_steps           INTEGER NOT NULL DEFAULT 0,
    num_parse_errors    INTEGER NOT NULL DEFAULT 0,
    started_at          REAL NOT NULL,
    ended_at            REAL,
    updated_at          REAL NOT NULL,      -- heartbeat of the writer while in progress
    writer_host         TEXT,
    writer_pid          INTEGER,
    final_obs           TEXT,               -- final Observation as JSON, pixels as a blob ref
    metadata            TEXT NOT NULL DEFAULT '{}'
);
-- One index per sort key of the episode list (the rowid pk is appended by SQLite,
-- which makes each one usable for keyset pagination), plus the common filters.
-- Partial on visibility: every read carries this exact term, so counts and pages
-- never touch the table to skip in-progress rows, and those rows stay out of the index.
CREATE INDEX IF NOT EXISTS episodes_run_started ON episodes (run_id, started_at)
    WHERE status != 'in_progress';
CREATE INDEX IF NOT EXISTS episodes_run_ended   ON episodes (run_id, ended_at) WHERE status != 'in_progress';
CREATE INDEX IF NOT EXISTS episodes_run_reward  ON episodes (run_id, total_reward)
    WHERE status != 'in_progress';
CREATE INDEX IF NOT EXISTS episodes_run_length  ON episodes (run_id, num_steps) WHERE status != 'in_progress';
CREATE INDEX IF NOT EXISTS episodes_run_success ON episodes (run_id, success) WHERE status != 'in_progress';
CREATE INDEX IF NOT EXISTS episodes_run_task    ON episodes (run_id, task_id, started_at)
    WHERE status != 'in_progress';
CREATE INDEX IF NOT EXISTS episodes_run_group   ON episodes (run_id, group_id) WHERE status != 'in_progress';
CREATE INDEX IF NOT EXISTS episodes_task        ON episodes (task_id, started_at)
    WHERE status != 'in_progress';
CREATE INDEX IF NOT EXISTS episodes_started     ON episodes (started_at) WHERE status != 'in_progress';
CREATE INDEX IF NOT EXISTS episodes_status      ON episodes (status, updated_at);

CREATE TABLE IF NOT EXISTS steps (
    episode_pk          INTEGER NOT NULL REFERENCES episodes (pk) ON DELETE CASCADE,
    idx                 INTEGER NOT NULL,
    screenshot          TEXT,               -- blob hash
    width               INTEGER NOT NULL,
    height              INTEGER NOT NULL,
    tree                TEXT,
    url                 TEXT,
    last_action_error   TEXT,
    response            TEXT NOT NULL,
    thought             TEXT NOT NULL,
    action              TEXT,               -- action_to_dict JSON, NULL when parsing failed
    parse_error         TEXT,               -- ParseError JSON
    action_error        TEXT,
    reward              REAL NOT NULL,
    reward_parts        TEXT NOT NULL,      -- {component: value} JSON
    milestones          TEXT NOT NULL,      -- [bool, ...] JSON
    terminated          INTEGER NOT NULL,
    truncated           INTEGER NOT NULL,
    policy_version      INTEGER NOT NULL,
    latency_ms          REAL NOT NULL,
    metadata            TEXT NOT NULL DEFAULT '{}',   -- step extras JSON (target_box, patched, ...)
    PRIMARY KEY (episode_pk, idx)
);
CREATE INDEX IF NOT EXISTS steps_screenshot ON steps (screenshot);

-- Per-episode totals of each reward component, filled when the episode closes:
-- lets the UI and trainers filter/aggregate by component without parsing step JSON.
CREATE TABLE IF NOT EXISTS episode_rewards (
    episode_pk  INTEGER NOT NULL REFERENCES episodes (pk) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    total       REAL NOT NULL,
    PRIMARY KEY (episode_pk, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS episode_rewards_name ON episode_rewards (name, total);

CREATE TABLE IF NOT EXISTS judgements (
    id          INTEGER PRIMARY KEY,
    episode_pk  INTEGER NOT NULL REFERENCES episodes (pk) ON DELETE CASCADE,
    step        INTEGER,                    -- NULL: a verdict on the whole episode
    judge       TEXT NOT NULL,
    score       REAL,
    verdict     TEXT NOT NULL DEFAULT '{}',
    reason      TEXT NOT NULL DEFAULT '',
    created_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS judgements_episode ON judgements (episode_pk, step);
CREATE INDEX IF NOT EXISTS judgements_judge ON judgements (judge);

-- Training curves. Re-logging (run, name, iteration) replaces the value, so a resumed
-- run that repeats an iteration does not create duplicate points.
CREATE TABLE IF NOT EXISTS metrics (
    run_id      TEXT NOT NULL REFERENCES runs (id),
    name        TEXT NOT NULL,
    iteration   INTEGER NOT NULL,
    value       REAL NOT NULL,
    time        REAL NOT NULL,
    PRIMARY KEY (run_id, name, iteration)
) WITHOUT ROWID;
"""


def db_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / DB_NAME


def connect_rw(run_dir: str | Path, *, fsync: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) the run's database for writing, schema applied.

    ``isolation_level=None``: the store issues ``BEGIN IMMEDIATE`` itself so that a
    writer takes the write lock up front and waits on ``busy_timeout`` instead of
    failing on a lock upgrade when another process writes at the same time.
    """
    path = db_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if con.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
        raise StoreError(f"could not switch {path} to WAL mode (is it on a network filesystem?)")
    # NORMAL in WAL mode: a commit survives a killed process (it is in the WAL);
    # FULL also survives power loss at the cost of an fsync per commit.
    con.execute(f"PRAGMA synchronous = {'FULL' if fsync else 'NORMAL'}")
    con.execute("PRAGMA foreign_keys = ON")
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        con.close()
        raise StoreError(f"{path} has schema version {version}; this guiagent knows {SCHEMA_VERSION}. "
                         "Upgrade guiagent.")
    if version < SCHEMA_VERSION:
        con.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _statements(_DDL):
                con.execute(stmt)
            con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    _migrate_steps_metadata(con)
    return con


def _migrate_steps_metadata(con: sqlite3.Connection) -> None:
    """Add ``steps.metadata`` to a store created before the column existed.

    Checked on every open (cheap: one PRAGMA) rather than tied to ``SCHEMA_VERSION``,
    so it composes with other migrations; the ALTER runs under the write lock and a
    second writer that raced it finds the column already there.
    """
    def has_column() -> bool:
        return any(r[1] == "metadata" for r in con.execute("PRAGMA table_info(steps)"))

    if has_column():
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        if not has_column():
            con.execute("ALTER TABLE steps ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _statements(script: str) -> list[str]:
    """Split the DDL into statements (it has no semicolons inside literals)."""
    lines = [ln.split("--", 1)[0] for ln in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def connect_ro(run_dir: str | Path) -> sqlite3.Connection:
    """Open the run's database read-only (``mode=ro``): a reader can never write."""
    path = db_path(run_dir)
    if not path.is_file():
        raise StoreError(f"no trajectory store at {path} (open it once with Store.open to create it)")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    con = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                          timeout=BUSY_TIMEOUT_MS / 1000)
    con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    con.execute("PRAGMA query_only = ON")
    return con

