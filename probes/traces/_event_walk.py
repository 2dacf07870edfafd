"""Where a serialized XLine's event records lie, found with numpy: no object per event.

A line's events are records laid end to end: the tag 0x22, a length varint, the event.
Each record's length says where the next one starts, a chain that only a walk follows.
`event_records` walks many stretches of it at once. Walker 0 starts at the line's first
event; the others start at evenly spaced points, each at the first bytes there that
look like an event record's start (the tag, a length, the event's id field and its
offset field: a stat has no field 2 of wire type 0, so the look tells events from the
stats inside them). All walkers step one record at a time together, each until it
reaches the point where the next one started.

The walk proves itself: when every walker lands exactly on the next one's start, each
record found is, from the first event on, the one the lengths lead to. A start that is
not a record (bytes inside an event that happen to look like one) makes the walker
before it step over it; such starts are dropped and the walk runs again. None where
the records are not laid out as protobuf writes them, or the walk does not settle: the
caller then parses the line with protobuf, which also names what is wrong.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tftune.probes.traces._varints import Bytes, varints_at
from tftune.probes.traces._wire import Records
from tftune.probes.traces._xspace_file import EVENT_TAG, Data

I64 = npt.NDArray[np.int64]
_U8 = npt.NDArray[np.uint8]
_ID_TAG, _OFFSET_TAG = 0x08, 0x10  # XEvent fields 1 and 2, varints
# Bytes between the walkers' starting points: a walker steps over about this many bytes
# of records; fewer walkers make more steps, each a few numpy calls over all of them.
_STRIDE = 2048
_PROBE = 48  # bytes searched for a record's start at each point
_LOOK = _PROBE + 8  # bytes read there: a start's look spans up to 7 bytes
_ROUNDS = 4  # walks run (each dropping the false starts the last one found) before giving up
# Lines under this size are left to protobuf: the walk's cost is mostly its steps' count,
# the same for any size, and protobuf's is in proportion to the bytes.
MIN_WALK_BYTES = 1 << 22


def event_records(data: Data, first: int, stride: int = _STRIDE) -> Records | None:
    """The event records (`_wire.Records`) from the one at `first` to the last of the run
    of records after it; None where no walk proves the chain. `stride`: the bytes
    between walkers' starting points (more than `_LOOK`)."""
    b = Bytes(data)
    starts = _starts(b.buf, first, stride)
    for _ in range(_ROUNDS):
        walked = _walk(b, starts)
        if walked is None:
            return None
        if isinstance(walked, tuple):
            return walked
        starts = np.delete(starts, walked)
    return None


def _starts(buf: _U8, first: int, stride: int) -> I64:
    """`first`, then at every `stride` bytes the first place within `_PROBE` bytes that
    looks like an event record's start (length and id of one or two bytes each)."""
    size = int(buf.shape[0])
    points = np.arange(first + stride, size - _LOOK, stride, dtype=np.int64)
    if not points.size:
        return np.array([first], dtype=np.int64)
    look = buf[points[:, None] + np.arange(_LOOK)]
    more: npt.NDArray[np.bool_] = look >= 0x80  # a varint's continuation bit

    def at(k: int, byte: int | None = None) -> npt.NDArray[np.bool_]:
        """At each of the `_PROBE` offsets: the byte k further on is `byte`, or (None)
        has a continuation bit."""
        if byte is None:
            return more[:, k : k + _PROBE]
        is_byte: npt.NDArray[np.bool_] = look[:, k : k + _PROBE] == byte
        return is_byte

    one_byte_len = ~at(1) & at(2, _ID_TAG)
    two_byte_len = at(1) & ~at(2) & at(3, _ID_TAG)
    found = one_byte_len & ((~at(3) & at(4, _OFFSET_TAG)) | (at(3) & ~at(4) & at(5, _OFFSET_TAG)))
    found |= two_byte_len & ((~at(4) & at(5, _OFFSET_TAG)) | (at(4) & ~at(5) & at(6, _OFFSET_TAG)))
    found &= at(0, EVENT_TAG)
    has = found.any(axis=1)
    picked = points[has] + found[has].argmax(axis=1)
    return np.concatenate([np.array([first], dtype=np.int64), picked])


def _in_order(walkers: int, ids: list[npt.NDArray[np.int32]], records: list[I64]) -> I64:
    """Every record's offset in the line's order (walker by walker, each walker's in
    steps), from each step's walkers and the records they stood on."""
    counts = np.bincount(np.concatenate(ids), minlength=walkers)
    first = np.zeros(counts.shape[0], dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    starts = np.empty(int(counts.sum()), dtype=np.int64)
    for step, (here, at) in enumerate(zip(ids, records, strict=True)):
        starts[first[here] + step] = at
    return starts


def _walk(b: Bytes, starts: I64) -> Records | npt.NDArray[np.intp] | None:
    """Walk from every start to the next: the records, where every walker lands on the
    next one's start; else the starts to drop before walking again; None where the
    walker known to be on the chain meets bytes that are no record."""
    k = int(starts.shape[0])
    buf, size = b.buf, b.size
    limits = np.empty(k, dtype=np.int64)
    limits[:-1], limits[-1] = starts[1:], size
    stopped_at = np.zeros(k, dtype=np.int64)
    broken = np.zeros(k, dtype=bool)
    ids, pos, lim = np.arange(k, dtype=np.int32), starts.copy(), limits.copy()
    ids_per_step: list[npt.NDArray[np.int32]] = []
    records: list[I64] = []
    while ids.shape[0]:
        # Most steps: every record a tag and a one-byte length, before the last byte
        # (walkers stay in their starts' order, so the last one is the furthest).
        fast = int(pos[-1]) + 1 < size
        if fast:
            tags, first_len = buf[pos], buf[pos + 1]
            fast = int(first_len.max()) < 0x80 and int(tags.min()) == int(tags.max()) == EVENT_TAG
        if fast:
            ends = pos + 2
            ends += first_len
            fast = int(ends.max()) <= size
        if not fast:
            ids, pos, lim, ends = _checked_step(b, ids, pos, lim, k, stopped_at, broken)
        ids_per_step.append(ids)
        records.append(pos)
        going = ends < lim
        if not going.all():
            stopped_at[ids[~going]] = ends[~going]
            ids, pos, lim = ids[going], ends[going], lim[going]
        else:
            pos = ends
    landed = (stopped_at == limits) & ~broken
    landed[-1] = not broken[-1]
    if landed.all():
        return _in_order(k, ids_per_step, records), int(stopped_at[-1])
    return _false_starts(landed, broken, stopped_at, limits)


def _checked_step(
    b: Bytes,
    ids: npt.NDArray[np.int32],
    pos: I64,
    lim: I64,
    walkers: int,
    stopped_at: I64,
    broken: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[np.int32], I64, I64, I64]:
    """One step of every walker, each record checked (tag, length within the bytes):
    walkers at a byte that is no record stop there (`stopped_at` for the last walker at
    a byte that is no event tag: the end of the run; `broken` for the others)."""
    buf = b.buf
    length, size_len = varints_at(b, pos + 1)
    after = pos + 1 + size_len
    ends = after + length.view(np.int64)
    tag = buf[pos] == EVENT_TAG
    good = tag & (size_len > 0) & (ends <= b.size)
    if good.all():
        return ids, pos, lim, ends
    bad = ~good
    done = bad & ~tag & (ids == walkers - 1)
    stopped_at[ids[done]] = pos[done]
    broken[ids[bad & ~done]] = True
    return ids[good], pos[good], lim[good], ends[good]


def _false_starts(
    landed: npt.NDArray[np.bool_], broken: npt.NDArray[np.bool_], stopped_at: I64, limits: I64
) -> npt.NDArray[np.intp] | None:
    """The starts to drop after a walk that did not land everywhere; None where the first
    walker that did not land is on the chain (all before it landed) and met no record."""
    first_miss = int(np.argmin(landed))
    if broken[first_miss] or first_miss == landed.shape[0] - 1:
        return None
    # A walker that stepped over the next start shows that start false (where the walker
    # is on the chain; elsewhere dropping a true start only merges two stretches), and a
    # walker that met bytes that are no record started at a false start.
    over = np.flatnonzero(~landed[:-1] & ~broken[:-1] & (stopped_at[:-1] > limits[:-1])) + 1
    met = np.flatnonzero(broken)
    return np.union1d(over, met[met > 0])
