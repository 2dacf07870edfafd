"""Workers started together on a new study (issue #41): eight real processes, held at a
barrier, open one fresh journal file, SQLite file or PostgreSQL database at the same
instant, ten times over. Every one must run to the end; the study must hold the trials asked
for, each number once, and each baseline enqueued once (`tests/crowd.py`). And the
as-written trial one worker has just queued is left to it by the others."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from crowd import STUDY, run_crowd
from studykit import latency_bound, settings, space

from tftune.testing import FakeRunner
from tftune.tuner.study import Role, run_study
from tftune.tuner.study.storage import (
    QUEUED_BY_ATTR,
    STALE_AFTER_S,
    enqueue_internal,
    queued_by_another,
    queuer,
)

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


# --- the as-written trial another worker has just queued ---------------------------------


class _Queued:
    """A WAITING trial as `queued_by_another` reads it: its system attributes, or, as an
    earlier tftune queued it, its user attributes."""

    def __init__(self, by: dict[str, Any] | None, kept_as: str = "system") -> None:
        attrs = {} if by is None else {QUEUED_BY_ATTR: by}
        self.system_attrs = attrs if kept_as == "system" else {}
        self.user_attrs = attrs if kept_as == "user" else {}


def test_a_trial_queued_by_another_live_worker_is_left_to_it() -> None:
    now = time.time()
    assert queued_by_another(_Queued({**queuer(), "thread": -1}, "user"), now)
    me = queuer()
    assert not queued_by_another(_Queued(me), now)  # this worker takes its own
    assert not queued_by_another(_Queued(None), now)  # a retried one, an older tftune's
    assert queued_by_another(_Queued({**me, "thread": -1}), now)  # another thread, alive
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not queued_by_another(_Queued({**me, "pid": dead.pid, "start": None}), now)
    far = {"host": "elsewhere", "pid": 1, "thread": 1, "at": now - 1}
    assert queued_by_another(_Queued(far), now)  # another host: fresh
    assert not queued_by_another(_Queued(far), now + STALE_AFTER_S + 1)  # stale


def test_a_worker_waits_for_the_as_written_trial_another_queued(tmp_path: Path) -> None:
    # Asking Optuna for it would give this worker a new search trial whenever the other
    # took it first: workers started together ran search trials before the baselines.
    import optuna

    from tftune.tuner.study import open_storage

    sp = space()
    journal = str(tmp_path / "study.journal")
    study = optuna.create_study(
        storage=open_storage(journal)[0], study_name="t", direction="maximize"
    )
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        by = {**queuer(), "pid": other.pid, "start": None, "thread": 1}
        attrs = {"role": Role.AS_WRITTEN.value}
        enqueue_internal(study, sp.as_written_params(), attrs, {QUEUED_BY_ATTR: by})
        seen: list[list[str]] = []

        def sleep(_s: float) -> None:  # the other worker dies while this one waits
            seen.append([t.state.name for t in study.get_trials()])
            other.kill()
            other.wait()

        runner = FakeRunner(latency_bound)
        run_study(sp, runner, settings(tmp_path, n_trials=5), sleep=sleep)
    finally:
        other.kill()
        other.wait()
    assert seen[0] == ["WAITING"]  # it waited, and took no trial of its own meanwhile
    assert runner.configs[0].is_as_written()  # then measured the one left to it
    roles = [t.user_attrs.get("role") for t in study.get_trials()]
    assert roles[0] == Role.AS_WRITTEN.value and roles.count(Role.AS_WRITTEN.value) == 1
