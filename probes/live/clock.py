"""The live step clock of a trial, both sides of it.

Child side (`ClockWriter`): the tftune bootstrap (`tuner/child/step_clock.py`) times when the
consumer *requests* each element and when it is *delivered*: around the iterator's
get-next (Keras ``fit``, eager ``for``, ``iter``/``next``, ``next`` inside a
``tf.function``), or around the loop body of autograph's ``for x in ds`` inside a
``tf.function``. Each delivery becomes one line in a file. To stay under 2% of throughput
graphs take timestamps in-graph and Python receives them in batches
(`ClockWriter.records`), at most every ``CLOCK_FLUSH_S`` or every ``CLOCK_BUFFER_STEPS``.

Line format (text, one record per line)::

    S <stream> <request_ns> <deliver_ns> <examples>
    E <kind> <json payload>

Timestamps are nanoseconds of the child's wall clock (``time.time_ns()`` eagerly,
``tf.timestamp()`` in graphs); only differences between them are used. An ``E`` line is
one of the child's typed events (`probes.live.clock_events`: the types and their codec).
Parent side (`ClockReader`): incremental, strict decoding (`decode_line`); what a window
of steps says is `probes.live.training_time`'s. No TensorFlow here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tftune.probes.live.clock_events import (
    EVENT_MARK,
    ChildEvent,
    ClockLineError,
    decode_event,
    durable,
    encode_event,
)

CLOCK_BUFFER_STEPS = 64  # steps buffered in-graph before Python is called ...
CLOCK_FLUSH_S = 0.1  # ... or this long after the last hand-over, whichever comes first
STEP_MARK = "S"


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One element delivered to the consumer: a training step."""

    stream: int
    request_ns: int
    deliver_ns: int
    examples: int

    @property
    def wait_ns(self) -> int:
        return max(0, self.deliver_ns - self.request_ns)


class ClockWriter:
    """Child side: appends one line per delivered element, and the child's events.
    Thread-safe."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def records(self, stream: int, rows: Sequence[tuple[int, int, int]]) -> None:
        """Write many steps at once: (request_ns, deliver_ns, examples) per step."""
        text = "".join(f"{STEP_MARK} {stream} {req} {dl} {n}\n" for req, dl, n in rows)
        with self._lock:
            self._fh.write(text)

    def event(self, event: ChildEvent) -> None:
        """One event line; on disk before this returns (a measured trial is stopped by a
        signal), but for the frequent figures (`clock_events.durable`)."""
        line = encode_event(event)
        with self._lock:
            self._fh.write(line)
            if durable(event):
                self._fh.flush()
                os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def decode_line(line: str) -> StepRecord | ChildEvent:
    """One complete line (without its newline) as a step or an event; `ClockLineError`
    for anything else."""
    if line.startswith(f"{EVENT_MARK} "):
        return decode_event(line)
    parts = line.split(" ")
    if len(parts) != 5 or parts[0] != STEP_MARK:
        raise ClockLineError(f"not a step or an event line: {line[:80]!r}")
    try:
        stream, request, deliver, examples = (int(p) for p in parts[1:])
    except ValueError:
        raise ClockLineError(f"a step line's fields must be integers: {line[:80]!r}") from None
    return StepRecord(stream, request, deliver, examples)


class ClockReader:
    """Parent side: reads what the child appended since the last call. A complete line
    that does not decode (`ClockLineError`: a torn write of a forked process, say) is
    skipped: counted in `skipped`, the first one's error kept in `first_skipped`."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._offset = 0
        self._partial = ""
        self.skipped = 0
        self.first_skipped: str | None = None

    def poll(self) -> list[StepRecord | ChildEvent]:
        try:
            with open(self._path, encoding="utf-8", errors="replace") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
                self._offset = fh.tell()
        except FileNotFoundError:
            return []
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        out: list[StepRecord | ChildEvent] = []
        for line in lines:
            try:
                out.append(decode_line(line))
            except ClockLineError as exc:
                self.skipped += 1
                self.first_skipped = self.first_skipped or str(exc)
        return out


def percentile(values: Sequence[float], q: float) -> float:
    """`numpy.percentile` (linear interpolation), q in [0, 100], as a Python float;
    values must be non-empty."""
    return float(np.percentile(values, q))


def spread(values: Sequence[float]) -> float:
    """(max − min) / median: the noise between repeats of one measurement."""
    med = percentile(values, 50)
    return (max(values) - min(values)) / med if med > 0 else 0.0
