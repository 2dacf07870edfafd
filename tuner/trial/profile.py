"""``tftune profile``: a TensorBoard trace of training steps [start, stop), with markers.

`profile_script(script, args, start, stop, logdir)` → `ProfileResult`. Steps are counted
on the stream that feeds optimizer updates (`tuner/child/roles.py`), so a counting loop,
a peek or `adapt` before training is never what is profiled. The child (mode
``profile``) says when the trace is written; the script is stopped then (or, where it
has seen one epoch start, once the second comes, within `EPOCH_WAIT_S`: the step clock
prices an epoch start's stall from it), or when a training step is overdue
(`trial.watch`), through the one launch loop (`trial.launch.ChildRun`).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tftune.core.training import StreamSeen, TrainingTime
from tftune.probes.live.clock import StepRecord, percentile
from tftune.probes.live.clock_events import (
    ChildEvent,
    ProfileDone,
    ProfileFailed,
    ScriptFinished,
    ScriptRaised,
)
from tftune.probes.live.training_record import write_clock_file
from tftune.probes.live.training_time import PassTimeline
from tftune.probes.traces.callsites import newest_run_dir
from tftune.tuner.searchspace.config import Config
from tftune.tuner.trial.launch import (
    ChildRun,
    Clock,
    Ended,
    Observer,
    RunnerDeps,
    check_script,
    child_spec,
    workdir,
)
from tftune.tuner.trial.script_text import fallback_s as script_fallback_s
from tftune.tuner.trial.watch import StreamWatch, describe_streams

# After the trace, a run that has seen one epoch start goes on to the second, where the
# rest of the first epoch takes at most this long: its stall prices an epoch start.
EPOCH_WAIT_S = 60.0


@dataclass(frozen=True, slots=True)
class ProfileResult:
    logdir: str
    captured: bool
    returncode: int | None
    reason: str | None
    stderr_tail: str
    steps: tuple[int, int] | None = None  # first and last step captured (inclusive)
    streams: tuple[StreamSeen, ...] = ()  # the datasets iterated, and their roles
    # The step clock's figures of the run, also written beside the trace (`CLOCK_FILE`).
    training: TrainingTime | None = None
    note: str | None = None  # what the step clock could not see (a second epoch start)


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
    fallback_s: float | Literal["from_text"] | None = "from_text",
    on_step: Callable[[int], None] | None = None,
) -> ProfileResult:
    """Profile training steps [start_step, stop_step) of the script into `logdir`.
    `fallback_s`: how long the child waits for an update before it takes the busiest
    loop as training: by default what the script's text says (`script_text.fallback_s`:
    never, for a script that shows training); shorter once discovery has found that the
    script updates nothing (`watch.KNOWN_BUSIEST_S`). `on_step`: progress, told how many
    training steps the run has taken, as each one comes."""
    deps = deps or RunnerDeps()
    path = check_script(script)
    if fallback_s == "from_text":
        fallback_s = script_fallback_s(path)
    logdir_abs = str(Path(logdir).resolve())
    with workdir() as work:
        spec = child_spec("profile", path, args, config or Config())
        spec.update(
            fallback_s=fallback_s,
            profile={"start": start_step, "stop": stop_step, "logdir": logdir_abs},
        )
        watch = _ProfileWatch(
            StreamWatch(deps.clock(), step_timeout_s=step_timeout_s), deps.clock, on_step
        )
        ended = ChildRun(deps, work, spec, cwd=cwd, clock=True).run(watch, deadline_s=timeout_s)
    return watch.result(logdir_abs, ended, stop_step)


class _ProfileWatch(Observer):
    """Follows the streams until the child says the profile is written (or failed)."""

    def __init__(
        self, watch: StreamWatch, clock: Clock, on_step: Callable[[int], None] | None = None
    ) -> None:
        self.watch, self.clock, self.on_step = watch, clock, on_step
        self.events: list[ChildEvent] = []
        # The step clock's view of training (`probes.live.training_time`): the first training
        # stream's steps, the other streams' passes, epoch starts and pipelines.
        self.main: int | None = None
        self.records: list[StepRecord] = []
        self.timeline = PassTimeline()
        self.wait_until: float | None = None  # going on to the second epoch's start
        self.note: str | None = None  # why the run did not

    def launched(self, now: float) -> None:
        self.watch.start = now

    def take(self, items: list[StepRecord | ChildEvent]) -> None:
        for item in items:
            if not isinstance(item, StepRecord):
                self.events.append(item)
                self.timeline.event(item)
                stream = self.watch.event(item)
                if stream is not None and self.main is None:
                    self.main = stream
                    self.timeline.forget(stream)
                    self.records = self.watch.take_early(stream)
            elif self.watch.record(item):
                self.watch.stepped(self.clock(), item.deliver_ns)
                if item.stream == self.main:
                    self.records.append(item)
                    if self.on_step is not None:
                        self.on_step(len(self.records))
            else:
                self.timeline.other(item)

    def training_time(self) -> TrainingTime | None:
        """What the step clock saw of training over the whole profiled run: the epoch
        stall (however steady the profiled steps are) and the preamble."""
        if self.main is None or len(self.records) < 2:
            return None
        records = self.records
        times = self.timeline.step_times(records[0].deliver_ns, records[1:])
        return self.timeline.training_time(self.main, records, percentile(times, 50) / 1e9)

    def finished(self) -> bool:
        if any(isinstance(e, ProfileFailed) for e in self.events):
            return True
        if not any(isinstance(e, ProfileDone) for e in self.events):
            return False
        return not self._waits_for_next_epoch()

    def _waits_for_next_epoch(self) -> bool:
        """The trace is written: where the run has seen one epoch start, the step clock
        goes on to the second (its stall is what prices an epoch start: a first epoch's
        first step also traces), unless the first epoch would take over
        `EPOCH_WAIT_S` more (`note` says so) or its length is unknown."""
        if self.main is None or len(self.records) < 2:
            return False
        starts = self.timeline.starts(self.main)
        if not starts or (len(starts) > 1 and self.records[-1].request_ns > starts[1].at_ns):
            return False  # the second epoch's first step is in
        if self.wait_until is None:
            times = self.timeline.step_times(self.records[0].deliver_ns, self.records[1:])
            step_s = percentile(times, 50) / 1e9
            left = starts[0].cardinality - len(self.records)
            if starts[0].cardinality < 1 or left * step_s > EPOCH_WAIT_S:
                more = f" (about {left * step_s:,.0f} s more)" if left > 0 else ""
                self.note = (
                    "the run ended inside its first epoch, whose length is unknown"
                    if starts[0].cardinality < 1
                    else f"the run ended inside its first epoch, too long to wait for{more}"
                ) + ": an epoch start's stall is priced from that one start alone"
                return False
            self.wait_until = self.clock() + left * step_s * 2 + 10.0
        return self.clock() < self.wait_until

    def said_done(self) -> bool:
        # Done before the profile ended; TF's teardown may hang: it gets the grace period.
        return any(isinstance(e, ScriptFinished | ScriptRaised) for e in self.events)

    def overdue(self, now: float) -> str | None:
        return self.watch.overdue(now)

    def result(self, logdir: str, ended: Ended, stop_step: int) -> ProfileResult:
        events, returncode, overdue = self.events, ended.returncode, ended.overdue
        done_events = [e for e in events if isinstance(e, ProfileDone)]
        done = bool(done_events)
        reason = None
        if not done:
            failed = next((e for e in events if isinstance(e, ProfileFailed)), None)
            exc = next((e for e in events if isinstance(e, ScriptRaised)), None)
            if failed is not None:
                reason = f"profiler failed: {failed.error}"
            elif exc is not None:
                reason = f"script raised {exc.type}: {exc.message}"
            elif overdue is not None:
                reason = overdue
            elif returncode not in (None, 0) and returncode != -signal.SIGTERM:
                reason = f"script exited with code {returncode} before training step {stop_step}"
            else:
                reason = f"script ended before training step {stop_step}"
            if self.watch.last_step is None and overdue is None and exc is None:
                reason += f"; {describe_streams(self.watch.streams())}"
        steps = (done_events[-1].first, done_events[-1].last) if done_events else None
        training = self.training_time() if done else None
        run_dir = newest_run_dir(logdir) if training is not None else None
        if training is not None and run_dir is not None:
            write_clock_file(run_dir, training)
        return ProfileResult(
            logdir,
            done,
            returncode,
            reason,
            ended.stderr_tail,
            steps,
            self.watch.streams(),
            training,
            self.note,
        )
