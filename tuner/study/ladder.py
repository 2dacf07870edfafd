"""Climbing: where the latest new best points past itself, the next step is the next trial.

Two ladders, each a rung at a time, each rung once per trial it climbs from, and a rung
that joins the rewrites (`rewrite_rung`):

- **The batch size** (`LADDER_ATTR`). A larger batch amortizes what every step pays
  whatever its size (the loop's own work per step, a kernel launch), and where one
  doubling paid, the next often pays again; TPE finds that only by chance, a trial at a
  time (bursty_source took it 9 trials). So when the latest finished trial is a new best
  beyond the noise (`stopping.latest_gain`) with a larger batch than the best before it,
  its config at twice the batch (`baselines.with_larger_batch`, within the batch sizes
  the space offers: the batch-size warning rules stay as they are) is the next trial.
- **The thread pool** (`POOL_LADDER_ATTR`). AUTOTUNE never runs more calls at once than
  the pool has threads, and a call site whose parallelism equals the pool's size may want
  more: a map that waits on storage hides more latency with every thread. When the
  latest new best fills its pool at some parallel call site, its config with the pool
  at the next size the space offers, and those call sites at AUTOTUNE (tf.data then
  sizes them within the larger pool), is the next trial. latency_io's search stopped at
  a pool of 32 filled by parallelism 32, where AUTOTUNE in a pool of 64 read more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from tftune.core.vocabulary import TrialState
from tftune.tuner.fixes.rewrites import REWRITE_FIELDS
from tftune.tuner.searchspace.config import AUTOTUNE
from tftune.tuner.study.baselines import with_larger_batch
from tftune.tuner.study.contract import Objective, Role, TrialRecord
from tftune.tuner.study.gains import relative_gain, score, search_gain
from tftune.tuner.study.stopping import latest_gain

if TYPE_CHECKING:
    from tftune.tuner.searchspace.space import KnobValue, SearchSpace

# A trial enqueued by the batch ladder carries the number of the trial it climbs from here.
LADDER_ATTR = "batch_ladder"
# ... and one enqueued by the pool ladder, here.
POOL_LADDER_ATTR = "pool_ladder"
# ... and one that joins a rewrite that gained alone to the best config, here.
REWRITE_LADDER_ATTR = "rewrite_ladder"

Rung = tuple[str, int, dict[str, "KnobValue"]]  # (its attribute, the trial, its params)


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


# A ladder's step: (the space, the new best, the best before it) -> the config to climb to.
Step = Callable[["SearchSpace", TrialRecord, TrialRecord], "dict[str, KnobValue] | None"]


def _batch_step(
    space: SearchSpace, r: TrialRecord, before: TrialRecord
) -> dict[str, KnobValue] | None:
    """`r`'s config at twice the batch, where `r` gained by a larger batch than `before`."""
    if not larger_batch(space, r.params, before.params):
        return None
    return with_larger_batch(space, r.params)


def _pool_step(
    space: SearchSpace, r: TrialRecord, _before: TrialRecord
) -> dict[str, KnobValue] | None:
    return with_larger_pool(space, r.params)


def _climb(
    gain: tuple[TrialRecord, TrialRecord] | None,
    records: Sequence[TrialRecord],
    space: SearchSpace,
    step: Step,
) -> tuple[int, dict[str, KnobValue]] | None:
    """(the trial to climb from, the config `step` climbs to) after the latest new best
    (`gain`: `stopping.latest_gain`), unless `step` finds none or it was measured."""
    up = step(space, *gain) if gain is not None else None
    if gain is None or up is None or any(dict(x.params) == up for x in records):
        return None
    return gain[0].number, up


def with_larger_pool(
    space: SearchSpace, params: Mapping[str, KnobValue]
) -> dict[str, KnobValue] | None:
    """`params` with the thread pool at the next size offered and every parallel call
    site that fills the pool at AUTOTUNE; None where the pool is not searched, no larger
    one is offered, or no call site fills it. The default pool (None) has the core count's
    threads."""
    pool = next((k for k in space.knobs if k.field == "threadpool_size"), None)
    if pool is None:
        return None
    size = params.get(pool.name, pool.as_written)
    size = space.cores if size is None else size
    if not isinstance(size, int):
        return None
    larger = [c for c in pool.choices if isinstance(c, int) and c > size]
    parallel = (k for k in space.knobs if k.field == "num_parallel_calls")
    full = [k for k in parallel if params.get(k.name) == size]
    if not larger or not full:
        return None
    out = dict(params)
    out[pool.name] = min(larger)
    for k in full:
        out[k.name] = space.nearest(k, AUTOTUNE)
    return out


def next_rungs(
    records: Sequence[TrialRecord], space: SearchSpace, objective: Objective
) -> list[Rung]:
    """The rungs to enqueue after the latest trial, the batch ladder's first: none for a
    ladder where the latest trial is no new best, points nowhere past itself (no larger
    batch gained, no pool filled, none larger offered), or that config was measured; then
    the rewrites' rung (`rewrite_rung`)."""
    gain = latest_gain(records, objective)
    out: list[Rung] = []
    for attr, step in ((LADDER_ATTR, _batch_step), (POOL_LADDER_ATTR, _pool_step)):
        rung = _climb(gain, records, space, step)
        if rung is not None:
            out.append((attr, *rung))
    combined = rewrite_rung(records, space, objective)
    if combined is not None:
        out.append((REWRITE_LADDER_ATTR, *combined))
    return out


def rewrite_rung(
    records: Sequence[TrialRecord], space: SearchSpace, objective: Objective
) -> tuple[int, dict[str, KnobValue]] | None:
    """A rewrite that gained on its own joins the best config: where the latest finished
    trial turns rewrites on and beats the script as written beyond the noise, yet the
    best trial so far is another that lacks them, the best's config with those rewrites
    is the next trial (unless it was measured). A rewrite measured alone over the script
    as written (its own gain, for the report) would otherwise never meet the knobs'
    best unless TPE drew both."""
    done = [r for r in records if r.role is not Role.CONFIRM and r.state is TrialState.COMPLETE]
    if not done:
        return None
    latest = max(done, key=lambda r: r.number)
    written = next((r for r in done if r.role is Role.AS_WRITTEN), None)
    fields = {k.name for k in space.knobs if k.field in REWRITE_FIELDS}
    on = {n: v for n, v in latest.params.items() if n in fields and v != space.knob(n).as_written}
    if written is None or not on:
        return None
    gain = relative_gain(latest, written, objective)
    if gain is None or gain <= search_gain(latest, written):
        return None
    best = max((r for r in done if r.feasible), key=lambda r: score(r, objective), default=None)
    if best is None or best.number == latest.number:
        return None
    up = {**best.params, **on}
    if up == dict(best.params) or any(dict(r.params) == up for r in records):
        return None
    return latest.number, up
