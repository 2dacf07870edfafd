"""Protobuf wire-format decoding of serialized XLines, column-wise, without an object per event.

`line_columns` reads every event's metadata id, offset and duration (XEvent fields 1-3,
varints) with numpy, over all events at once, and keeps each event's stats (the bytes
after those fields) end to end, so that `probes.traces.trace.Line` can decode one event's
stats on demand. It needs the events laid out as every protobuf serializer writes them
(contiguous, fields in number order) and returns None otherwise; `slow_columns` then
re-parses the events one by one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tftune.probes.traces._schema import xevent_class, xline_events_as_bytes_class
from tftune.probes.traces._varints import Bytes, varint_size, varints_at, word_varints
from tftune.probes.traces._xspace_file import EVENT_TAG, Data, first_event_offset

I64 = npt.NDArray[np.int64]
_U8 = npt.NDArray[np.uint8]
# XEvent fields decoded in bulk: (wire tag, column); proto serializers write fields in
# number order, so these come first, before stats (0x22) and num_occurrences (0x28).
_EVENT_FIELDS = ((0x08, 0), (0x10, 1), (0x18, 2))


# Events decoded per numpy batch: bounds the temporaries on million-event lines (a few
# MB), and is large enough that numpy's calls, not the Python between them, take the time.
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
    sizes = 1 + varint_size(lengths)
    sizes += lengths
    end = first + int(sizes.sum())
    if end > size or (end < size and data[end] == EVENT_TAG):
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
    start += varints_at(b, start, values=False)[1]
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
            value, size = word_varints(b, cur + 1)
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
