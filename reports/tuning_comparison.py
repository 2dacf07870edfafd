"""The four-way comparison of a tuning JSON: the script as written, AUTOTUNE everywhere,
the #cores heuristic (and the analysis-guided guess) and the tuned config, each with its
honest figure and its speed-up over the script as written.

`comparison` is the one rule both the HTML (`reports.tuning_model`) and the terminal's
table (`reports.tuning_terminal`) show. A row's honest figure is its final-round
re-measure where that completed, else its trial's: the winner's search figure is the best
of many noisy trials, so it is biased upwards, and the final round measures it again
beside the baselines. Pure: the same JSON gives equal rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader, share, top_reader, trial_state
from tftune.core.vocabulary import TrialState

BASELINE_KEYS = ("as_written", "autotune", "heuristic", "guided")
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
class Measurement:
    """One row's figures: a baseline's or the winner's honest run (`comparison`)."""

    examples_per_s: float | None
    utilization: float | None
    spread: float | None
    state: TrialState | None = TrialState.COMPLETE
    reason: str | None = None
    input_wait_share: float | None = None

    @property
    def complete(self) -> bool:
        return self.state is TrialState.COMPLETE

    @property
    def state_word(self) -> str:
        return self.state.value if self.state is not None else "unfinished"


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    key: str  # as_written | autotune | heuristic | guided | tuned
    label: str
    measurement: Measurement | None  # None: not measured in this run
    speedup: float | None  # examples/s relative to the script as written


def measurement_of(r: Reader) -> Measurement:
    return Measurement(
        examples_per_s=r.number("examples_per_s"),
        utilization=share(r, "utilization"),
        spread=r.number("spread"),
        state=trial_state(r),
        reason=r.string("reason"),
        input_wait_share=share(r, "input_wait_share"),
    )


def _confirmed(r: Reader) -> bool:
    again = r.obj("confirmed")
    return again is not None and measurement_of(again).complete


def _honest(r: Reader) -> Measurement:
    """A run's honest figure: its final-round re-measure where that completed, else its
    trial's. The winner's search figure is the best of many noisy trials, so it is biased
    upwards; the final round measures it again beside the baselines."""
    again = r.obj("confirmed")
    return measurement_of(again if again is not None and _confirmed(r) else r)


def comparison(data: Mapping[str, Any], source: str = "tuning JSON") -> tuple[ComparisonRow, ...]:
    """The four-way comparison of a tuning JSON (the HTML's and the terminal's table):
    each row's honest figure and its speed-up over the script as written. A winner that is
    a baseline (the script as written kept) has that baseline's figure. The tuner's own
    ``best.speedup_vs_as_written`` is the tuned row's (tests/tuner/test_optimize_emit.py)."""
    r = top_reader(data, source=source)
    baselines, best = r.required_obj("baselines"), r.required_obj("best")
    measured: dict[str, Measurement | None] = {}
    for key in BASELINE_KEYS:
        sub = baselines.obj(key)
        measured[key] = _honest(sub) if sub is not None else None
    measured["tuned"] = _honest(best)
    if not _confirmed(best):
        trial = best.raw("trial")
        for key in BASELINE_KEYS:
            sub = baselines.obj(key)
            if trial is not None and sub is not None and sub.raw("trial") == trial:
                measured["tuned"] = measured[key]
                break
    base = measured["as_written"]
    base_rate = base.examples_per_s if base is not None else None
    rows = []
    for key in (*BASELINE_KEYS, "tuned"):
        m = measured[key]
        if m is None and key in OPTIONAL_BASELINES:
            continue
        rate = m.examples_per_s if m is not None and m.complete else None
        speedup = rate / base_rate if rate is not None and base_rate else None
        rows.append(ComparisonRow(key, ROW_LABELS[key], m, speedup))
    return tuple(rows)
