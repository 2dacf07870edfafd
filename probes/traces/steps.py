"""Step detection: where each training step starts and ends on one host.

Order of preference, recorded in `Steps.detection`:

1. `markers`: events that carry a `step_num` stat. TensorFlow's convention is
   `tf.profiler.experimental.Trace("train", step_num=N, _r=1)`; Keras 3's TensorBoard
   callback writes `Trace("Profiled batch", step_num=batch)` without `_r`, which XProf
   does not accept as a step marker (its names must start with "train", "test" or
   "TraceContext"), so Keras users see "No step marker observed" there. We accept both.
2. `inferred:iterator_get_next`: the consumer's eager `IteratorGetNext` calls on the
   Python thread. Each call starts a step, which lasts until the next call starts; the
   last call has no known end and is dropped.
3. `inferred:train_function`: the repeated call of one `tf.function` (Keras'
   `multi_step_on_iterator`, a user's `train_step`), same start-to-start rule.
4. `inferred:iterator_get_next` again, from `IteratorGetNextOp::DoCompute` on any
   thread (the op inside a `tf.function` runs on a `tf_data_iterator_get_next` thread).
5. `none`: nothing repeats; the analysis reports no steps rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tftune.core.units import PS_PER_MS
from tftune.probes.traces._stat_bytes import STAT_NONE, STAT_OTHER, STAT_UINT64
from tftune.probes.traces.trace import HostTrace, Line, Plane

I64 = npt.NDArray[np.int64]

DETECTION_MARKERS = "markers"
DETECTION_ITERATOR = "inferred:iterator_get_next"
DETECTION_FUNCTION = "inferred:train_function"
DETECTION_NONE = "none"
DETECTIONS = (DETECTION_MARKERS, DETECTION_ITERATOR, DETECTION_FUNCTION, DETECTION_NONE)

STEP_NUM_STAT = "step_num"
ROOT_STAT = "_r"
# XProf's own test for an explicit host step marker name (xplane_to_step_events.cc).
XPROF_MARKER_PREFIXES = ("train", "test", "TraceContext")
KERAS_MARKER = "Profiled batch"

EAGER_GET_NEXT = "EagerLocalExecute: IteratorGetNext"
GET_NEXT_OP = "IteratorGetNextOp::DoCompute"
FUNCTION_CALL_RE = re.compile(r"^EagerLocalExecute: __inference_(.+)_\d+$")
# Function names that are a training step by convention (Keras 3, Keras 2, user code).
TRAIN_FUNCTION_HINTS = ("multi_step_on_iterator", "one_step_on_iterator", "train_function", "train")
# A pattern must repeat at least this often before we call its occurrences steps.
MIN_INFERRED_CALLS = 3


@dataclass(frozen=True, slots=True, eq=False)
class Steps:
    """The steps found on one host, in time order.

    `start_ps`/`end_ps` are on the host trace's time base (`HostTrace.origin_ns`).
    `numbers` are the markers' `step_num` values, or 0..n-1 when inferred.
    `source` names what was used: the marker name, or the inferred event name.
    `line` is the thread the steps were found on (the consumer thread).
    """

    detection: str
    numbers: I64
    start_ps: I64
    end_ps: I64
    source: str | None = None
    line: str | None = None
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.numbers.shape[0])

    @property
    def count(self) -> int:
        return len(self)

    @property
    def duration_ps(self) -> I64:
        return self.end_ps - self.start_ps

    @property
    def durations_ms(self) -> npt.NDArray[np.float64]:
        return self.duration_ps.astype(np.float64) / PS_PER_MS

    def summary(self) -> dict[str, Any]:
        """The analysis JSON's `steps` object; times are null when there are no steps."""
        if not len(self):
            return {"count": 0, "mean_ms": None, "p50_ms": None, "p90_ms": None}
        d = self.durations_ms
        return {
            "count": len(self),
            "mean_ms": round(float(d.mean()), 3),
            "p50_ms": round(float(np.percentile(d, 50)), 3),
            "p90_ms": round(float(np.percentile(d, 90)), 3),
        }

    @staticmethod
    def empty(notes: Sequence[str] = ()) -> Steps:
        z = np.zeros(0, dtype=np.int64)
        return Steps(DETECTION_NONE, z, z.copy(), z.copy(), notes=tuple(notes))


def _marker_candidates(plane: Plane) -> list[tuple[Line, int, bool]]:
    """(line, metadata id, is_root) for event names whose events carry `step_num`.

    A TraceMe's arguments become stats of each event, so the same name has the same
    stat keys on every occurrence: checking one event per (line, name) is enough, and
    keeps this cheap on million-event traces.
    """
    found = []
    for line in plane.lines:
        if not len(line):
            continue
        ids, first = line.first_of_each_id()
        for mid, idx in zip(ids.tolist(), first.tolist(), strict=True):
            keys = {plane.stat_names.get(s.metadata_id) for s in line.raw_stats(idx)}
            if STEP_NUM_STAT in keys:
                found.append((line, mid, ROOT_STAT in keys))
    return found


def _marker_rank(name: str, is_root: bool, count: int) -> tuple[int, int]:
    if is_root or name.startswith(XPROF_MARKER_PREFIXES):
        tier = 0
    elif name == KERAS_MARKER:
        tier = 1
    else:
        tier = 2
    return (tier, -count)


def _steps_from_markers(plane: Plane) -> Steps | None:
    cands = _marker_candidates(plane)
    if not cands:
        return None
    by_name: dict[str, list[tuple[Line, int, bool]]] = {}
    for line, mid, root in cands:
        by_name.setdefault(plane.event_names.get(mid, ""), []).append((line, mid, root))

    def rank(name: str) -> tuple[int, int]:
        entries = by_name[name]
        count = sum(int(np.count_nonzero(ln.metadata_id == mid)) for ln, mid, _ in entries)
        return _marker_rank(name, any(r for _, _, r in entries), count)

    name = min(by_name, key=rank)
    # One span per step number: the longest (the first of equals), as XProf does when
    # several threads mark it; the spans in time order (then by number).
    nums, starts, ends = [], [], []
    for line, mid, _ in by_name[name]:
        idx = np.flatnonzero(line.metadata_id == mid)
        num, has = _step_nums(plane, line, idx)
        nums.append(num[has])
        starts.append(line.start_ps[idx[has]])
        ends.append(line.start_ps[idx[has]] + line.duration_ps[idx[has]])
    num, start, end = (np.concatenate(c) for c in (nums, starts, ends))
    if not num.size:
        return None
    by_num = np.lexsort((np.arange(num.size), start - end, num))
    first = np.ones(num.size, dtype=bool)
    first[1:] = num[by_num[1:]] != num[by_num[:-1]]
    keep = by_num[first]
    order = keep[np.lexsort((num[keep], start[keep]))]
    return Steps(
        DETECTION_MARKERS,
        num[order],
        start[order],
        end[order],
        source=name,
        line=next(line.name for line, _, _ in by_name[name]),
    )


def _step_nums(
    plane: Plane, line: Line, events: npt.NDArray[np.intp]
) -> tuple[I64, npt.NDArray[np.bool_]]:
    """The `step_num` of each event (and whether it has one), read from the line's bytes
    for all of them at once; where the first `step_num` stat is not an int64 (or a
    uint64 under 2**63), the event is read as `_step_num` reads it."""
    keys = np.array([k for k, v in plane.stat_names.items() if v == STEP_NUM_STAT], dtype=np.int64)
    kind, value, unusual = line.first_stat(events, keys)
    nums = value.view(np.int64).copy()  # an int64 as its two's complement
    has = kind != STAT_NONE
    odd = unusual | (kind == STAT_OTHER) | ((kind == STAT_UINT64) & (value >= np.uint64(2**63)))
    for j in np.flatnonzero(odd).tolist():
        num = _step_num(plane, line, int(events[j]))
        has[j] = num is not None
        nums[j] = num if num is not None else 0
    return nums, has


def _step_num(plane: Plane, line: Line, index: int) -> int | None:
    for stat in line.raw_stats(index):
        if plane.stat_names.get(stat.metadata_id) == STEP_NUM_STAT:
            kind = stat.WhichOneof("value")
            value = getattr(stat, kind) if kind else None
            num: int | None = None
            if isinstance(value, int) and kind != "ref_value":
                num = value
            elif isinstance(value, str) and value.lstrip("-").isdigit():
                num = int(value)
            if num is not None and -(2**63) <= num < 2**63:
                return num
    return None


def _start_to_start(starts: I64, detection: str, source: str, line: str) -> Steps | None:
    starts = np.unique(starts)  # sorted, and a zero-length repeat is not a new step
    if starts.size < MIN_INFERRED_CALLS:
        return None
    n = starts.size - 1
    return Steps(
        detection,
        np.arange(n, dtype=np.int64),
        starts[:-1].copy(),
        starts[1:].copy(),
        source=source,
        line=line,
        notes=(
            f"no step markers: {n} steps inferred from successive '{source}' calls on "
            f"thread '{line}' (the last call has no known end and is not counted)",
        ),
    )


def _best_line_for(plane: Plane, name: str) -> tuple[Line, I64] | None:
    best: tuple[Line, I64] | None = None
    for line, idx in plane.find(lambda n: n == name):
        starts = line.start_ps[idx]
        if best is None or starts.size > best[1].size:
            best = (line, starts)
    return best


def _steps_from_iterator(plane: Plane, name: str) -> Steps | None:
    best = _best_line_for(plane, name)
    if best is None:
        return None
    return _start_to_start(best[1], DETECTION_ITERATOR, name, best[0].name)


def _steps_from_function(plane: Plane) -> Steps | None:
    counts: dict[str, tuple[int, str]] = {}
    for mid, ev_name in plane.event_names.items():
        m = FUNCTION_CALL_RE.match(ev_name)
        if m is None:
            continue
        n = sum(int(np.count_nonzero(ln.metadata_id == mid)) for ln in plane.lines)
        if n >= MIN_INFERRED_CALLS:
            counts[ev_name] = (n, m.group(1))
    if not counts:
        return None

    def rank(ev_name: str) -> tuple[int, int]:
        n, fn = counts[ev_name]
        hinted = any(h in fn for h in TRAIN_FUNCTION_HINTS)
        return (0 if hinted else 1, -n)

    ev_name = min(counts, key=rank)
    best = _best_line_for(plane, ev_name)
    if best is None:
        return None
    return _start_to_start(best[1], DETECTION_FUNCTION, ev_name, best[0].name)


def detect_steps(host: HostTrace) -> Steps:
    """The steps of one host, from markers when present, else inferred (see module doc)."""
    plane = host.host_plane
    if plane is None:
        return Steps.empty((f"{host.path}: no host plane (/host:CPU) in the trace",))
    for find in (
        _steps_from_markers,
        lambda p: _steps_from_iterator(p, EAGER_GET_NEXT),
        _steps_from_function,
        lambda p: _steps_from_iterator(p, GET_NEXT_OP),
    ):
        steps = find(plane)
        if steps is not None and len(steps):
            return steps
    return Steps.empty(
        (
            "no step markers, and no repeated IteratorGetNext or tf.function call "
            "to infer steps from",
        )
    )
