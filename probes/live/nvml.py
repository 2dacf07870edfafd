"""GPU utilization and memory through NVML, read-only, sampled by a background thread.

The reader is injectable so tests run without a GPU. When NVML cannot be used the sampler
says why (`NotMeasured`); a figure that was not measured is never reported as 0. Nothing
here changes a device setting: only ``nvmlDeviceGet*`` queries are made.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_INTERVAL_S = 0.2


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of one device."""

    index: int
    utilization: float  # fraction of the sample period a kernel was running, 0..1
    memory_used_mb: float
    memory_total_mb: float


@dataclass(frozen=True, slots=True)
class GpuFigures:
    """What the sampler saw over a window: mean utilization, peak memory."""

    devices: tuple[int, ...]
    samples: int
    utilization: float
    memory_used_mb: float
    memory_total_mb: float


@dataclass(frozen=True, slots=True)
class NotMeasured:
    """A figure that could not be measured, with the reason (shown, never as 0)."""

    reason: str

    def __str__(self) -> str:
        return f"not measured ({self.reason})"


class NvmlUnavailable(Exception):
    """Raised by a reader when NVML cannot be used; the message is the reason."""


class NvmlReader(Protocol):
    """Reads every visible device once. Raises `NvmlUnavailable` when it cannot."""

    def read(self) -> Sequence[GpuSample]: ...

    def close(self) -> None: ...


def _visible_indices(count: int) -> list[int]:
    """Indices NVML should sample, following CUDA_VISIBLE_DEVICES where it uses indices."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(range(count))
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts or parts[0].startswith("-"):
        return []
    if all(p.isdigit() for p in parts):
        return [int(p) for p in parts if int(p) < count]
    return list(range(count))  # UUID-style lists: sample every device


class PynvmlReader:
    """The real reader (nvidia-ml-py's ``pynvml``). Queries only; never sets anything."""

    def __init__(self, devices: Sequence[int] | None = None) -> None:
        """`devices`: the NVML indices to sample (a trial's own GPUs); default, every
        device CUDA_VISIBLE_DEVICES leaves visible."""
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable("nvidia-ml-py is not installed") from None
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            raise NvmlUnavailable(f"NVML unavailable: {_nvml_reason(exc)}") from None
        self._nvml: Any = pynvml
        count = int(pynvml.nvmlDeviceGetCount())
        wanted = _visible_indices(count) if devices is None else [i for i in devices if i < count]
        self._handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in wanted]
        if not self._handles:
            pynvml.nvmlShutdown()
            raise NvmlUnavailable("no NVIDIA GPU visible")

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(i for i, _ in self._handles)

    def read(self) -> Sequence[GpuSample]:
        out = []
        for index, handle in self._handles:
            util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
            mem = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            out.append(
                GpuSample(
                    index=index,
                    utilization=float(util.gpu) / 100.0,
                    memory_used_mb=float(mem.used) / 2**20,
                    memory_total_mb=float(mem.total) / 2**20,
                )
            )
        return out

    def close(self) -> None:
        # Shutting down a reader must never fail a trial.
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()


def _nvml_reason(exc: BaseException) -> str:
    text = str(exc).strip() or exc.__class__.__name__
    return text.splitlines()[0]


class NvmlSampler:
    """Samples a reader every `interval_s` between `start()` and `stop()`.

    `open()` returns either a sampler or `NotMeasured`; `stop()` returns the figures, or
    `NotMeasured` when no sample could be taken.
    """

    def __init__(
        self,
        reader: NvmlReader,
        interval_s: float = DEFAULT_INTERVAL_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._reader = reader
        self._interval = interval_s
        self._sleep = sleep
        self._samples: list[Sequence[GpuSample]] = []
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def open(
        cls,
        reader_factory: Callable[[], NvmlReader] = PynvmlReader,
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> NvmlSampler | NotMeasured:
        try:
            return cls(reader_factory(), interval_s)
        except NvmlUnavailable as exc:
            return NotMeasured(str(exc))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self._interval)

    def sample_once(self) -> None:
        try:
            self._samples.append(self._reader.read())
        except Exception as exc:  # a failed read is recorded, not raised into the trial
            self._error = _nvml_reason(exc)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tftune-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> GpuFigures | NotMeasured:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self._interval + 1)
        self._reader.close()
        return summarize(self._samples, self._error)


def summarize(
    samples: Sequence[Sequence[GpuSample]], error: str | None
) -> GpuFigures | NotMeasured:
    readings = [s for batch in samples for s in batch]
    if not readings:
        return NotMeasured(error or "no NVML sample was taken during the window")
    devices = tuple(sorted({s.index for s in readings}))
    return GpuFigures(
        devices=devices,
        samples=len(samples),
        utilization=sum(s.utilization for s in readings) / len(readings),
        memory_used_mb=max(s.memory_used_mb for s in readings),
        memory_total_mb=max(s.memory_total_mb for s in readings),
    )


def gpu_visible() -> bool:
    """Whether NVML sees a GPU (read-only query)."""
    try:
        reader = PynvmlReader()
    except NvmlUnavailable:
        return False
    reader.close()
    return True
