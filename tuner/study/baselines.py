"""The configs every study measures before it searches.

The script as written (its knobs as the user wrote them: `SearchSpace.as_written_params`)
is the reference every winner must beat. Beside it: AUTOTUNE everywhere, the #cores
heuristic (`baseline_params`) and the analysis-guided guess (`guided_params`), which
reads how input-bound the script is with the same bands as `tftune analyze`
(`tftune.core.vocabulary.input_band`), so that both commands call one input wait by one
word.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tftune.core.vocabulary import input_band
from tftune.tuner.searchspace.config import AUTOTUNE
from tftune.tuner.study.contract import GuidedHint, Role, TrialRecord

if TYPE_CHECKING:
    from tftune.tuner.searchspace.space import KnobValue, SearchSpace

MAX_GUIDED_PARALLELISM = 64


def _pow2_at_least(n: float) -> int:
    return int(2 ** math.ceil(math.log2(max(1.0, n))))


def baseline_params(space: SearchSpace, role: Role, cores: int) -> dict[str, KnobValue]:
    """The parameters of the enqueued baselines (AUTOTUNE everywhere, #cores heuristic)."""
    if role is Role.AS_WRITTEN:
        return space.as_written_params()
    if role is Role.AUTOTUNE:
        want: dict[str, KnobValue] = {
            "num_parallel_calls": AUTOTUNE,
            "cycle_length": AUTOTUNE,
            "buffer_size": AUTOTUNE,
            "final_prefetch": AUTOTUNE,
        }
        return space.params_for(want)
    if role is Role.HEURISTIC:
        want = {
            "num_parallel_calls": cores,
            "cycle_length": cores,
            "buffer_size": AUTOTUNE,
            "final_prefetch": AUTOTUNE,
        }
        return space.params_for(want)
    raise ValueError(role)


def baseline_roles(screened: bool) -> tuple[Role, ...]:
    """The baselines measured as full trials beside the script as written: AUTOTUNE
    everywhere, and the #cores heuristic unless the pipeline screen drained it (its
    candidates hold the same pipeline: `tuner.searchspace.screen.candidates`), which saves
    a trial."""
    return (Role.AUTOTUNE,) if screened else (Role.AUTOTUNE, Role.HEURISTIC)


def _site_matches(knob_site: str | None, hinted: Sequence[str]) -> bool:
    if knob_site is None:
        return False
    return any(knob_site == h or knob_site.endswith("/" + h) for h in hinted)


def guided_params(
    space: SearchSpace,
    as_written: TrialRecord,
    cores: int,
    hint: GuidedHint | None = None,
    screened: Sequence[Mapping[str, KnobValue]] = (),
) -> tuple[dict[str, KnobValue], str]:
    """A first guess from the profile of the script as written (`hint`), or else from
    the as-written trial's input-wait share; when input-bound and the pipeline screen
    ranked configs (`screened`, best first: `tuner.searchspace.screen`), the screen's best, which
    was measured rather than guessed.

    Input-bound (the consumer waits a share w of its time, at least moderately input-bound
    by `input_band`, as `tftune analyze` says it): the pipeline must deliver
    1/(1-w) times faster, so its parallelism is raised by that factor (power of two, at
    most 64), the private thread pool is sized to match (AUTOTUNE never exceeds the pool)
    and every buffer is AUTOTUNE. With a profile, only the bottleneck's call sites get
    that parallelism; the other parallel sites get AUTOTUNE. Not input-bound: the pipeline
    is fine; the step is the limit. Keep AUTOTUNE, try the platform's 16-bit policy where
    one is in the space, and twice the batch where the batch size is searched (a larger
    batch amortizes the per-step overhead the step pays whatever its size).
    """
    from_profile = hint is not None and hint.input_share is not None
    w = hint.input_share if hint is not None and from_profile else as_written.input_wait_share
    source = "the profile" if from_profile else "the as-written trial"
    model_bound = hint is not None and hint.model_bound
    if model_bound:  # the bound analysis outranks a profile's few percent of wait
        w, source = w or 0.0, f"{source}; the pipeline alone outruns the model"
    if w is None:
        return baseline_params(space, Role.AUTOTUNE, cores), "no input-wait share: AUTOTUNE"
    if input_band(w).input_bound and not model_bound and screened:
        why = f"input-bound ({w:.0%} wait, from {source}): the pipeline screen's best config"
        return dict(screened[0]), why
    if input_band(w).input_bound and not model_bound:
        factor = 1.0 / max(1e-3, 1.0 - w)
        written = [
            k.as_written
            for k in space.knobs
            if k.field == "num_parallel_calls" and isinstance(k.as_written, int)
        ]
        base = max([1, *[p for p in written if p != AUTOTUNE]])
        par = min(MAX_GUIDED_PARALLELISM, _pow2_at_least(base * factor))
        par = max(par, cores)
        want: dict[str, KnobValue] = {
            "num_parallel_calls": par,
            "cycle_length": par,
            "buffer_size": AUTOTUNE,
            "final_prefetch": AUTOTUNE,
            "threadpool_size": max(par, cores),
        }
        params = space.params_for(want)
        targets = hint.bottleneck_sites if hint is not None and from_profile else ()
        if targets and any(_site_matches(k.site, targets) for k in space.knobs):
            for k in space.knobs:
                if k.field == "num_parallel_calls" and not _site_matches(k.site, targets):
                    params[k.name] = space.nearest(k, AUTOTUNE)
            where = f" at {', '.join(targets)}"
        else:
            where = ""
        why = (
            f"input-bound ({w:.0%} wait, from {source}): parallelism {par}{where}, "
            f"thread pool {max(par, cores)}"
        )
        return params, why
    params = baseline_params(space, Role.AUTOTUNE, cores)
    moves = ["AUTOTUNE"]
    for k in space.knobs:
        if k.field == "mixed_precision":
            params[k.name] = next(c for c in k.choices if c is not None)
            moves.append(f"16-bit precision ({params[k.name]})")
    doubled = with_larger_batch(space, params)
    if doubled is not None:
        params = doubled
        moves += [f"batch {params[k.name]}" for k in space.knobs if k.field == "batch_size"]
    return params, f"not input-bound ({w:.0%} wait, from {source}): {', '.join(moves)}"


def with_larger_batch(
    space: SearchSpace, params: Mapping[str, KnobValue]
) -> dict[str, KnobValue] | None:
    """`params` with every searched batch size at the choice nearest twice its value in
    `params` (a larger batch amortizes what each step pays whatever its size); None where
    the batch size is not searched or nothing larger is offered."""
    out, changed = dict(params), False
    for k in space.knobs:
        now = params.get(k.name, k.as_written)
        if k.field == "batch_size" and isinstance(now, int):
            larger = [c for c in k.choices if isinstance(c, int) and c > now]
            if larger:
                out[k.name] = min(larger, key=lambda c: abs(c - 2 * now))
                changed = True
    return out if changed else None
