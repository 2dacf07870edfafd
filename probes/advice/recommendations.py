"""What a fix is: one typed `Recommendation` per fix, the knob it changes (`Change`),
its place in the user's code (`at_site`), and whether the trace shows it made already
(`in_place`: a map already parallel, a pipeline already ending in a prefetch, a
threadpool already that large, an interleave already parallel; `probes.advice.findings` drops
such fixes). The stage predicates the builders share sit here too.

The builders: `probes.advice.map_fixes` (a map stage's work: Python functions, CPU-heavy maps,
cache, vectorize, a Keras PyDataset), `probes.advice.read_fixes` (reading and handing over: I/O,
files opened one by one, the final prefetch, a tf.distribute dataset) and
`probes.advice.step_fixes` (the step itself: compute, copies, the training loop, step markers).
Each returns fixes with their code, the category and stage they target, and `gain`: an
estimate of the fraction of step time saved, used to rank fixes, not a promise.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tftune.probes.advice.ideas import DISTRIBUTED_PREFETCH
from tftune.probes.traces.stage_events import PY_UDF_OPS
from tftune.probes.traces.stages import Stage, StageTree


class ChangeKind(enum.Enum):
    """The plain knob changes a fix can make, which a trace can show already made."""

    FINAL_PREFETCH = "final_prefetch"  # a prefetch at the pipeline's end
    CACHE = "cache"  # a cache() after the deterministic work
    PARALLEL_CALLS = "parallel_calls"  # the stage's map runs several calls at once
    THREADPOOL = "threadpool"  # a private threadpool of at least `at_least` threads
    CYCLE_LENGTH = "cycle_length"  # an interleave reading at least `at_least` inputs


@dataclass(frozen=True, slots=True)
class Change:
    """What a fix changes, where it is a knob rather than a rewrite of the user's code:
    `in_place` compares it with the trace to drop a fix already made."""

    kind: ChangeKind
    at_least: int | None = None


@dataclass(frozen=True, slots=True)
class Recommendation:
    summary: str
    code: str
    gain: float  # expected fraction of step time saved (a ranking estimate, not a promise)
    category: str
    stage: str | None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    kind: str = ""  # the idea (`probes.advice.ideas`): one fix per idea and target is shown
    change: Change | None = None  # the knob it changes (None: a rewrite, or several)


# The node of tftune's own request marks in a profiled pipeline (tuner/child/step_clock.py): a
# numpy_function of tftune's, not the user's.
TFTUNE_REQUEST_NODE = "tftune_request"


def runs_python(st: Stage) -> bool:
    """Whether the stage's function runs the user's Python (`py_function`,
    `numpy_function`, a `from_generator` generator): its kernels include a Python UDF op
    that is not tftune's own request mark."""
    if any(n.startswith(TFTUNE_REQUEST_NODE) for n in st.op_nodes):
        return False
    return any(op in PY_UDF_OPS for op, _ in st.ops_ps)


def one_at_a_time(st: Stage) -> bool:
    """Whether a map stage runs its function one element at a time: parallelism 1, or no
    parallelism in the trace and a kind that is not parallel (a ParallelMapV2 whose
    parallelism the trace missed is parallel all the same)."""
    par = st.knob("parallelism")
    if isinstance(par, int):
        return par <= 1
    return not st.kind.startswith("ParallelMap")


# Interleave kinds that read one input at a time.
SEQUENTIAL_OPENERS = frozenset({"Interleave", "FlatMap"})


def opens_one_at_a_time(st: Stage) -> bool:
    par, cycle = st.knob("parallelism"), st.knob("cycle_length")
    if st.kind in SEQUENTIAL_OPENERS:
        return True
    return not (isinstance(par, int) and par > 1) and not (isinstance(cycle, int) and cycle > 1)


# TF's rebatch of a distributed dataset's global batch for the replicas.
REBATCH_KINDS = frozenset({"Rebatch", "LegacyRebatch"})


def distributed_iterator_stage(st: Stage) -> bool:
    """The MultiDeviceIterator's per-replica `Generator` (in a trace that reads a
    tf.distribute dataset): a generator that runs no Python, whose function fetches the
    replica's share from the shared pipeline. Its time is that wait, not user work."""
    return st.kind == "Generator" and not runs_python(st)


def distributed_top(tree: StageTree) -> tuple[Stage | None, bool]:
    """The user's top stage under a tf.distribute dataset, and whether it came through
    `experimental_distribute_dataset` (a rebatch above it)."""
    rebatch = next((s for s in tree.stages if s.kind in REBATCH_KINDS), None)
    if rebatch is not None:
        below = tree.children(rebatch.name)
        return (below[0] if below else None), True
    root = tree.root
    tops = tree.children(root.name) if root is not None else ()
    users = [s for s in tops if not distributed_iterator_stage(s)]
    return (users[0] if users else None), False


def last_stage(tree: StageTree) -> Stage | None:
    root = tree.root
    top = tree.children(root.name) if root is not None else ()
    return top[0] if top else None


def at_site(r: Recommendation, site: str, function: str | None) -> Recommendation:
    """`r` tied to the user's line: its code says where, and calls their function by name."""
    code = r.code
    if function:
        code = code.replace("(fn,", f"({function},")
        code = code.replace("(fn_in_tf_ops,", f"({function}_in_tf_ops,")
    return replace(r, code=f"# {site}\n{code}", evidence={**r.evidence, "call_site": site})


def in_place(r: Recommendation, tree: StageTree) -> str | None:
    """Why the trace shows the change `r` proposes (`Recommendation.change`) is already
    there, else None."""
    if r.kind == DISTRIBUTED_PREFETCH:
        top, _ = distributed_top(tree)
        if top is not None and top.kind == "Prefetch":
            return f"the distributed dataset already ends in a prefetch ({top.name})"
        return None
    change = r.change
    if change is None:
        return None
    if change.kind is ChangeKind.FINAL_PREFETCH:
        last = last_stage(tree)
        if last is not None and last.kind == "Prefetch":
            return f"the pipeline already ends in a prefetch ({last.name})"
    if change.kind is ChangeKind.CACHE:
        cached = next((s for s in tree.stages if "Cache" in s.kind), None)
        if cached is not None:
            return f"the pipeline already caches ({cached.name})"
    st = tree.by_name(r.stage) if r.stage else None
    return _stage_has(st, change) if st is not None else None


def _stage_has(st: Stage, change: Change) -> str | None:
    """Why stage `st` already has `change`, else None."""
    par, want = st.knob("parallelism"), change.at_least or 0
    if change.kind is ChangeKind.PARALLEL_CALLS and not one_at_a_time(st):
        return f"{st.kind} already runs {par or 'several'} calls at once"
    pool = st.knob("threadpool_size")
    if change.kind is ChangeKind.THREADPOOL and isinstance(pool, int) and pool >= want:
        return f"the threadpool already has {pool} threads"
    cycle = st.knob("cycle_length")
    if (
        change.kind is ChangeKind.CYCLE_LENGTH
        and not opens_one_at_a_time(st)
        and isinstance(cycle, int)
        and cycle >= want
    ):
        return f"{st.kind} already reads {cycle} files at once"
    return None
