"""Findings: what the input time is spent on, which stage and line, and what to change.

Small, pure finders over the frozen stage tree and step breakdown. Each returns typed
values; `probes.advice.analysis` turns them into the JSON contract. The input wait is split by
category in `probes.traces.input_work`; the fixes are built in `probes.advice.recommendations`; here
they are ranked, tied to the user's call sites and put together with the verdict.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tftune.core.analysis_advice import Verdict
from tftune.core.sizing import NotSized, Unsized
from tftune.core.vocabulary import (
    EAGER_STEP,
    INPUT_CATEGORIES,
    TRAINING_LOOP,
    UNDER_ONE_PERCENT,
    Band,
    input_band,
    percent,
)
from tftune.probes.advice.map_fixes import cache_rec, map_recs, py_dataset_rec, vectorize_rec
from tftune.probes.advice.next_moves import StepFacts
from tftune.probes.advice.read_fixes import (
    distributed_prefetch_rec,
    file_open_recs,
    io_rec,
    prefetch_rec,
)
from tftune.probes.advice.recommendations import (
    Recommendation,
    at_site,
    distributed_iterator_stage,
    in_place,
    runs_python,
)
from tftune.probes.advice.service_sizing import not_sized
from tftune.probes.advice.step_fixes import compute_rec, eager_rec, h2d_rec, loop_rec, marker_rec
from tftune.probes.traces.callsites import PY_DATASET_CALLS, RecordedSite, site_for_stage
from tftune.probes.traces.input_work import StageWork, input_split, ms, opens_files
from tftune.probes.traces.loop_work import LOOP_WORK_MIN_MS, LOOP_WORK_SHARE, LoopWork
from tftune.probes.traces.stage_events import PY_UDF_OPS, is_library_file
from tftune.probes.traces.stages import Stage, StageTree

# Report a category as a bottleneck from this share of step time on.
MIN_BOTTLENECK_SHARE = 0.02
# Compute dominates the step from this share on (mixed-precision advice).
COMPUTE_BOUND_SHARE = 0.5
# Host-to-device copies worth acting on.
H2D_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class FoundBottleneck:
    """A bottleneck as the finders found it: its share of step time, where it is, what
    was measured, and its best fix as the `Recommendation` ranked with the others (the
    analysis writes it as a `core.analysis_advice.Bottleneck`)."""

    category: str
    share: float
    stage: str | None
    call_site: str | None
    functions: tuple[str, ...]
    evidence: Mapping[str, Any]
    recommendation: Recommendation | None


# -- verdict ----------------------------------------------------------------------------

# What a run that waits little for input is told, in `analyze` and `optimize` alike.
NOT_THE_LIMIT = " The input pipeline is not the limit; tuning tf.data will not help much."


# ... and one whose epochs each open with a stall (the step clock's figures beside a
# `tftune profile` trace: `probes.live.epoch_stall`).
BUT_EPOCH_STARTS = (
    " Within an epoch the input pipeline is not the limit, but each epoch's start waits "
    "for it (the epoch-start stall)."
)


def verdict(
    input_share: float | None,
    fractions: Mapping[str, float | None],
    device: str,
    epoch_stall: bool = False,
) -> Verdict:
    """The input share in its band, with what takes the rest (the share kept as the
    document writes it, to 4 places); `epoch_stall`: the step clock named an epoch-start
    stall, so a run that waits little within an epoch is not told that tuning tf.data
    cannot help."""
    dev = fractions.get("device_compute")
    host = fractions.get("host_compute")
    if input_share is None:
        return Verdict(None, None, None, "No steps were found, so the input share is not measured.")
    pct = percent(input_share)
    band = input_band(input_share)
    only = "only " if band is Band.LOW and pct != UNDER_ONE_PERCENT else ""
    head = f"{band.words.capitalize()}: {only}{pct} of step time is spent waiting for input"
    compute = dev if device == "GPU" else host
    what = "device compute" if device == "GPU" else "host compute"
    tail = f"; {what} takes {percent(compute)}." if compute is not None else "."
    if band is Band.LOW:
        tail += BUT_EPOCH_STARTS if epoch_stall else NOT_THE_LIMIT
    return Verdict(band.input_bound, round(input_share, 4), band, head + tail)


# -- call sites -------------------------------------------------------------------------

_FRAME_RE = re.compile(r"^\$(?P<file>[^:]+\.py):(?P<line>\d+) ")


def call_site(stage: Stage) -> str | None:
    """`file:line` of the user's code the stage runs, when the Python tracer shows it."""
    for frame in stage.python_frames:
        m = _FRAME_RE.match(frame)
        if m and not is_library_file(m.group("file")):
            return f"{m.group('file').rsplit('/', 1)[-1]}:{m.group('line')}"
    return None


def functions_of(stage: Stage) -> tuple[str, ...]:
    if stage.function_names:
        return stage.function_names
    nodes = tuple(n for n in stage.op_nodes if n not in PY_UDF_OPS)
    if stage.python_frames:
        return tuple(stage.python_frames[:3])
    py_ops = sorted({op for op, _ in stage.ops_ps if op in PY_UDF_OPS})
    if py_ops:
        return (f"Python UDF ({', '.join(py_ops)})", *nodes[:4])
    if nodes:
        return nodes[:5]
    # The tracer recorded no kernel inside: name the dataset op the stage runs instead.
    return (stage.op,) if stage.op else ()


# -- putting it together ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Findings:
    verdict: Verdict
    bottlenecks: tuple[FoundBottleneck, ...]
    recommendations: tuple[Recommendation, ...]
    category_shares: Mapping[str, float]
    notes: tuple[str, ...]
    # The input-bound pipeline's limit is not CPU (Python functions, waiting): no tf.data
    # service sizing, and why (`probes.advice.service_sizing`); None: size it from the trace.
    unsized: NotSized | None = None


def find(
    tree: StageTree,
    input_wait_share: float | None,
    input_share: float | None,
    fractions: Mapping[str, float | None],
    device: str,
    detection: str,
    compute_functions: Sequence[str] = (),
    sites: Sequence[RecordedSite] = (),
    loop: LoopWork | None = None,
    facts: StepFacts | None = None,
    epoch_stall: bool = False,
) -> Findings:
    """All findings for one host: verdict, ranked bottlenecks, ranked recommendations.
    `sites`: the call sites `tftune profile` recorded beside the trace (they name the
    line of a stage the Python tracer did not see); `loop`: the training loop's own work
    outside tf.data (`probes.traces.loop_work`), a bottleneck of its own from
    `LOOP_WORK_SHARE` of step time on; `facts`: what the trace says about the step
    (`probes.advice.next_moves.step_facts`: an eager step, a distributed input, the moves that
    fix a compute-bound step); `epoch_stall`: the step clock named an epoch-start stall
    (`verdict`)."""
    v = verdict(input_share, fractions, device, epoch_stall)
    cores_v = tree.root_knobs.get("cpu_budget")
    cores = cores_v if isinstance(cores_v, int) else None
    distributed = facts is not None and facts.distributed
    works = [_iterator_wait(w) if distributed else w for w in input_split(tree)]
    cat_share, stage_share = _split_wait(works, input_wait_share)
    recs: list[Recommendation] = []
    bottlenecks: list[FoundBottleneck] = []
    for c in INPUT_CATEGORIES:
        share = cat_share.get(c, 0.0)
        if share < MIN_BOTTLENECK_SHARE or c == "other":
            continue
        (stage_name, _) = max(
            ((n, s) for (cc, n), s in stage_share.items() if cc == c), key=lambda t: t[1]
        )
        w = next(x for x in works if x.stage.name == stage_name)
        found, c_recs = _input_bottleneck(c, share, w, tree, cores, sites)
        recs.extend(c_recs)
        bottlenecks.append(found)
    bound = input_share is not None and input_band(input_share).input_bound
    if input_share is not None and bound:
        pf = prefetch_rec(tree, input_share, fractions.get("host_compute") or 0.0)
        recs += [pf] if pf is not None and in_place(pf, tree) is None else []
    if distributed and bound and input_wait_share is not None:
        dp = distributed_prefetch_rec(tree, input_wait_share)
        recs += [dp] if in_place(dp, tree) is None else []
    for found in _outside_the_pipeline(fractions, device, compute_functions, loop, sites, facts):
        assert found.recommendation is not None
        recs.append(found.recommendation)
        bottlenecks.append(found)
    bottlenecks.sort(key=lambda b: -b.share)
    recs.sort(key=lambda r: -r.gain)
    mr = marker_rec(detection)
    notes: list[str] = []
    if mr is not None:
        recs.append(mr)
        notes.append(mr.summary)
    return Findings(
        verdict=v,
        bottlenecks=tuple(bottlenecks),
        recommendations=tuple(recs),
        category_shares={k: round(val, 4) for k, val in cat_share.items()},
        notes=tuple(notes),
        unsized=unsized(tree, works, cores) if bound else None,
    )


def _iterator_wait(w: StageWork) -> StageWork:
    """A stage of a tf.distribute dataset's own iterator (`distributed_iterator_stage`):
    its time is waiting on the pipeline beneath, not the user's preprocessing, so it is
    `other` (never a stage to fix); other stages as they are."""
    if not distributed_iterator_stage(w.stage):
        return w
    ev = {**w.evidence, "distributed_iterator": True}
    return StageWork(w.stage, {"other": sum(w.by_category.values())}, None, ev)


# The user-facing names of the Python UDF ops (`PY_UDF_OPS`).
_PY_API = {
    "EagerPyFunc": "tf.py_function",
    "PyFunc": "tf.numpy_function",
    "PyFuncStateless": "tf.numpy_function",
}


def unsized(tree: StageTree, works: Sequence[StageWork], cores: int | None) -> NotSized | None:
    """Why an input-bound pipeline gets no tf.data service sizing, or None: it runs
    Python functions (a service worker cannot run them), and where they wait rather than
    compute (`StageWork.latency_bound`), they need calls in flight, not cores."""
    api: set[str] = set()
    for st in tree.stages:
        if runs_python(st):
            generator = "Generator" in st.kind
            api |= {
                "Dataset.from_generator" if generator else _PY_API[op]
                for op, _ in st.ops_ps
                if op in PY_UDF_OPS
            }
    if not api:
        return None
    waits = any(w.latency_bound for w in works)
    return not_sized(
        "steps", Unsized.WAITING if waits else Unsized.PYTHON, None, cores, tuple(sorted(api))
    )


def _split_wait(
    works: Sequence[StageWork], wait: float | None
) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """The input wait (share of step time) split in proportion to the blocking stages'
    work: by category, and by (category, stage)."""
    total_work = sum(sum(w.by_category.values()) for w in works)
    cat_share: dict[str, float] = defaultdict(float)
    stage_share: dict[tuple[str, str], float] = defaultdict(float)
    if wait is not None and total_work > 0:
        for w in works:
            for c, ps in w.by_category.items():
                s = wait * ps / total_work
                cat_share[c] += s
                stage_share[(c, w.stage.name)] += s
    return cat_share, stage_share


def _stage_recs(w: StageWork, share: float, cores: int | None, c: str) -> list[Recommendation]:
    """The fixes for category `c` of one stage's work, best first."""
    c_recs: list[Recommendation] = []
    if w.evidence.get("opens_files"):
        return file_open_recs(w, share, cores)
    io = io_rec(w, share) if c == "io" else None
    if io is not None:
        c_recs.append(io)
    if w.stage.function_calls:
        c_recs.extend(map_recs(w, share, cores, c))
        for r in (cache_rec(w, share), vectorize_rec(w, share)):
            if r is not None and (r.category == c or c == "preprocessing"):
                c_recs.append(r)
    c_recs.sort(key=lambda r: -r.gain)
    return c_recs


def _opener_above(st: Stage, tree: StageTree) -> Stage | None:
    """The nearest interleave/flat_map above `st` that opens one file per element."""
    parent = tree.by_name(st.parent) if st.parent else None
    while parent is not None:
        if opens_files(parent, tree.stages):
            return parent
        parent = tree.by_name(parent.parent) if parent.parent else None
    return None


def _input_bottleneck(
    c: str,
    share: float,
    w: StageWork,
    tree: StageTree,
    cores: int | None,
    sites: Sequence[RecordedSite],
) -> tuple[FoundBottleneck, list[Recommendation]]:
    """Category `c` of the input wait, charged to its busiest stage `w`: the bottleneck,
    named by its line when the Python tracer or the recorded call sites know it, and its
    fixes (tied to that line)."""
    c_recs = _stage_recs(w, share, cores, c)
    opener = _opener_above(w.stage, tree) if c == "io" and not c_recs else None
    if opener is not None:  # a reader fed one file at a time: the fix is its interleave's
        c_recs = file_open_recs(StageWork(opener, {"io": opener.work_ps}, None, {}), share, cores)
    c_recs = [r for r in c_recs if in_place(r, tree) is None]
    where = call_site(w.stage)
    functions = functions_of(w.stage)
    recorded = site_for_stage(w.stage, tree.stages, sites) if where is None else None
    if recorded is not None:
        where = recorded.site
        if recorded.function and recorded.function not in functions:
            functions = (recorded.function, *functions)  # the UDF's own name first
    if recorded is not None and recorded.op in PY_DATASET_CALLS:
        c_recs = [py_dataset_rec(w.stage, share, c, recorded, cores)]
    if where is not None:
        c_recs = [at_site(r, where, recorded.function if recorded else None) for r in c_recs]
    evidence: dict[str, Any] = {
        "stage_op": w.stage.op,
        "stage_self_ms": ms(w.stage.self_ps),
        "stage_wait_ms": ms(w.stage.wait_ps) if w.stage.wait_ps is not None else None,
        "category_ms": ms(w.by_category.get(c, 0)),
        "parallelism": w.stage.knob("parallelism"),
        "autotune": w.stage.knob("autotune"),
        "capped_by": w.stage.capped_by,
        "bottleneck_stage": w.stage.bottleneck,
        **w.evidence,
    }
    if c == "io" and w.latency_bound:
        evidence["latency_bound"] = True
    if recorded is not None:
        evidence["call_site_from"] = "the call sites tftune profile recorded"
    found = FoundBottleneck(
        category=c,
        share=round(share, 4),
        stage=w.stage.name,
        call_site=where,
        functions=functions,
        evidence=evidence,
        recommendation=c_recs[0] if c_recs else None,
    )
    return found, c_recs


def _loop_bottleneck(loop: LoopWork, sites: Sequence[RecordedSite]) -> FoundBottleneck:
    """The training loop's own work: what was seen in it and the fix that moves it."""
    r = loop_rec(loop, loop.share, sites)
    evidence: dict[str, Any] = {
        "per_step_ms": loop.per_step_ms,
        "untraced_ms_per_step": loop.untraced_ms,
        "step_function": loop.step_function,
        "seen_ms_per_step": dict(loop.seen),
    }
    if loop.frames:
        evidence["python_frames"] = list(loop.frames)
    seen = tuple(k for k, _ in loop.seen)
    if loop.untraced_ms > 0:
        seen = (*seen, f"{loop.untraced_ms:.1f} ms/step of Python without TF events")
    return FoundBottleneck(TRAINING_LOOP, loop.share, None, loop.call_site, seen, evidence, r)


def _outside_the_pipeline(
    fractions: Mapping[str, float | None],
    device: str,
    compute_functions: Sequence[str],
    loop: LoopWork | None,
    sites: Sequence[RecordedSite],
    facts: StepFacts | None,
) -> list[FoundBottleneck]:
    """Bottlenecks outside the input pipeline: the training loop's own work, a step run
    eagerly, host-to-device copies, then compute (its fix: the best move for the step)."""
    out: list[FoundBottleneck] = []
    if loop is not None and loop.share >= LOOP_WORK_SHARE and loop.per_step_ms >= LOOP_WORK_MIN_MS:
        out.append(_loop_bottleneck(loop, sites))
    # Eager ops between next() and a compiled step are the loop's work (above), not an
    # eager step.
    eager = facts is not None and facts.eager and not out
    if eager and facts is not None and (facts.dispatch_share or 0.0) >= MIN_BOTTLENECK_SHARE:
        r = eager_rec(facts)
        what = (f"{facts.eager_ops_per_step or 0:.0f} ops per step, dispatched from Python",)
        share = round(facts.dispatch_share or 0.0, 4)
        out.append(FoundBottleneck(EAGER_STEP, share, None, None, what, dict(r.evidence), r))
    h2d = fractions.get("host_to_device") or 0.0
    if h2d >= H2D_SHARE:
        r = h2d_rec(h2d)
        share = round(h2d, 4)
        out.append(FoundBottleneck("host_to_device", share, None, None, (), dict(r.evidence), r))
    compute_cat = "device_compute" if device == "GPU" else "host_compute"
    compute = fractions.get(compute_cat) or 0.0
    if compute >= COMPUTE_BOUND_SHARE:
        r = compute_rec(device, compute, facts)
        fns = tuple(compute_functions)
        ev = {"functions": list(fns), "compute_share": round(compute, 4)}
        out.append(FoundBottleneck(compute_cat, round(compute, 4), None, None, fns, ev, r))
    return out


def dedupe(recs: Sequence[Recommendation]) -> tuple[Recommendation, ...]:
    """One fix per idea and target: the first of the fixes with the same code, or with
    the same idea (`Recommendation.kind`) for the same stage (None: the step)."""
    seen: set[object] = set()
    out = []
    for r in recs:
        keys = {r.code, (r.kind, r.stage)} if r.kind else {r.code}
        if not keys & seen:
            seen |= keys
            out.append(r)
    return tuple(out)
