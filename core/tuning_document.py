"""The tuning JSON (docs/json.md) as one tree of frozen types: `TuningDocument`.

`tftune.tuner.output.assemble` builds it (every derived figure, such as the winner's speed-up,
computed there) and writes `TuningDocument.to_json()`; the reports read a saved one with
`TuningDocument.from_json` and render from its types. `to_json` only serializes: a figure
is written as the producer stored it. Its parts, each with its JSON both ways, are in
`tftune.core.tuning_parts`, `tftune.core.tuning_trials` and (what the whole run adds)
`tftune.core.tuning_run`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader, top_reader
from tftune.core.learning import LearningCheck
from tftune.core.tuning_parts import (
    ABSENT,
    Absent,
    Baselines,
    BestRun,
    CeilingFigures,
    MeasuredRate,
    SearchedSpace,
    TrialCounts,
    part_json,
    present,
    put_present,
)
from tftune.core.tuning_run import PlatformInfo, StudyInfo, WholeRun
from tftune.core.tuning_trials import Instability, TrialRow

SCHEMA = 1
OBJECTIVES = ("throughput", "gpu-util", "both")


def _learning(r: Reader) -> LearningCheck | Absent:
    found = r.obj("learning")
    return LearningCheck.from_reader(found) if found is not None else ABSENT


@dataclass(frozen=True, slots=True)
class TuningDocument:
    """The tuning JSON, schema 1: what `tftune optimize` measured and chose."""

    objective: str  # one of `OBJECTIVES`
    baselines: Baselines
    best: BestRun
    schema: int = SCHEMA
    script: str | None = None
    utilization_kind: str | None = None  # nvml | duty_cycle
    device: str | None = None  # CPU_ONLY | GPU
    trials: TrialCounts | None = None
    wall_s: float | None = None
    ceiling: CeilingFigures | None = None  # None: --no-bounds
    pareto: tuple[MeasuredRate, ...] = ()
    space: SearchedSpace | None = None
    trials_detail: tuple[TrialRow, ...] = ()
    instability: Instability | Absent | None = ABSENT
    # The winner's learning check, where it changes batch or precision.
    learning: LearningCheck | Absent = ABSENT
    importances: tuple[tuple[str, float], ...] = ()  # in document order
    # Why `importances` is empty (too few complete trials, no knob varied), where it is.
    importances_withheld: str | Absent = ABSENT
    study: StudyInfo | None = None
    command: str | None = None
    diff: str | None = None
    snippet: str | None = None
    notes: tuple[str, ...] = ()
    platform: PlatformInfo | None = None
    run: WholeRun | None = None  # None: a study's outcome rendered alone

    def to_json(self) -> dict[str, Any]:
        out = {
            "schema": self.schema,
            "script": self.script,
            "objective": self.objective,
            "utilization_kind": self.utilization_kind,
            "device": self.device,
            "trials": part_json(self.trials),
            "wall_s": self.wall_s,
            "ceiling": part_json(self.ceiling),
            "baselines": self.baselines.to_json(),
            "best": self.best.to_json(),
            "pareto": [p.to_json() for p in self.pareto],
            "space": part_json(self.space),
            "trials_detail": [t.to_json() for t in self.trials_detail],
        }
        put_present(out, "instability", part_json(self.instability))
        if not isinstance(self.learning, Absent):
            out["learning"] = self.learning.to_json()
        out.update(
            importances=dict(self.importances),
        )
        put_present(out, "importances_withheld", self.importances_withheld)
        out.update(
            study=part_json(self.study),
            command=self.command,
            diff=self.diff,
            snippet=self.snippet,
            notes=list(self.notes),
            platform=part_json(self.platform),
        )
        if self.run is not None:
            out.update(self.run.to_json())
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, source: str = "tuning JSON") -> TuningDocument:
        """Validate a tuning JSON into the document: strict on what a report cannot do
        without, tolerant of optional and older fields; a malformed one is one
        `UserError` line naming the file and the field."""
        r = top_reader(data, source=source)
        objective = r.required_string("objective")
        if objective not in OBJECTIVES:
            raise r.error("objective", f"must be one of {', '.join(OBJECTIVES)}")
        best = BestRun.from_reader(r.required_obj("best"))
        trials, ceiling, space = r.obj("trials"), r.obj("ceiling"), r.obj("space")
        rows = tuple(TrialRow.from_reader(t) for t in r.objects("trials_detail"))
        instability, study, platform = r.obj("instability"), r.obj("study"), r.obj("platform")
        return cls(
            objective=objective,
            baselines=Baselines.from_reader(r.required_obj("baselines")),
            best=best,
            schema=r.required_integer("schema"),
            script=r.string("script"),
            utilization_kind=r.string("utilization_kind"),
            device=r.string("device"),
            trials=TrialCounts.from_reader(trials) if trials is not None else None,
            wall_s=r.number("wall_s"),
            ceiling=CeilingFigures.from_reader(ceiling) if ceiling is not None else None,
            pareto=tuple(MeasuredRate.from_reader(p) for p in r.objects("pareto")),
            space=SearchedSpace.from_reader(space) if space is not None else None,
            trials_detail=rows,
            instability=(
                (Instability.from_reader(instability) if instability is not None else None)
                if "instability" in r.mapping()
                else ABSENT
            ),
            learning=_learning(r),
            importances=_importances(r.obj("importances")),
            importances_withheld=(
                r.required_string("importances_withheld")
                if present(r, "importances_withheld")
                else ABSENT
            ),
            study=StudyInfo.from_reader(study) if study is not None else None,
            command=r.string("command"),
            diff=r.string("diff"),
            snippet=r.string("snippet"),
            notes=r.strings("notes"),
            platform=PlatformInfo.from_reader(platform) if platform is not None else None,
            run=WholeRun.from_reader(r),
        )


def _importances(imp: Reader | None) -> tuple[tuple[str, float], ...]:
    return tuple((k, imp.required_number(k)) for k in imp.fields()) if imp is not None else ()
