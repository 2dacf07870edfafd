"""When one host is not enough: how much more CPU the input pipeline needs.

One arithmetic (`size_service`), fed from two places:

- **a tuning run** (`tftune optimize`'s bound analysis): the pipeline alone is drained
  and the child measures its process CPU time against the elements it delivered over a
  short window (`CpuMeter`, reported to the parent as a typed `CpuUsage` event); the
  model alone gives the rate to reach;
- **a trace** (`tftune analyze`, `sizing_from_trace`): the busy time of the threads
  tf.data owns (``tf_data_*`` lines) over the steps, against the step time less the
  input wait (the model's own time per step).

Both give a per-core rate of the pipeline (units per core-second, measured) and a rate
the model consumes; the pipeline needs ``model rate / per-core rate`` cores, and the
sentence says how many more hosts like this one that is.

The figures are rounded as the JSON writes them, and the sentence worded, here; the
types (`core.sizing`) only hold them. That arithmetic holds only for a pipeline whose
limit is CPU. A pipeline is not sized (`not_sized`, with the reason and what to do
instead) when it runs Python functions (`py_function`, `numpy_function`,
`from_generator`: a tf.data service worker cannot run them, they run only in the program
that defined them; where they wait rather than compute, a latency-bound read, they need
calls in flight, not cores), or when at its best measured config it left this host's
cores idle (`sizing_at_best`: then the limit is not CPU). Nothing here imports
TensorFlow.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tftune.core.sizing import NotSized, ServiceSizing, Unsized
from tftune.core.units import PS_PER_S
from tftune.probes.traces.intervals import union_ps

# The pipeline's busy cores at or above this share of the host's are "saturated": a
# better config cannot find idle cores on this host.
SATURATED_SHARE = 0.8
# `CpuMeter`: elements before this much time are warm-up (threads starting, buffers
# filling); a report after each sample period (a trial's windows can be short).
CPU_WARMUP_S = 0.5
CPU_SAMPLE_S = 0.5
# A pipeline within this share of the model's rate keeps up (noise, not a shortfall).
KEEPS_UP_SHARE = 0.95


@dataclass(frozen=True, slots=True)
class CpuUsage:
    """What a drained pipeline used: the process's busy cores (CPU time over wall time)
    and the elements it delivered per second, over the same span (`CpuMeter`)."""

    busy_cores: float
    elements_per_s: float

    def to_json(self) -> dict[str, float]:
        return {"busy_cores": self.busy_cores, "elements_per_s": self.elements_per_s}

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> CpuUsage | None:
        busy, rate = raw.get("busy_cores"), raw.get("elements_per_s")
        if not isinstance(busy, (int, float)) or not isinstance(rate, (int, float)):
            return None
        return CpuUsage(float(busy), float(rate))


def _sizing_sentence(
    unit: str,
    per_core: float,
    busy_cores: float,
    host_cores: int,
    model_rate: float,
    needed: float,
    host_best: float,
    saturated: bool,
    more_workers: int,
) -> str:
    """The sizing in one line for the reports (from the unrounded figures)."""
    u = unit
    if more_workers == 0:
        return (
            f"one host is enough: the pipeline delivers {per_core:,.1f} {u}/s "
            f"per busy core, so this host's {host_cores} cores can reach "
            f"{host_best:,.1f} {u}/s against the model's "
            f"{model_rate:,.1f} {u}/s"
        )
    workers = "worker" if more_workers == 1 else "workers"
    need = (
        f"about {more_workers} more {workers} like this host ({host_cores} "
        f"cores each) to reach the model's rate ({model_rate:,.1f} {u}/s)"
    )
    cost = (
        f"the pipeline delivers {per_core:,.1f} {u}/s per busy core and needs "
        f"{needed:,.1f} cores; this host peaks near {host_best:,.1f} "
        f"{u}/s (a tf.data service on more hosts: tftune data-service)"
    )
    if saturated:
        return f"one host is not enough: {need}: {cost}"
    return (
        f"one host will not be enough: the pipeline kept {busy_cores:.1f} of "
        f"{host_cores} cores busy, so tune it first; even with every core busy, "
        f"{need}: {cost}"
    )


_UNSIZED_WHY = {
    Unsized.PYTHON: (
        "the pipeline runs Python functions ({what}), and a tf.data service worker cannot "
        "run them: a Python function runs only in the program that defined it. Replace "
        "them with TensorFlow ops first (then the service can be sized)"
    ),
    Unsized.WAITING: (
        "the pipeline's Python functions ({what}) wait (storage, network, sleeps) rather "
        "than compute, so it needs more calls in flight on this host (num_parallel_calls "
        "with a larger private_threadpool_size), not more cores; and a tf.data service "
        "worker could not run them: a Python function runs only in the program that "
        "defined it"
    ),
    Unsized.IDLE_CORES: (
        "at its best config the pipeline kept only {busy:.1f} of this host's {cores} cores "
        "busy, so CPU is not what limits it: it waits (I/O, sleeps) or holds the GIL in "
        "Python, and workers elsewhere would add cores it does not use (and cannot run "
        "Python functions at all). Raise the calls in flight (num_parallel_calls with "
        "private_threadpool_size) and replace Python functions with TensorFlow ops"
    ),
}


def not_sized(
    unit: str,
    reason: Unsized,
    busy_cores: float | None,
    host_cores: int | None,
    what: Sequence[str] = (),
) -> NotSized:
    """No sizing, and why: `what` are the Python functions (their APIs), where they are
    the cause."""
    why = _UNSIZED_WHY[reason].format(
        what=", ".join(what) or "py_function, numpy_function or from_generator",
        busy=busy_cores or 0.0,
        cores=host_cores,
    )
    return NotSized(
        unit=unit,
        reason=reason,
        busy_cores=None if busy_cores is None else round(busy_cores, 3),
        host_cores=host_cores,
        sentence=f"no tf.data service sizing: {why}",
    )


def size_service(
    *,
    pipeline_rate: float,
    busy_cores: float,
    model_rate: float,
    host_cores: int,
    unit: str,
) -> ServiceSizing | None:
    """The sizing from measured figures; None when they cannot give one (no busy core,
    no rate). The pipeline's per-core rate is ``pipeline_rate / busy_cores``; at best it
    uses every core of a host. Hosts needed in all: ``ceil(cores needed / host cores)``
    (a pipeline within `KEEPS_UP_SHARE` of the model keeps up), this one included."""
    if busy_cores <= 0 or pipeline_rate <= 0 or model_rate <= 0 or host_cores < 1:
        return None
    per_core = pipeline_rate / busy_cores
    needed = model_rate / per_core
    host_best = per_core * host_cores
    hosts = 1 if host_best >= KEEPS_UP_SHARE * model_rate else math.ceil(needed / host_cores)
    saturated, more = busy_cores >= SATURATED_SHARE * host_cores, max(0, hosts - 1)
    return ServiceSizing(
        unit=unit,
        per_core_rate=round(per_core, 3),
        busy_cores=round(busy_cores, 3),
        host_cores=host_cores,
        model_rate=round(model_rate, 3),
        pipeline_rate=round(pipeline_rate, 3),
        cores_needed=round(needed, 3),
        host_best_rate=round(host_best, 3),
        saturated=saturated,
        more_workers=more,
        sentence=_sizing_sentence(
            unit, per_core, busy_cores, host_cores, model_rate, needed, host_best, saturated, more
        ),
    )


def sizing_at_best(
    *,
    pipeline_rate: float,
    busy_cores: float,
    model_rate: float,
    host_cores: int,
    unit: str,
) -> ServiceSizing | NotSized | None:
    """The sizing of a pipeline measured at its best config (the screen's best): where it
    kept fewer than `SATURATED_SHARE` of the host's cores busy there and still falls short
    of the model, CPU is not what limits it (`Unsized.IDLE_CORES`: a latency-bound read, a
    GIL-bound Python function), and no hosts are counted; else `size_service`."""
    idle = busy_cores < SATURATED_SHARE * host_cores
    if idle and busy_cores > 0 and pipeline_rate < KEEPS_UP_SHARE * model_rate:
        return not_sized(unit, Unsized.IDLE_CORES, busy_cores, host_cores)
    return size_service(
        pipeline_rate=pipeline_rate,
        busy_cores=busy_cores,
        model_rate=model_rate,
        host_cores=host_cores,
        unit=unit,
    )


# --- a tuning run: the pipeline-alone trial's child measures itself ---------------------


def process_cpu_s() -> float:
    """CPU time of this process, every thread (user + system)."""
    t = os.times()
    return t.user + t.system


class CpuMeter:
    """Counts the elements a drained pipeline delivers. After `CPU_WARMUP_S` it marks
    the process CPU time and the count; every `CPU_SAMPLE_S` after that it hands
    `report` the `CpuUsage` since the mark, so that a trial stopped at any time has its
    latest (the parent keeps the last). Cheap per element: one clock read."""

    def __init__(
        self,
        report: Callable[[CpuUsage], None] | None,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = process_cpu_s,
    ) -> None:
        self._report, self._clock, self._cpu = report, clock, cpu
        self._t0 = self._last = clock()
        self._mark: tuple[float, float, int] | None = None
        self._count = 0
        self.reports = 0

    def tick(self) -> None:
        if self._report is None:
            return
        self._count += 1
        now = self._clock()
        if self._mark is None:
            if now - self._t0 >= CPU_WARMUP_S:
                self._mark = (now, self._cpu(), self._count)
                self._last = now
            return
        if now - self._last < CPU_SAMPLE_S:
            return
        self._last = now
        t, c, n = self._mark
        busy = (self._cpu() - c) / (now - t)
        if busy > 0:
            self.reports += 1
            self._report(CpuUsage(busy, (self._count - n) / (now - t)))


# --- a trace: tf.data threads' busy time against the step time ------------------------

TF_DATA_LINE_PREFIX = "tf_data"


def tf_data_busy_ps(lines: Any, lo: int, hi: int) -> int:
    """Busy time (core-picoseconds) of the host plane's tf.data threads within [lo, hi):
    per thread, the union of its events (a stage inside its parent counts once)."""
    total = 0
    for line in lines:
        if not str(line.name).startswith(TF_DATA_LINE_PREFIX) or not len(line):
            continue
        total += union_ps(line.start_ps, line.end_ps, lo, hi)
    return total


def sizing_from_trace(
    *,
    lines: Any,
    step_start_ps: Any,
    step_end_ps: Any,
    input_wait_share: float | None,
    host_cores: int | None,
) -> ServiceSizing | None:
    """The sizing in steps/s from a trace's steps and its host plane's lines: the
    pipeline's busy cores are the tf.data threads' busy time over the steps' span; it
    delivers as many steps as were taken; the model's rate is one step per step time
    less the input wait. None without steps, cores or tf.data threads."""
    n = len(step_start_ps)
    if n == 0 or host_cores is None or input_wait_share is None:
        return None
    lo, hi = int(np.min(step_start_ps)), int(np.max(step_end_ps))
    span = hi - lo
    if span <= 0:
        return None
    busy = tf_data_busy_ps(lines, lo, hi) / span
    step_s = float(np.mean(np.asarray(step_end_ps) - np.asarray(step_start_ps))) / PS_PER_S
    model_step_s = step_s * (1.0 - min(max(input_wait_share, 0.0), 1.0))
    if model_step_s <= 0:
        return None
    return size_service(
        pipeline_rate=n / (span / PS_PER_S),
        busy_cores=busy,
        model_rate=1.0 / model_step_s,
        host_cores=host_cores,
        unit="steps",
    )


def trace_sizing(
    host: Any,
    steps: Any,
    input_wait_share: float | None,
    cores: object,
    unsized: NotSized | None = None,
) -> ServiceSizing | NotSized | None:
    """The analysis JSON's ``service_sizing`` (`sizing_from_trace`), None when the trace
    cannot give one (no host plane, no steps, no core count). `unsized`: the pipeline's
    limit is not CPU (`probes.advice.findings` tells it from the stages), so that is said instead
    of any count of hosts."""
    if unsized is not None:
        return unsized
    plane = host.host_plane
    if plane is None or not isinstance(cores, int) or cores < 1:
        return None
    sizing = sizing_from_trace(
        lines=plane.lines,
        step_start_ps=steps.start_ps,
        step_end_ps=steps.end_ps,
        input_wait_share=input_wait_share,
        host_cores=cores,
    )
    return sizing
