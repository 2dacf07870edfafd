"""Parent side: the streams a child iterates, which of them train, and the deadlines.

The child reports each stream when it is first iterated (the call site that built its
dataset, the place that iterates it), its elements, and which streams feed optimizer
updates (`tuner/child/roles.py`). Trials, `tftune profile` and discovery read these through
one `StreamWatch`, so they agree on what training is and on when to give up:

- the first training step must come within `first_step_s` of the start;
- each one after it within `next_step_limit_s`: `STALL_FACTOR` times the slowest step
  seen so far, at least `STALL_FLOOR_S`; ``--step-timeout`` sets both.

Past a deadline, `overdue` says in one line what was seen and what was waited for. Pure
Python: no TensorFlow here.
"""

from __future__ import annotations

from collections import deque

from tftune.core.training import StreamSeen
from tftune.probes.live.clock import StepRecord
from tftune.probes.live.clock_events import ChildEvent, StreamFound, TrainingFound
from tftune.tuner.option_defaults import FIRST_STEP_S, STALL_FACTOR, STALL_FLOOR_S

# The deadlines' defaults (``--step-timeout`` says them) are `tuner.option_defaults`': the
# first step waits for model building, tracing, counting loops and `adapt`; STALL_FLOOR_S
# covers a validation pass or a shuffle buffer's refill between epochs.

# A script that updates nothing (a pipeline benchmark) is measured on its busiest loop
# once its datasets have delivered this long with no update (`tuner/child/roles.py`).
FALLBACK_S = 20.0
# Once discovery has found that the script updates nothing, a later run (the guided
# profile) waits only this long before it takes the busiest loop: enough for one loop
# to deliver more than a peek or a count at the start.
KNOWN_BUSIEST_S = 3.0
EARLY_KEPT = 4096  # records kept per stream until it is known whether it trains


def describe_streams(streams: tuple[StreamSeen, ...]) -> str:
    if not streams:
        return "no dataset was iterated"
    return "streams seen: " + "; ".join(s.describe() for s in streams)


class StreamWatch:
    """Follows a child's streams from its clock events and records."""

    def __init__(
        self,
        start: float,
        *,
        first_step_s: float = FIRST_STEP_S,
        stall_floor_s: float = STALL_FLOOR_S,
        step_timeout_s: float | None = None,
    ) -> None:
        self.start = start
        self.step_timeout_s = step_timeout_s
        self.first_step_s = step_timeout_s if step_timeout_s is not None else first_step_s
        self.stall_floor_s = stall_floor_s
        self.info: dict[int, tuple[str | None, str | None]] = {}
        self.elements: dict[int, int] = {}
        self.training: dict[int, str] = {}  # stream -> how it was told, in order
        self.early: dict[int, deque[StepRecord]] = {}
        self.last_step: float | None = None  # parent clock of the last training step
        self.slowest_step_s = 0.0
        self._last_deliver_ns: int | None = None

    # ---- input ------------------------------------------------------------------------
    def event(self, e: ChildEvent) -> int | None:
        """Take a child event; the stream it declares training, when it does."""
        if isinstance(e, StreamFound):
            self.info[e.stream] = (e.site, e.place)
        elif isinstance(e, TrainingFound) and e.stream not in self.training:
            self.training[e.stream] = e.how
            return e.stream
        return None

    def record(self, r: StepRecord) -> bool:
        """Take a step record; True when it is a training stream's."""
        self.elements[r.stream] = self.elements.get(r.stream, 0) + 1
        if r.stream not in self.training:
            self.early.setdefault(r.stream, deque(maxlen=EARLY_KEPT)).append(r)
            return False
        return True

    def stepped(self, now: float, deliver_ns: int) -> None:
        """A training step was delivered (parent clock `now`, child clock `deliver_ns`)."""
        if self._last_deliver_ns is not None:
            took = (deliver_ns - self._last_deliver_ns) / 1e9
            self.slowest_step_s = max(self.slowest_step_s, took)
        self._last_deliver_ns = deliver_ns
        self.last_step = now

    def take_early(self, stream: int) -> list[StepRecord]:
        """The records a stream delivered before it was declared training."""
        return list(self.early.pop(stream, ()))

    # ---- deadlines --------------------------------------------------------------------
    def next_step_limit_s(self) -> float:
        if self.step_timeout_s is not None:
            return self.step_timeout_s
        return max(self.stall_floor_s, STALL_FACTOR * self.slowest_step_s)

    def overdue(self, now: float) -> str | None:
        """One line when a deadline has passed, else None."""
        hint = " (--step-timeout sets how long to wait)"
        if self.last_step is None:
            if now - self.start <= self.first_step_s:
                return None
            waited = f"no training step within {self.first_step_s:.0f} s"
            if not self.elements and not self.info:
                return f"{waited}: no dataset was iterated{hint}"
            return (
                f"{waited}: no dataset fed an optimizer update; "
                f"{describe_streams(self.streams())}{hint}"
            )
        limit = self.next_step_limit_s()
        if now - self.last_step <= limit:
            return None
        slowest = f"; the slowest step so far took {self.slowest_step_s:.2f} s"
        return f"stalled: no further training step for {limit:.0f} s{slowest}{hint}"

    # ---- what was seen ----------------------------------------------------------------
    def where(self, stream: int) -> str:
        return next((s.where() for s in self.streams() if s.stream == stream), f"#{stream}")

    def streams(self) -> tuple[StreamSeen, ...]:
        numbers = sorted(set(self.info) | set(self.elements) | set(self.training))
        return tuple(
            StreamSeen(
                n,
                self.info.get(n, (None, None))[0],
                self.info.get(n, (None, None))[1],
                self.elements.get(n, 0),
                n in self.training,
                self.training.get(n),
            )
            for n in numbers
        )
