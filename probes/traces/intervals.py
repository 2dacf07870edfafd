"""Unions of time intervals, written once: how long a set of [start, end) intervals
covers, in all or inside windows, with numpy.

Nested or overlapping events (a stage inside its parent, two threads' functions at once)
must count once: that is the union's length, not the sum of durations. Times are integer
picoseconds, so every figure here is exact and the same whichever way it is summed.

- `merge(starts, ends)`: the disjoint runs, sorted, that cover the same instants;
- `union_ps(starts, ends, lo, hi)`: the union's length, clipped to [lo, hi) when given;
- `covered_in(runs, lo, hi)`: per window [lo[i], hi[i]), the time the runs cover in it;
- `concat(chunks)`: (starts, ends) chunks laid end to end, for the functions above.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
Runs = tuple[I64, I64]


def concat(chunks: Iterable[tuple[I64, I64]]) -> Runs:
    """The chunks' starts and ends, each as one array."""
    parts = list(chunks)
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy()
    return (
        np.concatenate([np.asarray(p[0], dtype=np.int64) for p in parts]),
        np.concatenate([np.asarray(p[1], dtype=np.int64) for p in parts]),
    )


def merge(starts: I64, ends: I64) -> Runs:
    """Disjoint runs, sorted by start, covering the same instants as [starts, ends);
    empty intervals are dropped, and runs that touch are one."""
    keep = ends > starts
    s, e = starts[keep], ends[keep]
    if not s.size:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # A new run starts where an interval begins after everything before it has ended.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, s.size - 1]
    return s[first], reach[last]


def union_ps(starts: I64, ends: I64, lo: int | None = None, hi: int | None = None) -> int:
    """Total length covered by the union of [starts, ends), clipped to [lo, hi) when
    given."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if lo is not None or hi is not None:
        s = np.clip(s, lo, hi)
        e = np.clip(e, lo, hi)
    rs, re_ = merge(s, e)
    return int((re_ - rs).sum())


def _covered_before(runs: Runs, t: I64) -> I64:
    """For each time in `t`, how long the disjoint sorted runs cover before it."""
    s, e = runs
    if not s.size:
        return np.zeros(t.shape, dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(e - s)))
    j = np.searchsorted(s, t, side="right")  # runs starting at or before t
    prev = np.maximum(j - 1, 0)
    partial = np.clip(t - s[prev], 0, e[prev] - s[prev])
    return np.where(j > 0, cum[prev] + partial, 0).astype(np.int64)


def covered_in(runs: Runs, lo: I64, hi: I64) -> I64:
    """Per window [lo[i], hi[i]), how long the disjoint sorted runs (`merge`) cover in
    it: the union of the intervals clipped to each window, for all windows at once."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.maximum(np.asarray(hi, dtype=np.int64), lo)
    return _covered_before(runs, hi) - _covered_before(runs, lo)
