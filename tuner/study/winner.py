"""Choosing the winner: the search's best, then the final round.

The winner is the best *feasible* trial: one with at least the as-written examples/s
(TPE's constraint, and `choose_winner`'s guard). The search's best figures are best-of-N
and biased upwards, so a final round (`run_final_round`) re-measures the search's best,
then, one after the other, what it may not lead beyond any noise: the next best
distinct trials and the as-written and AUTOTUNE baselines (`round_plan`). The script as
written's run there and its search trial show the run-to-run noise
(`merge_as_written`). The winner is chosen from that round alone (`choose_final`). If
nothing beats the script as written in it by more than the noise
(`gains.required_gain`), the winner is the script as written: tftune never ends below
it, and never recommends a change that does not pay for itself. A close call (at least
`MIN_GAIN`, but within the round's noise) is settled by more runs of it and the script
as written, alternately (`close_call.decide_close_call`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tftune.core.learning import LearningCheck, LearningRateScale
from tftune.core.vocabulary import TrialState
from tftune.tuner.study.close_call import (
    CloseCall,
    decide_close_call,
    one_pair_decides_nothing,
    settled,
)
from tftune.tuner.study.contract import Objective, Role, Runner, StudySettings, TrialRecord
from tftune.tuner.study.gains import MIN_GAIN, pool_runs, relative_gain, required_gain, score
from tftune.tuner.study.round_plan import final_candidates, leader, still_open

if TYPE_CHECKING:
    from tftune.tuner.searchspace.space import SearchSpace


def pareto_front(records: Sequence[TrialRecord]) -> tuple[TrialRecord, ...]:
    """Records not dominated in (examples/s, utilization)."""
    pts = [r for r in records if r.examples_per_s is not None]
    front = []
    for r in pts:
        a = (r.examples_per_s or 0.0, r.utilization or 0.0)
        dominated = False
        for o in pts:
            b = (o.examples_per_s or 0.0, o.utilization or 0.0)
            if b[0] >= a[0] and b[1] >= a[1] and b != a:
                dominated = True
                break
        if not dominated:
            front.append(r)
    return tuple(sorted(front, key=lambda r: -(r.examples_per_s or 0.0)))


def choose_winner(
    records: Sequence[TrialRecord], as_written: TrialRecord, objective: Objective
) -> TrialRecord:
    """The best complete trial that does not lose examples/s against the script as
    written; the as-written trial itself when none does. For ``both``, the front's
    member with the most examples/s (every front member is non-dominated)."""
    floor = as_written.examples_per_s or 0.0
    feasible = [
        r
        for r in records
        if r.state is TrialState.COMPLETE
        and r.examples_per_s is not None
        and r.examples_per_s >= floor
        and r.role is not Role.CONFIRM
    ]
    if not feasible:
        return as_written
    if objective is Objective.BOTH:
        return pareto_front(feasible)[0]
    return max(feasible, key=lambda r: score(r, objective))


def final_round(
    candidates: Sequence[TrialRecord],
    runner: Runner,
    space: SearchSpace,
    on_note: Callable[[str], None] | None = None,
) -> tuple[TrialRecord, ...]:
    """Each candidate measured once more, one after the other, as role CONFIRM."""
    out: list[TrialRecord] = []
    for c in candidates:
        m = runner.measure(space.config(c.params, apply_fixed=c.role is not Role.AS_WRITTEN))
        if on_note is not None:
            figure = (
                f"{m.examples_per_s:,.1f} ex/s"
                if m.state is TrialState.COMPLETE and m.examples_per_s is not None
                else f"{m.state.value}: {m.reason or ''}".strip()
            )
            on_note(f"  trial {c.number} ({c.role.value}) again: {figure}  [{c.description}]")
        tail, crash = m.crash()
        out.append(
            TrialRecord(
                number=c.number,
                role=Role.CONFIRM,
                state=m.state,
                params=c.params,
                description=c.description,
                examples_per_s=m.examples_per_s,
                utilization=m.utilization,
                spread=m.spread,
                input_wait_share=m.input_wait_share,
                repeats=m.repeats,
                reason=m.reason,
                wall_s=m.wall_s,
                notes=m.notes,
                findings=m.findings,
                stderr_tail=tail,
                crash=crash,
                loss=m.loss,
                loss_note=m.loss_note,
                optimizers=m.optimizers,
            )
        )
    return tuple(out)


def merge_as_written(
    final: Sequence[TrialRecord], as_written: TrialRecord
) -> tuple[tuple[TrialRecord, ...], float]:
    """(the final round with the script as written's runs in it merged into one record
    with their mean; the run-to-run noise: how far apart its runs lie, those of the round
    and its search trial, relative to their mean; 0 when fewer than two completed).
    The round's own runs stay the floor: they ran beside the candidates."""
    runs = [f for f in final if f.number == as_written.number]
    done = [r for r in runs if r.state is TrialState.COMPLETE and r.examples_per_s]
    rest = tuple(f for f in final if f.number != as_written.number)
    if not runs:
        return rest, 0.0
    merged = pool_runs(done) if done else runs[0]
    searched = [as_written] if as_written.state is TrialState.COMPLETE else []
    rates = [float(r.examples_per_s or 0.0) for r in (*searched, *done) if r.examples_per_s]
    if len(rates) < 2 or not done:
        return (merged, *rest), 0.0
    mean = sum(rates) / len(rates)
    return (merged, *rest), (max(rates) - min(rates)) / mean


# Where no config clears the noise in the round, AUTOTUNE everywhere (tf.data's own
# advice) is still recommended when it was not behind the script as written in either of
# its runs and gains `MIN_GAIN` on the mean of both: the two are baselines, measured by
# design in the search and again in the round, so their search figures are fair samples
# (not the top of many), and two runs each tell more than one. Without this rule a
# GIL-bound script whose AUTOTUNE run led by a few percent in each round, inside the noise,
# kept the script as written and left the user below tf.data's own advice.
AUTOTUNE_KEPT = (
    "AUTOTUNE everywhere, tf.data's own advice, was ahead of it in both of its runs and "
    "by {gain:+.1%} on their mean: recommending it"
)


def _autotune_ahead(
    records: Sequence[TrialRecord],
    as_written: TrialRecord,
    base: TrialRecord,
    feasible: Sequence[TrialRecord],
) -> tuple[TrialRecord, float] | None:
    """(AUTOTUNE everywhere's final-round record, its gain in examples/s on the means of
    both runs: `pool_runs`) where it holds the floor in the round (`feasible`, against
    `base`), was not behind the script as written in the search, and gains `MIN_GAIN`
    on the means."""
    auto = next((r for r in records if r.role is Role.AUTOTUNE), None)
    again = next((f for f in feasible if auto is not None and f.number == auto.number), None)
    if auto is None or again is None or auto.state is not TrialState.COMPLETE:
        return None
    if (auto.examples_per_s or 0.0) < (as_written.examples_per_s or 0.0):
        return None
    both = (pool_runs([auto, again]), pool_runs([as_written, base]))
    gain = relative_gain(*both, Objective.THROUGHPUT)
    return (again, gain) if gain is not None and gain >= MIN_GAIN else None


def choose_final(
    records: Sequence[TrialRecord],
    as_written: TrialRecord,
    trial_best: TrialRecord,
    final: Sequence[TrialRecord],
    objective: Objective,
    run_noise: float = 0.0,
) -> tuple[TrialRecord, TrialRecord | None, str | None, CloseCall | None]:
    """(winner's trial, winner's final-round record, a note, a close call): the best
    final-round figure that does not lose examples/s against the script as written *in
    the same round*; else the script as written. `trial_best` is the search's own winner
    (`choose_winner`), named in the notes. A close call (settled by `decide_close_call`)
    is the best's record when it gained `MIN_GAIN` but less than the noise demands, or
    where one pair of runs is no evidence (`close_call.one_pair_decides_nothing`)."""
    by_number = {r.number: r for r in records}
    again = next((f for f in final if f.number == as_written.number), None)
    base = again if again is not None and again.state is TrialState.COMPLETE else as_written
    floor = base.examples_per_s or 0.0
    scored = [
        replace(f, feasible=f.examples_per_s is not None and f.examples_per_s >= floor)
        for f in final
        if f.state is TrialState.COMPLETE
    ]
    # A config with the script as written's params is the script as written, whatever its
    # trial's role: it is never a change to recommend.
    feasible = [
        f
        for f in scored
        if f.feasible and f.number != as_written.number and not f.same_config(as_written)
    ]
    if not feasible:
        # The search's best may repeat a baseline's params (TPE samples AUTOTUNE again):
        # the round then re-measured that config under the baseline's number.
        again = next((f for f in scored if f.number == trial_best.number), None) or next(
            (f for f in scored if f.same_config(trial_best)), None
        )
        if again is None:
            shown = "it was not re-measured"
        else:
            alias = "" if again.number == trial_best.number else f" as trial {again.number}"
            shown = f"{again.examples_per_s or 0:.1f}{alias} vs {floor:.1f} examples/s"
        return (
            as_written,
            None,
            f"trial {trial_best.number} ({trial_best.description}) did not hold up when "
            f"re-measured beside the script as written ({shown}): keeping the script as "
            "written",
            None,
        )
    if objective is Objective.BOTH:
        pick = pareto_front(feasible)[0]
    else:
        pick = max(feasible, key=lambda f: score(f, objective))
    gain, needed = relative_gain(pick, base, objective), required_gain(pick, base, run_noise)
    if gain is not None and gain < needed:
        said = (
            f"no config beat the script as written by more than the noise in the final "
            f"round (best: trial {pick.number}, {pick.description}, {gain:+.1%}; a change "
            f"must gain {needed:.0%})"
        )
        auto = _autotune_ahead(records, as_written, base, feasible) if gain < MIN_GAIN else None
        if auto is not None:
            kept = AUTOTUNE_KEPT.format(gain=auto[1])
            return by_number[auto[0].number], auto[0], f"{said}; {kept}", None
        return (
            as_written,
            None,
            f"{said}: keeping the script as written",
            CloseCall(pick, gain, needed) if gain >= MIN_GAIN else None,
        )
    noisy = one_pair_decides_nothing(pick, by_number.get(pick.number), run_noise, objective)
    if gain is not None and gain >= MIN_GAIN and noisy is not None:
        said = f"final round: trial {pick.number} gained {gain:+.1%}, {noisy}"
        return (
            as_written,
            None,
            f"{said}: keeping the script as written",
            CloseCall(pick, gain, needed, noisy),
        )
    return by_number[pick.number], pick, _beat_the_search(pick, trial_best), None


def _beat_the_search(pick: TrialRecord, trial_best: TrialRecord) -> str | None:
    if pick.number == trial_best.number or pick.same_config(trial_best):
        return None
    return (
        f"final round: trial {pick.number} ({pick.description}) beat the search's best, "
        f"trial {trial_best.number}, when both were re-measured side by side"
    )


@dataclass(frozen=True, slots=True)
class FinalVerdict:
    """What the final round decided."""

    best: TrialRecord  # the winner's trial (the script as written when nothing held up)
    confirm: TrialRecord | None  # the winner's figure from the final round
    final: tuple[TrialRecord, ...]  # the round as reported (repeat runs pooled)
    runs: tuple[TrialRecord, ...]  # every run of the round, each on its own
    notes: tuple[str, ...] = ()  # what the round decided, and what it left out
    # The winner's learning check (`study.learning_check`), and the learning rate scale it
    # recommends with the winner's batch.
    learning: LearningCheck | None = None
    scale: LearningRateScale | None = None


def run_final_round(
    records: Sequence[TrialRecord],
    as_written: TrialRecord,
    trial_best: TrialRecord,
    runner: Runner,
    space: SearchSpace,
    settings: StudySettings,
    on_note: Callable[[str], None] | None = None,
) -> FinalVerdict:
    """Re-measure the leaders and the baselines side by side and choose the winner from
    that round alone; a close call gets `settings.decide_pairs` more alternating runs.
    The best of N noisy trials is biased upwards, and the baselines were measured minutes
    apart from it: hence the round."""
    objective = settings.objective
    leaders = final_candidates(records, as_written, objective, settings.final_candidates)
    top = leader(leaders, as_written, objective)
    if on_note is not None:
        on_note(
            "final round: re-measuring the search's best first, then what it may not lead "
            "beyond any noise ..."
        )
    runs = final_round([top] if top is not None else [], runner, space, on_note)
    rest, left_out = (
        still_open(leaders, top, runs[0] if runs else None, objective)
        if top is not None
        else (leaders, [])
    )
    runs += final_round(rest, runner, space, on_note)
    final, noise = merge_as_written(runs, as_written)
    best, confirm, note, close = choose_final(
        records, as_written, trial_best, final, settings.objective, noise
    )
    verdict = FinalVerdict(best, confirm, final, runs, (note,) if note else ())
    if close is not None and settings.decide_pairs > 0:
        verdict = _settle_close_call(
            close, verdict, records, as_written, runner, space, settings, on_note
        )
    return replace(verdict, notes=(*left_out, *verdict.notes))


def _settle_close_call(
    close: CloseCall,
    verdict: FinalVerdict,
    records: Sequence[TrialRecord],
    as_written: TrialRecord,
    runner: Runner,
    space: SearchSpace,
    settings: StudySettings,
    on_note: Callable[[str], None] | None,
) -> FinalVerdict:
    """Settled by more runs rather than by a threshold: the note says how."""
    if on_note is not None:
        on_note(
            f"final round: trial {close.record.number} gained {close.gain:+.1%}, "
            f"{close.reason()}; measuring "
            f"it and the script as written up to {settings.decide_pairs} more times, "
            "alternately ..."
        )
    contender = next(r for r in records if r.number == close.record.number)
    runs = verdict.runs
    for pair in range(1, settings.decide_pairs + 1):
        runs += final_round([contender, as_written], runner, space, on_note)
        if pair < settings.decide_pairs and settled(contender, as_written, runs, settings):
            break
    change, pooled, pooled_aw, note = decide_close_call(
        close, contender, as_written, runs, settings.objective
    )
    pooled_by_number = {r.number: r for r in (pooled, pooled_aw) if r is not None}
    final = tuple(pooled_by_number.get(f.number, f) for f in verdict.final)
    best, confirm = verdict.best, verdict.confirm
    if change and pooled is not None:
        best, confirm = contender, replace(pooled, feasible=True)
    return FinalVerdict(best, confirm, final, runs, (note,))
