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

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tftune.core.vocabulary import (
    MODERATELY_INPUT_BOUND,
    STAGE_SEPARATOR,
    stage_kind,
    stage_parent,
)
from tftune.probes.traces.intervals import concat, union_ps
from tftune.probes.traces.stage_events import I64, PlaneIndex, as_int, index_plane, knobs_of
from tftune.probes.traces.stage_scan import FunctionWork, StageEvents, scan_plane
from tftune.probes.traces.trace import HostTrace, Plane

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
# this fraction of the analysis window (the "moderately input-bound" band).
BLOCKING_MIN_WAIT_SHARE = MODERATELY_INPUT_BOUND
# Knobs a stage inherits from the root when its own events do not carry them.
ROOT_KNOBS = ("threadpool_size", "cpu_budget", "ram_budget_megabytes")


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


# -- building ---------------------------------------------------------------------------


@dataclass
class _Acc:
    """One stage's sums and latest stats, gathered from the scan."""

    calls: int = 0
    total: int = 0
    self_ps: int = 0  # exclusive time of the stage's own events on their thread
    runner: int = 0  # exclusive runner-thread time (async stages)
    child_events: int = 0
    child_events_nested: int = 0
    first_seen: int = 0
    id: int | None = None
    parent_id: int | None = None
    op: str | None = None
    types: str | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    inline_fn: int = 0  # functions a synchronous stage called and waited for
    inline_calls: int = 0


def build_stage_tree(host: HostTrace, window: tuple[int, int] | None = None) -> StageTree:
    """The stage tree of `host`, restricted to events that start inside `window` (ps)."""
    plane = host.host_plane
    if plane is None:
        return StageTree((), 0)
    lo, hi = window if window is not None else host.span_ps
    window_ps = max(0, hi - lo)
    index = index_plane(plane)
    if index is None:
        return StageTree((), window_ps)
    events = scan_plane(plane, index, lo, hi)
    shape = _Shape.of(_accumulate(plane, index, events), events.functions, window_ps)
    root_knobs = shape.main_root_knobs()
    bottleneck = shape.bottleneck()
    stages = tuple(
        _stage(name, shape, events.functions, root_knobs, name == bottleneck)
        for name in _depth_first(shape.ordered)
    )
    return StageTree(stages, window_ps)


def _accumulate(plane: Plane, index: PlaneIndex, events: StageEvents) -> dict[str, _Acc]:
    """Each stage's sums, then its knobs and identity from its latest events."""
    acc: dict[str, _Acc] = defaultdict(_Acc)
    for name in index.stage_list:
        u = index.stage_ix[name]
        a = acc[name]
        a.calls = int(events.calls[u])
        a.total = int(events.total[u])
        a.self_ps = int(events.self_ps[u])
        a.runner = int(events.runner[u])
        a.child_events = int(events.child_events[u])
        a.child_events_nested = int(events.child_nested[u])
        a.first_seen = int(events.first_start[u])
        if u in events.last_events:
            _read_latest(plane, events.last_events[u], a)
        a.inline_fn = int(events.inline_fn[u])
        a.inline_calls = int(events.inline_calls[u])
    return acc


def _read_latest(plane: Plane, latest: Iterable[tuple[int, Any, int]], a: _Acc) -> None:
    """Knobs, ids, dataset op and element types from a stage's latest events (newest
    first): each knob from the newest event that carries it."""
    newest: dict[str, Any] = {}
    knobs: dict[str, Any] = {}
    for _, ln, raw in latest:
        event_stats = plane.event_stats(ln, raw)
        for key, value in knobs_of(event_stats).items():
            knobs.setdefault(key, value)
        for key, value in event_stats.items():
            newest.setdefault(key, value)
    a.knobs = knobs
    a.id = as_int(newest.get("id"))
    a.parent_id = as_int(newest.get("parent_id"))
    op = newest.get("name")
    a.op = op.decode() if isinstance(op, bytes) else op
    ty = newest.get("types")
    a.types = ty.decode() if isinstance(ty, bytes) else ty


@dataclass(frozen=True, slots=True, eq=False)
class _Shape:
    """The tree's stages (missing parents added), which are asynchronous, which block."""

    acc: Mapping[str, _Acc]
    fn_ps: Mapping[str, int]
    work_intervals: Mapping[str, list[tuple[I64, I64]]]
    is_async: Mapping[str, bool]
    blocking: Mapping[str, bool]
    ordered: list[str]  # by depth, then first seen

    @classmethod
    def of(cls, acc: dict[str, _Acc], fns: FunctionWork, window_ps: int) -> _Shape:
        all_names = set(acc)
        for name in list(all_names):
            p = stage_parent(name)
            while p is not None and p not in all_names:
                all_names.add(p)
                p = stage_parent(p)
        is_async: dict[str, bool] = {}
        for name in all_names:
            a = acc[name]  # a parent seen only through its children gets empty sums
            structural = (
                a.child_events > 0
                and a.child_events_nested / a.child_events < ASYNC_OFF_THREAD_FRACTION
            )
            is_async[name] = stage_kind(name) in ASYNC_KINDS or structural
        ordered = sorted(all_names, key=lambda n: (n.count(STAGE_SEPARATOR), acc[n].first_seen, n))
        blocking = _blocking(ordered, is_async, acc, window_ps)
        return cls(acc, fns.ps, fns.work_intervals, is_async, blocking, ordered)

    def work_ps(self, name: str) -> int:
        a = self.acc[name]
        if self.is_async[name]:
            return a.runner + self.fn_ps.get(name, 0)
        return a.self_ps

    def wait_ps(self, name: str) -> int | None:
        return self.acc[name].self_ps if self.is_async[name] else None

    def active(self, name: str) -> int:
        a = self.acc[name]
        if self.is_async[name]:
            return int(a.runner + union_ps(*concat(self.work_intervals.get(name, []))))
        return a.self_ps

    def main_root_knobs(self) -> Mapping[str, Any]:
        roots = [n for n in self.ordered if stage_parent(n) is None]
        main_root = max(roots, key=lambda n: self.acc[n].total, default=None)
        return self.acc[main_root].knobs if main_root is not None else {}

    def bottleneck(self) -> str | None:
        """The blocking stage with the most active time (None when none was busy)."""
        candidates = [
            n for n in self.ordered if self.blocking.get(n) and stage_parent(n) is not None
        ]
        found = max(candidates, key=self.active, default=None)
        return None if found is None or self.active(found) <= 0 else found


def _blocking(
    ordered: list[str], is_async: Mapping[str, bool], acc: Mapping[str, _Acc], window_ps: int
) -> dict[str, bool]:
    """The root blocks; a synchronous child of a blocking stage blocks; an asynchronous
    stage, and what is below it, only while its consumer waits on it."""

    def waited_on(name: str) -> bool:
        # An asynchronous stage's own events are its consumer's wait on its buffer.
        return window_ps > 0 and acc[name].self_ps >= BLOCKING_MIN_WAIT_SHARE * window_ps

    blocking: dict[str, bool] = {}
    for name in ordered:
        parent = stage_parent(name)
        if parent is None:
            blocking[name] = True
        elif not blocking.get(parent, False):
            blocking[name] = False
        elif is_async[parent]:
            blocking[name] = waited_on(parent)
        else:
            blocking[name] = True
    # An async stage's own work blocks only when its consumer waits on it.
    for name in ordered:
        if is_async[name] and blocking.get(name):
            blocking[name] = waited_on(name)
    return blocking


def _stage(
    name: str,
    shape: _Shape,
    fns: FunctionWork,
    root_knobs: Mapping[str, Any],
    bottleneck: bool,
) -> Stage:
    a = shape.acc[name]
    is_async = shape.is_async[name]
    knobs = dict(a.knobs)
    for knob in ROOT_KNOBS:
        if knob not in knobs and knob in root_knobs:
            knobs[knob] = root_knobs[knob]
    iv = fns.udf_intervals.get(name, [])
    n_udf = sum(int(s.size) for s, _ in iv)
    busy = sum(int((e - s).sum()) for s, e in iv)
    covered = union_ps(*concat(iv)) if n_udf > 1 else 0
    conc = busy / covered if covered > 0 else None
    inline = bool(a.inline_calls) and not is_async
    return Stage(
        name=name,
        kind=stage_kind(name),
        parent=stage_parent(name),
        depth=name.count(STAGE_SEPARATOR) - 1,
        id=str(a.id) if a.id is not None else None,
        parent_id=str(a.parent_id) if a.parent_id is not None else None,
        op=a.op,
        types=a.types,
        calls=a.calls,
        total_ps=a.total,
        self_ps=shape.active(name),
        work_ps=shape.work_ps(name),
        active_ps=shape.active(name),
        wait_ps=shape.wait_ps(name),
        function_ps=a.inline_fn if inline else fns.ps.get(name, 0),
        function_calls=a.inline_calls if inline else fns.calls.get(name, 0),
        ops_ps=tuple(sorted(fns.ops.get(name, {}).items(), key=lambda kv: -kv[1])),
        op_nodes=_busiest(fns.nodes.get(name, {})),
        python_frames=_busiest(fns.frames.get(name, {})),
        function_names=tuple(sorted(fns.names.get(name, set()))),
        udf_concurrency=round(conc, 3) if conc is not None else None,
        is_async=is_async,
        blocking=bool(shape.blocking.get(name)),
        bottleneck=bottleneck,
        knobs=knobs,
        capped_by=_capped_by(knobs),
    )


def _busiest(ps_by_name: Mapping[str, int], limit: int = 8) -> tuple[str, ...]:
    return tuple(n for n, _ in sorted(ps_by_name.items(), key=lambda kv: -kv[1])[:limit])


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
        children[stage_parent(n)].append(n)
    out: list[str] = []

    def visit(n: str) -> None:
        out.append(n)
        for c in children.get(n, []):
            visit(c)

    for r in children.get(None, []):
        visit(r)
    return out
