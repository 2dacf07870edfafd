"""A baseline whose config is the script as written (a script already AUTOTUNE
everywhere) is the script as written: never re-measured as a contender, never the
winner, never a speed-up. Noise between two runs of one config once read 1.63x."""

from __future__ import annotations

from dataclasses import replace

from tftune.core.vocabulary import TrialState
from tftune.tuner.config import AUTOTUNE
from tftune.tuner.study.contract import Objective, Role, TrialRecord
from tftune.tuner.study.final import choose_final
from tftune.tuner.study.round_plan import final_candidates

PAR = "train.py:10/num_parallel_calls"
WRITTEN = {PAR: AUTOTUNE, "threadpool_size": "default"}


def rec(n: int, role: Role, eps: float, params: dict[str, object]) -> TrialRecord:
    return TrialRecord(
        n,
        role,
        TrialState.COMPLETE,
        params,
        "",
        eps,
        0.5,
        feasible=True,  # type: ignore[arg-type]
    )


def test_autotune_identical_to_as_written_is_not_a_final_round_contender() -> None:
    aw = rec(0, Role.AS_WRITTEN, 2098.0, dict(WRITTEN))
    records = [
        aw,
        rec(1, Role.GUIDED, 2294.0, dict(WRITTEN)),
        rec(2, Role.AUTOTUNE, 1908.0, dict(WRITTEN)),
    ]
    got = final_candidates(records, aw, Objective.THROUGHPUT, 3)
    assert [r.number for r in got] == [0]


def test_a_noisy_rerun_of_the_as_written_config_is_never_the_winner() -> None:
    aw = rec(0, Role.AS_WRITTEN, 2098.0, dict(WRITTEN))
    autotune = rec(2, Role.AUTOTUNE, 1908.0, dict(WRITTEN))
    other = rec(3, Role.SEARCH, 2000.0, {PAR: 16, "threadpool_size": "default"})
    records = [aw, autotune, other]
    final = [
        replace(aw, role=Role.CONFIRM, examples_per_s=1188.0),
        replace(autotune, role=Role.CONFIRM, examples_per_s=1933.0),  # the same config, luckier
        replace(other, role=Role.CONFIRM, examples_per_s=1100.0),
    ]
    best, confirm, note, close = choose_final(records, aw, autotune, final, Objective.THROUGHPUT)
    assert best is aw and confirm is None and close is None, (best, note)
    # A real change that holds up still wins beside it.
    final[2] = replace(other, role=Role.CONFIRM, examples_per_s=1900.0)
    best, confirm, _, _ = choose_final(records, aw, autotune, final, Objective.THROUGHPUT)
    assert best is other and confirm is not None
