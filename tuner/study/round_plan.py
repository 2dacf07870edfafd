"""Which runs the final round makes, and which it leaves out.

The round's candidates (`final_candidates`) are the script as written, AUTOTUNE
everywhere and the few best distinct trials. The search's best (`leader`) is
re-measured first; each other candidate is then measured only where it could change
the verdict (`still_open`):

- a runner-up whose search figure is already below the leader's re-measure is left out:
  it was picked as one of the best of many trials, so its figure is biased upwards, and
  it would have to beat it to win;
- AUTOTUNE everywhere, where the leader's re-measure leads it beyond any noise
  (`lead_needed`), keeps its search figure: confirming a 14x gain over it tells nothing;
- the script as written is always measured again: it is the floor of every
  recommendation, every speed-up the run reports is over it, and its second run is what
  shows the run-to-run noise, which its windows do not (under load, one whole run of it
  read a fifth of the script's own rate with windows that agreed within 1%).

Where the leader's re-measure did not complete, every candidate is measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from tftune.core.vocabulary import TrialState
from tftune.tuner.study.contract import Objective, Role, TrialRecord
from tftune.tuner.study.gains import required_gain, score, shown

# A baseline is left out behind this lead of the leader's re-measure over its search
# figure, and behind LEAD_NOISE_MULTIPLE times the noise of the two measurements
# (`required_gain`) where that asks for more: run-to-run noise on a host is 5-10% (a
# leader re-measured under load once fell by 21%, which its re-measure shows).
DECISIVE_LEAD = 1.2
LEAD_NOISE_MULTIPLE = 4.0
# The candidates measured as baselines, not as runners-up.
BASELINE_ROLES = frozenset({Role.AS_WRITTEN, Role.AUTOTUNE})


def final_candidates(
    records: Sequence[TrialRecord], as_written: TrialRecord, objective: Objective, k: int
) -> list[TrialRecord]:
    """What the final round may re-measure: the script as written and AUTOTUNE
    everywhere (when it completed), then the `k` best feasible trials whose params
    differ from everything already listed. The #cores heuristic is re-measured only as
    one of those: each run of the round costs the user a trial's time."""
    out: list[TrialRecord] = [as_written]
    r = next(
        (x for x in records if x.role is Role.AUTOTUNE and x.state is TrialState.COMPLETE), None
    )
    if r is not None and not r.same_config(as_written):
        out.append(r)
    floor = as_written.examples_per_s or 0.0
    ranked = sorted(
        (
            r
            for r in records
            if r.state is TrialState.COMPLETE
            and r.role is not Role.CONFIRM
            and (r.examples_per_s or 0.0) >= floor
        ),
        key=lambda r: score(r, objective),
        reverse=True,
    )
    seen = [dict(r.params) for r in out]
    added = 0
    for r in ranked:
        if added >= k:
            break
        if dict(r.params) in seen:
            continue
        seen.append(dict(r.params))
        out.append(r)
        added += 1
    return out


def leader(
    candidates: Sequence[TrialRecord], as_written: TrialRecord, objective: Objective
) -> TrialRecord | None:
    """The candidate with the best search figure other than the script as written."""
    others = [c for c in candidates if c.number != as_written.number]
    return max(others, key=lambda r: score(r, objective)) if others else None


def lead_needed(a: TrialRecord, b: TrialRecord) -> float:
    """The lead of `a` over `b` beyond any noise: `DECISIVE_LEAD`, or more where the two
    measurements' windows spread widely (`LEAD_NOISE_MULTIPLE`)."""
    return max(DECISIVE_LEAD, 1.0 + LEAD_NOISE_MULTIPLE * required_gain(a, b))


def leads(a: TrialRecord, b: TrialRecord, objective: Objective) -> bool:
    """Whether `a` leads `b` by `lead_needed` in examples/s and the objective's figure."""
    fa, fb = score(a, objective)[0], score(b, objective)[0]
    ea, eb = a.examples_per_s or 0.0, b.examples_per_s or 0.0
    need = lead_needed(a, b)
    return fb >= 0 and fa >= need * fb and ea >= need * eb


def still_open(
    candidates: Sequence[TrialRecord],
    top: TrialRecord,
    again: TrialRecord | None,
    objective: Objective,
) -> tuple[list[TrialRecord], list[str]]:
    """(the candidates other than `top` the round still measures, in their order; notes
    on those it leaves out), given `again`, `top`'s re-measure (module docstring)."""
    rest = [c for c in candidates if c is not top]
    if again is None or again.state is not TrialState.COMPLETE:
        return rest, []
    beaten = [
        c
        for c in rest
        if c.role is Role.AUTOTUNE and leads(again, c, objective)  # never the floor
    ]
    behind = [
        c
        for c in rest
        if c.role not in BASELINE_ROLES and score(c, objective)[0] < score(again, objective)[0]
    ]
    notes = []
    if beaten:
        lead = min((again.examples_per_s or 0.0) / (c.examples_per_s or 1.0) for c in beaten)
        need = max(lead_needed(again, c) for c in beaten)
        notes.append(
            f"final round: {_named(beaten)} not re-measured: trial {top.number}, re-measured, "
            f"leads {'it' if len(beaten) == 1 else 'them'} by {lead:.2f}x or more, beyond "
            f"any noise (from {need:.2f}x), so the search figures stand"
        )
    if behind:
        notes.append(
            f"final round: {_named(behind)} not re-measured: "
            f"{'its search figure is' if len(behind) == 1 else 'their search figures are'} "
            f"already below trial {top.number}'s re-measure ({shown(again, objective)}), and "
            "a figure picked as one of the best of many trials is biased upwards"
        )
    return [c for c in rest if c not in beaten and c not in behind], notes


def _named(records: Sequence[TrialRecord]) -> str:
    return ", ".join(f"trial {c.number} ({c.role.value})" for c in records)
