"""`_stat_bytes.first_stat` (a stat read for many events at once) against protobuf.

Whatever the bytes, an event `first_stat` does not call unusual must parse with protobuf
up to its first matching stat (whole where it has none) and give that same stat; an
unusual one is left to protobuf.
"""

from __future__ import annotations

import numpy as np
from gputrace import event_bytes
from hypothesis import given, settings
from hypothesis import strategies as st

from tftune.probes.traces._schema import xevent_class
from tftune.probes.traces._stat_bytes import (
    STAT_INT64,
    STAT_NONE,
    STAT_OTHER,
    STAT_UINT64,
    first_stat,
)

KEYS = (3, 200)  # stat metadata ids looked for: one byte, and two as a varint

_value = st.one_of(
    st.tuples(st.just("int64_value"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("uint64_value"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("double_value"), st.floats(allow_nan=False)),
    st.tuples(st.just("str_value"), st.text(max_size=8)),
    st.tuples(st.just("bytes_value"), st.binary(max_size=8)),
    st.tuples(st.just("ref_value"), st.integers(0, 2**40)),
    st.tuples(st.just(None), st.none()),
)
_stat = st.tuples(st.sampled_from([1, 3, 7, 200, 300]), _value)
_event = st.tuples(
    st.integers(0, 2**20),
    st.integers(-(2**40), 2**50),
    st.integers(0, 2**40),
    st.lists(_stat, max_size=5),
)
_edit = st.tuples(st.floats(0, 1), st.integers(0, 255), st.sampled_from(["set", "drop", "add"]))


def _mutate(data: bytes, edits: list[tuple[float, int, str]]) -> bytes:
    buf = bytearray(data)
    for where, byte, how in edits:
        at = min(int(where * len(buf)), max(len(buf) - 1, 0))
        if how == "set" and buf:
            buf[at] = byte
        elif how == "drop" and buf:
            del buf[at]
        elif how == "add":
            buf.insert(at, byte)
    return bytes(buf)


def _protobuf(data: bytes) -> tuple[bool, tuple[int, int | None]]:
    """Whether the event parses, and its first stat with an id in KEYS."""
    try:
        ev = xevent_class().FromString(data)
    except Exception:
        return False, (STAT_NONE, None)
    for stat in ev.stats:
        if stat.metadata_id in KEYS:
            kind = stat.WhichOneof("value")
            if kind == "int64_value":
                return True, (STAT_INT64, stat.int64_value)
            if kind == "uint64_value":
                return True, (STAT_UINT64, stat.uint64_value)
            return True, (STAT_OTHER, None)
    return True, (STAT_NONE, None)


def _protobuf_up_to_key(data: bytes) -> tuple[bool, tuple[int, int | None]]:
    """`_protobuf` of the event's shortest prefix that protobuf parses with a stat whose
    id is in KEYS (the event's bytes up to the end of that stat), else of the event."""
    for cut in range(1, len(data)):
        parses, found = _protobuf(data[:cut])
        if parses and found[0] != STAT_NONE:
            return parses, found
    return _protobuf(data)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_event, st.lists(_edit, max_size=3)), min_size=1, max_size=12),
    st.sampled_from([0, 64]),
)
def test_first_stat_agrees_with_protobuf(events: list[tuple[tuple, list]], tail: int) -> None:
    """With bytes after the events (`tail`), every stat is far enough from the end to be
    read the quick way where it is laid out as usual; without, the last ones are not."""
    parts = [_mutate(event_bytes(*ev), edits) for ev, edits in events]
    data = b"".join(parts) + bytes(tail)
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    pos = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    kind, value, unusual = first_stat(data, pos, lengths, np.array(KEYS, dtype=np.int64))
    for j, part in enumerate(parts):
        if unusual[j]:
            continue
        parses, expected = _protobuf_up_to_key(part)
        assert parses, part.hex()
        k = int(kind[j])
        got = value[j : j + 1].view(np.int64)[0] if k == STAT_INT64 else value[j]
        assert (k, int(got) if k in (STAT_INT64, STAT_UINT64) else None) == expected


def test_a_string_value_or_an_unknown_field_is_left_to_protobuf() -> None:
    stat_7 = event_bytes(0, 0, 0, [(3, ("int64_value", 7))])  # an event of that stat alone
    text = event_bytes(1, 0, 5, [(3, ("str_value", "ok"))])
    odd = event_bytes(1, 0, 5, []) + bytes([0x30, 0x01]) + stat_7  # field 6 before the stat
    plain = event_bytes(1, 0, 5, [(7, ("int64_value", 1)), (200, ("uint64_value", 2**64 - 1))])
    # Field 6 after the stat sought: that stat is read, what follows it is not.
    after = event_bytes(1, 0, 5, [(3, ("int64_value", 7))]) + bytes([0x30, 0x01])
    parts = [text, odd, plain, after]
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    pos = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    kind, value, unusual = first_stat(b"".join(parts), pos, lengths, np.array(KEYS, dtype=np.int64))
    assert unusual.tolist() == [True, True, False, False]
    assert (int(kind[2]), int(value[2])) == (STAT_UINT64, 2**64 - 1)
    assert (int(kind[3]), int(value[3])) == (STAT_INT64, 7)
