"""What counts as a gain: one trial's figure against another's, and the noise it must clear.

Shared by the stopping rule (`stopping`: a new best must gain beyond the noise), the
final round's plan (`round_plan`: a lead beyond any noise) and its verdict (`winner`: a
change must pay for itself, `close_call`: a gain within the noise decided by more runs),
and the one way several runs of one config become one record (`pool_runs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tftune.tuner.study.contract import Objective, TrialRecord

# A change is recommended only if it gains at least this much over the script as written
# in the final round (more where the measurements are noisier: `required_gain`).
MIN_GAIN = 0.03
# A searched trial is a new best for ``--trials auto`` only if it gains at least this
# much (`search_gain`): one config's run-to-run noise on a host, 5-12% measured here (the
# script as written's runs in the final round), is more than one run's windows show, and
# a new best is the top of many noisy figures: re-measured in the final round, the
# search's leaders come out 6-18% lower. A "gain" within that restarts the search's
# patience for nothing (three more trials on a +6.6% that re-measured 10% lower). 8%: the
# middle of the run-to-run range.
SEARCH_GAIN = 0.08
# A change must gain this many times the run-to-run noise of the script as written (the
# range of its two runs, its trial and the final round's, over their mean) to win
# outright; a gain between `MIN_GAIN` and that is a close call, settled by more runs of
# both (`close_call.decide_close_call`). The range of two runs is one sample of the spread,
# and the candidate's own re-measure is as noisy: a gain of one range was passed on a
# script whose runs as written read 255 and 332 ex/s, a "+40%" that its own counter
# (368-452 ex/s over four plain runs) did not show.
RUN_NOISE_MULTIPLE = 2.0


def score(r: TrialRecord, objective: Objective) -> tuple[float, float]:
    """How trials rank: the objective's primary figure, then the other one."""
    eps = r.examples_per_s or 0.0
    util = r.utilization if r.utilization is not None else -1.0
    if objective is Objective.GPU_UTIL:
        return (util, eps)
    return (eps, util)


def shown(r: TrialRecord, objective: Objective) -> str:
    """`r`'s primary figure in words: "5,536.0 ex/s", or "50% utilization"."""
    figure = score(r, objective)[0]
    return f"{figure:.0%} utilization" if objective is Objective.GPU_UTIL else f"{figure:,.1f} ex/s"


def relative_gain(r: TrialRecord, base: TrialRecord, objective: Objective) -> float | None:
    """`r`'s relative gain over `base` in the objective's primary figure."""
    if objective is Objective.GPU_UTIL and r.utilization and base.utilization:
        return r.utilization / base.utilization - 1.0
    if r.examples_per_s is None or not base.examples_per_s:
        return None
    return r.examples_per_s / base.examples_per_s - 1.0


def required_gain(r: TrialRecord, base: TrialRecord, run_noise: float = 0.0) -> float:
    """What a config must gain over the script as written to be recommended: more than
    `MIN_GAIN`, more than the two measurements' noise (half their average spread between
    windows), and more than `RUN_NOISE_MULTIPLE` times `run_noise`, the difference
    between two runs of the script as written. A change that does not pay for itself is
    not worth making."""
    windows = ((r.spread or 0.0) + (base.spread or 0.0)) / 4
    return max(MIN_GAIN, windows, RUN_NOISE_MULTIPLE * run_noise)


def search_gain(r: TrialRecord, best: TrialRecord) -> float:
    """What a searched trial must gain over the best so far to count as a new best for
    the stopping rule: `SEARCH_GAIN`, or `required_gain` where that asks for more."""
    return max(SEARCH_GAIN, required_gain(r, best))


def pool_runs(runs: Sequence[TrialRecord]) -> TrialRecord:
    """Several completed runs of one config as one record: the mean figures, every
    window's rate, the largest spread and the summed wall time."""
    first = runs[0]
    if len(runs) == 1:
        return first

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    return replace(
        first,
        examples_per_s=mean([r.examples_per_s for r in runs]),
        utilization=mean([r.utilization for r in runs]),
        input_wait_share=mean([r.input_wait_share for r in runs]),
        spread=max(r.spread or 0.0 for r in runs),
        repeats=tuple(x for r in runs for x in r.repeats),
        wall_s=sum(r.wall_s for r in runs),
    )
