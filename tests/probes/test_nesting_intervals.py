"""The numpy passes the stage scan and the finders share, against plain Python:
`probes.traces.nesting.nest` against the stack it replaced, and `probes.traces.intervals` against
counting covered instants one by one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tftune.probes.traces import intervals
from tftune.probes.traces.nesting import nest
from tftune.probes.traces.stage_events import K_FR, K_ITER, K_OP, K_PROC


def _stack_nest(starts: list[int], ends: list[int], kinds: list[int]) -> list[list[int]]:
    """The stack walk `nest` replaced (one event at a time, by start, longer first)."""
    n = len(starts)
    order = sorted(range(n), key=lambda i: (starts[i], -(ends[i] - starts[i]), i))
    parent, it_a, pr_a, op_a, fr_a = [-1] * n, [-1] * n, [-1] * n, [-1] * n, [-1] * n
    top = list(range(n))
    stack: list[int] = []
    for i in order:
        while stack and ends[stack[-1]] <= starts[i]:
            stack.pop()
        if stack and ends[i] <= ends[stack[-1]]:
            p = stack[-1]
            kp = kinds[p]
            parent[i] = p
            it_a[i] = p if kp == K_ITER else it_a[p]
            pr_a[i] = pr_a[p] if pr_a[p] >= 0 else (p if kp == K_PROC else -1)
            op_a[i] = p if kp == K_OP else op_a[p]
            fr_a[i] = p if kp == K_FR else fr_a[p]
            top[i] = top[p]
        stack.append(i)
    return [parent, it_a, pr_a, op_a, top, fr_a]


_events = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 15), st.integers(0, 6)), max_size=60
)


@settings(max_examples=400, deadline=None)
@given(_events)
def test_nest_equals_the_stack_walk(events: list[tuple[int, int, int]]) -> None:
    """Also where events overlap without nesting, start together or last no time."""
    starts = [s for s, _, _ in events]
    ends = [s + d for s, d, _ in events]
    kinds = [k for _, _, k in events]
    got = nest(
        np.array(starts, dtype=np.int64),
        np.array(ends, dtype=np.int64),
        np.array(kinds, dtype=np.int8),
    )
    assert [a.tolist() for a in got] == _stack_nest(starts, ends, kinds)


@settings(max_examples=200, deadline=None)
@given(_events)
def test_nest_of_events_written_in_order_equals_the_stack_walk(
    events: list[tuple[int, int, int]],
) -> None:
    """Events already by start, longer first (as a line writes them: no sort)."""
    events = sorted(events, key=lambda e: (e[0], -e[1]))
    starts = [s for s, _, _ in events]
    ends = [s + d for s, d, _ in events]
    kinds = [k for _, _, k in events]
    got = nest(
        np.array(starts, dtype=np.int64),
        np.array(ends, dtype=np.int64),
        np.array(kinds, dtype=np.int8),
    )
    assert [a.tolist() for a in got] == _stack_nest(starts, ends, kinds)


def test_nest_of_a_long_flat_line_and_a_deep_one() -> None:
    n = 50_000
    flat = np.arange(n, dtype=np.int64) * 10
    parents = nest(flat, flat + 5, np.zeros(n, dtype=np.int8))[0]
    assert (parents == -1).all()
    deep = np.arange(2_000, dtype=np.int64)
    parents, _, _, _, top, _ = nest(deep, 10_000 - deep, np.zeros(2_000, dtype=np.int8))
    assert parents.tolist() == [-1, *range(1_999)] and (top == 0).all()


def _covered(starts: list[int], ends: list[int], lo: int, hi: int) -> int:
    return len({t for s, e in zip(starts, ends, strict=True) for t in range(s, e) if lo <= t < hi})


_intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=30)
_windows = st.lists(st.tuples(st.integers(0, 80), st.integers(0, 30)), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(_intervals, _windows)
def test_unions_count_each_instant_once(
    spans: list[tuple[int, int]], windows: list[tuple[int, int]]
) -> None:
    starts = [s for s, _ in spans]
    ends = [s + d for s, d in spans]
    s, e = np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)
    assert intervals.union_ps(s, e) == _covered(starts, ends, 0, 10**6)
    lo = np.array([a for a, _ in windows], dtype=np.int64)
    hi = lo + np.array([w for _, w in windows], dtype=np.int64)
    per_window = intervals.covered_in(intervals.merge(s, e), lo, hi).tolist()
    for (a, b), got in zip(zip(lo.tolist(), hi.tolist(), strict=True), per_window, strict=True):
        assert got == _covered(starts, ends, a, b) == intervals.union_ps(s, e, a, b)
