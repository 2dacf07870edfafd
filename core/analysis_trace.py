"""The analysis document's account of the trace: which files, its tf.data stages, a
timeline of representative steps and XProf's cross-check (its steps: `core.analysis_steps`).

Part types of `core.analysis_document.AnalysisDocument`. Each is frozen; `to_json` writes
its JSON object as docs/json.md describes it (it computes nothing) and `read` reads one
back through a strict, path-aware `Reader`: a malformed field is one `UserError` naming
the file and the field. Optional fields a JSON may lack read as `None` ("not measured"),
never 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from tftune.core.document_reading import Reader, share

# A stage's depth in the tf.data tree: real pipelines nest a few dozen deep at most.
MAX_STAGE_DEPTH = 256


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """What wrote the document (`tool`)."""

    name: str | None
    version: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}

    @classmethod
    def read(cls, r: Reader) -> ToolInfo:
        return cls(r.string("name"), r.string("version"))


@dataclass(frozen=True, slots=True)
class TraceFile:
    """One host's `.xplane.pb` that was read (`source.files[]`)."""

    host: str | None
    path: str | None
    size_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "path": self.path, "bytes": self.size_bytes}

    @classmethod
    def read(cls, r: Reader) -> TraceFile:
        return cls(r.string("host"), r.string("path"), r.integer("bytes"))


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A host's file that could not be read, and why (`source.skipped[]`)."""

    host: str | None
    path: str | None
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "path": self.path, "reason": self.reason}

    @classmethod
    def read(cls, r: Reader) -> SkippedFile:
        return cls(r.string("host"), r.string("path"), r.string("reason"))


@dataclass(frozen=True, slots=True)
class TraceSource:
    """The files read and the hosts skipped (`source`)."""

    logdir: str | None
    files: tuple[TraceFile, ...]
    skipped: tuple[SkippedFile, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "logdir": self.logdir,
            "files": [f.to_json() for f in self.files],
            "skipped": [s.to_json() for s in self.skipped],
        }

    @classmethod
    def read(cls, r: Reader) -> TraceSource:
        return cls(
            r.string("logdir"),
            tuple(TraceFile.read(f) for f in r.objects("files")),
            tuple(SkippedFile.read(s) for s in r.objects("skipped")),
        )


@dataclass(frozen=True, slots=True)
class RunMetadata:
    """What the trace says about the run it records (`metadata`)."""

    tf_version: str | None
    devices: tuple[str, ...]
    profile_duration_ms: float | None
    cores: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "tf_version": self.tf_version,
            "devices": list(self.devices),
            "profile_duration_ms": self.profile_duration_ms,
            "cores": self.cores,
        }

    @classmethod
    def read(cls, r: Reader) -> RunMetadata:
        return cls(
            tf_version=r.string("tf_version"),
            devices=r.strings("devices"),
            profile_duration_ms=r.number("profile_duration_ms"),
            cores=r.integer("cores"),
        )


@dataclass(frozen=True, slots=True)
class StageRow:
    """One tf.data stage as the document writes it (`stages[]`): its times in ms, its
    place in the tree and the knobs AUTOTUNE chose (`None`: not in the trace)."""

    id: str | None
    parent_id: str | None
    name: str
    op: str | None
    depth: int
    calls: int | None
    total_ms: float | None
    self_ms: float | None
    self_per_call_ms: float | None
    work_ms: float | None
    active_ms: float | None
    wait_ms: float | None
    function_ms: float | None
    function_calls: int | None
    top_ops: tuple[tuple[str, float | None], ...]  # (op type, ms), the longest first
    is_async: bool | None  # the JSON's `async`
    blocking: bool | None
    bottleneck: bool
    parallelism: int | None
    buffer_limit: int | None
    autotune: bool | None
    batch_size: int | None
    threadpool_size: int | None
    cpu_budget: int | None
    ram_budget_megabytes: int | None
    capped_by: str | None
    udf_concurrency: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "parent_id": self.parent_id,
            "name": self.name,
            "op": self.op,
            "depth": self.depth,
            "calls": self.calls,
            "total_ms": self.total_ms,
            "self_ms": self.self_ms,
            "self_per_call_ms": self.self_per_call_ms,
            "work_ms": self.work_ms,
            "active_ms": self.active_ms,
            "wait_ms": self.wait_ms,
            "function_ms": self.function_ms,
            "function_calls": self.function_calls,
            "top_ops": [[op, ms] for op, ms in self.top_ops],
            "async": self.is_async,
            "blocking": self.blocking,
            "bottleneck": self.bottleneck,
            "parallelism": self.parallelism,
            "buffer_limit": self.buffer_limit,
            "autotune": self.autotune,
            "batch_size": self.batch_size,
            "threadpool_size": self.threadpool_size,
            "cpu_budget": self.cpu_budget,
            "ram_budget_megabytes": self.ram_budget_megabytes,
            "capped_by": self.capped_by,
            "udf_concurrency": self.udf_concurrency,
        }

    @classmethod
    def read(cls, s: Reader) -> StageRow:
        return cls(
            id=s.string("id"),
            parent_id=s.string("parent_id"),
            name=s.required_string("name"),
            op=s.string("op"),
            depth=_depth(s),
            calls=s.integer("calls"),
            total_ms=s.number("total_ms"),
            self_ms=s.number("self_ms"),
            self_per_call_ms=s.number("self_per_call_ms"),
            work_ms=s.number("work_ms"),
            active_ms=s.number("active_ms"),
            wait_ms=s.number("wait_ms"),
            function_ms=s.number("function_ms"),
            function_calls=s.integer("function_calls"),
            top_ops=tuple(_top_op(s, i, op) for i, op in enumerate(s.items("top_ops"))),
            is_async=s.boolean("async"),
            blocking=s.boolean("blocking"),
            bottleneck=bool(s.boolean("bottleneck")),
            parallelism=s.integer("parallelism"),
            buffer_limit=s.integer("buffer_limit"),
            autotune=s.boolean("autotune"),
            batch_size=s.integer("batch_size"),
            threadpool_size=s.integer("threadpool_size"),
            cpu_budget=s.integer("cpu_budget"),
            ram_budget_megabytes=s.integer("ram_budget_megabytes"),
            capped_by=s.string("capped_by"),
            udf_concurrency=s.number("udf_concurrency"),
        )


def _finite(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x)


def _top_op(s: Reader, i: int, op: Any) -> tuple[str, float | None]:
    if (
        not isinstance(op, (list, tuple))
        or len(op) != 2
        or not isinstance(op[0], str)
        or not (op[1] is None or _finite(op[1]))
    ):
        raise s.error(f"top_ops[{i}]", "must be [op_type, ms]")
    return op[0], op[1]


class TimelineEvent(NamedTuple):
    """One event of a timeline track: `[start_ms, duration_ms, name]` in the JSON."""

    start_ms: float
    duration_ms: float
    name: str


@dataclass(frozen=True, slots=True)
class Track:
    """One thread or stream of the timeline, its events in time order."""

    name: str
    kind: str  # "host" | "tf_data" | "device"
    events: tuple[TimelineEvent, ...]
    dropped: int  # events in the window left out by the size cap

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "events": [list(ev) for ev in self.events],
            "dropped": self.dropped,
        }

    @classmethod
    def read(cls, tr: Reader) -> Track:
        events = tuple(_event(tr, i, ev) for i, ev in enumerate(tr.items("events")))
        return cls(
            name=tr.required_string("name"),
            kind=tr.string("kind") or "host",
            events=events,
            dropped=tr.integer("dropped") or 0,
        )


def _event(tr: Reader, i: int, ev: Any) -> TimelineEvent:
    if not isinstance(ev, (list, tuple)) or len(ev) < 2 or not all(_finite(x) for x in ev[:2]):
        raise tr.error(f"events[{i}]", "must be [start_ms, duration_ms, name]")
    name = str(ev[2]) if len(ev) > 2 and ev[2] is not None else ""
    return TimelineEvent(float(ev[0]), float(ev[1]), name)


@dataclass(frozen=True, slots=True)
class Timeline:
    """Two consecutive steps around the median one (`steps`: their numbers), per thread
    and stream, on the same clock as `per_step[].start_ms`."""

    start_ms: float
    end_ms: float
    steps: tuple[int, ...]
    tracks: tuple[Track, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "steps": list(self.steps),
            "tracks": [t.to_json() for t in self.tracks],
        }

    @classmethod
    def read(cls, t: Reader) -> Timeline:
        start = t.required_number("start_ms")
        end = t.required_number("end_ms")
        if end < start:
            raise t.error("end_ms", f"must not be before start_ms ({end} < {start})")
        tracks = tuple(Track.read(tr) for tr in t.objects("tracks"))
        return cls(start_ms=start, end_ms=end, steps=t.integers("steps"), tracks=tracks)


@dataclass(frozen=True, slots=True)
class XProfCheck:
    """XProf's own step time and input share beside tftune's, from the same trace (the
    optional `xprof`, written by ``tftune analyze --xprof``); `note` says why a figure
    is `None`."""

    steptime_ms: float | None
    input_share: float | None
    tftune_steptime_ms: float | None
    tftune_input_share: float | None
    note: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "steptime_ms": self.steptime_ms,
            "input_share": self.input_share,
            "tftune_steptime_ms": self.tftune_steptime_ms,
            "tftune_input_share": self.tftune_input_share,
            "note": self.note,
        }

    @classmethod
    def read(cls, x: Reader) -> XProfCheck:
        return cls(
            steptime_ms=x.number("steptime_ms"),
            input_share=share(x, "input_share"),
            tftune_steptime_ms=x.number("tftune_steptime_ms"),
            tftune_input_share=share(x, "tftune_input_share"),
            note=x.string("note"),
        )


def _depth(s: Reader) -> int:
    depth = s.integer("depth") or 0
    if not 0 <= depth <= MAX_STAGE_DEPTH:
        raise s.error("depth", f"must be between 0 and {MAX_STAGE_DEPTH}, got {depth}")
    return depth
