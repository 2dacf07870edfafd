"""One pass over a host plane's lines: the per-stage sums `traces.stages` builds its tree from.

`scan_plane(plane, index, lo, hi)` walks every line once, nests its events (TraceMe
scopes nest properly on one thread) and sums, per stage: calls, total and exclusive
time, runner-thread time, where its child events ran, the functions it called and
waited for, and the latest events that carry its knobs. Function executions
(`ExecutorState::Process`) are tied to their stage through the dispatch's `id` stat
once every line has been read (`FunctionWork`).

Arrays are indexed by stage (position in `PlaneIndex.stage_list`); times are picoseconds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tftune.probes.traces.function_ids import Ids, Owners, read_ids
from tftune.probes.traces.nesting import Idx, nest
from tftune.probes.traces.stage_events import (
    DATASET_FN_RE,
    I64,
    K_FR,
    K_ITER,
    K_NOTE,
    K_OP,
    K_PROC,
    K_PRODUCE,
    KNOB_EVENTS,
    PY_EVENT_RE,
    PlaneIndex,
)
from tftune.probes.traces.trace import Line, Plane

# -- one pass over the lines ------------------------------------------------------------

# Per line, what ran inside top-level function executions: their ids, execution starts
# and ends, then per inner event: its execution (local index), metadata id, start, end
# and kind.
_Pending = tuple[Ids, I64, I64, I64, I64, I64, I64, I64]


@dataclass(frozen=True, slots=True, eq=False)
class FunctionWork:
    """Function executions per owner stage (by name): time, kernels, Python frames."""

    ps: Mapping[str, int]
    calls: Mapping[str, int]
    ops: Mapping[str, Mapping[str, int]]  # op type -> ps
    nodes: Mapping[str, Mapping[str, int]]  # kernel node name -> ps
    frames: Mapping[str, Mapping[str, int]]  # Python tracer event -> ps
    names: Mapping[str, set[str]]  # UDF names TF gave the functions
    udf_intervals: Mapping[str, list[tuple[I64, I64]]]  # Python UDF kernel intervals
    work_intervals: Mapping[str, list[tuple[I64, I64]]]  # execution intervals


@dataclass(frozen=True, slots=True, eq=False)
class StageEvents:
    """Per-stage sums over the window (arrays indexed like `PlaneIndex.stage_list`)."""

    calls: I64
    total: I64
    self_ps: I64  # exclusive time of the stage's own events on their thread
    runner: I64  # exclusive runner-thread time (async stages)
    child_events: I64
    child_nested: I64  # child events nested in this stage's own events
    first_start: I64
    inline_fn: I64  # functions a synchronous stage called and waited for
    inline_calls: I64
    # The latest few events of each stage: (start, line, index), newest first.
    last_events: Mapping[int, list[tuple[int, Line, int]]]
    functions: FunctionWork


@dataclass
class _Scan:
    """Accumulators of `scan_plane` (mutable while the lines are read)."""

    calls: I64
    total: I64
    self_ps: I64
    runner: I64
    child_events: I64
    child_nested: I64
    first_start: I64
    inline_fn: I64
    inline_calls: I64
    last_events: dict[int, list[tuple[int, Line, int]]] = field(default_factory=dict)
    owners: Owners = field(default_factory=Owners)
    pending: list[_Pending] = field(default_factory=list)

    @classmethod
    def empty(cls, n_st: int) -> _Scan:
        def z() -> I64:
            return np.zeros(n_st, dtype=np.int64)

        first = np.full(n_st, np.iinfo(np.int64).max, dtype=np.int64)
        return cls(z(), z(), z(), z(), z(), z(), first, z(), z())


@dataclass(frozen=True, slots=True, eq=False)
class _LineEvents:
    """The events of one line that `scan_plane` reads, nested."""

    idx: Idx  # their indices in the line
    kinds: npt.NDArray[np.int8]
    mids: I64
    starts: I64
    durs: I64
    # From `nesting.nest`: parent and ancestors (event positions here, -1: none).
    parents: Idx
    iter_anc: Idx
    proc_anc: Idx
    op_anc: Idx
    top: Idx
    fr_anc: Idx

    @property
    def n(self) -> int:
        return int(self.idx.size)

    @property
    def ends(self) -> I64:
        return self.starts + self.durs

    def nested(self, kind: int) -> I64:
        """Per event, the time of the events of `kind` nested directly in it (for
        executions, only those not inside another execution)."""
        m = (self.kinds == kind) & (self.parents >= 0)
        if kind == K_PROC:
            m &= self.kinds[np.maximum(self.parents, 0)] != K_PROC
        return np.bincount(self.parents[m], weights=self.durs[m], minlength=self.n).astype(np.int64)


def scan_plane(plane: Plane, index: PlaneIndex, lo: int, hi: int) -> StageEvents:
    """Every line of `plane`, events starting in [lo, hi), summed per stage."""
    scan = _Scan.empty(len(index.stage_list))
    for line in plane.lines:
        _scan_line(line, index, lo, hi, scan)
    return StageEvents(
        calls=scan.calls,
        total=scan.total,
        self_ps=scan.self_ps,
        runner=scan.runner,
        child_events=scan.child_events,
        child_nested=scan.child_nested,
        first_start=scan.first_start,
        inline_fn=scan.inline_fn,
        inline_calls=scan.inline_calls,
        last_events=scan.last_events,
        functions=_attribute_functions(scan.pending, scan.owners, index),
    )


def _scan_line(line: Line, index: PlaneIndex, lo: int, hi: int, scan: _Scan) -> None:
    """One line into the sums (its nested events are dropped before the next line's)."""
    ev = _line_events(line, index, lo, hi)
    if ev is None:
        return
    owner_of_top = _count_iterators(ev, line, index, scan)
    _own_function_runs(ev, line, index, scan, owner_of_top)
    _count_runner_time(ev, scan, owner_of_top)
    _collect_executions(ev, line, index, scan)


def _line_events(line: Line, index: PlaneIndex, lo: int, hi: int) -> _LineEvents | None:
    """The line's events of a known kind in the window, nested; None when it has no
    iterator, dispatch or execution event there."""
    if not len(line):
        return None
    mids_all = line.metadata_id
    kinds_all = index.kind_of.take(mids_all, mode="clip")  # an unknown id: kind 0
    s_all = line.start_ps
    idx = np.flatnonzero((kinds_all > 0) & (s_all >= lo) & (s_all < hi))
    if not idx.size:
        return None
    if len(line) < 2**31:  # 4 bytes an index, not 8
        idx = idx.astype(np.int32)
    kinds = kinds_all[idx]
    if not np.isin(kinds, (K_ITER, K_FR, K_PROC)).any():
        return None
    starts = s_all[idx]
    durs = line.duration_ps[idx]
    parents, iter_anc, proc_anc, op_anc, top, fr_anc = nest(starts, starts + durs, kinds)
    return _LineEvents(
        idx=idx,
        kinds=kinds,
        mids=mids_all[idx],
        starts=starts,
        durs=durs,
        parents=parents,
        iter_anc=iter_anc,
        proc_anc=proc_anc,
        op_anc=op_anc,
        top=top,
        fr_anc=fr_anc,
    )


def _count_iterators(ev: _LineEvents, line: Line, index: PlaneIndex, scan: _Scan) -> I64:
    """Sum the line's iterator events into their stages; return, per event, which stage
    its top-level event works for on a runner thread (-1: not known; `_runner_owners`)."""
    ii = np.flatnonzero(ev.kinds == K_ITER)
    if not ii.size:
        return np.full(ev.n, -1, dtype=np.int64)
    starts = ev.starts
    st = index.stage_of[ev.mids[ii]]
    np.add.at(scan.calls, st, 1)
    np.add.at(scan.total, st, ev.durs[ii])
    np.add.at(scan.self_ps, st, np.maximum(0, ev.durs[ii] - ev.nested(K_ITER)[ii]))
    np.minimum.at(scan.first_start, st, starts[ii])
    pst = index.parent_ix[st]
    has = pst >= 0
    np.add.at(scan.child_events, pst[has], 1)
    anc = ev.iter_anc[ii]
    anc_stage = np.where(anc >= 0, index.stage_of[ev.mids[np.maximum(anc, 0)]], -2)
    ok = has & (anc_stage == pst)
    np.add.at(scan.child_nested, pst[ok], 1)
    # TF writes a knob as "unavailable" when the iterator's lock was busy at trace time
    # (ParallelMap's parallelism, for one), so one event may lack a knob that the one
    # before it carries: keep the latest few.
    for u in np.unique(st).tolist():
        k = ii[st == u]
        latest = k[np.argsort(starts[k])[-KNOB_EVENTS:]]
        found = scan.last_events.setdefault(u, [])
        found += [(int(starts[j]), line, int(ev.idx[j])) for j in latest.tolist()]
        found.sort(key=lambda t: t[0], reverse=True)
        del found[KNOB_EVENTS:]
    # Runner threads: a top-level event that calls a stage's input belongs to the
    # stage whose input it calls.
    tops = ev.top[ii]
    cand = (tops != ii) & (ev.kinds[tops] != K_ITER) & has & (anc < 0)
    return _runner_owners(ev, tops[cand], pst[cand])


def _runner_owners(ev: _LineEvents, tops: I64, stages: I64) -> I64:
    """Per event, the stage its top-level event works for: the stage whose input that
    event called (the last call's, where it called several); an event whose top-level
    event called none works for the stage of the line's first such event (a runner
    thread serves one stage), and -1 where the line has none."""
    if not tops.size:
        return np.full(ev.n, -1, dtype=np.int64)
    by_top = np.full(ev.n, -1, dtype=np.int64)
    # The last call of each top-level event wins, as in a dict built call by call.
    last = tops.size - 1 - np.unique(tops[::-1], return_index=True)[1]
    by_top[tops[last]] = stages[last]
    default = by_top[tops[0]]
    owner = by_top[ev.top]
    owner[owner < 0] = default
    return owner


def _own_function_runs(
    ev: _LineEvents, line: Line, index: PlaneIndex, scan: _Scan, owner_of_top: I64
) -> None:
    """Name the owner stage of each function dispatch (by its `id` stat); a synchronous
    stage's own calls count as time it waited for its function."""
    js = np.flatnonzero(ev.kinds == K_FR)
    if not js.size:
        return
    ids = read_ids(index, line, ev.idx[js])
    anc = ev.iter_anc[js]
    in_stage = anc >= 0
    owner = owner_of_top[js]
    owner[in_stage] = index.stage_of[ev.mids[anc[in_stage]]]
    # A synchronous call: the stage waits for it right where it calls it.
    inline = in_stage & (ev.fr_anc[js] < 0)
    np.add.at(scan.inline_fn, owner[inline], ev.durs[js[inline]])
    np.add.at(scan.inline_calls, owner[inline], 1)
    scan.owners.add(ids, owner)


def _count_runner_time(ev: _LineEvents, scan: _Scan, owner_of_top: I64) -> None:
    """A runner thread's `*Produce` time outside iterators and executions: overhead."""
    js = np.flatnonzero((ev.kinds == K_PRODUCE) & (ev.parents < 0))
    owner = owner_of_top[js]
    ok = owner >= 0
    if not ok.any():
        return
    own = np.maximum(0, ev.durs - ev.nested(K_ITER) - ev.nested(K_PROC))[js[ok]]
    np.add.at(scan.runner, owner[ok], own)


def _collect_executions(ev: _LineEvents, line: Line, index: PlaneIndex, scan: _Scan) -> None:
    """Keep the line's outermost function executions and what ran inside them, resolved
    once every dispatch (on runner threads) has named its owner stage."""
    kinds, proc_anc = ev.kinds, ev.proc_anc
    procs = np.flatnonzero((kinds == K_PROC) & (proc_anc < 0))
    if not procs.size:
        return
    ends = ev.ends
    ids = read_ids(index, line, ev.idx[procs]).of_executions()
    local = np.full(ev.n, -1, dtype=np.int64)
    local[procs] = np.arange(procs.size)
    inner = np.flatnonzero((proc_anc >= 0) & np.isin(kinds, (K_OP, K_NOTE)))
    inner = inner[(kinds[inner] != K_OP) | (ev.op_anc[inner] < 0)]  # outermost kernels
    scan.pending.append(
        (
            ids,
            ev.starts[procs],
            ends[procs],
            local[proc_anc[inner]],
            ev.mids[inner],
            ev.starts[inner],
            ends[inner],
            kinds[inner].astype(np.int64),
        )
    )


def _attribute_functions(
    pending: Iterable[_Pending], dispatched: Owners, index: PlaneIndex
) -> FunctionWork:
    """Function executions: time, kernels, Python frames, concurrency, per owner stage."""
    names = index.names
    fn_ps: dict[str, int] = defaultdict(int)
    fn_calls: dict[str, int] = defaultdict(int)
    fn_ops: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    fn_nodes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    fn_frames: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    fn_names: dict[str, set[str]] = defaultdict(set)
    udf_iv: dict[str, list[tuple[I64, I64]]] = defaultdict(list)
    work_iv: dict[str, list[tuple[I64, I64]]] = defaultdict(list)
    for ids, p_s, p_e, op_proc, op_mid, op_s, op_e, op_kind in pending:
        owners = dispatched.of(ids)
        for u in np.unique(owners[owners >= 0]).tolist():
            name = index.stage_list[u]
            mine = owners == u
            fn_ps[name] += int((p_e[mine] - p_s[mine]).sum())
            fn_calls[name] += int(mine.sum())
            work_iv[name].append((p_s[mine], p_e[mine]))
            sel_ops = mine[op_proc]
            if not sel_ops.any():
                continue
            om, od = op_mid[sel_ops], (op_e - op_s)[sel_ops]
            ok_kind = op_kind[sel_ops]
            uniq, inv = np.unique(om, return_inverse=True)
            sums = np.bincount(inv, weights=od).astype(np.int64)
            for mid, d in zip(uniq.tolist(), sums.tolist(), strict=True):
                ev = names[mid]
                t = index.op_types.get(mid)
                if t is not None:
                    fn_ops[name][t] += d
                    fn_nodes[name][ev.rsplit(":", 1)[0]] += d
                    continue
                if PY_EVENT_RE.match(ev):
                    fn_frames[name][ev] += d
                dn = DATASET_FN_RE.search(ev)
                if dn:
                    fn_names[name].add(dn.group(1))
            udf = (ok_kind == K_OP) & np.isin(om, index.udf_mids)
            if udf.any():
                udf_iv[name].append((op_s[sel_ops][udf], op_e[sel_ops][udf]))
    return FunctionWork(fn_ps, fn_calls, fn_ops, fn_nodes, fn_frames, fn_names, udf_iv, work_iv)
