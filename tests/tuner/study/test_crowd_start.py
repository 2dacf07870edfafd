"""Workers started together on a new study (issue #41): eight real processes, held at a
barrier, open one fresh journal file, SQLite file or PostgreSQL database at the same
instant, ten times over. Every one must run to the end; the study must hold the trials asked
for, each number once, and each baseline enqueued once (`tests/crowd.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from crowd import STUDY, run_crowd

WORKERS = 8
ROUNDS = 10
TRIALS = 8
BASELINES = ("as_written", "autotune", "heuristic", "guided")


def _fresh_databases(server_url: str, prefix: str, n: int) -> list[str]:
    """`n` new, empty databases on the test server; their URLs."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for i in range(n):
                conn.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {prefix}{i}"))
                conn.execute(sqlalchemy.text(f"CREATE DATABASE {prefix}{i}"))
    finally:
        engine.dispose()
    base = server_url.rsplit("/", 1)[0]
    return [f"{base}/{prefix}{i}" for i in range(n)]


def _study_problems(url: str) -> list[str]:
    """What is wrong with one round's study, in words (nothing: [])."""
    import optuna

    from tftune.tuner.study import open_storage

    storage = open_storage(url)[0]
    try:
        trials = optuna.load_study(study_name=STUDY, storage=storage).get_trials()
    finally:
        if hasattr(storage, "engine"):  # an RDB: its connections go now
            storage.engine.dispose()
    problems: list[str] = []
    numbers = sorted(t.number for t in trials)
    if numbers != list(range(len(trials))):
        problems.append(f"trial numbers {numbers}")
    if not all(t.state.is_finished() for t in trials):
        problems.append(f"unfinished: {[t.number for t in trials if not t.state.is_finished()]}")
    # Workers that finish at the same instant may each start one last trial.
    if not TRIALS <= len(trials) <= TRIALS + WORKERS - 1:
        problems.append(f"{len(trials)} trials for --trials {TRIALS}")
    roles = [t.user_attrs.get("role") for t in trials]
    problems += [f"{roles.count(b)} {b} trials" for b in BASELINES if roles.count(b) != 1]
    if problems:  # the study as it was left, for the reader of a failure
        problems.append(str([(t.number, t.state.name, t.user_attrs.get("role")) for t in trials]))
    return problems


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["journal", "sqlite", "postgresql"])
def test_workers_started_together_on_a_new_study(kind: str, tmp_path: Path, request: Any) -> None:
    if kind == "journal":
        urls = [str(tmp_path / f"round{r}.journal") for r in range(ROUNDS)]
    elif kind == "sqlite":
        urls = [f"sqlite:///{tmp_path / f'round{r}.db'}" for r in range(ROUNDS)]
    else:
        urls = _fresh_databases(request.getfixturevalue("pg_url"), "crowd", ROUNDS)
    out = tmp_path / "results"
    out.mkdir()
    crowd = run_crowd(urls, out, workers=WORKERS, n_trials=TRIALS)
    failures = crowd.failures()
    assert not failures, f"{len(failures)} of {WORKERS * ROUNDS} worker runs failed:\n" + "\n".join(
        failures
    )
    assert crowd.exit_codes == (0,) * WORKERS
    problems = [f"round {r}: {p}" for r, url in enumerate(urls) for p in _study_problems(url)]
    assert not problems, "\n".join(problems)
