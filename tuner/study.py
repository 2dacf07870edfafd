"""The Optuna study behind `tftune optimize`.

The study runs the user's script under sampled configs through a `Runner` (the
measured trial runner; tests inject a fake one). Its order is fixed:

1. the script as written (role ``as_written``): the reference every winner must beat;
2. AUTOTUNE everywhere, the #cores heuristic and the analysis-guided guess, enqueued;
3. TPE (multivariate, seeded) for the rest of the budget.

``--trials N`` is the number of finished trials the *study* should hold, so a resumed or
shared study (several workers on one storage) stops at N in total and never reruns a
finished trial. Trials that are clearly worse are pruned from the runner's per-repeat
throughput reports. The winner is the best *feasible* trial: one with at least the
as-written examples/s (TPE's constraint, and `choose_winner`'s guard). The search's
best figures are best-of-N and biased upwards, so a final round re-measures the few best
distinct trials beside the as-written, AUTOTUNE and heuristic baselines, one after the
other (the script as written both first and last, to see the run-to-run noise), and the
winner is chosen from that round alone (`choose_final`). If nothing beats the script as
written in it by more than the noise (`required_gain`), the winner is the
script as written: tftune never ends below it, and never recommends a change that does
not pay for itself. A close call (at least `MIN_GAIN`, but within the round's noise) is
settled by more runs of it and the script as written, alternately (`decide_close_call`).

A failed trial keeps the end of its stderr and what it says (`tuner.crashes`: the signal,
the fatal error, the native message, the last exception, the crashing thread's frames).
When the script crashes on its own (the script as written crashed too, or one crash
showed in configs that share no knob value), the outcome says so (`instability`) and no
knob value is blamed for its native crashes (`dead_values`).
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import math
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tftune.core.errors import ConfigError, ScriptError, UserError
from tftune.tuner.config import AUTOTUNE, Config
from tftune.tuner.crashes import (
    CrashSummary,
    Instability,
    Run,
    bounded_tail,
    find_instability,
    summarize_crash,
)
from tftune.tuner.parallel import booked, study_lock, wait_for_others
from tftune.tuner.space import KnobValue, SearchSpace

if TYPE_CHECKING:
    import optuna

# Prune a searched trial once a repeat's throughput is below this fraction of the best
# complete trial (throughput objective) ...
PRUNE_BELOW_BEST = 0.5
# ... or, for utilization objectives, below this fraction of the as-written rate: such a
# trial would be infeasible anyway (a winner may never lose examples/s).
PRUNE_BELOW_AS_WRITTEN = 0.8
# TPE's random start-up trials, counting the enqueued baselines: small, because the
# budget is small and the baselines already cover the corners of the space.
TPE_STARTUP_TRIALS = 6
# The guided guess calls a run input-bound when the consumer waits at least this share.
INPUT_BOUND_SHARE = 0.1
MAX_GUIDED_PARALLELISM = 64
DEFAULT_STORAGE_FILE = "tftune-study.journal"
# Another worker measuring the as-written trial is waited for this long, polling; after
# that (a killed worker's trial stays RUNNING in a journal file) it is measured again.
AS_WRITTEN_WAIT_S = 600.0
AS_WRITTEN_POLL_S = 2.0
# A failing as-written trial is retried this often before the script is declared broken
# (the first may fail for a transient reason, e.g. an OOM caused by another job).
AS_WRITTEN_ATTEMPTS = 2
# The final round re-measures this many of the best distinct trials, beside the
# as-written, AUTOTUNE and #cores-heuristic baselines, and picks the winner from it.
FINAL_CANDIDATES = 3
# ... and recommends a change only if it gains at least this much over the script as
# written in that round (more where the measurements are noisier: `required_gain`).
MIN_GAIN = 0.03
# A close call (the final round's best gains at least MIN_GAIN but less than the noise
# demands) is decided by this many more runs of it and of the script as written,
# alternately (`decide_close_call`): a change then needs a Welch t of at least
# DECIDE_T over all runs of the two, as well as MIN_GAIN.
DECIDE_PAIRS = 2
DECIDE_T = 2.0
# Opening an RDB storage is retried this often (see `open_storage`).
RDB_CREATE_ATTEMPTS = 4
DEFAULT_TRIALS = 20
DEFAULT_SEED = 0
# A running trial carries its worker (host, pid, process start time) and a heartbeat,
# refreshed this often. A later run marks a RUNNING trial failed when its worker process
# is gone (same host: at once) or its heartbeat is older than STALE_AFTER_S (another
# host, e.g. a preempted Slurm job). Works on every storage, the journal file included,
# where Optuna's own heartbeat (RDB only) does not.
HEARTBEAT_S = 20.0
STALE_AFTER_S = 120.0
WORKER_ATTR = "tftune_worker"
HEARTBEAT_ATTR = "tftune_heartbeat"
# Set on a trial that was stopped (Ctrl-C, a dead worker) rather than finished; such a
# trial is measured again once (`RETRY_OF_ATTR` on the copy) and uses no budget.
INTERRUPTED_ATTR = "interrupted"
# A trial whose script failed (crash, OOM, stall, NaN) is stored as PRUNED with this set:
# see the objective in `run_study`.
FAILED_ATTR = "failed"
RETRY_OF_ATTR = "retry_of"
# A knob value that made DEAD_AFTER trials fail while no trial with it ran through (say,
# a 16-bit policy the script's loss code cannot take) is not measured again: a search
# trial that samples it is skipped at once, stored like a failed trial with SKIPPED_ATTR,
# and does not count against --trials (at most --trials skips per run, so that a sampler
# stuck on it cannot spin).
DEAD_AFTER = 2
SKIPPED_ATTR = "skipped"
# A failed trial keeps the end of its stderr (`crashes.bounded_tail`) and what it says
# (`crashes.CrashSummary.to_json`). When the script crashes on its own
# (`crashes.find_instability`: the script as written crashed too, or one crash showed in
# configs that share no knob value), a native crash is no knob value's fault, and
# `dead_values` does not count it.
STDERR_TAIL_ATTR = "stderr_tail"
CRASH_ATTR = "crash"


class Objective(str, enum.Enum):
    THROUGHPUT = "throughput"
    GPU_UTIL = "gpu-util"
    BOTH = "both"


class Role(str, enum.Enum):
    """Why a trial ran."""

    AS_WRITTEN = "as_written"
    AUTOTUNE = "autotune"
    HEURISTIC = "heuristic"
    GUIDED = "guided"
    SEARCH = "search"
    CONFIRM = "confirm"


class State(str, enum.Enum):
    COMPLETE = "complete"
    PRUNED = "pruned"
    FAILED = "failed"


class Mode(str, enum.Enum):
    """What a trial measures: the script training (``train``), the dataset iterated
    without training (``pipeline_only``), or training on cached data (``model_only``)."""

    TRAIN = "train"
    PIPELINE_ONLY = "pipeline_only"
    MODEL_ONLY = "model_only"


@dataclass(frozen=True, slots=True)
class Measurement:
    """What one run of the script under one config achieved. ``None`` is "not measured"
    (never 0): `reason` says why when the state is not complete."""

    state: State
    examples_per_s: float | None = None
    utilization: float | None = None
    utilization_kind: str = "duty_cycle"
    spread: float | None = None
    input_wait_share: float | None = None
    repeats: tuple[float, ...] = ()
    reason: str | None = None
    wall_s: float = 0.0
    notes: tuple[str, ...] = ()  # what the script's run said (e.g. a 16-bit output layer)
    # A failed run's end of stderr and exit status (negative: the signal that killed it).
    stderr_tail: str = ""
    returncode: int | None = None

    def failure(self) -> tuple[str, CrashSummary | None]:
        """(the end of stderr to keep, what it says) for a failed run; ("", None) else."""
        if self.state is not State.FAILED and self.examples_per_s is not None:
            return "", None
        return bounded_tail(self.stderr_tail), summarize_crash(self.stderr_tail, self.returncode)


RepeatCallback = Callable[[int, float], bool]


class Runner:
    """Runs the user's script once under a config and measures it.

    Contract: the study calls `measure` once per trial, sequentially, from one thread.
    `measure` must not raise for a failing script: a crash, OOM, stall or NaN loss is a
    `Measurement` with ``state=FAILED``, a reason and, where it has them, the end of the
    script's stderr and its exit status (the study reads the crash from them). After each
    measured repeat it calls ``on_repeat(index, examples_per_s)``; when that returns False
    it stops the script and returns ``state=PRUNED`` with the repeats so far. ``mode``
    selects what is measured (`Mode`); a runner that cannot measure a mode returns FAILED
    with the reason.
    """

    gpu_visible: bool = False

    def measure(
        self,
        config: Config,
        *,
        mode: Mode = Mode.TRAIN,
        on_repeat: RepeatCallback | None = None,
    ) -> Measurement:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class TrialRecord:
    """One finished trial as the emitter and the progress display see it."""

    number: int
    role: Role
    state: State
    params: Mapping[str, KnobValue]
    description: str
    examples_per_s: float | None = None
    utilization: float | None = None
    spread: float | None = None
    input_wait_share: float | None = None
    repeats: tuple[float, ...] = ()
    reason: str | None = None
    wall_s: float = 0.0
    feasible: bool = False
    notes: tuple[str, ...] = ()
    stderr_tail: str = ""  # a failed trial's, bounded (`crashes.bounded_tail`)
    crash: CrashSummary | None = None  # what a failed trial's stderr says


@dataclass(frozen=True, slots=True)
class StudySettings:
    objective: Objective = Objective.THROUGHPUT
    n_trials: int = DEFAULT_TRIALS
    timeout_s: float | None = None
    seed: int = DEFAULT_SEED
    guided: bool = True
    storage: str | None = None
    study_name: str = "tftune"
    confirm: bool = True
    # How many of the best distinct trials the final round re-measures beside the
    # baselines (see `final_candidates`).
    final_candidates: int = FINAL_CANDIDATES
    # More alternating runs of a close call and the script as written (0: none).
    decide_pairs: int = DECIDE_PAIRS
    # What is tuned (script and its arguments): a study resumed for another target
    # would mix incomparable measurements, so it is refused.
    target: str = ""
    hint: GuidedHint | None = None


@dataclass(frozen=True, slots=True)
class StudyOutcome:
    """Everything `optimize` measured, frozen for the emitter."""

    study_name: str
    storage: str
    objective: Objective
    utilization_kind: str
    records: tuple[TrialRecord, ...]
    baselines: Mapping[Role, TrialRecord]
    best: TrialRecord
    best_config: Config
    confirm: TrialRecord | None  # the winner's figure from the final round
    pareto: tuple[TrialRecord, ...]
    importances: Mapping[str, float]
    wall_s: float
    ran_this_session: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The final round: role CONFIRM, `number` the trial each one re-measures.
    final: tuple[TrialRecord, ...] = ()
    # The script crashes whatever the config (`crashes.find_instability`), else None.
    instability: Instability | None = None

    def remeasured(self, r: TrialRecord | None) -> TrialRecord | None:
        """`r`'s figure from the final round where it has one (side by side with the
        winner's), else `r` itself."""
        if r is None:
            return None
        again = next((f for f in self.final if f.number == r.number), None)
        return again if again is not None and again.state is State.COMPLETE else r

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in State}
        for r in self.records:
            out[r.state.value] += 1
        return out


class StorageError(UserError):
    """An Optuna storage URL that cannot be opened."""


# --- storage ------------------------------------------------------------------------


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
    (``sqlite:///x.db``, ``postgresql://...``). An unreachable URL is a `StorageError`.
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
    for attempt in range(RDB_CREATE_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # heartbeats are "experimental" in Optuna
                # A heartbeat lets a later run mark a killed worker's trial failed.
                storage = optuna.storages.RDBStorage(url, heartbeat_interval=60, grace_period=180)
            return storage, _redact(url)
        except Exception as exc:  # sqlalchemy raises many kinds; all mean "unreachable"
            text = str(exc)
            # Workers starting together on an empty database race to create Optuna's
            # tables; the losers see a duplicate and find the tables there when retried.
            if attempt + 1 < RDB_CREATE_ATTEMPTS and (
                "already exists" in text or "duplicate key" in text
            ):
                time.sleep(0.5 * (attempt + 1))
                continue
            first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
            raise StorageError(
                f"--storage {_redact(url)}: cannot connect ({first[:160]})"
            ) from None
    raise AssertionError("unreachable")


# --- dead workers ------------------------------------------------------------------


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
    worker = t.user_attrs.get(WORKER_ATTR)
    alive = worker_alive(worker) if isinstance(worker, dict) else None
    if alive is not None:
        return alive
    beat = t.user_attrs.get(HEARTBEAT_ATTR)
    if isinstance(beat, (int, float)):
        return bool(now - beat <= STALE_AFTER_S)
    if unknown_after_s is None:
        return True
    return t.datetime_start is not None and now - t.datetime_start.timestamp() < unknown_after_s


@contextlib.contextmanager
def heartbeat(storage: Any, trial_id: int, every_s: float = HEARTBEAT_S) -> Any:
    """Mark `trial_id` as this worker's and refresh its heartbeat until the block ends."""
    storage.set_trial_user_attr(trial_id, WORKER_ATTR, this_worker())
    storage.set_trial_user_attr(trial_id, HEARTBEAT_ATTR, time.time())
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            with contextlib.suppress(Exception):  # a storage hiccup must not end the trial
                storage.set_trial_user_attr(trial_id, HEARTBEAT_ATTR, time.time())

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
        worker = t.user_attrs.get(WORKER_ATTR)
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


# --- guided guess -------------------------------------------------------------------


def _pow2_at_least(n: float) -> int:
    return int(2 ** math.ceil(math.log2(max(1.0, n))))


def baseline_params(space: SearchSpace, role: Role, cores: int) -> dict[str, KnobValue]:
    """The parameters of the enqueued baselines (AUTOTUNE everywhere, #cores heuristic)."""
    if role is Role.AS_WRITTEN:
        return space.as_written_params()
    if role is Role.AUTOTUNE:
        want: dict[str, KnobValue] = {
            "num_parallel_calls": AUTOTUNE,
            "cycle_length": AUTOTUNE,
            "buffer_size": AUTOTUNE,
            "final_prefetch": AUTOTUNE,
        }
        return space.params_for(want)
    if role is Role.HEURISTIC:
        want = {
            "num_parallel_calls": cores,
            "cycle_length": cores,
            "buffer_size": AUTOTUNE,
            "final_prefetch": AUTOTUNE,
        }
        return space.params_for(want)
    raise ValueError(role)


@dataclass(frozen=True, slots=True)
class GuidedHint:
    """What a profile of the script as written says (`tftune analyze` on a short
    `tftune profile`): the input share and the call sites of the bottleneck stages."""

    input_share: float | None
    bottleneck_sites: tuple[str, ...] = ()
    source: str = "profile"


def _site_matches(knob_site: str | None, hinted: Sequence[str]) -> bool:
    if knob_site is None:
        return False
    return any(knob_site == h or knob_site.endswith("/" + h) for h in hinted)


def guided_params(
    space: SearchSpace, as_written: TrialRecord, cores: int, hint: GuidedHint | None = None
) -> tuple[dict[str, KnobValue], str]:
    """A first guess from the profile of the script as written (`hint`), or else from
    the as-written trial's input-wait share.

    Input-bound (the consumer waits a share w of its time): the pipeline must deliver
    1/(1-w) times faster, so its parallelism is raised by that factor (power of two, at
    most 64), the private thread pool is sized to match (AUTOTUNE never exceeds the pool)
    and every buffer is AUTOTUNE. With a profile, only the bottleneck's call sites get
    that parallelism; the other parallel sites get AUTOTUNE. Not input-bound: the pipeline
    is fine; keep AUTOTUNE and try the platform's 16-bit policy, where one is in the space.
    """
    from_profile = hint is not None and hint.input_share is not None
    w = hint.input_share if hint is not None and from_profile else as_written.input_wait_share
    source = "the profile" if from_profile else "the as-written trial"
    if w is None:
        return baseline_params(space, Role.AUTOTUNE, cores), "no input-wait share: AUTOTUNE"
    if w >= INPUT_BOUND_SHARE:
        factor = 1.0 / max(1e-3, 1.0 - w)
        written = [
            k.as_written
            for k in space.knobs
            if k.field == "num_parallel_calls" and isinstance(k.as_written, int)
        ]
        base = max([1, *[p for p in written if p != AUTOTUNE]])
        par = min(MAX_GUIDED_PARALLELISM, _pow2_at_least(base * factor))
        par = max(par, cores)
        want: dict[str, KnobValue] = {
            "num_parallel_calls": par,
            "cycle_length": par,
            "buffer_size": AUTOTUNE,
            "final_prefetch": AUTOTUNE,
            "threadpool_size": max(par, cores),
        }
        params = space.params_for(want)
        targets = hint.bottleneck_sites if hint is not None and from_profile else ()
        if targets and any(_site_matches(k.site, targets) for k in space.knobs):
            for k in space.knobs:
                if k.field == "num_parallel_calls" and not _site_matches(k.site, targets):
                    params[k.name] = space.nearest(k, AUTOTUNE)
            where = f" at {', '.join(targets)}"
        else:
            where = ""
        why = (
            f"input-bound ({w:.0%} wait, from {source}): parallelism {par}{where}, "
            f"thread pool {max(par, cores)}"
        )
        return params, why
    params = baseline_params(space, Role.AUTOTUNE, cores)
    for k in space.knobs:
        if k.field == "mixed_precision":
            params[k.name] = next(c for c in k.choices if c is not None)
    return params, f"not input-bound ({w:.0%} wait, from {source}): AUTOTUNE and 16-bit precision"


# --- winner -------------------------------------------------------------------------


def _score(r: TrialRecord, objective: Objective) -> tuple[float, float]:
    eps = r.examples_per_s or 0.0
    util = r.utilization if r.utilization is not None else -1.0
    if objective is Objective.GPU_UTIL:
        return (util, eps)
    return (eps, util)


def pareto_front(records: Sequence[TrialRecord]) -> tuple[TrialRecord, ...]:
    """Records not dominated in (examples/s, utilization)."""
    pts = [r for r in records if r.examples_per_s is not None]
    front = []
    for r in pts:
        a = (r.examples_per_s or 0.0, r.utilization or 0.0)
        dominated = False
        for o in pts:
            b = (o.examples_per_s or 0.0, o.utilization or 0.0)
            if b[0] >= a[0] and b[1] >= a[1] and b != a:
                dominated = True
                break
        if not dominated:
            front.append(r)
    return tuple(sorted(front, key=lambda r: -(r.examples_per_s or 0.0)))


def choose_winner(
    records: Sequence[TrialRecord], as_written: TrialRecord, objective: Objective
) -> TrialRecord:
    """The best complete trial that does not lose examples/s against the script as
    written; the as-written trial itself when none does. For ``both``, the front's
    member with the most examples/s (every front member is non-dominated)."""
    floor = as_written.examples_per_s or 0.0
    feasible = [
        r
        for r in records
        if r.state is State.COMPLETE
        and r.examples_per_s is not None
        and r.examples_per_s >= floor
        and r.role is not Role.CONFIRM
    ]
    if not feasible:
        return as_written
    if objective is Objective.BOTH:
        return pareto_front(feasible)[0]
    return max(feasible, key=lambda r: _score(r, objective))


def _gain(r: TrialRecord, base: TrialRecord, objective: Objective) -> float | None:
    """`r`'s relative gain over `base` in the objective's primary figure."""
    if objective is Objective.GPU_UTIL and r.utilization and base.utilization:
        return r.utilization / base.utilization - 1.0
    if r.examples_per_s is None or not base.examples_per_s:
        return None
    return r.examples_per_s / base.examples_per_s - 1.0


def required_gain(r: TrialRecord, base: TrialRecord, run_noise: float = 0.0) -> float:
    """What a config must gain over the script as written to be recommended: more than
    `MIN_GAIN`, more than the two measurements' noise (half their average spread between
    windows), and more than `run_noise`, the difference between two runs of the script
    as written in the same round. A change that does not pay for itself is not worth
    making."""
    return max(MIN_GAIN, ((r.spread or 0.0) + (base.spread or 0.0)) / 4, run_noise)


def final_candidates(
    records: Sequence[TrialRecord], as_written: TrialRecord, objective: Objective, k: int
) -> list[TrialRecord]:
    """What the final round re-measures: the script as written, AUTOTUNE everywhere and
    the #cores heuristic (those that completed), then the `k` best feasible trials whose
    params differ from everything already listed."""
    out: list[TrialRecord] = [as_written]
    for role in (Role.AUTOTUNE, Role.HEURISTIC):
        r = next((x for x in records if x.role is role and x.state is State.COMPLETE), None)
        if r is not None:
            out.append(r)
    floor = as_written.examples_per_s or 0.0
    ranked = sorted(
        (
            r
            for r in records
            if r.state is State.COMPLETE
            and r.role is not Role.CONFIRM
            and (r.examples_per_s or 0.0) >= floor
        ),
        key=lambda r: _score(r, objective),
        reverse=True,
    )
    seen = [dict(r.params) for r in out]
    added = 0
    for r in ranked:
        if added >= k:
            break
        if dict(r.params) in seen:
            continue
        seen.append(dict(r.params))
        out.append(r)
        added += 1
    return out


def final_round(
    candidates: Sequence[TrialRecord],
    runner: Runner,
    space: SearchSpace,
    on_note: Callable[[str], None] | None = None,
) -> tuple[TrialRecord, ...]:
    """Each candidate measured once more, one after the other, as role CONFIRM."""
    out: list[TrialRecord] = []
    for c in candidates:
        m = runner.measure(space.config(c.params, apply_fixed=c.role is not Role.AS_WRITTEN))
        if on_note is not None:
            figure = (
                f"{m.examples_per_s:,.1f} ex/s"
                if m.state is State.COMPLETE and m.examples_per_s is not None
                else f"{m.state.value}: {m.reason or ''}".strip()
            )
            on_note(f"  trial {c.number} ({c.role.value}) again: {figure}  [{c.description}]")
        tail, crash = m.failure()
        out.append(
            TrialRecord(
                number=c.number,
                role=Role.CONFIRM,
                state=m.state,
                params=c.params,
                description=c.description,
                examples_per_s=m.examples_per_s,
                utilization=m.utilization,
                spread=m.spread,
                input_wait_share=m.input_wait_share,
                repeats=m.repeats,
                reason=m.reason,
                wall_s=m.wall_s,
                notes=m.notes,
                stderr_tail=tail,
                crash=crash,
            )
        )
    return tuple(out)


def pool_runs(runs: Sequence[TrialRecord]) -> TrialRecord:
    """Several completed runs of one config as one record: the mean figures, every
    window's rate, the largest spread and the summed wall time."""
    first = runs[0]
    if len(runs) == 1:
        return first

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    return replace(
        first,
        examples_per_s=mean([r.examples_per_s for r in runs]),
        utilization=mean([r.utilization for r in runs]),
        input_wait_share=mean([r.input_wait_share for r in runs]),
        spread=max(r.spread or 0.0 for r in runs),
        repeats=tuple(x for r in runs for x in r.repeats),
        wall_s=sum(r.wall_s for r in runs),
    )


def merge_as_written(
    final: Sequence[TrialRecord], as_written: TrialRecord
) -> tuple[tuple[TrialRecord, ...], float]:
    """(the final round with the as-written runs, at its start and end, merged into one
    record with their mean; the run-to-run noise: the two runs' difference relative to
    their mean, 0 when fewer than two completed)."""
    runs = [f for f in final if f.number == as_written.number]
    done = [r for r in runs if r.state is State.COMPLETE and r.examples_per_s]
    rest = tuple(f for f in final if f.number != as_written.number)
    if not runs:
        return rest, 0.0
    if len(done) < 2:
        return (done[0] if done else runs[0], *rest), 0.0
    rates = [float(r.examples_per_s or 0.0) for r in done]
    mean = sum(rates) / len(rates)
    return (pool_runs(done), *rest), (max(rates) - min(rates)) / mean


@dataclass(frozen=True, slots=True)
class CloseCall:
    """The final round's best, when it gained at least MIN_GAIN over the script as
    written but less than the round's noise demands (`required_gain`)."""

    record: TrialRecord
    gain: float
    needed: float


def welch_t(a: Sequence[float], b: Sequence[float]) -> float:
    """Welch's t of mean(b) - mean(a): how many standard errors b's runs sit above a's.
    Infinite when neither side varies and b is higher."""
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) if len(a) > 1 else 0.0
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) if len(b) > 1 else 0.0
    se = math.sqrt(va / len(a) + vb / len(b))
    if se == 0.0:
        return math.inf if mb > ma else (0.0 if mb == ma else -math.inf)
    return (mb - ma) / se


def decide_close_call(
    close: CloseCall,
    contender: TrialRecord,
    as_written: TrialRecord,
    runs: Sequence[TrialRecord],
    objective: Objective,
) -> tuple[bool, TrialRecord | None, TrialRecord | None, str]:
    """(change?, the contender's pooled record, the script as written's pooled record, a
    note) from every completed run of the two in the final round and the deciding runs.
    A pooled record is None where that config has no completed run. A change needs
    MIN_GAIN on the pooled means, a Welch t of DECIDE_T over the runs, and no fewer
    examples/s than the script as written."""
    mine = [r for r in runs if r.number == contender.number and r.state is State.COMPLETE]
    base = [r for r in runs if r.number == as_written.number and r.state is State.COMPLETE]
    if not mine or not base:
        note = (
            f"final round: trial {contender.number} ({contender.description}) gained "
            f"{close.gain:+.1%}, within the noise, and the runs meant to decide it did not "
            "complete: keeping the script as written"
        )
        return False, pool_runs(mine) if mine else None, pool_runs(base) if base else None, note

    def figure(r: TrialRecord) -> float:
        return _score(r, objective)[0]

    pooled, pooled_base = pool_runs(mine), pool_runs(base)
    gain = _gain(pooled, pooled_base, objective) or 0.0
    t = welch_t([figure(r) for r in base], [figure(r) for r in mine])
    holds = (pooled.examples_per_s or 0.0) >= (pooled_base.examples_per_s or 0.0)
    change = gain >= MIN_GAIN and t >= DECIDE_T and holds
    verdict = "a real gain" if change else "not told apart from the noise"
    note = (
        f"final round: trial {contender.number} ({contender.description}) gained "
        f"{close.gain:+.1%} beside the script as written, within that round's noise (a "
        f"change must gain {close.needed:.0%}); over {len(mine)} runs of it and "
        f"{len(base)} of the script as written, alternately: {gain:+.1%}, t = {t:.1f} (a "
        f"change needs {MIN_GAIN:.0%} and t >= {DECIDE_T:.0f}): {verdict}"
        + (", recommending it" if change else ", keeping the script as written")
    )
    return change, pooled, pooled_base, note


def _same_config(a: TrialRecord, b: TrialRecord) -> bool:
    return dict(a.params) == dict(b.params)


def choose_final(
    records: Sequence[TrialRecord],
    as_written: TrialRecord,
    trial_best: TrialRecord,
    final: Sequence[TrialRecord],
    objective: Objective,
    run_noise: float = 0.0,
) -> tuple[TrialRecord, TrialRecord | None, str | None, CloseCall | None]:
    """(winner's trial, winner's final-round record, a note, a close call): the best
    final-round figure that does not lose examples/s against the script as written *in
    the same round*. The script as written when nothing does. `trial_best` is the
    search's own winner (`choose_winner`), named in the notes. A close call is the
    best's final-round record when it gained at least `MIN_GAIN` but less than the noise
    demands (`decide_close_call` settles it), else None."""
    by_number = {r.number: r for r in records}
    aw_again = next((f for f in final if f.number == as_written.number), None)
    base = aw_again if aw_again is not None and aw_again.state is State.COMPLETE else as_written
    floor = base.examples_per_s or 0.0
    scored = [
        replace(f, feasible=f.examples_per_s is not None and f.examples_per_s >= floor)
        for f in final
        if f.state is State.COMPLETE
    ]
    feasible = [f for f in scored if f.feasible and f.number != as_written.number]
    if not feasible:
        # The search's best may repeat a baseline's params (TPE samples AUTOTUNE again):
        # the round then re-measured that config under the baseline's number.
        again = next((f for f in scored if f.number == trial_best.number), None) or next(
            (f for f in scored if _same_config(f, trial_best)), None
        )
        if again is None:
            shown = "it was not re-measured"
        else:
            alias = "" if again.number == trial_best.number else f" as trial {again.number}"
            shown = f"{again.examples_per_s or 0:.1f}{alias} vs {floor:.1f} examples/s"
        return (
            as_written,
            None,
            f"trial {trial_best.number} ({trial_best.description}) did not hold up when "
            f"re-measured beside the script as written ({shown}): keeping the script as "
            "written",
            None,
        )
    if objective is Objective.BOTH:
        pick = pareto_front(feasible)[0]
    else:
        pick = max(feasible, key=lambda f: _score(f, objective))
    gain, needed = _gain(pick, base, objective), required_gain(pick, base, run_noise)
    if gain is not None and gain < needed:
        return (
            as_written,
            None,
            f"no config beat the script as written by more than the noise in the final "
            f"round (best: trial {pick.number}, {pick.description}, {gain:+.1%}; a change "
            f"must gain {needed:.0%}): keeping the script as written",
            CloseCall(pick, gain, needed) if gain >= MIN_GAIN else None,
        )
    note = None
    if pick.number != trial_best.number and not _same_config(pick, trial_best):
        note = (
            f"final round: trial {pick.number} ({pick.description}) beat the search's best, "
            f"trial {trial_best.number}, when both were re-measured side by side"
        )
    return by_number[pick.number], pick, note, None


# --- the study ----------------------------------------------------------------------


def space_fingerprint(space: SearchSpace, target: str = "") -> str:
    blob = json.dumps(
        [[k.name, [repr(c) for c in k.choices]] for k in space.knobs]
        + [[n, repr(v)] for n, v in sorted(space.fixed.items())]
        + [target]
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _record(t: optuna.trial.FrozenTrial, space: SearchSpace) -> TrialRecord:
    import optuna

    ua = t.user_attrs
    state = {
        optuna.trial.TrialState.COMPLETE: State.COMPLETE,
        optuna.trial.TrialState.PRUNED: State.PRUNED,
    }.get(t.state, State.FAILED)
    if ua.get(FAILED_ATTR):
        state = State.FAILED
    return TrialRecord(
        number=t.number,
        role=Role(ua.get("role", Role.SEARCH.value)),
        state=state,
        params=dict(t.params),
        description=space.describe(t.params),
        examples_per_s=ua.get("examples_per_s"),
        utilization=ua.get("utilization"),
        spread=ua.get("spread"),
        input_wait_share=ua.get("input_wait_share"),
        repeats=tuple(ua.get("repeats", ())),
        reason=ua.get("reason")
        or ("interrupted (the worker died or was stopped)" if state is State.FAILED else None),
        wall_s=float(ua.get("wall_s", 0.0)),
        feasible=bool(ua.get("feasible", False)),
        notes=tuple(str(n) for n in ua.get("notes", ())),
        stderr_tail=str(ua.get(STDERR_TAIL_ATTR) or ""),
        crash=CrashSummary.from_json(ua.get(CRASH_ATTR)),
    )


def _finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    import optuna

    done = (
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
        optuna.trial.TrialState.FAIL,
    )
    return study.get_trials(deepcopy=False, states=done)


def _used(study: optuna.Study) -> int:
    """Finished trials that count against ``--trials``: an interrupted one does not (it
    is measured again), nor a skipped one (it never ran)."""
    return sum(1 for t in _finished(study) if not _uncounted(t))


def _uncounted(t: optuna.trial.FrozenTrial) -> bool:
    return bool(t.user_attrs.get(INTERRUPTED_ATTR) or t.user_attrs.get(SKIPPED_ATTR))


def _ran(trials: Sequence[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The trials whose script ran to an end: not skipped, not interrupted (FAIL)."""
    import optuna

    ts = optuna.trial.TrialState
    return [
        t
        for t in trials
        if t.state in (ts.COMPLETE, ts.PRUNED) and not t.user_attrs.get(SKIPPED_ATTR)
    ]


def _crash(t: optuna.trial.FrozenTrial) -> CrashSummary | None:
    if not t.user_attrs.get(FAILED_ATTR):
        return None
    return CrashSummary.from_json(t.user_attrs.get(CRASH_ATTR))


def _trial_runs(trials: Sequence[optuna.trial.FrozenTrial]) -> list[Run]:
    """The study's runs of the script, as `crashes.find_instability` sees them."""
    return [
        Run(t.number, t.user_attrs.get("role") == Role.AS_WRITTEN.value, dict(t.params), _crash(t))
        for t in _ran(trials)
    ]


def _final_runs(final: Sequence[TrialRecord], as_written: TrialRecord) -> list[Run]:
    """The final round's runs (each one, before `merge_as_written` pools them)."""
    return [
        Run(
            f.number,
            f.number == as_written.number,
            dict(f.params),
            f.crash if f.state is State.FAILED else None,
        )
        for f in final
    ]


def dead_values(
    trials: Sequence[optuna.trial.FrozenTrial],
) -> dict[tuple[str, KnobValue], tuple[list[int], str]]:
    """(knob, value) -> (the trials it failed in, the last reason) for every value that
    failed in at least DEAD_AFTER trials and never ran through (completed or pruned for
    being slow) in any trial. When the script crashes on its own
    (`crashes.find_instability`), a native crash is nobody's knob: it counts neither way."""
    ran_trials = _ran(trials)
    unstable = find_instability(_trial_runs(ran_trials)) is not None
    failed: dict[tuple[str, KnobValue], tuple[list[int], str]] = {}
    ran: set[tuple[str, KnobValue]] = set()
    for t in ran_trials:
        crash = _crash(t)
        if unstable and crash is not None and crash.native:
            continue
        for key in t.params.items():
            if t.user_attrs.get(FAILED_ATTR):
                numbers, _ = failed.get(key, ([], ""))
                failed[key] = ([*numbers, t.number], str(t.user_attrs.get("reason") or ""))
            else:
                ran.add(key)
    return {
        key: found
        for key, found in failed.items()
        if len(found[0]) >= DEAD_AFTER and key not in ran
    }


def run_study(
    space: SearchSpace,
    runner: Runner,
    settings: StudySettings,
    *,
    on_trial: Callable[[TrialRecord, TrialRecord | None], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> StudyOutcome:
    """Run (or resume) the study and choose the winner. See the module docstring."""
    import optuna

    # Optuna logs every failed trial with a traceback; our status line has the reason.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    t0 = clock()
    deadline = None if settings.timeout_s is None else t0 + settings.timeout_s
    storage, storage_name = open_storage(settings.storage)
    n_obj = 2 if settings.objective is Objective.BOTH else 1
    directions = [optuna.study.StudyDirection.MAXIMIZE] * n_obj
    sampler = optuna.samplers.TPESampler(
        seed=settings.seed,
        multivariate=True,
        n_startup_trials=TPE_STARTUP_TRIALS,
    )
    try:
        study = optuna.create_study(
            storage=storage,
            sampler=sampler,
            study_name=settings.study_name,
            directions=directions,
            load_if_exists=True,
        )
    except ValueError as exc:  # e.g. a resumed study with other directions
        raise ConfigError(f"--study-name {settings.study_name}: {exc}") from None
    fp = space_fingerprint(space, settings.target)
    have_fp = study.user_attrs.get("space")
    if have_fp is None:
        study.set_user_attr("space", fp)
    elif have_fp != fp:
        raise ConfigError(
            f"--study-name {settings.study_name}: the study in {storage_name} was created for "
            "another search space or script (the script, its arguments, --space or --batch-size "
            "changed); pick a new --study-name"
        )
    # What `tftune status` reads from storage alone (no space, no script needed).
    for key, value in (
        ("n_trials", settings.n_trials),
        ("objective", settings.objective.value),
        ("target", settings.target),
    ):
        if study.user_attrs.get(key) != value:
            study.set_user_attr(key, value)
    cores = space.cores
    ran = 0
    notes: list[str] = []

    def tell(note: str) -> None:
        """A note for the outcome, shown as it is made (once)."""
        notes.append(note)
        if on_note is not None:
            on_note(note)

    dead = fail_stale_trials(study)
    if dead:
        tell(f"trial(s) {', '.join(map(str, dead))} of a worker that died were marked failed")
    again = retry_interrupted(study)
    if again:
        tell(f"interrupted trial(s) {', '.join(map(str, again))} will run again")

    def best_so_far() -> TrialRecord | None:
        recs = [_record(t, space) for t in _finished(study)]
        aw = _as_written(recs)
        if aw is None:
            return None
        return choose_winner(recs, aw, settings.objective)

    def objective(trial: optuna.Trial) -> float | tuple[float, float]:
        nonlocal ran
        role = Role(trial.user_attrs.get("role", Role.SEARCH.value))
        params: dict[str, KnobValue] = {
            k.name: trial.suggest_categorical(k.name, k.choices)  # type: ignore[misc]
            for k in space.knobs
        }
        if role is Role.SEARCH:
            trials = study.get_trials(deepcopy=False)
            dead = dead_values(trials)
            hit = next(((k, v) for k, v in params.items() if (k, v) in dead), None)
            skips = sum(1 for t in trials if t.user_attrs.get(SKIPPED_ATTR))
            if hit is not None and skips < settings.n_trials:
                numbers, why = dead[hit]
                reason = (
                    f"skipped: {hit[0]}={hit[1]} made trials "
                    f"{', '.join(map(str, numbers))} fail ({why}) and no trial with it ran "
                    "through"
                )
                for key, value in (
                    (SKIPPED_ATTR, True),
                    (FAILED_ATTR, True),
                    ("reason", reason),
                    ("feasible", False),
                    ("constraint", 1.0),
                ):
                    trial.set_user_attr(key, value)
                trial.set_constraint("not_below_as_written", 1.0)
                raise optuna.TrialPruned(reason)
        ran += 1
        config = space.config(params, apply_fixed=role is not Role.AS_WRITTEN)
        recs = [_record(t, space) for t in _finished(study)]
        aw = _as_written(recs)
        floor = aw.examples_per_s if aw is not None else None
        best_eps = max(
            (r.examples_per_s or 0.0 for r in recs if r.state is State.COMPLETE), default=0.0
        )

        prune_why: list[str] = []

        def on_repeat(index: int, eps: float) -> bool:
            if role is not Role.SEARCH:
                return True  # baselines are always measured in full
            if settings.objective is Objective.THROUGHPUT and best_eps > 0:
                fraction, ref_eps, what = PRUNE_BELOW_BEST, best_eps, "the best so far"
            elif floor:
                fraction, ref_eps, what = PRUNE_BELOW_AS_WRITTEN, floor, "the script as written"
            else:
                return True
            if eps >= fraction * ref_eps:
                return True
            prune_why.append(
                f"{eps:,.1f} ex/s after {index + 1} window(s), below {fraction:.0%} of "
                f"{what} ({ref_eps:,.1f})"
            )
            return False

        try:
            with heartbeat(study._storage, trial._trial_id):
                m = runner.measure(config, on_repeat=on_repeat)
        except KeyboardInterrupt:
            # Optuna records the trial as FAIL and re-raises; these say it was stopped,
            # not broken, so that the next run measures it again.
            trial.set_user_attr("reason", "interrupted (Ctrl-C)")
            trial.set_user_attr(INTERRUPTED_ATTR, True)
            raise
        eps = m.examples_per_s
        ref = floor if floor is not None else (eps if role is Role.AS_WRITTEN else None)
        feasible = eps is not None and ref is not None and eps >= ref
        attrs: dict[str, Any] = {
            "examples_per_s": eps,
            "utilization": m.utilization,
            "utilization_kind": m.utilization_kind,
            "spread": m.spread,
            "input_wait_share": m.input_wait_share,
            "repeats": list(m.repeats),
            "reason": prune_why[-1] if m.state is State.PRUNED and prune_why else m.reason,
            "wall_s": m.wall_s,
            "feasible": feasible,
            "notes": list(m.notes),
            "constraint": (ref - eps) if (eps is not None and ref is not None) else 1.0,
        }
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        # TPE samples around feasible trials only: <= 0 means "not slower than as written".
        trial.set_constraint("not_below_as_written", float(attrs["constraint"]))
        if m.state is State.PRUNED:
            raise optuna.TrialPruned(m.reason or "clearly slower than the best so far")
        if m.state is State.FAILED or eps is None:
            # Stored as PRUNED and infeasible (its constraint is > 0), flagged FAILED_ATTR:
            # TPE learns from pruned and infeasible trials but ignores FAIL ones, and would
            # keep sampling a config that crashes (e.g. a 16-bit policy the loss code
            # cannot take).
            trial.set_user_attr(FAILED_ATTR, True)
            tail, crash = m.failure()
            trial.set_user_attr(STDERR_TAIL_ATTR, tail)
            trial.set_user_attr(CRASH_ATTR, crash.to_json() if crash is not None else None)
            if not trial.user_attrs.get("reason"):
                trial.set_user_attr("reason", "no examples were measured")
            raise optuna.TrialPruned(m.reason or "no examples were measured")
        util = m.utilization if m.utilization is not None else 0.0
        if settings.objective is Objective.THROUGHPUT:
            return eps
        if settings.objective is Objective.GPU_UTIL:
            return util
        return eps, util

    def report(_study: optuna.Study, t: optuna.trial.FrozenTrial) -> None:
        if on_trial is not None:
            on_trial(_record(t, space), best_so_far())

    def stop_when_booked(_study: optuna.Study, _t: optuna.trial.FrozenTrial) -> None:
        # Other workers' running trials will finish too: starting another trial now
        # would take the study past --trials.
        if booked(_study.get_trials(deepcopy=False)) >= settings.n_trials:
            _study.stop()

    def stop_at_deadline(_study: optuna.Study, _t: optuna.trial.FrozenTrial) -> None:
        # Checked after each trial (a running trial is never cut short), on the injected
        # clock so that tests can drive it.
        if deadline is not None and clock() >= deadline:
            _study.stop()

    def stop_at_budget(_study: optuna.Study, _t: optuna.trial.FrozenTrial) -> None:
        # Like Optuna's MaxTrialsCallback over finished trials, but an interrupted trial
        # uses no budget. Shared workers stop at N in total.
        if _used(_study) >= settings.n_trials:
            _study.stop()

    def run_some(n: int) -> None:
        if n <= 0 or (deadline is not None and clock() >= deadline):
            return
        study.optimize(
            objective,
            n_trials=n,
            callbacks=[report, stop_at_deadline, stop_at_budget, stop_when_booked],
        )

    def has_role(role: Role) -> bool:
        return any(t.user_attrs.get("role") == role.value for t in study.get_trials(deepcopy=False))

    def enqueue(role: Role, params: Mapping[str, KnobValue]) -> None:
        if not has_role(role):
            study.enqueue_trial(dict(params), user_attrs={"role": role.value})

    # Check-then-enqueue must not interleave between workers, or two of them enqueue
    # the same baseline and it runs twice.
    # A lock file beside a journal (or SQLite) file, an advisory lock on PostgreSQL.
    def enqueue_lock() -> contextlib.AbstractContextManager[None]:
        return study_lock(settings.storage, settings.study_name)

    def ensure_as_written() -> None:
        """Measure the script as written unless the study has it. Another worker may be
        measuring it right now: wait for that (bounded, since a killed worker leaves its
        trial RUNNING in a journal file forever), and re-run it if it failed."""
        waited, runs = 0.0, 0
        while runs < AS_WRITTEN_ATTEMPTS:
            mine = [
                t
                for t in study.get_trials(deepcopy=False)
                if t.user_attrs.get("role") == Role.AS_WRITTEN.value
            ]
            states = {t.state for t in mine}
            seen = [(t.number, t.state) for t in mine]
            if optuna.trial.TrialState.COMPLETE in states:
                return
            if deadline is not None and clock() >= deadline:
                return
            running = optuna.trial.TrialState.RUNNING in states
            if optuna.trial.TrialState.WAITING not in states:
                if running and waited < AS_WRITTEN_WAIT_S:
                    sleep(AS_WRITTEN_POLL_S)
                    waited += AS_WRITTEN_POLL_S
                    if fail_stale_trials(study):  # its worker died: measure it here
                        retry_interrupted(study)
                    continue
                with enqueue_lock():
                    latest = [
                        (t.number, t.state)
                        for t in study.get_trials(deepcopy=False)
                        if t.user_attrs.get("role") == Role.AS_WRITTEN.value
                    ]
                    if latest == seen:  # no other worker enqueued or ran it meanwhile
                        study.enqueue_trial(
                            space.as_written_params(), user_attrs={"role": Role.AS_WRITTEN.value}
                        )
                if latest != seen:
                    continue
            run_some(1)
            runs += 1

    if on_start is not None:
        on_start(_used(study), settings.n_trials)
    ensure_as_written()
    recs = [_record(t, space) for t in _finished(study)]
    aw = _as_written(recs)
    if aw is None:
        failed = [r for r in recs if r.role is Role.AS_WRITTEN]
        why = failed[-1].reason if failed else "it was not measured (timeout?)"
        crash = failed[-1].crash if failed else None
        if crash is not None and crash.headline not in (why or ""):
            why = f"{why} ({crash.headline})"
        raise ScriptError(f"the script as written could not be measured: {why}")
    guided, guided_why = guided_params(space, aw, cores, settings.hint)
    with enqueue_lock():
        enqueue(Role.AUTOTUNE, baseline_params(space, Role.AUTOTUNE, cores))
        enqueue(Role.HEURISTIC, baseline_params(space, Role.HEURISTIC, cores))
        if settings.guided:
            enqueue(Role.GUIDED, guided)
    if settings.guided:
        tell(f"guided guess: {guided_why}")
    while True:  # skipped trials (`dead_values`) leave budget for another round
        started = len(study.get_trials(deepcopy=False))
        run_some(settings.n_trials - booked(study.get_trials(deepcopy=False)))
        if len(study.get_trials(deepcopy=False)) == started:
            break
    # Other workers' trials still running are part of the result every worker reports.
    wait_for_others(
        lambda: study.get_trials(deepcopy=False),
        clock=clock,
        sleep=sleep,
        deadline=deadline,
        poll_s=AS_WRITTEN_POLL_S,
    )

    recs = [_record(t, space) for t in _finished(study)]
    aw = _as_written(recs)
    assert aw is not None
    best = choose_winner(recs, aw, settings.objective)
    confirm: TrialRecord | None = None
    final: tuple[TrialRecord, ...] = ()
    runs: tuple[TrialRecord, ...] = ()
    if settings.confirm and best.role is not Role.AS_WRITTEN:
        # The best of N noisy trials is biased upwards, and the baselines were measured
        # minutes apart from it: measure the leaders and the baselines once more, side
        # by side, and choose the winner from that round alone.
        leaders = final_candidates(recs, aw, settings.objective, settings.final_candidates)
        if on_note is not None:
            on_note(f"final round: re-measuring {len(leaders)} configs side by side ...")
        # The script as written opens and closes the round: the two runs of one config
        # show how much this machine moves from run to run (`merge_as_written`).
        runs = final_round([*leaders, aw], runner, space, on_note)
        final, noise = merge_as_written(runs, aw)
        best, confirm, note, close = choose_final(recs, aw, best, final, settings.objective, noise)
        if close is not None and settings.decide_pairs > 0:
            # Settled by more runs rather than by a threshold: the note says how.
            if on_note is not None:
                on_note(
                    f"final round: trial {close.record.number} gained {close.gain:+.1%}, "
                    f"within the noise (a change must gain {close.needed:.0%}); measuring "
                    f"it and the script as written {settings.decide_pairs} more times, "
                    "alternately ..."
                )
            contender = next(r for r in recs if r.number == close.record.number)
            runs += final_round([contender, aw] * settings.decide_pairs, runner, space, on_note)
            change, pooled, pooled_aw, note = decide_close_call(
                close, contender, aw, runs, settings.objective
            )
            pooled_by_number = {r.number: r for r in (pooled, pooled_aw) if r is not None}
            final = tuple(pooled_by_number.get(f.number, f) for f in final)
            if change and pooled is not None:
                best, confirm = contender, replace(pooled, feasible=True)
        if note:
            tell(note)
    best_config = space.config(best.params, apply_fixed=best.role is not Role.AS_WRITTEN)
    kind = next(
        (
            str(t.user_attrs["utilization_kind"])
            for t in _finished(study)
            if t.user_attrs.get("utilization_kind")
        ),
        "duty_cycle",
    )
    return StudyOutcome(
        study_name=settings.study_name,
        storage=storage_name,
        objective=settings.objective,
        utilization_kind=kind,
        records=tuple(recs),
        baselines={r.role: r for r in _baselines(recs)},
        best=best,
        best_config=best_config,
        confirm=confirm,
        final=final,
        instability=find_instability([*_trial_runs(_finished(study)), *_final_runs(runs, aw)]),
        pareto=pareto_front([r for r in recs if r.state is State.COMPLETE and r.feasible]),
        importances=_importances(study, settings.objective),
        wall_s=clock() - t0,
        ran_this_session=ran,
        notes=tuple(notes),
    )


def _as_written(records: Sequence[TrialRecord]) -> TrialRecord | None:
    done = [r for r in records if r.role is Role.AS_WRITTEN and r.state is State.COMPLETE]
    return done[0] if done else None


def _baselines(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    out: dict[Role, TrialRecord] = {}
    for r in records:
        if r.role in (Role.AS_WRITTEN, Role.AUTOTUNE, Role.HEURISTIC, Role.GUIDED) and (
            r.role not in out
            or (out[r.role].state is not State.COMPLETE and r.state is State.COMPLETE)
        ):
            out[r.role] = r
    return list(out.values())


def _importances(study: optuna.Study, objective: Objective) -> dict[str, float]:
    """Parameter importances (PED-ANOVA: needs no scikit-learn, unlike fANOVA), or
    empty when too few trials completed."""
    import optuna

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(complete) < 3 or not complete[0].params:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # it warns about the sign we already flipped
            imp = optuna.importance.get_param_importances(
                study,
                evaluator=optuna.importance.PedAnovaImportanceEvaluator(),
                # PED-ANOVA explains what makes the target *low*; we maximize.
                target=lambda t: -t.values[0] if t.values else 0.0,
            )
    except (ImportError, RuntimeError, ValueError, ZeroDivisionError):
        return {}
    return {k: round(float(v), 4) for k, v in imp.items()}


# --- the real runner ----------------------------------------------------------------


class ScriptRunner(Runner):
    """`Runner` over the measured trial runner (`tftune.tuner.runner.run_trial`): the
    user's unmodified script in a child process, one process group per trial."""

    def __init__(
        self,
        script: str | os.PathLike[str],
        args: Sequence[str] = (),
        *,
        spec: Any = None,
        cwd: str | os.PathLike[str] | None = None,
        gpu_visible: bool = False,
        deps: Any = None,
    ) -> None:
        self.script, self.args, self.spec, self.cwd = script, tuple(args), spec, cwd
        self.gpu_visible = gpu_visible
        self.deps = deps  # tuner.runner.RunnerDeps: a parallel worker's GPUs, CPUs, stop

    def measure(
        self,
        config: Config,
        *,
        mode: Mode = Mode.TRAIN,
        on_repeat: RepeatCallback | None = None,
    ) -> Measurement:
        from tftune.tuner import bounds
        from tftune.tuner.runner import TrialState, run_trial

        if mode is not Mode.TRAIN:
            config = bounds.with_bound_mode(config, mode.value)

        def on_report(index: int, eps: float) -> bool:  # run_trial: True means prune
            return on_repeat is not None and not on_repeat(index, eps)

        r = run_trial(
            self.script,
            self.args,
            config,
            self.spec,
            cwd=self.cwd,
            on_report=on_report,
            deps=self.deps,
        )
        m = r.metrics
        state = {
            TrialState.COMPLETE: State.COMPLETE,
            TrialState.PRUNED: State.PRUNED,
        }.get(r.state, State.FAILED)
        if m is None:
            return Measurement(
                state=State.FAILED,
                reason=r.reason,
                wall_s=r.wall_s,
                notes=tuple(r.notes),
                stderr_tail=r.stderr_tail,
                returncode=r.returncode,
            )
        return Measurement(
            state=state,
            examples_per_s=m.examples_per_s,
            utilization=m.utilization,
            utilization_kind=m.utilization_kind,
            spread=m.spread,
            input_wait_share=m.input_wait_share,
            repeats=m.repeats,
            reason=r.reason or m.utilization_note,
            wall_s=r.wall_s,
            notes=tuple(r.notes),
            stderr_tail=r.stderr_tail if state is State.FAILED else "",
            returncode=r.returncode,
        )
