"""What the child tells the parent on the clock file, besides its steps: one tagged union
of frozen types (`ChildEvent`) and its one codec.

Each event is a frozen dataclass whose ``kind`` (a `Literal` class variable) names it on
its line, ``E <kind> <json payload>`` (`probes.live.clock`). The child constructs the types
and `encode_event` writes them; the parent reads them back with `decode_event` and
matches on the types, never on the kind's text. Decoding is strict: an unknown kind, a
missing or mistyped field, or a field the type does not have raises `ClockLineError`
naming the line. A reader skips such a line: `probes.live.clock.ClockReader` counts it, and
discovery's reader (the child's other file, whose own events follow the same codec:
`tuner.child.discovery_events`) leaves it out.

Light to import inside the user's process: no TensorFlow, nothing of the tuner.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, TypeVar, overload

from tftune.core.document_reading import Reader
from tftune.core.errors import UserError
from tftune.core.learning import OptimizerSeen
from tftune.core.trial_notes import OutputPrecisionFinding
from tftune.probes.advice.service_sizing import CpuUsage
from tftune.probes.live.epoch_stall import PipelineStage

EVENT_MARK = "E"


class ClockLineError(ValueError):
    """A line of the clock file that is not a step record or an event of this tftune."""


@dataclass(frozen=True, slots=True)
class ScriptStarted:
    """The script's first line is about to run (its preamble is timed from here)."""

    kind: ClassVar[Literal["started"]] = "started"
    at_ns: int  # the child's wall clock

    def payload(self) -> dict[str, Any]:
        return {"at_ns": self.at_ns}

    @classmethod
    def from_payload(cls, r: Reader) -> ScriptStarted:
        return cls(r.required_integer("at_ns"))


@dataclass(frozen=True, slots=True)
class ScriptFinished:
    """The script returned or exited; interpreter teardown may still take seconds."""

    kind: ClassVar[Literal["finished"]] = "finished"
    code: int  # the exit code it gave

    def payload(self) -> dict[str, Any]:
        return {"code": self.code}

    @classmethod
    def from_payload(cls, r: Reader) -> ScriptFinished:
        return cls(r.required_integer("code"))


@dataclass(frozen=True, slots=True)
class ScriptRaised:
    """The script raised: the exception's type, its classes, its first line, and where."""

    kind: ClassVar[Literal["exception"]] = "exception"
    type: str
    bases: tuple[str, ...]  # the exception's classes (its MRO), by name
    message: str  # its first line, at most 500 characters
    where: str | None  # file:line of the innermost frame

    @property
    def text(self) -> str:
        """``Type: message``, or the type alone (StopIteration has no message)."""
        return f"{self.type}: {self.message}" if self.message else self.type

    def payload(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "bases": list(self.bases),
            "message": self.message,
            "where": self.where,
        }

    @classmethod
    def from_payload(cls, r: Reader) -> ScriptRaised:
        return cls(
            r.required_string("type"),
            r.strings("bases"),
            r.string("message") or "",
            r.string("where"),
        )


@dataclass(frozen=True, slots=True)
class NanSeen:
    """Training diverged: what became NaN or infinite, and its value."""

    kind: ClassVar[Literal["nan"]] = "nan"
    what: str  # "loss", "the trained weights"
    value: float  # NaN or ±inf

    def payload(self) -> dict[str, Any]:
        return {"what": self.what, "value": self.value}

    @classmethod
    def from_payload(cls, r: Reader) -> NanSeen:
        value = r.raw("value", required=True)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise r.error("value", "must be a number")
        return cls(r.required_string("what"), float(value))


@dataclass(frozen=True, slots=True)
class ChildNotes:
    """What the child's patches noted, in words for the user (a trial's notes)."""

    kind: ClassVar[Literal["notes"]] = "notes"
    notes: tuple[str, ...]

    def payload(self) -> dict[str, Any]:
        return {"notes": list(self.notes)}

    @classmethod
    def from_payload(cls, r: Reader) -> ChildNotes:
        return cls(r.strings("notes"))


@dataclass(frozen=True, slots=True)
class OutputLayerFound:
    """An output layer computes in 16 bits (`tuner.fixes.precision.check_output_layer`): sent as
    soon as `fit` starts, since a measured trial is stopped by a signal."""

    kind: ClassVar[Literal["output_precision"]] = "output_precision"
    finding: OutputPrecisionFinding

    def payload(self) -> dict[str, Any]:
        return self.finding.to_json()

    @classmethod
    def from_payload(cls, r: Reader) -> OutputLayerFound:
        return cls(OutputPrecisionFinding.from_reader(r))


@dataclass(frozen=True, slots=True)
class CpuMeasured:
    """What a pipeline drained alone used so far (`probes.advice.service_sizing.CpuMeter`)."""

    kind: ClassVar[Literal["cpu"]] = "cpu"
    usage: CpuUsage

    def payload(self) -> dict[str, Any]:
        return dict(self.usage.to_json())

    @classmethod
    def from_payload(cls, r: Reader) -> CpuMeasured:
        return cls(CpuUsage(r.required_number("busy_cores"), r.required_number("elements_per_s")))


@dataclass(frozen=True, slots=True)
class StreamFound:
    """A new stream: a dataset iterated for the first time."""

    kind: ClassVar[Literal["stream"]] = "stream"
    stream: int
    site: str | None  # the call site that built its dataset
    place: str | None  # the line that iterates it

    def payload(self) -> dict[str, Any]:
        return {"stream": self.stream, "site": self.site, "place": self.place}

    @classmethod
    def from_payload(cls, r: Reader) -> StreamFound:
        return cls(r.required_integer("stream"), r.string("site"), r.string("place"))


@dataclass(frozen=True, slots=True)
class TrainingFound:
    """A stream found to be training (`tuner.child.roles`), and how it was told."""

    kind: ClassVar[Literal["training"]] = "training"
    stream: int
    how: str
    at_ns: int | None = None  # the child's clock when it was found (discovery's preamble)

    def payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stream": self.stream, "how": self.how}
        if self.at_ns is not None:
            out["at_ns"] = self.at_ns
        return out

    @classmethod
    def from_payload(cls, r: Reader) -> TrainingFound:
        return cls(r.required_integer("stream"), r.string("how") or "", r.integer("at_ns"))


@dataclass(frozen=True, slots=True)
class EpochStart:
    """A new iterator over a stream's dataset, made eagerly: an epoch starts."""

    kind: ClassVar[Literal["epoch"]] = "epoch"
    stream: int
    at_ns: int  # the child's clock just before the iterator was made
    cardinality: int  # elements per epoch; -1 infinite, -2 unknown
    rebuilt: bool = False  # over a dataset built anew (not the stream's last one)
    # The pipeline as the script built it, source first: with a stream's first epoch
    # and with a rebuilt one (`tuner.child.lineage.pipeline_chain`), else None.
    chain: tuple[PipelineStage, ...] | None = None

    def payload(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "at_ns": self.at_ns,
            "cardinality": self.cardinality,
            "rebuilt": self.rebuilt,
            "chain": [s.to_json() for s in self.chain] if self.chain is not None else None,
        }

    @classmethod
    def from_payload(cls, r: Reader) -> EpochStart:
        chain = None
        if r.has("chain"):
            stages = [PipelineStage.from_json(s) for s in r.items("chain")]
            if any(s is None for s in stages):
                raise r.error("chain", "must be a list of pipeline stages")
            chain = tuple(s for s in stages if s is not None)
        return cls(
            r.required_integer("stream"),
            r.required_integer("at_ns"),
            r.required_integer("cardinality"),
            bool(r.boolean("rebuilt")),
            chain,
        )


@dataclass(frozen=True, slots=True)
class LossSamples:
    """The training loss as the script computed it (`tuner.child.loss_log`), since the
    last such event. Frequent: written on as the file is, not forced to disk."""

    kind: ClassVar[Literal["loss"]] = "loss"
    samples: tuple[tuple[int, float, int], ...]  # (child clock ns, loss, place index)
    places: tuple[str, ...]  # the places that computed a loss, so far
    unread: str | None  # why a loss could not be read (None: every one was)

    def payload(self) -> dict[str, Any]:
        return {
            "t": [ns for ns, _, _ in self.samples],
            "v": [v for _, v, _ in self.samples],
            "p": [p for _, _, p in self.samples],
            "places": list(self.places),
            "unread": self.unread,
        }

    @classmethod
    def from_payload(cls, r: Reader) -> LossSamples:
        t, v, p = r.items("t"), r.items("v"), r.items("p")
        if not len(t) == len(v) == len(p):
            raise r.error("t", "must be as long as 'v' and 'p'")
        if not all(_is_int(x) for x in (*t, *p)) or not all(_is_number(x) for x in v):
            raise r.error("t", "'t' and 'p' must hold integers, 'v' numbers")
        samples = tuple((int(a), float(b), int(c)) for a, b, c in zip(t, v, p, strict=True))
        return cls(samples, r.strings("places"), r.string("unread"))


@dataclass(frozen=True, slots=True)
class OptimizerBuilt:
    """A Keras optimizer the script built (the learning check's scaled rate)."""

    kind: ClassVar[Literal["optimizer"]] = "optimizer"
    seen: OptimizerSeen

    def payload(self) -> dict[str, Any]:
        return self.seen.to_json()

    @classmethod
    def from_payload(cls, r: Reader) -> OptimizerBuilt:
        return cls(OptimizerSeen.from_reader(r))


@dataclass(frozen=True, slots=True)
class ProfileDone:
    """`tftune profile`: the trace is written, with markers on steps first..last."""

    kind: ClassVar[Literal["profile_done"]] = "profile_done"
    logdir: str
    first: int
    last: int

    def payload(self) -> dict[str, Any]:
        return {"logdir": self.logdir, "first": self.first, "last": self.last}

    @classmethod
    def from_payload(cls, r: Reader) -> ProfileDone:
        return cls(
            r.required_string("logdir"), r.required_integer("first"), r.required_integer("last")
        )


@dataclass(frozen=True, slots=True)
class ProfileFailed:
    """`tftune profile`: the profiler could not write the trace."""

    kind: ClassVar[Literal["profile_failed"]] = "profile_failed"
    error: str  # ``Type: message``

    def payload(self) -> dict[str, Any]:
        return {"error": self.error}

    @classmethod
    def from_payload(cls, r: Reader) -> ProfileFailed:
        return cls(r.required_string("error"))


ChildEvent = (
    ScriptStarted
    | ScriptFinished
    | ScriptRaised
    | NanSeen
    | ChildNotes
    | OutputLayerFound
    | CpuMeasured
    | StreamFound
    | TrainingFound
    | EpochStart
    | LossSamples
    | OptimizerBuilt
    | ProfileDone
    | ProfileFailed
)
EVENT_TYPES: tuple[type[ChildEvent], ...] = (
    ScriptStarted,
    ScriptFinished,
    ScriptRaised,
    NanSeen,
    ChildNotes,
    OutputLayerFound,
    CpuMeasured,
    StreamFound,
    TrainingFound,
    EpochStart,
    LossSamples,
    OptimizerBuilt,
    ProfileDone,
    ProfileFailed,
)
# The decoder of each kind: the clock file's events (another channel of the child's, the
# discovery file, adds its own: `tuner.child.discovery_events`).
CLOCK_EVENTS: Mapping[str, Callable[[Reader], ChildEvent]] = {
    t.kind: t.from_payload for t in EVENT_TYPES
}


class Event(Protocol):
    """What the codec writes: a type with its ``kind`` and the JSON payload of its fields."""

    @property
    def kind(self) -> str: ...

    def payload(self) -> dict[str, Any]: ...


EventT = TypeVar("EventT", bound=Event)


def durable(event: Event) -> bool:
    """Whether the event must be on disk before the child goes on (a measured trial is
    stopped by a signal); frequent figures are written on as the file is."""
    return not isinstance(event, LossSamples)


def encode_event(event: Event) -> str:
    """The event's line in the clock file, newline included."""
    return f"{EVENT_MARK} {event.kind} {json.dumps(event.payload(), default=str)}\n"


def event_from_json(
    kind: str,
    payload: object,
    decoders: Mapping[str, Callable[[Reader], EventT]],
    *,
    source: str,
) -> EventT:
    """The event of `kind` with `payload` (a JSON object), strictly: `ClockLineError`
    for an unknown kind, a field missing or mistyped, or a field the type has not."""
    decoder = decoders.get(kind)
    if decoder is None:
        raise ClockLineError(f"{source}: unknown event kind {kind!r}")
    if not isinstance(payload, dict):
        raise ClockLineError(f"{source}: the {kind} event's payload must be a JSON object")
    try:
        event = decoder(Reader(payload, source=source))
    except UserError as exc:
        raise ClockLineError(str(exc)) from None
    extra = sorted(set(payload) - set(event.payload()))
    if extra:
        raise ClockLineError(f"{source}: the {kind} event has no field {', '.join(extra)}")
    return event


@overload
def decode_event(line: str) -> ChildEvent: ...
@overload
def decode_event(line: str, decoders: Mapping[str, Callable[[Reader], EventT]]) -> EventT: ...
def decode_event(line: str, decoders: Mapping[str, Callable[[Reader], Any]] | None = None) -> Any:
    """One event line (``E <kind> <json payload>``, without its newline) as its type:
    a clock file's event, or one of `decoders`."""
    mark, _, rest = line.partition(" ")
    kind, _, text = rest.partition(" ")
    if mark != EVENT_MARK or not kind:
        raise ClockLineError(f"not an event line: {line[:80]!r}")
    try:
        payload = json.loads(text) if text else {}
    except ValueError:
        raise ClockLineError(f"the {kind} event's payload is not JSON: {text[:80]!r}") from None
    found = CLOCK_EVENTS if decoders is None else decoders
    return event_from_json(kind, payload, found, source=f"the child's {kind} event")


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)
