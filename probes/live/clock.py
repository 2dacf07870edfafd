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
``tf.timestamp()`` in graphs); only differences between them are used. Parent side
(`ClockReader`): incremental parsing; what a window of steps says is
`probes.live.training_time`'s. No TensorFlow here.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

CLOCK_BUFFER_STEPS = 64  # steps buffered in-graph before Python is called ...
CLOCK_FLUSH_S = 0.1  # ... or this long after the last hand-over, whichever comes first


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


@dataclass(frozen=True, slots=True)
class ClockEvent:
    """A non-step event from the child (nan loss, exception, profile done, ...)."""

    kind: str
    payload: dict[str, Any]


class ClockWriter:
    """Child side: appends one line per delivered element. Thread-safe."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def records(self, stream: int, rows: Sequence[tuple[int, int, int]]) -> None:
        """Write many steps at once: (request_ns, deliver_ns, examples) per step."""
        text = "".join(f"S {stream} {req} {dl} {n}\n" for req, dl, n in rows)
        with self._lock:
            self._fh.write(text)

    def event(self, kind: str, **payload: Any) -> None:
        """One event line, on disk before this returns (a measured trial is stopped by a
        signal)."""
        self._event(kind, payload, durable=True)

    def figures(self, kind: str, **payload: Any) -> None:
        """One event line of frequent figures (the loss), written on as the file is."""
        self._event(kind, payload, durable=False)

    def _event(self, kind: str, payload: dict[str, Any], durable: bool) -> None:
        line = f"E {kind} {json.dumps(payload, default=str)}\n"
        with self._lock:
            self._fh.write(line)
            if durable:
                self._fh.flush()
                os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def parse_line(line: str) -> StepRecord | ClockEvent | None:
    """Parse one complete line; None for anything malformed (never raises)."""
    parts = line.rstrip("\n").split(" ", 2)
    try:
        if parts[0] == "S":
            stream, req, rest = parts[1], parts[2].split(" ")[0], parts[2].split(" ")[1:]
            deliver, examples = int(rest[0]), int(rest[1])
            return StepRecord(int(stream), int(req), deliver, examples)
        if parts[0] == "E":
            payload = json.loads(parts[2]) if len(parts) > 2 else {}
            return ClockEvent(parts[1], payload if isinstance(payload, dict) else {})
    except (IndexError, ValueError):
        return None
    return None


class ClockReader:
    """Parent side: reads what the child appended since the last call."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._offset = 0
        self._partial = ""

    def poll(self) -> list[StepRecord | ClockEvent]:
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
        out: list[StepRecord | ClockEvent] = []
        for line in lines:
            item = parse_line(line)
            if item is not None:
                out.append(item)
        return out


def percentile(values: Sequence[float], q: float) -> float:
    """`numpy.percentile` (linear interpolation), q in [0, 100], as a Python float;
    values must be non-empty."""
    return float(np.percentile(values, q))


def spread(values: Sequence[float]) -> float:
    """(max − min) / median: the noise between repeats of one measurement."""
    med = percentile(values, 50)
    return (max(values) - min(values)) / med if med > 0 else 0.0
