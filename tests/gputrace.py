"""Build XSpace traces by hand, following the XPlane conventions of real TF profiles.

GPU planes cannot be recorded on the CPU-only machines the tests run on, so the GPU tests
build them here with the project's own schema (`probes/_schema.xspace_class()`), using
the names the CUPTI collector and XProf's converter use:

* host plane `/host:CPU`, thread line `python` with step markers
  `train` (stats `step_num`, `_r`), and CUDA API callbacks (`cuLaunchKernel`,
  `cuMemcpyHtoDAsync_v2`) carrying a `correlation_id` stat;
* device plane `/device:GPU:0` with device-capability plane stats (`devcap_*`), stream
  lines named `Stream #<id>(<kinds>)`, kernels with `correlation_id`, `kernel_details`,
  `context_id`, and copies named `MemcpyH2D`/`MemcpyD2H` with a `memcpy_details` stat
  whose value is a reference to a stat-metadata string
  `kind_src:pageable kind_dst:device size:<bytes> dest:<device> async:<0|1>`.

`XSpaceBuilder` is also what the handwritten step/breakdown tests use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from google.protobuf import message_factory

from tftune.probes.traces._schema import xevent_class


@cache
def xspace_class() -> Any:
    """The full XSpace message class of tftune's own schema (from the descriptor pool
    its XEvent class lives in): what these traces are written with."""
    pool = xevent_class().DESCRIPTOR.file.pool
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tftune.xplane.XSpace"))


def event_bytes(
    mid: int, offset: int, duration: int, stats: list[tuple[int, tuple[str | None, object]]]
) -> bytes:
    """One XEvent serialized; each stat as (metadata id, (its value's field or None, the
    value)): the bytes the wire decoders' tests build lines and event runs from."""
    ev = xevent_class()()
    ev.metadata_id, ev.offset_ps, ev.duration_ps = mid, offset, duration
    for stat_id, (field_name, value) in stats:
        stat = ev.stats.add()
        stat.metadata_id = stat_id
        if field_name is not None:
            setattr(stat, field_name, value)
    return bytes(ev.SerializeToString())


US = 1_000_000  # picoseconds per microsecond
MS = 1_000_000_000  # picoseconds per millisecond


@dataclass
class PlaneBuilder:
    raw: Any
    _events: dict[str, int] = field(default_factory=dict)
    _stats: dict[str, int] = field(default_factory=dict)
    _lines: dict[str, Any] = field(default_factory=dict)

    def event_id(self, name: str) -> int:
        if name not in self._events:
            mid = len(self._events) + 1
            self._events[name] = mid
            self.raw.event_metadata[mid].id = mid
            self.raw.event_metadata[mid].name = name
        return self._events[name]

    def stat_id(self, name: str) -> int:
        if name not in self._stats:
            sid = len(self._stats) + 1_000
            self._stats[name] = sid
            self.raw.stat_metadata[sid].id = sid
            self.raw.stat_metadata[sid].name = name
        return self._stats[name]

    def line(self, name: str, line_id: int | None = None, timestamp_ns: int = 0) -> Any:
        if name not in self._lines:
            ln = self.raw.lines.add()
            ln.id = line_id if line_id is not None else len(self._lines) + 1
            ln.name = name
            ln.timestamp_ns = timestamp_ns
            self._lines[name] = ln
        return self._lines[name]

    def _set(self, stat: Any, name: str, value: Any, ref: bool = False) -> None:
        stat.metadata_id = self.stat_id(name)
        if ref:
            stat.ref_value = self.stat_id(str(value))
        elif isinstance(value, bool):
            stat.int64_value = int(value)
        elif isinstance(value, int):
            if value >= 0:
                stat.uint64_value = value
            else:
                stat.int64_value = value
        elif isinstance(value, float):
            stat.double_value = value
        elif isinstance(value, bytes):
            stat.bytes_value = value
        else:
            stat.str_value = str(value)

    def event(
        self,
        line: str,
        name: str,
        start_ps: int,
        duration_ps: int,
        refs: dict[str, str] | None = None,
        **stats: Any,
    ) -> Any:
        ev = self.line(line).events.add()
        ev.metadata_id = self.event_id(name)
        ev.offset_ps = start_ps
        ev.duration_ps = duration_ps
        for key, value in stats.items():
            self._set(ev.stats.add(), key, value)
        for key, value in (refs or {}).items():
            self._set(ev.stats.add(), key, value, ref=True)
        return ev

    def plane_stat(self, name: str, value: Any) -> None:
        self._set(self.raw.stats.add(), name, value)


class XSpaceBuilder:
    def __init__(self) -> None:
        self.space = xspace_class()()
        self._planes: dict[str, PlaneBuilder] = {}

    def plane(self, name: str) -> PlaneBuilder:
        if name not in self._planes:
            raw = self.space.planes.add()
            raw.id = len(self._planes)
            raw.name = name
            self._planes[name] = PlaneBuilder(raw)
        return self._planes[name]

    def bytes(self) -> bytes:
        return bytes(self.space.SerializeToString())

    def write(self, run_dir: Path, host: str = "gpuhost") -> Path:
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / f"{host}.xplane.pb"
        path.write_bytes(self.bytes())
        return path


# Device capability stats as the GPU tracer puts them on each `/device:GPU:N` plane.
GPU_PLANE_STATS: dict[str, Any] = {
    "devcap_clock_rate_khz": 1_410_000,
    "devcap_core_count": 108,
    "devcap_memory_bandwidth": 1_555_000_000_000,
    "devcap_memory_size": 42_314_694_656,
    "devcap_compute_cap_major": 8,
    "devcap_compute_cap_minor": 0,
}
COMPUTE_STREAM = "Stream #7(Compute)"
H2D_STREAM = "Stream #14(MemcpyH2D)"
D2H_STREAM = "Stream #15(MemcpyD2H)"


@dataclass(frozen=True)
class GpuStepSpec:
    """One synthetic GPU training step (all times in microseconds)."""

    wait_us: float = 3_000  # host blocked in IteratorGetNext
    h2d_us: float = 2_000  # device MemcpyH2D of the batch
    h2d_bytes: int = 64 << 20
    kernels_us: tuple[float, ...] = (1_500, 2_500, 1_000)
    d2h_us: float = 200
    gap_us: float = 100  # launch latency between copies and kernels


@dataclass(frozen=True)
class GpuExpect:
    """What a correct reader must find in the trace `gpu_trace` built."""

    steps: int
    step_ps: list[int]
    wait_ps: list[int]
    h2d_ps: list[int]
    kernel_ps: list[int]
    d2h_ps: list[int]
    h2d_bytes: list[int]
    device_span_ps: list[int]  # first copy start to last copy end, per step


def gpu_trace(
    n_steps: int = 8,
    spec: GpuStepSpec = GpuStepSpec(),
    markers: bool = True,
    h2d_name: str = "MemcpyH2D",
    d2h_name: str = "MemcpyD2H",
) -> tuple[XSpaceBuilder, GpuExpect]:
    """A host+GPU trace of `n_steps` steps, each: wait for input, copy H2D, kernels, D2H.

    Device work is serialised inside the step (the host syncs at the end), so the
    expected per-step device times are exact sums. The copy names default to what the
    CUPTI collector writes (`MemcpyH2D`); XProf's name parser expects `MemcpyHToD`, so
    tests can build both.
    """
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    gpu = b.plane("/device:GPU:0")
    for key, value in GPU_PLANE_STATS.items():
        gpu.plane_stat(key, value)
    host.line("python", line_id=101)
    for name, lid in ((COMPUTE_STREAM, 7), (H2D_STREAM, 14), (D2H_STREAM, 15)):
        gpu.line(name, line_id=lid)
    t = 1 * MS
    corr = 1
    exp = GpuExpect(n_steps, [], [], [], [], [], [], [])
    for step in range(n_steps):
        start = t
        wait = int(spec.wait_us * US)
        host.event("python", "EagerLocalExecute: IteratorGetNext", t, wait + 5 * US)
        host.event("python", "IteratorGetNextOp::DoCompute", t + 1 * US, wait)
        t += wait + 10 * US
        # Host side of the copy: the CUDA API call that enqueues it.
        h2d = int(spec.h2d_us * US)
        t_copy = t
        host.event("python", "cuMemcpyHtoDAsync_v2", t, 20 * US, correlation_id=corr)
        gpu.event(
            H2D_STREAM,
            h2d_name,
            t + 5 * US,
            h2d,
            refs={
                "memcpy_details": (
                    f"kind_src:pageable kind_dst:device size:{spec.h2d_bytes} dest:0 async:1"
                )
            },
            correlation_id=corr,
            context_id=1,
            device_id=0,
        )
        corr += 1
        dev_t = t + 5 * US + h2d + int(spec.gap_us * US)
        t += 30 * US
        kernel_total = 0
        for k, dur_us in enumerate(spec.kernels_us):
            host.event("python", "cuLaunchKernel", t, 8 * US, correlation_id=corr)
            dur = int(dur_us * US)
            gpu.event(
                COMPUTE_STREAM,
                f"volta_sgemm_128x64_nn_{k}",
                dev_t,
                dur,
                refs={
                    "kernel_details": "regs:128 static_shared:0 dynamic_shared:0 "
                    "grid:80,1,1 block:256,1,1 occ_pct:50.0"
                },
                correlation_id=corr,
                context_id=1,
                device_id=0,
            )
            kernel_total += dur
            dev_t += dur + int(spec.gap_us * US)
            corr += 1
            t += 10 * US
        d2h = int(spec.d2h_us * US)
        host.event("python", "cuMemcpyDtoHAsync_v2", t, 10 * US, correlation_id=corr)
        gpu.event(
            D2H_STREAM,
            d2h_name,
            dev_t,
            d2h,
            refs={"memcpy_details": "kind_src:device kind_dst:pageable size:4 dest:0 async:0"},
            correlation_id=corr,
            context_id=1,
            device_id=0,
        )
        corr += 1
        end = max(t + 10 * US, dev_t + d2h) + 50 * US
        # The host waits for the device at the end of the step (a sync), inside the step.
        if markers:
            host.event("python", "train", start, end - start, step_num=step, _r=1)
        exp.step_ps.append(end - start)
        exp.wait_ps.append(wait)
        exp.h2d_ps.append(h2d)
        exp.kernel_ps.append(kernel_total)
        exp.d2h_ps.append(d2h)
        exp.h2d_bytes.append(spec.h2d_bytes)
        exp.device_span_ps.append(dev_t + d2h - (t_copy + 5 * US))
        t = end + 20 * US
    # Events of a line must be in time order, as the profiler writes them.
    for pb in (host, gpu):
        for ln in pb.raw.lines:
            evs = sorted(ln.events, key=lambda e: (e.offset_ps, -e.duration_ps))
            copies = [type(e)() for e in evs]
            for c, e in zip(copies, evs, strict=True):
                c.CopyFrom(e)
            del ln.events[:]
            ln.events.extend(copies)
    return b, exp
