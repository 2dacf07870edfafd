"""The XSpace protobuf schema, written from the public XPlane format's field numbers.

We build the message classes from a descriptor of our own, in a private descriptor pool,
so reading traces needs only the protobuf runtime: no TensorFlow, no generated code, and
no clash with TensorFlow's own registration of the same messages.

Field numbers (tsl/profiler/protobuf/xplane.proto):
  XSpace:         planes=1, errors=2, warnings=3, hostnames=4
  XPlane:         id=1, name=2, lines=3, event_metadata=4 (map), stat_metadata=5 (map), stats=6
  XLine:          id=1, name=2, timestamp_ns=3, events=4, duration_ps=9, display_id=10,
                  display_name=11
  XEvent:         metadata_id=1, offset_ps=2 | num_occurrences=5 (oneof), duration_ps=3, stats=4
  XStat:          metadata_id=1, oneof value { double=2, uint64=3, int64=4, str=5, bytes=6,
                  ref=7 }
  XEventMetadata: id=1, name=2, metadata=3, display_name=4, stats=5, child_id=6
  XStatMetadata:  id=1, name=2, description=3
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "tftune.xplane"

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_I64, _U64, _DBL = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE
_STR, _BYTES, _MSG = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE

# (message, [(field, number, label, type, message type or None, oneof index or None)])
_MESSAGES: list[tuple[str, list[tuple[str, int, int, int, str | None, int | None]]]] = [
    (
        "XSpace",
        [
            ("planes", 1, _REP, _MSG, "XPlane", None),
            ("errors", 2, _REP, _STR, None, None),
            ("warnings", 3, _REP, _STR, None, None),
            ("hostnames", 4, _REP, _STR, None, None),
        ],
    ),
    (
        "XPlane",
        [
            ("id", 1, _OPT, _I64, None, None),
            ("name", 2, _OPT, _STR, None, None),
            ("lines", 3, _REP, _MSG, "XLine", None),
            ("event_metadata", 4, _REP, _MSG, "XPlane.EventMetadataEntry", None),
            ("stat_metadata", 5, _REP, _MSG, "XPlane.StatMetadataEntry", None),
            ("stats", 6, _REP, _MSG, "XStat", None),
        ],
    ),
    (
        "XLine",
        [
            ("id", 1, _OPT, _I64, None, None),
            ("name", 2, _OPT, _STR, None, None),
            ("timestamp_ns", 3, _OPT, _I64, None, None),
            ("events", 4, _REP, _MSG, "XEvent", None),
            ("duration_ps", 9, _OPT, _I64, None, None),
            ("display_id", 10, _OPT, _I64, None, None),
            ("display_name", 11, _OPT, _STR, None, None),
        ],
    ),
    (
        "XEvent",
        [
            ("metadata_id", 1, _OPT, _I64, None, None),
            ("offset_ps", 2, _OPT, _I64, None, 0),
            ("duration_ps", 3, _OPT, _I64, None, None),
            ("stats", 4, _REP, _MSG, "XStat", None),
            ("num_occurrences", 5, _OPT, _I64, None, 0),
        ],
    ),
    (
        "XStat",
        [
            ("metadata_id", 1, _OPT, _I64, None, None),
            ("double_value", 2, _OPT, _DBL, None, 0),
            ("uint64_value", 3, _OPT, _U64, None, 0),
            ("int64_value", 4, _OPT, _I64, None, 0),
            ("str_value", 5, _OPT, _STR, None, 0),
            ("bytes_value", 6, _OPT, _BYTES, None, 0),
            ("ref_value", 7, _OPT, _U64, None, 0),
        ],
    ),
    (
        "XEventMetadata",
        [
            ("id", 1, _OPT, _I64, None, None),
            ("name", 2, _OPT, _STR, None, None),
            ("metadata", 3, _OPT, _BYTES, None, None),
            ("display_name", 4, _OPT, _STR, None, None),
            ("stats", 5, _REP, _MSG, "XStat", None),
            ("child_id", 6, _REP, _I64, None, None),
        ],
    ),
    (
        "XStatMetadata",
        [
            ("id", 1, _OPT, _I64, None, None),
            ("name", 2, _OPT, _STR, None, None),
            ("description", 3, _OPT, _STR, None, None),
        ],
    ),
]
_ONEOFS = {"XEvent": "data", "XStat": "value"}
_MAP_ENTRIES = {
    "XPlane": [("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")]
}


def _add_field(
    msg: Any, spec: tuple[str, int, int, int, str | None, int | None], package: str
) -> None:
    name, number, label, ftype, type_name, oneof = spec
    field = msg.field.add(name=name, number=number, label=label, type=ftype)
    if type_name:
        field.type_name = f".{package}.{type_name}"
    if oneof is not None:
        field.oneof_index = oneof


def _build(package: str, as_bytes: dict[str, str]) -> Any:
    """A descriptor pool with our messages; `as_bytes` maps message -> a repeated
    message field to declare as `repeated bytes` instead (same wire format), so the
    parser hands those sub-messages over undecoded."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name=f"{package.replace('.', '/')}.proto", package=package, syntax="proto3"
    )
    for msg_name, fields in _MESSAGES:
        msg = fdp.message_type.add(name=msg_name)
        if msg_name in _ONEOFS:
            msg.oneof_decl.add(name=_ONEOFS[msg_name])
        for spec in fields:
            if as_bytes.get(msg_name) == spec[0]:
                spec = (spec[0], spec[1], _REP, _BYTES, None, None)
            _add_field(msg, spec, package)
        for entry_name, value_type in _MAP_ENTRIES.get(msg_name, []):
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            _add_field(entry, ("key", 1, _OPT, _I64, None, None), package)
            _add_field(entry, ("value", 2, _OPT, _MSG, value_type, None), package)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return pool


def _message(pool: Any, package: str, name: str) -> Any:
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))


@cache
def xevent_class() -> Any:
    """The full XEvent class, to decode one event's stats on demand."""
    return _message(_build(_PACKAGE, {}), _PACKAGE, "XEvent")


@cache
def xspace_lines_as_bytes_class() -> Any:
    """XSpace whose planes keep each line as its serialized bytes (`XPlane.lines`)."""
    package = f"{_PACKAGE}.bulk"
    return _message(_build(package, {"XPlane": "lines"}), package, "XSpace")


@cache
def xline_events_as_bytes_class() -> Any:
    """XLine whose events stay serialized (`XLine.events` as bytes, one per event)."""
    package = f"{_PACKAGE}.bulk"
    return _message(_build(package, {"XLine": "events"}), package, "XLine")
