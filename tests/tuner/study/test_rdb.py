"""An RDB storage opened by many workers at once (`tuner/study/rdb.py`): which errors are a
concurrent creation's, the bounded jittered retries, the lock beside a SQLite file,
SQLite's transactions that take the write lock at once, and the one-line error of a
worker that still cannot connect. The crowd of real processes is
`test_crowd_start.py`."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tftune.tuner.study import rdb
from tftune.tuner.study.rdb import (
    RACE_ATTEMPTS,
    RACE_BACKOFF_MAX_S,
    RACE_BACKOFF_S,
    RACE_RETRY_S,
    creation_lock,
    open_rdb,
    racing,
    retry_racing,
    sqlite_path,
)
from tftune.tuner.study.storage import StorageError, open_storage


def _chained(outer: str, inner: str) -> Exception:
    try:
        try:
            raise RuntimeError(inner)
        except RuntimeError as exc:
            raise ValueError(outer) from exc
    except ValueError as exc:
        return exc


def test_a_concurrent_creations_errors_are_told_through_their_causes() -> None:
    assert racing(RuntimeError("UNIQUE constraint failed: alembic_version.version_num"))
    assert racing(RuntimeError('duplicate key value violates "pg_type_typname_nsp_index"'))
    assert racing(RuntimeError('relation "studies" already exists'))
    # Optuna wraps a locked SQLite file in a StorageInternalError about "the commit".
    assert racing(_chained("An exception is raised during the commit.", "database is locked"))
    assert not racing(RuntimeError("connection refused"))
    assert not racing(_chained("cannot connect", "no such host"))


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_retries_back_off_with_jitter_then_give_the_last_error() -> None:
    clock, calls = _Clock(), []

    def collide() -> None:
        calls.append(clock.now)
        raise RuntimeError(f"UNIQUE constraint failed (attempt {len(calls)})")

    with pytest.raises(RuntimeError, match=f"attempt {RACE_ATTEMPTS}"):
        retry_racing(collide, clock=clock, sleep=clock.sleep)
    assert len(calls) == RACE_ATTEMPTS and len(clock.sleeps) == RACE_ATTEMPTS - 1
    for i, s in enumerate(clock.sleeps):  # each a random share of a doubling backoff
        backoff = min(RACE_BACKOFF_MAX_S, RACE_BACKOFF_S * 2**i)
        assert backoff / 2 <= s <= backoff
    assert len(set(clock.sleeps)) > 1  # jittered


def test_retries_are_bounded_in_time_and_only_for_a_collision() -> None:
    clock = _Clock()
    calls: list[float] = []

    def slow_collide() -> None:
        calls.append(clock.now)
        clock.now += RACE_RETRY_S / 2  # each attempt waits long for the database
        raise RuntimeError("database is locked")

    with pytest.raises(RuntimeError, match="locked"):
        retry_racing(slow_collide, clock=clock, sleep=clock.sleep)
    assert len(calls) == 2  # the second ended past RACE_RETRY_S: no third

    def refused() -> None:
        calls.append(clock.now)
        raise RuntimeError("connection refused")

    calls.clear()
    with pytest.raises(RuntimeError, match="refused"):
        retry_racing(refused, clock=clock, sleep=clock.sleep)
    assert len(calls) == 1
    outcomes = iter([RuntimeError("already exists"), None])

    def then_fine() -> str:
        exc = next(outcomes)
        if exc is not None:
            raise exc
        return "opened"

    assert retry_racing(then_fine, clock=clock, sleep=clock.sleep) == "opened"


def test_the_database_file_of_a_sqlite_url() -> None:
    assert sqlite_path("sqlite:///shared.db") == Path("shared.db")  # relative to the cwd
    assert sqlite_path("sqlite:////abs/shared.db") == Path("/abs/shared.db")
    assert sqlite_path("sqlite:///x.db?timeout=30") == Path("x.db")
    assert sqlite_path("sqlite://") is None and sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("postgresql://u@h/db") is None


def test_the_first_creation_waits_for_the_lock_beside_a_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    # Another worker (another open file: flock tells them apart) is creating the tables.
    fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    order: list[str] = []

    def other_worker_done() -> None:
        time.sleep(0.3)
        order.append("other done")
        os.close(fd)

    t = threading.Thread(target=other_worker_done)
    t.start()
    with creation_lock(f"sqlite:///{db}"):
        order.append("this one creates")
    t.join()
    assert order == ["other done", "this one creates"]
    # A folder that does not exist: no lock, and the connection says why.
    with creation_lock(f"sqlite:///{tmp_path / 'no' / 'x.db'}"):
        pass
    with pytest.raises(StorageError, match="cannot connect") as err:
        open_storage(f"sqlite:///{tmp_path / 'no' / 'x.db'}")
    assert "\n" not in str(err.value)


def test_a_worker_that_keeps_colliding_says_why_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optuna
    import sqlalchemy

    attempts: list[str] = []

    def collides(url: str, **kw: Any) -> None:
        attempts.append(url)
        raise sqlalchemy.exc.IntegrityError(
            "INSERT INTO alembic_version", {}, Exception("UNIQUE constraint failed: x\nmore")
        )

    monkeypatch.setattr(optuna.storages, "RDBStorage", collides)
    monkeypatch.setattr(rdb, "RACE_BACKOFF_S", 0.001)
    monkeypatch.setattr(rdb, "RACE_BACKOFF_MAX_S", 0.002)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with pytest.raises(StorageError, match="cannot connect") as err:
        open_storage(url)
    assert len(attempts) == RACE_ATTEMPTS
    assert "UNIQUE constraint failed" in str(err.value) and "\n" not in str(err.value)


def test_sqlite_transactions_take_the_write_lock_when_they_begin(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    storage = open_rdb(f"sqlite:///{db}")
    try:
        with storage.engine.connect() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM studies").scalar()  # a read, only
            other = sqlite3.connect(db, timeout=0)
            try:
                # Another worker cannot start writing: this one's read holds the lock, so
                # what it writes next depends on what it read (a WAITING trial is its).
                with pytest.raises(sqlite3.OperationalError, match="locked"):
                    other.execute("BEGIN IMMEDIATE")
                conn.rollback()
                other.execute("BEGIN IMMEDIATE")
                other.rollback()
            finally:
                other.close()
    finally:
        storage.engine.dispose()
