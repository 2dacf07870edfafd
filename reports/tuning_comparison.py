"""The four-way comparison of a tuning document: the script as written, AUTOTUNE everywhere,
the #cores heuristic (and the analysis-guided guess) and the tuned config, each with its
honest figure and its speed-up over the script as written.

`comparison` is the one rule both the HTML (`reports.tuning_model`) and the terminal's
table (`reports.tuning_terminal`) show. A row's honest figure is its final-round
re-measure where that completed, else its trial's: the winner's search figure is the best
of many noisy trials, so it is biased upwards, and the final round measures it again
beside the baselines. Pure: the same document gives equal rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from tftune.core.tuning_document import TuningDocument
from tftune.core.tuning_parts import BASELINE_KEYS, BaselineRun, BestRun, MeasuredRate

# A row only when the run measured it (the heuristic is not run where the screen drained it).
OPTIONAL_BASELINES = frozenset({"heuristic", "guided"})
ROW_LABELS = {
    "as_written": "As written",
    "autotune": "AUTOTUNE everywhere",
    "heuristic": "#cores heuristic",
    "guided": "Analysis-guided guess",
    "tuned": "Tuned (tftune)",
}


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    key: str  # as_written | autotune | heuristic | guided | tuned
    label: str
    measurement: MeasuredRate | None  # None: not measured in this run
    speedup: float | None  # examples/s relative to the script as written
    note: str | None = None  # the tuned row's, where a baseline is the same config


# The tuned row's note where the analysis-guided guess won: one config, one row.
GUIDED_WON = "the analysis-guided guess"


def _confirmed(run: BaselineRun | BestRun) -> MeasuredRate | None:
    """The run's final-round re-measure, where it completed."""
    again = run.confirmed
    return again if isinstance(again, MeasuredRate) and again.complete else None


def _honest(run: BaselineRun | BestRun) -> MeasuredRate:
    """A run's honest figure: its final-round re-measure where that completed, else its
    trial's. The winner's search figure is the best of many noisy trials, so it is biased
    upwards; the final round measures it again beside the baselines."""
    return _confirmed(run) or run.measured


def comparison(doc: TuningDocument) -> tuple[ComparisonRow, ...]:
    """The four-way comparison of a tuning document (the HTML's and the terminal's
    table): each row's honest figure and its speed-up over the script as written. A
    winner that is a baseline (the script as written kept) has that baseline's figure.
    The tuner's own ``best.speedup_vs_as_written`` is the tuned row's
    (tests/tuner/test_optimize_emit.py)."""
    measured: dict[str, MeasuredRate | None] = {}
    for key in BASELINE_KEYS:
        run = doc.baselines.get(key)
        measured[key] = _honest(run) if run is not None else None
    measured["tuned"] = _honest(doc.best)
    trial = doc.best.measured.trial
    if _confirmed(doc.best) is None and trial is not None:
        for key in BASELINE_KEYS:
            run = doc.baselines.get(key)
            if run is not None and run.measured.trial == trial:
                measured["tuned"] = measured[key]
                break
    guided = doc.baselines.get("guided")
    same = guided is not None and trial is not None and guided.measured.trial == trial
    if same:  # the guess is the winner: a note on the tuned row, not a second row
        measured["guided"] = None
    base = measured["as_written"]
    base_rate = base.examples_per_s if base is not None else None
    rows = []
    for key in (*BASELINE_KEYS, "tuned"):
        m = measured[key]
        if m is None and key in OPTIONAL_BASELINES:
            continue
        rate = m.examples_per_s if m is not None and m.complete else None
        speedup = rate / base_rate if rate is not None and base_rate else None
        note = GUIDED_WON if key == "tuned" and same else None
        rows.append(ComparisonRow(key, ROW_LABELS[key], m, speedup, note))
    return tuple(rows)
