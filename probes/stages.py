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
ROOT_NAME = "Iterator::Root"
FUNCTION_RUN = "FunctionRun"
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
    self_ps: int
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
        root = self.by_name(ROOT_NAME)
        return root.knobs if root is not None else {}


# -- helpers ----------------------------------------------------------------------------


def stage_name(event_name: str) -> str:
    """`Iterator::Root::Repeat[3]::TFRecord` -> `Iterator::Root::Repeat::TFRecord`."""
    return _INSTANCE_RE.sub("", event_name)


def stage_kind(name: str) -> str:
    return name.rsplit("::", 1)[-1]


def _parent_name(name: str) -> str | None:
    return name.rsplit("::", 1)[0] if name.count("::") > 1 else None


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
    work_intervals: list[tuple[int, int]] = field(default_factory=list)
    first_seen: int = 0
    id: int | None = None
    parent_id: int | None = None
    op: str | None = None
    types: str | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    knob_time: int = -1


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
    fr_ids = set(plane.metadata_ids(lambda n: n == FUNCTION_RUN).tolist())
    proc_ids = set(plane.metadata_ids(lambda n: n == EXECUTOR_PROCESS).tolist())
    produce_ids = set(plane.metadata_ids(lambda n: n.endswith(PRODUCE_SUFFIX)).tolist())
    op_types = {mid: t for mid, n in names.items() if (t := op_type(n)) is not None}
    py_ids = {mid for mid, n in names.items() if n.startswith("$")}
    iter_set = set(iter_ids.tolist())
    stage_of_mid = {mid: stage_name(names[mid]) for mid in iter_set}

    acc: dict[str, _Acc] = defaultdict(_Acc)
    # Function executions (ExecutorState::Process) by function-run id, with their line.
    processes: dict[int, list[tuple[Line, int]]] = defaultdict(list)
    fr_owner: dict[int, str] = {}
    seen_order = 0

    for line in plane.lines:
        if not len(line):
            continue
        mids = line.metadata_id
        s_all, e_all = line.start_ps, line.start_ps + line.duration_ps
        interesting = np.isin(mids, iter_ids) | np.isin(
            mids, np.fromiter(fr_ids | proc_ids | produce_ids, dtype=np.int64)
        )
        in_window = (s_all >= lo) & (s_all < hi)
        idx = np.flatnonzero(interesting & in_window)
        if not idx.size:
            continue
        starts, ends = s_all[idx], e_all[idx]
        parents = nesting_parents(starts, ends)
        kinds_mid = mids[idx].tolist()
        durs = (ends - starts).tolist()
        nested_iter_ps = [0] * len(idx)  # direct child iterator calls
        nested_proc_ps = [0] * len(idx)  # function executions run inline
        for j, p in enumerate(parents.tolist()):
            if p >= 0 and kinds_mid[j] in iter_set:
                nested_iter_ps[p] += durs[j]
            elif p >= 0 and kinds_mid[j] in proc_ids and kinds_mid[p] not in proc_ids:
                nested_proc_ps[p] += durs[j]

        def owner_iter(
            j: int, parents: npt.NDArray[np.intp] = parents, kinds_mid: list[int] = kinds_mid
        ) -> int:
            """Innermost enclosing iterator event of event j (-1: none)."""
            p = int(parents[j])
            while p >= 0 and kinds_mid[p] not in iter_set:
                p = int(parents[p])
            return p

        # Which stage owns this line's top-level (runner) events: the parent stage of the
        # iterator events they call.
        runner_owner: dict[int, str] = {}
        for j, mid in enumerate(kinds_mid):
            if mid in iter_set:
                top = j
                while parents[top] >= 0:
                    top = int(parents[top])
                if top != j and kinds_mid[top] not in iter_set and top not in runner_owner:
                    parent_stage = _parent_name(stage_of_mid[mid])
                    if parent_stage is not None:
                        runner_owner[top] = parent_stage

        line_default_owner = next(iter(runner_owner.values()), None)
        for j, mid in enumerate(kinds_mid):
            if mid in iter_set:
                name = stage_of_mid[mid]
                a = acc[name]
                if not a.calls:
                    a.first_seen = seen_order
                    seen_order += 1
                a.calls += 1
                a.total += durs[j]
                a.self_ps += max(0, durs[j] - nested_iter_ps[j])
                p = owner_iter(j)
                parent_stage = _parent_name(name)
                if parent_stage is not None:
                    pa = acc[parent_stage]
                    pa.child_events += 1
                    if p >= 0 and stage_of_mid[kinds_mid[p]] == parent_stage:
                        pa.child_events_nested += 1
                if int(starts[j]) > a.knob_time:
                    a.knob_time = int(starts[j])
                    stats = plane.event_stats(line, int(idx[j]))
                    a.knobs = _knobs(stats)
                    a.id = _as_int(stats.get("id"))
                    a.parent_id = _as_int(stats.get("parent_id"))
                    op = stats.get("name")
                    a.op = op.decode() if isinstance(op, bytes) else op
                    ty = stats.get("types")
                    a.types = ty.decode() if isinstance(ty, bytes) else ty
            elif mid in fr_ids:
                fid = _stat_id(plane, stat_id_keys, line, int(idx[j]))
                p = owner_iter(j)
                if p >= 0:
                    owner: str | None = stage_of_mid[kinds_mid[p]]
                else:
                    top = j
                    while parents[top] >= 0:
                        top = int(parents[top])
                    owner = runner_owner.get(top, line_default_owner)
                if owner is not None and fid is not None:
                    fr_owner[fid] = owner
                    acc[owner].function_ids.add(fid)
            elif mid in proc_ids:
                pid = _stat_id(plane, stat_id_keys, line, int(idx[j]))
                outer = int(parents[j])
                if pid is not None and (outer < 0 or kinds_mid[outer] not in proc_ids):
                    processes[pid].append((line, int(idx[j])))
            elif mid in produce_ids and parents[j] < 0:
                owner = runner_owner.get(j, line_default_owner)
                if owner is not None:
                    a = acc[owner]
                    a.runner += max(0, durs[j] - nested_iter_ps[j] - nested_proc_ps[j])

    # Function executions: time, kernels, Python frames, concurrency, per owner stage.
    fn_ps: dict[str, int] = defaultdict(int)
    fn_calls: dict[str, int] = defaultdict(int)
    fn_ops: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    fn_nodes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    fn_frames: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    fn_names: dict[str, set[str]] = defaultdict(set)
    udf_iv: dict[str, list[tuple[int, int]]] = defaultdict(list)
    by_line: dict[int, list[tuple[str, int]]] = defaultdict(list)
    line_of: dict[int, Line] = {}
    for fid, runs in processes.items():
        owner = fr_owner.get(fid)
        if owner is None:
            continue
        for line, i in runs:
            by_line[line.id].append((owner, i))
            line_of[line.id] = line
    for line_id, items in by_line.items():
        line = line_of[line_id]
        order = np.argsort(line.start_ps, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        s_all = line.start_ps[order]
        e_all = s_all + line.duration_ps[order]
        mids = line.metadata_id[order]
        for owner, raw_i in items:
            i = int(rank[raw_i])
            s, e = int(s_all[i]), int(e_all[i])
            fn_ps[owner] += e - s
            fn_calls[owner] += 1
            acc[owner].work_intervals.append((s, e))
            lo_i = int(np.searchsorted(s_all, s, side="left"))
            hi_i = int(np.searchsorted(s_all, e, side="left"))
            inner = np.arange(lo_i, hi_i)
            inner = inner[(e_all[inner] <= e) & (inner != i)]
            covered_until = -1
            for k in inner.tolist():
                mid = int(mids[k])
                t = op_types.get(mid)
                if t is not None and int(s_all[k]) >= covered_until:
                    d = int(e_all[k] - s_all[k])
                    fn_ops[owner][t] += d
                    node = names[mid].rsplit(":", 1)[0]
                    fn_nodes[owner][node] += d
                    covered_until = int(e_all[k])
                    if t in PY_UDF_OPS:
                        udf_iv[owner].append((int(s_all[k]), int(e_all[k])))
                elif mid in py_ids:
                    m = _PY_EVENT_RE.match(names[mid])
                    if m:
                        fn_frames[owner][names[mid]] += int(e_all[k] - s_all[k])
                dn = _DATASET_FN_RE.search(names[mid])
                if dn:
                    fn_names[owner].add(dn.group(1))

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
            fn = union_ps([s for s, _ in a.work_intervals], [e for _, e in a.work_intervals])
            return a.runner + fn
        return a.self_ps

    root_knobs = acc[ROOT_NAME].knobs if ROOT_NAME in acc else {}
    candidates = [n for n in ordered if blocking.get(n) and n != ROOT_NAME]
    bottleneck = max(candidates, key=active, default=None)
    if bottleneck is not None and active(bottleneck) <= 0:
        bottleneck = None

    stages = []
    for name in _depth_first(ordered):
        a = acc[name]
        knobs = dict(a.knobs)
        for k in ("threadpool_size", "cpu_budget", "ram_budget_megabytes"):
            if k not in knobs and k in root_knobs:
                knobs[k] = root_knobs[k]
        iv = udf_iv.get(name, [])
        conc = (
            sum(e - s for s, e in iv) / union_ps([s for s, _ in iv], [e for _, e in iv])
            if len(iv) > 1
            else None
        )
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
                self_ps=work_ps(name),
                active_ps=active(name),
                wait_ps=wait_ps(name),
                function_ps=fn_ps.get(name, 0),
                function_calls=fn_calls.get(name, 0),
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
