"""One pass over a host plane's lines: the per-stage sums `probes.stages` builds its tree from.

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

from tftune.probes.stage_events import (
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
from tftune.probes.trace import Line, Plane


def nest(
    starts: I64, ends: I64, kinds: npt.NDArray[np.int8]
) -> tuple[I64, I64, I64, I64, I64, I64]:
    """Per event on one thread: parent, innermost iterator ancestor, outermost function
    execution ancestor, innermost kernel ancestor, outermost ancestor, and innermost
    function-dispatch ancestor (-1: none).

    Events on one thread nest properly (TraceMe scopes), so a stack suffices.
    """
    n = int(starts.shape[0])
    order = np.lexsort((-(ends - starts), starts)).tolist()
    s_l, e_l, k_l = starts.tolist(), ends.tolist(), kinds.tolist()
    parent, it_a, pr_a, op_a, fr_a = [-1] * n, [-1] * n, [-1] * n, [-1] * n, [-1] * n
    top = list(range(n))
    stack: list[int] = []
    for i in order:
        s = s_l[i]
        while stack and e_l[stack[-1]] <= s:
            stack.pop()
        if stack and e_l[i] <= e_l[stack[-1]]:
            p = stack[-1]
            kp = k_l[p]
            parent[i] = p
            it_a[i] = p if kp == K_ITER else it_a[p]
            pr_a[i] = pr_a[p] if pr_a[p] >= 0 else (p if kp == K_PROC else -1)
            op_a[i] = p if kp == K_OP else op_a[p]
            fr_a[i] = p if kp == K_FR else fr_a[p]
            top[i] = top[p]
        stack.append(i)
    return (
        np.asarray(parent, dtype=np.int64),
        np.asarray(it_a, dtype=np.int64),
        np.asarray(pr_a, dtype=np.int64),
        np.asarray(op_a, dtype=np.int64),
        np.asarray(top, dtype=np.int64),
        np.asarray(fr_a, dtype=np.int64),
    )


def _stat_id(stat_ids: frozenset[int], line: Line, index: int) -> int | None:
    for stat in line.raw_stats(index):
        if stat.metadata_id in stat_ids:
            kind = stat.WhichOneof("value")
            return int(getattr(stat, kind)) if kind in ("int64_value", "uint64_value") else None
    return None


# -- one pass over the lines ------------------------------------------------------------

# Per line, what ran inside top-level function executions: dispatch ids, execution
# starts and ends, then per inner event: its execution (local index), metadata id, start,
# end and kind.
_Pending = tuple[list[int], I64, I64, I64, I64, I64, I64, I64]


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
    fr_owner: dict[int, int] = field(default_factory=dict)
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

    idx: npt.NDArray[np.intp]  # their indices in the line
    kinds: npt.NDArray[np.int8]
    mids: I64
    starts: I64
    durs: I64
    ends: I64
    parents: I64
    iter_anc: I64
    proc_anc: I64
    op_anc: I64
    top: I64
    fr_anc: I64
    nested_iter: I64  # time of iterator events nested directly in each event
    nested_proc: I64  # time of outermost executions nested directly in each event

    @property
    def n(self) -> int:
        return int(self.idx.size)


def scan_plane(plane: Plane, index: PlaneIndex, lo: int, hi: int) -> StageEvents:
    """Every line of `plane`, events starting in [lo, hi), summed per stage."""
    scan = _Scan.empty(len(index.stage_list))
    for line in plane.lines:
        ev = _line_events(line, index, lo, hi)
        if ev is None:
            continue
        runner_owner = _count_iterators(ev, line, index, scan)
        line_default = next(iter(runner_owner.values()), -1)
        _own_function_runs(ev, line, index, scan, runner_owner, line_default)
        _count_runner_time(ev, scan, runner_owner, line_default)
        _collect_executions(ev, line, index, scan)
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
        functions=_attribute_functions(scan.pending, scan.fr_owner, index),
    )


def _line_events(line: Line, index: PlaneIndex, lo: int, hi: int) -> _LineEvents | None:
    """The line's events of a known kind in the window, nested; None when it has no
    iterator, dispatch or execution event there."""
    if not len(line):
        return None
    mids_all = line.metadata_id
    kinds_all = index.kind_of[np.clip(mids_all, 0, index.max_mid + 1)]
    s_all = line.start_ps
    idx = np.flatnonzero((kinds_all > 0) & (s_all >= lo) & (s_all < hi))
    if not idx.size:
        return None
    kinds = kinds_all[idx]
    if not np.isin(kinds, (K_ITER, K_FR, K_PROC)).any():
        return None
    starts = s_all[idx]
    durs = line.duration_ps[idx]
    ends = starts + durs
    parents, iter_anc, proc_anc, op_anc, top, fr_anc = nest(starts, ends, kinds)
    n = int(idx.size)
    has_parent = parents >= 0
    pk = np.where(has_parent, kinds[np.maximum(parents, 0)], 0)
    m = (kinds == K_ITER) & has_parent
    nested_iter = np.bincount(parents[m], weights=durs[m], minlength=n).astype(np.int64)
    m = (kinds == K_PROC) & has_parent & (pk != K_PROC)
    nested_proc = np.bincount(parents[m], weights=durs[m], minlength=n).astype(np.int64)
    return _LineEvents(
        idx=idx,
        kinds=kinds,
        mids=mids_all[idx],
        starts=starts,
        durs=durs,
        ends=ends,
        parents=parents,
        iter_anc=iter_anc,
        proc_anc=proc_anc,
        op_anc=op_anc,
        top=top,
        fr_anc=fr_anc,
        nested_iter=nested_iter,
        nested_proc=nested_proc,
    )


def _count_iterators(ev: _LineEvents, line: Line, index: PlaneIndex, scan: _Scan) -> dict[int, int]:
    """Sum the line's iterator events into their stages; return which stage each runner
    thread's top-level event works for (event index -> stage index)."""
    ii = np.flatnonzero(ev.kinds == K_ITER)
    if not ii.size:
        return {}
    starts = ev.starts
    st = index.stage_of[ev.mids[ii]]
    np.add.at(scan.calls, st, 1)
    np.add.at(scan.total, st, ev.durs[ii])
    np.add.at(scan.self_ps, st, np.maximum(0, ev.durs[ii] - ev.nested_iter[ii]))
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
    return dict(zip(tops[cand].tolist(), pst[cand].tolist(), strict=True))


def _own_function_runs(
    ev: _LineEvents,
    line: Line,
    index: PlaneIndex,
    scan: _Scan,
    runner_owner: Mapping[int, int],
    line_default: int,
) -> None:
    """Name the owner stage of each function dispatch (by its `id` stat); a synchronous
    stage's own calls count as time it waited for its function."""
    for j in np.flatnonzero(ev.kinds == K_FR).tolist():
        fid = _stat_id(index.stat_id_keys, line, int(ev.idx[j]))
        a_j = int(ev.iter_anc[j])
        if a_j >= 0:
            owner = int(index.stage_of[int(ev.mids[a_j])])
            if ev.fr_anc[j] < 0:  # a synchronous call: the stage waits for it right here
                scan.inline_fn[owner] += int(ev.durs[j])
                scan.inline_calls[owner] += 1
        else:
            owner = runner_owner.get(int(ev.top[j]), line_default)
        if owner >= 0 and fid is not None:
            scan.fr_owner[fid] = owner


def _count_runner_time(
    ev: _LineEvents, scan: _Scan, runner_owner: Mapping[int, int], line_default: int
) -> None:
    """A runner thread's `*Produce` time outside iterators and executions: overhead."""
    for j in np.flatnonzero((ev.kinds == K_PRODUCE) & (ev.parents < 0)).tolist():
        owner = runner_owner.get(j, line_default)
        if owner >= 0:
            scan.runner[owner] += max(0, int(ev.durs[j] - ev.nested_iter[j] - ev.nested_proc[j]))


def _collect_executions(ev: _LineEvents, line: Line, index: PlaneIndex, scan: _Scan) -> None:
    """Keep the line's outermost function executions and what ran inside them, resolved
    once every dispatch (on runner threads) has named its owner stage."""
    kinds, proc_anc = ev.kinds, ev.proc_anc
    procs = np.flatnonzero((kinds == K_PROC) & (proc_anc < 0))
    if not procs.size:
        return
    fids = [_stat_id(index.stat_id_keys, line, int(ev.idx[j])) or -1 for j in procs.tolist()]
    local = np.full(ev.n, -1, dtype=np.int64)
    local[procs] = np.arange(procs.size)
    inner = np.flatnonzero((proc_anc >= 0) & np.isin(kinds, (K_OP, K_NOTE)))
    inner = inner[(kinds[inner] != K_OP) | (ev.op_anc[inner] < 0)]  # outermost kernels
    scan.pending.append(
        (
            fids,
            ev.starts[procs],
            ev.ends[procs],
            local[proc_anc[inner]],
            ev.mids[inner],
            ev.starts[inner],
            ev.ends[inner],
            kinds[inner].astype(np.int64),
        )
    )


def _attribute_functions(
    pending: Iterable[_Pending], fr_owner: Mapping[int, int], index: PlaneIndex
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
    for fids, p_s, p_e, op_proc, op_mid, op_s, op_e, op_kind in pending:
        owners = np.array([fr_owner.get(f, -1) for f in fids], dtype=np.int64)
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
