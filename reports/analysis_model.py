"""The analysis report model: an analysis document as the page shows it.

`build_analysis_model` takes the document (made by `tftune analyze`, or read from a saved
JSON with `read_analysis_json`: `AnalysisDocument.from_json`, strict on the fields a
report cannot do without, tolerant of the optional ones; `null` stays `None`, "not
measured", never 0; anything malformed is one `UserError` line naming the file and the
field) and adds what only the page needs: the defensive caps, the vocabulary's order of
the categories, the run's facts in one place, the captions and the capped JSON it embeds.
It is pure: the same document and timestamp give an equal model.

Renderers (`reports.analysis_html`) only format this model and the document's types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from tftune.core.analysis_advice import Bottleneck, NextMove, Verdict
from tftune.core.analysis_document import AnalysisDocument
from tftune.core.analysis_steps import StepRow, StepSummary, StepTable
from tftune.core.analysis_trace import StageRow, Timeline, XProfCheck
from tftune.core.document_reading import Reader, dump
from tftune.core.sizing import caption
from tftune.core.vocabulary import BREAKDOWN_CATEGORIES

# Defensive caps: the analysis caps its timeline upstream, but a report must stay small
# (well under 5 MB) and quick to open whatever JSON it is given.
MAX_TIMELINE_EVENTS = 6000
MAX_TIMELINE_TRACKS = 48
MAX_STEPS = 5000
MAX_STAGES = 400
MAX_BOTTLENECKS = 20

TRACK_KINDS = ("host", "tf_data", "device")


@dataclass(frozen=True, slots=True)
class RunSection:
    """The run as the page's "Run" section lists it: the document's run, host, file and
    metadata fields, flattened into what a reader sees."""

    run: str | None
    hosts: tuple[str, ...]
    device: str | None
    step_detection: str | None
    tf_version: str | None
    devices: tuple[str, ...]
    cores: int | None
    profile_duration_ms: float | None
    tool: str | None  # "tftune 0.1.0"
    logdir: str | None
    files: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (path, reason)


@dataclass(frozen=True, slots=True)
class AnalysisReport:
    """An analysis document as the page shows it: within the defensive caps, the
    breakdown and each step's parts in the vocabulary's order, the timeline's events in
    time order, and the captions worded for the page."""

    source: str
    generated_at: str
    run: RunSection
    steps: StepSummary
    input_bound: bool | None
    input_share: float | None
    verdict: Verdict
    breakdown: tuple[tuple[str, float | None], ...]
    per_step: Sequence[StepRow]
    per_step_total: int
    bottlenecks: tuple[Bottleneck, ...]
    stages: tuple[StageRow, ...]
    stages_total: int
    timeline: Timeline | None  # capped: `Track.dropped` counts the events the cap left out
    notes: tuple[str, ...]
    data_json: str  # the (capped) input, embedded in the HTML for scripts
    xprof: XProfCheck | None = None  # None: not cross-checked (or nothing to show)
    next_moves: tuple[NextMove, ...] = ()
    service_sizing: str | None = None  # when one host is not enough (`core.sizing.caption`)
    # An epoch-start stall the step clock named (`tftune profile`'s figures beside the
    # trace): the sentence and its fix as code.
    epoch_stall: str | None = None
    epoch_stall_code: str | None = None
    timeline_dropped_tracks: int = 0  # tracks left out by the defensive cap


def read_analysis_json(data: Mapping[str, Any], *, source: str) -> AnalysisDocument:
    """A saved analysis JSON (docs/json.md, schema 1) read strictly for a report."""
    doc = AnalysisDocument.from_json(data, source=source)
    if "input_bound" not in data:  # the report needs it said, even as null
        raise Reader(data, source=source).error("input_bound", "is missing")
    return doc


def build_analysis_model(
    document: AnalysisDocument,
    *,
    generated_at: str,
    source: str = "analysis JSON",
    data: Mapping[str, Any] | None = None,
) -> AnalysisReport:
    """The `AnalysisReport` of an analysis document. `data` is its JSON where the caller
    has it already (`tftune analyze` wrote it, `tftune report` read it): the page embeds
    it; else the page embeds `document.to_json()`."""
    doc = document
    timeline = _capped_timeline(doc.timeline)
    stall = doc.training.stall if doc.training is not None else None
    embedded = data if data is not None else doc.to_json()
    return AnalysisReport(
        source=source,
        generated_at=generated_at,
        run=_run_section(doc),
        steps=doc.steps,
        input_bound=doc.verdict.input_bound,
        input_share=doc.verdict.input_share,
        verdict=doc.verdict,
        breakdown=_in_order(doc.breakdown),
        per_step=_steps_in_order(doc.per_step[:MAX_STEPS]),
        per_step_total=len(doc.per_step),
        bottlenecks=doc.bottlenecks[:MAX_BOTTLENECKS],
        stages=doc.stages[:MAX_STAGES],
        stages_total=len(doc.stages),
        timeline=timeline,
        notes=doc.notes,
        data_json=dump(_capped(embedded, timeline)),
        xprof=_xprof(doc.xprof),
        next_moves=doc.next_moves[:MAX_BOTTLENECKS],
        service_sizing=caption(doc.service_sizing),
        epoch_stall=stall.sentence if stall is not None else None,
        epoch_stall_code=(stall.code or None) if stall is not None else None,
        timeline_dropped_tracks=(
            max(0, len(doc.timeline.tracks) - MAX_TIMELINE_TRACKS) if doc.timeline else 0
        ),
    )


def _capped(data: Mapping[str, Any], timeline: Timeline | None) -> dict[str, Any]:
    """The input as the page embeds it: within the same caps as the model."""
    capped = dict(data)
    if data.get("per_step") is not None:  # a list, or the table held as columns (`JsonRows`)
        capped["per_step"] = list(data["per_step"][:MAX_STEPS])
    if data.get("stages"):
        capped["stages"] = list(data["stages"])[:MAX_STAGES]
    if timeline is not None:
        capped["timeline"] = {
            "start_ms": timeline.start_ms,
            "end_ms": timeline.end_ms,
            "tracks": [
                {"name": t.name, "kind": t.kind, "events": [list(e) for e in t.events]}
                for t in timeline.tracks
            ],
        }
    return capped


def _steps_in_order(rows: Sequence[StepRow]) -> Sequence[StepRow]:
    """The rows with their parts in `_in_order`'s order: a table's columns reordered
    once, for all its rows."""
    if not isinstance(rows, StepTable):
        return tuple(_step_in_order(s) for s in rows)
    keys = tuple(c for c, _ in rows.parts)
    order = _order_of(keys)
    if order == keys:
        return rows
    columns = dict(rows.parts)
    return replace(rows, parts=tuple((c, columns[c]) for c in order))


def _step_in_order(row: StepRow) -> StepRow:
    """The row with its parts in `_in_order`'s order; itself when they are already."""
    keys = tuple(k for k, _ in row.parts)
    if _order_of(keys) == keys:
        return row
    return replace(row, parts=_in_order(row.parts))


@cache
def _order_of(keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(k for k, _ in _in_order(tuple((k, None) for k in keys)))


def _in_order(shares: tuple[tuple[str, float | None], ...]) -> tuple[tuple[str, float | None], ...]:
    """The vocabulary's categories first, in its order, then any others by name."""
    keys = [k for k, _ in shares]
    known = [k for k in BREAKDOWN_CATEGORIES if k in keys]
    lookup = dict(shares)
    return tuple((k, lookup[k]) for k in known + sorted(k for k in keys if k not in known))


def _xprof(check: XProfCheck | None) -> XProfCheck | None:
    """The cross-check, or None when it has no figure and no note to show."""
    if check is None:
        return None
    check = replace(check, note=check.note or None)
    return None if check == XProfCheck(None, None, None, None, None) else check


def _run_section(doc: AnalysisDocument) -> RunSection:
    meta, tool, src = doc.metadata, doc.tool, doc.source
    tool_text = None
    if tool is not None:
        tool_text = " ".join(x for x in (tool.name, tool.version) if x)
    files: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    if src is not None:
        files = tuple(f.path or "?" for f in src.files)
        skipped = tuple((s.path or "?", s.reason or "unknown reason") for s in src.skipped)
    return RunSection(
        run=doc.run,
        hosts=doc.hosts,
        device=doc.device,
        step_detection=doc.step_detection,
        tf_version=meta.tf_version if meta else None,
        devices=meta.devices if meta else (),
        cores=meta.cores if meta else None,
        profile_duration_ms=meta.profile_duration_ms if meta else None,
        tool=tool_text or None,
        logdir=src.logdir if src else None,
        files=files,
        skipped=skipped,
    )


def _capped_timeline(t: Timeline | None) -> Timeline | None:
    """At most `MAX_TIMELINE_TRACKS` tracks, each within its share of
    `MAX_TIMELINE_EVENTS` (the longest events kept, `dropped` the ones this cap left
    out), in time order; an unknown kind is drawn as a host track."""
    if t is None:
        return None
    per_track_cap = max(100, MAX_TIMELINE_EVENTS // max(1, min(len(t.tracks), MAX_TIMELINE_TRACKS)))
    tracks = []
    for tr in t.tracks[:MAX_TIMELINE_TRACKS]:
        events = [e._replace(duration_ms=max(0.0, e.duration_ms)) for e in tr.events]
        cut = max(0, len(events) - per_track_cap)
        if cut:
            # Keep the longest events: they are the ones a reader can see at this scale.
            events = sorted(events, key=lambda e: (-e.duration_ms, e.start_ms))[:per_track_cap]
        events.sort(key=lambda e: (e.start_ms, -e.duration_ms, e.name))
        kind = tr.kind if tr.kind in TRACK_KINDS else "host"
        tracks.append(replace(tr, kind=kind, events=tuple(events), dropped=cut))
    return replace(t, tracks=tuple(tracks))
