"""The event model: one host's XSpace, held column-wise.

Each line keeps numpy columns (event metadata id, start and duration in picoseconds on a
trace-wide time base) and its events' stats as bytes, decoded lazily, per event or for a
chosen subset. Everything here is frozen after loading; `trace_file` reads a file into
it.

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

from tftune.probes.traces._schema import (
    xevent_class,
)
from tftune.probes.traces._stat_bytes import first_stat

I64 = npt.NDArray[np.int64]

HOST_PLANE = "/host:CPU"
GPU_PLANE_RE = re.compile(r"^/device:GPU:(\d+)")
TASK_ENV_PLANE = "Task Environment"
# Any event time or duration beyond this (about 13 days in picoseconds) is corrupt; the
# bound also keeps base + offset + duration inside int64.
MAX_TIME_PS = 2**60
# Events whose stats `Line.first_stat` reads per batch.
_STAT_BATCH = 1 << 13


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
    metadata_id: npt.NDArray[np.signedinteger[Any]]  # int32 where every id fits
    start_ps: I64
    duration_ps: I64
    # Each event's stats, laid end to end: event i's bytes are
    # _data[_bounds[i]:_bounds[i + 1]] and parse as an XEvent with its stats. They are
    # decoded on demand, so no per-event Python object is kept.
    _data: bytes = field(repr=False)
    _bounds: npt.NDArray[np.integer[Any]] = field(repr=False)  # uint32 when it fits

    def __len__(self) -> int:
        return int(self.metadata_id.shape[0])

    @property
    def end_ps(self) -> I64:
        return self.start_ps + self.duration_ps

    def first_of_each_id(self) -> tuple[I64, npt.NDArray[np.intp]]:
        """The line's metadata ids, ascending, and where each first occurs. Ids are small
        numbers (a plane's metadata count): a table indexed by id finds them without the
        sort of `np.unique`, 8x faster on a million events."""
        mids = self.metadata_id
        n = int(mids.shape[0])
        if not n or int(mids.min()) < 0 or int(mids.max()) > 4 * n:
            ids, first = np.unique(mids, return_index=True)
            return ids, first
        at = np.full(int(mids.max()) + 1, n, dtype=np.intp)
        np.minimum.at(at, mids, np.arange(n, dtype=np.intp))
        found = np.flatnonzero(at < n)
        return found.astype(np.int64), at[found]

    def ids_seen(self) -> set[int]:
        """The set of the line's metadata ids, as `set(metadata_id.tolist())` (its
        iteration order included: the ids are added in the order they first occur)."""
        ids, first = self.first_of_each_id()
        return set(ids[np.argsort(first)].tolist())

    def raw_stats(self, index: int) -> Iterable[Any]:
        """The event's stats as protobuf XStat messages (decoded now, not cached).

        Loading checked the event's own fields; its stats are only decoded here, so
        corrupt stats read as none rather than as an exception downstream.
        """
        lo, hi = int(self._bounds[index]), int(self._bounds[index + 1])
        try:
            return xevent_class().FromString(self._data[lo:hi]).stats  # type: ignore[no-any-return]
        except Exception:  # protobuf's DecodeError: damaged stats inside a valid event
            return ()

    def first_stat(
        self, indices: npt.NDArray[np.integer[Any]], stat_ids: I64
    ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
        """Of each event in `indices`, its first stat whose metadata id is in `stat_ids`,
        read from the bytes for all of them at once (`_stat_bytes.first_stat`: kind, raw value,
        and whether the event is unusual: then `raw_stats` must decode it)."""
        idx = np.asarray(indices, dtype=np.intp)
        kind = np.zeros(idx.shape[0], dtype=np.int8)
        value = np.zeros(idx.shape[0], dtype=np.uint64)
        unusual = np.zeros(idx.shape[0], dtype=bool)
        # In batches: the temporaries of a 100,000-event line would add tens of MB.
        for lo in range(0, idx.shape[0], _STAT_BATCH):
            part = idx[lo : lo + _STAT_BATCH]
            pos = self._bounds[part].astype(np.int64)
            found = first_stat(self._data, pos, self._bounds[part + 1] - pos, stat_ids)
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
