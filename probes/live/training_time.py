"""Training time: what a window of training steps cost, with what is not training taken
out and each epoch's start spread over its epoch.

A trial's figure is training examples over the time spent training. The step clock
(`probes.live.clock`) reports every stream's deliveries; three things stand between the raw
time of a window and that figure.

**Other passes.** Between two consecutive training deliveries the consumer may run a pass
over another stream: Keras ``fit``'s validation after an epoch, ``evaluate``, ``predict``
in a callback, an eager validation loop. That time is not training: it is taken out from
the other stream's iterator made (else its first request inside the gap) to the training
stream's next iterator made (else its next request) (`PassTimeline.step_ns`). What stays is
training: the last step's own work before the pass and its iterator's teardown, the
callbacks, making the next training iterator and the next element's wait, which holds a
shuffle buffer's refill or a rebuilt iterator's start. A stream iterated concurrently from another
thread would be taken out too: no training script seen does that.

**Epoch starts.** Each new iterator over the training stream starts an epoch (the
child's `probes.live.clock_events.EpochStart`). Its first step pays a stall the other steps
do not: a shuffle buffer filled behind an expensive map, a pipeline without ``cache()``
restarting, an iterator rebuilt. That stall is training time and the knobs change it, but
a window holds it or not by chance, which moved a trial's figure by the stall's size.
`EpochCost` measures it over the run (the run's first step by its wait, a later epoch's
by its whole step) and `PassTimeline.window` spreads it evenly over the epoch's steps, so a
window's figure is the whole epoch's rate wherever the window falls. An epoch's length is
the steps between two starts once one has been seen, else tf.data's cardinality; where
neither is known (an unknown or infinite cardinality and one epoch so far) nothing is
spread and a stall counts where it falls.

**Buffers filled before the window.** A window that opens while a buffer filled during
warm-up drains delivers faster than the pipeline produces. Once the buffer is dry, the
consumer waits for nearly every element (an input-bound run); only then do deliveries
count production. A window of such a run starts at its first dry step
(`drained_prefix`), and a run whose first window never waited while its last mostly did
drops the first (`PassTimeline` callers: `tuner.trial.run_trial`). A compute-bound run never
waits and keeps its buffers full: nothing is trimmed.

Pure Python: no TensorFlow here.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tftune.core.training import EpochCost, TrainingTime
from tftune.core.units import NS_PER_S
from tftune.probes.live.clock import StepRecord, percentile
from tftune.probes.live.clock_events import ChildEvent, EpochStart, ScriptStarted
from tftune.probes.live.epoch_stall import PipelineStage, recurs
from tftune.probes.live.training_record import training_time_of

# A step is dry (its element was not waiting in a buffer) when the consumer waited at
# least this long for it, and at least DRY_SHARE of a typical step. A buffered element
# is handed over in tens of microseconds; a dry one costs the production's remainder.
DRY_FLOOR_NS = 200_000
DRY_SHARE = 0.05
# A run is input-bound, for trimming a window's drained prefix, when at least this share
# of the window's steps are dry.
DRY_MAJORITY = 0.5
# ... and a first window counts as drained when at most this share of its steps were.
DRAINED_FIRST = 0.1


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Throughput and step timing over one window of consecutive training steps."""

    steps: int
    examples: int
    duration_s: float  # training time: other passes out, epoch stalls spread
    examples_per_s: float
    steps_per_s: float
    input_wait_s: float
    excluded_s: float = 0.0  # other streams' passes taken out
    drained_steps: int = 0  # leading steps served from a buffer filled before
    dry_share: float = 0.0  # the share of its steps whose element was not buffered

    @property
    def input_wait_share(self) -> float:
        return min(1.0, self.input_wait_s / self.duration_s) if self.duration_s > 0 else 0.0


class PassTimeline:
    """A run's other-stream passes and epoch starts, to time its training steps."""

    def __init__(self, epoch_examples: int | None = None) -> None:
        # The training dataset's examples per pass, where tf.data does not know its
        # length and they were counted before the run (None: not known).
        self.epoch_examples = epoch_examples
        # Other streams' elements, (request_ns, deliver_ns, stream), sorted by request.
        self._others: list[tuple[int, int, int]] = []
        self._starts: list[EpochStart] = []
        self._chains: dict[int, tuple[PipelineStage, ...]] = {}  # each stream's pipeline
        self._started_ns: int | None = None  # the script's first line (child clock)

    def event(self, e: ChildEvent) -> None:
        """Take what the child said that times training: an epoch start or the script's
        start. Other events are not this timeline's."""
        if isinstance(e, EpochStart):
            self.epoch(e)
        elif isinstance(e, ScriptStarted):
            self._started_ns = e.at_ns

    def other(self, rec: StepRecord) -> None:
        """An element of a stream that is not (yet) training."""
        bisect.insort(self._others, (rec.request_ns, rec.deliver_ns, rec.stream))

    def forget(self, stream: int) -> None:
        """`stream` turned out to be training: its elements are no other pass."""
        self._others = [o for o in self._others if o[2] != stream]

    def epoch(self, start: EpochStart) -> None:
        """An epoch starts, with the pipeline as built where the child sent it (a
        stream's first epoch, a rebuilt one)."""
        self._starts.append(start)
        if start.chain is not None:
            self._chains[start.stream] = start.chain

    def training_time(
        self,
        stream: int,
        records: Sequence[StepRecord],
        typical_step_s: float,
        excluded_s: float = 0.0,
        dropped: bool = False,
    ) -> TrainingTime:
        """The run's `TrainingTime` for training `stream` (all of its `records`): the
        preamble to the first training request, the epoch stall and its diagnosis."""
        preamble = None
        if self._started_ns is not None and records:
            preamble = (records[0].request_ns - self._started_ns) / NS_PER_S
        return training_time_of(
            self.epoch_cost(stream, records),
            typical_step_s,
            excluded_s,
            preamble,
            dropped,
            self._chains.get(stream, ()),
        )

    def starts(self, stream: int) -> list[EpochStart]:
        return sorted((s for s in self._starts if s.stream == stream), key=lambda s: s.at_ns)

    # ---- one step --------------------------------------------------------------------
    def excluded_ns(self, prev_deliver_ns: int, rec: StepRecord) -> int:
        """The part of the gap before `rec` spent on another stream's pass: from the
        pass's iterator made (or its first request) to the training stream's next
        iterator made (or `rec`'s request). Making the training iterator is training (an
        iterator rebuilt each epoch); making the other pass's is not."""
        end = rec.request_ns
        begin: int | None = None
        last = 0
        i = bisect.bisect_left(self._others, (prev_deliver_ns, -1, -1))
        while i < len(self._others) and self._others[i][0] < end:
            request, deliver, _ = self._others[i]
            if deliver <= end:
                begin = request if begin is None else begin
                last = max(last, deliver)
            i += 1
        if begin is None:
            return 0
        for s in self._starts:
            if s.stream != rec.stream and prev_deliver_ns < s.at_ns < begin:
                begin = s.at_ns
        made = [s.at_ns for s in self._starts if s.stream == rec.stream and last <= s.at_ns < end]
        return (min(made) if made else end) - begin

    def step_ns(self, prev_deliver_ns: int, rec: StepRecord) -> int:
        """A training step's time: from the delivery before it to its own, less
        another pass in between."""
        raw = rec.deliver_ns - prev_deliver_ns
        return max(0, raw - self.excluded_ns(prev_deliver_ns, rec))

    def step_times(self, start_ns: int, records: Sequence[StepRecord]) -> list[int]:
        out, prev = [], start_ns
        for r in records:
            out.append(self.step_ns(prev, r))
            prev = r.deliver_ns
        return out

    # ---- epochs ----------------------------------------------------------------------
    def epoch_cost(self, stream: int, records: Sequence[StepRecord]) -> EpochCost | None:
        """What an epoch start costs `stream`, from its training `records` (all of the
        run's, in order), or None where no epoch start was seen."""
        starts = self.starts(stream)
        if not starts or not records:
            return None
        requests = [r.request_ns for r in records]
        found = {bisect.bisect_left(requests, s.at_ns) for s in starts}
        firsts = sorted(i for i in found if i < len(records))
        if not firsts:
            return None
        times = [0, *self.step_times(records[0].deliver_ns, records[1:])]
        first_set = set(firsts)
        steady = [t for i, t in enumerate(times) if i not in first_set and i > 0]
        waits = [r.wait_ns for i, r in enumerate(records) if i not in first_set]
        if not steady or not waits:
            return None
        typical, typical_wait = percentile(steady, 50), percentile(waits, 50)
        # The first epoch's end carries one-off work (a retrace for a short last batch)
        # into the second epoch's first step: left out once a later epoch start is seen.
        later = [i for i in firsts if i > 0]
        later = later[1:] if len(later) > 1 else later
        stalls = [times[i] - typical for i in later] or [records[0].wait_ns - typical_wait]
        # What of it came before the first element was asked for (the rest is its wait).
        made = [times[i] - typical - (records[i].wait_ns - typical_wait) for i in later]
        lengths = [b - a for a, b in itertools.pairwise(firsts)]
        steps = _steps_per_epoch(lengths, starts[-1].cardinality)
        if steps is None and self.epoch_examples:  # counted before the run
            per_step = percentile([r.examples for r in records], 50) or 1
            steps = max(1, math.ceil(self.epoch_examples / per_step))
        if not later and not recurs(self._chains.get(stream, ())):
            steps = None  # one start seen, and its stall is one-off: not spread
        return EpochCost(
            stall_s=max(0.0, sum(stalls) / len(stalls)) / NS_PER_S,
            made_s=max(0.0, sum(made) / len(made)) / NS_PER_S if made else 0.0,
            steps_per_epoch=steps,
            epochs_seen=len(firsts),
            first_steps=frozenset(records[i].deliver_ns for i in firsts),
            rebuilt=any(s.rebuilt for s in starts),
        )

    # ---- one window ------------------------------------------------------------------
    def window(
        self, start_ns: int, records: Sequence[StepRecord], cost: EpochCost | None = None
    ) -> WindowStats | None:
        """The training figures of the steps delivered after `start_ns` (module
        docstring): other passes out; over the whole epochs the window holds where it
        holds one, else with a drained prefix trimmed. Each epoch start costs the run's
        mean stall (`cost`), not the one it held: one start can take 40 ms, the next 1 s."""
        if not records:
            return None
        times = self.step_times(start_ns, records)
        firsts = cost.first_steps if cost is not None and cost.spread else frozenset()
        starts = [i for i, r in enumerate(records) if r.deliver_ns in firsts]
        if cost is not None and len(starts) >= 2:  # whole epochs, start to start: no trim
            a, b = starts[0], starts[-1]
            before = records[a - 1].deliver_ns if a else start_ns
            epochs = records[a:b]
            counted = _stall_out(epochs, times[a:b], firsts)
            stalls_s = cost.stall_s * (len(starts) - 1)
            return _figures(before, epochs, times[a:b], counted, stalls_s, 0)
        dry = dry_steps(records, times)
        drained = drained_prefix(dry)
        if drained:
            start_ns, records = records[drained - 1].deliver_ns, records[drained:]
            times = times[drained:]
        counted = _stall_out(records, times, firsts)
        spread_s = cost.per_step_s() * len(records) if cost is not None else 0.0
        return _figures(start_ns, records, times, counted, spread_s, drained)

    def epoch_starts_at(self, stream: int, before: StepRecord | None, rec: StepRecord) -> bool:
        """Whether `rec` is the first step of an epoch of `stream` (an iterator was made
        after the request before it and before its own)."""
        lo = before.request_ns if before is not None else -1
        return any(lo < s.at_ns <= rec.request_ns for s in self.starts(stream))

    def epochs_begun(self, stream: int, rec: StepRecord) -> int:
        """How many epochs of `stream` had begun by `rec`'s request."""
        return sum(1 for s in self._starts if s.stream == stream and s.at_ns <= rec.request_ns)


def _stall_out(
    records: Sequence[StepRecord], times: Sequence[int], firsts: frozenset[int]
) -> list[float]:
    """The steps' times with each epoch's first step taken as a typical one (the median
    of the others): its stall is counted apart, as the run's mean."""
    steady = [t for r, t in zip(records, times, strict=True) if r.deliver_ns not in firsts]
    typical = percentile(steady, 50) if steady else 0.0
    return [typical if r.deliver_ns in firsts else t for r, t in zip(records, times, strict=True)]


def _figures(
    start_ns: int,
    records: Sequence[StepRecord],
    times: Sequence[int],
    counted: Sequence[float],
    spread_s: float,
    drained: int,
) -> WindowStats | None:
    """A window's `WindowStats`: `counted` are the steps' times as the figure takes them
    (an epoch's first step as a typical one where the stall is spread, `spread_s`)."""
    duration = sum(counted) / NS_PER_S + spread_s
    if not records or duration <= 0:
        return None
    wait = sum(min(r.wait_ns, c) for r, c in zip(records, counted, strict=True)) / NS_PER_S
    raw = (records[-1].deliver_ns - start_ns) / NS_PER_S
    examples = sum(r.examples for r in records)
    dry = dry_steps(records, times)
    return WindowStats(
        steps=len(records),
        examples=examples,
        duration_s=duration,
        examples_per_s=examples / duration,
        steps_per_s=len(records) / duration,
        input_wait_s=wait + spread_s,
        excluded_s=max(0.0, raw - sum(times) / NS_PER_S),
        drained_steps=drained,
        dry_share=sum(dry) / len(dry),
    )


def dry_steps(records: Sequence[StepRecord], times: Sequence[int]) -> list[bool]:
    """Which steps' elements were not waiting in a buffer (see `DRY_FLOOR_NS`)."""
    floor = max(DRY_FLOOR_NS, DRY_SHARE * percentile(times, 50)) if times else DRY_FLOOR_NS
    return [r.wait_ns >= floor for r in records]


def drained_prefix(dry: Sequence[bool]) -> int:
    """How many leading steps of an input-bound window were served from a buffer filled
    before it: the steps before its first dry one (0 for a window that is not
    input-bound, or whose first step is dry)."""
    if not dry or sum(dry) < DRY_MAJORITY * len(dry) or dry[0]:
        return 0
    first = dry.index(True)
    return first if first < len(dry) else 0


def pooled_rates(windows: Sequence[WindowStats]) -> tuple[float, float]:
    """(examples/s, steps/s) over `windows` together: their examples and steps over
    their summed training time, what a run's own clock averages. Not the windows' median
    rate: where windows differ (an epoch with a stall beside one without), the mean of
    their rates credits the fast one more than the time it took. The median rate where
    no time was measured."""
    total_s = sum(w.duration_s for w in windows)
    if total_s <= 0:
        return (
            percentile([w.examples_per_s for w in windows], 50),
            percentile([w.steps_per_s for w in windows], 50),
        )
    return (
        sum(w.examples for w in windows) / total_s,
        sum(w.steps for w in windows) / total_s,
    )


def first_window_drained(windows: Iterable[WindowStats]) -> bool:
    """A run whose first window never waited for its elements while its last mostly
    did: the first window drained a buffer filled during warm-up."""
    stats = list(windows)
    if len(stats) < 2:
        return False
    return stats[0].dry_share <= DRAINED_FIRST and stats[-1].dry_share >= DRY_MAJORITY


def _steps_per_epoch(lengths: Sequence[int], cardinality: int) -> int | None:
    """An epoch's steps: the median of the epochs seen whole, else tf.data's count."""
    if lengths:
        return int(percentile(lengths, 50))
    return cardinality if cardinality > 0 else None
