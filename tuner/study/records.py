"""A stored trial as the study reads it back.

Each worker stores what a trial measured as the Optuna trial's user attributes; this
module turns a `FrozenTrial` into a frozen `TrialRecord` (`record_of`), picks the
baselines out of a study's records, and tells which knob values keep making the script
fail (`dead_values`), so that the search stops measuring them.

A failed trial keeps the end of its stderr (`crashes.bounded_tail`) and what it says
(`core.failures.CrashSummary.to_json`, read back strictly). When the script crashes on its own
(`crashes.find_instability`: the script as written crashed too, or one crash showed in
configs that share no knob value), a native crash is no knob value's fault, and
`dead_values` does not count it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from tftune.core.failures import CrashSummary
from tftune.core.training import TrainingTime
from tftune.core.trial_notes import OutputPrecisionFinding
from tftune.core.vocabulary import OPTUNA_STATES, TrialState
from tftune.tuner.study.contract import Role, TrialRecord
from tftune.tuner.study.storage import SKIPPED_ATTR
from tftune.tuner.trial.crashes import Run, find_instability

if TYPE_CHECKING:
    import optuna

    from tftune.tuner.searchspace.space import KnobValue, SearchSpace

T = TypeVar("T")

# A trial whose script failed (crash, OOM, stall, NaN) is stored as PRUNED with this set:
# see `search.Search.objective`.
FAILED_ATTR = "failed"
# A knob value that made DEAD_AFTER trials fail while no trial with it ran through (say,
# a 16-bit policy the script's loss code cannot take) is not measured again: a search
# trial that samples it is skipped at once, stored like a failed trial with
# `storage.SKIPPED_ATTR`, and does not count against --trials (at most --trials skips
# per run, so that a sampler stuck on it cannot spin).
DEAD_AFTER = 2
STDERR_TAIL_ATTR = "stderr_tail"
# A trial that reused the measurement of this earlier one (the same config).
TWIN_ATTR = "twin_of"
# A trial's output-layer findings (`core.trial_notes.OutputPrecisionFinding`), as JSON.
FINDINGS_ATTR = "findings"
# A search trial enqueued from the pipeline screen carries its rank here.
SEED_ATTR = "screen_seed"
CRASH_ATTR = "crash"
TRAINING_ATTR = "training"
# Parameter importance (PED-ANOVA, `importances`) compares the knob values of the best
# complete trials with those of all of them. Optuna's advice is at least 5 trials in that
# best group (IMPORTANCE_TOP); with fewer than twice that many complete trials, the best
# group is half the trials or more, there is hardly a rest to tell it from, and what
# comes out is noise. So no importance is estimated below MIN_IMPORTANCE_TRIALS, and the
# reports say why.
IMPORTANCE_TOP = 5
MIN_IMPORTANCE_TRIALS = 2 * IMPORTANCE_TOP


def record_of(t: optuna.trial.FrozenTrial, space: SearchSpace | None = None) -> TrialRecord:
    """`t` as the study reads it back; without the `space` (`tftune status`), with no
    description."""
    ua = t.user_attrs
    state = OPTUNA_STATES.get(t.state.name, TrialState.FAILED)  # RUNNING: interrupted
    if ua.get(FAILED_ATTR):
        state = TrialState.FAILED
    return TrialRecord(
        number=t.number,
        role=Role(ua.get("role", Role.SEARCH.value)),
        state=state,
        params=dict(t.params),
        description=space.describe(t.params) if space is not None else "",
        examples_per_s=ua.get("examples_per_s"),
        utilization=ua.get("utilization"),
        spread=ua.get("spread"),
        input_wait_share=ua.get("input_wait_share"),
        repeats=tuple(ua.get("repeats", ())),
        reason=ua.get("reason")
        or ("interrupted (the worker died or was stopped)" if state is TrialState.FAILED else None),
        wall_s=float(ua.get("wall_s", 0.0)),
        feasible=bool(ua.get("feasible", False)),
        notes=tuple(str(n) for n in ua.get("notes", ())),
        findings=tuple(
            OutputPrecisionFinding.from_json(f, source=f"trial {t.number}'s findings")
            for f in ua.get(FINDINGS_ATTR, ())
        ),
        stderr_tail=str(ua.get(STDERR_TAIL_ATTR) or ""),
        crash=_stored(t, CRASH_ATTR, CrashSummary.from_json),
        training=_stored(t, TRAINING_ATTR, TrainingTime.from_json),
    )


def ran_to_end(trials: Sequence[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The trials whose script ran to an end: not skipped, not interrupted (FAIL), not a
    twin (a config measured before, whose measurement it reuses: `stopping.twin_of`)."""
    import optuna

    ts = optuna.trial.TrialState
    return [
        t
        for t in trials
        if t.state in (ts.COMPLETE, ts.PRUNED)
        and not t.user_attrs.get(SKIPPED_ATTR)
        and t.user_attrs.get(TWIN_ATTR) is None
    ]


def stored_crash(t: optuna.trial.FrozenTrial) -> CrashSummary | None:
    if not t.user_attrs.get(FAILED_ATTR):
        return None
    return _stored(t, CRASH_ATTR, CrashSummary.from_json)


def _stored(t: optuna.trial.FrozenTrial, key: str, read: Callable[..., T]) -> T | None:
    """A part a trial stored as its JSON (`to_json`), read back strictly; None where the
    trial stored none."""
    raw = t.user_attrs.get(key)
    return read(raw, source=f"the study's trial {t.number}, {key}") if raw is not None else None


def trial_runs(trials: Sequence[optuna.trial.FrozenTrial]) -> list[Run]:
    """The study's runs of the script, as `crashes.find_instability` sees them."""
    return [
        Run(
            t.number,
            t.user_attrs.get("role") == Role.AS_WRITTEN.value,
            dict(t.params),
            stored_crash(t),
        )
        for t in ran_to_end(trials)
    ]


def final_runs(final: Sequence[TrialRecord], as_written: TrialRecord) -> list[Run]:
    """The final round's runs (each one, before `merge_as_written` pools them)."""
    return [
        Run(
            f.number,
            f.number == as_written.number,
            dict(f.params),
            f.crash if f.state is TrialState.FAILED else None,
        )
        for f in final
    ]


def dead_values(
    trials: Sequence[optuna.trial.FrozenTrial],
) -> dict[tuple[str, KnobValue], tuple[list[int], str]]:
    """(knob, value) -> (the trials it failed in, the last reason) for every value that
    failed in at least DEAD_AFTER trials and never ran through (completed or pruned for
    being slow) in any trial. When the script crashes on its own
    (`crashes.find_instability`), a native crash is nobody's knob: it counts neither way."""
    ran_trials = ran_to_end(trials)
    unstable = find_instability(trial_runs(ran_trials)) is not None
    failed: dict[tuple[str, KnobValue], tuple[list[int], str]] = {}
    ran: set[tuple[str, KnobValue]] = set()
    for t in ran_trials:
        crash = stored_crash(t)
        if unstable and crash is not None and crash.native:
            continue
        for key in t.params.items():
            if t.user_attrs.get(FAILED_ATTR):
                numbers, _ = failed.get(key, ([], ""))
                failed[key] = ([*numbers, t.number], str(t.user_attrs.get("reason") or ""))
            else:
                ran.add(key)
    return {
        key: found
        for key, found in failed.items()
        if len(found[0]) >= DEAD_AFTER and key not in ran
    }


def as_written_of(records: Sequence[TrialRecord]) -> TrialRecord | None:
    done = [r for r in records if r.role is Role.AS_WRITTEN and r.state is TrialState.COMPLETE]
    return done[0] if done else None


def baselines_of(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    out: dict[Role, TrialRecord] = {}
    for r in records:
        if r.role in (Role.AS_WRITTEN, Role.AUTOTUNE, Role.HEURISTIC, Role.GUIDED) and (
            r.role not in out
            or (out[r.role].state is not TrialState.COMPLETE and r.state is TrialState.COMPLETE)
        ):
            out[r.role] = r
    return list(out.values())


def importances(study: optuna.Study) -> tuple[dict[str, float], str | None]:
    """(parameter importances, why there are none): PED-ANOVA (it needs no scikit-learn,
    unlike fANOVA) over the knobs that varied among the complete trials, from
    MIN_IMPORTANCE_TRIALS complete trials on; else no importances, and why in words."""
    import optuna

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    n = len(complete)
    if n < MIN_IMPORTANCE_TRIALS:
        return {}, (
            f"{n} complete trial{'' if n == 1 else 's'}; importance is estimated from "
            f"{MIN_IMPORTANCE_TRIALS} on, where the best {IMPORTANCE_TOP} can be told from "
            "the rest"
        )
    varied = varied_knobs(complete)
    if not varied:
        return {}, f"no knob took more than one value among the {n} complete trials"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # it warns about the sign we already flipped
            imp = optuna.importance.get_param_importances(
                study,
                evaluator=optuna.importance.PedAnovaImportanceEvaluator(
                    target_quantile=max(0.1, IMPORTANCE_TOP / n)
                ),
                params=varied,
                # PED-ANOVA explains what makes the target *low*; we maximize.
                target=lambda t: -t.values[0] if t.values else 0.0,
            )
    except (ImportError, RuntimeError, ValueError, ZeroDivisionError) as exc:
        return {}, f"Optuna could not estimate it ({type(exc).__name__}: {exc})"
    return {k: round(float(v), 4) for k, v in imp.items()}, None


def varied_knobs(trials: Sequence[optuna.trial.FrozenTrial]) -> list[str]:
    """The knobs that took more than one value among `trials`, by name: a knob that
    never varied explains nothing, whatever share an estimator gives it."""
    seen: dict[str, set[str]] = {}
    for t in trials:
        for name, value in t.params.items():
            seen.setdefault(name, set()).add(repr(value))
    return sorted(name for name, values in seen.items() if len(values) > 1)
