"""Work in the training loop outside tf.data: what the consumer thread does between the
iterator's GetNext and the step function.

A custom loop that preprocesses in Python (`batch = augment(next(it).numpy())`, then
`train_step(batch)`) does that work on the main thread, after tf.data has delivered the
batch and before the step runs: neither tf.data's threads nor the step see it, and
prefetch cannot hide it. What a trace shows of it (TF 2.21, host tracer level 2, measured
on tests/tracegen_real.py's `eager_loop`): on the step thread (`python`), between
`EagerLocalExecute: IteratorGetNext` and the step function's
`EagerLocalExecute: __inference_<fn>_N`, a gap that holds only the conversions of the
NumPy result back into a tensor (`tf.constant`, `convert_to_tensor`, `_EagerConst`) and
any eager ops the loop runs (`EagerLocalExecute: <Op>`). TF 2.21's Python tracer
(`python_tracer_level=1`) records no frames there; when a build does (`$file.py:N fn`
events), they name the function and its line.

`find_loop_work(host, steps) -> LoopWork | None`: per step, the step's time outside the
iterator and outside the step function's execution, and what was seen in it. None when
the loop calls no tf.function (an eager step cannot be told apart from preprocessing; it
is `probes.advice.next_moves`' finding) or when Keras runs the loop (`fit`: its per-step host
time is `steps_per_execution`'s business, see `probes.advice.next_moves`).

A loop fed by a `tf.distribute` strategy's dataset (`distributed_input`: the trace has
the MultiDeviceIterator's threads or kernels) spends that gap in the distributed
iterator's own Python (measured on tests/tracegen_loops.py's `mirrored_loop`: per step,
`convert_to_tensor`, `tf.constant`, eager `Pack`/`Range`/`Sum`/`Cast` of its partial-batch
handling, and untraced Python around `strategy.run`). That work is not the user's to
move into the pipeline: `LoopWork.distributed` says so, and the fix is several steps per
`tf.function` call (`probes.advice.step_fixes`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tftune.core.units import PS_PER_MS
from tftune.probes.traces.intervals import covered_in, merge
from tftune.probes.traces.stage_events import I64, PY_EVENT_RE, is_library_file
from tftune.probes.traces.steps import FUNCTION_CALL_RE, Steps
from tftune.probes.traces.trace import HostTrace, Line, Plane

# The loop's own work is a finding from this share of step time on, and from this many
# milliseconds per step (less is the Python of any loop: next(), the marker, the call).
LOOP_WORK_SHARE = 0.10
LOOP_WORK_MIN_MS = 1.0
# Step functions of Keras' own loop (`fit`): no user code runs between their calls.
KERAS_STEP_FUNCTIONS = frozenset(
    {"multi_step_on_iterator", "one_step_on_iterator", "one_step_on_data", "train_function"}
)
# The consumer's time inside tf.data: the iterator (already counted as input wait) and
# the iterator made again at each epoch's `for x in ds:` (MakeIterator, *Dataset ops).
ITERATOR_RE = re.compile(
    r"^(EagerLocalExecute: (IteratorGetNext\w*|Optional\w+|MakeIterator|AnonymousIterator\w*|"
    r"DeleteIterator|GetOptions|\w+Dataset(V\d+)?)|IteratorGetNextOp::DoCompute|Iterator::.*)$"
)
# A tf.distribute dataset's iterator: the MultiDeviceIterator's threads and kernels.
DISTRIBUTED_LINE_PREFIX = "tf_data_multi_device_iterator"
_DISTRIBUTED_EVENT_RE = re.compile(r"^(EagerLocalExecute: )?MultiDeviceIterator\w*")
# A NumPy value turned back into a tensor: the cost of leaving tf.data for NumPy.
_CONVERSION_RE = re.compile(r"^(tf\.constant|convert_to_tensor|EagerLocalExecute: _EagerConst)$")
EAGER_OP_RE = re.compile(r"^EagerLocalExecute: (?!__inference_)(\w+)$")
UNTRACED = "Python without TF events (NumPy, Python loops)"


@dataclass(frozen=True, slots=True)
class LoopWork:
    """The loop's own work per step, and what it was made of."""

    share: float  # of step time
    per_step_ms: float
    step_function: str  # the tf.function the loop calls each step
    seen: tuple[tuple[str, float], ...]  # (what, ms per step), longest first
    untraced_ms: float  # per step: time under no event (Python the tracer did not record)
    frames: tuple[str, ...]  # Python-tracer frames of the user's code, busiest first
    call_site: str | None  # `file.py:line` of the busiest user frame, when frames exist
    # The loop reads a tf.distribute dataset: the gap is its iterator's own work.
    distributed: bool = False


def distributed_input(host: HostTrace) -> bool:
    """Whether the consumer reads a `tf.distribute` strategy's dataset
    (`experimental_distribute_dataset`, `distribute_datasets_from_function`): the trace
    has the MultiDeviceIterator's threads or kernels."""
    plane = host.host_plane
    if plane is None:
        return False
    if any(ln.name.startswith(DISTRIBUTED_LINE_PREFIX) for ln in plane.lines):
        return True
    return any(_DISTRIBUTED_EVENT_RE.match(n) for n in plane.event_names.values())


def _what(name: str, distributed: bool = False) -> str | None:
    """How the loop's work reads in the finding, or None for containers."""
    if _CONVERSION_RE.match(name):
        short = name.removeprefix("EagerLocalExecute: ")
        if distributed:
            return f"{short} (the distributed iterator's input handling)"
        return f"{short} (a NumPy value converted back into a tensor)"
    m = EAGER_OP_RE.match(name)
    if m and not ITERATOR_RE.match(name):
        return f"{m.group(1)} (eager op)"
    m = PY_EVENT_RE.match(name)
    if m and not is_library_file(m.group("file")):
        return name[1:]
    return None


def _consumer_line(host: HostTrace, steps: Steps) -> Line | None:
    plane = host.host_plane
    if plane is None or not len(steps):
        return None
    return next((ln for ln in plane.lines if ln.name == steps.line), None) or next(
        (ln for ln in plane.lines if ln.name == "python"), None
    )


def _by_name(line: Line, plane: Plane) -> tuple[I64, list[str], I64]:
    """The line's distinct metadata ids in order of their first event, their names, and
    per event the position of its id among them: names are matched once per id."""
    ids, first, inverse = np.unique(line.metadata_id, return_index=True, return_inverse=True)
    if any(m not in plane.event_names for m in ids.tolist()):
        # Unnamed events: fail exactly as a per-event lookup does, at the first of them.
        for m in line.metadata_id.tolist():
            plane.event_names[m]
    order = np.argsort(first, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    names = [plane.event_names[m] for m in ids[order].tolist()]
    return ids[order], names, rank[inverse.reshape(-1)]


def _step_function(
    line: Line, names: list[str], of: I64
) -> tuple[str, npt.NDArray[np.bool_]] | None:
    """The tf.function the loop calls most (by time), and which names are the iterator's
    or a function call's (not the loop's work); None when it calls none."""
    durs = line.duration_ps
    if len(line) and int(durs.max()) * len(line) < 2**62:
        per_id = np.zeros(len(names), dtype=np.int64)
        np.add.at(per_id, of, durs)
        id_ps = per_id.tolist()
    else:  # sums that int64 might not hold: Python integers
        id_ps = [0] * len(names)
        for j, d in zip(of.tolist(), durs.tolist(), strict=True):
            id_ps[j] += d
    fn_time: dict[str, int] = defaultdict(int)
    excluded = np.zeros(len(names), dtype=bool)
    for j, name in enumerate(names):  # in order of first event, as the dict's keys go
        m = FUNCTION_CALL_RE.match(name)
        if m:
            fn_time[m.group(1)] += id_ps[j]
            excluded[j] = True
        elif ITERATOR_RE.match(name):
            excluded[j] = True
    if not fn_time:
        return None
    step_fn = max(fn_time, key=lambda k: fn_time[k])
    # The tf.function's Python call (argument binding, dispatch) is the step's overhead,
    # not the loop's work: its event carries the function's own name.
    excluded |= np.array([name == step_fn for name in names], dtype=bool)
    return step_fn, excluded


def _outside_ps(runs: tuple[I64, I64], steps: Steps) -> list[int]:
    """Per step, its time the runs do not cover."""
    lo, hi = steps.start_ps, steps.end_ps
    return ((hi - lo) - covered_in(runs, lo, hi)).tolist()  # type: ignore[no-any-return]


def _seen_in_steps(
    starts: I64, ends: I64, seen: npt.NDArray[np.bool_], steps: Steps
) -> list[tuple[int, int]]:
    """(event, ps inside its step) of each seen event that starts inside a step, step by
    step and in line order within a step; an event counts up to its step's end."""
    lo, hi = steps.start_ps, steps.end_ps
    if lo.size > 1 and not (lo[1:] >= hi[:-1]).all():  # overlapping steps: each in turn
        out: list[tuple[int, int]] = []
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            inside = np.flatnonzero(seen & (starts >= a) & (starts < b))
            out += [(i, int(min(ends[i], b) - starts[i])) for i in inside.tolist()]
        return out
    idx = np.flatnonzero(seen)
    k = np.searchsorted(lo, starts[idx], side="right") - 1
    ok = k >= 0
    ok[ok] = starts[idx[ok]] < hi[k[ok]]
    idx, k = idx[ok], k[ok]
    order = np.lexsort((idx, k))
    idx, k = idx[order], k[order]
    ps = np.minimum(ends[idx], hi[k]) - starts[idx]
    return list(zip(idx.tolist(), ps.tolist(), strict=True))


def find_loop_work(host: HostTrace, steps: Steps) -> LoopWork | None:
    """The work the training loop does outside tf.data and the step function (see the
    module docstring); None when there is none to tell apart."""
    line = _consumer_line(host, steps)
    plane = host.host_plane
    if line is None or plane is None or not len(line):
        return None
    _, names, of = _by_name(line, plane)
    found = _step_function(line, names, of)
    if found is None or found[0] in KERAS_STEP_FUNCTIONS:
        return None
    step_fn, excluded_id = found
    starts, ends = line.start_ps, line.end_ps
    excluded = excluded_id[of]
    xs, xe = starts[excluded], ends[excluded]
    distributed = distributed_input(host)
    labels = [_what(name, distributed) for name in names]
    labelled = np.array([lab is not None for lab in labels], dtype=bool)[of]
    loop_ps = sum(_outside_ps(merge(xs, xe), steps))
    both = merge(np.concatenate([xs, starts[labelled]]), np.concatenate([xe, ends[labelled]]))
    untraced_ps = sum(max(0, v) for v in _outside_ps(both, steps))
    seen_ps: dict[str, int] = defaultdict(int)
    label_of = of.tolist()
    for i, ps in _seen_in_steps(starts, ends, labelled, steps):
        seen_ps[str(labels[label_of[i]])] += ps
    total_ps = int(steps.duration_ps.sum())
    if total_ps <= 0:
        return None
    n = len(steps)
    seen = tuple(
        (k, round(v / n / PS_PER_MS, 3)) for k, v in sorted(seen_ps.items(), key=lambda kv: -kv[1])
    )
    frames = tuple(k for k, _ in seen if PY_EVENT_RE.match("$" + k))
    site = None
    if frames:
        m = PY_EVENT_RE.match("$" + frames[0])
        site = f"{m.group('file').rsplit('/', 1)[-1]}:{m.group('line')}" if m else None
    return LoopWork(
        share=round(loop_ps / total_ps, 4),
        per_step_ms=round(loop_ps / n / PS_PER_MS, 3),
        step_function=step_fn,
        seen=seen[:8],
        untraced_ms=round(untraced_ps / n / PS_PER_MS, 3),
        frames=frames[:5],
        call_site=site,
        distributed=distributed,
    )
