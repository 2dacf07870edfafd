"""One trial as Optuna's objective sees it.

The search loop (`search.Search.objective`) samples a config, and `measure_trial` has the
runner measure it. Around that: a search trial that sampled a knob value which keeps
failing is skipped before it runs (`skip_if_dead`); a measured config is not run again
(`reuse_twin`); a searched trial that is clearly worse is pruned from the runner's
per-repeat reports (`prune_guard`); and what was measured is stored as the trial's user
attributes, where every worker reads it back (`store`, read by `records.record_of`). A
failed run is stored as PRUNED and infeasible, flagged `records.FAILED_ATTR`: TPE learns
from pruned and infeasible trials but ignores FAIL ones, and would keep sampling a config
that crashes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tftune.core.trial_notes import ReusedMeasurement
from tftune.core.vocabulary import TrialState
from tftune.tuner.study.batch_limits import ran_out_hit
from tftune.tuner.study.contract import (
    Objective,
    RepeatCallback,
    Role,
    Runner,
    StudySettings,
    TrialRecord,
)
from tftune.tuner.study.gains import SEARCH_GAIN
from tftune.tuner.study.ladder import LADDER_ATTR, larger_batch
from tftune.tuner.study.records import (
    CRASH_ATTR,
    FAILED_ATTR,
    FINDINGS_ATTR,
    SEED_ATTR,
    STDERR_TAIL_ATTR,
    TRAINING_ATTR,
    TWIN_ATTR,
    as_written_of,
    dead_values,
)
from tftune.tuner.study.stopping import twin_of
from tftune.tuner.study.storage import (
    HEARTBEAT_ATTR,
    INTERRUPTED_ATTR,
    SKIPPED_ATTR,
    WORKER_ATTR,
    heartbeat,
)

if TYPE_CHECKING:
    import optuna

    from tftune.tuner.measurement import Measurement
    from tftune.tuner.searchspace.space import KnobValue, SearchSpace

# Prune a searched trial once a repeat's throughput is below this fraction of the best
# complete trial (throughput objective) ...
PRUNE_BELOW_BEST = 0.5
# ... or, for utilization objectives, below this fraction of the as-written rate: such a
# trial would be infeasible anyway (a winner may never lose examples/s).
PRUNE_BELOW_AS_WRITTEN = 0.8
# Successive halving (Optuna's `SuccessiveHalvingPruner`): a searched trial goes on after
# its first window only if that window is among the best 1/HALVING_FACTOR of the first
# windows measured so far, or within `gains.SEARCH_GAIN` of the best of them
# (`near_the_best`): a gap the search itself would not count as a gain is noise, not a
# reason to stop. The next rung would be at window HALVING_FACTOR: with the default 2
# windows, only the first is judged, and a trial measured to its end is never thrown away.
HALVING_FACTOR = 4
# A reference baseline (`REFERENCE_ROLES`) that the best trial so far leads by this factor
# or more after its first window is measured no further (`cut_short`): that window is its
# figure, without a noise figure. The final round leaves it out as decisively beaten
# (`round_plan.lead_needed`, a lower bar), or measures it in full where the leader's own
# re-measure no longer leads it so.
CUT_SHORT_LEAD = 1.5
REFERENCE_ROLES = frozenset({Role.AUTOTUNE, Role.HEURISTIC})
# The trial's constraint (<= 0: not slower than the script as written), which TPE reads:
# Optuna keeps it among the trial's system attributes (`FrozenTrial.constraints`), where a
# twin reads it back (`reuse_twin`). A study an earlier tftune wrote also holds its value
# as the user attribute LEGACY_CONSTRAINT_ATTR.
CONSTRAINT = "not_below_as_written"
LEGACY_CONSTRAINT_ATTR = "constraint"
# tftune's own bookkeeping, never a user attribute it writes (nor one a twin copies).
INTERNAL_ATTRS = frozenset({WORKER_ATTR, HEARTBEAT_ATTR, LEGACY_CONSTRAINT_ATTR})


def make_pruner() -> Any:
    """The study's pruner (see `HALVING_FACTOR`)."""
    import optuna

    return optuna.pruners.SuccessiveHalvingPruner(
        min_resource=1, reduction_factor=HALVING_FACTOR, min_early_stopping_rate=0
    )


def halving_of(
    trial: optuna.Trial, objective: Objective, noise: float = 0.0
) -> Callable[[int, float], bool] | None:
    """Report window `index`'s rate as step ``index + 1`` and ask the pruner; None where
    Optuna cannot prune (a two-objective study). `noise` is the run-to-run noise measured
    so far (`near_the_best`)."""
    if objective is Objective.BOTH:
        return None

    def halving(index: int, eps: float) -> bool:
        trial.report(eps, index + 1)
        return bool(trial.should_prune()) and not near_the_best(trial, index + 1, eps, noise)

    return halving


def near_the_best(trial: optuna.Trial, step: int, eps: float, noise: float = 0.0) -> bool:
    """Whether window `step`'s rate is within the noise of the best rate any other trial
    reported at that step: `SEARCH_GAIN`, or the measured `noise` where that is more. A
    window is compared with the same window of other runs only (like with like): an
    earlier window of a run holds what warm-up left over. The pruner once stopped a trial
    at 0.95x the best first window, the config an exhaustive grid then found best."""
    best = max(
        (
            t.intermediate_values.get(step, 0.0)
            for t in trial.study.get_trials(deepcopy=False)
            if t.number != trial.number
        ),
        default=0.0,
    )
    return best > 0 and eps * (1 + max(SEARCH_GAIN, noise)) >= best


def reuse_twin(trial: optuna.Trial, twin: optuna.trial.FrozenTrial) -> float | tuple[float, float]:
    """End `trial` with `twin`'s measurement (the same config, measured to its end: see
    `stopping.twin_of`) instead of running the script again."""
    for key, value in twin.user_attrs.items():
        if key != "role" and key not in INTERNAL_ATTRS:
            trial.set_user_attr(key, value)
    trial.set_user_attr(TWIN_ATTR, twin.number)
    trial.set_user_attr("wall_s", 0.0)
    trial.set_user_attr("notes", [ReusedMeasurement(twin.number).text()])
    value = twin.constraints.get(CONSTRAINT, twin.user_attrs.get(LEGACY_CONSTRAINT_ATTR, 1.0))
    _constrain(trial, float(value))
    values = twin.values or [0.0]
    return values[0] if len(values) == 1 else (values[0], values[1])


def skip_if_dead(
    trial: optuna.Trial,
    trials: Sequence[optuna.trial.FrozenTrial],
    params: Mapping[str, KnobValue],
    settings: StudySettings,
) -> None:
    """Skip a search trial that sampled a knob value that keeps failing, or a batch the
    script runs out of data with (`ran_out`): stored like a failed trial, using no budget
    (at most --trials skips, so a stuck sampler ends)."""
    import optuna

    skips = sum(1 for t in trials if t.user_attrs.get(SKIPPED_ATTR))
    if skips >= settings.n_trials:
        return
    dead = dead_values(trials)
    hit = next(((k, v) for k, v in params.items() if (k, v) in dead), None)
    if hit is not None:
        numbers, why = dead[hit]
        reason = (
            f"skipped: {hit[0]}={hit[1]} made trials "
            f"{', '.join(map(str, numbers))} fail ({why}) and no trial with it ran "
            "through"
        )
    else:  # a batch at least as large as one the script ran out of data with
        short = ran_out_hit(trials, params)
        if short is None:
            return
        reason = short[0].skip_reason(short[1])
    for key, value in (
        (SKIPPED_ATTR, True),
        (FAILED_ATTR, True),
        ("reason", reason),
        ("feasible", False),
    ):
        trial.set_user_attr(key, value)
    _constrain(trial, 1.0)
    raise optuna.TrialPruned(reason)


def put_knob_words(trial: optuna.Trial, params: Mapping[str, KnobValue]) -> None:
    """Each knob's sampled value as a user attribute in the words the reports use
    (`value_words`: ``AUTOTUNE``, ``as written``): optuna-dashboard shows the
    parameters as Optuna stores them (-1, None), and the parameters themselves stay as
    they are, so a study resumes with the same distributions."""
    from tftune.tuner.searchspace.space import value_words

    for name, value in params.items():
        trial.set_user_attr(name, value_words(value))


def _constrain(trial: optuna.Trial, value: float) -> None:
    """TPE samples around feasible trials only: <= 0 means "not slower than as written"."""
    trial.set_constraint(CONSTRAINT, value)


def prune_guard(
    objective: Objective,
    role: Role,
    floor: float | None,
    best_eps: float,
    prune_why: list[str],
    halving: Callable[[int, float], bool] | None = None,
    cut: list[str] | None = None,
    rung: bool = False,
) -> RepeatCallback:
    """The runner's per-repeat callback: False (prune) once a searched trial is
    clearly worse; the reason goes to `prune_why`. `halving` reports each window's rate
    to Optuna's successive-halving pruner (every role reports, so that the baselines'
    first windows are what a searched trial competes with) and says whether it would
    prune. A window that beats the best complete trial's rate (`best_eps`) is never
    halved, nor is a batch `rung` (a batch ladder's, or a screen seed that batches more
    than the script as written): its larger batch has fewer, longer steps per window, so
    its short first window says less than the others'. A reference baseline
    far behind the best after its first window is stopped too, as measured enough rather
    than pruned: the note goes to `cut` (`cut_short`)."""

    def on_repeat(index: int, eps: float) -> bool:
        behind = halving is not None and halving(index, eps)
        behind = behind and not rung and not (best_eps > 0 and eps >= best_eps)
        far_behind = eps > 0 and best_eps >= CUT_SHORT_LEAD * eps
        if role in REFERENCE_ROLES and cut is not None and index == 0 and far_behind:
            cut.append(
                f"measured over one window: the best trial so far ({best_eps:,.1f} ex/s) "
                f"leads it by {best_eps / eps:.1f}x, beyond any noise"
            )
            return False
        if role is not Role.SEARCH:
            return True  # baselines are otherwise measured in full
        if objective is Objective.THROUGHPUT and best_eps > 0:
            fraction, ref_eps, what = PRUNE_BELOW_BEST, best_eps, "the best so far"
        elif floor:
            fraction, ref_eps, what = PRUNE_BELOW_AS_WRITTEN, floor, "the script as written"
        else:
            fraction, ref_eps, what = 0.0, 0.0, ""
        if eps >= fraction * ref_eps:
            if behind:
                prune_why.append(
                    f"{eps:,.1f} ex/s after {index + 1} window(s), not among the best "
                    f"{1 / HALVING_FACTOR:.0%} of the trials' windows so far nor within "
                    f"{SEARCH_GAIN:.0%} of the best (successive halving)"
                )
            return not behind
        prune_why.append(
            f"{eps:,.1f} ex/s after {index + 1} window(s), below {fraction:.0%} of "
            f"{what} ({ref_eps:,.1f})"
        )
        return False

    return on_repeat


def cut_short(m: Measurement, cut: Sequence[str]) -> Measurement:
    """A reference baseline stopped after its first window (`prune_guard`'s `cut`) as
    the complete measurement it is: that window's figure, no noise figure (one window
    has no spread), and the note that says why."""
    if not cut or m.state is not TrialState.PRUNED or not m.examples_per_s:
        return m
    return replace(
        m, state=TrialState.COMPLETE, reason=None, spread=None, notes=(*m.notes, cut[-1])
    )


def store(
    trial: optuna.Trial,
    m: Measurement,
    ref: float | None,
    prune_why: list[str],
    objective: Objective,
) -> float | tuple[float, float]:
    """Store what the trial measured, and end it: its objective value(s), or
    TrialPruned for a pruned or failed run."""
    import optuna

    eps = m.examples_per_s
    feasible = eps is not None and ref is not None and eps >= ref
    attrs: dict[str, Any] = {
        "examples_per_s": eps,
        "utilization": m.utilization,
        "utilization_kind": m.utilization_kind,
        "spread": m.spread,
        "input_wait_share": m.input_wait_share,
        "repeats": list(m.repeats),
        "reason": prune_why[-1] if m.state is TrialState.PRUNED and prune_why else m.reason,
        "wall_s": m.wall_s,
        "feasible": feasible,
        "notes": list(m.notes),
        FINDINGS_ATTR: [f.to_json() for f in m.findings],
        TRAINING_ATTR: m.training.to_json() if m.training is not None else None,
    }
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    _constrain(trial, float(ref - eps) if (eps is not None and ref is not None) else 1.0)
    if m.state is TrialState.PRUNED:
        raise optuna.TrialPruned(m.reason or "clearly slower than the best so far")
    if m.state is TrialState.FAILED or eps is None:
        # Stored as PRUNED and infeasible (its constraint is > 0), flagged FAILED_ATTR:
        # TPE learns from pruned and infeasible trials but ignores FAIL ones, and would
        # keep sampling a config that crashes (e.g. a 16-bit policy the loss code
        # cannot take).
        trial.set_user_attr(FAILED_ATTR, True)
        tail, crash = m.crash()
        trial.set_user_attr(STDERR_TAIL_ATTR, tail)
        trial.set_user_attr(CRASH_ATTR, crash.to_json() if crash is not None else None)
        if not trial.user_attrs.get("reason"):
            trial.set_user_attr("reason", "no examples were measured")
        raise optuna.TrialPruned(m.reason or "no examples were measured")
    util = m.utilization if m.utilization is not None else 0.0
    if objective is Objective.THROUGHPUT:
        return eps
    if objective is Objective.GPU_UTIL:
        return util
    return eps, util


def measure_trial(
    trial: optuna.Trial,
    role: Role,
    params: dict[str, KnobValue],
    recs: Sequence[TrialRecord],
    space: SearchSpace,
    runner: Runner,
    settings: StudySettings,
    study: optuna.Study,
) -> float | tuple[float, float]:
    """Measure `params` (sampled by `trial`, a trial of role `role`) with `runner`, given
    the finished trials `recs`, and end the trial (`store`). A config measured to its end
    before is not run again (`reuse_twin`)."""
    # TPE came back to a measured config, or a baseline is the script as written (a
    # script already AUTOTUNE everywhere): no need to run it again.
    twin = twin_of(recs, params) if role is not Role.AS_WRITTEN else None
    if twin is not None:
        return reuse_twin(trial, study.trials[twin.number])
    aw = as_written_of(recs)
    floor = aw.examples_per_s if aw is not None else None
    best_eps = max(
        (r.examples_per_s or 0.0 for r in recs if r.state is TrialState.COMPLETE), default=0.0
    )
    prune_why: list[str] = []
    cut: list[str] = []
    # A batch ladder's rung, or a screen seed batching more than as written: judged whole.
    rung = trial.user_attrs.get(LADDER_ATTR) is not None or (
        trial.user_attrs.get(SEED_ATTR) is not None
        and aw is not None
        and larger_batch(space, params, aw.params)
    )
    noise = (aw.spread or 0.0) if aw else 0.0
    on_repeat = prune_guard(
        settings.objective,
        role,
        floor,
        best_eps,
        prune_why,
        halving_of(trial, settings.objective, noise),
        cut,
        rung=rung,
    )
    config = space.config(params, apply_fixed=role is not Role.AS_WRITTEN)
    try:
        with heartbeat(study._storage, trial._trial_id):
            m = cut_short(runner.measure(config, on_repeat=on_repeat), cut)
    except KeyboardInterrupt:
        # Optuna records the trial as FAIL and re-raises; these say it was stopped, not
        # broken, so that the next run measures it again.
        trial.set_user_attr("reason", "interrupted (Ctrl-C)")
        trial.set_user_attr(INTERRUPTED_ATTR, True)
        raise
    ref = floor if floor is not None else (m.examples_per_s if role is Role.AS_WRITTEN else None)
    return store(trial, m, ref, prune_why, settings.objective)
