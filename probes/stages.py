"""The tf.data iterator tree of one host: per-stage time, what AUTOTUNE chose, the bottleneck.

What the trace holds (TF 2.x host tracer, level 2):

* Every `GetNext` of an iterator is an event named after its path in the tree,
  `Iterator::Root::Prefetch::MapAndBatch::...`; repeated or interleaved inputs carry an
  instance index (`ForeverRepeat[3]::TFRecord`). Stats: `id`, `parent_id`, `name` (the
  dataset op, e.g. `fused(MapDataset:1,BatchDatasetV2:2)`) and the knobs AUTOTUNE set.
  We aggregate instances by their path with the indices removed: that is the user's stage.
* A synchronous stage calls its input inside its own event, on the same thread: its self
  time is its duration minus its children's events nested in it.
* An asynchronous stage (prefetch, parallel map, map-and-batch, parallel interleave, ...)
  hands work to runner threads (`tf_data_iterator_resource/*`, events `*Produce`), which
  call its input and dispatch its function (`FunctionRun`, stat `id`). The function runs
  as `ExecutorState::Process` (same `id`) on `tf_data_private_threadpool/*`, with the
  kernels it executes nested inside (`node_name:OpType`). On the consumer's side, the
  stage's own event is time spent waiting for its buffer: that is `wait`, not work.

So a stage's `self` is work: for a synchronous stage, its exclusive time on the calling
thread; for an asynchronous one, its runner overhead plus the functions it ran, wherever
they ran. A stage blocks its consumer when the consumer waits on it: the root always
does; a synchronous stage whenever its caller does; an asynchronous stage when its
consumer-side wait is a real share of the window (otherwise its buffer hides everything
below it). The bottleneck is the blocking stage with the most active time (the union of
its work intervals, so a parallel stage is not charged once per thread).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tftune.probes.trace import HostTrace, Line, Plane

I64 = npt.NDArray[np.int64]

ITERATOR_PREFIX = "Iterator::"
ROOT_NAME = "Iterator::Root"  # TF 2.7+; older versions name the root `Iterator::Model`
FUNCTION_RUN = "FunctionRun"
# Dispatch of a tf.data function (map fn, filter predicate, generator, ...): these carry the
# `id` stat that the function's `ExecutorState::Process` events repeat.
CAPTURED_FUNCTION_PREFIX = "InstantiatedCapturedFunction::"
EXECUTOR_PROCESS = "ExecutorState::Process"
PRODUCE_SUFFIX = "Produce"
TF_DATA_LINE_PREFIX = "tf_data"
# `[N]` instance indices that repeat/interleave/flat_map add to a child's path.
_INSTANCE_RE = re.compile(r"\[\d+\]")
# A kernel's event: `node_name:OpType` (no spaces after the colon; `A::B` are annotations).
_OP_EVENT_RE = re.compile(r"^[^:\s][^:]*:([A-Za-z][A-Za-z0-9_]*)$")
# Python tracer events: `$file.py:42 function`.
_PY_EVENT_RE = re.compile(r"^\$(?P<file>[^:]+\.py):(?P<line>\d+) (?P<fn>.+)$")
# Function names TF gives tf.data UDFs when it names them (`__inference_Dataset_map_fn_12`).
_DATASET_FN_RE = re.compile(r"__inference_Dataset_(?:map|filter|flat_map|interleave)_(.+?)_\d+")

# Stage kinds that decouple producer from consumer through a buffer and runner threads.
# Used together with a structural test (children that run off the stage's thread).
ASYNC_KINDS = frozenset(
    {
        "Prefetch",
        "ParallelMap",
        "ParallelMapV2",
        "MapAndBatch",
        "ParallelInterleave",
        "ParallelInterleaveV2",
        "ParallelInterleaveV3",
        "ParallelInterleaveV4",
        "LegacyParallelInterleave",
        "ParallelBatch",
        "ParallelFilter",
        "DataService",
        "PrivateThreadPool",
    }
)
# Fraction of a stage's child events that must run off the stage's own events before
# we call the stage asynchronous without knowing its kind.
ASYNC_OFF_THREAD_FRACTION = 0.5
# An asynchronous stage blocks its consumer when the consumer waits on it for at least
# this fraction of the analysis window (XProf's "moderately input-bound" band).
BLOCKING_MIN_WAIT_SHARE = 0.05
# Stats that carry what AUTOTUNE (or the user) chose.
KNOBS_INT = (
    "parallelism",
    "buffer_limit",
    "batch_size",
    "threadpool_size",
    "cpu_budget",
    "ram_budget_megabytes",
    "cycle_length",
    "block_length",
)


@dataclass(frozen=True, slots=True)
class Stage:
    """One tf.data stage (all instances of one iterator path), over the whole trace.

    Times are picoseconds summed over calls; `None` means not measured.
    """

    name: str
    kind: str
    parent: str | None
    depth: int
    id: str | None
    parent_id: str | None
    op: str | None
    types: str | None  # element dtypes the stage produces (the `types` stat)
    calls: int
    total_ps: int
    self_ps: int  # wall-clock time the stage itself was busy (async: union over threads)
    work_ps: int  # the same work summed over threads (CPU-like; > self_ps when parallel)
    active_ps: int
    wait_ps: int | None
    function_ps: int
    function_calls: int
    ops_ps: tuple[tuple[str, int], ...]
    op_nodes: tuple[str, ...]
    python_frames: tuple[str, ...]
    function_names: tuple[str, ...]
    udf_concurrency: float | None
    is_async: bool
    blocking: bool
    bottleneck: bool
    knobs: Mapping[str, Any] = field(default_factory=dict)
    capped_by: str | None = None

    @property
    def is_source(self) -> bool:
        return not self.kind.startswith(("Root",)) and self.function_calls == 0

    def knob(self, name: str) -> Any:
        return self.knobs.get(name)


@dataclass(frozen=True, slots=True)
class StageTree:
    """All stages of one host, parents before children (depth-first, by first seen)."""

    stages: tuple[Stage, ...]
    window_ps: int

    def by_name(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    def children(self, name: str) -> tuple[Stage, ...]:
        return tuple(s for s in self.stages if s.parent == name)

    @property
    def bottleneck(self) -> Stage | None:
        return next((s for s in self.stages if s.bottleneck), None)

    @property
    def root_knobs(self) -> Mapping[str, Any]:
        root = self.root
        return root.knobs if root is not None else {}

    @property
    def root(self) -> Stage | None:
        """The root iterator (the busiest one when several pipelines were iterated)."""
        roots = [s for s in self.stages if s.parent is None]
        return max(roots, key=lambda s: s.total_ps, default=None)


# -- helpers ----------------------------------------------------------------------------


def stage_name(event_name: str) -> str:
    """`Iterator::Root::Repeat[3]::TFRecord` -> `Iterator::Root::Repeat::TFRecord`."""
    return _INSTANCE_RE.sub("", event_name)


def stage_kind(name: str) -> str:
    return name.rsplit("::", 1)[-1]


def _parent_name(name: str) -> str | None:
    return name.rsplit("::", 1)[0] if name.count("::") > 1 else None


def is_function_dispatch(event_name: str) -> bool:
    return event_name == FUNCTION_RUN or event_name.startswith(CAPTURED_FUNCTION_PREFIX)


def op_type(event_name: str) -> str | None:
    """The kernel type of a `node:OpType` event, else None."""
    m = _OP_EVENT_RE.match(event_name)
    return m.group(1) if m else None


def nesting_parents(starts: I64, ends: I64) -> npt.NDArray[np.intp]:
    """For intervals on one thread, the index of the innermost enclosing one (-1: none).

    Events on one thread nest properly (TraceMe scopes), so a stack suffices.
    """
    n = int(starts.shape[0])
    parents = np.full(n, -1, dtype=np.intp)
    order = np.lexsort((-(ends - starts), starts))
    stack: list[int] = []
    s_list, e_list = starts.tolist(), ends.tolist()
    for i in order.tolist():
        s = s_list[i]
        while stack and e_list[stack[-1]] <= s:
            stack.pop()
        if stack and e_list[i] <= e_list[stack[-1]]:
            parents[i] = stack[-1]
        stack.append(i)
    return parents


_K_ITER, _K_FR, _K_PROC, _K_PRODUCE, _K_OP, _K_NOTE = 1, 2, 3, 4, 5, 6


def _nest(
    starts: I64, ends: I64, kinds: npt.NDArray[np.int8]
) -> tuple[I64, I64, I64, I64, I64, I64]:
    """Per event on one thread: parent, innermost iterator ancestor, outermost function
    execution ancestor, innermost kernel ancestor, outermost ancestor, and innermost
    function-dispatch ancestor (-1: none)."""
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
            it_a[i] = p if kp == _K_ITER else it_a[p]
            pr_a[i] = pr_a[p] if pr_a[p] >= 0 else (p if kp == _K_PROC else -1)
            op_a[i] = p if kp == _K_OP else op_a[p]
            fr_a[i] = p if kp == _K_FR else fr_a[p]
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


def union_of(chunks: Iterable[tuple[I64, I64]]) -> int:
    """Total length covered by the union of intervals given as (starts, ends) arrays."""
    parts = list(chunks)
    if not parts:
        return 0
    s = np.concatenate([p[0] for p in parts])
    e = np.concatenate([p[1] for p in parts])
    if not s.size:
        return 0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # A new run starts where an interval begins after everything before it has ended.
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    run_id = np.cumsum(new) - 1
    run_start = s[new]
    run_end = np.zeros(run_start.size, dtype=np.int64)
    np.maximum.at(run_end, run_id, e)
    return int((run_end - run_start).sum())


def union_ps(starts: Iterable[int], ends: Iterable[int]) -> int:
    pairs = sorted(zip(starts, ends, strict=True))
    total, cur_s, cur_e = 0, None, None
    for s, e in pairs:
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def _stat_id(plane: Plane, stat_ids: frozenset[int], line: Line, index: int) -> int | None:
    for stat in line.raw_stats(index):
        if stat.metadata_id in stat_ids:
            kind = stat.WhichOneof("value")
            return int(getattr(stat, kind)) if kind in ("int64_value", "uint64_value") else None
    return None


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, str)):
        text = value.decode() if isinstance(value, bytes) else value
        try:
            return int(text)
        except ValueError:
            return None
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (bytes, str)):
        text = (value.decode() if isinstance(value, bytes) else value).lower()
        if text in ("true", "1"):
            return True
        if text in ("false", "0"):
            return False
        return None
    if isinstance(value, int):
        return bool(value)
    return None


KNOB_EVENTS = 8  # latest events per stage read for knobs


def _knobs(stats: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in KNOBS_INT:
        if k in stats:
            v = _as_int(stats[k])
            if v is not None:
                out[k] = v
    if "autotune" in stats:
        out["autotune"] = _as_bool(stats["autotune"])
    if "deterministic" in stats:
        out["deterministic"] = _as_bool(stats["deterministic"])
    return out


# -- building ---------------------------------------------------------------------------


@dataclass
class _Acc:
    calls: int = 0
    total: int = 0
    self_ps: int = 0  # exclusive time of the stage's own events on their thread
    runner: int = 0  # exclusive runner-thread time (async stages)
    child_events: int = 0
    child_events_nested: int = 0
    function_ids: set[int] = field(default_factory=set)
    work_intervals: list[tuple[I64, I64]] = field(default_factory=list)
    first_seen: int = 0
    id: int | None = None
    parent_id: int | None = None
    op: str | None = None
    types: str | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    knob_time: int = -1
    inline_fn: int = 0  # functions a synchronous stage called and waited for
    inline_calls: int = 0


def build_stage_tree(host: HostTrace, window: tuple[int, int] | None = None) -> StageTree:
    """The stage tree of `host`, restricted to events that start inside `window` (ps)."""
    plane = host.host_plane
    if plane is None:
        return StageTree((), 0)
    lo, hi = window if window is not None else host.span_ps
    window_ps = max(0, hi - lo)
    iter_ids = plane.metadata_ids(lambda n: n.startswith(ITERATOR_PREFIX))
    if iter_ids.size == 0:
        return StageTree((), window_ps)
    names = plane.event_names
    stat_id_keys = frozenset(k for k, v in plane.stat_names.items() if v == "id")
    fr_ids = set(plane.metadata_ids(is_function_dispatch).tolist())
    proc_ids = set(plane.metadata_ids(lambda n: n == EXECUTOR_PROCESS).tolist())
    produce_ids = set(plane.metadata_ids(lambda n: n.endswith(PRODUCE_SUFFIX)).tolist())
    op_types = {mid: t for mid, n in names.items() if (t := op_type(n)) is not None}
    py_ids = {mid for mid, n in names.items() if n.startswith("$")}
    iter_set = set(iter_ids.tolist())
    stage_of_mid = {mid: stage_name(names[mid]) for mid in iter_set}
    udf_mids = np.array([m for m, t in op_types.items() if t in PY_UDF_OPS], dtype=np.int64)

    acc: dict[str, _Acc] = defaultdict(_Acc)
    stage_list = sorted(set(stage_of_mid.values()))
    stage_ix = {n: i for i, n in enumerate(stage_list)}
    parent_ix = np.array(
        [stage_ix.get(_parent_name(n) or "", -1) for n in stage_list] or [-1], dtype=np.int64
    )
    n_st = len(stage_list)
    max_mid = max(names) if names else 0
    kind_of = np.zeros(max_mid + 2, dtype=np.int8)
    stage_of = np.full(max_mid + 2, -1, dtype=np.int64)
    for mid in iter_set:
        kind_of[mid] = _K_ITER
        stage_of[mid] = stage_ix[stage_of_mid[mid]]
    for ids, k in ((fr_ids, _K_FR), (proc_ids, _K_PROC), (produce_ids, _K_PRODUCE)):
        for mid in ids:
            kind_of[mid] = k
    for mid in op_types:
        kind_of[mid] = _K_OP
    for mid in py_ids | {m for m, n in names.items() if _DATASET_FN_RE.search(n)}:
        kind_of[mid] = _K_NOTE
    calls = np.zeros(n_st, dtype=np.int64)
    total = np.zeros(n_st, dtype=np.int64)
    self_ps = np.zeros(n_st, dtype=np.int64)
    runner = np.zeros(n_st, dtype=np.int64)
    child_events = np.zeros(n_st, dtype=np.int64)
    child_nested = np.zeros(n_st, dtype=np.int64)
    first_start = np.full(n_st, np.iinfo(np.int64).max, dtype=np.int64)
    # The latest few events of each stage: TF writes a knob as "unavailable" when the iterator's
    # lock was busy at trace time (ParallelMap's parallelism, for one), so one event
    # may lack a knob that the one before it carries.
    last_events: dict[int, list[tuple[int, Line, int]]] = {}
    inline_fn = np.zeros(n_st, dtype=np.int64)
    inline_calls = np.zeros(n_st, dtype=np.int64)
    fr_owner: dict[int, int] = {}
    # Per line, what ran inside top-level function executions, resolved once every
    # FunctionRun (on runner threads) has named its owner stage.
    pending: list[tuple[list[int], I64, I64, I64, I64, I64, I64, I64]] = []

    for line in plane.lines:
        if not len(line):
            continue
        mids_all = line.metadata_id
        kinds_all = kind_of[np.clip(mids_all, 0, max_mid + 1)]
        s_all = line.start_ps
        sel = (kinds_all > 0) & (s_all >= lo) & (s_all < hi)
        idx = np.flatnonzero(sel)
        if not idx.size:
            continue
        kinds = kinds_all[idx]
        if not np.isin(kinds, (_K_ITER, _K_FR, _K_PROC)).any():
            continue
        mids = mids_all[idx]
        starts = s_all[idx]
        durs = line.duration_ps[idx]
        ends = starts + durs
        parents, iter_anc, proc_anc, op_anc, top, fr_anc = _nest(starts, ends, kinds)
        n = int(idx.size)
        has_parent = parents >= 0
        pk = np.where(has_parent, kinds[np.maximum(parents, 0)], 0)
        m = (kinds == _K_ITER) & has_parent
        nested_iter = np.bincount(parents[m], weights=durs[m], minlength=n).astype(np.int64)
        m = (kinds == _K_PROC) & has_parent & (pk != _K_PROC)
        nested_proc = np.bincount(parents[m], weights=durs[m], minlength=n).astype(np.int64)

        ii = np.flatnonzero(kinds == _K_ITER)
        runner_owner: dict[int, int] = {}
        if ii.size:
            st = stage_of[mids[ii]]
            np.add.at(calls, st, 1)
            np.add.at(total, st, durs[ii])
            np.add.at(self_ps, st, np.maximum(0, durs[ii] - nested_iter[ii]))
            np.minimum.at(first_start, st, starts[ii])
            pst = parent_ix[st]
            has = pst >= 0
            np.add.at(child_events, pst[has], 1)
            anc = iter_anc[ii]
            anc_stage = np.where(anc >= 0, stage_of[mids[np.maximum(anc, 0)]], -2)
            ok = has & (anc_stage == pst)
            np.add.at(child_nested, pst[ok], 1)
            for u in np.unique(st).tolist():
                k = ii[st == u]
                latest = k[np.argsort(starts[k])[-KNOB_EVENTS:]]
                found = last_events.setdefault(u, [])
                found += [(int(starts[j]), line, int(idx[j])) for j in latest.tolist()]
                found.sort(key=lambda t: t[0], reverse=True)
                del found[KNOB_EVENTS:]
            # Runner threads: a top-level event that calls a stage's input belongs to the
            # stage whose input it calls.
            tops = top[ii]
            cand = (tops != ii) & (kinds[tops] != _K_ITER) & has & (anc < 0)
            runner_owner = dict(zip(tops[cand].tolist(), pst[cand].tolist(), strict=True))
        line_default = next(iter(runner_owner.values()), -1)

        for j in np.flatnonzero(kinds == _K_FR).tolist():
            fid = _stat_id(plane, stat_id_keys, line, int(idx[j]))
            a_j = int(iter_anc[j])
            if a_j >= 0:
                owner = int(stage_of[int(mids[a_j])])
                if fr_anc[j] < 0:  # a synchronous call: the stage waits for it right here
                    inline_fn[owner] += int(durs[j])
                    inline_calls[owner] += 1
            else:
                owner = runner_owner.get(int(top[j]), line_default)
            if owner >= 0 and fid is not None:
                fr_owner[fid] = owner

        pi = np.flatnonzero((kinds == _K_PRODUCE) & ~has_parent)
        for j in pi.tolist():
            owner = runner_owner.get(j, line_default)
            if owner >= 0:
                runner[owner] += max(0, int(durs[j] - nested_iter[j] - nested_proc[j]))

        procs = np.flatnonzero((kinds == _K_PROC) & (proc_anc < 0))
        if not procs.size:
            continue
        fids = [_stat_id(plane, stat_id_keys, line, int(idx[j])) or -1 for j in procs.tolist()]
        local = np.full(n, -1, dtype=np.int64)
        local[procs] = np.arange(procs.size)
        inner = np.flatnonzero((proc_anc >= 0) & np.isin(kinds, (_K_OP, _K_NOTE)))
        inner = inner[(kinds[inner] != _K_OP) | (op_anc[inner] < 0)]  # outermost kernels
        pending.append(
            (
                fids,
                starts[procs],
                ends[procs],
                local[proc_anc[inner]],
                mids[inner],
                starts[inner],
                ends[inner],
                kinds[inner].astype(np.int64),
            )
        )

    # Function executions: time, kernels, Python frames, concurrency, per owner stage.
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
            name = stage_list[u]
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
                t = op_types.get(mid)
                if t is not None:
                    fn_ops[name][t] += d
                    fn_nodes[name][ev.rsplit(":", 1)[0]] += d
                    continue
                if _PY_EVENT_RE.match(ev):
                    fn_frames[name][ev] += d
                dn = _DATASET_FN_RE.search(ev)
                if dn:
                    fn_names[name].add(dn.group(1))
            udf = (ok_kind == _K_OP) & np.isin(om, udf_mids)
            if udf.any():
                udf_iv[name].append((op_s[sel_ops][udf], op_e[sel_ops][udf]))

    for name in stage_list:
        u = stage_ix[name]
        a = acc[name]
        a.calls, a.total, a.self_ps = int(calls[u]), int(total[u]), int(self_ps[u])
        a.runner = int(runner[u])
        a.child_events, a.child_events_nested = int(child_events[u]), int(child_nested[u])
        a.first_seen = int(first_start[u])
        if u in last_events:
            newest: dict[str, Any] = {}
            knobs: dict[str, Any] = {}
            for _, ln, raw in last_events[u]:  # newest first
                event_stats = plane.event_stats(ln, raw)
                for key, value in _knobs(event_stats).items():
                    knobs.setdefault(key, value)
                for key, value in event_stats.items():
                    newest.setdefault(key, value)
            stats = newest
            a.knobs = knobs
            a.id = _as_int(stats.get("id"))
            a.parent_id = _as_int(stats.get("parent_id"))
            op = stats.get("name")
            a.op = op.decode() if isinstance(op, bytes) else op
            ty = stats.get("types")
            a.types = ty.decode() if isinstance(ty, bytes) else ty
        if work_iv.get(name):
            a.work_intervals = work_iv[name]
        a.inline_fn, a.inline_calls = int(inline_fn[u]), int(inline_calls[u])

    # Assemble, parents before children.
    all_names = set(acc)
    for name in list(all_names):
        p = _parent_name(name)
        while p is not None and p not in all_names:
            all_names.add(p)
            p = _parent_name(p)
    is_async: dict[str, bool] = {}
    for name in all_names:
        a = acc[name]
        structural = (
            a.child_events > 0
            and a.child_events_nested / a.child_events < ASYNC_OFF_THREAD_FRACTION
        )
        is_async[name] = stage_kind(name) in ASYNC_KINDS or structural

    def work_ps(name: str) -> int:
        a = acc[name]
        if is_async[name]:
            return a.runner + fn_ps.get(name, 0)
        return a.self_ps

    def wait_ps(name: str) -> int | None:
        return acc[name].self_ps if is_async[name] else None

    blocking: dict[str, bool] = {}
    ordered = sorted(all_names, key=lambda n: (n.count("::"), acc[n].first_seen, n))
    for name in ordered:
        parent = _parent_name(name)
        if parent is None:
            blocking[name] = True
            continue
        if not blocking.get(parent, False):
            blocking[name] = False
        elif is_async[parent]:
            w = wait_ps(parent) or 0
            blocking[name] = window_ps > 0 and w >= BLOCKING_MIN_WAIT_SHARE * window_ps
        else:
            blocking[name] = True
    # An async stage's own work blocks only when its consumer waits on it.
    for name in ordered:
        if is_async[name] and blocking.get(name):
            w = wait_ps(name) or 0
            blocking[name] = window_ps > 0 and w >= BLOCKING_MIN_WAIT_SHARE * window_ps

    def active(name: str) -> int:
        a = acc[name]
        if is_async[name]:
            return a.runner + union_of(a.work_intervals)
        return a.self_ps

    roots = [n for n in ordered if _parent_name(n) is None]
    main_root = max(roots, key=lambda n: acc[n].total, default=None)
    root_knobs = acc[main_root].knobs if main_root is not None else {}
    candidates = [n for n in ordered if blocking.get(n) and _parent_name(n) is not None]
    bottleneck = max(candidates, key=active, default=None)
    if bottleneck is not None and active(bottleneck) <= 0:
        bottleneck = None

    stages = []
    for name in _depth_first(ordered):
        a = acc[name]
        knobs = dict(a.knobs)
        for knob in ("threadpool_size", "cpu_budget", "ram_budget_megabytes"):
            if knob not in knobs and knob in root_knobs:
                knobs[knob] = root_knobs[knob]
        iv = udf_iv.get(name, [])
        n_udf = sum(int(s.size) for s, _ in iv)
        busy = sum(int((e - s).sum()) for s, e in iv)
        conc = busy / union_of(iv) if n_udf > 1 and union_of(iv) > 0 else None
        stages.append(
            Stage(
                name=name,
                kind=stage_kind(name),
                parent=_parent_name(name),
                depth=name.count("::") - 1,
                id=str(a.id) if a.id is not None else None,
                parent_id=str(a.parent_id) if a.parent_id is not None else None,
                op=a.op,
                types=a.types,
                calls=a.calls,
                total_ps=a.total,
                self_ps=active(name),
                work_ps=work_ps(name),
                active_ps=active(name),
                wait_ps=wait_ps(name),
                function_ps=(
                    a.inline_fn if a.inline_calls and not is_async[name] else fn_ps.get(name, 0)
                ),
                function_calls=(
                    a.inline_calls
                    if a.inline_calls and not is_async[name]
                    else fn_calls.get(name, 0)
                ),
                ops_ps=tuple(sorted(fn_ops[name].items(), key=lambda kv: -kv[1])),
                op_nodes=tuple(
                    n for n, _ in sorted(fn_nodes[name].items(), key=lambda kv: -kv[1])[:8]
                ),
                python_frames=tuple(
                    f for f, _ in sorted(fn_frames[name].items(), key=lambda kv: -kv[1])[:8]
                ),
                function_names=tuple(sorted(fn_names.get(name, set()))),
                udf_concurrency=round(conc, 3) if conc is not None else None,
                is_async=is_async[name],
                blocking=bool(blocking.get(name)),
                bottleneck=name == bottleneck,
                knobs=knobs,
                capped_by=_capped_by(knobs),
            )
        )
    return StageTree(tuple(stages), window_ps)


# Python UDF kernels: `tf.py_function` (EagerPyFunc), `tf.numpy_function` / legacy
# `tf.py_func` (PyFunc, PyFuncStateless). `from_generator` runs its generator through them.
PY_UDF_OPS = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless"})


def _capped_by(knobs: Mapping[str, Any]) -> str | None:
    """Why a stage's parallelism cannot rise: the threadpool size or the core count."""
    par = knobs.get("parallelism")
    if not isinstance(par, int) or par <= 1:
        return None
    pool, cores = knobs.get("threadpool_size"), knobs.get("cpu_budget")
    if isinstance(pool, int) and par >= pool:
        return "threadpool_size"
    if isinstance(cores, int) and par >= cores:
        return "cores"
    return None


def _depth_first(names: Iterable[str]) -> list[str]:
    ordered = list(names)
    children: dict[str | None, list[str]] = defaultdict(list)
    for n in ordered:
        children[_parent_name(n)].append(n)
    out: list[str] = []

    def visit(n: str) -> None:
        out.append(n)
        for c in children.get(n, []):
            visit(c)

    for r in children.get(None, []):
        visit(r)
    return out
