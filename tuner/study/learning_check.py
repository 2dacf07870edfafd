"""The learning check: a faster config must not train worse.

A winner that changes the batch size or the precision is judged by what the user buys:
the training loss reached in the same training time (`core.learning`). After the final
round (`winner.run_final_round`) chose it:

1. The winner and the script as written are run alternately until each has
   `LEARNING_RUNS` runs with a loss curve (the round's own runs count); where the
   round's runs read no loss, it is not checked, and says why.
2. Each run's loss at the equal training time (the shortest run's; the mean over its
   last `LAST_PART`) is compared (`compare_losses`): higher only beyond the noise.
3. Where the winner learns worse and changed the batch size, it is tried with the
   optimizer's learning rate scaled by the batch ratio (linear) and by its square root
   (`SCALE_RULES`), each run `LEARNING_RUNS` times; the one with the lowest loss that
   learns no worse is recommended, with its scale.
4. Where none does, the best final-round config that changes neither batch nor precision
   is chosen as the round chose before (`winner.choose_final`), and the throughput-only
   winner is named beside it. ``--objective throughput`` skips the check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tftune.core.learning import (
    LearningCheck,
    LearningRateScale,
    LossCurve,
    LossRuns,
    LossVerdict,
    OptimizerSeen,
    ScaleRule,
    compare_losses,
)
from tftune.core.vocabulary import TrialState
from tftune.tuner.measurement import Measurement
from tftune.tuner.searchspace.config import Config
from tftune.tuner.study.contract import Runner, StudyOutcome, StudySettings, TrialRecord
from tftune.tuner.study.gains import score
from tftune.tuner.study.winner import FinalVerdict, choose_final, final_round, merge_as_written

if TYPE_CHECKING:
    from tftune.tuner.searchspace.space import SearchSpace

LEARNING_RUNS = 2  # runs a side with a loss curve
SCALE_RULES = (ScaleRule.LINEAR, ScaleRule.SQRT)
PRECISION_OFF = frozenset({None, "off", "float32"})


def learning_changes(space: SearchSpace, params: dict[str, object]) -> tuple[str, ...]:
    """What in `params` can change what the model learns: the batch size, the precision,
    the order of the elements (``deterministic`` off, a knob only ``--space`` adds)."""
    out = []
    for k in space.knobs:
        value = params.get(k.name, k.as_written)
        if value == k.as_written:
            continue
        if k.field == "batch_size":
            out.append(f"batch {k.as_written} -> {value}")
        elif k.field == "mixed_precision" and value not in PRECISION_OFF:
            out.append(f"{value} precision")
        elif k.field == "deterministic" and value is False:
            out.append("elements in a nondeterministic order")
    return tuple(out)


def _batch_change(space: SearchSpace, params: dict[str, object]) -> tuple[int, int] | None:
    for k in space.knobs:
        value = params.get(k.name, k.as_written)
        written = k.as_written
        numbers = isinstance(value, int) and isinstance(written, int)
        if k.field == "batch_size" and numbers and value != written:
            return written, value  # type: ignore[return-value]
    return None


def _curves(runs: Sequence[TrialRecord], number: int) -> list[LossCurve]:
    return [
        r.loss
        for r in runs
        if r.number == number and r.state is TrialState.COMPLETE and r.loss is not None
    ]


def _why_unread(runs: Sequence[TrialRecord]) -> str:
    notes = [r.loss_note for r in runs if r.loss_note]
    return notes[0] if notes else "no run with a loss curve completed"


def check_learning(
    verdict: FinalVerdict,
    records: Sequence[TrialRecord],
    as_written: TrialRecord,
    runner: Runner,
    space: SearchSpace,
    settings: StudySettings,
    on_note: Callable[[str], None] | None = None,
) -> FinalVerdict:
    """The final round's verdict, checked for learning (module doc)."""
    best = verdict.best
    if not settings.learning_check or best.same_config(as_written):
        return verdict
    changes = learning_changes(space, dict(best.params))
    if not changes:
        return verdict
    say = on_note or (lambda _text: None)
    say(f"learning check: {', '.join(changes)} can change what the model learns ...")
    runs = verdict.runs
    for _ in range(LEARNING_RUNS):
        have = min(len(_curves(runs, n)) for n in (best.number, as_written.number))
        if have == 0 or have >= LEARNING_RUNS:  # none read: more runs would read none
            break
        runs += final_round([best, as_written], runner, space, on_note)
    verdict = replace(verdict, runs=runs)
    mine, base = _curves(runs, best.number), _curves(runs, as_written.number)
    if not mine or not base:
        check = LearningCheck(LossVerdict.NOT_CHECKED, changes, reason=_why_unread(runs))
        return _told(verdict, check, None)
    optimizers = next((r.optimizers for r in runs if r.optimizers), ())
    check = _compare(changes, base, mine, optimizers)
    change = _batch_change(space, dict(best.params))
    if check.verdict is not LossVerdict.HIGHER:
        return _told(verdict, check, None)
    tried = _scaled_runs(best, space, runner, change, on_note) if change and optimizers else []
    check = _compare(changes, base, mine, optimizers, tried)  # all at one equal time
    ok = [r for r in check.tried if _no_worse(check, r)]
    if check.verdict is not LossVerdict.HIGHER:  # the shorter equal time told otherwise
        return _told(verdict, check, None)
    if ok:
        return _told(verdict, check, min(ok, key=lambda r: r.mean).scale)
    return _fall_back(verdict, check, records, as_written, runner, space, settings, say)


def _compare(
    changes: tuple[str, ...],
    base: Sequence[LossCurve],
    mine: Sequence[LossCurve],
    optimizers: tuple[OptimizerSeen, ...],
    tried: Sequence[tuple[LearningRateScale, list[LossCurve]]] = (),
) -> LearningCheck:
    """Every curve's loss at the one equal training time: the shortest curve's span."""
    at = min(c.span_s for c in (*mine, *base, *(c for _, cs in tried for c in cs)))
    aw, winner = LossRuns("as written", _at(base, at)), LossRuns("the winner", _at(mine, at))
    if not aw.losses or not winner.losses:
        why = "no loss sample fell in the last part of the equal training time"
        return LearningCheck(LossVerdict.NOT_CHECKED, changes, reason=why)
    verdict, noise = compare_losses(aw.losses, winner.losses)
    rows = tuple(
        LossRuns(f"the winner, {s.describe()}", _at(cs, at), s) for s, cs in tried if _at(cs, at)
    )
    return LearningCheck(verdict, changes, at, aw, winner, rows, noise, optimizers=optimizers)


def _no_worse(check: LearningCheck, row: LossRuns) -> bool:
    assert check.as_written is not None
    return compare_losses(check.as_written.losses, row.losses)[0] is not LossVerdict.HIGHER


def _at(curves: Sequence[LossCurve], at: float) -> tuple[float, ...]:
    values = (c.loss_at(at) for c in curves)
    return tuple(v for v in values if v is not None)


def _scaled_runs(
    best: TrialRecord,
    space: SearchSpace,
    runner: Runner,
    change: tuple[int, int],
    on_note: Callable[[str], None] | None,
) -> list[tuple[LearningRateScale, list[LossCurve]]]:
    """The winner run `LEARNING_RUNS` times with each scaled learning rate."""
    out = []
    config = space.config(best.params, apply_fixed=True)
    for rule in SCALE_RULES:
        scale = LearningRateScale.for_batch(rule, *change)
        if on_note is not None:
            on_note(f"learning check: the winner with its {scale.describe()} ...")
        scaled = replace(
            config,
            learning_rate_scale=scale.factor,
            learning_rate_warmup=scale.warmup_steps or None,
        )
        curves = [c for c in (_loss(runner, scaled) for _ in range(LEARNING_RUNS)) if c]
        if curves:
            out.append((scale, curves))
    return out


def _loss(runner: Runner, config: Config) -> LossCurve | None:
    m: Measurement = runner.measure(config)
    return m.loss if m.state is TrialState.COMPLETE else None


def _fall_back(
    verdict: FinalVerdict,
    check: LearningCheck,
    records: Sequence[TrialRecord],
    as_written: TrialRecord,
    runner: Runner,
    space: SearchSpace,
    settings: StudySettings,
    say: Callable[[str], None],
) -> FinalVerdict:
    """The best config that changes neither batch nor precision: the round's, and the
    search's best of them re-measured beside the script as written where the round did
    not measure it; chosen as the round chooses (`choose_final`), the script as written
    where none holds up."""
    keep = [f for f in verdict.final if not learning_changes(space, dict(f.params))]
    ranked = sorted(
        (
            r
            for r in records
            if r.state is TrialState.COMPLETE
            and not r.same_config(as_written)
            and not learning_changes(space, dict(r.params))
        ),
        key=lambda r: score(r, settings.objective),
        reverse=True,
    )
    top = ranked[0] if ranked else as_written
    runs = verdict.runs
    if ranked and not any(f.number == top.number for f in keep):
        runs += final_round([top, as_written], runner, space, say)
        keep.append(runs[-2])
    final, noise = merge_as_written(runs, as_written)
    pool = [
        f for f in final if any(f.number == k.number for k in keep) or f.number == as_written.number
    ]
    best, confirm, note, _close = choose_final(
        records, as_written, top, pool, settings.objective, noise
    )
    check = replace(check, throughput_only=verdict.best.number)
    notes = (*verdict.notes, *((note,) if note else ()))
    fallback = replace(verdict, best=best, confirm=confirm, runs=runs, notes=notes)
    return _told(fallback, check, None)


def _told(
    verdict: FinalVerdict,
    check: LearningCheck,
    scale: LearningRateScale | None,
) -> FinalVerdict:
    """The verdict with the check, its scale and a note saying what was decided (the
    study tells the round's notes once it is over)."""
    note = describe(check, scale)
    return replace(verdict, learning=check, scale=scale, notes=(*verdict.notes, note))


def describe(check: LearningCheck, scale: LearningRateScale | None) -> str:
    """The learning check in one sentence."""
    head = f"learning check ({', '.join(check.changes)})"
    if check.verdict is LossVerdict.NOT_CHECKED:
        return f"{head}: not checked: {check.reason}"
    aw, mine = check.as_written, check.winner
    figures = ""
    if aw is not None and mine is not None and check.equal_time_s is not None:
        figures = (
            f" after {check.equal_time_s:.1f} s of training: loss {mine.mean:.4g} against "
            f"{aw.mean:.4g} as written ({len(mine.losses)} and {len(aw.losses)} runs)"
        )
    said = f"{head}:{figures}: {check.verdict.value}"
    if check.verdict is not LossVerdict.HIGHER:
        return said
    if scale is not None:
        return f"{said}; with its {scale.describe()} it learns no worse: recommending that"
    return (
        f"{said}, beyond the noise ({check.noise or 0:.0%}); no scaled learning rate "
        "helped: recommending the best config that changes neither batch nor precision"
    )


def recommended_scale(outcome: StudyOutcome) -> LearningRateScale | None:
    """The scaled learning rate the winner is recommended with, where it has one."""
    check, factor = outcome.learning, outcome.best_config.learning_rate_scale
    if check is None or factor is None:
        return None
    return next((r.scale for r in check.tried if r.scale and r.scale.factor == factor), None)
