"""Protobuf varints read with numpy, many at once, from a serialized line's bytes.

`Bytes` holds a line's bytes as bytes and as the 8-byte word at every offset;
`varints_at` reads the varint at each of many offsets (one byte, or one word and at most
two bytes more), `varints_within` also checks each ends within its bounds. The line
decoder (`_wire`), the record walk (`_event_walk`) and the stat reader (`_stat_bytes`)
read through these.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tftune.probes.traces._xspace_file import Data

I64 = npt.NDArray[np.int64]
_U8 = npt.NDArray[np.uint8]
U64 = np.uint64
MAX_VARINT = 10
_MSB = U64(0x8080808080808080)
_ONES = U64(0x0101010101010101)


def varint_size(values: I64) -> I64:
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
    for i in range(MAX_VARINT):
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
    x: npt.NDArray[np.uint64] = w & U64(0x7F7F7F7F7F7F7F7F)
    for keep, move, by in _PACK_STEPS:
        high = x & move
        high >>= by
        x &= keep
        x |= high
    return x


# Each step joins neighbouring groups: 7-bit pairs, then 14-bit pairs, then 28-bit pairs.
_PACK_STEPS = (
    (U64(0x007F007F007F007F), U64(0x7F007F007F007F00), U64(1)),
    (U64(0x00003FFF00003FFF), U64(0x3FFF00003FFF0000), U64(2)),
    (U64(0x000000000FFFFFFF), U64(0x0FFFFFFF00000000), U64(4)),
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
        return word_varints(b, at, values)
    value = np.zeros(n, dtype=np.uint64)
    size = np.zeros(n, dtype=np.int64)
    near = (at < 0) | (at > b.size - 16)
    if near.any():
        inside = near & (at >= 0) & (at < b.size)
        v, sz, good = _read_varints(b.buf, np.where(inside, at, 0)[near])
        value[near], size[near] = v, np.where(good & inside[near], sz, 0)
    far = np.flatnonzero(~near)
    if far.size:
        value[far], size[far] = word_varints(b, at[far], values)
    return value, size


def word_varints(b: Bytes, at: I64, values: bool = True) -> tuple[npt.NDArray[np.uint64], I64]:
    """`varints_at` of positions at least 16 bytes before the end: each varint's first
    8 bytes read as one word, its size from the first byte without a continuation bit."""
    w = b.word_at(at)
    stops = ~w & _MSB
    low = stops & (~stops + U64(1))  # the last byte's top bit; 0 when past 8 bytes
    below = low - U64(1)  # the bits under it: all of them when past 8 bytes
    # Bytes before the last one: the continuation bits under it, counted by a multiply.
    size = (((below & _MSB) >> U64(7)) * _ONES >> U64(56)).astype(np.int64)
    size += 1  # 1..8, or 9 when past 8 bytes
    longer = np.flatnonzero(low == 0)
    b8 = b9 = b.buf[:0]
    if longer.size:
        a = at[longer]
        b8, b9 = b.buf[a + 8], b.buf[a + 9]
        size[longer] = np.where(b8 < 0x80, 9, np.where(b9 < 0x80, MAX_VARINT, 0))
    if not values:
        return np.zeros(at.shape[0], dtype=np.uint64), size
    below |= low
    w &= below  # the varint's own bytes (all 8 when past 8 bytes)
    x = _compact(w)
    if longer.size:
        x[longer] |= (b8 & 0x7F).astype(np.uint64) << U64(56)
        # Bits past 64 are dropped, as protobuf drops them.
        x[longer] |= (b9 & 1).astype(np.uint64) * (size[longer] == MAX_VARINT) << U64(63)
    return x, size


def varints_within(
    b: Bytes, at: I64, end: I64, values: bool = True
) -> tuple[npt.NDArray[np.uint64], I64, npt.NDArray[np.bool_]]:
    """The varint at each position: (value, the position after it, ok). Not ok where it
    runs past `end` or is a 10-byte varint with bits beyond 64 (protobuf drops them; a
    serializer never writes them)."""
    value, size = varints_at(b, at, values)
    after = at + size
    ok = (size > 0) & (at < end) & (after <= end)
    long = ok & (size == MAX_VARINT)
    ok[long] = b.buf[after[long] - 1] <= 1
    return value, after, ok
