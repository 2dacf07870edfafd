"""Next moves when the input pipeline is not the limit: what would speed up the step.

A run that waits little for input gains little from tuning tf.data; its user still needs
the next move. `step_facts(host, steps, device)` reads from the trace what decides it (the
kernels each step runs and how long each takes, how busy the compute is, the host time
between the step function's calls, the GPU's compute capability); `moves_from(facts,
fractions, input_share)` ranks the moves those facts support:

* the precision policy: 16-bit compute with a float32 output layer, where the hardware
  has a fast 16-bit type (tensor cores from compute capability 7.0; bfloat16 from 8.0;
  on a CPU only with AVX512-BF16/AMX, and float16 is slower there);
* XLA (`jit_compile=True`) when many small kernels make up the step;
* a larger batch when the device (or the cores) sit idle for much of the step;
* Keras' `steps_per_execution` when Keras' per-step host work between the step
  function's calls is a visible share of the time.

A step that runs eagerly (`StepFacts.eager`: many `EagerLocalExecute: <Op>` dispatches on
the step thread per step, and no tf.function that takes most of the step) is a finding of
its own, `eager_step` (`probes.advice.step_fixes.eager_rec`: compile it with `@tf.function`);
its XLA move is part of that fix, never a separate one. Measured on
tests/tracegen_loops.py's `eager_step` (TF 2.21, a small CNN with `@tf.function` commented
out): 325 eager ops per step, their kernels (`KernelAndDeviceFunc::Run`) 35% of the
step, the rest Python and dispatch around them, and no `__inference_` call at all.

Each move's `score` estimates the fraction of step time it could save, for ranking only.
No move is offered for an input-bound run (its first move is the pipeline). Pure: no
TensorFlow; `Analysis.moves` holds them for an analysis; the tuner reads them from its JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tftune.core.analysis_advice import NextMove
from tftune.core.units import PS_PER_MS, PS_PER_US
from tftune.core.vocabulary import input_band, percent
from tftune.probes.advice import ideas
from tftune.probes.traces.intervals import covered_in, merge, union_ps
from tftune.probes.traces.loop_work import (
    EAGER_OP_RE,
    ITERATOR_RE,
    KERAS_STEP_FUNCTIONS,
    distributed_input,
)
from tftune.probes.traces.stage_events import I64, op_type
from tftune.probes.traces.steps import FUNCTION_CALL_RE, Steps
from tftune.probes.traces.trace import HostTrace, Line, Plane

# Many small kernels: at least this many per step, at most this long on average.
XLA_MIN_OPS_PER_STEP = 100
XLA_MAX_MEAN_OP_US = {"GPU": 20.0, "CPU": 60.0}
# The device (or the cores) is underused when kernels run for less of the step than this.
UNDERUSED_BUSY_SHARE = 0.5
# Keras' host work between step-function calls worth `steps_per_execution`.
HOST_OVERHEAD_SHARE = 0.08
# Tensor cores (fast float16) from compute capability 7.0, bfloat16 from 8.0.
FP16_MIN_CC = 7
BF16_MIN_CC = 8
STEPS_PER_EXECUTION = 32
# A step runs eagerly from this many ops dispatched one by one per step on the step
# thread, while its tf.function (if any) runs for less than this share of the step.
EAGER_MIN_OPS_PER_STEP = 20
EAGER_MAX_FUNCTION_SHARE = 0.5
# An eager op's kernel run (the op, executed as a one-op function or directly).
_EAGER_KERNEL_RE = re.compile(r"^KernelAndDevice\w*::Run$")
_PRODUCER_LINES = ("tf_data_iterator_resource", "tf_data_private_threadpool")
_COPY_PREFIXES = ("memcpy", "memset", "cumemcpy", "cudamemcpy")


@dataclass(frozen=True, slots=True)
class StepFacts:
    """What the trace says about the step itself (None: not measured)."""

    device: str  # "GPU" | "CPU"
    steps: int
    step_ms: float | None
    ops_per_step: float | None
    mean_op_us: float | None
    busy_share: float | None  # of step time, some kernel was running
    host_overhead_share: float | None  # host time between the step function's calls
    step_function: str | None
    keras: bool
    compute_capability: tuple[int, int] | None  # GPU only
    # Ops dispatched eagerly on the step thread per step, their kernels' mean µs, the
    # share of step time around them (Python and dispatch: what compiling saves) and
    # the share inside the step function's calls.
    eager_ops_per_step: float | None = None
    eager_kernel_us: float | None = None
    dispatch_share: float | None = None
    function_share: float | None = None
    distributed: bool = False  # the consumer reads a tf.distribute dataset

    @property
    def eager(self) -> bool:
        """The step runs op by op from Python: no tf.function around it."""
        ops = self.eager_ops_per_step
        return (
            ops is not None
            and ops >= EAGER_MIN_OPS_PER_STEP
            and (self.function_share or 0.0) < EAGER_MAX_FUNCTION_SHARE
        )


def xla_helps(ops_per_step: float | None, mean_op_us: float | None, device: str) -> bool:
    """XLA fuses many small kernels: `XLA_MIN_OPS_PER_STEP` or more per step, averaging
    under `XLA_MAX_MEAN_OP_US` for the device."""
    limit = XLA_MAX_MEAN_OP_US["GPU" if device == "GPU" else "CPU"]
    if ops_per_step is None or mean_op_us is None:
        return False
    return ops_per_step >= XLA_MIN_OPS_PER_STEP and mean_op_us <= limit


def _kernel_intervals(host: HostTrace, device: str) -> tuple[I64, I64]:
    """Start and end of every compute kernel: GPU stream kernels, or the host's kernels
    (`node:OpType`) outside tf.data's threads."""
    planes: tuple[Plane, ...] = host.gpu_planes if device == "GPU" else ()
    chunks: list[tuple[I64, I64]] = []
    if planes:
        for p in planes:
            for ln in p.lines:
                if not ln.name.startswith("Stream #") or not len(ln):
                    continue
                ids, of = np.unique(ln.metadata_id, return_inverse=True)
                copy = [p.event_names[m].lower().startswith(_COPY_PREFIXES) for m in ids.tolist()]
                ok = ~np.array(copy, dtype=bool)[of.reshape(-1)]
                chunks.append((ln.start_ps[ok], ln.end_ps[ok]))
    elif host.host_plane is not None:
        hp = host.host_plane
        kernel_ids = hp.metadata_ids(lambda n: op_type(n) is not None)
        for ln in hp.lines:
            if ln.name.startswith(_PRODUCER_LINES) or not len(ln):
                continue
            ok = np.isin(ln.metadata_id, kernel_ids)
            chunks.append((ln.start_ps[ok], ln.end_ps[ok]))
    if not chunks:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy()
    return np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])


def _function_calls(line: Line | None, plane: Plane | None) -> tuple[str | None, I64, I64]:
    """The busiest step function on the step thread and its calls' (starts, ends)."""
    z = np.zeros(0, dtype=np.int64)
    if line is None or plane is None or not len(line):
        return None, z, z.copy()
    fn_of = {}
    for mid in line.ids_seen():
        m = FUNCTION_CALL_RE.match(plane.event_names[mid])
        if m:
            fn_of[mid] = m.group(1)
    if not fn_of:
        return None, z, z.copy()
    time = {mid: int(line.duration_ps[line.metadata_id == mid].sum()) for mid in fn_of}
    best = max(time, key=lambda k: time[k])
    sel = line.metadata_id == best
    order = np.argsort(line.start_ps[sel])
    return fn_of[best], line.start_ps[sel][order], line.end_ps[sel][order]


def _within(s: I64, e: I64, lo: I64, hi: I64) -> int:
    """Time the intervals cover inside the steps [lo, hi), each step clipped."""
    return sum(covered_in(merge(s, e), lo, hi).tolist())


def _in_steps(t: I64, lo: I64, hi: I64) -> npt.NDArray[np.bool_]:
    """Which times fall inside a step [lo, hi) (any of them, where steps overlap)."""
    ws, we = merge(lo, hi)
    j = np.searchsorted(ws, t, side="right") - 1
    inside: npt.NDArray[np.bool_] = j >= 0
    inside[inside] = t[inside] < we[j[inside]]
    return inside


def _busy_in_steps(ks: I64, ke: I64, lo: I64, hi: I64) -> int:
    """Per step, the union of the kernels that start in it, cut at its end; summed."""
    if lo.size > 1 and not (lo[1:] >= hi[:-1]).all():  # overlapping steps: each in turn
        busy: int = 0
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            m = (ks >= a) & (ks < b)
            busy += union_ps(ks[m], np.minimum(ke[m], b))
        return busy
    # Disjoint steps: each kernel belongs to one step at most, and the kernels of
    # different steps, cut at their step's end, never overlap.
    k = np.searchsorted(lo, ks, side="right") - 1
    ok = k >= 0
    ok[ok] = ks[ok] < hi[k[ok]]
    return union_ps(ks[ok], np.minimum(ke[ok], hi[k[ok]]))


def _eager_facts(
    line: Line | None, plane: Plane | None, steps: Steps, fs: I64, fe: I64
) -> dict[str, Any]:
    """`StepFacts`' eager fields: ops dispatched one by one on the step thread, their
    kernels, the time around them and the step function's share of the step."""
    total = int(steps.duration_ps.sum())
    if line is None or plane is None or not len(line) or total <= 0:
        return {}
    lo, hi = steps.start_ps, steps.end_ps
    names = {mid: plane.event_names[mid] for mid in line.ids_seen()}
    eager = [m for m, n in names.items() if EAGER_OP_RE.match(n) and not ITERATOR_RE.match(n)]
    kernels = [m for m, n in names.items() if _EAGER_KERNEL_RE.match(n)]
    waits = [m for m, n in names.items() if ITERATOR_RE.match(n)]
    starts = line.start_ps
    inside = _in_steps(starts, lo, hi)
    ops = int((np.isin(line.metadata_id, eager) & inside).sum())
    k = np.isin(line.metadata_id, kernels) & inside
    covered = np.isin(line.metadata_id, kernels + waits)
    kernel_us = float(line.duration_ps[k].mean()) / PS_PER_US if k.any() else None
    around = total - _within(line.start_ps[covered], line.end_ps[covered], lo, hi)
    return {
        "eager_ops_per_step": round(ops / len(steps), 1),
        "eager_kernel_us": None if kernel_us is None else round(kernel_us, 2),
        "dispatch_share": round(max(0, around) / total, 4),
        "function_share": round(_within(fs, fe, lo, hi) / total, 4),
    }


def step_facts(host: HostTrace, steps: Steps, device: str) -> StepFacts:
    """The facts `moves_from` ranks by, over the detected steps."""
    n = len(steps)
    plane = host.host_plane
    line = None
    if plane is not None:
        line = next((ln for ln in plane.lines if ln.name == (steps.line or "python")), None)
    fn, fs, fe = _function_calls(line, plane)
    overhead = None
    if fs.size >= 3:
        span = int(fe[-1] - fs[0])
        gaps = np.maximum(0, fs[1:] - fe[:-1])
        overhead = round(float(gaps.sum()) / span, 4) if span > 0 else None
    cap = None
    for p in host.gpu_planes[:1]:
        major, minor = (
            p.stats.get("devcap_compute_cap_major"),
            p.stats.get("devcap_compute_cap_minor"),
        )
        if isinstance(major, int):
            cap = (major, minor if isinstance(minor, int) else 0)
    distributed = distributed_input(host)
    if not n:
        return StepFacts(
            device,
            0,
            None,
            None,
            None,
            None,
            overhead,
            fn,
            fn in KERAS_STEP_FUNCTIONS,
            cap,
            distributed=distributed,
        )
    ks, ke = _kernel_intervals(host, device)
    lo, hi = steps.start_ps, steps.end_ps
    inside = _in_steps(ks, lo, hi)
    busy = _busy_in_steps(ks, ke, lo, hi)
    total = int(steps.duration_ps.sum())
    count = int(inside.sum())
    return StepFacts(
        device=device,
        steps=n,
        step_ms=round(total / n / PS_PER_MS, 3),
        ops_per_step=round(count / n, 1) if count else None,
        mean_op_us=round(float((ke[inside] - ks[inside]).mean()) / PS_PER_US, 2) if count else None,
        busy_share=round(busy / total, 4) if total > 0 and count else None,
        host_overhead_share=overhead,
        step_function=fn,
        keras=fn in KERAS_STEP_FUNCTIONS,
        compute_capability=cap,
        distributed=distributed,
        **_eager_facts(line, plane, steps, fs, fe),
    )


def precision_move(device: str, cap: tuple[int, int] | None, compute: float) -> NextMove:
    """16-bit compute with a float32 output layer, in the policy the hardware runs fast
    (`cap`: the GPU's compute capability, None where not known)."""
    ev: dict[str, Any] = {"device": device, "compute_share": round(compute, 4)}
    if device == "GPU" and cap is not None:
        ev["compute_capability"] = f"{cap[0]}.{cap[1]}"
    if device == "GPU" and cap is not None and cap[0] < FP16_MIN_CC:
        policy, why, factor = (
            "mixed_float16",
            f"this GPU (compute capability {cap[0]}.{cap[1]}) has no tensor cores, so 16-bit "
            "mostly saves memory; measure before keeping it",
            0.05,
        )
    elif device == "GPU":
        bf16 = cap is not None and cap[0] >= BF16_MIN_CC
        policy = "mixed_bfloat16" if bf16 else "mixed_float16"
        why = (
            "the GPU's tensor cores run 16-bit matmuls and convolutions several times faster"
            + (" (bfloat16 needs no loss scaling)" if bf16 else "")
            + ("" if cap is not None else "; this needs compute capability 7.0 or newer")
        )
        factor = 0.35 if cap is not None else 0.2
    else:
        policy, why, factor = (
            "mixed_bfloat16",
            "on a CPU only where it has AVX512-BF16 or AMX (bfloat16 was 1.2-1.4x faster on "
            "such CPUs here); float16 is slower on CPUs (0.43x measured): measure first",
            0.1,
        )
    return NextMove(
        kind=ideas.PRECISION,
        summary=f"Compute in 16 bits with a float32 output layer ({policy}): {why}",
        code=(
            f'keras.mixed_precision.set_global_policy("{policy}")\n'
            "# keep the output layer in float32 for a stable loss:\n"
            'outputs = keras.layers.Dense(n_classes, dtype="float32")(x)'
        ),
        score=round(compute * factor, 4),
        evidence=ev,
    )


def _xla_move(f: StepFacts, compute: float) -> NextMove | None:
    ops, mean_us = f.ops_per_step, f.mean_op_us
    if f.eager or ops is None or mean_us is None or not xla_helps(ops, mean_us, f.device):
        return None  # an eager step's XLA is part of compiling it (`step_fixes.eager_rec`)
    fn = f.step_function or "train_step"
    code = (
        "model.compile(optimizer, loss, jit_compile=True)"
        if f.keras
        else f"@tf.function(jit_compile=True)\ndef {fn}(batch):\n    ..."
    )
    return NextMove(
        kind=ideas.XLA,
        summary=(
            f"Each step runs {ops:.0f} small kernels ({mean_us:.0f} µs on average): XLA fuses "
            "them into a few, saving the per-kernel launch and memory traffic"
        ),
        code=code,
        score=round(compute * 0.4, 4),
        evidence={"ops_per_step": ops, "mean_op_us": mean_us},
    )


def _batch_move(f: StepFacts) -> NextMove | None:
    if f.busy_share is None or f.busy_share >= UNDERUSED_BUSY_SHARE:
        return None
    # What a larger batch fills is the idle time inside the step function's calls; the
    # host time between them (a loop's Python, a distributed iterator's work) is the
    # business of several steps per call (`steps_per_execution`, `step_fixes`).
    inside = f.function_share or 1.0
    idle = max(0.0, inside - f.busy_share)
    what = "the GPU" if f.device == "GPU" else "the compute threads"
    return NextMove(
        kind=ideas.BATCH_SIZE,
        summary=(
            f"{what.capitalize()} run kernels for only {percent(f.busy_share)} of the step: "
            "a larger batch gives each kernel more work per launch (scale the learning rate "
            "with it)"
        ),
        code="ds = ds.batch(2 * batch_size)  # and the learning rate, e.g. linearly",
        score=round(idle * 0.5, 4),
        evidence={"busy_share": f.busy_share, "step_ms": f.step_ms},
    )


def _spe_move(f: StepFacts) -> NextMove | None:
    share = f.host_overhead_share
    if not f.keras or share is None or share < HOST_OVERHEAD_SHARE:
        return None
    return NextMove(
        kind=ideas.STEPS_PER_EXECUTION,
        summary=(
            f"Keras spends {percent(share)} of the time on the host between steps "
            f"(callbacks, logs, dispatch): run {STEPS_PER_EXECUTION} steps per call"
        ),
        code=f"model.compile(optimizer, loss, steps_per_execution={STEPS_PER_EXECUTION})",
        score=round(share * 0.8, 4),
        evidence={"host_overhead_share": share, "step_function": f.step_function},
    )


def step_moves(facts: StepFacts, compute: float) -> tuple[NextMove, ...]:
    """Every move the facts support for a step whose compute takes `compute` of its time,
    best first, whatever the input share (the fix of a compute-bound step is the first)."""
    found = [
        precision_move(facts.device, facts.compute_capability, compute),
        _xla_move(facts, compute),
        _batch_move(facts),
        _spe_move(facts),
    ]
    return tuple(sorted((m for m in found if m is not None), key=lambda m: -(m.score or 0.0)))


def moves_from(
    facts: StepFacts, fractions: Mapping[str, float | None], input_share: float | None
) -> tuple[NextMove, ...]:
    """The next moves for the step, best first; none while the run is input-bound (or
    has no steps): then the input pipeline is the first move."""
    if input_share is None or input_band(input_share).input_bound:
        return ()
    compute = (fractions.get("device_compute" if facts.device == "GPU" else "host_compute")) or 0.0
    return step_moves(facts, compute)
