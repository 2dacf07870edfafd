"""When the search is done: ``--trials auto``'s stopping rule, and trials that need no run.

Every trial costs the user a run of their script. Two rules spend less:

- `stop_reason`: ``--trials auto`` stops the search once `patience` finished trials in a
  row brought no gain beyond the noise over the best so far (`gains.search_gain`: at
  least 8%, a host's run-to-run noise, more where the windows spread). The baselines
  are measured first whatever happens; the count starts after them.
- `twin_of`: TPE samples a config it has already measured once it has converged. That
  trial reuses the earlier measurement instead of running the script again (a "twin"),
  and counts as a trial that gained nothing.
- `exhausted`: ``--trials auto`` stops once every configuration of the space was
  measured to its end (a pipeline that is not the limit, whose knobs are searched
  between as written and AUTOTUNE only, where the script already is AUTOTUNE: one
  configuration, and the rest of the search would only be twins of it).

All are pure functions of the finished trials, so that every worker of a shared study
reaches the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tftune.core.vocabulary import TrialState
from tftune.tuner.study.contract import Objective, Role, TrialRecord
from tftune.tuner.study.gains import relative_gain, search_gain, shown

if TYPE_CHECKING:
    from tftune.tuner.searchspace.space import KnobValue

# The trials measured before the search (as written, AUTOTUNE, heuristic, guided).
_BASELINE_ROLES = frozenset({Role.AS_WRITTEN, Role.AUTOTUNE, Role.HEURISTIC, Role.GUIDED})


def _figure(r: TrialRecord, objective: Objective) -> float | None:
    """The objective's primary figure (examples/s for throughput and both)."""
    if objective is Objective.GPU_UTIL:
        return r.utilization
    return r.examples_per_s


def _gains(r: TrialRecord, best: TrialRecord | None, objective: Objective) -> bool:
    """`r` is a new best, by more than the noise of the two measurements."""
    mine = _figure(r, objective)
    if mine is None or r.state is not TrialState.COMPLETE or not r.feasible:
        return False
    if best is None:
        return True
    gain = relative_gain(r, best, objective)
    return gain is None or gain > search_gain(r, best)


def _walk(
    records: Sequence[TrialRecord], objective: Objective
) -> list[tuple[TrialRecord, bool, TrialRecord | None]]:
    """Every finished trial in order (final-round runs left out): (the trial, whether it
    was a new best beyond the noise, the best before it)."""
    ordered = sorted((r for r in records if r.role is not Role.CONFIRM), key=lambda r: r.number)
    best: TrialRecord | None = None
    out = []
    for r in ordered:
        if r.role is Role.AS_WRITTEN and r.state is TrialState.COMPLETE:
            r = _feasible(r)
        gained = _gains(r, best, objective)
        out.append((r, gained, best))
        if gained:
            best = r
    return out


def latest_gain(
    records: Sequence[TrialRecord], objective: Objective
) -> tuple[TrialRecord, TrialRecord] | None:
    """(the latest finished trial, the best before it) when that trial was a new best
    beyond the noise over an earlier best; None otherwise."""
    walked = _walk(records, objective)
    if not walked:
        return None
    r, gained, before = walked[-1]
    return (r, before) if gained and before is not None else None


def stop_reason(records: Sequence[TrialRecord], objective: Objective, patience: int) -> str | None:
    """Why the search should stop now, or None to go on (see the module docstring)."""
    walked = _walk(records, objective)
    best: TrialRecord | None = None
    since_gain = 0
    searched = 0
    for r, gained, _before in walked:
        if gained:
            best, since_gain = r, 0
        elif r.role not in _BASELINE_ROLES:
            since_gain += 1
        searched += r.role not in _BASELINE_ROLES
    if best is None or searched < patience or since_gain < patience:
        return None
    noise = search_gain(best, best)
    return (
        f"stopped after {len(walked)} trials: the last {since_gain} gained nothing beyond "
        f"the noise ({noise:.0%}) over trial {best.number}'s {shown(best, objective)}"
    )


def exhausted(records: Sequence[TrialRecord], space_size: int) -> str | None:
    """Why the search should stop because nothing is left to measure: every one of the
    space's `space_size` configurations was measured to its end (`twin_of`'s rule); else
    None."""
    measured = {
        tuple(sorted(r.params.items(), key=lambda kv: kv[0]))
        for r in records
        if r.role is not Role.CONFIRM and r.state is TrialState.COMPLETE
    }
    if len(measured) < space_size:
        return None
    which = "the one configuration" if space_size == 1 else f"all {space_size} configurations"
    return f"stopped after {len(records)} trials: {which} of the search space measured"


def auto_stop(
    records: Sequence[TrialRecord],
    objective: Objective,
    patience: int,
    space_size: int,
    queued: bool,
) -> str:
    """``--trials auto``'s verdict after a trial: `stop_reason`, else `exhausted` unless
    trials are still `queued` (the baselines, the screen's seeds); "" to go on."""
    done = stop_reason(records, objective, patience)
    return done or ("" if queued else exhausted(records, space_size) or "")


def _feasible(r: TrialRecord) -> TrialRecord:
    """The script as written is the floor: it counts as a feasible best to beat."""
    return r if r.feasible else replace(r, feasible=True)


def twin_of(records: Sequence[TrialRecord], params: Mapping[str, KnobValue]) -> TrialRecord | None:
    """The earliest trial that measured exactly `params` to the end, not counting
    final-round runs: its measurement stands for a trial that samples the same config
    again. A pruned or failed one does not: one short window may have been unlucky, a
    failure transient (a value that keeps failing is skipped: `records.dead_values`)."""
    wanted = dict(params)
    done = (r for r in records if r.role is not Role.CONFIRM and r.state is TrialState.COMPLETE)
    return next((r for r in sorted(done, key=lambda r: r.number) if dict(r.params) == wanted), None)
