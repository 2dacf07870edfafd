"""How the events of one thread nest, with numpy: each event's parent and the ancestors
the stage scan asks for (`probes.traces.stage_scan`), for all events of a line at once.

TraceMe scopes on one thread nest properly, so a stack would do: sort by start (longer
first; a line's events mostly come in that order, and are then left as they are), pop
what ended before the event starts, and the event's parent is the stack's top when the
event ends within it. Every event is pushed, so after the pops the top is the latest
event (in that order) still open at the event's start. `nest` finds that event for all
events together by pointer jumping: each event's candidate starts at the event before
it and jumps to the candidate's own candidate while the candidate has ended. Everything
jumped over ended before the candidate started, hence before the event did, so the
answer is never skipped; jumps double, so rounds are few. The result equals the
stack's, also where a trace's events overlap without nesting.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tftune.probes.traces.stage_events import K_FR, K_ITER, K_OP, K_PROC

I64 = npt.NDArray[np.int64]
Idx = npt.NDArray[np.signedinteger[Any]]  # event indices: int32, or int64 on huge lines
_Bool = npt.NDArray[np.bool_]


def nest(
    starts: I64, ends: I64, kinds: npt.NDArray[np.int8]
) -> tuple[Idx, Idx, Idx, Idx, Idx, Idx]:
    """Per event on one thread: parent, innermost iterator ancestor, outermost function
    execution ancestor, innermost kernel ancestor, outermost ancestor (itself when it has
    no parent), and innermost function-dispatch ancestor (-1: none). Indices are int32
    below 2**31 events (a line of a million events needs 4 MB per column, not 8)."""
    n = int(starts.shape[0])
    itype = np.int32 if n < 2**31 - 1 else np.int64
    durs = ends - starts
    steps = np.diff(starts)
    # A line's events are usually written in this order already: then no sort.
    if bool(((steps > 0) | ((steps == 0) & (durs[1:] <= durs[:-1]))).all()):
        order = None
        s, e, k = starts, ends, kinds
    else:
        order = np.lexsort((-durs, starts)).astype(itype)
        s, e, k = starts[order], ends[order], kinds[order]
    del durs, steps
    top = _open_before(s, e, itype)
    has = top >= 0
    has[has] = e[has] <= e[top[has]]
    del s, e
    parent = np.where(has, top, itype(-1))
    del top, has

    def back(a: Idx) -> Idx:  # from sorted positions to the caller's event indices
        if order is None:
            return a.astype(itype, copy=False)
        out = np.empty(n, dtype=itype)
        out[order] = np.where(a >= 0, order[np.maximum(a, 0)], itype(-1))
        return out

    inner_proc = _nearest(parent, k == K_PROC)
    # The outermost execution: the root of the chain of executions above an event.
    outer_proc = np.where(inner_proc >= 0, _roots(inner_proc)[np.maximum(inner_proc, 0)], -1)
    del inner_proc
    return (
        back(parent),
        back(_nearest(parent, k == K_ITER)),
        back(outer_proc.astype(itype)),
        back(_nearest(parent, k == K_OP)),
        back(_roots(parent)),
        back(_nearest(parent, k == K_FR)),
    )


def _open_before(s: I64, e: I64, itype: type[np.signedinteger[Any]]) -> Idx:
    """Per event (sorted by start), the latest earlier event still open at its start."""
    cand = np.arange(-1, s.shape[0] - 1, dtype=itype)
    act = np.flatnonzero(cand >= 0)
    act = act[e[cand[act]] <= s[act]]
    while act.size:
        nxt = cand[cand[act]]
        cand[act] = nxt
        act = act[nxt >= 0]
        act = act[e[cand[act]] <= s[act]]
    return cand


def _nearest(parent: Idx, is_kind: _Bool) -> Idx:
    """Per event, its innermost ancestor of a kind (-1: none), by pointer jumping: every
    ancestor jumped over is not of the kind."""
    anc: Idx = parent.copy()
    act = np.flatnonzero(anc >= 0)
    act = act[~is_kind[anc[act]]]
    while act.size:
        nxt = anc[anc[act]]
        anc[act] = nxt
        act = act[nxt >= 0]
        act = act[~is_kind[anc[act]]]
    return anc


def _roots(up: Idx) -> Idx:
    """Per event, the last of itself, up[itself], up[up[itself]], ... before -1."""
    root = np.where(up >= 0, up, np.arange(up.shape[0], dtype=up.dtype))
    while True:
        nxt = root[root]
        if np.array_equal(nxt, root):
            return root
        root = nxt
