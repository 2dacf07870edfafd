"""Where an `.xplane.pb` file's planes and lines lie, found without reading it whole.

`read_layout(f, size)` walks the two top levels of the XSpace message: the space's
fields, then each plane's. It reads field headers and the small fields only, and skips
each line's bytes: a plane comes back as its fields other than `lines` (serialized, for
protobuf to parse) and each line's place in the file, so that `probes.traces.trace` reads one
line at a time and never holds the file and its decoded columns at once. It returns
None where the file is not laid out as protobuf writes it (a field number or wire type
these messages never use, a length past the end); the caller then parses the file whole
with protobuf, which says what is wrong. `LineReader` reads the lines into one buffer.

Within a line: `first_event_offset` finds its first event record and `line_header` its
timestamp, walking only the line's own fields before its events.
"""

from __future__ import annotations

from dataclasses import dataclass
from io import BufferedReader
from typing import BinaryIO

from tftune.probes.traces._schema import xline_events_as_bytes_class

Data = bytes | memoryview  # a serialized line: its bytes, or a view of a buffer read into
_PLANES = 1  # XSpace field 1
_LINES = 3  # XPlane field 3
_LEN = 2  # wire type of a length-delimited field
_WINDOW = 1 << 16  # bytes read at a time for field headers and small fields
_MAX_HEADER = 20  # a tag and a length varint


@dataclass(frozen=True, slots=True)
class PlaneLayout:
    header: bytes  # the plane's fields other than `lines`, serialized
    lines: tuple[tuple[int, int], ...]  # each line's (offset, length) in the file


@dataclass(frozen=True, slots=True)
class FileLayout:
    rest: bytes  # the space's fields other than `planes` (hostnames, errors, ...)
    planes: tuple[PlaneLayout, ...]


class _Reader:
    """Reads of a file's bytes at any offset, through one window of `_WINDOW` bytes."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f, self.size = f, size
        self.start, self.data = 0, b""

    def read(self, at: int, n: int) -> bytes:
        """`n` bytes from `at` (fewer at the end of the file)."""
        if not (self.start <= at and at + n <= self.start + len(self.data)):
            self.f.seek(at)
            self.start, self.data = at, self.f.read(max(n, _WINDOW))
        return self.data[at - self.start : at - self.start + n]


def read_at(f: BinaryIO, at: int, n: int) -> bytes:
    """`n` bytes of the file from offset `at`."""
    f.seek(at)
    return f.read(n)


class LineReader:
    """Reads a file's lines into one buffer, reused: the bytes of the line read last
    are valid until the next read. Reading into memory already in use spares the page
    faults of a fresh buffer per line (tens of thousands for a large trace)."""

    def __init__(self, f: BufferedReader, largest: int) -> None:
        self.f = f
        self.buffer = memoryview(bytearray(largest))

    def read(self, at: int, n: int) -> memoryview:
        view = self.buffer[:n]
        self.f.seek(at)
        if self.f.readinto(view) != n:
            raise OSError("the file is shorter than its own fields say (changed while read?)")
        return view


def _field(r: _Reader, at: int, end: int) -> tuple[int, int, int] | None:
    """The field at `at`: (field number, where its value starts, where it ends), for
    a value within `end`; None for a wire type these messages never use."""
    head = r.read(at, _MAX_HEADER)
    try:
        key, i = _varint_at(head, 0)
        wire = key & 7
        if wire == 0:
            stop = _varint_at(head, i)[1]
        elif wire == _LEN:
            length, i = _varint_at(head, i)
            stop = i + length
        elif wire in (1, 5):
            stop = i + (8 if wire == 1 else 4)
        else:
            return None
    except ValueError:  # a varint cut short
        return None
    if key >> 3 == 0 or at + stop > end:
        return None
    return key >> 3 if wire == _LEN else -1, at + i, at + stop


def _plane(r: _Reader, start: int, end: int) -> PlaneLayout | None:
    header = bytearray()
    lines = []
    at = start
    while at < end:
        found = _field(r, at, end)
        if found is None:
            return None
        key, value, stop = found
        if key == _LINES:
            lines.append((value, stop - value))
        else:
            header += r.read(at, stop - at)
        at = stop
    return PlaneLayout(bytes(header), tuple(lines))


def read_layout(f: BinaryIO, size: int) -> FileLayout | None:
    """The file's planes and lines (`FileLayout`), or None (see the module docstring)."""
    r = _Reader(f, size)
    rest = bytearray()
    planes = []
    at = 0
    while at < size:
        found = _field(r, at, size)
        if found is None:
            return None
        key, value, stop = found
        if key == _PLANES:
            plane = _plane(r, value, stop)
            if plane is None:
                return None
            planes.append(plane)
        else:
            rest += r.read(at, stop - at)
        at = stop
    return FileLayout(bytes(rest), tuple(planes))


# -- a line's own fields, before its events ------------------------------------------

EVENT_TAG = 0x22  # XLine field 4 (events), length-delimited


def first_event_offset(data: Data) -> int | None:
    """Byte offset of the first `events` record in a serialized XLine."""
    i, n = 0, len(data)
    while i < n:
        tag, i = _varint_at(data, i)
        if tag == EVENT_TAG:
            return i - 1 if data[i - 1] == EVENT_TAG else None
        skipped = _skip_field(data, i, tag & 7)
        if skipped is None:
            return None
        i = skipped
    return None


def _skip_field(data: Data, i: int, wire: int) -> int | None:
    """The offset past a field's value of wire type `wire` at `i`; None for a type
    (groups) these messages never use."""
    if wire == 0:
        return _varint_at(data, i)[1]
    if wire == 2:
        size, i = _varint_at(data, i)
        return i + size
    if wire == 1:
        return i + 8
    if wire == 5:
        return i + 4
    return None


def _varint_at(data: Data, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while i < len(data) and shift < 70:
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
        shift += 7
    raise ValueError("truncated varint")


_LINE_TIMESTAMP_TAG = 0x18  # XLine field 3 (timestamp_ns), varint


def line_header(data: Data, whole: bool = True) -> tuple[bool, int] | None:
    """(has events, timestamp_ns) of a serialized line, reading only its first fields.
    `whole=False`: `data` is the line's first bytes only; None where they do not tell."""
    try:
        first = first_event_offset(data)
        i, stamp = 0, 0
        while i < (first if first is not None else len(data)):
            tag, i = _varint_at(data, i)
            if tag == _LINE_TIMESTAMP_TAG:
                value, i = _varint_at(data, i)
                stamp = value - (1 << 64) if value >= 1 << 63 else value
                continue
            skipped = _skip_field(data, i, tag & 7)
            if skipped is None:
                break
            i = skipped
    except ValueError:
        if whole:
            raise
        return None
    if first is None or stamp == 0:
        if not whole:
            return None
        # Unusual layout (timestamp after the events, or none): decode the line.
        light = xline_events_as_bytes_class().FromString(data)
        return len(light.events) > 0, int(light.timestamp_ns)
    return True, stamp
