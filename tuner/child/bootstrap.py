"""The child side of a trial: the process the parent starts to run the user's script.

The parent starts it as ``python -c "import sys; del sys.path[0]; from
tftune.tuner.child.bootstrap import main; main()"`` (the installed tftune, never the
script's folder, is imported), and `main` does the rest.

The parent passes a JSON spec through the ``TFTUNE_CHILD_SPEC`` environment variable (a
file path), removed before the script runs so its own subprocesses are left alone. The
script then runs as ``python train.py ARGS`` would: same argv, cwd, ``sys.path[0]`` (the
script's folder) and ``__name__ == "__main__"``.

Modes:
  ``discover``  record call sites and the datasets iterated; stop once one is training.
  ``measure``   apply the config and stream step records (`probes.live.clock`) to a file.
  ``apply``     apply the config; no clock (``tftune run``).
  ``profile``   step clock drives a TensorBoard profile between two steps, with markers.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import importlib
import json
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from tftune.probes.live.clock import ClockWriter
from tftune.probes.live.clock_events import (
    ChildNotes,
    CpuMeasured,
    LossSamples,
    NanSeen,
    OptimizerBuilt,
    OutputLayerFound,
    ProfileDone,
    ProfileFailed,
    ScriptFinished,
    ScriptRaised,
    ScriptStarted,
    StreamFound,
    TrainingFound,
    encode_event,
)
from tftune.tuner.child.discovery_events import (
    CompileFound,
    DiscoveryEvent,
    ElementCounts,
    FitFound,
    KerasImported,
    PipelineIterated,
    SiteFound,
    StepFunctionFound,
)
from tftune.tuner.child.imports import _PostImportHook
from tftune.tuner.child.loss_log import LossLog
from tftune.tuner.child.patcher import Patcher
from tftune.tuner.child.state import Hooks, IterationInfo, SiteCall
from tftune.tuner.fixes.training_calls import CompileCall, FitCall, StepFunction
from tftune.tuner.searchspace.config import config_from_json

SPEC_ENV = "TFTUNE_CHILD_SPEC"
# A warm spare (`tuner/trial/spare.py`): the modules to import before the spec exists
# (comma-separated dotted paths: ``tensorflow``, ``tensorflow.keras.layers``), and the file
# to create once they are imported.
PRELOAD_ENV = "TFTUNE_CHILD_PRELOAD"
READY_ENV = "TFTUNE_CHILD_READY"
# The PID of the tftune process that started the child: one killed between starting the
# child and the child's first line is gone before the child can see its parent change.
PARENT_ENV = "TFTUNE_CHILD_PARENT"
SPEC_POLL_S = 0.01
EXIT_DISCOVERY_DONE = 0
# How often the child checks that the tftune process that started it is still there.
PARENT_POLL_S = 0.5


def _die_with_parent(poll_s: float = PARENT_POLL_S) -> None:
    """SIGKILL this trial's whole process group once the tftune process that started it
    is gone (kill -9, preemption, OOM killer), or was gone before this line ran
    (`PARENT_ENV`: a spare started just before its parent was killed). The trial runs in
    its own session, so no terminal signal reaches it and the parent can no longer stop
    it; without this, a killed `tftune optimize` would leave the script training (and its
    forks) forever, or a warm spare waiting for a spec that never comes.

    Only when this process leads its own group (the runner's launcher made it so):
    otherwise the group is someone else's."""
    starter = os.environ.pop(PARENT_ENV, "")
    if os.getpgrp() != os.getpid():
        return
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent and _alive(starter):
            time.sleep(poll_s)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="tftune-parent-watch", daemon=True).start()


def _alive(pid: str) -> bool:
    """Whether the process `pid` (`PARENT_ENV`; empty: not told) still exists."""
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Discovery:
    """Appends each call site, each iterated dataset and its stream to a file, as typed
    events (`discovery_events`), and leaves once a stream is training (`roles`): the
    pipeline that trains is built by then, and counting loops, peeks and `adapt` before
    it were seen on the way."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()
        self._elements: dict[int, int] = {}
        self._written = 0.0

    def site(self, call: SiteCall) -> None:
        self._write(SiteFound(call))

    def iterate(self, info: IterationInfo) -> None:
        self._write(PipelineIterated(info))

    def stream(self, stream: int, site: str | None, place: str | None) -> None:
        self._write(StreamFound(stream, site, place))

    def records(self, stream: int, rows: list[tuple[int, int, int]]) -> None:
        """Element counts per stream, written at most once a second (for the message
        of a discovery that finds no training)."""
        with self._lock:
            self._elements[stream] = self._elements.get(stream, 0) + len(rows)
            if time.monotonic() - self._written < 1.0:
                return
            self._written = time.monotonic()
            counts = tuple(sorted(self._elements.items()))
        self._write(ElementCounts(counts))

    def started(self, at_ns: int) -> None:
        self._write(ScriptStarted(at_ns))

    def training(self, stream: int, how: str) -> None:
        with self._lock:
            counts = tuple(sorted(self._elements.items()))
        self._write(ElementCounts(counts))
        self._write(TrainingFound(stream, how, time.time_ns()))
        # Discovery never needs the script to train on: leave at once, without atexit
        # handlers or TF's teardown.
        os._exit(EXIT_DISCOVERY_DONE)

    def keras(self, name: str) -> None:
        self._write(KerasImported(name))

    def fit(self, call: FitCall) -> None:
        self._write(FitFound(call))

    def compile(self, call: CompileCall) -> None:
        self._write(CompileFound(call))

    def step_function(self, step: StepFunction) -> None:
        self._write(StepFunctionFound(step))

    def _write(self, event: DiscoveryEvent) -> None:
        line = encode_event(event)
        with self._lock:
            self._fh.write(line)
            self._fh.flush()


class _Profiler:
    """Starts the TF profiler at step `start` and stops it once step `stop` is requested.

    Each step is wrapped in ``Trace("train", step_num=N, _r=1)``, from its request to the
    next one, so the trace has marker-based steps. Stopping (which writes the trace) runs
    on a helper thread: the clock callbacks run inside tf.data and must not block on it.
    """

    def __init__(
        self, start: int, stop: int, logdir: str, writer: ClockWriter, script: str = ""
    ) -> None:
        self.start, self.stop, self.logdir = start, stop, logdir
        self.writer = writer
        self.script = script
        self.sites: list[SiteCall] = []  # the call sites, as the script made them
        self.main_stream: int | None = None
        self.step = 0
        self.trace: Any = None
        self.stopping = False
        self.stopper: threading.Thread | None = None  # writes the trace, off tf.data's threads
        # Only training steps are profiled (a counting loop, a peek, `adapt` are not).
        self.is_training: Callable[[int], bool] = lambda _stream: True

    def finish(self) -> None:
        """At the script's end: the trace written. A stop under way is waited for (a
        short script can end while a loaded host still writes it, and the interpreter's
        exit would kill the thread); else the steps it ran are kept."""
        if self.stopper is not None:
            self.stopper.join()
        elif self.step > self.start and not self.stopping:
            self.stopping = True
            self._stop()

    def _stop(self) -> None:
        import tensorflow as tf

        try:
            tf.profiler.experimental.stop()
            self._write_sites()
            last = min(self.step, self.stop) - 1  # the last step whose marker was closed
            self.writer.event(ProfileDone(self.logdir, self.start, last))
        except Exception as exc:
            self.writer.event(ProfileFailed(f"{type(exc).__name__}: {exc}"))

    def _write_sites(self) -> None:
        """The call sites beside the trace, in the run's folder: `tftune analyze` names a
        stage's line from them (`probes.traces.callsites`). Best effort: the trace stands alone."""
        from tftune.probes.traces.callsites import RecordedSite, newest_run_dir, write_sites

        run_dir = newest_run_dir(self.logdir)
        if run_dir is None:
            return
        recorded = [RecordedSite(c.site, c.op, c.function) for c in list(self.sites)]
        try:
            write_sites(run_dir, self.script, recorded, tf_version=_tf_version())
        except Exception as exc:  # never fail a written profile over it
            self.writer.event(ChildNotes((f"call sites not recorded: {exc}",)))

    def on_request(self, stream: int) -> None:
        import tensorflow as tf

        if self.main_stream is None:
            if not self.is_training(stream):
                return
            self.main_stream = stream
        if stream != self.main_stream or self.stopping:
            return
        if self.trace is not None:
            self.trace.__exit__(None, None, None)
            self.trace = None
        if self.step == self.start:
            tf.profiler.experimental.start(self.logdir)
        if self.start <= self.step < self.stop:
            self.trace = tf.profiler.experimental.Trace("train", step_num=self.step, _r=1)
            self.trace.__enter__()
        elif self.step >= self.stop:
            self.stopping = True
            self.stopper = threading.Thread(target=self._stop, name="tftune-profiler", daemon=True)
            self.stopper.start()
        self.step += 1


def _tf_version() -> str | None:
    """The TensorFlow this child runs, recorded beside a profile it takes."""
    tf = sys.modules.get("tensorflow")
    version = getattr(tf, "__version__", None)
    return version if isinstance(version, str) else None


def _wire(
    mode: str, spec: dict[str, Any], hooks: Hooks, patcher: Patcher, writer: ClockWriter | None
) -> _Profiler | None:
    """Connect the patches' hooks to what this mode reports; the profiler, if any."""
    profiler: _Profiler | None = None
    fallback = spec.get("fallback_s")  # when nothing updates: the busiest loop (`roles`)
    patcher.roles.fallback_s = float(fallback) if fallback is not None else None
    at = spec.get("training_at")
    patcher.training_at = (at[0], at[1]) if isinstance(at, list) and len(at) == 2 else None
    if writer is not None:
        hooks.on_nan = lambda what, value: writer.event(NanSeen(what, float(value)))
        hooks.on_finding = lambda finding: writer.event(OutputLayerFound(finding))
        hooks.on_cpu = lambda usage: writer.event(CpuMeasured(usage))
        hooks.on_stream = lambda n, site, place: writer.event(StreamFound(n, site, place))
        hooks.on_training = lambda n, how: writer.event(TrainingFound(n, how))
        hooks.on_epoch = writer.event
        hooks.on_start = lambda at: writer.event(ScriptStarted(at))
    if mode == "discover":
        discovery = _Discovery(spec["discovery_file"])
        hooks.on_site = discovery.site
        hooks.on_iterate = discovery.iterate
        hooks.on_stream = discovery.stream
        hooks.on_records = discovery.records
        hooks.on_training = discovery.training
        hooks.on_start = discovery.started
        hooks.on_fit = discovery.fit
        hooks.on_compile = discovery.compile
        hooks.on_step_function = discovery.step_function
        patcher.instrument_clock = True
        _PostImportHook.when_imported("keras", lambda m: discovery.keras(m.__name__))
    elif mode == "measure" and writer is not None:
        hooks.on_records = writer.records
        patcher.instrument_clock = True
        patcher.losses = LossLog()
        hooks.on_losses = lambda samples, places, unread: writer.event(
            LossSamples(
                tuple((int(ns), float(v), int(p)) for ns, v, p in samples), tuple(places), unread
            )
        )
        hooks.on_optimizer = lambda seen: writer.event(OptimizerBuilt(seen))
    elif mode == "profile" and writer is not None:
        prof = spec["profile"]
        profiler = _Profiler(
            int(prof["start"]), int(prof["stop"]), prof["logdir"], writer, spec["script"]
        )
        profiler.is_training = lambda n: n in patcher.roles.training
        hooks.on_site = profiler.sites.append
        hooks.on_request = profiler.on_request
        hooks.on_records = writer.records
        patcher.instrument_clock = True
    return profiler


def main() -> None:
    _die_with_parent()
    # A native crash (SIGSEGV, SIGABRT) prints every thread's Python stack to stderr,
    # which the parent keeps with the failed trial.
    faulthandler.enable()
    _preload()
    spec_path = os.environ.pop(SPEC_ENV)
    with open(spec_path, encoding="utf-8") as fh:
        spec: dict[str, Any] = json.load(fh)
    script = os.path.abspath(spec["script"])
    script_dir = os.path.dirname(script)
    config = config_from_json(spec.get("config", {}), "<trial config>")
    mode = spec["mode"]
    hooks = Hooks()
    patcher = Patcher(config, script_dir, hooks)
    writer = ClockWriter(spec["clock_file"]) if spec.get("clock_file") else None
    profiler = _wire(mode, spec, hooks, patcher, writer)
    patcher.install()

    sys.argv = [script, *spec.get("args", [])]
    sys.path.insert(0, script_dir)  # the launcher dropped its own first entry
    exit_code: object = 0
    if hooks.on_start is not None:  # the preamble is timed from here
        hooks.on_start(time.time_ns())
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        exit_code = exc.code
        raise
    except BaseException as exc:
        exit_code = 1
        traceback.print_exc()  # the interpreter will not: `_leave_now` below
        if writer is not None:
            tb = traceback.extract_tb(exc.__traceback__)
            where = f"{tb[-1].filename}:{tb[-1].lineno}" if tb else None
            message = str(exc).strip().splitlines()
            writer.event(
                ScriptRaised(
                    type(exc).__name__,
                    tuple(c.__name__ for c in type(exc).__mro__),
                    message[0][:500] if message else "",
                    where,
                )
            )
        raise
    finally:
        patcher.stop()
        if profiler is not None:
            profiler.finish()
        if writer is not None and hooks.notes:
            writer.event(ChildNotes(tuple(hooks.notes)))
        if writer is not None:
            # The script is done; interpreter and TensorFlow teardown can take seconds,
            # which the parent must not mistake for a stall.
            code = exit_code if isinstance(exit_code, int) or exit_code is None else 1
            writer.event(ScriptFinished(int(code or 0)))
        if mode == "measure":
            _leave_now(exit_code)
        elif exit_code == 1:  # the script raised: its handlers run, TF's teardown does not
            _leave_now(exit_code, run_atexit=True)


def _preload() -> None:
    """A warm spare: import what the next run will (`PRELOAD_ENV`), say so, then wait
    for the spec file to appear (the parent writes it whole: a rename). A module that
    fails to import is left to the script, which meets the same error in its own line."""
    names = os.environ.pop(PRELOAD_ENV, "")
    ready = os.environ.pop(READY_ENV, None)
    if not names:
        return
    for dotted in names.split(","):
        head, *attrs = dotted.split(".")
        try:
            obj: Any = importlib.import_module(head)
            for attr in attrs:  # `tf.keras` loads lazily, on attribute access
                obj = getattr(obj, attr)
        except Exception:
            break
    if ready:
        with open(ready, "w", encoding="utf-8"):
            pass
    spec = os.environ[SPEC_ENV]
    while not os.path.exists(spec):
        time.sleep(SPEC_POLL_S)


def _leave_now(exit_code: object, *, run_atexit: bool = False) -> None:
    """A measured script is done, or a script raised: exit without the interpreter's
    teardown. There is nothing left to measure, and TF's teardown can hang: an iterator
    whose map runs a `py_function` is destroyed while holding the GIL, and its
    prefetching thread waits for the GIL inside that function (seen with a tokenizer in
    `tf.py_function`; a script that raised mid-epoch hung discovery until its timeout).
    `run_atexit`: the script's own exit handlers run first (a logger's flush)."""
    if run_atexit:
        atexit._run_exitfuncs()
    if exit_code is not None and not isinstance(exit_code, int):
        print(exit_code, file=sys.stderr)  # as `sys.exit("message")` would
        exit_code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(exit_code or 0)


if __name__ == "__main__":
    main()
