"""Reading one host's `.xplane.pb` into the event model (`trace`): `load_host` reads the
file a line at a time (`_xspace_file`), so that its bytes and the lines' columns are
never held at once, or parses it whole where it is laid out otherwise (the whole parse
also names what is wrong with a damaged file); `load_run` loads every host of a run,
listing the unreadable ones. Each line is decoded column-wise (`_wire`), largest first.
Every problem with a file is a one-line `TraceError` naming it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from functools import partial
from io import BufferedReader
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from tftune.core.errors import TraceError
from tftune.core.units import PS_PER_NS, PS_PER_S
from tftune.probes.traces._event_walk import MIN_WALK_BYTES, event_records
from tftune.probes.traces._schema import (
    xline_events_as_bytes_class,
    xplane_lines_as_bytes_class,
    xspace_lines_as_bytes_class,
)
from tftune.probes.traces._wire import Columns, Records, line_columns, records_of, slow_columns
from tftune.probes.traces._xspace_file import (
    FileLayout,
    LineReader,
    first_event_offset,
    line_header,
    read_at,
    read_layout,
)
from tftune.probes.traces.trace import (
    MAX_TIME_PS,
    HostTrace,
    Line,
    Plane,
    RunTrace,
    SkippedHost,
    decode_stat,
    host_name_of,
)


def _line_events(data: bytes | memoryview) -> tuple[Any, Columns | None]:
    """A line's own fields (an XLine message without its events) and its events'
    columns (None: no events). Large lines' records are found by walking them with numpy
    (`_event_walk`); smaller ones, and any the walk cannot prove, by protobuf."""
    walked = _walked_line(data) if len(data) >= MIN_WALK_BYTES else None
    if walked is not None:
        head, records = walked
        return head, line_columns(data, records) or slow_columns(data)
    light = xline_events_as_bytes_class().FromString(data)
    n = len(light.events)
    if not n:
        return light, None
    lengths = np.fromiter(map(len, light.events), dtype=np.int64, count=n)
    light.ClearField("events")  # its per-event copies are not needed for the bulk decode
    laid_out = records_of(data, lengths)
    del lengths
    cols = line_columns(data, laid_out) if laid_out is not None else None
    return light, cols or slow_columns(data)


def _walked_line(data: bytes | memoryview) -> tuple[Any, Records] | None:
    """A line's own fields and its event records, found by the walk; None where a field
    before the events runs off the end, the walk proves no chain, or events follow the
    run it found (then protobuf reads the line, and names any damage)."""
    try:
        first = first_event_offset(data)
    except ValueError:
        return None
    records = event_records(data, first) if first is not None else None
    if records is None:
        return None
    head = xline_events_as_bytes_class().FromString(bytes(data[:first]) + bytes(data[records[1] :]))
    return (head, records) if not len(head.events) else None


def _build_line(data: bytes | memoryview, base_origin_ns: int, path: Path, plane_name: str) -> Line:
    light, cols = _line_events(data)
    line_id, name, display_name = light.id, light.name, light.display_name
    timestamp_ns = light.timestamp_ns
    del light
    if cols is None:
        z = np.zeros(0, dtype=np.int64)
        cols = (z, z, z, b"", np.zeros(1, dtype=np.int64))
    n = len(cols[1])
    mids, offs, durs, stats, bounds = cols
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
    if n and mids.dtype != np.int32 and -(2**31) <= int(mids.min()) <= int(mids.max()) < 2**31:
        mids = mids.astype(np.int32)  # 4 bytes an event saved: ids are small
    return Line(
        id=line_id,
        name=name,
        display_name=display_name or name,
        timestamp_ns=timestamp_ns,
        metadata_id=mids,
        start_ps=offs,
        duration_ps=durs,
        _data=stats,
        # Bounds fit 32 bits for stats under 4 GiB: 4 bytes an event saved.
        _bounds=bounds.astype(np.uint32, copy=False) if len(stats) < 2**32 else bounds,
    )


# A line to build: its plane's name, its size, and how to get its serialized bytes.
_LineSource = tuple[str, int, Callable[[], bytes | memoryview]]
_SpaceNotes = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def _host_trace(
    path: Path,
    host: str,
    size: int,
    headers: list[tuple[Any, list[_LineSource]]],
    notes: _SpaceNotes,
    stamps: list[int],
) -> HostTrace:
    """The loaded host from its planes' headers and lines, built here."""
    origin_ns = min(stamps) if stamps else 0
    built = _build_lines([src for _, lines in headers for src in lines], origin_ns, path)
    planes, k = [], 0
    for header, lines in headers:
        planes.append(_plane(header, tuple(built[k : k + len(lines)])))
        k += len(lines)
    return HostTrace(host, path, size, origin_ns, tuple(planes), *notes)


def _parse_owned(holder: list[bytes], path: Path, host: str) -> HostTrace:
    """Parse a file held whole (one `_parse_streamed` cannot read line by line: the
    parse of the whole space tells what is wrong), dropping its bytes once the lines
    are split out; each line stays serialized until it is decoded."""
    size = len(holder[0])
    if not size:
        raise TraceError(f"{path}: file is empty (0 bytes)")
    raw_planes, notes, stamps = _split_space(holder, path)
    if not raw_planes:
        raise TraceError(f"{path}: not an XSpace trace (no planes in {size} bytes)")
    headers: list[tuple[Any, list[_LineSource]]] = [
        (header, [(header.name, len(ln), partial(bytes, ln)) for ln in lines])
        for header, lines in raw_planes
    ]
    del raw_planes
    return _host_trace(path, host, size, headers, notes, stamps)


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
                has_events, stamp = line_header(ln) or (False, 0)  # never None: whole
                if has_events:
                    stamps.append(stamp)
    except TraceError:
        raise
    except Exception as exc:  # protobuf raises DecodeError or RuntimeError on garbage
        raise TraceError(
            f"{path}: not a readable XSpace trace (truncated or corrupt protobuf: {exc})"
        ) from None
    return raw_planes, notes, stamps


# Bytes read from the start of a line for its timestamp; more when they do not tell.
_LINE_PREFIX = 4096


def _parse_streamed(f: BufferedReader, size: int, path: Path, host: str) -> HostTrace | None:
    """Read the file a line at a time (`_xspace_file.read_layout`), so that its bytes
    and the lines' columns are never held at once; None where the file is not laid out
    as protobuf writes it, or protobuf rejects a part of it (the caller then parses it
    whole, `_parse_owned`, which names the problem)."""
    layout = read_layout(f, size)
    if layout is None or not layout.planes:
        return None
    try:
        space = xspace_lines_as_bytes_class().FromString(layout.rest)
        notes = (tuple(space.hostnames), tuple(space.errors), tuple(space.warnings))
        plane_class = xplane_lines_as_bytes_class()
        headers = [(plane_class.FromString(p.header), p.lines) for p in layout.planes]
        stamps = _line_stamps(f, layout)
    except Exception:  # protobuf's DecodeError, or a line's fields out of the usual order
        return None
    reader = LineReader(f, max((n for _, spans in headers for _, n in spans), default=0))
    sources: list[tuple[Any, list[_LineSource]]] = [
        (header, [(header.name, n, partial(reader.read, at, n)) for at, n in spans])
        for header, spans in headers
    ]
    return _host_trace(path, host, size, sources, notes, stamps)


def _line_stamps(f: BinaryIO, layout: FileLayout) -> list[int]:
    """The timestamps of the lines with events, each read from the line's first bytes."""
    stamps = []
    for plane in layout.planes:
        for at, n in plane.lines:
            head = line_header(read_at(f, at, min(n, _LINE_PREFIX)), whole=n <= _LINE_PREFIX)
            has_events, stamp = head or line_header(read_at(f, at, n)) or (False, 0)
            if has_events:
                stamps.append(stamp)
    return stamps


def _build_lines(sources: list[_LineSource], origin_ns: int, path: Path) -> list[Line]:
    """Every line decoded, in the order of `sources`."""
    # Decode the largest lines first: their temporaries then coincide with the fewest
    # finished columns, which keeps the peak memory near the final size.
    order = sorted(range(len(sources)), key=lambda k: -sources[k][1])

    def build(k: int) -> Line:
        plane_name, _, read = sources[k]
        try:
            return _build_line(read(), origin_ns, path, plane_name)
        except TraceError:
            raise
        except Exception as exc:
            raise TraceError(
                f"{path}: not a readable XSpace trace (corrupt line in plane '{plane_name}': {exc})"
            ) from None

    built = [build(k) for k in order]
    return [line for _, line in sorted(zip(order, built, strict=True), key=lambda t: t[0])]


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
    name = host or host_name_of(path)
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not size:
                raise TraceError(f"{path}: file is empty (0 bytes)")
            loaded = _parse_streamed(f, size, path, name)
            if loaded is not None:
                return loaded
            f.seek(0)
            holder = [f.read()]
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory, not a .xplane.pb file") from None
    except PermissionError:
        raise TraceError(f"{path}: cannot be read (permission denied)") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return _parse_owned(holder, path, name)


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
