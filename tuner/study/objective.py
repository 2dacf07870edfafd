"""One trial as Optuna's objective sees it.

The search loop (`search.Search.objective`) samples a config and has the runner measure
it; this module holds the three steps around that: a search trial that sampled a knob
value which keeps failing is skipped before it runs (`skip_if_dead`); a searched trial
that is clearly worse is pruned from the runner's per-repeat reports (`prune_guard`);
and what was measured is stored as the trial's user attributes, where every worker reads
it back (`store`, read by `records.record_of`). A failed run is stored as PRUNED and
infeasible, flagged `records.FAILED_ATTR`: TPE learns from pruned and infeasible trials
but ignores FAIL ones, and would keep sampling a config that crashes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tftune.core.vocabulary import TrialState
from tftune.tuner.study.contract import Objective, RepeatCallback, Role, StudySettings
from tftune.tuner.study.records import CRASH_ATTR, FAILED_ATTR, STDERR_TAIL_ATTR, dead_values
from tftune.tuner.study.storage import SKIPPED_ATTR

if TYPE_CHECKING:
    import optuna

    from tftune.tuner.measurement import Measurement
    from tftune.tuner.space import KnobValue

# Prune a searched trial once a repeat's throughput is below this fraction of the best
# complete trial (throughput objective) ...
PRUNE_BELOW_BEST = 0.5
# ... or, for utilization objectives, below this fraction of the as-written rate: such a
# trial would be infeasible anyway (a winner may never lose examples/s).
PRUNE_BELOW_AS_WRITTEN = 0.8


def skip_if_dead(
    trial: optuna.Trial,
    trials: Sequence[optuna.trial.FrozenTrial],
    params: Mapping[str, KnobValue],
    settings: StudySettings,
) -> None:
    """Skip a search trial that sampled a knob value that keeps failing: stored like a
    failed trial, using no budget (at most --trials skips, so a stuck sampler ends)."""
    import optuna

    dead = dead_values(trials)
    hit = next(((k, v) for k, v in params.items() if (k, v) in dead), None)
    skips = sum(1 for t in trials if t.user_attrs.get(SKIPPED_ATTR))
    if hit is None or skips >= settings.n_trials:
        return
    numbers, why = dead[hit]
    reason = (
        f"skipped: {hit[0]}={hit[1]} made trials "
        f"{', '.join(map(str, numbers))} fail ({why}) and no trial with it ran "
        "through"
    )
    for key, value in (
        (SKIPPED_ATTR, True),
        (FAILED_ATTR, True),
        ("reason", reason),
        ("feasible", False),
        ("constraint", 1.0),
    ):
        trial.set_user_attr(key, value)
    trial.set_constraint("not_below_as_written", 1.0)
    raise optuna.TrialPruned(reason)


def prune_guard(
    objective: Objective, role: Role, floor: float | None, best_eps: float, prune_why: list[str]
) -> RepeatCallback:
    """The runner's per-repeat callback: False (prune) once a searched trial is
    clearly worse; the reason goes to `prune_why`."""

    def on_repeat(index: int, eps: float) -> bool:
        if role is not Role.SEARCH:
            return True  # baselines are always measured in full
        if objective is Objective.THROUGHPUT and best_eps > 0:
            fraction, ref_eps, what = PRUNE_BELOW_BEST, best_eps, "the best so far"
        elif floor:
            fraction, ref_eps, what = PRUNE_BELOW_AS_WRITTEN, floor, "the script as written"
        else:
            return True
        if eps >= fraction * ref_eps:
            return True
        prune_why.append(
            f"{eps:,.1f} ex/s after {index + 1} window(s), below {fraction:.0%} of "
            f"{what} ({ref_eps:,.1f})"
        )
        return False

    return on_repeat


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
        "constraint": (ref - eps) if (eps is not None and ref is not None) else 1.0,
    }
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    # TPE samples around feasible trials only: <= 0 means "not slower than as written".
    trial.set_constraint("not_below_as_written", float(attrs["constraint"]))
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
