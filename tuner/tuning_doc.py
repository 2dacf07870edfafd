"""The tuning JSON (docs/json.md), assembled once from the study's outcome.

- `tuning_json`: the document, with what the whole run adds (`RunFacts`), and
  `write_json_atomic`; `record_json`: one trial as its ``trials_detail`` holds it;
  `training_json`: what was measured as training;
- `best_config_with_metrics`: the winning `Config` with what was measured (and its noise)
  in ``meta``; `tftune.tuner.config.save_config` writes it atomically.

Rendering them is the reports' job: `tftune.reports.tuning_terminal` draws the table and
the per-trial lines from this JSON, `tftune.reports.tuning_html` the page.
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
from tftune.core.userfiles import write_output
from tftune.core.vocabulary import TrialState
from tftune.tuner.bounds import Ceiling
from tftune.tuner.breakeven import BreakEven
from tftune.tuner.config import Config
from tftune.tuner.crashes import CrashSummary
from tftune.tuner.space import SearchSpace, format_value
from tftune.tuner.study import Role, StudyOutcome, TrialRecord
from tftune.tuner.trial.discovery import Discovery

SCHEMA = 1


def _metrics(r: TrialRecord | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "examples_per_s": _round(r.examples_per_s),
        "utilization": _round(r.utilization, 4),
        "spread": _round(r.spread, 4),
        "input_wait_share": _round(r.input_wait_share, 4),
        "repeats": [_round(x) for x in r.repeats],
        "trial": r.number,
        "state": r.state.value,
        "reason": r.reason,
    }


def record_json(r: TrialRecord) -> dict[str, Any]:
    """One trial as the tuning JSON's ``trials_detail`` holds it (and as its status line
    is drawn from: `tftune.reports.tuning_terminal.trial_line`). A failed trial keeps its
    stderr tail and crash."""
    failed = r.state is TrialState.FAILED
    return {
        "number": r.number,
        "role": r.role.value,
        "state": r.state.value,
        "params": {k: format_value(v) for k, v in r.params.items()},
        "description": r.description,
        "examples_per_s": _round(r.examples_per_s),
        "utilization": _round(r.utilization, 4),
        "spread": _round(r.spread, 4),
        "reason": r.reason,
        "wall_s": _round(r.wall_s),
        "notes": list(r.notes),
        "stderr_tail": (r.stderr_tail or None) if failed else None,
        "crash": _crash_json(r.crash) if failed else None,
        "training": r.training.to_json() if r.training is not None else None,
    }


def _baseline(outcome: StudyOutcome, r: TrialRecord | None) -> dict[str, Any] | None:
    """A baseline's trial figures, with its final-round figure as ``confirmed``."""
    out = _metrics(r)
    if out is not None:
        again = outcome.remeasured(r)
        out["confirmed"] = _metrics(again) if again is not r else None
    return out


def _crash_json(crash: CrashSummary | None) -> dict[str, Any] | None:
    return crash.to_json() if crash is not None else None


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
        "speedup_vs_as_written": _speedup(tuned_record(outcome), outcome.remeasured(aw)),
        "noise": "spread = (max - min) / median of the repeat windows' examples/s",
    }
    return replace(outcome.best_config, meta=meta)


def _speedup(r: TrialRecord | None, base: TrialRecord | None) -> float | None:
    if r is None or base is None or not r.examples_per_s or not base.examples_per_s:
        return None
    return round(r.examples_per_s / base.examples_per_s, 3)


def write_json_atomic(data: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write JSON atomically (see `tftune.core.userfiles`); `-` is standard output."""
    write_output(path, json.dumps(data, indent=2) + "\n", ConfigError)
    return Path(path)


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the whole `tftune optimize` run adds to its study's outcome in the tuning
    JSON (all absent for an outcome rendered alone, as tests do)."""

    wall_s: float | None = None  # the command end to end (None: the study's own time)
    training: dict[str, Any] | None = None  # `training_json`
    record: dict[str, Any] | None = None  # how to run it again (`tuner.record`)
    findings: tuple[str, ...] = ()  # the precision findings of the winner's run
    advice: str | None = None  # the float32-output-layer advice, where it applies
    requires: str | None = None  # what the winner's config needs of the user's code


def tuning_json(
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
) -> dict[str, Any]:
    """The tuning JSON, schema 1 (docs/json.md), assembled once. ``null`` is "not
    measured".

    It carries all that the reports draw (`tftune.reports.tuning_terminal`, `.tuning_html`):
    each baseline with its final-round figure (``confirmed``), ``best`` (with its
    ``input_wait_share``, for the ceiling caption), ``ceiling``, ``instability`` and one
    `record_json` row per trial; with `run`, what the whole run adds (its wall time, the
    break-even, why the search stopped, what was measured as training, its record)."""
    doc = _study_json(script, outcome, space, ceiling, device, config_file, command, seed)
    doc.update(diff=diff, snippet=snippet, notes=list(outcome.notes))
    doc["platform"] = {"python": platform.python_version(), "cores": os.cpu_count()}
    if run is None:
        return doc
    if run.wall_s is not None:
        doc["wall_s"] = round(run.wall_s, 2)
    aw = outcome.remeasured(outcome.baselines.get(Role.AS_WRITTEN))
    kept = outcome.best.role is Role.AS_WRITTEN
    doc["break_even"] = BreakEven(
        doc["wall_s"],
        aw.examples_per_s if aw is not None else None,
        None if kept else tuned_record(outcome).examples_per_s,
    ).to_json()
    doc["stop_reason"] = outcome.stop_reason
    doc.update(training=run.training, record=run.record, findings=list(run.findings))
    if run.advice is not None:
        doc["notes"].append(run.advice)
    if run.requires is not None:
        doc["best"]["requires"] = [run.requires]
    return doc


def _study_json(
    script: str,
    outcome: StudyOutcome,
    space: SearchSpace,
    ceiling: Ceiling | None,
    device: str,
    config_file: str,
    command: str,
    seed: int,
) -> dict[str, Any]:
    """The tuning JSON's figures of the study, up to its ``command``."""
    b = outcome.baselines
    return {
        "schema": SCHEMA,
        "script": script,
        "objective": outcome.objective.value,
        "utilization_kind": outcome.utilization_kind,
        "device": device,
        "trials": outcome.counts(),
        "wall_s": round(outcome.wall_s, 2),
        "ceiling": ceiling.to_json() if ceiling is not None else None,
        "baselines": {
            key: _baseline(outcome, b.get(role))
            for key, role in (
                ("as_written", Role.AS_WRITTEN),
                ("autotune", Role.AUTOTUNE),
                ("heuristic", Role.HEURISTIC),
                ("guided", Role.GUIDED),
            )
        },
        "best": {
            **(_metrics(outcome.best) or {}),
            "config_file": config_file,
            "config": outcome.best_config.to_json(),
            "description": outcome.best.description,
            "role": outcome.best.role.value,
            "confirmed": _metrics(outcome.confirm),
            "speedup_vs_as_written": _speedup(
                tuned_record(outcome), outcome.remeasured(b.get(Role.AS_WRITTEN))
            ),
        },
        "pareto": [_metrics(r) for r in outcome.pareto]
        if outcome.objective.value == "both"
        else [],
        "space": {
            "knobs": [
                {"name": k.name, "choices": [format_value(c) for c in k.choices], "why": k.why}
                for k in space.knobs
            ],
            "fixed": {n: format_value(v) for n, v in space.fixed.items()},
            "left_out": [{"name": lo.name, "reason": lo.reason} for lo in space.left_out],
            "warnings": list(space.warnings),
        },
        "trials_detail": [record_json(r) for r in outcome.records],
        "instability": outcome.instability.to_json() if outcome.instability else None,
        "importances": dict(outcome.importances),
        "study": {"name": outcome.study_name, "storage": outcome.storage, "seed": seed},
        "command": command,
    }


def training_json(found: Discovery, outcome: StudyOutcome) -> dict[str, Any]:
    """What was measured as training (the tuning JSON's ``training``): the loop, the
    preamble every run pays, and, for the script as written and the winner, what was
    taken out of their windows and the epoch-start stall with its cause and fix (the
    winner's only where it is not the script as written)."""
    trains = found.training
    aw = outcome.baselines.get(Role.AS_WRITTEN)
    return {
        "loop": trains.to_json() if trains is not None else None,
        "busiest_loop": found.busiest_loop,
        "preamble_s": _round(found.preamble_s),
        "as_written": aw.training.to_json() if aw is not None and aw.training else None,
        "tuned": (
            outcome.best.training.to_json()
            if outcome.best.training and outcome.best.role is not Role.AS_WRITTEN
            else None
        ),
    }


def tuned_record(outcome: StudyOutcome) -> TrialRecord:
    """The winner's honest figure: from the final round where it ran, else its trial's."""
    return outcome.remeasured(outcome.best) or outcome.best
