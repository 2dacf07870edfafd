"""An RDB storage (SQLite, PostgreSQL) opened by many workers at once.

A Slurm array starts every task at the same instant, and each opens the same storage.
Optuna creates its tables and stamps the alembic version on first use, and two processes
doing that at once collide (optuna/optuna#1092, #4621: on SQLite "UNIQUE constraint
failed: alembic_version.version_num", on PostgreSQL "duplicate key value"). So:

- `creation_lock`: the first opening is serialized between workers: a lock beside a
  SQLite file (``<db>.lock``, an ``flock`` held by the process, released if it dies) or
  a PostgreSQL advisory lock, held until the creation is done (`created`); bounded
  (`LOCK_WAIT_S`), after which the retries below still hold;
- `retry_racing`: what fails with the errors of a concurrent creation (`RACE_ERRORS`)
  is tried again after a jittered backoff, bounded in attempts and in time;
- `immediate_transactions`: on SQLite, each transaction takes the write lock when it
  begins (``BEGIN IMMEDIATE``). Python's sqlite3 otherwise starts a transaction only at
  its first write, so Optuna's "is this trial still WAITING? then it is mine" runs
  unlocked, and two workers can both take the same enqueued trial (seen: a baseline
  measured by two workers, the second failing with "Cannot tell a COMPLETE trial").

Optuna and SQLAlchemy are imported on use.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# Errors that a worker sees when another creates the same tables, version rows or study
# at the same instant (PostgreSQL, SQLite), or holds SQLite's write lock too long: the
# same call succeeds once the other is done.
RACE_ERRORS = (
    "already exists",
    "duplicate key",
    "UNIQUE constraint failed",
    "database is locked",
    "deadlock detected",
)
# The retries of `retry_racing`: this many attempts at most, none started later than
# RACE_RETRY_S after the first; the backoff doubles from RACE_BACKOFF_S up to
# RACE_BACKOFF_MAX_S, each wait drawn at random between half and all of it, so that
# workers that collided once do not collide again.
RACE_ATTEMPTS = 8
RACE_RETRY_S = 60.0
RACE_BACKOFF_S = 0.1
RACE_BACKOFF_MAX_S = 4.0
# How long a worker waits for a lock another holds (the first creation, the study's
# lock beside a SQLite file) before it goes on without it, and how often it looks.
LOCK_WAIT_S = 120.0
LOCK_POLL_S = 0.05
# SQLite waits this long for another worker's write lock (Python's default is 5 s).
SQLITE_BUSY_TIMEOUT_S = 60.0
# The advisory lock key of a PostgreSQL database's first creation (one per database).
_PG_CREATION_KEY = int.from_bytes(
    hashlib.sha256(b"tftune: creating Optuna's tables").digest()[:8], "big", signed=True
)
# Threads of one process (`--workers N`) exclude each other here too: a file lock on
# NFS is a POSIX lock, which does not tell one process's threads apart.
_CREATING = threading.Lock()
_STUDY = threading.Lock()
_QUIET = threading.Lock()
# How far down an error's causes `racing` looks: Optuna wraps SQLAlchemy's error, which
# wraps the driver's.
_CAUSE_DEPTH = 8


def racing(exc: BaseException) -> bool:
    """Whether `exc`, or an error it was raised from, is one of `RACE_ERRORS`."""
    seen: BaseException | None = exc
    for _ in range(_CAUSE_DEPTH):
        if seen is None:
            return False
        if any(needle in str(seen) for needle in RACE_ERRORS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def retry_racing(
    call: Callable[[], T],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    draw: Callable[[float, float], float] = random.uniform,
) -> T:
    """`call()`, tried again while it fails with the errors of a concurrent creation
    (`racing`), within `RACE_ATTEMPTS` and `RACE_RETRY_S`; then its last error."""
    start = clock()
    for attempt in range(1, RACE_ATTEMPTS + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == RACE_ATTEMPTS or clock() - start >= RACE_RETRY_S or not racing(exc):
                raise
        backoff = min(RACE_BACKOFF_MAX_S, RACE_BACKOFF_S * 2 ** (attempt - 1))
        sleep(draw(backoff / 2, backoff))
    raise AssertionError("unreachable")


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite://`` URL (relative to the working directory, as
    SQLAlchemy reads it); None for another URL or an in-memory database."""
    if not url.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def is_postgresql(url: str) -> bool:
    return url.startswith("postgres")


@contextlib.contextmanager
def creation_lock(url: str) -> Iterator[None]:
    """Hold the lock of `url`'s first creation (see the module docstring); for other
    RDBs, only this process's threads are excluded (the retries do the rest)."""
    with _CREATING:
        path = sqlite_path(url)
        if path is not None:
            with _file_lock(Path(f"{path}.lock")):
                yield
        elif is_postgresql(url):
            with advisory_lock(url, _PG_CREATION_KEY, wait_s=LOCK_WAIT_S):
                yield
        else:
            yield


@contextlib.contextmanager
def sqlite_study_lock(path: Path) -> Iterator[None]:
    """The lock of the studies in the SQLite file `path` (`storage.study_lock`): an
    ``flock`` on ``<db>.study.lock``, released if its holder dies."""
    with _STUDY, _file_lock(Path(f"{path}.study.lock")):
        yield


def _poll(try_acquire: Callable[[], bool], wait_s: float) -> bool:
    """Call `try_acquire` until it succeeds or `wait_s` has passed; whether it did."""
    deadline = time.monotonic() + wait_s
    while not try_acquire():
        if time.monotonic() >= deadline:
            return False
        time.sleep(LOCK_POLL_S)
    return True


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on `path`, waited for at most `LOCK_WAIT_S`; where the
    file cannot be made (no such folder: the connection then fails with the reason),
    none."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the retries alone
        yield
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return

    def try_lock() -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    try:
        _poll(try_lock, LOCK_WAIT_S)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def advisory_lock(url: str, key: int, *, wait_s: float | None) -> Iterator[None]:
    """A PostgreSQL session advisory lock on `key` held on a connection of its own, for
    every worker on that database; `wait_s` None waits as long as it takes, else at most
    that long (then the block runs without it)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:

            def try_lock() -> bool:
                got = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"), {"k": key})
                conn.commit()
                return bool(got.scalar())

            if wait_s is None:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
                conn.commit()
                held = True
            else:
                held = _poll(try_lock, wait_s)
            try:
                yield
            finally:
                if held:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                    conn.commit()
    finally:
        engine.dispose()


def immediate_transactions(engine: Any) -> None:
    """Make every transaction of a SQLite `engine` take the write lock when it begins
    (SQLAlchemy's recipe for pysqlite), so that a read and the write that depends on it
    are one step for the other workers."""
    from sqlalchemy import event

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver's own BEGIN, off

    def on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)
    engine.dispose()  # connections made before the listeners go


def created(url: str, engine_kwargs: dict[str, Any]) -> bool:
    """Whether Optuna's first creation of `url` is done: its alembic version is stamped,
    which Optuna does last (after the tables and the version row)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool, **engine_kwargs)
    try:
        with engine.connect() as conn:
            if not sqlalchemy.inspect(conn).has_table("alembic_version"):
                return False
            stamps = conn.execute(sqlalchemy.text("SELECT count(*) FROM alembic_version"))
            return bool(stamps.scalar())
    finally:
        engine.dispose()


def open_rdb(url: str) -> Any:
    """An Optuna RDB storage for `url`, created safely when many workers open it at
    once; what still fails is raised as it came (the caller says it in one line).

    The lock is held only until the first creation is done: a worker that finds it done
    lets the next one in, then opens its storage without the lock."""
    import optuna

    sqlite = sqlite_path(url) is not None
    engine_kwargs: dict[str, Any] = (
        {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}} if sqlite else {}
    )

    def rdb_storage() -> Any:
        # The warnings filter is the process's: threads must not restore it under another.
        with _QUIET, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # heartbeats are "experimental" in Optuna
            # A heartbeat lets a later run mark a killed worker's trial failed.
            return optuna.storages.RDBStorage(
                url, engine_kwargs=engine_kwargs, heartbeat_interval=60, grace_period=180
            )

    def create() -> Any:
        with creation_lock(url):
            if not created(url, engine_kwargs):
                return rdb_storage()
        return rdb_storage()

    storage = retry_racing(create)
    if sqlite:
        immediate_transactions(storage.engine)
    return storage
