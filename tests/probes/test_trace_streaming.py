"""The trace reader reads a file line by line (`probes._xspace_file`): what it loads is
what a parse of the whole file with protobuf loads, also where the file's fields come in
an unusual order; a file it cannot walk is parsed whole, with the same errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import golden_traces
import numpy as np
import pytest
from google.protobuf.internal.encoder import _VarintBytes
from gputrace import MS, XSpaceBuilder, gpu_trace

from tftune.core.errors import TraceError
from tftune.probes.traces import trace, trace_file
from tftune.probes.traces._xspace_file import LineReader, _skip_field, _varint_at, read_layout


def _content(host: trace.HostTrace) -> list[Any]:
    """Everything a loaded host holds, as plain values (each event's stats serialized)."""
    out: list[Any] = [host.host, host.size_bytes, host.origin_ns, host.hostnames, host.errors]
    for p in host.planes:
        out += [p.id, p.name, dict(p.event_names), dict(p.stat_names), dict(p.stats)]
        for ln in p.lines:
            out += [ln.id, ln.name, ln.display_name, ln.timestamp_ns]
            out += [ln.metadata_id.tolist(), ln.start_ps.tolist(), ln.duration_ps.tolist()]
            out += [[[s.SerializeToString() for s in ln.raw_stats(i)] for i in range(len(ln))]]
    return out


def _whole(path: Path) -> trace.HostTrace:
    return trace_file._parse_owned([path.read_bytes()], path, trace.host_name_of(path))


def _streamed(path: Path) -> trace.HostTrace:
    with path.open("rb") as f:
        loaded = trace_file._parse_streamed(f, path.stat().st_size, path, trace.host_name_of(path))
    assert loaded is not None, "the file should be read line by line"
    return loaded


@pytest.mark.parametrize("case", ["cpu_pyfunc", "gpu_h2d", "cpu_epoch_stall"])
def test_a_trace_read_line_by_line_is_the_whole_file_parse(tmp_path: Path, case: str) -> None:
    path = getattr(golden_traces, case)().write(tmp_path, host="vm")
    assert _content(_streamed(path)) == _content(_whole(path))
    assert _content(trace_file.load_host(path)) == _content(_whole(path))


def _field(number: int, wire: int, payload: bytes) -> bytes:
    head = _VarintBytes(number << 3 | wire)
    return head + (_VarintBytes(len(payload)) + payload if wire == 2 else payload)


def _fields(data: bytes) -> list[tuple[bytes, bytes]]:
    """A message's top-level fields: (the whole field, a length-delimited one's payload)."""
    out, i = [], 0
    while i < len(data):
        tag, j = _varint_at(data, i)
        end = _skip_field(data, j, tag & 7)
        assert end is not None
        body = data[_varint_at(data, j)[1] : end] if tag & 7 == 2 else b""
        out.append((data[i:end], body))
        i = end
    return out


def test_fields_in_another_order_and_unknown_ones_read_the_same(tmp_path: Path) -> None:
    builder, _ = gpu_trace(n_steps=3)
    planes = []
    for _, plane in _fields(builder.bytes()):  # every field of this space is a plane
        fields = [whole for whole, _ in _fields(plane)]
        lines = [f for f in fields if f[0] == 0x1A]  # field 3: lines
        rest = [f for f in fields if f[0] != 0x1A]
        # Metadata before the lines, the lines reversed, an unknown varint field between.
        body = b"".join(rest) + _field(15, 0, _VarintBytes(7)) + b"".join(lines[::-1])
        planes.append(_field(1, 2, body))
    data = _field(4, 2, b"host") + planes[1] + _field(14, 0, _VarintBytes(1)) + planes[0]
    path = tmp_path / "odd.xplane.pb"
    path.write_bytes(data)
    assert _content(_streamed(path)) == _content(_whole(path))


def test_a_file_it_cannot_walk_is_parsed_whole_with_the_same_error(tmp_path: Path) -> None:
    b = XSpaceBuilder()
    b.plane("/host:CPU").event("python", "a", 0, MS, step_num=1)
    path = tmp_path / "group.xplane.pb"
    path.write_bytes(b.bytes() + bytes([0x0B]))  # a group's start tag: no wire type of ours
    with path.open("rb") as f:
        assert read_layout(f, path.stat().st_size) is None
    with pytest.raises(TraceError) as err:
        trace_file.load_host(path)
    with pytest.raises(TraceError) as whole:
        _whole(path)
    assert str(err.value) == str(whole.value)


def test_lines_read_into_one_buffer_and_a_file_cut_while_read(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(200)))
    with path.open("rb") as f:
        reader = LineReader(f, 64)
        first = bytes(reader.read(10, 5))
        assert first == bytes(range(10, 15))
        assert bytes(reader.read(100, 64)) == bytes(range(100, 164))
        with pytest.raises(OSError, match="shorter"):
            reader.read(190, 20)


def test_ids_that_fit_32_bits_are_kept_in_4_bytes(tmp_path: Path) -> None:
    path = golden_traces.cpu_pyfunc().write(tmp_path, host="vm")
    plane = trace_file.load_host(path).host_plane
    assert plane is not None
    assert all(ln.metadata_id.dtype == np.int32 for ln in plane.lines if len(ln))
