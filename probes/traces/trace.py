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

from tftune.core.errors import TraceError
from tftune.core.units import PS_PER_NS, PS_PER_S
from tftune.probes.traces._schema import (
    xevent_class,
    xline_events_as_bytes_class,
    xspace_lines_as_bytes_class,
)
from tftune.probes.traces._wire import first_stat, line_columns, line_header, slow_columns

I64 = npt.NDArray[np.int64]

HOST_PLANE = "/host:CPU"
GPU_PLANE_RE = re.compile(r"^/device:GPU:(\d+)")
TASK_ENV_PLANE = "Task Environment"
# Any event time or duration beyond this (about 13 days in picoseconds) is corrupt; the
# bound also keeps base + offset + duration inside int64.
MAX_TIME_PS = 2**60
# Events whose stats `Line.first_stat` reads per batch.
_STAT_BATCH = 1 << 15


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
    # The line's serialized bytes and, per event, where its XEvent message lies in them:
    # stats are decoded from there on demand, so no per-event Python object is kept.
    _data: bytes = field(repr=False)
    _event_pos: npt.NDArray[np.integer[Any]] = field(repr=False)  # uint32 when it fits
    _event_len: npt.NDArray[np.integer[Any]] = field(repr=False)  # uint16 when it fits

    def __len__(self) -> int:
        return int(self.metadata_id.shape[0])

    @property
    def end_ps(self) -> I64:
        return self.start_ps + self.duration_ps

    def raw_event(self, index: int) -> Any:
        """The event as a protobuf XEvent message (decoded now, not cached).

        Loading checked the event's own fields; its stats are only decoded here, so a
        corrupt stat gives an event without stats rather than an exception downstream.
        """
        pos = int(self._event_pos[index])
        cls = xevent_class()
        try:
            return cls.FromString(self._data[pos : pos + int(self._event_len[index])])
        except Exception:  # protobuf's DecodeError: damaged stats inside a valid event
            return cls()

    def raw_stats(self, index: int) -> Iterable[Any]:
        return self.raw_event(index).stats  # type: ignore[no-any-return]

    def first_stat(
        self, indices: npt.NDArray[np.integer[Any]], stat_ids: I64
    ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
        """Of each event in `indices`, its first stat whose metadata id is in `stat_ids`,
        read from the bytes for all of them at once (`_wire.first_stat`: kind, raw value,
        and whether the event is unusual: then `raw_stats` must decode it)."""
        idx = np.asarray(indices, dtype=np.intp)
        kind = np.zeros(idx.shape[0], dtype=np.int8)
        value = np.zeros(idx.shape[0], dtype=np.uint64)
        unusual = np.zeros(idx.shape[0], dtype=bool)
        # In batches: the temporaries of a 100,000-event line would add tens of MB.
        for lo in range(0, idx.shape[0], _STAT_BATCH):
            part = idx[lo : lo + _STAT_BATCH]
            pos = self._event_pos[part].astype(np.int64)
            found = first_stat(self._data, pos, self._event_len[part].astype(np.int64), stat_ids)
            hi = lo + part.shape[0]
            kind[lo:hi], value[lo:hi], unusual[lo:hi] = found
        return kind, value, unusual


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


def _build_line(data: bytes, base_origin_ns: int, path: Path, plane_name: str) -> Line:
    light = xline_events_as_bytes_class().FromString(data)
    n = len(light.events)
    lengths = np.fromiter(map(len, light.events), dtype=np.int64, count=n)
    line_id, name, display_name = light.id, light.name, light.display_name
    timestamp_ns = light.timestamp_ns
    del light  # its per-event copies are not needed for the bulk decode
    bulk = line_columns(data, n, lengths) if n else None
    if n and bulk is None:
        mids, offs, durs, pos, lens32 = slow_columns(data)
        events_data = b"".join(xline_events_as_bytes_class().FromString(data).events)
    else:
        z = np.zeros(0, dtype=np.int64)
        mids, offs, durs, pos = bulk if bulk is not None else (z, z, z, z)
        lens32 = lengths.astype(np.int32)
        events_data = data
    base_ps = (timestamp_ns - base_origin_ns) * PS_PER_NS
    if abs(base_ps) > MAX_TIME_PS:
        raise TraceError(
            f"{path}: not a valid XSpace trace (line '{name}' of plane "
            f"'{plane_name}' starts {base_ps / PS_PER_S:.3g} s away from the others)"
        )
    if n and (durs.min() < 0 or durs.max() > MAX_TIME_PS):
        raise TraceError(f"{path}: not a valid XSpace trace (event durations out of range)")
    if n and (offs.min() < -MAX_TIME_PS or offs.max() > MAX_TIME_PS):
        raise TraceError(f"{path}: not a valid XSpace trace (event times out of range)")
    if base_ps:
        offs += base_ps
    return Line(
        id=line_id,
        name=name,
        display_name=display_name or name,
        timestamp_ns=timestamp_ns,
        metadata_id=mids,
        start_ps=offs,
        duration_ps=durs,
        _data=events_data,
        # Positions fit 32 bits for lines under 4 GiB: 4 bytes an event saved.
        _event_pos=pos.astype(np.uint32) if len(events_data) < 2**32 else pos,
        # Events are tens of bytes: lengths fit 16 bits on most lines, 2 bytes an event saved.
        _event_len=lens32.astype(np.uint16) if n and int(lens32.max()) < 2**16 else lens32,
    )


def _split_planes(space: Any) -> list[tuple[Any, list[bytes]]]:
    """Each plane as (header without lines, its lines' serialized bytes)."""
    out = []
    for p in space.planes:
        header = type(p)()
        header.id, header.name = p.id, p.name
        for k, v in p.event_metadata.items():
            header.event_metadata[k].CopyFrom(v)
        for k, v in p.stat_metadata.items():
            header.stat_metadata[k].CopyFrom(v)
        header.stats.extend(p.stats)
        out.append((header, list(p.lines)))
    return out


def _parse_owned(holder: list[bytes], path: Path, host: str) -> HostTrace:
    """Parse, dropping the file's bytes as soon as the lines are split out of them.

    Lines stay serialized (one `bytes` each); events are decoded column-wise from them.
    Peak memory is about the file size twice plus the columns, instead of one Python
    protobuf object per event.
    """
    size = len(holder[0])
    if not size:
        raise TraceError(f"{path}: file is empty (0 bytes)")
    raw_planes, (hostnames, errors, warnings), stamps = _split_space(holder, path)
    if not raw_planes:
        raise TraceError(f"{path}: not an XSpace trace (no planes in {size} bytes)")
    origin_ns = min(stamps) if stamps else 0
    built = _build_lines(raw_planes, origin_ns, path)
    planes = [
        _plane(header, tuple(built[pi, li] for li in range(len(lines))))
        for pi, (header, lines) in enumerate(raw_planes)
    ]
    return HostTrace(
        host=host,
        path=path,
        size_bytes=size,
        origin_ns=origin_ns,
        planes=tuple(planes),
        hostnames=hostnames,
        errors=errors,
        warnings=warnings,
    )


_SpaceNotes = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def _split_space(
    holder: list[bytes], path: Path
) -> tuple[list[tuple[Any, list[bytes]]], _SpaceNotes, list[int]]:
    """The planes (header, serialized lines), the space's hostnames, errors and warnings,
    and the timestamps of the lines with events. Takes the bytes out of `holder`."""
    data = holder.pop()
    space = xspace_lines_as_bytes_class()()
    try:
        space.ParseFromString(data)
        del data
        raw_planes = _split_planes(space)
        notes = (tuple(space.hostnames), tuple(space.errors), tuple(space.warnings))
        del space  # frees the parsed copy: only the per-line bytes remain
        stamps = []
        for _, lines in raw_planes:
            for ln in lines:
                has_events, stamp = line_header(ln)
                if has_events:
                    stamps.append(stamp)
    except TraceError:
        raise
    except Exception as exc:  # protobuf raises DecodeError or RuntimeError on garbage
        raise TraceError(
            f"{path}: not a readable XSpace trace (truncated or corrupt protobuf: {exc})"
        ) from None
    return raw_planes, notes, stamps


def _build_lines(
    raw_planes: list[tuple[Any, list[bytes]]], origin_ns: int, path: Path
) -> dict[tuple[int, int], Line]:
    """Every line decoded, keyed by (plane, line) position."""
    # Decode the largest lines first: their temporaries then coincide with the fewest
    # finished columns, which keeps the peak memory near the final size.
    order = sorted(
        ((pi, li) for pi, (_, lines) in enumerate(raw_planes) for li in range(len(lines))),
        key=lambda t: -len(raw_planes[t[0]][1][t[1]]),
    )
    built: dict[tuple[int, int], Line] = {}
    for pi, li in order:
        header, lines = raw_planes[pi]
        try:
            built[pi, li] = _build_line(lines[li], origin_ns, path, header.name)
        except TraceError:
            raise
        except Exception as exc:
            raise TraceError(
                f"{path}: not a readable XSpace trace (corrupt line in plane "
                f"'{header.name}': {exc})"
            ) from None
    return built


def _plane(header: Any, lines: tuple[Line, ...]) -> Plane:
    stat_names = {int(k): v.name for k, v in header.stat_metadata.items()}
    return Plane(
        id=header.id,
        name=header.name,
        lines=lines,
        event_names={int(k): v.name for k, v in header.event_metadata.items()},
        stat_names=stat_names,
        stats={
            stat_names.get(s.metadata_id, str(s.metadata_id)): decode_stat(s, stat_names)
            for s in header.stats
        },
        _raw=header,
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
    holder = [data]
    del data  # the holder owns the bytes, so the parser can free them early
    return _parse_owned(holder, path, host or host_name_of(path))


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
