"""Launch a child, poll it, stop it: the one loop every run of a user's script goes through.

A `ChildRun` writes the child's spec (the JSON the bootstrap reads, `SPEC_ENV`), starts
the child through the injectable `RunnerDeps.launcher` in its own session (process
group), then polls its clock file and the process until the caller's `Observer` has what
it came for, the script ends, a deadline passes or the caller's deadline does. Whatever
happens (an exception included), the whole process group is sent SIGTERM, then SIGKILL,
before `ChildRun.run` returns its frozen `Ended`.

Callers: a measured trial (`trial.measure`), discovery (`trial.discovery`), ``tftune
profile`` (`trial.profile`) and ``tftune run`` (`run_script`, here). Pure Python: no
TensorFlow in the parent.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from tftune.core.errors import ScriptError
from tftune.probes.live.clock import ClockReader, StepRecord
from tftune.probes.live.clock_events import ChildEvent
from tftune.probes.live.nvml import NvmlReader, PynvmlReader
from tftune.tuner.child.bootstrap import PARENT_ENV, SPEC_ENV
from tftune.tuner.searchspace.config import Config

POLL_S = 0.05
STDERR_TAIL_LINES = 200  # kept with a failed trial: a native crash prints every thread
EXIT_GRACE_S = 10.0  # a script that raised gets this long to print its traceback and exit
TERM_GRACE_S = 3.0  # between SIGTERM and SIGKILL, unless the caller says otherwise

# The child starts with `-c`, whose sys.path[0] is the working directory: it is dropped
# before tftune is imported, so a folder of the user's (or a checkout of tftune itself,
# whose `tftune/` is the front package alone) cannot shadow the installed package. The
# bootstrap then puts the script's folder first, as `python train.py` would.
_LAUNCH = "import sys; del sys.path[0]; from tftune.tuner.child.bootstrap import main; main()"


# ---- injection points -----------------------------------------------------------------
class ChildProcess(Protocol):
    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class SpareChild(Protocol):
    """A child already started, waiting for its spec (`trial.spare.Spare`)."""

    @property
    def proc(self) -> ChildProcess: ...

    @property
    def stderr(self) -> Path: ...

    def hand_over(self, spec_json: str) -> None: ...

    def discard(self) -> None: ...


class Spares(Protocol):
    """Where a run may take a started child from (`trial.spare.SparePool`)."""

    def take(self, cwd: str) -> SpareChild | None: ...

    def settled(self) -> bool: ...


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
    """Everything a child run touches outside itself, injectable for tests."""

    launcher: Launcher = popen_launcher
    clock: Clock = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    nvml_reader: Callable[[], NvmlReader] | None = PynvmlReader
    python: str = field(default_factory=lambda: sys.executable)
    # Warm spares for the runs that may start from one (`trial.spare`); None: cold.
    spares: Spares | None = None


# ---- the script and the child's command line ----------------------------------------------
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


def child_argv(python: str) -> list[str]:
    """The command line of a child that runs a user's script under the bootstrap."""
    return [python, "-c", _LAUNCH]


def child_env(spec_file: str) -> dict[str, str]:
    """The child's environment: this process's, with the spec file's path and this
    process's PID (the child dies with it)."""
    env = dict(os.environ)
    env[SPEC_ENV] = spec_file
    env[PARENT_ENV] = str(os.getpid())
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def child_spec(mode: str, script: Path, args: Sequence[str], config: Config) -> dict[str, Any]:
    """The spec every mode shares; callers add their mode's own keys."""
    return {"mode": mode, "script": str(script), "args": list(args), "config": config.to_json()}


# ---- stopping -------------------------------------------------------------------------------
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


def tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    """The last `lines` lines of a file (its last 64 KB at most); "" if unreadable."""
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
def workdir() -> Iterator[Path]:
    """A private folder for one child's spec, clock file and output; removed after."""
    with tempfile.TemporaryDirectory(prefix="tftune-trial-") as tmp:
        yield Path(tmp)


# ---- the loop -----------------------------------------------------------------------------
class Observer:
    """What a caller does with a child's clock file; the base class watches nothing.

    `ChildRun.run` calls `launched` once, right after the child started; then, at each
    poll, `take` with the records and events written since the last one, then `finished`
    (True stops the child now: the caller has what it came for), `said_done` (the script
    said it raised or returned: it gets `EXIT_GRACE_S` to exit before it is stopped) and
    `overdue` (a line when one of the caller's deadlines passed: the child is stopped).
    After the last `take`, nothing more is called.
    """

    def launched(self, now: float) -> None:
        """The child started at `now` (the deps clock)."""

    def take(self, items: list[StepRecord | ChildEvent]) -> None:
        """Records and events the child wrote since the last poll."""

    def finished(self) -> bool:
        return False

    def said_done(self) -> bool:
        return False

    def overdue(self, now: float) -> str | None:
        return None


@dataclass(frozen=True, slots=True)
class Ended:
    """How a child run ended. The child's whole group is stopped by then."""

    returncode: int | None  # negative: the signal that stopped it
    alive: bool  # still running when it was stopped (tftune stopped it)
    hung: bool  # said it was done, then did not exit within EXIT_GRACE_S
    overdue: str | None  # the observer's deadline that passed, in one line
    timed_out: bool  # the caller's deadline passed
    stderr_tail: str  # "" when the output went to the terminal
    started: float  # the deps clock just before the launch


class ChildRun:
    """One child under the bootstrap: the spec written, the child launched, polled and
    stopped. `clock=True` gives it a clock file (the spec's ``clock_file``) to write its
    step records and events to; `capture=False` leaves its output on the terminal."""

    def __init__(
        self,
        deps: RunnerDeps,
        work: Path,
        spec: dict[str, Any],
        *,
        cwd: str | os.PathLike[str] | None = None,
        capture: bool = True,
        clock: bool = False,
    ) -> None:
        self.deps, self.work, self.spec = deps, work, dict(spec)
        self.cwd, self.capture = str(cwd or os.getcwd()), capture
        self.reader: ClockReader | None = None
        if clock:
            clock_file = work / "clock.txt"
            clock_file.touch()
            self.spec["clock_file"] = str(clock_file)
            self.reader = ClockReader(str(clock_file))

    def run(
        self,
        observer: Observer | None = None,
        *,
        deadline_s: float | None = None,
        term_grace_s: float = TERM_GRACE_S,
    ) -> Ended:
        """Run the child until it ends, `observer` is done with it, or `deadline_s`."""
        observer = observer or Observer()
        spares = self.deps.spares if self.capture else None
        spare = spares.take(self.cwd) if spares is not None else None
        try:
            return self._run(observer, spare, deadline_s, term_grace_s)
        finally:
            if spare is not None:
                spare.discard()

    def _run(
        self,
        observer: Observer,
        spare: SpareChild | None,
        deadline_s: float | None,
        term_grace_s: float,
    ) -> Ended:
        """Launch (or hand the spec to `spare`), poll, stop."""
        spec_json = json.dumps(self.spec)
        err_path = spare.stderr if spare is not None else self.work / "stderr.txt"
        with contextlib.ExitStack() as stack:
            started = self.deps.clock()
            if spare is not None:
                spare.hand_over(spec_json)
                proc = spare.proc
            else:
                spec_file = self.work / "spec.json"
                spec_file.write_text(spec_json, encoding="utf-8")
                out_fh, err_fh = None, None
                if self.capture:
                    out_fh = stack.enter_context(open(self.work / "stdout.txt", "wb"))
                    err_fh = stack.enter_context(open(err_path, "wb"))
                argv = child_argv(self.deps.python)
                proc = self.deps.launcher(argv, self.cwd, child_env(str(spec_file)), out_fh, err_fh)
            observer.launched(self.deps.clock())
            try:
                hung, overdue, timed_out = self._poll(proc, observer, started, deadline_s)
            finally:
                alive = proc.poll() is None
                stop_group(proc, term_grace_s, self.deps.sleep)
        stderr_tail = tail(err_path) if self.capture else ""
        return Ended(proc.returncode, alive, hung, overdue, timed_out, stderr_tail, started)

    def _poll(
        self, proc: ChildProcess, observer: Observer, started: float, deadline_s: float | None
    ) -> tuple[bool, str | None, bool]:
        """Poll until there is a reason to stop: (hung, overdue, timed out)."""
        deps = self.deps
        while True:
            self._take(observer)
            if observer.finished():
                return False, None, False
            if observer.said_done() and proc.poll() is None:
                # The script raised or returned and is on its way out (a traceback, TF's
                # teardown can take seconds): not a stall. Let it exit; if its teardown
                # hangs, it is judged by what it said.
                _wait_exit(proc, EXIT_GRACE_S, deps.sleep)
                hung = proc.poll() is None
                self._take(observer)
                return hung, None, False
            if proc.poll() is not None:
                self._take(observer)
                return False, None, False
            now = deps.clock()
            overdue = observer.overdue(now)
            if overdue is not None:
                return False, overdue, False
            if deadline_s is not None and now - started > deadline_s:
                return False, None, True
            deps.sleep(POLL_S)

    def _take(self, observer: Observer) -> None:
        if self.reader is not None:
            observer.take(self.reader.poll())


def exit_code(returncode: int | None) -> int:
    """A child's return code as a shell gives it: 128 + N for a death by signal N."""
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode


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
    path = check_script(script)
    with workdir() as work:
        spec = child_spec("apply", path, args, config or Config())
        child = ChildRun(deps or RunnerDeps(), work, spec, cwd=cwd, capture=False)
        ended = child.run()
    return exit_code(ended.returncode)
