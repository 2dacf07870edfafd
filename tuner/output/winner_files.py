"""The winner as the user gets it: its config file (with the reproducibility record and
the output-layer findings), the command that trains with it, the diff of the user's own
lines (the learning check's scaled learning rate on the optimizer's line among them) and
the snippet of what no line holds."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tftune.core.run_record import Record
from tftune.core.trial_notes import OutputPrecisionFinding
from tftune.tuner.fixes.precision import recommendation
from tftune.tuner.fixes.rewrite_check import RewritePlan
from tftune.tuner.output import assemble, emit
from tftune.tuner.searchspace.config import save_config
from tftune.tuner.searchspace.space_build import PY_DATASET_OPS
from tftune.tuner.study import StudyOutcome
from tftune.tuner.study.learning_check import recommended_scale
from tftune.tuner.trial import Discovery


@dataclass(frozen=True, slots=True)
class WinnerFiles:
    """The winner as written: its config file, the command that trains with it, the
    diff of the user's lines, the snippet of globals, and the precision advice."""

    outcome: StudyOutcome
    best_file: Path
    command: str
    diff: str
    snippet: str
    findings: tuple[OutputPrecisionFinding, ...]  # every run's, once each, by their words
    advice: str | None


def emit_winner(
    script: str | os.PathLike[str],
    path: Path,
    args: Sequence[str],
    found: Discovery,
    outcome: StudyOutcome,
    best_file: str | os.PathLike[str],
    record: Record,
    note: Callable[[str], None],
    plan: RewritePlan,
) -> WinnerFiles:
    """Writes the winner's config (with the reproducibility record and the findings);
    builds the diff of the user's lines and the snippet of what no line holds."""
    # Mixed precision with a 16-bit output layer: recommended only with the fix.
    runs = [*outcome.records, *([outcome.confirm] if outcome.confirm is not None else [])]
    findings = tuple(sorted({f for r in runs for f in r.findings}, key=lambda f: f.message()))
    advice = recommendation(outcome.best_config.mixed_precision or "off", findings)
    if advice is not None:
        note(advice)
    best_path = Path(best_file)
    command = emit.run_command(str(script), args, str(best_path))
    best = assemble.best_config_with_metrics(outcome, command)
    extra: dict[str, Any] = {
        "record": record.to_json(),
        "findings": [f.message() for f in findings],
    }
    if advice is not None:
        extra["notes"] = [advice]
    save_config(replace(best, meta={**best.meta, **extra}), best_path)
    check = outcome.learning
    facts = replace(
        plan.facts,
        scale=recommended_scale(outcome),
        optimizers=check.optimizers if check is not None else (),
    )
    diff = emit.source_diff(path, outcome.best_config, facts)
    own_pipeline = any(s.op not in PY_DATASET_OPS for s in found.sites)
    snippet = emit.globals_snippet(
        outcome.best_config,
        own_pipeline=own_pipeline,
        config_file=str(best_path),
        facts=facts,
    )
    return WinnerFiles(outcome, best_path, command, diff, snippet, findings, advice)
