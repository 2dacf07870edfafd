"""Per-step time breakdown in XProf's input-pipeline-analyzer categories.

How time is attributed (the same rules as XProf's `xplane_to_step_events.cc` and
`event_span.cc`, so that the two tools can be compared):

* Every event on a consumer-side thread (the Python thread, `tf_Compute/*`,
  `tf_data_iterator_get_next/*`, ...) and on a GPU stream gets a category from its name.
  The tf.data producer threads (`tf_data_iterator_resource/*`,
  `tf_data_private_threadpool/*`) are not step time: they run alongside the steps, and
  the step only sees them as time spent waiting in `IteratorGetNext`.
* Where events overlap, the instant goes to the category with the highest priority
  (XProf's `EventType` order): device compute > output (device-to-host) >
  device-to-device > input wait > kernel launch > host-to-device > compilation > host
  compute. So a kernel running while the host waits for input counts as device compute,
  and a Python thread blocked in `IteratorGetNextOp::DoCompute` counts as input wait even
  though `TFE_Py_FastPathExecute_C` is open around it.
* Eager dispatch wrappers (`EagerExecute`, `EagerLocalExecute*`, `EagerKernelExecute`,
  `FunctionRun`) and the step markers themselves are containers, not compute: time only
  they cover is `other`, as XProf's "all other time".
* Only the part of an event inside the step's span counts.

`input_wait` is XProf's "host wait input"; XProf's "input" is `input_wait +
host_to_device`, which is `Breakdown.input_share`. Device-to-device copies and
collectives (XProf's "device to device" and "device collectives") are one more
category, `device_to_device`, an extension of the analysis JSON's `breakdown`; every
`<category>_ms` of a `per_step` row is a disjoint part of the step, and they sum to its
duration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tftune.core.analysis_trace import StepRow, Timeline, TimelineEvent, Track
from tftune.core.units import PS_PER_MS
from tftune.core.vocabulary import BREAKDOWN_CATEGORIES, is_host_to_device
from tftune.probes.traces.intervals import covered_in, merge
from tftune.probes.traces.stage_events import EXECUTOR_PROCESS
from tftune.probes.traces.steps import XPROF_MARKER_PREFIXES, Steps
from tftune.probes.traces.trace import HostTrace, Line, Plane

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


# Internal kinds, highest priority first (XProf EventType values in comments).
DEVICE_COMPUTE = "device_compute"  # DEVICE_COMPUTE_16/32 = 150/140
OUTPUT = "output"  # DEVICE_TO_HOST = 130
DEVICE_TO_DEVICE = "device_to_device"  # DEVICE_TO_DEVICE = 120, DEVICE_COLLECTIVES = 100
INPUT_WAIT = "input_wait"  # HOST_WAIT_INPUT = 110
KERNEL_LAUNCH = "kernel_launch"  # HOST_PREPARE = 90
HOST_TO_DEVICE = "host_to_device"  # HOST_TO_DEVICE = 80
COMPILATION = "compilation"  # HOST_COMPILE = 60
HOST_COMPUTE = "host_compute"  # HOST_COMPUTE = 10
PRIORITY = (
    DEVICE_COMPUTE,
    OUTPUT,
    DEVICE_TO_DEVICE,
    INPUT_WAIT,
    KERNEL_LAUNCH,
    HOST_TO_DEVICE,
    COMPILATION,
    HOST_COMPUTE,
)
_NOT_COUNTED = ""

# Threads whose work runs beside the steps rather than inside them.
PRODUCER_LINE_PREFIXES = ("tf_data_iterator_resource", "tf_data_private_threadpool")
CONSUMER_TF_DATA_LINES = ("tf_data_iterator_get_next",)
# XProf's "not real CPU compute" names (IsRealCpuCompute).
CONTAINER_PREFIXES = ("EagerExecute", "EagerLocalExecute", "EagerKernelExecute", "FunctionRun")
# GPU stream lines as the CUPTI collector names them ("Stream #7(MemcpyH2D)", ...);
# derived lines such as "XLA Ops" or "Launch Stats" repeat the same kernels.
STREAM_LINE_PREFIX = "Stream #"
# Copy names: the CUPTI collector's ("MemcpyD2H") and XProf's parser's ("MemcpyDToH");
# host-to-device copies are `core.vocabulary.is_host_to_device`.
_D2H = re.compile(r"^(memcpyd2h|memcpydtoh|cumemcpydtoh|cudamemcpydtoh)", re.IGNORECASE)
_D2D = re.compile(r"^(memcpyd2d|memcpydtod|memcpyp2p|nccl)", re.IGNORECASE)
# Host-side CUDA launch API calls (CUPTI callbacks) and TF's executor on a GPU host.
_LAUNCH = re.compile(r"^(cu|cuda)(LaunchKernel|LaunchCooperativeKernel|GraphLaunch)")
COMPILE_PREFIXES = ("XlaCompile", "xla::Compile", "CompileToPjRt", "TfrtCompile")

# Timeline extraction limits, so the JSON stays small on long traces.
TIMELINE_STEPS = 2
TIMELINE_MAX_TRACKS = 24
TIMELINE_MAX_EVENTS_PER_TRACK = 200


@dataclass(frozen=True, slots=True, eq=False)
class Breakdown:
    """Per-step time in each category, in picoseconds (`ps[kind][step]`)."""

    steps: Steps
    ps: dict[str, I64]
    h2d_bytes: I64
    has_device: bool

    def _total(self, kind: str) -> int:
        return int(self.ps[kind].sum())

    def fractions(self) -> dict[str, float | None]:
        """The analysis JSON's `breakdown`: each category's share of all step time."""
        total = int(self.steps.duration_ps.sum())
        if total <= 0:
            return {c: None for c in BREAKDOWN_CATEGORIES}
        return {c: round(self._total(c) / total, 4) for c in BREAKDOWN_CATEGORIES}

    @property
    def input_share(self) -> float | None:
        """XProf's input share: (host wait input + host-to-device) / step time."""
        total = int(self.steps.duration_ps.sum())
        if total <= 0:
            return None
        return (self._total(INPUT_WAIT) + self._total(HOST_TO_DEVICE)) / total

    def mean_ms(self) -> dict[str, float | None]:
        """Average milliseconds per step of each category."""
        n = len(self.steps)
        if not n:
            return {c: None for c in BREAKDOWN_CATEGORIES}
        return {c: self._total(c) / n / PS_PER_MS for c in BREAKDOWN_CATEGORIES}

    def per_step(self) -> list[dict[str, Any]]:
        """The analysis JSON's `per_step` rows (milliseconds, trace time base)."""
        return [row.to_json() for row in self.step_rows()]

    def step_rows(self) -> tuple[StepRow, ...]:
        """One row per step: its number, start, duration and the part of each category."""
        st = self.steps

        def ms(values: I64) -> list[float]:
            return np.round(values.astype(np.float64) / PS_PER_MS, 3).tolist()  # type: ignore[no-any-return]

        cats = BREAKDOWN_CATEGORIES
        by_step = zip(*(ms(self.ps[c]) for c in cats), strict=True)
        h2d: list[int | None] = self.h2d_bytes.tolist() if self.has_device else [None] * len(st)
        columns = zip(
            st.numbers.tolist(), ms(st.start_ps), ms(st.duration_ps), by_step, h2d, strict=True
        )
        return tuple(
            StepRow(step, start, duration, tuple(zip(cats, values, strict=True)), row_h2d)
            for step, start, duration, values, row_h2d in columns
        )


def _host_kind(name: str, has_device: bool, marker: str | None) -> str:
    if name.startswith(CONTAINER_PREFIXES) or name == marker:
        return _NOT_COUNTED
    if name.startswith(XPROF_MARKER_PREFIXES) and "/" not in name:
        return _NOT_COUNTED  # XProf treats these as step markers, never compute
    if is_host_to_device(name):
        return HOST_TO_DEVICE
    if name[:15].lower() == "iteratorgetnext":
        return INPUT_WAIT
    if has_device and (_LAUNCH.match(name) or name.startswith(EXECUTOR_PROCESS)):
        return KERNEL_LAUNCH
    if name.startswith(COMPILE_PREFIXES):
        return COMPILATION
    return HOST_COMPUTE


def device_kind(name: str) -> str:
    """The category of one GPU stream event, by name (XProf's ClassifyGpuEvent)."""
    if is_host_to_device(name):
        return HOST_TO_DEVICE
    if _D2H.match(name):
        return OUTPUT
    if _D2D.match(name):
        return DEVICE_TO_DEVICE
    return DEVICE_COMPUTE


def is_consumer_line(line: Line) -> bool:
    return not line.name.startswith(PRODUCER_LINE_PREFIXES)


def stream_lines(plane: Plane) -> tuple[Line, ...]:
    return tuple(ln for ln in plane.lines if ln.name.startswith(STREAM_LINE_PREFIX))


def _kinds(plane: Plane, line: Line, classify: Callable[[str], str]) -> npt.NDArray[np.int8]:
    """Per event, the index of its kind in PRIORITY, or -1 when not counted."""
    ids, inverse = np.unique(line.metadata_id, return_inverse=True)
    codes = np.empty(ids.size, dtype=np.int8)
    for j, mid in enumerate(ids.tolist()):
        kind = classify(plane.event_names.get(mid, ""))
        codes[j] = PRIORITY.index(kind) if kind else -1
    return codes[inverse.reshape(-1)]


def _memcpy_bytes(plane: Plane, line: Line, index: int) -> int:
    for key, value in plane.event_stats(line, index).items():
        if key == "memcpy_details" and isinstance(value, str):
            for part in value.replace("\n", " ").split():
                name, _, num = part.partition(":")
                if name in ("size", "num_bytes") and num.isdigit():
                    return int(num)
    return 0


def compute_breakdown(host: HostTrace, steps: Steps) -> Breakdown:
    """Attribute each step's time to the categories (see the module docstring)."""
    n = len(steps)
    a, b = steps.start_ps, steps.end_ps
    gpus = host.gpu_planes
    has_device = bool(gpus)
    ps = {k: np.zeros(n, dtype=np.int64) for k in BREAKDOWN_CATEGORIES}
    h2d_bytes = np.zeros(n, dtype=np.int64)
    if not n:
        return Breakdown(steps, ps, h2d_bytes, has_device)
    lo, hi = int(a.min()), int(b.max())

    per_kind: list[list[tuple[I64, I64]]] = [[] for _ in PRIORITY]

    def collect(plane: Plane, lines: Iterable[Line], classify: Callable[[str], str]) -> None:
        for line in lines:
            if not len(line):
                continue
            s, e = line.start_ps, line.start_ps + line.duration_ps
            in_window = (e > lo) & (s < hi)
            if not in_window.any():
                continue
            kinds = _kinds(plane, line, classify)
            for k in range(len(PRIORITY)):
                sel = in_window & (kinds == k)
                if sel.any():
                    per_kind[k].append((s[sel], e[sel]))

    host_plane = host.host_plane
    if host_plane is not None:
        marker = steps.source if steps.detection == "markers" else None
        collect(
            host_plane,
            (ln for ln in host_plane.lines if is_consumer_line(ln)),
            lambda name: _host_kind(name, has_device, marker),
        )
    for gpu in gpus:
        lines = stream_lines(gpu)
        collect(gpu, lines, device_kind)
        for line in lines:
            for idx in np.flatnonzero(
                np.isin(line.metadata_id, gpu.metadata_ids(is_host_to_device))
            ).tolist():
                start = int(line.start_ps[idx])
                hit = np.flatnonzero((a <= start) & (start < b))
                if hit.size:
                    h2d_bytes[hit[0]] += _memcpy_bytes(gpu, line, idx)

    # Time claimed by the k highest-priority kinds; each kind gets what it adds.
    claimed_s = np.zeros(0, dtype=np.int64)
    claimed_e = np.zeros(0, dtype=np.int64)
    before = np.zeros(n, dtype=np.int64)
    for k, kind in enumerate(PRIORITY):
        if not per_kind[k]:
            continue
        s = np.concatenate([claimed_s, *(p[0] for p in per_kind[k])])
        e = np.concatenate([claimed_e, *(p[1] for p in per_kind[k])])
        claimed_s, claimed_e = merge(s, e)
        now = covered_in((claimed_s, claimed_e), a, b)
        ps[kind] = now - before
        before = now
    ps["other"] = steps.duration_ps - before
    return Breakdown(steps, ps, h2d_bytes, has_device)


# -- timeline ------------------------------------------------------------------------


def _track_kind(plane: Plane, line: Line) -> str:
    if plane.name != "/host:CPU":
        return "device"
    return "tf_data" if line.name.startswith("tf_data") else "host"


def representative_steps(steps: Steps, count: int = TIMELINE_STEPS) -> tuple[int, int]:
    """Index range [first, last) of `count` consecutive steps around the median one."""
    n = len(steps)
    if n <= count:
        return 0, n
    median = int(np.argsort(steps.duration_ps, kind="stable")[n // 2])
    first = min(median, n - count)
    return first, first + count


def extract_timeline(
    host: HostTrace,
    steps: Steps,
    max_tracks: int = TIMELINE_MAX_TRACKS,
    max_events: int = TIMELINE_MAX_EVENTS_PER_TRACK,
) -> Timeline | None:
    """The events of a few representative steps, per thread and stream, size-capped.

    Within a track the longest events are kept (they are what the eye needs); tracks
    with the most busy time come first. Times are ms on the trace time base.
    """
    first, last = representative_steps(steps)
    if first == last:
        return None
    lo, hi = int(steps.start_ps[first]), int(steps.end_ps[last - 1])
    candidates: list[tuple[int, Track]] = []
    for plane in (p for p in (host.host_plane, *host.gpu_planes) if p is not None):
        lines = plane.lines if plane.name == "/host:CPU" else stream_lines(plane)
        for line in lines:
            s, d = line.start_ps, line.duration_ps
            idx = np.flatnonzero((s < hi) & (s + d > lo) & (d > 0))
            if not idx.size:
                continue
            busy = int(d[idx].sum())
            keep = idx[np.argsort(-d[idx], kind="stable")[:max_events]]
            keep = np.sort(keep)
            events = tuple(
                TimelineEvent(
                    round(int(s[i]) / PS_PER_MS, 4),
                    round(int(d[i]) / PS_PER_MS, 4),
                    plane.event_names.get(int(line.metadata_id[i]), "?"),
                )
                for i in keep.tolist()
            )
            track = Track(line.name, _track_kind(plane, line), events, int(idx.size - keep.size))
            candidates.append((busy, track))
    candidates.sort(key=lambda t: -t[0])
    return Timeline(
        start_ms=round(lo / PS_PER_MS, 4),
        end_ms=round(hi / PS_PER_MS, 4),
        steps=tuple(int(x) for x in steps.numbers[first:last]),
        tracks=tuple(t for _, t in candidates[:max_tracks]),
    )
