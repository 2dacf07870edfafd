"""The traces the golden analyses are made from: fixed content, so the same bytes each run.

Written with the project's own XSpace schema (tests/gputrace.py), in the conventions of
real TF profiles. A trace recorded live with TensorFlow differs from run to run (times,
thread ids, run names), so none is used here. Each builder returns a trace; what
`tftune profile` records beside one (the call sites, the step clock's figures) is a
constant next to its builder.
"""

from __future__ import annotations

from gputrace import MS, US, GpuStepSpec, XSpaceBuilder, gpu_trace

from tftune.core.training import TrainingTime
from tftune.probes.live.epoch_stall import PipelineStage, diagnose
from tftune.probes.traces.callsites import RecordedSite

ROOT = "Iterator::Root"
PREFETCH = f"{ROOT}::Prefetch"
MAP_AND_BATCH = f"{PREFETCH}::MapAndBatch"
PARALLEL_MAP = f"{PREFETCH}::ParallelMapV2"
RUNNER = "tf_data_iterator_resource/9"
POOL = "tf_data_private_threadpool/5"


def in_time_order(b: XSpaceBuilder) -> XSpaceBuilder:
    """Each line's events sorted by start (longest first on a tie), as the profiler
    writes them."""
    for plane in b.space.planes:
        for line in plane.lines:
            events = sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps))
            copies = [type(e)() for e in events]
            for copy, e in zip(copies, events, strict=True):
                copy.CopyFrom(e)
            del line.events[:]
            line.events.extend(copies)
    return b


def cpu_pyfunc(steps: int = 12, batch: int = 8, call_us: int = 4_000) -> XSpaceBuilder:
    """A CPU-only training loop starved by a `tf.py_function` map fused with its batch
    (`MapAndBatch`, parallelism 1): each 40 ms step waits 34 ms for the next batch, whose
    8 Python calls run one after another on the private threadpool."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    host.line("python", line_id=1)
    period, wait = 40 * MS, 34 * MS
    for i in range(steps):
        t = MS + i * period
        host.event("python", "train", t, period - MS, step_num=i, _r=1)
        host.event("python", "EagerLocalExecute: IteratorGetNext", t + 10 * US, wait + 20 * US)
        host.event("python", "IteratorGetNextOp::DoCompute", t + 20 * US, wait)
        host.event(
            "python", ROOT, t + 30 * US, wait - 20 * US, id=1, cpu_budget=2, threadpool_size=2
        )
        host.event(
            "python",
            PREFETCH,
            t + 40 * US,
            wait - 40 * US,
            id=2,
            parent_id=1,
            buffer_limit=1,
            autotune=1,
        )
        host.event("python", "MatMul", t + wait + 200 * US, 4 * MS)  # the step's own work
        start = t - 2 * MS
        produce = batch * call_us * US + 400 * US
        ev = host.event(
            RUNNER,
            MAP_AND_BATCH,
            start,
            produce,
            id=3,
            parent_id=2,
            parallelism=1,
            autotune=0,
            batch_size=batch,
        )
        host._set(ev.stats.add(), "name", "fused(MapDataset:1,BatchDatasetV2:2)")
        for k in range(batch):
            c = start + 100 * US + k * call_us * US
            host.event(RUNNER, f"{MAP_AND_BATCH}::Range", c, 20 * US, id=4, parent_id=3)
            call = 1_000 + i * batch + k
            run_ps = call_us * US
            host.event(
                RUNNER, "InstantiatedCapturedFunction::Run", c + 30 * US, run_ps - 60 * US, id=call
            )
            host.event(POOL, "ExecutorState::Process", c + 40 * US, run_ps - 80 * US, id=call)
            host.event(POOL, "EagerPyFunc:EagerPyFunc", c + 50 * US, run_ps - 100 * US)
    return in_time_order(b)


CPU_PYFUNC_SITES = (
    RecordedSite("train.py:18", "map", "slow_tokenize"),
    RecordedSite("train.py:19", "batch"),
    RecordedSite("train.py:19", "prefetch"),
)


def cpu_epoch_stall(steps: int = 10) -> XSpaceBuilder:
    """Steady CPU steps that are the model's own work (a 20 ms MatMul each), fed by a
    parallel map whose prefetch buffer is full: the step hardly waits. The epoch-start
    stall is in the step clock's record beside the trace (`EPOCH_STALL`), not in these
    steps."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    host.line("python", line_id=1)
    period = 21 * MS
    for i in range(steps):
        t = MS + i * period
        host.event("python", "train", t, period - 200 * US, step_num=i, _r=1)
        host.event("python", "EagerLocalExecute: IteratorGetNext", t + 10 * US, 120 * US)
        host.event("python", "IteratorGetNextOp::DoCompute", t + 20 * US, 100 * US)
        host.event("python", ROOT, t + 30 * US, 80 * US, id=1, cpu_budget=8, threadpool_size=8)
        host.event(
            "python",
            PREFETCH,
            t + 40 * US,
            60 * US,
            id=2,
            parent_id=1,
            buffer_limit=4,
            autotune=1,
        )
        host.event("python", "MatMul", t + 300 * US, 20 * MS)
        for k in range(2):  # two elements in flight on the runner, as parallelism 2 does
            start = t + k * 9 * MS
            ev = host.event(
                RUNNER,
                PARALLEL_MAP,
                start,
                8 * MS,
                id=3,
                parent_id=2,
                parallelism=2,
                autotune=1,
            )
            host._set(ev.stats.add(), "name", "ParallelMapDatasetV2:1")
            call = 2_000 + 2 * i + k
            host.event(
                RUNNER, "InstantiatedCapturedFunction::Run", start + 50 * US, 7 * MS, id=call
            )
            host.event(POOL, "ExecutorState::Process", start + 60 * US, 6_900 * US, id=call)
            host.event(POOL, "DecodeJpeg:DecodeJpeg", start + 100 * US, 6 * MS)
    return in_time_order(b)


# The step clock of that profiled run: each epoch's first step waits 14 s while the
# shuffle buffer behind the map refills through it (`probes.live.epoch_stall.diagnose`).
EPOCH_CHAIN = (
    PipelineStage("source"),
    PipelineStage("map", "train.py:10"),
    PipelineStage("shuffle", "train.py:11"),
    PipelineStage("batch", "train.py:12"),
)
EPOCH_STALL = TrainingTime(
    preamble_s=6.2,
    epoch_stall_s=14.0,
    steps_per_epoch=697,
    epochs_seen=3,
    stall_share=0.45,
    stall=diagnose(14.0, 697, 0.45, EPOCH_CHAIN),
)


def gpu_h2d() -> XSpaceBuilder:
    """A GPU step dominated by its 4 ms host-to-device copy of a 64 MiB batch."""
    b, _ = gpu_trace(spec=GpuStepSpec(wait_us=500, h2d_us=4_000, kernels_us=(1_000, 1_000)))
    return b


def gpu_compute() -> XSpaceBuilder:
    """A GPU step that is all kernels (16 ms a step): compute-bound, not input-bound."""
    spec = GpuStepSpec(wait_us=50, h2d_us=50, kernels_us=(8_000, 8_000), d2h_us=20)
    b, _ = gpu_trace(spec=spec)
    return b
