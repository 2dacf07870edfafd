"""Protobuf wire-format decoding of serialized XLines, column-wise, without an object per event.

`line_columns` reads every event's metadata id, offset and duration (XEvent fields 1-3,
varints) with numpy, over all events at once, and keeps each event's stats (the bytes
after those fields) end to end, so that `probes.traces.trace.Line` can decode one event's
stats on demand. It needs the events laid out as every protobuf serializer writes them
(contiguous, fields in number order) and returns None otherwise; `slow_columns` then
re-parses the events one by one. `first_stat` reads one stat of many events at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tftune.probes.traces._schema import xevent_class, xline_events_as_bytes_class
from tftune.probes.traces._xspace_file import Data, first_event_offset

I64 = npt.NDArray[np.int64]
_U8 = npt.NDArray[np.uint8]
_EVENT_TAG = 0x22  # XLine field 4 (events), length-delimited
# XEvent fields decoded in bulk: (wire tag, column); proto serializers write fields in
# number order, so these come first, before stats (0x22) and num_occurrences (0x28).
_EVENT_FIELDS = ((0x08, 0), (0x10, 1), (0x18, 2))
_MAX_VARINT = 10


def _varint_size(values: I64) -> I64:
    """The size of each non-negative value's varint: one byte, plus one per 7 bits past
    the first 7, counted against each threshold up to the largest value."""
    size = np.ones(values.shape, dtype=np.int64)
    top = int(values.max()) if values.size else 0
    bits = 7
    while top >> bits:
        size += values >= 1 << bits
        bits += 7
    return size


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
_ONES = _U64(0x0101010101010101)


class Bytes:
    """A serialized line's bytes, as bytes and as the 8-byte word at every offset (an
    unaligned view, one word per byte: no copy), so that the 8 bytes at many offsets
    are one gather (`word_at`)."""

    def __init__(self, data: Data) -> None:
        self.buf = np.frombuffer(data, dtype=np.uint8)
        self.size = int(self.buf.shape[0])
        self.words: npt.NDArray[np.uint64] = np.ndarray(
            (max(self.size - 7, 0),), dtype="<u8", buffer=data, strides=(1,)
        )

    def word_at(self, at: I64) -> npt.NDArray[np.uint64]:
        """The 8 bytes from each offset, little-endian; each offset + 8 <= the size."""
        word: npt.NDArray[np.uint64] = self.words[at]
        return word


def _compact(w: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The low 7 bits of each of a word's 8 bytes, packed: 8 varint groups, 56 bits."""
    x: npt.NDArray[np.uint64] = w & _U64(0x7F7F7F7F7F7F7F7F)
    for keep, move, by in _PACK_STEPS:
        high = x & move
        high >>= by
        x &= keep
        x |= high
    return x


# Each step joins neighbouring groups: 7-bit pairs, then 14-bit pairs, then 28-bit pairs.
_PACK_STEPS = (
    (_U64(0x007F007F007F007F), _U64(0x7F007F007F007F00), _U64(1)),
    (_U64(0x00003FFF00003FFF), _U64(0x3FFF00003FFF0000), _U64(2)),
    (_U64(0x000000000FFFFFFF), _U64(0x0FFFFFFF00000000), _U64(4)),
)


def varints_at(b: Bytes, at: I64, values: bool = True) -> tuple[npt.NDArray[np.uint64], I64]:
    """The varint at each position, as `_read_varints` reads it: (value, size), size 0
    where it does not end within 10 bytes or runs past the bytes. A one-byte varint is
    its byte; a longer one is read as one 8-byte word (and, past 8 bytes, 2 more bytes);
    positions too near the end of the bytes for that are read byte by byte.
    `values=False`: sizes only (values are 0)."""
    n = at.shape[0]
    if n and int(at.min()) >= 0 and int(at.max()) <= b.size - 16:
        first = b.buf[at]
        if (first < 0x80).all():  # most lengths, ids and small values: one byte
            return first.astype(np.uint64), np.ones(n, dtype=np.int64)
        return _word_varints(b, at, values)
    value = np.zeros(n, dtype=np.uint64)
    size = np.zeros(n, dtype=np.int64)
    near = (at < 0) | (at > b.size - 16)
    if near.any():
        inside = near & (at >= 0) & (at < b.size)
        v, sz, good = _read_varints(b.buf, np.where(inside, at, 0)[near])
        value[near], size[near] = v, np.where(good & inside[near], sz, 0)
    far = np.flatnonzero(~near)
    if far.size:
        value[far], size[far] = _word_varints(b, at[far], values)
    return value, size


def _word_varints(b: Bytes, at: I64, values: bool = True) -> tuple[npt.NDArray[np.uint64], I64]:
    """`varints_at` of positions at least 16 bytes before the end: each varint's first
    8 bytes read as one word, its size from the first byte without a continuation bit."""
    w = b.word_at(at)
    stops = ~w & _MSB
    low = stops & (~stops + _U64(1))  # the last byte's top bit; 0 when past 8 bytes
    below = low - _U64(1)  # the bits under it: all of them when past 8 bytes
    # Bytes before the last one: the continuation bits under it, counted by a multiply.
    size = (((below & _MSB) >> _U64(7)) * _ONES >> _U64(56)).astype(np.int64)
    size += 1  # 1..8, or 9 when past 8 bytes
    longer = np.flatnonzero(low == 0)
    b8 = b9 = b.buf[:0]
    if longer.size:
        a = at[longer]
        b8, b9 = b.buf[a + 8], b.buf[a + 9]
        size[longer] = np.where(b8 < 0x80, 9, np.where(b9 < 0x80, _MAX_VARINT, 0))
    if not values:
        return np.zeros(at.shape[0], dtype=np.uint64), size
    below |= low
    w &= below  # the varint's own bytes (all 8 when past 8 bytes)
    x = _compact(w)
    if longer.size:
        x[longer] |= (b8 & 0x7F).astype(np.uint64) << _U64(56)
        # Bits past 64 are dropped, as protobuf drops them.
        x[longer] |= (b9 & 1).astype(np.uint64) * (size[longer] == _MAX_VARINT) << _U64(63)
    return x, size


def _varints_within(
    b: Bytes, at: I64, end: I64, values: bool = True
) -> tuple[npt.NDArray[np.uint64], I64, npt.NDArray[np.bool_]]:
    """The varint at each position: (value, the position after it, ok). Not ok where it
    runs past `end` or is a 10-byte varint with bits beyond 64 (protobuf drops them; a
    serializer never writes them)."""
    value, size = varints_at(b, at, values)
    after = at + size
    ok = (size > 0) & (at < end) & (after <= end)
    long = ok & (size == _MAX_VARINT)
    ok[long] = b.buf[after[long] - 1] <= 1
    return value, after, ok


# Events decoded per numpy batch: bounds the temporaries on million-event lines (a few
# MB), and is large enough that numpy's calls, not the Python between them, take the
# time: lines decoded on two threads then share the GIL little (`trace_file`).
_DECODE_BATCH = 1 << 15
# False, True, False, ...: which spans `_gather` keeps (gaps and spans alternate).
_ALTERNATE = np.tile(np.array([False, True]), _DECODE_BATCH)

# A line's event records: each record's offset (its tag byte; records lie end to end, so
# each ends where the next starts) and where the last one ends.
Records = tuple[I64, int]
# A line's columns (metadata id, offset, duration) and its events' stats: the bytes of
# each event after its first three fields, laid end to end; event i's are
# stats[bounds[i]:bounds[i + 1]] and parse as an XEvent that has the event's stats.
Columns = tuple[npt.NDArray[np.signedinteger[Any]], I64, I64, bytes, npt.NDArray[np.integer[Any]]]


def records_of(data: Data, lengths: I64) -> Records | None:
    """A line's event records from the events' lengths, where they are contiguous from
    the first one (as every protobuf serializer writes them); None otherwise."""
    size = len(data)
    first = first_event_offset(data)
    if first is None:
        return None
    # Each record is: tag byte, length varint, payload.
    sizes = 1 + _varint_size(lengths)
    sizes += lengths
    end = first + int(sizes.sum())
    if end > size or (end < size and data[end] == _EVENT_TAG):
        return None
    starts = np.empty_like(sizes)
    starts[0] = first
    np.cumsum(sizes[:-1], out=starts[1:])
    starts[1:] += first
    return starts, end


def line_columns(data: Data, records: Records) -> Columns | None:
    """A line's columns and stats (`Columns`), decoded in bulk from its serialized
    bytes, given its event records (`records_of`, or `_event_walk.event_records`);
    None where the events' fields are not in the order the serializers write them (the
    caller then takes the slow path)."""
    b = Bytes(data)
    buf = b.buf
    starts, last_end = records
    n = int(starts.shape[0])
    # Ids in 4 bytes each while they fit (they are small), offsets and durations in 8;
    # stats bounds in 4 bytes for a line under 4 GiB.
    mids: npt.NDArray[np.signedinteger[Any]] = np.zeros(n, dtype=np.int32)
    offs, durs = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    bounds = np.zeros(n + 1, dtype=np.uint32 if buf.shape[0] < 2**32 else np.int64)
    batch_mids = np.zeros(min(n, _DECODE_BATCH), dtype=np.int64)
    stats: list[npt.NDArray[np.uint8]] = []
    for lo in range(0, n, _DECODE_BATCH):
        hi = min(lo + _DECODE_BATCH, n)
        start, end = _payloads(b, starts, lo, hi, last_end)
        batch = batch_mids[: hi - lo]
        batch[:] = 0
        cur = _decode_fields(b, start, end, [batch, offs[lo:hi], durs[lo:hi]])
        if cur is None:
            return None
        if mids.dtype != np.int64 and not -(2**31) <= int(batch.min()) <= int(batch.max()) < 2**31:
            mids = mids.astype(np.int64)
        mids[lo:hi] = batch
        stats.append(_gather(buf, cur, end))
        bounds[lo + 1 : hi + 1] = end - cur
    np.cumsum(bounds, dtype=bounds.dtype, out=bounds)
    return mids, offs, durs, b"".join([s.data for s in stats]), bounds


def _payloads(b: Bytes, starts: I64, lo: int, hi: int, last_end: int) -> tuple[I64, I64]:
    """The payload (start, end) of records `lo` to `hi`: each ends where the next starts
    (the last where the run ends), and starts after its tag and length."""
    end = np.empty(hi - lo, dtype=np.int64)
    end[: hi - lo - 1] = starts[lo + 1 : hi]
    end[-1] = starts[hi] if hi < starts.shape[0] else last_end
    start = starts[lo:hi] + 1
    if (b.buf[start] < 0x80).all():  # most lengths: one byte
        start += 1
    else:
        start += varints_at(b, start)[1]
    return start, end


def _decode_fields(b: Bytes, start: I64, end: I64, out: list[I64]) -> I64 | None:
    """Decode the leading varint fields of a batch of events into `out` (one column per
    field); return where each event's fields end, or None if they are not laid out
    as the serializers write them."""
    buf = b.buf
    last = buf.shape[0] - 1
    if start.shape[0] and int(end.max()) <= b.size - 16:
        return _decode_far_fields(b, start.copy(), end, out)
    cur = start.copy()
    for tag, col in _EVENT_FIELDS:
        present = buf[np.minimum(cur, last)] == tag
        present &= cur < end
        here = np.flatnonzero(present)
        if not here.size:
            continue
        value, size = varints_at(b, cur[here] + 1)
        if not (size > 0).all():
            return None
        out[col][here] = value.view(np.int64)
        cur[here] += 1 + size
    return _fields_end(buf, cur, end)


def _decode_far_fields(b: Bytes, cur: I64, end: I64, out: list[I64]) -> I64 | None:
    """`_decode_fields` of events that end at least 16 bytes before the line's end: each
    field read at every event, kept where its tag is there (most events have all)."""
    buf = b.buf
    for tag, col in _EVENT_FIELDS:
        present = buf[cur] == tag
        present &= cur < end
        first = buf[cur + 1]
        if (first < 0x80).all():  # one byte each: ids, small values
            value, size = first.astype(np.uint64), np.ones(cur.shape[0], dtype=np.int64)
        else:
            value, size = _word_varints(b, cur + 1)
        if present.all():
            if not (size > 0).all():
                return None
            out[col][:] = value.view(np.int64)
            cur += size
            cur += 1
            continue
        if not (present <= (size > 0)).all():
            return None
        out[col][present] = value.view(np.int64)[present]
        cur += np.where(present, size + 1, 0)
    return _fields_end(buf, cur, end)


def _fields_end(buf: _U8, cur: I64, end: I64) -> I64 | None:
    """`cur`, where what follows the bulk fields is stats or num_occurrences (else the
    event's fields are out of the usual order and bulk decoding would misread them)."""
    if (cur > end).any():
        return None
    after = buf[np.minimum(cur[cur < end], buf.shape[0] - 1)]
    return cur if ((after == 0x22) | (after == 0x28)).all() else None


def _gather(buf: _U8, starts: I64, ends: I64) -> _U8:
    """The spans [starts[i], ends[i]) of `buf`, laid end to end (spans in order, apart)."""
    n = int(starts.shape[0])
    if not n:
        return buf[:0]
    lengths = np.empty(2 * n, dtype=np.int64)
    lengths[0] = 0
    np.subtract(starts[1:], ends[:-1], out=lengths[2::2])
    np.subtract(ends, starts, out=lengths[1::2])
    keep = np.repeat(_ALTERNATE[: 2 * n], lengths)
    spans: _U8 = buf[int(starts[0]) : int(ends[-1])][keep]
    return spans


def slow_columns(data: Data) -> Columns:
    """Columns by re-parsing each event: for lines with an unusual field layout. The
    stats are the events themselves, laid end to end."""
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
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=n), out=bounds[1:])
    return mids, offs, durs, b"".join(parts), bounds


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
    b = Bytes(data)
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
            stat = _read_plain_stats(b, cur, end, stat, keys, kind, value)
        if stat.size:
            _read_stats(b, cur, end, stat, keys, kind, value, unusual)
        live = live[~unusual[live] & (cur[live] < end[live])]
    return kind, value, unusual


def _read_plain_stats(
    b: Bytes,
    cur: I64,
    end: I64,
    which: I64,
    keys: I64,
    kind: npt.NDArray[np.int8],
    value: npt.NDArray[np.uint64],
) -> I64:
    """`_read_stats` of the stats laid out the usual way (a one-byte length, a metadata
    id of one or two bytes, then no value, a double, or an integer ending the stat), with
    a few byte reads and one word each; returns the events whose stat is not such."""
    fits = cur[which] <= b.size - 32  # nearer the end: `_read_stats`
    if not fits.any():
        return which
    rest = [which[~fits]]
    which = which[fits]
    buf = b.buf
    at = cur[which]
    length = buf[at + 1].astype(np.int64)
    b3, b4 = buf[at + 3].astype(np.int64), buf[at + 4].astype(np.int64)
    short_id = b3 < 0x80
    sid = np.where(short_id, b3, (b3 & 0x7F) | (b4 << 7))
    vat = at + np.where(short_id, 4, 5)  # the value's tag
    n_value = at + 2 + length - vat - 1  # bytes after the tag, to the stat's end
    vtag = buf[vat]
    ints = (vtag == _VALUE_U64) | (vtag == _VALUE_I64) | (vtag == _VALUE_REF)
    ints &= (n_value >= 1) & (n_value <= _MAX_VARINT)
    plain = (length < 0x80) & (at + 2 + length <= end[which]) & (buf[at + 2] == _STAT_ID_TAG)
    plain &= short_id | (b4 < 0x80)
    plain &= (n_value == -1) | ints | ((vtag == _VALUE_DOUBLE) & (n_value == 8))
    # An integer ends exactly at the stat's end (a 10-byte one within 64 bits).
    v, size = _word_varints(b, vat + 1)
    plain &= ~ints | ((size == n_value) & ((size < _MAX_VARINT) | (buf[vat + size] <= 1)))
    mine = np.flatnonzero(plain)
    got = mine[(kind[which[mine]] == STAT_NONE) & _among(sid[mine], keys)]
    kind[which[got]] = np.where(n_value[got] == -1, STAT_OTHER, _VALUE_CLASS[vtag[got]])
    got = got[ints[got]]
    value[which[got]] = v[got]
    cur[which[mine]] = at[mine] + 2 + length[mine]
    rest.append(which[~plain])
    left: I64 = np.concatenate(rest)
    return left


def _among(values: I64, keys: I64) -> npt.NDArray[np.bool_]:
    """Whether each value is one of `keys` (a few: no sort, as np.isin would)."""
    found = np.zeros(values.shape[0], dtype=bool)
    for k in keys.tolist():
        found |= values == k
    return found


def _read_stats(
    b: Bytes,
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
