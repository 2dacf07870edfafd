"""Climbing the batch size: where a larger batch just gained, the next doubling is next.

A larger batch amortizes what every step pays whatever its size (the loop's own work
per step, a kernel launch), and where one doubling paid, the next often pays again; TPE
finds that only by chance, a trial at a time (bursty_source took it 9 trials). So when
the latest finished trial is a new best beyond the noise (`stopping.latest_gain`) with a
larger batch than the best before it, its config at twice the batch
(`baselines.with_larger_batch`, within the batch sizes the space offers: the batch-size
warning rules stay as they are) is the next trial (`next_rung`), once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tftune.tuner.study.baselines import with_larger_batch
from tftune.tuner.study.contract import Objective, TrialRecord
from tftune.tuner.study.stopping import latest_gain

if TYPE_CHECKING:
    from tftune.tuner.space import KnobValue, SearchSpace

# A trial enqueued by `next_rung` carries the number of the trial it climbs from here.
LADDER_ATTR = "batch_ladder"


def _batches(space: SearchSpace, params: Mapping[str, KnobValue]) -> list[KnobValue]:
    return [params.get(k.name) for k in space.knobs if k.field == "batch_size"]


def larger_batch(
    space: SearchSpace, params: Mapping[str, KnobValue], than: Mapping[str, KnobValue]
) -> bool:
    """Whether `params` batches more than `than` at some batch call site."""
    return any(
        isinstance(a, int) and isinstance(b, int) and a > b
        for a, b in zip(_batches(space, params), _batches(space, than), strict=True)
    )


def next_rung(
    records: Sequence[TrialRecord], space: SearchSpace, objective: Objective
) -> tuple[int, dict[str, KnobValue]] | None:
    """(the trial to climb from, its params at twice the batch), or None where the latest
    trial did not gain by a larger batch, the space offers none larger, or that config
    was measured already (module docstring)."""
    gain = latest_gain(records, objective)
    if gain is None:
        return None
    r, before = gain
    up = (
        with_larger_batch(space, r.params) if larger_batch(space, r.params, before.params) else None
    )
    if up is None or any(dict(x.params) == up for x in records):
        return None
    return r.number, up
