"""The parent side of a trial: launch the unmodified script, measure it, stop it.

Public entry points (the rest of this module is private):

- `discover(script, args)` → `Discovery`: the call sites and what the script passes.
- `run_trial(script, args, config, spec)` → `TrialResult`: one measured trial. Failures
  (exception, non-zero exit, OOM, stall, NaN loss) are results, never raised.
- `run_script(script, args, config)` → exit code: ``tftune run`` (apply, no measurement).
- `profile_script(script, args, start, stop, logdir)` → `ProfileResult`: ``tftune profile``.

Every child runs in its own session (process group); whatever happens, the whole group is
sent SIGTERM, then SIGKILL, before these functions return.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import IO, Any, Protocol

from tftune.core.errors import ScriptError
from tftune.probes.clock import (
    ClockEvent,
    ClockReader,
    StepRecord,
    percentile,
    spread,
    step_durations_ms,
    window_stats,
)
from tftune.probes.nvml import GpuFigures, NotMeasured, NvmlReader, NvmlSampler, PynvmlReader
from tftune.tuner._roles import FALLBACK_HOW
from tftune.tuner.config import Config, SiteConfig
from tftune.tuner.precision import SIXTEEN_BIT_POLICIES
from tftune.tuner.watch import (
    FALLBACK_S,
    FIRST_STEP_S,
    STALL_FLOOR_S,
    StreamSeen,
    StreamWatch,
    describe_streams,
)

SPEC_ENV = "TFTUNE_CHILD_SPEC"
POLL_S = 0.05
STDERR_TAIL_LINES = 200  # kept with a failed trial: a native crash prints every thread
# A window of fewer steps than this says little about the noise: with 0.05-2 s steps
# (real models on a GPU) a window runs until it holds this many, whatever window_s is.
MIN_WINDOW_STEPS = 10
OOM_MARKERS = ("ResourceExhaustedError", "MemoryError", "OOM when allocating", "out of memory")
OOM_EXCEPTIONS = frozenset({"ResourceExhaustedError", "MemoryError"})
EXIT_GRACE_S = 10.0  # a script that raised gets this long to print its traceback and exit


# ---- public data --------------------------------------------------------------------
class TrialState(Enum):
    COMPLETE = "complete"
    FAILED = "failed"
    PRUNED = "pruned"


class FailureKind(Enum):
    EXCEPTION = "exception"
    EXIT = "exit"
    OOM = "oom"
    STALL = "stall"
    NAN = "nan"
    NO_STEPS = "no_steps"
    TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class MeasureSpec:
    """How a trial is measured. All times in seconds."""

    warmup_steps: int = 5  # steps skipped (tracing, first-epoch fill) ...
    warmup_s: float = 1.0  # ... and at least this long after the first step
    window_s: float = 3.0  # length of one repeat window ...
    window_steps: int = MIN_WINDOW_STEPS  # ... which holds at least this many steps
    repeats: int = 3  # consecutive windows; their spread is the noise
    # The next training step is due within max(stall_s, 20 x the slowest step so far)
    # (`tuner.watch`); the first within startup_timeout_s; step_timeout_s sets both.
    stall_s: float = STALL_FLOOR_S
    startup_timeout_s: float = FIRST_STEP_S
    step_timeout_s: float | None = None
    # The script updates nothing (discovery said so: `Discovery.busiest_loop`): measure
    # the stream that delivers the most, not the one that feeds updates.
    busiest_loop: bool = False
    max_wall_s: float | None = None  # hard cap on the whole trial
    term_grace_s: float = 3.0  # between SIGTERM and SIGKILL
    nvml_interval_s: float = 0.2


@dataclass(frozen=True, slots=True)
class TrialMetrics:
    """What one trial achieved in its steady-state window."""

    examples_per_s: float  # median over repeats
    steps_per_s: float
    step_p50_ms: float
    step_p90_ms: float
    input_wait_share: float  # time the consumer waited for the next element
    spread: float  # (max − min) / median of the repeats' examples/s
    repeats: tuple[float, ...]  # examples/s of each repeat window
    steps: int
    examples: int
    window_s: float  # total measured time
    utilization: float | None  # nvml mean utilization, or duty cycle on CPU
    utilization_kind: str  # "nvml" | "duty_cycle"
    utilization_note: str | None  # "not measured (reason)" when utilization is None
    gpu_memory_used_mb: float | None
    truncated: bool  # the script ended before the full window; measured over what ran
    gpu_note: str | None = None  # "not measured (reason)" when NVML gave no figures

    def to_json(self) -> dict[str, Any]:
        return {
            "examples_per_s": self.examples_per_s,
            "steps_per_s": self.steps_per_s,
            "step_p50_ms": self.step_p50_ms,
            "step_p90_ms": self.step_p90_ms,
            "input_wait_share": self.input_wait_share,
            "spread": self.spread,
            "repeats": list(self.repeats),
            "steps": self.steps,
            "examples": self.examples,
            "window_s": self.window_s,
            "utilization": self.utilization,
            "utilization_kind": self.utilization_kind,
            "utilization_note": self.utilization_note,
            "gpu_memory_used_mb": self.gpu_memory_used_mb,
            "truncated": self.truncated,
            "gpu_note": self.gpu_note,
        }


@dataclass(frozen=True, slots=True)
class TrialResult:
    state: TrialState
    config: Config
    metrics: TrialMetrics | None
    failure: FailureKind | None
    reason: str | None  # one line, for failed and pruned trials
    stderr_tail: str
    returncode: int | None
    wall_s: float
    notes: tuple[str, ...] = ()
    streams: tuple[StreamSeen, ...] = ()  # the datasets the script iterated, and their roles

    @property
    def ok(self) -> bool:
        return self.state is TrialState.COMPLETE

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "failure": self.failure.value if self.failure else None,
            "reason": self.reason,
            "metrics": self.metrics.to_json() if self.metrics else None,
            "config": self.config.to_json(),
            "returncode": self.returncode,
            "wall_s": self.wall_s,
            "notes": list(self.notes),
            "streams": [s.to_json() for s in self.streams],
        }


@dataclass(frozen=True, slots=True)
class CallSite:
    """One call site of a tf.data transformation, with the knob values as written.

    `as_written` holds the knobs this op takes; ``None`` means the script did not pass
    one (map: sequential; interleave cycle_length: TF's default) or passed a tensor.
    """

    site: str
    op: str  # map | interleave | batch | padded_batch | prefetch
    knobs: tuple[str, ...]
    as_written: SiteConfig
    function: str | None
    calls: int


@dataclass(frozen=True, slots=True)
class IteratedPipeline:
    site: str | None  # the call site of the last transformation before iteration
    final_prefetch: bool
    batched: bool
    threadpool_size: int | None
    deterministic: bool | None
    stream: int | None = None


@dataclass(frozen=True, slots=True)
class Discovery:
    script: str
    sites: tuple[CallSite, ...]
    pipelines: tuple[IteratedPipeline, ...]
    uses_keras: bool
    returncode: int | None
    stderr_tail: str
    streams: tuple[StreamSeen, ...] = ()
    timed_out: bool = False
    waited_s: float = 0.0

    @property
    def found(self) -> bool:
        return bool(self.sites) or bool(self.pipelines)

    @property
    def training(self) -> StreamSeen | None:
        """The stream found training (the run stopped there), or None."""
        return next((s for s in self.streams if s.training), None)

    @property
    def busiest_loop(self) -> bool:
        """Nothing was updated: the busiest loop stands in for training (`_roles`)."""
        return self.training is not None and self.training.how == FALLBACK_HOW

    def no_training(self) -> str:
        """Why no training was found, in one paragraph: for the user."""
        seen = describe_streams(self.streams)
        if self.timed_out:
            return (
                f"no training step within {self.waited_s:.0f} s: no dataset fed an optimizer "
                f"update; {seen} (--step-timeout sets how long to wait)"
            )
        code = self.returncode
        ended = "ended" if code in (0, None) else f"exited with code {code}"
        why = f"the script {ended} before any dataset fed an optimizer update; {seen}"
        tail = "\n".join(f"  {line}" for line in self.stderr_tail.splitlines()[-12:])
        return f"{why}\nits stderr ends with:\n{tail}" if tail.strip() else why

    def site_keys(self) -> frozenset[str]:
        return frozenset(s.site for s in self.sites)

    def to_json(self) -> dict[str, Any]:
        return {
            "script": self.script,
            "sites": [
                {
                    "site": s.site,
                    "op": s.op,
                    "knobs": list(s.knobs),
                    "as_written": s.as_written.to_json(),
                    "function": s.function,
                    "calls": s.calls,
                }
                for s in self.sites
            ],
            "pipelines": [
                {
                    "site": p.site,
                    "final_prefetch": p.final_prefetch,
                    "batched": p.batched,
                    "threadpool_size": p.threadpool_size,
                    "deterministic": p.deterministic,
                }
                for p in self.pipelines
            ],
            "uses_keras": self.uses_keras,
        }


@dataclass(frozen=True, slots=True)
class ProfileResult:
    logdir: str
    captured: bool
    returncode: int | None
    reason: str | None
    stderr_tail: str
    steps: tuple[int, int] | None = None  # first and last step captured (inclusive)
    streams: tuple[StreamSeen, ...] = ()  # the datasets iterated, and their roles


# ---- injection points -----------------------------------------------------------------
class ChildProcess(Protocol):
    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


Launcher = Callable[
    [Sequence[str], str, dict[str, str], "IO[Any] | None", "IO[Any] | None"], ChildProcess
]
Clock = Callable[[], float]


def popen_launcher(
    argv: Sequence[str],
    cwd: str,
    env: dict[str, str],
    stdout: IO[Any] | None,
    stderr: IO[Any] | None,
) -> ChildProcess:
    """Start the child in its own session, so its whole process group can be stopped."""
    return subprocess.Popen(
        list(argv), cwd=cwd, env=env, stdout=stdout, stderr=stderr, start_new_session=True
    )


@dataclass(slots=True)
class RunnerDeps:
    """Everything a trial touches outside itself, injectable for tests."""

    launcher: Launcher = popen_launcher
    clock: Clock = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    nvml_reader: Callable[[], NvmlReader] | None = PynvmlReader
    python: str = field(default_factory=lambda: sys.executable)


# ---- helpers ----------------------------------------------------------------------------
def check_script(script: str | os.PathLike[str]) -> Path:
    """The script's absolute path; `ScriptError` if it is missing or does not parse."""
    path = Path(script)
    if not path.is_file():
        raise ScriptError(f"{script}: no such script")
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise ScriptError(f"{script}: cannot read ({exc.strerror or exc})") from None
    try:
        ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ScriptError(f"{script}:{exc.lineno}: syntax error: {exc.msg}") from None
    except ValueError as exc:
        raise ScriptError(f"{script}: cannot parse ({exc})") from None
    return path.resolve()


# The child starts with `-c`, whose sys.path[0] is the working directory: it is dropped
# before tftune is imported, so a folder of the user's (or a checkout of tftune itself,
# whose `tftune/` is the front package alone) cannot shadow the installed package. The
# bootstrap then puts the script's folder first, as `python train.py` would.
_LAUNCH = "import sys; del sys.path[0]; from tftune.tuner._bootstrap import main; main()"


def child_argv(python: str) -> list[str]:
    """The command line of a child that runs a user's script under the bootstrap."""
    return [python, "-c", _LAUNCH]


def _child_env(spec_file: str) -> dict[str, str]:
    env = dict(os.environ)
    env[SPEC_ENV] = spec_file
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def stop_group(
    proc: ChildProcess, grace_s: float, sleep: Callable[[float], None] = time.sleep
) -> None:
    """SIGTERM the child's process group, wait up to `grace_s`, then SIGKILL the group.

    SIGKILL goes to the group even when the leader has exited, so forked children that
    ignore SIGTERM go too.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while proc.poll() is None and time.monotonic() < deadline:
        sleep(POLL_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _wait_exit(proc: ChildProcess, limit_s: float, sleep: Callable[[float], None]) -> None:
    deadline = time.monotonic() + limit_s
    while proc.poll() is None and time.monotonic() < deadline:
        sleep(POLL_S)


def _tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tftune-trial-") as tmp:
        yield Path(tmp)


def _write_spec(work: Path, spec: dict[str, Any]) -> str:
    path = work / "spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return str(path)


def _classify_exit(
    returncode: int, exception: dict[str, Any] | None, stderr_tail: str
) -> tuple[FailureKind, str]:
    if exception is not None:
        kind = str(exception.get("type", "Exception"))
        message = str(exception.get("message", ""))
        text = f"{kind}: {message}"
        bases = [str(b) for b in exception.get("bases", [])]
        if any(m in text for m in OOM_MARKERS) or any(b in OOM_EXCEPTIONS for b in bases):
            return FailureKind.OOM, f"out of memory: {text}"[:300]
        return FailureKind.EXCEPTION, f"raised {text}"[:300]
    if any(m in stderr_tail for m in OOM_MARKERS):
        return FailureKind.OOM, f"out of memory (exit code {returncode})"
    if returncode == -signal.SIGKILL:
        return FailureKind.OOM, "killed by SIGKILL (likely the kernel's out-of-memory killer)"
    if returncode < 0:
        return FailureKind.EXIT, f"killed by signal {-returncode}"
    last = stderr_tail.strip().splitlines()[-1] if stderr_tail.strip() else ""
    suffix = f": {last[:200]}" if last else ""
    return FailureKind.EXIT, f"exited with code {returncode}{suffix}"


# ---- discovery --------------------------------------------------------------------------
def discover(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    cwd: str | os.PathLike[str] | None = None,
    timeout_s: float = FIRST_STEP_S,
    deps: RunnerDeps | None = None,
) -> Discovery:
    """Run the script until a dataset is found training; record the call sites and the
    datasets iterated on the way (a counting loop, a peek, `adapt` come before training).

    The child leaves once a stream feeds optimizer updates, or, where nothing updates for
    `FALLBACK_S` of iterating, once the busiest loop is chosen instead. A script that
    never builds a pipeline yields an empty `Discovery` (``found`` is False); one that
    trains on no dataset has no `training` stream, and `no_training()` says what was seen.
    """
    deps = deps or RunnerDeps()
    path = check_script(script)
    with _workdir() as work:
        out_file = work / "discovery.jsonl"
        spec = {
            "mode": "discover",
            "script": str(path),
            "args": list(args),
            "config": Config().to_json(),
            "discovery_file": str(out_file),
            "fallback_s": FALLBACK_S,
        }
        _, returncode, stderr_tail, timed_out = _run_to_end(
            deps, work, spec, cwd, timeout_s, capture=True
        )
        rows = []
        if out_file.exists():
            for line in out_file.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(json.JSONDecodeError):
                    rows.append(json.loads(line))
    found = _discovery_from_rows(str(path), rows, returncode, stderr_tail)
    return replace(found, timed_out=timed_out, waited_s=timeout_s)


def _discovery_from_rows(
    script: str, rows: list[dict[str, Any]], returncode: int | None, stderr_tail: str
) -> Discovery:
    order: list[tuple[str, str]] = []
    first: dict[tuple[str, str], dict[str, Any]] = {}
    calls: dict[tuple[str, str], int] = {}
    pipelines: list[IteratedPipeline] = []
    uses_keras = False
    from tftune.tuner._patch import OP_KNOBS
    from tftune.tuner.config import config_from_json

    watch = StreamWatch(0.0)
    for row in rows:
        if row.get("kind") in ("stream", "training"):
            watch.event(ClockEvent(str(row["kind"]), row))
        elif row.get("kind") == "elements":
            watch.elements = {int(k): int(v) for k, v in dict(row.get("counts", {})).items()}
        if row.get("kind") == "site":
            key = (row["site"], row["op"])
            if key not in first:
                order.append(key)
                first[key] = row
            calls[key] = calls.get(key, 0) + 1
        elif row.get("kind") == "iterate":
            pipelines.append(
                IteratedPipeline(
                    site=row.get("site"),
                    final_prefetch=bool(row.get("final_prefetch")),
                    batched=bool(row.get("batched")),
                    threadpool_size=row.get("threadpool_size"),
                    deterministic=row.get("deterministic"),
                    stream=row.get("stream"),
                )
            )
        elif row.get("kind") == "keras":
            uses_keras = True
    sites = []
    for key in order:
        row = first[key]
        written = config_from_json({"sites": {row["site"]: row["as_written"]}}).sites[row["site"]]
        sites.append(
            CallSite(
                site=row["site"],
                op=row["op"],
                knobs=tuple(OP_KNOBS[row["op"]]),
                as_written=written,
                function=row.get("function"),
                calls=calls[key],
            )
        )
    return Discovery(
        script,
        tuple(sites),
        tuple(pipelines),
        uses_keras,
        returncode,
        stderr_tail,
        watch.streams(),
    )


def _run_to_end(
    deps: RunnerDeps,
    work: Path,
    spec: dict[str, Any],
    cwd: str | os.PathLike[str] | None,
    timeout_s: float | None,
    capture: bool,
) -> tuple[ChildProcess, int | None, str, bool]:
    """Run a child to its end (or `timeout_s`), then stop its group. (proc, rc, tail, timed out)"""
    spec_file = _write_spec(work, spec)
    argv = child_argv(deps.python)
    err_path = work / "stderr.txt"
    out_path = work / "stdout.txt"
    with contextlib.ExitStack() as stack:
        out_fh = stack.enter_context(open(out_path, "wb")) if capture else None
        err_fh = stack.enter_context(open(err_path, "wb")) if capture else None
        proc = deps.launcher(argv, str(cwd or os.getcwd()), _child_env(spec_file), out_fh, err_fh)
        start = deps.clock()
        timed_out = False
        try:
            while proc.poll() is None:
                if timeout_s is not None and deps.clock() - start > timeout_s:
                    timed_out = True
                    break
                deps.sleep(POLL_S)
        finally:
            stop_group(proc, 3.0, deps.sleep)
    return proc, proc.returncode, _tail(err_path) if capture else "", timed_out


# ---- trials -------------------------------------------------------------------------------
# Called after each repeat window with (repeat index, examples/s so far); True prunes.
ReportFn = Callable[[int, float], bool]


def run_trial(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    config: Config | None = None,
    spec: MeasureSpec | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    on_report: ReportFn | None = None,
    deps: RunnerDeps | None = None,
) -> TrialResult:
    """Run the script once under `config` and measure its steady state. Never raises for
    anything the script does; `ScriptError` only for a script that is missing or invalid."""
    config = config or Config()
    spec = spec or MeasureSpec()
    deps = deps or RunnerDeps()
    path = check_script(script)
    with _workdir() as work:
        clock_file = work / "clock.txt"
        clock_file.touch()
        child_spec = {
            "mode": "measure",
            "script": str(path),
            "args": list(args),
            "config": config.to_json(),
            "clock_file": str(clock_file),
        }
        trial = _Trial(deps, spec, config, on_report)
        return trial.run(work, child_spec, cwd)


class _Trial:
    """One measured child run: the state machine of warm-up → windows → stop."""

    def __init__(
        self, deps: RunnerDeps, spec: MeasureSpec, config: Config, on_report: ReportFn | None
    ) -> None:
        self.deps, self.spec, self.config, self.on_report = deps, spec, config, on_report
        self.records: list[StepRecord] = []
        self.main_stream: int | None = None  # the first training stream: its steps count
        self.pending_examples = 0  # another training stream's, added to the next step
        self.notes_seen: list[str] = []
        self.busiest: dict[int, list[StepRecord]] = {}  # (busiest_loop) before the window
        self.watch = StreamWatch(
            deps.clock(),
            first_step_s=spec.startup_timeout_s,
            stall_floor_s=spec.stall_s,
            step_timeout_s=spec.step_timeout_s,
        )
        self.events: list[ClockEvent] = []
        self.window_start_ns: int | None = None
        self.windows: list[tuple[int, list[StepRecord]]] = []
        self.current: list[StepRecord] = []
        self.current_start_ns = 0
        self.pruned_reason: str | None = None
        self.sampler: NvmlSampler | NotMeasured | None = None

    def run(
        self, work: Path, child_spec: dict[str, Any], cwd: str | os.PathLike[str] | None
    ) -> TrialResult:
        deps, spec = self.deps, self.spec
        spec_file = _write_spec(work, child_spec)
        reader = ClockReader(child_spec["clock_file"])
        err_path = work / "stderr.txt"
        started = deps.clock()
        failure: tuple[FailureKind, str] | None = None
        hung = False  # the script said it was done, then did not exit
        self.sampler = self._open_nvml()
        with open(work / "stdout.txt", "wb") as out_fh, open(err_path, "wb") as err_fh:
            argv = child_argv(deps.python)
            proc = deps.launcher(
                argv, str(cwd or os.getcwd()), _child_env(spec_file), out_fh, err_fh
            )
            self.watch.start = deps.clock()
            try:
                while True:
                    self._consume(reader.poll())
                    failure = self._event_failure()
                    if failure is not None or self._done():
                        break
                    if self._raised() and proc.poll() is None:
                        # The script raised or returned and is on its way out (traceback,
                        # TF teardown can take seconds): not a stall. Let it exit, then
                        # classify.
                        _wait_exit(proc, EXIT_GRACE_S, deps.sleep)
                        if proc.poll() is None:
                            # Done, but its teardown hangs: judge it by what it said.
                            self._consume(reader.poll())
                            failure = self._event_failure()
                            hung = True
                            break
                    if proc.poll() is not None:
                        self._consume(reader.poll())
                        failure = self._event_failure()
                        break
                    now = deps.clock()
                    overdue = self.watch.overdue(now)
                    if overdue is not None:
                        failure = (FailureKind.STALL, overdue)
                        break
                    if spec.max_wall_s is not None and now - started > spec.max_wall_s:
                        failure = (FailureKind.TIMEOUT, f"timed out after {spec.max_wall_s:.0f} s")
                        break
                    deps.sleep(POLL_S)
            finally:
                alive = proc.poll() is None
                stop_group(proc, spec.term_grace_s, deps.sleep)
            gpu = self._close_nvml()
        return self._result(proc.returncode, alive, hung, failure, _tail(err_path), started, gpu)

    def _result(
        self,
        returncode: int | None,
        alive: bool,
        hung: bool,
        failure: tuple[FailureKind, str] | None,
        tail: str,
        started: float,
        gpu: GpuFigures | NotMeasured,
    ) -> TrialResult:
        said = returncode  # the exit code the script gave (the process's own, or as it said)
        if hung:
            alive = False
            said = next(
                (int(e.payload.get("code") or 0) for e in self.events if e.kind == "finished"), 1
            )
        wall = self.deps.clock() - started
        exc = next((e.payload for e in self.events if e.kind == "exception"), None)
        if failure is None and (exc is not None or (not alive and said not in (0, None))):
            failure = _classify_exit(said if said is not None else 1, exc, tail)
        metrics = None
        if failure is None:
            metrics = self._metrics(gpu, truncated=not alive and not self._done())
            if metrics is None:
                failure = (FailureKind.NO_STEPS, self._no_steps_reason())
        state, reason = TrialState.COMPLETE, None
        if failure is not None:
            state, reason = TrialState.FAILED, failure[1]
        elif self.pruned_reason is not None:
            state, reason = TrialState.PRUNED, self.pruned_reason
        return TrialResult(
            state,
            self.config,
            metrics,
            failure[0] if failure else None,
            reason,
            tail,
            returncode,
            wall,
            self._notes(metrics),
            self.watch.streams(),
        )

    def _no_steps_reason(self) -> str:
        if self.main_stream is None:
            return (
                "no training step was measured: no dataset fed an optimizer update before "
                f"the script ended; {describe_streams(self.watch.streams())}"
            )
        return (
            f"no training step was measured: the script ended during warm-up "
            f"({len(self.records)} training steps)"
        )

    def _notes(self, metrics: TrialMetrics | None) -> tuple[str, ...]:
        notes = [n for e in self.events if e.kind == "notes" for n in e.payload.get("notes", [])]
        notes += self.notes_seen
        if metrics is not None and metrics.repeats:
            per_window = metrics.steps / len(metrics.repeats)
            if per_window < self.spec.window_steps:
                notes.append(
                    f"each measured window held only {per_window:.0f} steps (fewer than "
                    f"{self.spec.window_steps}): its noise figure says little; a longer "
                    "run (more steps) measures it better"
                )
        return tuple(notes)

    # -- NVML
    def _open_nvml(self) -> NvmlSampler | NotMeasured:
        if self.deps.nvml_reader is None:
            return NotMeasured("NVML sampling disabled")
        return NvmlSampler.open(self.deps.nvml_reader, self.spec.nvml_interval_s)

    def _close_nvml(self) -> GpuFigures | NotMeasured:
        sampler = self.sampler
        if isinstance(sampler, NvmlSampler):
            if self.window_start_ns is None:
                sampler.stop()
                return NotMeasured("no steady-state window")
            return sampler.stop()
        return sampler if isinstance(sampler, NotMeasured) else NotMeasured("not started")

    # -- records
    def _consume(self, items: list[StepRecord | ClockEvent]) -> None:
        """Only training streams' steps count (`tuner.watch`): a counting loop, a peek,
        `adapt`, validation and `predict` are seen, never measured."""
        for item in items:
            if isinstance(item, ClockEvent):
                self.events.append(item)
                stream = self.watch.event(item)
                if stream is not None:
                    self._adopt(stream)
            elif self.watch.record(item):
                self._take(item)
            elif self.spec.busiest_loop:
                self._take_busiest(item)

    def _take_busiest(self, rec: StepRecord) -> None:
        """Until the window starts, the stream that delivers the most is measured: not
        one peeked at once nor a short validation pass. The warm-up restarts on it."""
        if self.window_start_ns is None and rec.stream != self.main_stream:
            seen = self.busiest.setdefault(rec.stream, [])
            seen.append(rec)
            if len(seen) <= len(self.records):
                return
            if self.main_stream is not None:
                self.busiest[self.main_stream] = self.records
            self.main_stream = rec.stream
            self.records = self.busiest.pop(rec.stream)[:-1]
        if rec.stream == self.main_stream:
            self.records.append(rec)
            self.watch.stepped(self.deps.clock(), rec.deliver_ns)
            self._advance(rec)

    def _adopt(self, stream: int) -> None:
        """A stream was found training: its steps so far are replayed (the first) or
        its examples join the main stream's steps from now on (a second one)."""
        early = self.watch.take_early(stream)
        if self.main_stream is None:
            self.main_stream = stream
            for rec in early:
                self._take(rec)
            return
        first, other = self.watch.where(self.main_stream), self.watch.where(stream)
        self.notes_seen.append(
            f"two datasets feed optimizer updates ({first} and {other}): measured together, "
            f"steps counted on the first, examples of both"
        )

    def _take(self, rec: StepRecord) -> None:
        if rec.stream != self.main_stream:
            self.pending_examples += rec.examples
            return
        if self.pending_examples:
            rec = replace(rec, examples=rec.examples + self.pending_examples)
            self.pending_examples = 0
        self.records.append(rec)
        self.watch.stepped(self.deps.clock(), rec.deliver_ns)
        self._advance(rec)

    def _advance(self, rec: StepRecord) -> None:
        spec = self.spec
        if self.window_start_ns is None:
            first = self.records[0].deliver_ns
            if (
                len(self.records) > spec.warmup_steps
                and (rec.deliver_ns - first) / 1e9 >= spec.warmup_s
            ):
                self.window_start_ns = rec.deliver_ns
                self.current_start_ns = rec.deliver_ns
                if isinstance(self.sampler, NvmlSampler):
                    self.sampler.start()
            return
        if self._done():
            return
        self.current.append(rec)
        long_enough = (rec.deliver_ns - self.current_start_ns) / 1e9 >= spec.window_s
        if long_enough and len(self.current) >= spec.window_steps:
            self.windows.append((self.current_start_ns, self.current))
            stats = window_stats(self.current_start_ns, self.current)
            self.current_start_ns = rec.deliver_ns
            self.current = []
            if stats is not None and self.on_report is not None and self.pruned_reason is None:
                rates = [s.examples_per_s for s in self._all_stats()]
                if self.on_report(len(self.windows) - 1, percentile(rates, 50)):
                    self.pruned_reason = f"pruned after {len(self.windows)} window(s)"

    def _all_stats(self) -> list[Any]:
        return [s for s in (window_stats(a, w) for a, w in self.windows) if s is not None]

    def _done(self) -> bool:
        return self.pruned_reason is not None or len(self.windows) >= self.spec.repeats

    def _raised(self) -> bool:
        """The script raised or finished: the process is on its way out."""
        return any(e.kind in ("exception", "finished") for e in self.events)

    def _event_failure(self) -> tuple[FailureKind, str] | None:
        for e in self.events:
            if e.kind == "nan":
                policy = self.config.mixed_precision
                under = f" under the {policy} policy" if policy in SIXTEEN_BIT_POLICIES else ""
                what = e.payload.get("what") or "loss"
                return FailureKind.NAN, f"{what} became {e.payload.get('value')} (NaN/inf){under}"
        return None

    def _metrics(self, gpu: GpuFigures | NotMeasured, truncated: bool) -> TrialMetrics | None:
        windows = list(self.windows)
        if truncated:
            windows = self._windows_from_what_ran()
        if not windows:
            return None
        stats = [s for s in (window_stats(a, w) for a, w in windows) if s is not None]
        if not stats:
            return None
        durations = [d for a, w in windows for d in step_durations_ms(a, w)]
        rates = [s.examples_per_s for s in stats]
        total_s = sum(s.duration_s for s in stats)
        wait_share = min(1.0, sum(s.input_wait_s for s in stats) / total_s) if total_s > 0 else 0.0
        gpu_note = None if isinstance(gpu, GpuFigures) else str(gpu)
        if isinstance(gpu, GpuFigures):
            util: float | None = gpu.utilization
            kind, note, mem = "nvml", None, gpu.memory_used_mb
        elif isinstance(self.sampler, NvmlSampler):
            # NVML found a GPU but could not sample it: say so, never fall back to a CPU
            # figure that would pass for GPU utilization.
            util, kind, note, mem = None, "nvml", gpu_note, None
        else:
            util, kind, note, mem = 1.0 - wait_share, "duty_cycle", None, None
        return TrialMetrics(
            examples_per_s=percentile(rates, 50),
            steps_per_s=percentile([s.steps_per_s for s in stats], 50),
            step_p50_ms=percentile(durations, 50),
            step_p90_ms=percentile(durations, 90),
            input_wait_share=wait_share,
            spread=spread(rates),
            repeats=tuple(rates),
            steps=sum(s.steps for s in stats),
            examples=sum(s.examples for s in stats),
            window_s=total_s,
            utilization=util,
            utilization_kind=kind,
            utilization_note=note,
            gpu_memory_used_mb=mem,
            truncated=truncated,
            gpu_note=gpu_note,
        )

    def _windows_from_what_ran(self) -> list[tuple[int, list[StepRecord]]]:
        """The script ended before the full window: measure over what it ran."""
        steady = [
            r
            for r in self.records
            if self.window_start_ns is not None and r.deliver_ns > self.window_start_ns
        ]
        if self.window_start_ns is not None and steady:
            start = self.window_start_ns
        else:
            # Never reached the end of warm-up: use everything after the first step.
            if len(self.records) < 2:
                return []
            start, steady = self.records[0].deliver_ns, self.records[1:]
        repeats = max(1, min(self.spec.repeats, len(steady) // 2 or 1))
        size = len(steady) // repeats
        out: list[tuple[int, list[StepRecord]]] = []
        for i in range(repeats):
            chunk = steady[i * size : (i + 1) * size] if i < repeats - 1 else steady[i * size :]
            if chunk:
                out.append((start, chunk))
                start = chunk[-1].deliver_ns
        return out


# ---- run and profile -----------------------------------------------------------------------
def run_script(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    config: Config | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    deps: RunnerDeps | None = None,
) -> int:
    """``tftune run``: the script with `config` applied, output to the terminal. Returns
    the script's exit code. Ctrl-C stops the whole process group."""
    deps = deps or RunnerDeps()
    path = check_script(script)
    with _workdir() as work:
        spec = {
            "mode": "apply",
            "script": str(path),
            "args": list(args),
            "config": (config or Config()).to_json(),
        }
        _, returncode, _, _ = _run_to_end(deps, work, spec, cwd, None, capture=False)
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode


def profile_script(
    script: str | os.PathLike[str],
    args: Sequence[str],
    start_step: int,
    stop_step: int,
    logdir: str | os.PathLike[str],
    *,
    config: Config | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout_s: float | None = None,
    step_timeout_s: float | None = None,
    deps: RunnerDeps | None = None,
) -> ProfileResult:
    """``tftune profile``: a TensorBoard trace of training steps [start, stop), with markers.

    Steps are counted on the stream that feeds optimizer updates (`tuner/_roles.py`), so a
    counting loop, a peek or `adapt` before training is never what is profiled. The script
    is stopped once the trace is written, or when a training step is overdue (`watch`)."""
    deps = deps or RunnerDeps()
    path = check_script(script)
    logdir_abs = str(Path(logdir).resolve())
    with _workdir() as work:
        clock_file = work / "clock.txt"
        clock_file.touch()
        spec = {
            "mode": "profile",
            "script": str(path),
            "args": list(args),
            "config": (config or Config()).to_json(),
            "clock_file": str(clock_file),
            "fallback_s": FALLBACK_S,
            "profile": {"start": start_step, "stop": stop_step, "logdir": logdir_abs},
        }
        spec_file = _write_spec(work, spec)
        reader = ClockReader(str(clock_file))
        err_path = work / "stderr.txt"
        events: list[ClockEvent] = []
        watch = StreamWatch(deps.clock(), step_timeout_s=step_timeout_s)
        overdue: str | None = None
        with open(work / "stdout.txt", "wb") as out_fh, open(err_path, "wb") as err_fh:
            proc = deps.launcher(
                child_argv(deps.python),
                str(cwd or os.getcwd()),
                _child_env(spec_file),
                out_fh,
                err_fh,
            )
            watch.start = started = deps.clock()
            try:
                while overdue is None:
                    events += _watched(reader.poll(), watch, deps.clock())
                    if any(e.kind in ("profile_done", "profile_failed") for e in events):
                        break
                    if any(e.kind in ("finished", "exception") for e in events):
                        # Done before the profile ended; TF's teardown may hang: give it
                        # the grace period, then stop it.
                        _wait_exit(proc, EXIT_GRACE_S, deps.sleep)
                        events += _watched(reader.poll(), watch, deps.clock())
                        break
                    if proc.poll() is not None:
                        events += _watched(reader.poll(), watch, deps.clock())
                        break
                    if timeout_s is not None and deps.clock() - started > timeout_s:
                        break
                    overdue = watch.overdue(deps.clock())
                    deps.sleep(POLL_S)
            finally:
                stop_group(proc, 3.0, deps.sleep)
        tail = _tail(err_path)
    return _profile_result(logdir_abs, events, proc.returncode, tail, stop_step, overdue, watch)


def _watched(
    items: list[StepRecord | ClockEvent], watch: StreamWatch, now: float
) -> list[ClockEvent]:
    """Feed a watch; the events among `items`."""
    events = []
    for item in items:
        if isinstance(item, ClockEvent):
            events.append(item)
            watch.event(item)
        elif watch.record(item):
            watch.stepped(now, item.deliver_ns)
    return events


def _profile_result(
    logdir: str,
    events: list[ClockEvent],
    returncode: int | None,
    tail: str,
    stop_step: int,
    overdue: str | None,
    watch: StreamWatch,
) -> ProfileResult:
    done = any(e.kind == "profile_done" for e in events)
    reason = None
    if not done:
        failed = next((e for e in events if e.kind == "profile_failed"), None)
        exc = next((e for e in events if e.kind == "exception"), None)
        if failed is not None:
            reason = f"profiler failed: {failed.payload.get('error')}"
        elif exc is not None:
            reason = f"script raised {exc.payload.get('type')}: {exc.payload.get('message')}"
        elif overdue is not None:
            reason = overdue
        elif returncode not in (None, 0) and returncode != -signal.SIGTERM:
            reason = f"script exited with code {returncode} before training step {stop_step}"
        else:
            reason = f"script ended before training step {stop_step}"
        if watch.last_step is None and overdue is None and exc is None:
            reason += f"; {describe_streams(watch.streams())}"
    steps = None
    for e in events:
        if e.kind == "profile_done" and "first" in e.payload and "last" in e.payload:
            steps = (int(e.payload["first"]), int(e.payload["last"]))
    return ProfileResult(logdir, done, returncode, reason, tail, steps, watch.streams())
