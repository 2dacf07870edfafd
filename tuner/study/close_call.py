"""A close call: the final round's best gained at least `MIN_GAIN` over the script as
written, but less than the round's noise demands (`gains.required_gain`), or where one
pair of runs is no evidence (`one_pair_decides_nothing`). It is settled by more runs of
the two, alternately (`winner` runs them), and decided here: the pooled means must gain
`MIN_GAIN` with a Welch t of `DECIDE_T` (`decide_close_call`), and the runs stop early
once the t is far from zero either way (`settled`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tftune.core.vocabulary import TrialState
from tftune.probes.live.clock import spread
from tftune.tuner.study.contract import Objective, StudySettings, TrialRecord
from tftune.tuner.study.gains import MIN_GAIN, pool_runs, relative_gain, score

# A close call's deciding runs (`contract.DECIDE_PAIRS` pairs) recommend a change only
# with a Welch t of at least DECIDE_T over all runs of the two, as well as MIN_GAIN.
DECIDE_T = 2.0
# The deciding runs stop after a pair where Welch's t over the runs so far is already this
# far from zero either way: a +20% gain whose runs each vary by 1% needs no second pair,
# and a bar twice DECIDE_T keeps a decision taken on two runs a side as safe as one taken
# on all of them.
DECIDE_EARLY_T = 4.0
# Where the two runs of the script as written, or the winner's search trial and its
# re-measure, lie further apart than this (relative to their mean), one pair of runs is
# no evidence however large the gain: it is decided by the deciding runs. A
# MirroredStrategy loop's batch-256 config read 975 and then 1,467 ex/s, "1.96x" over a
# script as written at 748 and 900, and 0.87x by the script's own counter.
DECIDE_ABOVE_SPREAD = 0.15


@dataclass(frozen=True, slots=True)
class CloseCall:
    """The final round's best, when it gained at least MIN_GAIN over the script as
    written but less than the round's noise demands (`required_gain`)."""

    record: TrialRecord
    gain: float
    needed: float
    # Why more runs decide it, said in the notes.
    why: str = ""

    def reason(self) -> str:
        return self.why or f"within the noise (a change must gain {self.needed:.0%})"


def welch_t(a: Sequence[float], b: Sequence[float]) -> float:
    """Welch's t of mean(b) - mean(a): how many standard errors b's runs sit above a's.
    Infinite when neither side varies and b is higher."""
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) if len(a) > 1 else 0.0
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) if len(b) > 1 else 0.0
    se = math.sqrt(va / len(a) + vb / len(b))
    if se == 0.0:
        return math.inf if mb > ma else (0.0 if mb == ma else -math.inf)
    return (mb - ma) / se


def completed(runs: Sequence[TrialRecord], number: int) -> list[TrialRecord]:
    return [r for r in runs if r.number == number and r.state is TrialState.COMPLETE]


def welch_t_of(
    mine: Sequence[TrialRecord], base: Sequence[TrialRecord], objective: Objective
) -> float | None:
    """Welch's t of the contender's completed runs (`mine`) over the script as written's
    (`base`); None where either has none."""
    if not mine or not base:
        return None
    return welch_t([score(r, objective)[0] for r in base], [score(r, objective)[0] for r in mine])


def settled(
    contender: TrialRecord,
    as_written: TrialRecord,
    runs: Sequence[TrialRecord],
    settings: StudySettings,
) -> bool:
    """The deciding runs so far settle it already (`DECIDE_EARLY_T`), with two completed
    runs a side at least."""
    mine, base = completed(runs, contender.number), completed(runs, as_written.number)
    t = welch_t_of(mine, base, settings.objective)
    return len(mine) >= 2 and len(base) >= 2 and t is not None and abs(t) >= DECIDE_EARLY_T


def decide_close_call(
    close: CloseCall,
    contender: TrialRecord,
    as_written: TrialRecord,
    runs: Sequence[TrialRecord],
    objective: Objective,
) -> tuple[bool, TrialRecord | None, TrialRecord | None, str]:
    """(change?, the contender's pooled record, the script as written's pooled record, a
    note) from every completed run of the two in the final round and the deciding runs.
    A pooled record is None where that config has no completed run. A change needs
    MIN_GAIN on the pooled means, a Welch t of DECIDE_T over the runs, and no fewer
    examples/s than the script as written."""
    mine, base = completed(runs, contender.number), completed(runs, as_written.number)
    t = welch_t_of(mine, base, objective)
    if t is None:
        note = (
            f"final round: trial {contender.number} ({contender.description}) gained "
            f"{close.gain:+.1%}, within the noise, and the runs meant to decide it did not "
            "complete: keeping the script as written"
        )
        return False, pool_runs(mine) if mine else None, pool_runs(base) if base else None, note
    pooled, pooled_base = pool_runs(mine), pool_runs(base)
    gain = relative_gain(pooled, pooled_base, objective) or 0.0
    holds = (pooled.examples_per_s or 0.0) >= (pooled_base.examples_per_s or 0.0)
    change = gain >= MIN_GAIN and t >= DECIDE_T and holds
    verdict = "a real gain" if change else "not told apart from the noise"
    note = (
        f"final round: trial {contender.number} ({contender.description}) gained "
        f"{close.gain:+.1%} beside the script as written, {close.reason()}; over "
        f"{len(mine)} runs of it and "
        f"{len(base)} of the script as written, alternately: {gain:+.1%}, t = {t:.1f} (a "
        f"change needs {MIN_GAIN:.0%} and t >= {DECIDE_T:.0f}): {verdict}"
        + (", recommending it" if change else ", keeping the script as written")
    )
    return change, pooled, pooled_base, note


def one_pair_decides_nothing(
    pick: TrialRecord, searched: TrialRecord | None, run_noise: float, objective: Objective
) -> str | None:
    """Why one pair of runs is no evidence (`DECIDE_ABOVE_SPREAD`): the script as
    written's two runs (`run_noise`), or the pick's search trial and its re-measure, lie
    too far apart; None where they do not."""
    own = 0.0
    if searched is not None and searched.state is TrialState.COMPLETE:
        runs = [score(searched, objective)[0], score(pick, objective)[0]]
        own = spread(runs) if min(runs) > 0 else 0.0
    apart = max(run_noise, own)
    if apart <= DECIDE_ABOVE_SPREAD:
        return None
    return f"but two runs of one config differ by {apart:.0%} here, so one pair decides nothing"
