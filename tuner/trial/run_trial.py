"""One measured trial: the script under one config, warm-up → repeat windows → stop.

`run_trial(script, args, config, spec)` → `Measurement`. The child writes a step record
for every element a stream delivers and events (a stream found training, an epoch
started, a NaN loss, an exception, the end); `_Trial` follows them as an `Observer` of
the one launch loop (`trial.launch.ChildRun`), hands the training stream's steps to its
`trial.windows.Windows` (warm-up, then the measured windows, with their pruning
reports), and stops the child's whole group once the windows are measured.

Failures (exception, non-zero exit, OOM, stall, NaN loss, timeout, no steps) are
results, never raised: `ScriptError` only for a script that is missing or invalid. A
script that ends before the windows are full is measured over what it ran (`truncated`).
Only training streams' steps count (`trial.watch`): a counting loop, a peek, `adapt`,
validation and `predict` are seen, never measured; their passes between training steps
are taken out of the windows (`probes.live.training_time`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tftune.core.failures import FailureKind
from tftune.core.vocabulary import TrialState
from tftune.probes.advice.service_sizing import CpuUsage
from tftune.probes.live.clock import StepRecord, percentile, spread
from tftune.probes.live.clock_events import (
    ChildEvent,
    ChildNotes,
    CpuMeasured,
    NanSeen,
    OptimizerBuilt,
    OutputLayerFound,
    ScriptFinished,
    ScriptRaised,
)
from tftune.probes.live.nvml import GpuFigures, NotMeasured, NvmlSampler
from tftune.probes.live.training_time import PassTimeline, first_window_drained, pooled_rates
from tftune.tuner.fixes.precision import SIXTEEN_BIT_POLICIES
from tftune.tuner.measurement import Measurement
from tftune.tuner.searchspace.config import Config
from tftune.tuner.trial.failure import classify_exit
from tftune.tuner.trial.launch import (
    ChildRun,
    Ended,
    Observer,
    RunnerDeps,
    check_script,
    child_spec,
    workdir,
)
from tftune.tuner.trial.losses import loss_curve
from tftune.tuner.trial.spare import SETTLE_LIMIT_S
from tftune.tuner.trial.watch import StreamWatch, describe_streams
from tftune.tuner.trial.windows import MeasureSpec, ReportFn, Windows


def run_trial(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    config: Config | None = None,
    spec: MeasureSpec | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    on_report: ReportFn | None = None,
    deps: RunnerDeps | None = None,
) -> Measurement:
    """Run the script once under `config` and measure its steady state. Never raises for
    anything the script does; `ScriptError` only for a script that is missing or invalid."""
    config = config or Config()
    spec = spec or MeasureSpec()
    if any(site.cache for site in config.sites.values()):  # what it changes comes after
        spec = replace(spec, warmup_epochs=max(spec.warmup_epochs, 1))  # its first epoch
    deps = deps or RunnerDeps()
    path = check_script(script)
    with workdir() as work:
        cspec = child_spec("measure", path, args, config)
        if spec.training_at is not None:
            cspec["training_at"] = list(spec.training_at)
        child = ChildRun(deps, work, cspec, cwd=cwd, clock=True)
        trial = _Trial(deps, spec, config, on_report)
        trial.sampler = trial.open_nvml()
        try:
            ended = child.run(trial, deadline_s=spec.max_wall_s, term_grace_s=spec.term_grace_s)
        finally:
            gpu = trial.close_nvml()
        return trial.result(ended, gpu)


class _Trial(Observer):
    """One measured child run: the state machine of warm-up → windows → stop."""

    def __init__(
        self, deps: RunnerDeps, spec: MeasureSpec, config: Config, on_report: ReportFn | None
    ) -> None:
        self.deps, self.spec, self.config = deps, spec, config
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
        self.events: list[ChildEvent] = []
        # Other passes and epoch starts (`probes.live.training_time`).
        self.timeline = PassTimeline(epoch_examples=spec.epoch_examples)
        self.win = Windows(spec, self.timeline, on_report, self._settled, self._opened)
        self.sampler: NvmlSampler | NotMeasured | None = None

    @property
    def records(self) -> list[StepRecord]:
        """The training stream's steps so far."""
        return self.win.records

    def _settled(self, warm_s: float) -> bool:
        """No warm spare is importing beside this run (`trial.spare`), or it has warmed
        up `SETTLE_LIMIT_S` already: the windows measure the run alone."""
        spares = self.deps.spares
        return spares is None or spares.settled() or warm_s >= SETTLE_LIMIT_S

    def _opened(self) -> None:
        """The first window opened: GPU utilization is sampled from here."""
        if isinstance(self.sampler, NvmlSampler):
            self.sampler.start()

    # -- the launch loop's questions (`trial.launch.Observer`)
    def launched(self, now: float) -> None:
        self.watch.start = now

    def take(self, items: list[StepRecord | ChildEvent]) -> None:
        self._consume(items)

    def finished(self) -> bool:
        return self._event_failure() is not None or self.win.done()

    def said_done(self) -> bool:
        """The script raised or finished: the process is on its way out."""
        return any(isinstance(e, ScriptRaised | ScriptFinished) for e in self.events)

    def overdue(self, now: float) -> str | None:
        return self.watch.overdue(now)

    # -- NVML
    def open_nvml(self) -> NvmlSampler | NotMeasured:
        if self.deps.nvml_reader is None:
            return NotMeasured("NVML sampling disabled")
        return NvmlSampler.open(self.deps.nvml_reader, self.spec.nvml_interval_s)

    def close_nvml(self) -> GpuFigures | NotMeasured:
        sampler = self.sampler
        if isinstance(sampler, NvmlSampler):
            if self.win.window_start_ns is None:
                sampler.stop()
                return NotMeasured("no steady-state window")
            return sampler.stop()
        return sampler if isinstance(sampler, NotMeasured) else NotMeasured("not started")

    # -- records
    def _consume(self, items: list[StepRecord | ChildEvent]) -> None:
        for item in items:
            if not isinstance(item, StepRecord):
                self.events.append(item)
                self.timeline.event(item)
                stream = self.watch.event(item)
                if stream is not None:
                    self._adopt(stream)
            elif self.watch.record(item):
                self._take(item)
            elif self.spec.busiest_loop:
                self._take_busiest(item)
            else:
                self.timeline.other(item)

    def _take_busiest(self, rec: StepRecord) -> None:
        """Until the window starts, the stream that delivers the most is measured: not
        one peeked at once nor a short validation pass. The warm-up restarts on it."""
        if self.win.window_start_ns is None and rec.stream != self.main_stream:
            seen = self.busiest.setdefault(rec.stream, [])
            seen.append(rec)
            if len(seen) <= len(self.records):
                return
            if self.main_stream is not None:
                self.busiest[self.main_stream] = self.records
                for r in self.records:
                    self.timeline.other(r)
            self.main_stream = self.win.stream = rec.stream
            self.timeline.forget(rec.stream)
            self.win.records = self.busiest.pop(rec.stream)[:-1]
        if rec.stream == self.main_stream:
            self.watch.stepped(self.deps.clock(), rec.deliver_ns)
            self.win.add(rec)
        else:
            self.timeline.other(rec)

    def _adopt(self, stream: int) -> None:
        """A stream was found training: its steps so far are replayed (the first) or
        its examples join the main stream's steps from now on (a second one)."""
        early = self.watch.take_early(stream)
        self.timeline.forget(stream)
        if self.main_stream is None:
            self.main_stream = self.win.stream = stream
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
        self.watch.stepped(self.deps.clock(), rec.deliver_ns)
        self.win.add(rec)

    def _event_failure(self) -> tuple[FailureKind, str] | None:
        nan = next((e for e in self.events if isinstance(e, NanSeen)), None)
        if nan is None:
            return None
        policy = self.config.mixed_precision
        under = f" under the {policy} policy" if policy in SIXTEEN_BIT_POLICIES else ""
        return FailureKind.NAN, f"{nan.what or 'loss'} became {nan.value} (NaN/inf){under}"

    # -- the result
    def result(self, ended: Ended, gpu: GpuFigures | NotMeasured) -> Measurement:
        failure = self._event_failure()
        if ended.overdue is not None:
            failure = (FailureKind.STALL, ended.overdue)
        elif ended.timed_out:
            failure = (FailureKind.TIMEOUT, f"timed out after {self.spec.max_wall_s:.0f} s")
        alive = ended.alive and not ended.hung
        said = ended.returncode  # the exit code the script gave (its own, or as it said)
        if ended.hung:
            said = next((e.code for e in self.events if isinstance(e, ScriptFinished)), 1)
        wall = self.deps.clock() - ended.started
        exc = next((e for e in self.events if isinstance(e, ScriptRaised)), None)
        if failure is None and (exc is not None or (not alive and said not in (0, None))):
            failure = classify_exit(said if said is not None else 1, exc, ended.stderr_tail)
        measured = None
        if failure is None:
            measured = self._measured(gpu, truncated=not alive and not self.win.enough())
            if measured is None:
                failure = (FailureKind.NO_STEPS, self._no_steps_reason())
        state, reason = TrialState.COMPLETE, None
        if failure is not None:
            state, reason = TrialState.FAILED, failure[1]
        elif self.win.pruned_reason is not None:
            state, reason = TrialState.PRUNED, self.win.pruned_reason
        return replace(
            measured or Measurement(state),
            state=state,
            failure=failure[0] if failure else None,
            reason=reason,
            stderr_tail=ended.stderr_tail,
            returncode=ended.returncode,
            wall_s=wall,
            notes=self._notes(measured),
            findings=tuple(e.finding for e in self.events if isinstance(e, OutputLayerFound)),
            streams=self.watch.streams(),
            config=self.config,
            cpu=self._cpu(),
            **self._learning(measured is not None),
        )

    def _learning(self, measured: bool) -> dict[str, Any]:
        """The run's loss curve (or why it has none) and the optimizers it built."""
        seen = tuple(e.seen for e in self.events if isinstance(e, OptimizerBuilt))
        if not measured:
            return {"optimizers": seen}
        curve, why = loss_curve(self.events, self.records, self.timeline)
        return {"loss": curve, "loss_note": why, "optimizers": seen}

    def _cpu(self) -> CpuUsage | None:
        """The child's last report of what a pipeline drained alone used."""
        found = [e.usage for e in self.events if isinstance(e, CpuMeasured)]
        return found[-1] if found else None

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

    def _notes(self, measured: Measurement | None) -> tuple[str, ...]:
        notes = [n for e in self.events for n in _said(e)]
        notes += self.notes_seen
        if measured is not None and measured.repeats:
            per_window = measured.steps / len(measured.repeats)
            if per_window < self.spec.window_steps:
                notes.append(
                    f"each measured window held only {per_window:.0f} steps (fewer than "
                    f"{self.spec.window_steps}): its noise figure says little; a longer "
                    "run (more steps) measures it better"
                )
        return tuple(notes)

    def _measured(self, gpu: GpuFigures | NotMeasured, truncated: bool) -> Measurement | None:
        """The windows' figures (a complete Measurement, to be finished by `result`), or
        None when no window holds a step. A first window that drained a buffer filled
        during warm-up is left out (`probes.live.training_time`)."""
        windows = self.win.what_ran() if truncated else self.win.windows
        cost = self.win.epoch_cost()
        stats = self.win.stats(windows, cost)
        dropped = first_window_drained(stats)
        if dropped:
            stats, windows = stats[1:], windows[1:]
        if not stats:
            return None
        durations = [t / 1e6 for a, w in windows for t in self.timeline.step_times(a, w)]
        rates = [s.examples_per_s for s in stats]
        total_s = sum(s.duration_s for s in stats)
        examples_per_s, steps_per_s = pooled_rates(stats)
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
        p50 = percentile(durations, 50)
        return Measurement(
            TrialState.COMPLETE,
            examples_per_s=examples_per_s,
            utilization=util,
            utilization_kind=kind,
            utilization_note=note,
            spread=spread(rates),
            input_wait_share=wait_share,
            repeats=tuple(rates),
            steps_per_s=steps_per_s,
            step_p50_ms=p50,
            step_p90_ms=percentile(durations, 90),
            steps=sum(s.steps for s in stats),
            examples=sum(s.examples for s in stats),
            window_s=total_s,
            truncated=truncated,
            gpu_memory_used_mb=mem,
            gpu_note=gpu_note,
            training=self.timeline.training_time(
                self.main_stream or 0,
                self.records,
                p50 / 1e3,
                sum(s.excluded_s for s in stats),
                dropped,
            ),
        )


def _said(e: ChildEvent) -> tuple[str, ...]:
    """What an event adds to the run's notes, in words: the child's notes, and a finding
    (rendered from its record) where it was found."""
    if isinstance(e, ChildNotes):
        return e.notes
    if isinstance(e, OutputLayerFound):
        return (e.finding.message(),)
    return ()
