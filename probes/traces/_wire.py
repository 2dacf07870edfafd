"""Protobuf wire-format decoding of serialized XLines, column-wise, without an object per event.

`line_columns` reads every event's metadata id, offset and duration (XEvent fields 1-3,
varints) with numpy, over all events at once, and where each event's bytes lie in the
line (so `probes.traces.trace.Line` can decode one event's stats on demand). It needs the
events laid out as every protobuf serializer writes them (contiguous, fields in number
order) and returns None otherwise; `slow_columns` then re-parses the events one by one.
`line_header` reads a line's timestamp and whether it has events, without decoding it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tftune.probes.traces._schema import xevent_class, xline_events_as_bytes_class

I64 = npt.NDArray[np.int64]
_U8 = npt.NDArray[np.uint8]
_EVENT_TAG = 0x22  # XLine field 4 (events), length-delimited
# XEvent fields decoded in bulk: (wire tag, column); proto serializers write fields in
# number order, so these come first, before stats (0x22) and num_occurrences (0x28).
_EVENT_FIELDS = ((0x08, 0), (0x10, 1), (0x18, 2))
_MAX_VARINT = 10


def _varint_size(values: I64) -> I64:
    size = np.ones(values.shape, dtype=np.int64)
    v = values.astype(np.uint64) >> np.uint64(7)
    while True:
        more = v > 0
        if not more.any():
            return size
        size += more
        v >>= np.uint64(7)


def _read_varints(buf: _U8, pos: I64) -> tuple[npt.NDArray[np.uint64], I64, npt.NDArray[np.bool_]]:
    """Decode one varint at each position: (value, size, ok). Vectorized over events.

    One pass per byte of the longest varint, each over the events still unfinished
    (measured 2x faster here than gathering a 10-byte window per event at once).
    """
    n = pos.shape[0]
    value = np.zeros(n, dtype=np.uint64)
    size = np.zeros(n, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    active = np.arange(n)
    last = buf.shape[0] - 1
    for i in range(_MAX_VARINT):
        p = pos[active] + i
        inside = p <= last
        active, p = active[inside], p[inside]
        b = buf[p]
        value[active] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * i)
        done = b < 0x80
        size[active[done]] = i + 1
        ok[active[done]] = True
        active = active[~done]
        if not active.size:
            break
    return value, size, ok


_U64 = np.uint64
_MSB = _U64(0x8080808080808080)


class _Bytes:
    """A serialized line's bytes, as bytes and as 8-byte words, so that the 8 bytes at
    any offset are read in a few operations on whole columns (`word_at`)."""

    def __init__(self, data: bytes) -> None:
        self.buf = np.frombuffer(data, dtype=np.uint8)
        self.size = int(self.buf.shape[0])
        self.words: npt.NDArray[np.uint64] = np.frombuffer(data, "<u8", count=self.size // 8)

    def word_at(self, at: I64) -> npt.NDArray[np.uint64]:
        """The 8 bytes from each offset, little-endian; each offset + 16 <= the size."""
        q = at >> 3
        shift = (at & 7).astype(np.uint64) << _U64(3)
        low, high = self.words[q], self.words[q + 1]
        spliced = (low >> shift) | (high << ((_U64(64) - shift) & _U64(63)))
        word: npt.NDArray[np.uint64] = np.where(shift == 0, low, spliced)
        return word


def _compact(w: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The low 7 bits of each of a word's 8 bytes, packed: 8 varint groups, 56 bits."""
    x = w & _U64(0x7F7F7F7F7F7F7F7F)
    x = (x & _U64(0x007F007F007F007F)) | ((x & _U64(0x7F007F007F007F00)) >> _U64(1))
    x = (x & _U64(0x00003FFF00003FFF)) | ((x & _U64(0x3FFF00003FFF0000)) >> _U64(2))
    packed: npt.NDArray[np.uint64] = (x & _U64(0x000000000FFFFFFF)) | (
        (x & _U64(0x0FFFFFFF00000000)) >> _U64(4)
    )
    return packed


def _varints_at(b: _Bytes, at: I64, values: bool = True) -> tuple[npt.NDArray[np.uint64], I64]:
    """The varint at each position, as `_read_varints` reads it: (value, size), size 0
    where it does not end within 10 bytes or runs past the bytes. A one-byte varint is
    its byte; a longer one is read as one 8-byte word (and, past 8 bytes, 2 more bytes);
    positions too near the end of the bytes for that are read byte by byte.
    `values=False`: sizes only (values are 0)."""
    n = at.shape[0]
    if n and int(at.min()) >= 0 and int(at.max()) <= b.size - 16:
        first = b.buf[at]
        single = first < 0x80  # most lengths, ids and small values: one byte
        if single.all():
            return first.astype(np.uint64), np.ones(n, dtype=np.int64)
        value = first.astype(np.uint64)
        size = single.astype(np.int64)
        far = np.flatnonzero(~single)
    else:
        value = np.zeros(n, dtype=np.uint64)
        size = np.zeros(n, dtype=np.int64)
        near = (at < 0) | (at > b.size - 16)
        if near.any():
            inside = near & (at >= 0) & (at < b.size)
            v, sz, good = _read_varints(b.buf, np.where(inside, at, 0)[near])
            value[near], size[near] = v, np.where(good & inside[near], sz, 0)
        far = np.flatnonzero(~near)
        first = b.buf[at[far]]
        single = first < 0x80
        value[far[single]], size[far[single]] = first[single], 1
        far = far[~single]
    if not far.size:
        return value, size
    a = at[far]
    w = b.word_at(a)
    stops = ~w & _MSB
    lowest = stops & (~stops + _U64(1))
    sz = np.frexp(lowest.astype(np.float64))[1].astype(np.int64) // 8  # 1..8, or 0
    longer = np.flatnonzero(stops == 0)  # no last byte among the first 8
    b8, b9 = b.buf[a[longer] + 8], b.buf[a[longer] + 9]
    sz[longer] = np.where(b8 < 0x80, 9, np.where(b9 < 0x80, _MAX_VARINT, 0))
    size[far] = sz
    if values:
        x = _compact(w)
        short = sz < 8
        x[short] &= (_U64(1) << (_U64(7) * sz[short].astype(np.uint64))) - _U64(1)
        x[longer] |= (b8 & 0x7F).astype(np.uint64) << _U64(56)
        # Bits past 64 are dropped, as protobuf drops them.
        x[longer] |= (b9 & 1).astype(np.uint64) * (sz[longer] == _MAX_VARINT) << _U64(63)
        value[far] = x
    return value, size


def _varints_within(
    b: _Bytes, at: I64, end: I64, values: bool = True
) -> tuple[npt.NDArray[np.uint64], I64, npt.NDArray[np.bool_]]:
    """The varint at each position: (value, the position after it, ok). Not ok where it
    runs past `end` or is a 10-byte varint with bits beyond 64 (protobuf drops them; a
    serializer never writes them)."""
    value, size = _varints_at(b, at, values)
    after = at + size
    ok = (size > 0) & (at < end) & (after <= end)
    long = ok & (size == _MAX_VARINT)
    ok[long] = b.buf[after[long] - 1] <= 1
    return value, after, ok


# Events decoded per numpy batch: bounds the temporaries on million-event lines.
_DECODE_BATCH = 1 << 16


def line_columns(data: bytes, n: int, lengths: I64) -> tuple[I64, I64, I64, I64] | None:
    """Columns (metadata id, offset, duration) and event positions, decoded in bulk.

    Needs the events to be contiguous in the line's bytes (as every protobuf serializer
    writes them); returns None otherwise, and the caller takes the slow path.
    """
    b = _Bytes(data)
    buf = b.buf
    first = _first_event_offset(data)
    if first is None:
        return None
    # Each record is: tag byte, length varint, payload. `pos` is each payload's start.
    pos = 1 + _varint_size(lengths)
    pos += lengths
    end_all = first + int(pos.sum())
    if end_all > buf.shape[0] or (end_all < buf.shape[0] and buf[end_all] == _EVENT_TAG):
        return None
    np.cumsum(pos, out=pos)
    pos -= lengths
    pos += first
    cols = np.zeros((3, n), dtype=np.int64)
    for lo in range(0, n, _DECODE_BATCH):
        hi = min(lo + _DECODE_BATCH, n)
        if not _decode_fields(b, pos[lo:hi], pos[lo:hi] + lengths[lo:hi], cols[:, lo:hi]):
            return None
    return cols[0], cols[1], cols[2], pos


def _decode_fields(b: _Bytes, start: I64, end: I64, out: I64) -> bool:
    """Decode the leading varint fields of a batch of events into `out` (3 x n)."""
    buf = b.buf
    last = buf.shape[0] - 1
    cur = start.copy()
    for tag, col in _EVENT_FIELDS:
        present = (cur < end) & (buf[np.minimum(cur, last)] == tag)
        if present.all():  # the usual case: every event has the field
            value, size = _varints_at(b, cur + 1)
            if not (size > 0).all():
                return False
            out[col] = value.view(np.int64)
            cur += 1 + size
            continue
        here = np.flatnonzero(present)
        if not here.size:
            continue
        value, size = _varints_at(b, cur[here] + 1)
        if not (size > 0).all():
            return False
        out[col, here] = value.view(np.int64)
        cur[here] += 1 + size
    # Anything after the bulk fields must be stats or num_occurrences; otherwise the
    # event's fields are out of the usual order and bulk decoding would misread them.
    if (cur > end).any():
        return False
    rest = cur < end
    return bool(np.isin(buf[np.minimum(cur[rest], last)], (0x22, 0x28)).all())


def _first_event_offset(data: bytes) -> int | None:
    """Byte offset of the first `events` record in a serialized XLine."""
    i, n = 0, len(data)
    while i < n:
        tag, i = _varint_at(data, i)
        if tag == _EVENT_TAG:
            return i - 1 if data[i - 1] == _EVENT_TAG else None
        skipped = _skip_field(data, i, tag & 7)
        if skipped is None:
            return None
        i = skipped
    return None


def _skip_field(data: bytes, i: int, wire: int) -> int | None:
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


def _varint_at(data: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while i < len(data) and shift < 70:
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
        shift += 7
    raise ValueError("truncated varint")


def slow_columns(data: bytes) -> tuple[I64, I64, I64, I64, npt.NDArray[np.int32]]:
    """Columns by re-serializing each event: for lines with an unusual field layout."""
    line = xline_events_as_bytes_class().FromString(data)
    xev = xevent_class()
    parts = list(line.events)
    n = len(parts)
    mids = np.zeros(n, dtype=np.int64)
    offs = np.zeros(n, dtype=np.int64)
    durs = np.zeros(n, dtype=np.int64)
    for k, raw in enumerate(parts):
        ev = xev.FromString(raw)
        mids[k], offs[k], durs[k] = ev.metadata_id, ev.offset_ps, ev.duration_ps
    # Keep the events as one buffer of their own, laid end to end.
    lens = np.fromiter(map(len, parts), dtype=np.int64, count=n)
    pos = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(lens[:-1], out=pos[1:])
    return mids, offs, durs, pos, lens.astype(np.int32)


# `first_stat`'s kinds of the first matching stat's value (XStat's `value` oneof).
STAT_NONE, STAT_INT64, STAT_UINT64, STAT_OTHER = 0, 1, 2, 3
_EVENT_VARINT_TAGS = (0x08, 0x10, 0x18, 0x28)  # metadata_id, offset, duration, occurrences
_STAT_TAG = 0x22  # XEvent field 4 (stats)
_STAT_ID_TAG = 0x08  # XStat field 1 (metadata_id)
# XStat value fields: double (fixed64), uint64, int64, bytes, ref (a stat metadata id).
_VALUE_DOUBLE, _VALUE_U64, _VALUE_I64, _VALUE_BYTES, _VALUE_REF = 0x11, 0x18, 0x20, 0x32, 0x38
# Per tag byte at an XEvent's top level: 1 a varint field, 2 a stat, 0 anything else.
_EVENT_TAG_CLASS = np.zeros(256, dtype=np.int8)
_EVENT_TAG_CLASS[list(_EVENT_VARINT_TAGS)] = 1
_EVENT_TAG_CLASS[_STAT_TAG] = 2
# Per tag byte after a stat's metadata id: its value's kind, or -1 (not read here).
_VALUE_CLASS = np.full(256, -1, dtype=np.int8)
_VALUE_CLASS[[_VALUE_DOUBLE, _VALUE_BYTES, _VALUE_REF]] = STAT_OTHER
_VALUE_CLASS[_VALUE_U64] = STAT_UINT64
_VALUE_CLASS[_VALUE_I64] = STAT_INT64


def first_stat(
    data: bytes, pos: I64, lengths: I64, keys: I64
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
    """For each event (its bytes at `pos`, `lengths` long), its first stat whose metadata
    id is in `keys`: (kind, raw value, unusual). Vectorized over the events, one field of
    each per round.

    `kind` is `STAT_INT64` or `STAT_UINT64` with `value` (int64 as its two's complement),
    `STAT_OTHER` (any other value, or none), or `STAT_NONE` (no such stat). An event is
    `unusual` where its bytes are not laid out as the serializers write XEvents (an
    unknown field, a stat with more than its id and one value, a string value, a varint
    or length past the event's end, a 10-byte varint beyond 64 bits): protobuf must
    decode those, and may reject them. Every other event is read to its end, so that
    protobuf would accept it whole.
    """
    b = _Bytes(data)
    n = int(pos.shape[0])
    kind = np.zeros(n, dtype=np.int8)
    value = np.zeros(n, dtype=np.uint64)
    unusual = np.zeros(n, dtype=bool)
    cur = pos.astype(np.int64)
    end = cur + lengths
    live = np.flatnonzero(cur < end)
    while live.size:
        tag_class = _EVENT_TAG_CLASS[b.buf[cur[live]]]
        unusual[live[tag_class == 0]] = True
        varint = live[tag_class == 1]
        if varint.size:
            _, after, ok = _varints_within(b, cur[varint] + 1, end[varint], values=False)
            unusual[varint[~ok]] = True
            cur[varint[ok]] = after[ok]
        stat = live[tag_class == 2]
        if stat.size:
            _read_stats(b, cur, end, stat, keys, kind, value, unusual)
        live = live[~unusual[live] & (cur[live] < end[live])]
    return kind, value, unusual


def _read_stats(
    b: _Bytes,
    cur: I64,
    end: I64,
    which: I64,
    keys: I64,
    kind: npt.NDArray[np.int8],
    value: npt.NDArray[np.uint64],
    unusual: npt.NDArray[np.bool_],
) -> None:
    """Read one stat of each event in `which` (at `cur`), move `cur` past it, and keep
    it where it is the event's first stat with a metadata id in `keys`."""
    size, body, ok = _varints_within(b, cur[which] + 1, end[which])
    ok &= size < _U64(2**62)
    stop = body + np.where(ok, size, 0).astype(np.int64)
    ok &= (stop <= end[which]) & (body < stop)
    ok[ok] = b.buf[body[ok]] == _STAT_ID_TAG
    mid, at, ok2 = _varints_within(b, body + 1, stop)
    ok &= ok2
    has_value = ok & (at < stop)
    v_kind = np.full(which.shape[0], STAT_OTHER, dtype=np.int8)
    v_kind[has_value] = _VALUE_CLASS[b.buf[at[has_value]]]
    vtag = np.zeros(which.shape[0], dtype=np.uint8)
    vtag[has_value] = b.buf[at[has_value]]
    # A string value (protobuf checks its UTF-8) or any other field: not decoded here.
    ok &= v_kind >= 0
    v = np.zeros(which.shape[0], dtype=np.uint64)
    double = ok & has_value & (vtag == _VALUE_DOUBLE)
    ok[double] = at[double] + 9 == stop[double]
    ints = ok & has_value & np.isin(vtag, (_VALUE_U64, _VALUE_I64, _VALUE_REF))
    if ints.any():
        iv, iafter, iok = _varints_within(b, at[ints] + 1, stop[ints])
        ok[ints] = iok & (iafter == stop[ints])
        v[ints] = iv
    raw = ok & has_value & (vtag == _VALUE_BYTES)
    if raw.any():
        blen, body2, bok = _varints_within(b, at[raw] + 1, stop[raw])
        fits = bok & (blen < _U64(2**62))
        ok[raw] = fits & (body2 + np.where(fits, blen, 0).astype(np.int64) == stop[raw])
    unusual[which[~ok]] = True
    first = ok & (kind[which] == STAT_NONE) & np.isin(mid.view(np.int64), keys)
    kind[which[first]] = v_kind[first]
    value[which[first]] = v[first]
    cur[which[ok]] = stop[ok]


_LINE_TIMESTAMP_TAG = 0x18  # XLine field 3 (timestamp_ns), varint


def line_header(data: bytes) -> tuple[bool, int]:
    """(has events, timestamp_ns) of a serialized line, reading only its first fields."""
    first = _first_event_offset(data)
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
    if first is None or stamp == 0:
        # Unusual layout (timestamp after the events, or none): decode the line.
        light = xline_events_as_bytes_class().FromString(data)
        return len(light.events) > 0, int(light.timestamp_ns)
    return True, stamp
