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

import contextlib
import sqlite3
from pathlib import Path
from typing import Any, Iterator

from guiagent.store.errors import StoreError


@contextlib.contextmanager
def closed_on_error(resource: Any, what: str) -> Iterator[None]:
    """Close ``resource`` if the block fails; an SQLite error becomes ``StoreError("<what> (<error>)")``."""
    try:
        yield
    except sqlite3.Error as e:
        resource.close()
        raise StoreError(f"{what} ({e})") from None
    except BaseException:
        resource.close()
        raise


__all__ = ["SCHEMA_VERSION", "DB_NAME", "BLOBS_DIR", "connect_rw", "connect_ro", "db_path", "schema_version",
           "closed_on_error"]

#: 1: first release. 2: runs know their writer (host, pid, process start, heartbeat) and may be
#: ``interrupted``; episodes record their writer's process start (a recycled PID is not "alive").
#: 3: steps hold their observation's mark table (``steps.marks``, JSON; NULL: the screen had none).
SCHEMA_VERSION = 3
DB_NAME = "store.sqlite"
BLOBS_DIR = "blobs"
BUSY_TIMEOUT_MS = 30_000

_RUNS_COLUMNS = """(
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    env          TEXT NOT NULL DEFAULT '',
    algo         TEXT NOT NULL DEFAULT '',
    model        TEXT NOT NULL DEFAULT '',
    config       TEXT NOT NULL DEFAULT '{}',
    status       TEXT NOT NULL DEFAULT 'running'
                 CHECK (status IN ('running', 'finished', 'failed', 'interrupted')),
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL,
    writer_host  TEXT,                      -- who runs it (the process that created or resumed it)
    writer_pid   INTEGER,
    writer_start INTEGER,                   -- that process's start time (Linux clock ticks), or NULL
    heartbeat    REAL                       -- last write into the run by any process
)"""
_RUNS_V2 = "runs_v2 " + _RUNS_COLUMNS

_DDL = "CREATE TABLE IF NOT EXISTS runs " + _RUNS_COLUMNS + """;
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
    writer_start        INTEGER,            -- the writer's process start time (Linux clock ticks)
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
    marks               TEXT,               -- the observation's marks [{id, role, name, box}] JSON, or NULL
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

-- Per-step credit a trainer assigned (advantage, and the critic's value and return where the
-- algorithm has a critic), one row per (step, iteration): an episode replayed from a buffer
-- in several iterations has several. ``detail`` holds the method's parts (episode and step
-- advantages, anchor group size, AWR weight, ...).
CREATE TABLE IF NOT EXISTS step_credit (
    episode_pk  INTEGER NOT NULL REFERENCES episodes (pk) ON DELETE CASCADE,
    idx         INTEGER NOT NULL,
    iteration   INTEGER NOT NULL,
    algo        TEXT NOT NULL,
    advantage   REAL NOT NULL,
    value       REAL,
    ret         REAL,
    detail      TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (episode_pk, idx, iteration)
) WITHOUT ROWID;

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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the run directory {path.parent}: {e.strerror or e}") from None
    try:
        con = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                              timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open {path}: {e}") from None
    with closed_on_error(con, f"{path} is not a usable trajectory store"):
        con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if con.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
            raise StoreError(f"could not switch {path} to WAL mode (is it on a network filesystem?)")
        # NORMAL in WAL mode: a commit survives a killed process (it is in the WAL);
        # FULL also survives power loss at the cost of an fsync per commit.
        con.execute(f"PRAGMA synchronous = {'FULL' if fsync else 'NORMAL'}")
        if _check_version(con, path) < SCHEMA_VERSION:
            _migrate(con, path)
        _migrate_steps_metadata(con)
        _ensure_step_credit(con)
        con.execute("PRAGMA foreign_keys = ON")
    return con


def _check_version(con: sqlite3.Connection, path: Path) -> int:
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path} has schema version {version}; this guiagent knows {SCHEMA_VERSION}. "
                         "Upgrade guiagent.")
    return version


def _migrate(con: sqlite3.Connection, path: Path) -> None:
    """Create the schema (a new store) or bring an older one up to :data:`SCHEMA_VERSION`.

    Runs in one ``BEGIN IMMEDIATE`` transaction, so concurrent openers queue and the
    second finds the work done. Foreign keys are off meanwhile (SQLite's documented
    procedure for rebuilding a table that others reference), and checked before commit.
    """
    con.execute("PRAGMA foreign_keys = OFF")  # a no-op inside a transaction: set before BEGIN
    con.execute("BEGIN IMMEDIATE")
    try:
        version = _check_version(con, path)  # another process may have migrated meanwhile
        if version == 0:  # a new store: the current schema at once
            steps: list[str] = _statements(_DDL)
        else:
            steps = [stmt for v in range(version + 1, SCHEMA_VERSION + 1) for stmt in _MIGRATIONS[v]]
        for stmt in steps:
            con.execute(stmt)
        bad = con.execute("PRAGMA foreign_key_check").fetchall()
        if bad:
            raise StoreError(f"{path}: migration to schema {SCHEMA_VERSION} broke {len(bad)} foreign key(s)")
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:  # SQLite may have rolled it back itself (an interrupted statement)
            con.execute("ROLLBACK")
        raise


#: version -> statements that bring a store of version - 1 to it
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # SQLite cannot change a CHECK constraint in place: rebuild ``runs`` with the new status
    # and writer columns, copying every row (episodes and metrics keep referencing ``runs``).
    2: (
        "CREATE TABLE " + _RUNS_V2,
        "INSERT INTO runs_v2 (id, name, env, algo, model, config, status, created_at, updated_at, heartbeat) "
        "SELECT id, name, env, algo, model, config, status, created_at, updated_at, updated_at FROM runs",
        "DROP TABLE runs",
        "ALTER TABLE runs_v2 RENAME TO runs",
        "CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at)",
        "ALTER TABLE episodes ADD COLUMN writer_start INTEGER",
    ),
    # the numbered elements an element action names travel with the step (NULL in older rows: no marks)
    3: (
        "ALTER TABLE steps ADD COLUMN marks TEXT",
    ),
}


def schema_version(con: sqlite3.Connection) -> int:
    """The schema version of an open store (0: being created, not usable yet)."""
    return int(con.execute("PRAGMA user_version").fetchone()[0])


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
        if con.in_transaction:  # SQLite may have rolled it back itself (an interrupted statement)
            con.execute("ROLLBACK")
        raise


def _ensure_step_credit(con: sqlite3.Connection) -> None:
    """Add the ``step_credit`` table to a store created before it existed (checked on every
    writable open, like ``steps.metadata``; readers of an older store see no credit)."""
    def exists() -> bool:
        return con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'step_credit'"
                           ).fetchone() is not None

    if exists():
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        if not exists():
            for stmt in _statements(_DDL):
                if stmt.startswith("CREATE TABLE IF NOT EXISTS step_credit"):
                    con.execute(stmt)
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:  # SQLite may have rolled it back itself (an interrupted statement)
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
        raise StoreError(f"no trajectory store at {path} (not a run folder: guiagent eval, train and data import "
                         "make one; Store.open in Python)")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                              timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open {path}: {e}") from None
    with closed_on_error(con, f"{path} is not a readable trajectory store"):
        con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        con.execute("PRAGMA query_only = ON")
        version = _check_version(con, path)  # also fails at once on a file that is not a database
        if version == 0:
            empty = path.stat().st_size == 0
            raise StoreError(f"{path} is an empty file (0 bytes), not a trajectory store" if empty else
                             f"{path} is still being created (no schema yet)")
    return con

