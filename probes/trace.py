"""The event model: one host's XSpace, held column-wise.

Each line keeps numpy columns (event metadata id, start and duration in picoseconds on a
trace-wide time base); stats are decoded lazily, per event or for a chosen subset, from
the protobuf objects that are kept alongside. Everything here is frozen after loading.

Time base: `start_ps` is picoseconds since `HostTrace.origin_ns` (the earliest line
timestamp of the file), so int64 never overflows and all lines of a host share one clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tftune.probes._schema import xspace_class
from tftune.probes.errors import TraceError

I64 = npt.NDArray[np.int64]

HOST_PLANE = "/host:CPU"
GPU_PLANE_RE = re.compile(r"^/device:GPU:(\d+)")
TASK_ENV_PLANE = "Task Environment"
# Any event time or duration beyond this (about 13 days in picoseconds) is corrupt; the
# bound also keeps base + offset + duration inside int64.
MAX_TIME_PS = 2**60


def decode_stat(stat: Any, stat_names: Mapping[int, str]) -> Any:
    """The Python value of one XStat. A ref_value names another stat metadata entry."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    if kind == "ref_value":
        return stat_names.get(value, value)
    return value


@dataclass(frozen=True, slots=True, eq=False)
class Line:
    """One timeline (a thread or a device stream) with its events as columns."""

    id: int
    name: str
    display_name: str
    timestamp_ns: int
    metadata_id: I64
    start_ps: I64
    duration_ps: I64
    _events: Any = field(repr=False)

    def __len__(self) -> int:
        return int(self.metadata_id.shape[0])

    @property
    def end_ps(self) -> I64:
        return self.start_ps + self.duration_ps

    def raw_stats(self, index: int) -> Iterable[Any]:
        return self._events[index].stats  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True, eq=False)
class Plane:
    """One XPlane: a host (`/host:CPU`), a device (`/device:GPU:0`) or metadata planes."""

    id: int
    name: str
    lines: tuple[Line, ...]
    event_names: Mapping[int, str]
    stat_names: Mapping[int, str]
    stats: Mapping[str, Any]
    _raw: Any = field(repr=False)

    def metadata_ids(self, predicate: Any) -> npt.NDArray[np.int64]:
        """Event metadata ids whose name satisfies `predicate(name) -> bool`."""
        ids = [mid for mid, name in self.event_names.items() if predicate(name)]
        return np.asarray(ids, dtype=np.int64)

    def find(
        self, predicate: Any, lines: Iterable[Line] | None = None
    ) -> Iterator[tuple[Line, npt.NDArray[np.intp]]]:
        """For each line, the indices of events whose name satisfies `predicate`."""
        ids = self.metadata_ids(predicate)
        if ids.size == 0:
            return
        for line in self.lines if lines is None else lines:
            idx = np.flatnonzero(np.isin(line.metadata_id, ids))
            if idx.size:
                yield line, idx

    def event_stats(self, line: Line, index: int) -> dict[str, Any]:
        """All stats of one event: its own, on top of its metadata's stats."""
        mid = int(line.metadata_id[index])
        out = self.metadata_stats(mid)
        for stat in line.raw_stats(index):
            out[self.stat_names.get(stat.metadata_id, str(stat.metadata_id))] = decode_stat(
                stat, self.stat_names
            )
        return out

    def metadata_stats(self, metadata_id: int) -> dict[str, Any]:
        md = self._raw.event_metadata.get(metadata_id)
        if md is None:
            return {}
        return {
            self.stat_names.get(s.metadata_id, str(s.metadata_id)): decode_stat(s, self.stat_names)
            for s in md.stats
        }

    def line_named(self, name: str) -> Line | None:
        return next((ln for ln in self.lines if ln.name == name), None)

    def lines_with_prefix(self, prefix: str) -> tuple[Line, ...]:
        return tuple(ln for ln in self.lines if ln.name.startswith(prefix))


@dataclass(frozen=True, slots=True, eq=False)
class HostTrace:
    """One host's `.xplane.pb`, loaded."""

    host: str
    path: Path
    size_bytes: int
    origin_ns: int
    planes: tuple[Plane, ...]
    hostnames: tuple[str, ...]
    errors: tuple[str, ...]
    warnings: tuple[str, ...]

    def plane(self, name: str) -> Plane | None:
        return next((p for p in self.planes if p.name == name), None)

    @property
    def host_plane(self) -> Plane | None:
        return self.plane(HOST_PLANE)

    @property
    def gpu_planes(self) -> tuple[Plane, ...]:
        found = [(int(m.group(1)), p) for p in self.planes if (m := GPU_PLANE_RE.match(p.name))]
        return tuple(p for _, p in sorted(found, key=lambda t: t[0]))

    @property
    def task_environment(self) -> Mapping[str, Any]:
        env = self.plane(TASK_ENV_PLANE)
        return env.stats if env is not None else {}

    @property
    def span_ps(self) -> tuple[int, int]:
        """(first event start, last event end) over every line of every plane."""
        lo, hi = None, None
        for plane in self.planes:
            for line in plane.lines:
                if len(line):
                    s, e = int(line.start_ps.min()), int(line.end_ps.max())
                    lo = s if lo is None else min(lo, s)
                    hi = e if hi is None else max(hi, e)
        return (lo or 0, hi or 0)


def _columns(events: Any, base_ps: int) -> tuple[I64, I64, I64]:
    n = len(events)
    mids = np.fromiter((e.metadata_id for e in events), dtype=np.int64, count=n)
    offs = np.fromiter((e.offset_ps for e in events), dtype=np.int64, count=n)
    durs = np.fromiter((e.duration_ps for e in events), dtype=np.int64, count=n)
    if n and (offs.min() < -MAX_TIME_PS or offs.max() > MAX_TIME_PS):
        return mids, offs, durs  # the caller rejects it; adding the base could overflow
    if base_ps:
        offs += base_ps
    return mids, offs, durs


def parse_xspace(data: bytes, path: Path, host: str) -> HostTrace:
    """Parse one `.xplane.pb` payload. Raises `TraceError` naming the file on bad input."""
    if not data:
        raise TraceError(f"{path}: file is empty (0 bytes)")
    space = xspace_class()()
    try:
        space.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError or RuntimeError on garbage
        raise TraceError(
            f"{path}: not a readable XSpace trace (truncated or corrupt protobuf: {exc})"
        ) from None
    if not len(space.planes):
        raise TraceError(f"{path}: not an XSpace trace (no planes in {len(data)} bytes)")
    stamps = [ln.timestamp_ns for p in space.planes for ln in p.lines if len(ln.events)]
    origin_ns = min(stamps) if stamps else 0
    planes = []
    for p in space.planes:
        stat_names = {int(k): v.name for k, v in p.stat_metadata.items()}
        event_names = {int(k): v.name for k, v in p.event_metadata.items()}
        lines = []
        for ln in p.lines:
            base_ps = (ln.timestamp_ns - origin_ns) * 1000
            if abs(base_ps) > MAX_TIME_PS:
                raise TraceError(
                    f"{path}: not a valid XSpace trace (line '{ln.name}' of plane "
                    f"'{p.name}' starts {base_ps / 1e12:.3g} s away from the others)"
                )
            mids, starts, durs = _columns(ln.events, base_ps)
            if durs.size and (durs.min() < 0 or durs.max() > MAX_TIME_PS):
                raise TraceError(f"{path}: not a valid XSpace trace (event durations out of range)")
            if starts.size and (starts.min() < -MAX_TIME_PS or starts.max() > MAX_TIME_PS):
                raise TraceError(f"{path}: not a valid XSpace trace (event times out of range)")
            lines.append(
                Line(
                    id=ln.id,
                    name=ln.name,
                    display_name=ln.display_name or ln.name,
                    timestamp_ns=ln.timestamp_ns,
                    metadata_id=mids,
                    start_ps=starts,
                    duration_ps=durs,
                    _events=ln.events,
                )
            )
        planes.append(
            Plane(
                id=p.id,
                name=p.name,
                lines=tuple(lines),
                event_names=event_names,
                stat_names=stat_names,
                stats={
                    stat_names.get(s.metadata_id, str(s.metadata_id)): decode_stat(s, stat_names)
                    for s in p.stats
                },
                _raw=p,
            )
        )
    return HostTrace(
        host=host,
        path=path,
        size_bytes=len(data),
        origin_ns=origin_ns,
        planes=tuple(planes),
        hostnames=tuple(space.hostnames),
        errors=tuple(space.errors),
        warnings=tuple(space.warnings),
    )


def load_host(path: Path, host: str | None = None) -> HostTrace:
    """Read and parse one `.xplane.pb` file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory, not a .xplane.pb file") from None
    except PermissionError:
        raise TraceError(f"{path}: cannot be read (permission denied)") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return parse_xspace(data, path, host or host_name_of(path))


def host_name_of(path: Path) -> str:
    name = path.name
    return name[: -len(".xplane.pb")] if name.endswith(".xplane.pb") else path.stem


@dataclass(frozen=True, slots=True)
class SkippedHost:
    host: str
    path: Path
    reason: str


@dataclass(frozen=True, slots=True, eq=False)
class RunTrace:
    """A run with every readable host loaded; unreadable hosts are listed, not fatal."""

    name: str
    path: Path
    hosts: tuple[HostTrace, ...]
    skipped: tuple[SkippedHost, ...]


def load_run(name: str, path: Path, files: Iterable[tuple[str, Path]]) -> RunTrace:
    """Load each host file. When every host fails, raise the first host's error."""
    loaded: list[HostTrace] = []
    skipped: list[SkippedHost] = []
    first_error: TraceError | None = None
    for host, file in files:
        try:
            loaded.append(load_host(file, host))
        except TraceError as exc:
            first_error = first_error or exc
            skipped.append(SkippedHost(host, file, str(exc)))
    if not loaded:
        assert first_error is not None
        raise first_error
    return RunTrace(name, path, tuple(loaded), tuple(skipped))
