"""`_event_walk.event_records` (a line's event records found by walking them with numpy)
against protobuf.

Whatever the bytes, a line read through the walk must come out exactly as protobuf's
parse of it gives it, or fail exactly as that does: the walk either proves each record
or leaves the line to protobuf. Small strides put many walkers on small lines, and stat
values that look like event records put false starts among them.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from gputrace import event_bytes
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tftune.core.errors import TraceError
from tftune.probes.traces import _event_walk, trace_file
from tftune.probes.traces._schema import (
    xline_events_as_bytes_class,
    xspace_lines_as_bytes_class,
)
from tftune.probes.traces._wire import records_of
from tftune.probes.traces._xspace_file import first_event_offset

# Bytes that look like the start of an event record (tag, length, id field, offset field).
LOOKALIKE = b'"\x06\x08\x01\x10\x02\x18\x03'

_value = st.one_of(
    st.tuples(st.just("int64_value"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("uint64_value"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("double_value"), st.floats(allow_nan=False)),
    st.tuples(st.just("str_value"), st.sampled_from(["", "x", LOOKALIKE.decode() * 3])),
    st.tuples(st.just("bytes_value"), st.binary(max_size=300)),
    st.tuples(st.just(None), st.none()),
)
_event = st.tuples(
    st.integers(0, 2**20),
    st.integers(0, 2**50),
    st.integers(0, 2**40),
    st.lists(st.tuples(st.sampled_from([1, 3, 200]), _value), max_size=4),
)


def _line(events: list[bytes], name: str = "worker", display: str = "") -> bytes:
    line = xline_events_as_bytes_class()()
    line.id, line.name, line.timestamp_ns = 7, name, 1_700_000_000_000_000_000
    line.display_name = display
    line.events.extend(events)
    return bytes(line.SerializeToString())


def _read(data: bytes, walk: bool, stride: int) -> object:
    """`trace_file._line_events` of the bytes, through the walk or protobuf alone: its
    line fields and columns, or the exception it raised."""
    least = 0 if walk else 1 << 62
    bounds = partial(_event_walk.event_records, stride=stride)
    with (
        mock.patch.object(trace_file, "MIN_WALK_BYTES", least),
        mock.patch.object(trace_file, "event_records", bounds),
    ):
        try:
            head, cols = trace_file._line_events(data)
        except Exception as exc:  # compared by kind: both reads must fail alike
            return type(exc)
    fields = (head.id, head.name, head.display_name, head.timestamp_ns)
    if cols is None:
        return fields, None
    mids, offs, durs, stats, bounds_ = cols
    return fields, (mids.tolist(), offs.tolist(), durs.tolist(), stats, bounds_.tolist())


def _mutate(data: bytes, edits: list[tuple[float, int]]) -> bytes:
    buf = bytearray(data)
    for where, byte in edits:
        buf[min(int(where * len(buf)), len(buf) - 1)] = byte
    return bytes(buf)


@settings(max_examples=300, deadline=None)
@example(  # a walker on the line's last byte, after a damaged length
    events=[
        (128, 2097152, 268435456, []),
        (128, 16384, 16384, [(200, ("double_value", 0.0))]),
        (128, 16384, 268435456, [(200, ("int64_value", 562_949_953_421_312))]),
        (16384, 268435456, 34_359_738_368, []),
    ],
    stride=64,
    edits=[(0.1875, 92)],
    display="\x80",
)
@given(
    st.lists(_event, min_size=1, max_size=60),
    st.sampled_from([64, 97, 256]),
    st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=2),
    st.text(max_size=3),
)
def test_walk_reads_every_line_as_protobuf_does(events, stride, edits, display) -> None:  # type: ignore[no-untyped-def]
    data = _mutate(_line([event_bytes(*e) for e in events], display=display), edits)
    assert _read(data, walk=True, stride=stride) == _read(data, walk=False, stride=stride)


def test_false_starts_are_dropped_and_the_walk_runs_again() -> None:
    # Every event carries stat values that look like event records: walkers start on
    # some of them, the walk before each steps over it, and a second walk proves the line.
    events = [
        event_bytes(k % 5 + 1, 1000 + 17 * k, 9, [(3, ("str_value", LOOKALIKE.decode() * 4))])
        for k in range(400)
    ]
    data = _line(events)
    walks = []
    real_walk = _event_walk._walk

    def counted(*args):  # type: ignore[no-untyped-def]
        walks.append(args[1].shape[0])
        return real_walk(*args)

    with mock.patch.object(_event_walk, "_walk", counted):
        found = _event_walk.event_records(data, first_event_offset(data) or 0, stride=64)
    assert found is not None
    assert len(walks) >= 2 and walks[1] < walks[0]  # fewer starts the second time
    light = xline_events_as_bytes_class().FromString(data)
    lengths = np.fromiter(map(len, light.events), dtype=np.int64)
    expected = records_of(data, lengths)
    assert expected is not None
    assert np.array_equal(found[0], expected[0]) and found[1] == expected[1]


def test_records_with_every_length_size_are_walked() -> None:
    # One-, two- and three-byte lengths, two-byte ids, an event at offset 0 (no field 2).
    events = [event_bytes(0, 0, 5, [])]
    for k in range(300):
        pad = [(1, ("bytes_value", bytes(k * 60 % 20000)))] if k % 7 == 0 else []
        events.append(event_bytes(300 + k, 5 + k, 3, pad))
    data = _line(events, display="display name after the events")
    assert _read(data, walk=True, stride=128) == _read(data, walk=False, stride=128)
    found = _event_walk.event_records(data, first_event_offset(data) or 0, stride=128)
    assert found is not None and found[0].shape[0] == len(events)


def test_a_truncated_line_is_left_to_protobuf() -> None:
    data = _line([event_bytes(1, 10 * k + 1, 2, []) for k in range(200)])
    cut = data[: len(data) - 3]
    assert _event_walk.event_records(cut, first_event_offset(cut) or 0, stride=64) is None
    assert _read(cut, walk=True, stride=64) is _read(cut, walk=False, stride=64)


def test_events_split_by_another_field_are_left_to_protobuf() -> None:
    half = [event_bytes(1, 10 * k + 1, 2, []) for k in range(100)]
    data = _line(half)
    # XLine field 9 (duration_ps) between two runs of events: protobuf joins them.
    data += b"\x48\x05" + b"".join(b'"' + bytes([len(e)]) + e for e in half)
    walked = _read(data, walk=True, stride=64)
    assert walked == _read(data, walk=False, stride=64)
    assert isinstance(walked, tuple) and len(walked[1][0]) == 200


def _big_trace(path: Path, events: int) -> list[int]:
    """A one-line host trace over `MIN_WALK_BYTES`; the file offset of each event record."""
    rng = np.random.default_rng(3)
    records = []
    for k in range(events):
        stats = [(2, ("int64_value", int(rng.integers(0, 2**40))))] if k % 3 else []
        ev = event_bytes(int(rng.integers(1, 300)), 1 + 1000 * k, int(rng.integers(1, 999)), stats)
        records.append(ev)
    line = _line(records, name="tf_data_private_threadpool/1")
    space = xspace_lines_as_bytes_class()()
    plane = space.planes.add()
    plane.id, plane.name = 1, "/host:CPU"
    plane.lines.append(line)
    space.hostnames.append("bighost")
    data = bytes(space.SerializeToString())
    path.write_bytes(data)
    at = data.index(line) + (first_event_offset(line) or 0)
    offsets = []
    for ev in records:
        offsets.append(at)
        at += 1 + (1 if len(ev) < 128 else 2) + len(ev)
    return offsets


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    path = tmp_path_factory.mktemp("big") / "bighost.xplane.pb"
    offsets = _big_trace(path, 260_000)
    assert path.stat().st_size > _event_walk.MIN_WALK_BYTES
    return path, offsets


def _host_columns(host: trace_file.HostTrace) -> list[tuple[object, ...]]:
    """Every line of a loaded host: its plane, fields, columns and stats."""
    out: list[tuple[object, ...]] = []
    for p in host.planes:
        for ln in p.lines:
            columns = (ln.metadata_id, ln.start_ps, ln.duration_ps, ln._bounds)
            out.append((p.name, ln.name, ln.timestamp_ns, ln._data, *(c.tolist() for c in columns)))
    return out


def _load_both(path: Path) -> tuple[object, object]:
    """The host as loaded through the walk (which must run) and by protobuf alone: its
    lines' columns and stats, or the error's message."""

    def load() -> object:
        try:
            host = trace_file.load_host(path)
        except TraceError as exc:
            return str(exc)
        return _host_columns(host)

    walks: list[int] = []
    real = _event_walk.event_records

    def counted(*args):  # type: ignore[no-untyped-def]
        walks.append(1)
        return real(*args)

    with mock.patch.object(trace_file, "event_records", counted):
        walked = load()
    assert walks  # the line is large enough to be walked
    with mock.patch.object(trace_file, "MIN_WALK_BYTES", 1 << 62):
        return walked, load()


def test_a_large_line_loads_through_the_walk_as_through_protobuf(
    big_trace: tuple[Path, list[int]],
) -> None:
    walked, parsed = _load_both(big_trace[0])
    assert isinstance(walked, list) and len(walked[0][4]) == 260_000
    assert walked == parsed


def test_a_damaged_large_line_fails_as_protobuf_says(
    big_trace: tuple[Path, list[int]], tmp_path: Path
) -> None:
    path, offsets = big_trace
    for k, (record, byte) in enumerate(((130_000, 0x7F), (200_001, 0x00), (-1, 0x23))):
        data = bytearray(path.read_bytes())
        data[offsets[record] + (1 if byte != 0x23 else 0)] = byte  # a length, or the tag
        bad = tmp_path / f"{k}" / "bighost.xplane.pb"
        bad.parent.mkdir()
        bad.write_bytes(bytes(data))
        walked, parsed = _load_both(bad)
        assert walked == parsed
