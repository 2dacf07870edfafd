"""Where a study lives, and who is working on it.

Optuna's storage is the distributed engine: every worker (a thread here, a process on
another machine, a Slurm array task) asks the same study for its next trial. This module
opens it (`open_storage`: a journal file by default, or an RDB URL) and adds what Optuna
leaves to us:

- liveness: a running trial carries its worker (host, pid, process start time) and a
  heartbeat (`heartbeat`), so a later run marks a dead worker's trial failed
  (`fail_stale_trials`) and measures it once more (`retry_interrupted`);
- the budget: which trials count against ``--trials`` (`used`, `booked`), and waiting
  for other workers' running trials before the winner is chosen (`wait_for_others`);
- `study_lock`: a lock held across "does the study have trial X? if not, enqueue it", so
  two workers never enqueue the same baseline twice.

Optuna is imported on use.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tftune.core.errors import UserError
from tftune.tuner.option_defaults import DEFAULT_STORAGE_FILE as DEFAULT_STORAGE_FILE
from tftune.tuner.study.contract import Role
from tftune.tuner.study.rdb import (
    advisory_lock,
    is_postgresql,
    open_rdb,
    sqlite_path,
    sqlite_study_lock,
)

if TYPE_CHECKING:
    import optuna

# A running trial carries its worker (host, pid, process start time) and a heartbeat,
# refreshed this often. A later run marks a RUNNING trial failed when its worker process
# is gone (same host: at once) or its heartbeat is older than STALE_AFTER_S (another
# host, e.g. a preempted Slurm job). Works on every storage, the journal file included,
# where Optuna's own heartbeat (RDB only) does not.
# Both are a trial's system attributes (`internal_attr`), kept out of the user attributes
# that optuna-dashboard lists beside what was measured.
HEARTBEAT_S = 20.0
STALE_AFTER_S = 120.0
WORKER_ATTR = "tftune_worker"
HEARTBEAT_ATTR = "tftune_heartbeat"
# Set on a trial that was stopped (Ctrl-C, a dead worker) rather than finished; such a
# trial is measured again once (`RETRY_OF_ATTR` on the copy) and uses no budget.
INTERRUPTED_ATTR = "interrupted"
RETRY_OF_ATTR = "retry_of"
# Set on a search trial skipped for a dead knob value (`records.dead_values`): it never
# ran, so it uses no budget.
SKIPPED_ATTR = "skipped"
# Set on the as-written trial when a worker enqueues it (a system attribute:
# `enqueue_internal`): that worker (and thread) takes it next, and when it was queued.
# The others wait for it (`queued_by_another`): one that asked Optuna for it would get a
# new search trial whenever the enqueuer took it first, so workers started together ran
# search trials before the baselines, and with a small --trials left the baselines no
# room.
QUEUED_BY_ATTR = "queued_by"
# A RUNNING trial without a heartbeat and older than this is taken for a dead worker's:
# it no longer counts as "will finish" when workers share out the budget.
STALE_RUNNING_S = 3600.0
# Before choosing the winner, a worker waits this long at most for other workers'
# running trials, so that every worker reports the same, combined best.
OTHERS_WAIT_S = 900.0


class StorageError(UserError):
    """An Optuna storage URL that cannot be opened."""


# --- opening it ------------------------------------------------------------------------


def _redact(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        creds, _, host = rest.rpartition("@")
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


def open_storage(url: str | None) -> tuple[Any, str]:
    """An Optuna storage for `url` and its display name.

    ``None`` is a journal file in the working directory (`DEFAULT_STORAGE_FILE`): an
    append-only log with a lock file, which several processes (and Slurm array tasks on a
    shared filesystem) can use at once, unlike SQLite, whose locking fails on NFS. A path,
    or ``journal:PATH``, is such a file; anything with ``://`` is an RDB URL
    (``sqlite:///x.db``, ``postgresql://...``), created safely when many workers open it
    at once (`rdb.open_rdb`). An unreachable URL is a `StorageError`.
    """
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    if url is None or "://" not in url:
        path = DEFAULT_STORAGE_FILE if url is None else url.removeprefix("journal:")
        p = Path(path)
        if p.is_dir():
            raise StorageError(f"--storage {path}: is a directory, not a journal file")
        if not p.parent.exists() or not os.access(p.parent if str(p.parent) else ".", os.W_OK):
            raise StorageError(f"--storage {path}: cannot write into {p.parent or '.'}")
        try:
            backend = JournalFileBackend(str(p), lock_obj=JournalFileOpenLock(str(p)))
            return optuna.storages.JournalStorage(backend), str(p)
        except (OSError, ValueError) as exc:
            raise StorageError(f"--storage {path}: cannot open journal ({exc})") from None
    try:
        return open_rdb(url), _redact(url)
    except Exception as exc:  # sqlalchemy raises many kinds; all mean "unreachable"
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise StorageError(f"--storage {_redact(url)}: cannot connect ({first[:160]})") from None


# --- tftune's own bookkeeping on a trial ------------------------------------------------


def set_internal(storage: Any, trial_id: int, key: str, value: Any) -> None:
    """Set one of tftune's own attributes of a trial (a worker, a heartbeat, the
    constraint's value): a system attribute, which optuna-dashboard does not list among
    the user attributes, where what was measured is."""
    storage.set_trial_system_attr(trial_id, key, value)


def enqueue_internal(
    study: optuna.Study,
    params: Mapping[str, Any],
    user_attrs: Mapping[str, Any],
    internal: Mapping[str, Any],
) -> None:
    """`Study.enqueue_trial` (a WAITING trial whose `params` are fixed, which Optuna keeps
    as its ``fixed_params`` system attribute), with tftune's `internal` attributes among
    the system attributes too."""
    import optuna

    system = {"fixed_params": dict(params), **internal}
    waiting = optuna.trial.create_trial(
        state=optuna.trial.TrialState.WAITING, system_attrs=system, user_attrs=dict(user_attrs)
    )
    study.add_trial(waiting)


def internal_attr(t: Any, key: str, default: Any = None) -> Any:
    """One of tftune's own attributes of a stored trial (`set_internal`); a study that an
    earlier tftune wrote holds it among the user attributes, read there too."""
    if key in t.system_attrs:
        return t.system_attrs[key]
    return t.user_attrs.get(key, default)


# --- dead workers ----------------------------------------------------------------------


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), which tells a live
    worker from a later process that reuses its pid; None where /proc has no answer."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def this_worker() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _process_start(os.getpid())}


def queuer() -> dict[str, Any]:
    """`QUEUED_BY_ATTR`'s value for this worker thread, now."""
    return {**this_worker(), "thread": threading.get_ident(), "at": time.time()}


def queued_by_another(t: Any, now: float) -> bool:
    """Whether a WAITING trial was queued by another worker (or another thread of this
    one) that is alive, on another host: within STALE_AFTER_S of queueing it."""
    by = internal_attr(t, QUEUED_BY_ATTR)
    if not isinstance(by, dict):
        return False
    me = queuer()
    if all(by.get(k) == me[k] for k in ("host", "pid", "start", "thread")):
        return False
    alive = worker_alive(by)
    if alive is not None:
        return alive
    at = by.get("at")
    return isinstance(at, (int, float)) and now - at <= STALE_AFTER_S


def worker_alive(worker: Mapping[str, Any]) -> bool | None:
    """Whether the worker process that ran a trial is alive; None when it ran on another
    host (only its heartbeat can tell)."""
    if worker.get("host") != socket.gethostname():
        return None
    pid = worker.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, someone else's
    start = worker.get("start")
    return start is None or _process_start(pid) in (None, start)


def trial_alive(t: Any, now: float, unknown_after_s: float | None = None) -> bool:
    """Whether a RUNNING trial's worker is still at it: its process is alive (same host)
    or its heartbeat is recent. With neither to go by (a trial being set up, or one from
    before heartbeats), alive; or, given `unknown_after_s`, alive only while younger."""
    worker = internal_attr(t, WORKER_ATTR)
    alive = worker_alive(worker) if isinstance(worker, dict) else None
    if alive is not None:
        return alive
    beat = internal_attr(t, HEARTBEAT_ATTR)
    if isinstance(beat, (int, float)):
        return bool(now - beat <= STALE_AFTER_S)
    if unknown_after_s is None:
        return True
    return t.datetime_start is not None and now - t.datetime_start.timestamp() < unknown_after_s


@contextlib.contextmanager
def heartbeat(storage: Any, trial_id: int, every_s: float = HEARTBEAT_S) -> Any:
    """Mark `trial_id` as this worker's and refresh its heartbeat until the block ends."""
    set_internal(storage, trial_id, WORKER_ATTR, this_worker())
    set_internal(storage, trial_id, HEARTBEAT_ATTR, time.time())
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            with contextlib.suppress(Exception):  # a storage hiccup must not end the trial
                set_internal(storage, trial_id, HEARTBEAT_ATTR, time.time())

    thread = threading.Thread(target=beat, name="tftune-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def fail_stale_trials(study: optuna.Study, now: float | None = None) -> list[int]:
    """Mark failed every RUNNING trial whose worker died (kill -9, preemption), and queue
    it to be measured once more, as Optuna's `RetryFailedTrialCallback` does. Returns the
    trial numbers marked."""
    import optuna

    now = time.time() if now is None else now
    marked: list[int] = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if trial_alive(t, now):
            continue
        worker = internal_attr(t, WORKER_ATTR)
        who = f"pid {worker.get('pid')} on {worker.get('host')}" if isinstance(worker, dict) else ""
        try:
            study._storage.set_trial_user_attr(
                t._trial_id, "reason", f"interrupted: its worker ({who}) died".replace(" ()", "")
            )
            study._storage.set_trial_user_attr(t._trial_id, INTERRUPTED_ATTR, True)
            study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        except RuntimeError:  # another worker marked it first (UpdateFinishedTrialError)
            continue
        marked.append(t.number)
    return marked


def retry_interrupted(study: optuna.Study) -> list[int]:
    """Queue each interrupted trial (Ctrl-C, dead worker) for one more measurement with
    the same parameters and role, once. Returns the trial numbers queued again."""
    import optuna

    queued: list[int] = []
    retried = {
        t.user_attrs.get(RETRY_OF_ATTR)
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get(RETRY_OF_ATTR) is not None
    }
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)):
        ua = t.user_attrs
        if not ua.get(INTERRUPTED_ATTR) or t.number in retried or RETRY_OF_ATTR in ua:
            continue
        attrs = {RETRY_OF_ATTR: t.number, "role": ua.get("role", Role.SEARCH.value)}
        study.enqueue_trial(dict(t.params), user_attrs=attrs, skip_if_exists=False)
        queued.append(t.number)
    return queued


# --- the budget ------------------------------------------------------------------------


def finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    import optuna

    done = (
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
        optuna.trial.TrialState.FAIL,
    )
    return study.get_trials(deepcopy=False, states=done)


def used(study: optuna.Study) -> int:
    """Finished trials that count against ``--trials``: an interrupted one does not (it
    is measured again), nor a skipped one (it never ran)."""
    return sum(1 for t in finished(study) if not uncounted(t))


def uncounted(t: optuna.trial.FrozenTrial) -> bool:
    return bool(t.user_attrs.get(INTERRUPTED_ATTR) or t.user_attrs.get(SKIPPED_ATTR))


# --- the enqueue lock ------------------------------------------------------------------


@contextlib.contextmanager
def study_lock(storage: str | None, study_name: str) -> Iterator[None]:
    """Mutual exclusion between every worker of one study, on any machine.

    A journal file: an ``O_EXCL`` lock file next to it (NFS-safe, as Optuna's own).
    PostgreSQL: a session advisory lock keyed by the study name. SQLite: an ``flock``
    on a file next to the database (`rdb.sqlite_study_lock`). Other RDBs: none
    (enqueueing stays best effort there).
    """
    if storage is None or "://" not in storage:
        from optuna.storages.journal import JournalFileOpenLock

        path = DEFAULT_STORAGE_FILE if storage is None else storage.removeprefix("journal:")
        lock = JournalFileOpenLock(f"{path}.enqueue", grace_period=30)
        with _held(lock):
            yield
        return
    db_file = sqlite_path(storage)
    if db_file is not None:
        with sqlite_study_lock(db_file):
            yield
        return
    if is_postgresql(storage):
        key = int.from_bytes(hashlib.sha256(study_name.encode()).digest()[:8], "big", signed=True)
        with advisory_lock(storage, key, wait_s=None):
            yield
        return
    yield


@contextlib.contextmanager
def _held(lock: Any) -> Iterator[None]:
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


# --- other workers ---------------------------------------------------------------------


def _alive(t: Any, now: float) -> bool:
    """Whether a RUNNING trial will still finish (`trial_alive`); one with
    no worker or heartbeat to go by counts only while younger than STALE_RUNNING_S."""
    return trial_alive(t, now, STALE_RUNNING_S)


def booked(trials: Sequence[Any], now: float | None = None) -> int:
    """Trials that count against ``--trials``: finished ones (an interrupted one does not:
    it is measured again; a skipped one never ran), plus the running ones that will
    finish (`_alive`)."""
    import optuna

    ts = optuna.trial.TrialState
    now = time.time() if now is None else now
    done = (ts.COMPLETE, ts.PRUNED, ts.FAIL)
    return sum(
        1
        for t in trials
        if (t.state in done and not uncounted(t)) or (t.state is ts.RUNNING and _alive(t, now))
    )


def queued(trials: Sequence[Any], params: Mapping[str, Any]) -> bool:
    """Whether a trial waits in the study with exactly `params` (Optuna keeps an enqueued
    trial's params as its ``fixed_params`` until it runs)."""
    return any(
        t.state.name == "WAITING" and t.system_attrs.get("fixed_params") == dict(params)
        for t in trials
    )


def running_fresh(trials: Sequence[Any], now: float | None = None) -> int:
    """Running trials that will still finish (`_alive`)."""
    import optuna

    now = time.time() if now is None else now
    return sum(1 for t in trials if t.state is optuna.trial.TrialState.RUNNING and _alive(t, now))


def wait_for_others(
    get_trials: Callable[[], Sequence[Any]],
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    deadline: float | None,
    poll_s: float,
) -> None:
    """Wait (bounded, and never past `deadline`) until no other worker's trial runs."""
    waited = 0.0
    while waited < OTHERS_WAIT_S and (deadline is None or clock() < deadline):
        if running_fresh(get_trials()) == 0:
            return
        sleep(poll_s)
        waited += poll_s


def describe_storage_path(storage: str | None) -> Path | None:
    """The journal file behind `storage`, or None for an RDB URL."""
    if storage is None:
        return Path(DEFAULT_STORAGE_FILE)
    if "://" in storage:
        return None
    return Path(storage.removeprefix("journal:"))
