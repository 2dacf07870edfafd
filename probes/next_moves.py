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

Each move's `score` estimates the fraction of step time it could save, for ranking only.
No move is offered for an input-bound run (its first move is the pipeline). Pure: no
TensorFlow; `probes.analysis.next_moves(analysis)` is the entry point for the tuner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tftune.core.vocabulary import input_band
from tftune.probes.loop_work import KERAS_STEP_FUNCTIONS
from tftune.probes.stage_events import I64, op_type
from tftune.probes.stage_scan import union_of
from tftune.probes.steps import FUNCTION_CALL_RE, Steps
from tftune.probes.trace import HostTrace, Line, Plane

PS_PER_MS = 1e9
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


@dataclass(frozen=True, slots=True)
class NextMove:
    """One ranked move for the step (not the input pipeline)."""

    kind: str  # "precision" | "xla" | "batch_size" | "steps_per_execution"
    summary: str
    code: str
    score: float  # estimated fraction of step time saved, for ranking only
    evidence: Mapping[str, Any] = field(default_factory=dict)


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
                ok = np.array(
                    [
                        not p.event_names[m].lower().startswith(_COPY_PREFIXES)
                        for m in ln.metadata_id.tolist()
                    ],
                    dtype=bool,
                )
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
    for mid in set(line.metadata_id.tolist()):
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
    if not n:
        return StepFacts(
            device, 0, None, None, None, None, overhead, fn, fn in KERAS_STEP_FUNCTIONS, cap
        )
    ks, ke = _kernel_intervals(host, device)
    lo, hi = steps.start_ps, steps.end_ps
    inside = np.zeros(ks.size, dtype=bool)
    busy = 0
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        m = (ks >= a) & (ks < b)
        inside |= m
        busy += union_of([(ks[m], np.minimum(ke[m], b))])
    total = int(steps.duration_ps.sum())
    count = int(inside.sum())
    return StepFacts(
        device=device,
        steps=n,
        step_ms=round(total / n / PS_PER_MS, 3),
        ops_per_step=round(count / n, 1) if count else None,
        mean_op_us=round(float((ke[inside] - ks[inside]).mean()) / 1e6, 2) if count else None,
        busy_share=round(busy / total, 4) if total > 0 and count else None,
        host_overhead_share=overhead,
        step_function=fn,
        keras=fn in KERAS_STEP_FUNCTIONS,
        compute_capability=cap,
    )


def _precision_move(f: StepFacts, compute: float) -> NextMove:
    cap = f.compute_capability
    ev: dict[str, Any] = {"device": f.device, "compute_share": round(compute, 4)}
    if f.device == "GPU" and cap is not None:
        ev["compute_capability"] = f"{cap[0]}.{cap[1]}"
    if f.device == "GPU" and cap is not None and cap[0] < FP16_MIN_CC:
        policy, why, factor = (
            "mixed_float16",
            f"this GPU (compute capability {cap[0]}.{cap[1]}) has no tensor cores, so 16-bit "
            "mostly saves memory; measure before keeping it",
            0.05,
        )
    elif f.device == "GPU":
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
        kind="precision",
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
    limit = XLA_MAX_MEAN_OP_US["GPU" if f.device == "GPU" else "CPU"]
    if ops is None or mean_us is None or ops < XLA_MIN_OPS_PER_STEP or mean_us > limit:
        return None
    fn = f.step_function or "train_step"
    code = (
        "model.compile(optimizer, loss, jit_compile=True)"
        if f.keras
        else f"@tf.function(jit_compile=True)\ndef {fn}(batch):\n    ..."
    )
    return NextMove(
        kind="xla",
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
    idle = 1 - f.busy_share
    what = "the GPU" if f.device == "GPU" else "the compute threads"
    return NextMove(
        kind="batch_size",
        summary=(
            f"{what.capitalize()} run kernels for only {100 * f.busy_share:.0f}% of the step: "
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
        kind="steps_per_execution",
        summary=(
            f"Keras spends {100 * share:.0f}% of the time on the host between steps "
            f"(callbacks, logs, dispatch): run {STEPS_PER_EXECUTION} steps per call"
        ),
        code=f"model.compile(optimizer, loss, steps_per_execution={STEPS_PER_EXECUTION})",
        score=round(share * 0.8, 4),
        evidence={"host_overhead_share": share, "step_function": f.step_function},
    )


def moves_from(
    facts: StepFacts, fractions: Mapping[str, float | None], input_share: float | None
) -> tuple[NextMove, ...]:
    """The next moves for the step, best first; none while the run is input-bound (or
    has no steps): then the input pipeline is the first move."""
    if input_share is None or input_band(input_share).input_bound:
        return ()
    compute = (fractions.get("device_compute" if facts.device == "GPU" else "host_compute")) or 0.0
    found = [
        _precision_move(facts, compute),
        _xla_move(facts, compute),
        _batch_move(facts),
        _spe_move(facts),
    ]
    return tuple(sorted((m for m in found if m is not None), key=lambda m: -m.score))
