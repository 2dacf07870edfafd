"""The windows of one measured run: warm-up, then `repeats` windows of training time.

`Windows` takes the training stream's steps one at a time (`add`) and cuts them into the
warm-up and the measured windows (`MeasureSpec`):

1. warm-up: the first `warmup_steps` steps, and at least `warmup_s` after the first
   (tracing, the first epoch's fill), once the run is settled (no warm spare importing
   beside it); where windows hold whole epochs, the first epoch's end too (a retrace
   for its short last batch lands in the second epoch's first step);
2. `repeats` consecutive windows, each at least `window_s` of *training* time (the first
   of several half that: `FIRST_WINDOW_SHARE`) and `window_steps` steps; a pass over
   another dataset in between does not fill a window (`probes.live.training_time`). Where
   epochs are no longer than a window, windows open and close at an epoch's first step,
   so that they hold whole epochs; after each, `on_report(index, examples/s so far)`
   (pooled over the windows: `probes.live.training_time.pooled_rates`), whose True prunes;
3. where those windows disagree (their rates' spread above `AGREE_WITHIN`, a first
   window that drained a warm-up's buffer left out), up to `EXTRA_WINDOWS` more, until
   one moves the pooled figure by no more than half that. An epoch's start costs every
   window the run's mean stall (`probes.live.training_time`), so epochs whose starts differ
   (a stall in one, none in the next) do not split the windows: the run's mean is over
   every epoch it saw. Extra windows are not reported: the pruner judges the windows
   asked for.

The figures of a window are `probes.live.training_time`'s. Pure Python: no process here
(`trial.measure` runs the child and feeds this).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tftune.core.training import EpochCost
from tftune.probes.live.clock import StepRecord, percentile, spread
from tftune.probes.live.training_time import (
    PassTimeline,
    WindowStats,
    first_window_drained,
    pooled_rates,
)
from tftune.tuner.fixes.rewrites import CACHE_FILL_MAX_S
from tftune.tuner.option_defaults import (
    AGREE_WITHIN,
    DEFAULT_REPEATS,
    DEFAULT_WINDOW_S,
    EXTRA_WINDOWS,
    FIRST_STEP_S,
    FIRST_WINDOW_SHARE,
    STALL_FLOOR_S,
)

# A window of fewer steps than this says little about the noise: with 0.05-2 s steps
# (real models on a GPU) a window runs until it holds this many, whatever window_s is.
MIN_WINDOW_STEPS = 10
# A window over short epochs waits for an epoch's first step to close, at most this many
# epochs past its length (`Windows._epoch_boundary`).
EPOCH_WAIT = 1.5

# A warm-up waiting for epochs (`MeasureSpec.warmup_epochs`: a cache filling over the
# first) waits at most this long: a cache whose first pass takes longer is refused.
WARMUP_EPOCHS_MAX_S = CACHE_FILL_MAX_S

# The option defaults imported above (``--help`` says them), and why they are what they are:
# - FIRST_WINDOW_SHARE (0.5): a run the pruner stops at its first window, or a reference
#   baseline cut short (`study.objective`), costs 1.5 s less, and only the survivors pay
#   full windows (successive halving's short first rung). Measured here: one config's
#   run-to-run noise (5-12%) is well above what a 1.5 s window adds.
# - AGREE_WITHIN (10%): windows of one run whose rates' spread ((max - min) / median) is
#   above it disagree: one config's windows agree within 1-4% on a quiet host, and the
#   goal for repeats of a script as written is 10%. A run whose windows disagree is
#   measured over up to EXTRA_WINDOWS more, each costing `window_s` of training time,
#   paid only by runs whose figure would otherwise move by more.

# Called after each repeat window with (repeat index, examples/s so far); True prunes.
ReportFn = Callable[[int, float], bool]
Window = tuple[int, list[StepRecord]]  # (start ns, the steps delivered in it)


@dataclass(frozen=True, slots=True)
class MeasureSpec:
    """How a trial is measured. All times in seconds."""

    warmup_steps: int = 5  # steps skipped (tracing, first-epoch fill) ...
    warmup_s: float = 1.0  # ... and at least this long after the first step ...
    # ... and, where this is 1, until the second epoch begins: a config with a cache()
    # fills it over the first epoch, and what it changes is every epoch after that.
    warmup_epochs: int = 0
    # The training dataset's examples per pass where tf.data does not know its length
    # (counted before the study): a run that sees one epoch start spreads a recurring
    # stall over the epoch's steps it makes (`probes.live.training_time.PassTimeline`).
    epoch_examples: int | None = None
    window_s: float = DEFAULT_WINDOW_S  # length of one repeat window ...
    window_steps: int = MIN_WINDOW_STEPS  # ... which holds at least this many steps
    # The first of several windows is this share of `window_s`: the pruner and a
    # reference baseline's cut decide on it, and only survivors pay the full windows.
    first_window_share: float = FIRST_WINDOW_SHARE
    # Consecutive windows; their spread is the noise. Two: one config's run-to-run noise
    # on a host (5-12%) is more than a run's windows show (1-4%), so a third window
    # bought little but 3 s a run; the final round re-measures what decides.
    repeats: int = DEFAULT_REPEATS
    # Windows measured beyond `repeats` while the windows disagree (`AGREE_WITHIN`).
    extra_windows: int = EXTRA_WINDOWS
    # The next training step is due within max(stall_s, 20 x the slowest step so far)
    # (`trial.watch`); the first within startup_timeout_s; step_timeout_s sets both.
    stall_s: float = STALL_FLOOR_S
    startup_timeout_s: float = FIRST_STEP_S
    step_timeout_s: float | None = None
    # The script updates nothing (discovery said so: `Discovery.busiest_loop`): measure
    # the stream that delivers the most, not the one that feeds updates.
    busiest_loop: bool = False
    # Where the training dataset is built and iterated (discovery's `training`: site,
    # place). The bound analysis caches or drains that dataset only, never a counting
    # loop or a validation set before it; None: every dataset iterated.
    training_at: tuple[str | None, str | None] | None = None
    max_wall_s: float | None = None  # hard cap on the whole trial
    term_grace_s: float = 3.0  # between SIGTERM and SIGKILL
    nvml_interval_s: float = 0.2

    def window_length(self, index: int) -> float:
        """Seconds window `index` lasts at least (module docstring)."""
        if index == 0 and self.repeats > 1:
            return self.window_s * self.first_window_share
        return self.window_s


class Windows:
    """The warm-up and windows of one run's training stream (module docstring)."""

    def __init__(
        self,
        spec: MeasureSpec,
        timeline: PassTimeline,
        on_report: ReportFn | None,
        settled: Callable[[float], bool],
        on_open: Callable[[], None],
    ) -> None:
        self.spec, self.timeline, self.on_report = spec, timeline, on_report
        self.settled, self.on_open = settled, on_open
        self.stream: int | None = None  # the training stream whose steps these are
        self.records: list[StepRecord] = []  # all of its steps, warm-up included
        self.window_start_ns: int | None = None
        self.windows: list[Window] = []
        self.current: list[StepRecord] = []
        self.current_start_ns = 0
        self.current_ns = 0  # the current window's training time so far
        # An epoch's training time where epochs fit in a window (0.0: they do not), for
        # closing windows at epoch starts; None: not yet worked out for this window.
        self.period_s: float | None = None
        self.warm_since_ns: int | None = None  # when the warm-up's own conditions were met
        self.pruned_reason: str | None = None
        # The windows so far agree, or the last extra one moved the pooled figure little.
        self.steady = False

    def add(self, rec: StepRecord) -> None:
        """The training stream's next step."""
        self.records.append(rec)
        spec = self.spec
        if self.window_start_ns is None:
            self._warm_up(rec)
            return
        if self.done():
            return
        before = self.current[-1].deliver_ns if self.current else self.current_start_ns
        self.current.append(rec)
        # Training time, not wall time: a validation pass does not fill a window.
        step_ns = self.timeline.step_ns(before, rec)
        self.current_ns += step_ns
        length = spec.window_length(len(self.windows))
        if self.current_ns / 1e9 < length or len(self.current) < spec.window_steps:
            return
        boundary = self._epoch_boundary(self.current, rec)
        late = self.current_ns / 1e9 >= length + EPOCH_WAIT * (self.period_s or 0.0)
        if boundary is False and not late:
            return  # short epochs: close at the next epoch's first step
        if not boundary:
            self._close_window()
            return
        self.current.pop()  # an epoch's first step opens the next window
        self._close_window()
        self.current, self.current_ns = [rec], step_ns

    def _warm_up(self, rec: StepRecord) -> None:
        """Warm-up: `warmup_steps` and `warmup_s` after the first step, the run settled;
        where epochs are short, then the next epoch's first step opens the window."""
        spec, first = self.spec, self.records[0].deliver_ns
        warm = (
            len(self.records) > spec.warmup_steps
            and (rec.deliver_ns - first) / 1e9 >= spec.warmup_s
            and self.settled((rec.deliver_ns - first) / 1e9)
            and self._epochs_done(rec) >= spec.warmup_epochs
        )
        if not warm:
            return
        self.warm_since_ns = self.warm_since_ns or rec.deliver_ns
        boundary = self._epoch_boundary(self.records, rec)
        if (
            boundary
            and self.stream is not None
            and self.timeline.epochs_begun(self.stream, rec) <= 2
        ):
            # The first epoch's end is warm-up: its one-off work (a retrace for a short
            # last batch) lands in the second epoch's first step. Wait for the third.
            self.warm_since_ns, boundary = rec.deliver_ns, False
        waited_s = (rec.deliver_ns - self.warm_since_ns) / 1e9
        if boundary is False and waited_s < EPOCH_WAIT * (self.period_s or 0.0):
            return
        opened = self.records[-2].deliver_ns if boundary else rec.deliver_ns
        self.window_start_ns = self.current_start_ns = opened
        self.period_s = None
        self.on_open()
        if boundary:  # the epoch's first step is the window's first
            self.current, self.current_ns = [rec], self.timeline.step_ns(opened, rec)

    def _epochs_done(self, rec: StepRecord) -> int:
        """Epochs of the training stream over by `rec`'s request (the one it is in aside);
        past `WARMUP_EPOCHS_MAX_S` of warm-up, as many as asked for (a run that never
        starts a second epoch is measured all the same)."""
        if self.stream is None:
            return 0
        if (rec.deliver_ns - self.records[0].deliver_ns) / 1e9 > WARMUP_EPOCHS_MAX_S:
            return self.spec.warmup_epochs
        return max(0, self.timeline.epochs_begun(self.stream, rec) - 1)

    def _epoch_boundary(self, steps: list[StepRecord], rec: StepRecord) -> bool | None:
        """Where epochs are no longer than a window, whether `rec` (the last of `steps`,
        the warm-up's or the window's) is an epoch's first step; None where epochs are
        longer or unknown. Windows then open and close at epoch starts, so that they hold
        whole epochs, whose figure does not depend on where in an epoch they began (a
        shuffle buffer fills, then drains, every epoch); at most `EPOCH_WAIT` epochs late.
        Longer epochs spread their stall over their steps instead."""
        if self.stream is None:
            return None
        if self.period_s is None:  # once per window (and once for the warm-up)
            cost = self.epoch_cost()
            times = self.timeline.step_times(steps[0].deliver_ns, steps[1:]) or [0]
            period = cost.period_s(percentile(times, 50) / 1e9) if cost is not None else None
            self.period_s = period if period is not None and period <= self.spec.window_s else 0.0
        if not self.period_s:
            return None
        before = steps[-2] if len(steps) > 1 else None
        return self.timeline.epoch_starts_at(self.stream, before, rec)

    def _close_window(self) -> None:
        self.windows.append((self.current_start_ns, self.current))
        stats = self.stats(self.windows)
        self.steady = _steady(stats, self.spec.repeats)
        self.current_start_ns = self.current[-1].deliver_ns
        self.current = []
        self.current_ns = 0
        self.period_s = None
        if (
            stats
            and len(self.windows) <= self.spec.repeats  # an extra window is not judged
            and self.on_report is not None
            and self.pruned_reason is None
            and self.on_report(len(self.windows) - 1, pooled_rates(stats)[0])
        ):
            self.pruned_reason = f"pruned after {len(self.windows)} window(s)"

    def done(self) -> bool:
        """Pruned, or `repeats` windows measured and agreeing, or the extra ones too."""
        spec, n = self.spec, len(self.windows)
        if self.pruned_reason is not None or n >= spec.repeats + spec.extra_windows:
            return True
        return n >= spec.repeats and (self.steady or spec.repeats < 2)

    def enough(self) -> bool:
        """`repeats` windows measured (or pruned): a run that ends during an extra
        window is measured over the windows it completed, not cut anew."""
        return self.pruned_reason is not None or len(self.windows) >= self.spec.repeats

    def epoch_cost(self) -> EpochCost | None:
        if self.stream is None:
            return None
        return self.timeline.epoch_cost(self.stream, self.records)

    def stats(self, windows: list[Window], cost: EpochCost | None = None) -> list[WindowStats]:
        cost = cost or self.epoch_cost()
        found = (self.timeline.window(a, w, cost) for a, w in windows)
        return [s for s in found if s is not None]

    def what_ran(self) -> list[Window]:
        """The script ended before the full windows: up to `repeats` windows over what
        it ran."""
        return _what_ran(self.records, self.window_start_ns, self.spec.repeats)


def _steady(stats: list[WindowStats], repeats: int) -> bool:
    """Whether the windows a measurement keeps (`trial.measure`: a first window that
    drained a warm-up's buffer is left out) agree within `AGREE_WITHIN`, or, past the
    `repeats` asked for, the last one moved their pooled rate by at most half that. One
    window alone agrees with nothing."""
    kept = stats[1:] if first_window_drained(stats) else stats
    if len(kept) < 2:
        return False
    if spread([s.examples_per_s for s in kept]) <= AGREE_WITHIN:
        return True
    if len(stats) <= repeats:
        return False
    before, now = pooled_rates(kept[:-1])[0], pooled_rates(kept)[0]
    return before > 0 and abs(now - before) / before <= AGREE_WITHIN / 2


def _what_ran(records: list[StepRecord], window_start_ns: int | None, repeats: int) -> list[Window]:
    """The script ended before the full window: up to `repeats` windows over what it ran."""
    steady = [r for r in records if window_start_ns is not None and r.deliver_ns > window_start_ns]
    if window_start_ns is not None and steady:
        start = window_start_ns
    else:
        # Never reached the end of warm-up: use everything after the first step.
        if len(records) < 2:
            return []
        start, steady = records[0].deliver_ns, records[1:]
    repeats = max(1, min(repeats, len(steady) // 2 or 1))
    size = len(steady) // repeats
    out: list[Window] = []
    for i in range(repeats):
        chunk = steady[i * size : (i + 1) * size] if i < repeats - 1 else steady[i * size :]
        if chunk:
            out.append((start, chunk))
            start = chunk[-1].deliver_ns
    return out
