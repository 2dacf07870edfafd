"""The analysis report model: the analysis JSON, validated into frozen, typed data.

`build_analysis_model` is pure: the same JSON and timestamp give an equal model. It is
strict on the fields a report cannot do without and tolerant of the optional ones; `null`
stays `None` ("not measured") and is never turned into 0. Anything malformed raises
`UserError` with one line naming the file and the field.

Renderers (`reports.analysis_html`) only format this model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import (
    Reader,
    dump,
    epoch_stall_of,
    share,
    sizing_caption,
    top_reader,
)
from tftune.core.vocabulary import BREAKDOWN_CATEGORIES, Band, input_band

# Defensive caps: the analysis caps its timeline upstream, but a report must stay small
# (well under 5 MB) and quick to open whatever JSON it is given.
MAX_TIMELINE_EVENTS = 6000
MAX_TIMELINE_TRACKS = 48
MAX_STEPS = 5000
MAX_STAGES = 400
MAX_BOTTLENECKS = 20

TRACK_KINDS = ("host", "tf_data", "device")

Scalar = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class Fix:
    summary: str
    code: str | None


@dataclass(frozen=True, slots=True)
class Bottleneck:
    rank: int
    category: str
    share: float | None
    stage: str | None
    call_site: str | None
    functions: tuple[str, ...]
    evidence: tuple[tuple[str, Scalar], ...]
    fix: Fix | None


@dataclass(frozen=True, slots=True)
class StepRow:
    step: int
    start_ms: float | None
    duration_ms: float | None
    parts: tuple[tuple[str, float | None], ...]  # (category, ms), BREAKDOWN_CATEGORIES first


@dataclass(frozen=True, slots=True)
class Stage:
    id: str | None
    parent_id: str | None
    name: str
    op: str | None
    depth: int
    calls: int | None
    total_ms: float | None
    self_ms: float | None
    self_per_call_ms: float | None
    blocking: bool | None
    bottleneck: bool
    parallelism: int | None
    buffer_limit: int | None
    autotune: bool | None
    batch_size: int | None
    threadpool_size: int | None
    cpu_budget: int | None
    capped_by: str | None


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    start_ms: float
    duration_ms: float
    name: str


@dataclass(frozen=True, slots=True)
class Track:
    name: str
    kind: str
    events: tuple[TimelineEvent, ...]
    dropped: int  # events left out by the defensive cap (the shortest ones)


@dataclass(frozen=True, slots=True)
class Timeline:
    start_ms: float
    end_ms: float
    tracks: tuple[Track, ...]
    dropped_tracks: int


@dataclass(frozen=True, slots=True)
class RunInfo:
    run: str | None
    hosts: tuple[str, ...]
    device: str | None
    step_detection: str | None
    tf_version: str | None
    devices: tuple[str, ...]
    cores: int | None
    profile_duration_ms: float | None
    tool: str | None
    logdir: str | None
    files: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (path, reason)


@dataclass(frozen=True, slots=True)
class StepSummary:
    count: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None


@dataclass(frozen=True, slots=True)
class Verdict:
    level: Band | None  # None: no step was found, so input wait was not measured
    sentence: str


@dataclass(frozen=True, slots=True)
class XProfCheck:
    """XProf's own step time and input share beside tftune's, from the same trace (the
    analysis JSON's optional ``xprof``, written by ``tftune analyze --xprof``)."""

    steptime_ms: float | None
    input_share: float | None
    tftune_steptime_ms: float | None
    tftune_input_share: float | None
    note: str | None


@dataclass(frozen=True, slots=True)
class NextMove:
    """One ranked move for the step when the input pipeline is not the limit (the analysis
    JSON's ``next_moves``)."""

    kind: str
    summary: str
    code: str | None
    score: float | None


@dataclass(frozen=True, slots=True)
class AnalysisReport:
    source: str
    generated_at: str
    run: RunInfo
    steps: StepSummary
    input_bound: bool | None
    input_share: float | None
    verdict: Verdict
    breakdown: tuple[tuple[str, float | None], ...]
    per_step: tuple[StepRow, ...]
    per_step_total: int
    bottlenecks: tuple[Bottleneck, ...]
    stages: tuple[Stage, ...]
    stages_total: int
    timeline: Timeline | None
    notes: tuple[str, ...]
    data_json: str  # the (capped) input, embedded in the HTML for scripts
    xprof: XProfCheck | None = None  # None: not cross-checked (or nothing to show)
    next_moves: tuple[NextMove, ...] = ()
    service_sizing: str | None = None  # when one host is not enough (`sizing_caption`)
    # An epoch-start stall the step clock named (`tftune profile`'s figures beside the
    # trace): the sentence and its fix as code.
    epoch_stall: str | None = None
    epoch_stall_code: str | None = None


def build_analysis_model(
    data: Mapping[str, Any], *, generated_at: str, source: str = "analysis JSON"
) -> AnalysisReport:
    """Validate an analysis JSON (docs/json.md, schema 1) into an `AnalysisReport`."""
    r = top_reader(data, source=source)
    steps_r = r.required_obj("steps")
    steps = StepSummary(
        count=steps_r.integer("count", required=True, nullable=False) or 0,
        mean_ms=steps_r.number("mean_ms"),
        p50_ms=steps_r.number("p50_ms"),
        p90_ms=steps_r.number("p90_ms"),
    )
    if "input_bound" not in data:
        raise r.error("input_bound", "is missing")
    input_bound = r.boolean("input_bound")
    input_share = share(r, "input_share")
    breakdown_r = r.required_obj("breakdown")
    bottlenecks = tuple(
        _bottleneck(b, i + 1) for i, b in enumerate(r.objects("bottlenecks", required=True))
    )[:MAX_BOTTLENECKS]
    all_steps = r.objects("per_step")
    all_stages = r.objects("stages")
    timeline_r = r.obj("timeline")
    timeline = _timeline(timeline_r) if timeline_r is not None else None
    stall = epoch_stall_of(data)
    return AnalysisReport(
        source=source,
        generated_at=generated_at,
        run=_run_info(r),
        steps=steps,
        input_bound=input_bound,
        input_share=input_share,
        verdict=_verdict(r, input_bound, input_share),
        breakdown=tuple((k, share(breakdown_r, k)) for k in _ordered(breakdown_r.fields())),
        per_step=tuple(_step_row(s) for s in all_steps[:MAX_STEPS]),
        per_step_total=len(all_steps),
        bottlenecks=bottlenecks,
        stages=tuple(_stage(s) for s in all_stages[:MAX_STAGES]),
        stages_total=len(all_stages),
        timeline=timeline,
        notes=r.strings("notes"),
        data_json=dump(_capped(data, timeline)),
        xprof=_xprof(r.obj("xprof")),
        next_moves=tuple(_move(m) for m in r.objects("next_moves")[:MAX_BOTTLENECKS]),
        service_sizing=sizing_caption(data.get("service_sizing")),
        epoch_stall=stall[0] if stall else None,
        epoch_stall_code=stall[1] if stall else None,
    )


def _move(m: Reader) -> NextMove:
    return NextMove(
        kind=m.string("kind") or "",
        summary=m.string("summary") or "",
        code=m.string("code"),
        score=m.number("score"),
    )


def _capped(data: Mapping[str, Any], timeline: Timeline | None) -> dict[str, Any]:
    """The input as the page embeds it: within the same caps as the model."""
    capped = dict(data)
    if data.get("per_step"):
        capped["per_step"] = list(data["per_step"])[:MAX_STEPS]
    if data.get("stages"):
        capped["stages"] = list(data["stages"])[:MAX_STAGES]
    if timeline is not None:
        capped["timeline"] = {
            "start_ms": timeline.start_ms,
            "end_ms": timeline.end_ms,
            "tracks": [
                {
                    "name": t.name,
                    "kind": t.kind,
                    "events": [[e.start_ms, e.duration_ms, e.name] for e in t.events],
                }
                for t in timeline.tracks
            ],
        }
    return capped


def _scalar(value: Any) -> Scalar:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def _ordered(keys: list[str]) -> list[str]:
    known = [k for k in BREAKDOWN_CATEGORIES if k in keys]
    return known + sorted(k for k in keys if k not in BREAKDOWN_CATEGORIES)


def _verdict(r: Reader, input_bound: bool | None, input_share: float | None) -> Verdict:
    verdict_r = r.obj("verdict")
    if verdict_r is None:
        return _derived_verdict(input_bound, input_share)
    verdict_r.raw("level", required=True)  # present; null where no step was found
    level = verdict_r.string("level")
    if level is None:
        return Verdict(level=None, sentence=verdict_r.required_string("sentence"))
    if level not in {b.value for b in Band}:
        raise verdict_r.error("level", f"must be one of {', '.join(b.value for b in Band)}")
    return Verdict(level=Band(level), sentence=verdict_r.required_string("sentence"))


def _derived_verdict(input_bound: bool | None, share: float | None) -> Verdict:
    """Older JSON without `verdict`: state what the numbers say, in the input-bound bands."""
    if share is None:
        return Verdict(Band.LOW, "Input wait was not measured: no training steps were found.")
    band = input_band(share)
    if band is Band.LOW and input_bound:  # the analysis said so, whatever the share
        band = Band.MODERATE
    words = band.words[:1].upper() + band.words[1:]
    return Verdict(band, f"{words}: {share * 100:.0f}% of step time waits for input.")


def _xprof(x: Reader | None) -> XProfCheck | None:
    if x is None:
        return None
    check = XProfCheck(
        steptime_ms=x.number("steptime_ms"),
        input_share=share(x, "input_share"),
        tftune_steptime_ms=x.number("tftune_steptime_ms"),
        tftune_input_share=share(x, "tftune_input_share"),
        note=x.string("note") or None,
    )
    return None if check == XProfCheck(None, None, None, None, None) else check


def _run_info(r: Reader) -> RunInfo:
    meta = r.obj("metadata")
    tool = r.obj("tool")
    src = r.obj("source")
    tool_text = None
    if tool is not None:
        tool_text = " ".join(x for x in (tool.string("name"), tool.string("version")) if x)
    files: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    if src is not None:
        files = tuple(f.string("path") or "?" for f in src.objects("files"))
        skipped = tuple(
            (s.string("path") or "?", s.string("reason") or "unknown reason")
            for s in src.objects("skipped")
        )
    return RunInfo(
        run=r.string("run"),
        hosts=r.strings("hosts"),
        device=r.string("device", required=True),
        step_detection=r.string("step_detection", required=True),
        tf_version=meta.string("tf_version") if meta else None,
        devices=meta.strings("devices") if meta else (),
        cores=meta.integer("cores") if meta else None,
        profile_duration_ms=meta.number("profile_duration_ms") if meta else None,
        tool=tool_text or None,
        logdir=src.string("logdir") if src else None,
        files=files,
        skipped=skipped,
    )


def _bottleneck(b: Reader, rank: int) -> Bottleneck:
    rec = b.obj("recommendation")
    fix = None
    if rec is not None:
        fix = Fix(summary=rec.string("summary") or "", code=rec.string("code") or None)
    evidence = b.obj("evidence")
    ev: tuple[tuple[str, Scalar], ...] = ()
    if evidence is not None:
        ev = tuple((k, _scalar(v)) for k, v in evidence.mapping().items())
    return Bottleneck(
        rank=rank,
        category=b.required_string("category"),
        share=share(b, "share"),
        stage=b.string("stage"),
        call_site=b.string("call_site"),
        functions=b.strings("functions"),
        evidence=ev,
        fix=fix,
    )


def _step_row(s: Reader) -> StepRow:
    parts = []
    for key in s.fields():
        if key.endswith("_ms") and key not in ("start_ms", "duration_ms"):
            parts.append((key[: -len("_ms")], s.number(key)))
    order = _ordered([k for k, _ in parts])
    lookup = dict(parts)
    return StepRow(
        step=s.required_integer("step"),
        start_ms=s.number("start_ms"),
        duration_ms=s.number("duration_ms"),
        parts=tuple((k, lookup[k]) for k in order),
    )


def _stage(s: Reader) -> Stage:
    return Stage(
        id=s.string("id"),
        parent_id=s.string("parent_id"),
        name=s.required_string("name"),
        op=s.string("op"),
        depth=s.integer("depth") or 0,
        calls=s.integer("calls"),
        total_ms=s.number("total_ms"),
        self_ms=s.number("self_ms"),
        self_per_call_ms=s.number("self_per_call_ms"),
        blocking=s.boolean("blocking"),
        bottleneck=bool(s.boolean("bottleneck")),
        parallelism=s.integer("parallelism"),
        buffer_limit=s.integer("buffer_limit"),
        autotune=s.boolean("autotune"),
        batch_size=s.integer("batch_size"),
        threadpool_size=s.integer("threadpool_size"),
        cpu_budget=s.integer("cpu_budget"),
        capped_by=s.string("capped_by"),
    )


def _event(tr: Reader, i: int, ev: Any) -> TimelineEvent:
    if (
        not isinstance(ev, (list, tuple))
        or len(ev) < 2
        or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)
            for x in ev[:2]
        )
    ):
        raise tr.error(f"events[{i}]", "must be [start_ms, duration_ms, name]")
    name = str(ev[2]) if len(ev) > 2 and ev[2] is not None else ""
    return TimelineEvent(float(ev[0]), max(0.0, float(ev[1])), name)


def _timeline(t: Reader) -> Timeline:
    start = t.required_number("start_ms")
    end = t.required_number("end_ms")
    if end < start:
        raise t.error("end_ms", f"must not be before start_ms ({end} < {start})")
    readers = t.objects("tracks")
    per_track_cap = max(100, MAX_TIMELINE_EVENTS // max(1, min(len(readers), MAX_TIMELINE_TRACKS)))
    tracks = []
    for tr in readers[:MAX_TIMELINE_TRACKS]:
        events = [_event(tr, i, ev) for i, ev in enumerate(tr.items("events"))]
        dropped = max(0, len(events) - per_track_cap)
        if dropped:
            # Keep the longest events: they are the ones a reader can see at this scale.
            events = sorted(events, key=lambda e: (-e.duration_ms, e.start_ms))[:per_track_cap]
        events.sort(key=lambda e: (e.start_ms, -e.duration_ms, e.name))
        kind = tr.string("kind") or "host"
        tracks.append(
            Track(
                name=tr.required_string("name"),
                kind=kind if kind in TRACK_KINDS else "host",
                events=tuple(events),
                dropped=dropped,
            )
        )
    return Timeline(
        start_ms=start,
        end_ms=end,
        tracks=tuple(tracks),
        dropped_tracks=max(0, len(readers) - MAX_TIMELINE_TRACKS),
    )
