"""The tuning document (docs/json.md), assembled once from the study's outcome.

- `tuning_document`: the `tftune.core.tuning_document.TuningDocument`, with what the
  whole run adds (`RunFacts`); `write_json_atomic` writes its JSON; `trial_row`: one
  trial as its ``trials_detail`` holds it;
  `run_training`: what was measured as training;
- `best_config_with_metrics`: the winning `Config` with what was measured (and its noise)
  in ``meta``; `tftune.tuner.searchspace.config.save_config` writes it atomically.

Every derived figure (the winner's speed-up, the break-even) is computed here and stored
in the document, which only serializes it. Rendering is the reports' job:
`tftune.reports.tuning_terminal` draws the table and the per-trial lines from the
document, `tftune.reports.tuning_html` the page.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tftune.core.errors import ConfigError
from tftune.core.run_record import Record
from tftune.core.training import TrainingFacts
from tftune.core.tuning_document import SCHEMA, TuningDocument
from tftune.core.tuning_parts import (
    ABSENT,
    Absent,
    BaselineRun,
    Baselines,
    BestRun,
    KnobChoices,
    KnobLeftOut,
    MeasuredRate,
    SearchedSpace,
    TrialCounts,
)
from tftune.core.tuning_rewrites import RewriteRow
from tftune.core.tuning_run import PlatformInfo, ScreenRanking, StudyInfo, WholeRun
from tftune.core.tuning_trials import TrialRow
from tftune.core.userfiles import write_output
from tftune.core.vocabulary import TrialState
from tftune.tuner.fixes.rewrite_check import measured_rewrites
from tftune.tuner.output.breakeven import break_even
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.searchspace.config import Config
from tftune.tuner.searchspace.space import SearchSpace, format_value
from tftune.tuner.study import Role, StudyOutcome, TrialRecord
from tftune.tuner.study.best import outcome_best, remeasured
from tftune.tuner.trial.discovery import Discovery


def _rate(r: TrialRecord) -> MeasuredRate:
    """A trial's figure object, rounded as the document writes it."""
    return MeasuredRate(
        examples_per_s=_round(r.examples_per_s),
        utilization=_round(r.utilization, 4),
        spread=_round(r.spread, 4),
        input_wait_share=_round(r.input_wait_share, 4),
        repeats=tuple(round(float(x), 2) for x in r.repeats),
        trial=r.number,
        state=r.state,
        reason=r.reason,
    )


def _metrics(r: TrialRecord | None) -> dict[str, Any] | None:
    return _rate(r).to_json() if r is not None else None


def trial_row(r: TrialRecord) -> TrialRow:
    """One trial as the tuning JSON's ``trials_detail`` holds it (and as its status line
    is drawn from: `tftune.reports.tuning_terminal.trial_line`). A failed trial keeps its
    stderr tail and crash."""
    failed = r.state is TrialState.FAILED
    return TrialRow(
        number=r.number,
        role=r.role.value,
        state=r.state,
        params=tuple((k, format_value(v)) for k, v in r.params.items()),
        description=r.description,
        examples_per_s=_round(r.examples_per_s),
        utilization=_round(r.utilization, 4),
        spread=_round(r.spread, 4),
        reason=r.reason,
        wall_s=_round(r.wall_s),
        notes=tuple(r.notes),
        stderr_tail=(r.stderr_tail or None) if failed else None,
        crash=r.crash if failed else None,
        training=r.training,
    )


def _baseline(outcome: StudyOutcome, r: TrialRecord | None) -> BaselineRun | None:
    """A baseline's trial figures, with its final-round figure as ``confirmed``."""
    if r is None:
        return None
    again = remeasured(r, outcome.final)
    return BaselineRun(_rate(r), _rate(again) if again is not r else None)


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(float(x), nd)


def best_config_with_metrics(outcome: StudyOutcome, command: str) -> Config:
    """The winner, with what was measured in ``meta`` (for humans and for CI)."""
    aw = outcome.baselines.get(Role.AS_WRITTEN)
    meta = {
        "tool": "tftune optimize",
        "objective": outcome.objective.value,
        "study": outcome.study_name,
        "storage": outcome.storage,
        "command": command,
        "measured": _metrics(outcome.best),
        "confirmed": _metrics(outcome.confirm),
        "as_written": _metrics(aw),
        "speedup_vs_as_written": outcome_best(outcome).speedup,
        "noise": "spread = (max - min) / median of the repeat windows' examples/s",
    }
    return replace(outcome.best_config, meta=meta)


def write_json_atomic(data: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write JSON atomically (see `tftune.core.userfiles`); `-` is standard output."""
    write_output(path, json.dumps(data, indent=2) + "\n", ConfigError)
    return Path(path)


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the whole `tftune optimize` run adds to its study's outcome in the tuning
    JSON (all absent for an outcome rendered alone, as tests do)."""

    wall_s: float | None = None  # the command end to end (None: the study's own time)
    training: TrainingFacts | None = None  # `run_training`
    record: Record | None = None  # how to run it again (`tuner.output.repro`)
    findings: tuple[str, ...] = ()  # the precision findings of the winner's run
    advice: str | None = None  # the float32-output-layer advice, where it applies
    requires: str | None = None  # what the winner's config needs of the user's code
    # The pipeline screen's ranking (`tuner.searchspace.screen`; None: it did not run); ABSENT: not
    # part of the document.
    screen: ScreenRanking | Absent | None = ABSENT
    # The rewrites considered before the study (`tuner.fixes.rewrite_check`), their figures
    # filled in from the trials here; ABSENT: not part of the document (--no-rewrites).
    rewrites: tuple[RewriteRow, ...] | Absent = ABSENT


def tuning_document(
    *,
    script: str,
    outcome: StudyOutcome,
    space: SearchSpace,
    ceiling: Ceiling | None,
    device: str,
    config_file: str,
    command: str,
    diff: str,
    snippet: str,
    seed: int,
    run: RunFacts | None = None,
) -> TuningDocument:
    """The tuning document, schema 1 (docs/json.md), assembled once. ``None`` is "not
    measured".

    It carries all that the reports draw (`tftune.reports.tuning_terminal`, `.tuning_html`):
    each baseline with its final-round figure (``confirmed``), ``best`` (with its
    ``input_wait_share``, for the ceiling caption), ``ceiling``, ``instability`` and one
    `trial_row` per trial; with `run`, what the whole run adds (its wall time, the
    break-even, why the search stopped, what was measured as training, its record)."""
    wall_s = round(run.wall_s if run is not None and run.wall_s is not None else outcome.wall_s, 2)
    notes = list(outcome.notes)
    if run is not None and run.advice is not None:
        notes.append(run.advice)
    b = outcome.baselines
    return TuningDocument(
        schema=SCHEMA,
        script=script,
        objective=outcome.objective.value,
        utilization_kind=outcome.utilization_kind,
        device=device,
        trials=TrialCounts(**outcome.counts()),
        wall_s=wall_s,
        ceiling=ceiling.figures() if ceiling is not None else None,
        baselines=Baselines(
            as_written=_baseline(outcome, b.get(Role.AS_WRITTEN)),
            autotune=_baseline(outcome, b.get(Role.AUTOTUNE)),
            heuristic=_baseline(outcome, b.get(Role.HEURISTIC)),
            guided=_baseline(outcome, b.get(Role.GUIDED)),
        ),
        best=_best(outcome, config_file, run.requires if run is not None else None),
        pareto=tuple(_rate(r) for r in outcome.pareto) if outcome.objective.value == "both" else (),
        space=_searched(space),
        trials_detail=tuple(trial_row(r) for r in outcome.records),
        instability=outcome.instability,
        learning=outcome.learning if outcome.learning is not None else ABSENT,
        importances=tuple(outcome.importances.items()),
        importances_withheld=(
            outcome.importances_withheld if outcome.importances_withheld is not None else ABSENT
        ),
        study=StudyInfo(outcome.study_name, outcome.storage, seed),
        command=command,
        diff=diff,
        snippet=snippet,
        notes=tuple(notes),
        platform=PlatformInfo(platform.python_version(), os.cpu_count()),
        run=_whole_run(outcome, space, wall_s, run) if run is not None else None,
    )


def _best(outcome: StudyOutcome, config_file: str, requires: str | None) -> BestRun:
    """The winner's trial figures, config, final-round figure and speed-up."""
    return BestRun(
        measured=_rate(outcome.best),
        config_file=config_file,
        config=outcome.best_config.settings(),
        description=outcome.best.description,
        role=outcome.best.role.value,
        confirmed=_rate(outcome.confirm) if outcome.confirm is not None else None,
        speedup_vs_as_written=outcome_best(outcome).speedup,
        requires=(requires,) if requires is not None else ABSENT,
    )


def _searched(space: SearchSpace) -> SearchedSpace:
    """The space as the document writes it: choices and fixed values as text."""
    return SearchedSpace(
        knobs=tuple(
            KnobChoices(k.name, tuple(format_value(c) for c in k.choices), k.why)
            for k in space.knobs
        ),
        fixed=tuple((n, format_value(v)) for n, v in space.fixed.items()),
        left_out=tuple(KnobLeftOut(lo.name, lo.reason) for lo in space.left_out),
        warnings=tuple(space.warnings),
    )


def _whole_run(outcome: StudyOutcome, space: SearchSpace, wall_s: float, run: RunFacts) -> WholeRun:
    """What the whole run adds: the break-even at its wall time, why the search stopped,
    what was measured as training, its record and findings."""
    best = outcome_best(outcome)
    kept = outcome.best.role is Role.AS_WRITTEN
    return WholeRun(
        break_even=break_even(
            wall_s,
            best.as_written.examples_per_s if best.as_written is not None else None,
            None if kept else best.figure.examples_per_s,
        ),
        stop_reason=outcome.stop_reason,
        training=run.training,
        record=run.record,
        findings=run.findings,
        screen=run.screen,
        rewrites=(
            measured_rewrites(run.rewrites, outcome, space)
            if not isinstance(run.rewrites, Absent)
            else ABSENT
        ),
    )


def run_training(found: Discovery, outcome: StudyOutcome) -> TrainingFacts:
    """What was measured as training (the tuning JSON's ``training``): the loop, the
    preamble every run pays, and, for the script as written and the winner, what was
    taken out of their windows and the epoch-start stall with its cause and fix (the
    winner's only where it is not the script as written)."""
    aw = outcome.baselines.get(Role.AS_WRITTEN)
    best = outcome.best
    return TrainingFacts(
        loop=found.training,
        busiest_loop=found.busiest_loop,
        preamble_s=_round(found.preamble_s),
        as_written=aw.training if aw is not None and aw.training else None,
        tuned=best.training if best.training and best.role is not Role.AS_WRITTEN else None,
    )
