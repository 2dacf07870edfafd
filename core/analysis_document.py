"""The analysis document: the analysis JSON (docs/json.md, schema 1) as one tree of
frozen types.

`probes.advice.analysis` builds an `AnalysisDocument` from what it computed and writes it with
`to_json`, which only serializes; the reports read a saved one with `from_json`, which
validates it strictly and path-aware: a malformed document is one `UserError` naming the
file and the field. Reading is tolerant of what an older or a hand-written document may
lack: optional fields read as `None` or empty ("not measured", never 0), and a document
without `verdict` gets the one its `input_share` says (`Verdict.derived`). The parts
live in `core.analysis_trace` (files, steps, stages, timeline, XProf's figures) and
`core.analysis_advice` (verdict, bottlenecks, fixes, next moves), `core.training` (the
step clock's `TrainingTime`) and `core.sizing` (the service sizing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tftune.core.analysis_advice import Bottleneck, Fix, NextMove, Verdict
from tftune.core.analysis_steps import StepRow, StepSummary, steps_json, steps_rows
from tftune.core.analysis_trace import (
    RunMetadata,
    StageRow,
    Timeline,
    ToolInfo,
    TraceSource,
    XProfCheck,
)
from tftune.core.document_reading import SUPPORTED_SCHEMA, Reader, share, top_reader
from tftune.core.sizing import Sizing, sizing_from_reader
from tftune.core.training import TrainingTime

T = TypeVar("T")
Shares = tuple[tuple[str, float | None], ...]  # (category, fraction of step time)


@dataclass(frozen=True, slots=True)
class AnalysisDocument:
    """Everything the analysis JSON holds, in its order (docs/json.md, field by field)."""

    tool: ToolInfo | None
    run: str | None
    hosts: tuple[str, ...]
    host: str | None  # the host analyzed in depth
    device: str  # "CPU_ONLY" | "GPU"
    source: TraceSource | None
    metadata: RunMetadata | None
    step_detection: str
    steps: StepSummary
    verdict: Verdict  # `input_bound`, `input_share` and `verdict`
    breakdown: Shares  # every category of step time, in the document's order
    input_categories: Shares  # the input wait by what it waited for
    per_step: Sequence[StepRow]  # a `StepTable` as produced, rows as read back
    bottlenecks: tuple[Bottleneck, ...]  # most important first
    recommendations: tuple[Fix, ...]  # ranked by expected gain
    stages: tuple[StageRow, ...]  # parents before children
    timeline: Timeline | None
    next_moves: tuple[NextMove, ...]
    notes: tuple[str, ...]
    training: TrainingTime | None  # the step clock's figures beside a `tftune profile` trace
    xprof: XProfCheck | None  # only with `--xprof`: absent from the JSON otherwise
    service_sizing: Sizing | None  # when one host is not enough, or why it is not sized
    schema: int = SUPPORTED_SCHEMA

    def to_json(self) -> dict[str, Any]:
        """The analysis JSON (docs/json.md): dicts, lists and scalars."""
        return self._json(steps_json(self.per_step))

    def json_to_write(self) -> dict[str, Any]:
        """`to_json()` as `core.userfiles.json_text` writes it fastest: `per_step` held
        column by column (`JsonRows`, a sequence of the same objects); the text is the
        same, byte for byte."""
        return self._json(steps_rows(self.per_step))

    def _json(self, per_step: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": self.schema,
            "tool": self.tool.to_json() if self.tool is not None else None,
            "run": self.run,
            "hosts": list(self.hosts),
            "host": self.host,
            "device": self.device,
            "source": self.source.to_json() if self.source is not None else None,
            "metadata": self.metadata.to_json() if self.metadata is not None else None,
            "step_detection": self.step_detection,
            "steps": self.steps.to_json(),
            **self.verdict.to_json(),
            "breakdown": dict(self.breakdown),
            "input_categories": dict(self.input_categories),
            "per_step": per_step,
            "bottlenecks": [b.to_json() for b in self.bottlenecks],
            "recommendations": [r.to_json() for r in self.recommendations],
            "stages": [s.to_json() for s in self.stages],
            "timeline": self.timeline.to_json() if self.timeline is not None else None,
            "next_moves": [m.to_json() for m in self.next_moves],
            "notes": list(self.notes),
            "training": self.training.to_json() if self.training is not None else None,
        }
        if self.xprof is not None:
            out["xprof"] = self.xprof.to_json()
        sizing = self.service_sizing
        out["service_sizing"] = sizing.to_json() if sizing is not None else None
        return out

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], *, source: str = "analysis JSON"
    ) -> AnalysisDocument:
        """Read an analysis JSON, strictly: `source` names the file in every error."""
        r = top_reader(data, source=source)
        steps = StepSummary.read(r.required_obj("steps"))
        verdict = Verdict.read(r)
        breakdown = _shares(r.required_obj("breakdown"))
        bottlenecks = tuple(
            Bottleneck.read(b, i + 1) for i, b in enumerate(r.objects("bottlenecks", required=True))
        )
        return cls(
            tool=_part(r, "tool", ToolInfo.read),
            run=r.string("run"),
            hosts=r.strings("hosts"),
            host=r.string("host"),
            device=r.required_string("device"),
            source=_part(r, "source", TraceSource.read),
            metadata=_part(r, "metadata", RunMetadata.read),
            step_detection=r.required_string("step_detection"),
            steps=steps,
            verdict=verdict,
            breakdown=breakdown,
            input_categories=_part(r, "input_categories", _shares) or (),
            per_step=tuple(StepRow.read(s) for s in r.objects("per_step")),
            bottlenecks=bottlenecks,
            recommendations=tuple(Fix.read(f) for f in r.objects("recommendations")),
            stages=tuple(StageRow.read(s) for s in r.objects("stages")),
            timeline=_part(r, "timeline", Timeline.read),
            next_moves=tuple(NextMove.read(m) for m in r.objects("next_moves")),
            notes=r.strings("notes"),
            training=_part(r, "training", TrainingTime.from_reader),
            xprof=_part(r, "xprof", XProfCheck.read),
            service_sizing=_part(r, "service_sizing", sizing_from_reader),
            schema=SUPPORTED_SCHEMA,
        )


def _part(r: Reader, key: str, read: Callable[[Reader], T]) -> T | None:
    found = r.obj(key)
    return read(found) if found is not None else None


def _shares(r: Reader) -> Shares:
    return tuple((k, share(r, k)) for k in r.fields())
