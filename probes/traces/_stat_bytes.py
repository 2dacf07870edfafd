"""One stat of many events read at once from their serialized bytes (`first_stat`).

An event's stats are kept serialized (`probes.traces.trace.Line`); reading, say, the
`id` stat of every function dispatch with protobuf would make a message per event.
`first_stat` walks the events' fields with numpy, one field of every event per round,
and leaves to protobuf only the events laid out unusually.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tftune.probes.traces._varints import (
    MAX_VARINT,
    U64,
    Bytes,
    varints_within,
    word_varints,
)

I64 = npt.NDArray[np.int64]

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
    decode those, and may reject them. Every other event is read up to its first such
    stat (to its end where it has none), so that protobuf would accept the event's
    bytes up to there; what follows that stat is not read.
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
            _, after, ok = varints_within(b, cur[varint] + 1, end[varint], values=False)
            unusual[varint[~ok]] = True
            cur[varint[ok]] = after[ok]
        stat = live[tag_class == 2]
        if stat.size:
            stat = _read_plain_stats(b, cur, end, stat, keys, kind, value)
        if stat.size:
            _read_stats(b, cur, end, stat, keys, kind, value, unusual)
        live = live[~unusual[live] & (cur[live] < end[live]) & (kind[live] == STAT_NONE)]
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
    ints &= (n_value >= 1) & (n_value <= MAX_VARINT)
    plain = (length < 0x80) & (at + 2 + length <= end[which]) & (buf[at + 2] == _STAT_ID_TAG)
    plain &= short_id | (b4 < 0x80)
    plain &= (n_value == -1) | ints | ((vtag == _VALUE_DOUBLE) & (n_value == 8))
    # An integer ends exactly at the stat's end (a 10-byte one within 64 bits).
    v, size = word_varints(b, vat + 1)
    plain &= ~ints | ((size == n_value) & ((size < MAX_VARINT) | (buf[vat + size] <= 1)))
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
    size, body, ok = varints_within(b, cur[which] + 1, end[which])
    ok &= size < U64(2**62)
    stop = body + np.where(ok, size, 0).astype(np.int64)
    ok &= (stop <= end[which]) & (body < stop)
    ok[ok] = b.buf[body[ok]] == _STAT_ID_TAG
    mid, at, ok2 = varints_within(b, body + 1, stop)
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
        iv, iafter, iok = varints_within(b, at[ints] + 1, stop[ints])
        ok[ints] = iok & (iafter == stop[ints])
        v[ints] = iv
    raw = ok & has_value & (vtag == _VALUE_BYTES)
    if raw.any():
        blen, body2, bok = varints_within(b, at[raw] + 1, stop[raw])
        fits = bok & (blen < U64(2**62))
        ok[raw] = fits & (body2 + np.where(fits, blen, 0).astype(np.int64) == stop[raw])
    unusual[which[~ok]] = True
    first = ok & (kind[which] == STAT_NONE) & np.isin(mid.view(np.int64), keys)
    kind[which[first]] = v_kind[first]
    value[which[first]] = v[first]
    cur[which[ok]] = stop[ok]
