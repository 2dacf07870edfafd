"""A baseline whose config is the script as written (a script already AUTOTUNE
everywhere) is the script as written: never re-measured as a contender, never the
winner, never a speed-up. Noise between two runs of one config once read 1.63x."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tftune.core.trial_notes import ReusedMeasurement
from tftune.core.vocabulary import TrialState
from tftune.testing import FakeRunner
from tftune.tuner.searchspace.config import AUTOTUNE, Config, SiteConfig
from tftune.tuner.searchspace.space_build import build_space
from tftune.tuner.study import StudySettings, run_study
from tftune.tuner.study.contract import Objective, Role, TrialRecord
from tftune.tuner.study.round_plan import final_candidates
from tftune.tuner.study.winner import choose_final
from tftune.tuner.trial.discovery import CallSite

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


def test_a_baseline_with_the_as_written_config_is_not_run_again(tmp_path: Path) -> None:
    """A script already AUTOTUNE everywhere: the AUTOTUNE baseline is the script as
    written, so it reuses that trial's measurement instead of a second run, which a
    runner whose every other run reads 60% higher (noise) would have made a winner."""
    sites = [
        CallSite("train.py:10", "map", (), SiteConfig(num_parallel_calls=AUTOTUNE), None, 1),
        CallSite("train.py:11", "prefetch", (), SiteConfig(buffer_size=AUTOTUNE), None, 1),
    ]
    space = build_space(sites, cores=2)  # type: ignore[arg-type]
    runs = [0]

    def noisy(config: Config) -> float:
        runs[0] += 1
        return 1000.0 * (1.6 if runs[0] % 2 == 0 else 1.0)

    runner = FakeRunner(noisy)
    settings = StudySettings(storage=str(tmp_path / "s.journal"), study_name="t", n_trials=4)
    out = run_study(space, runner, settings)
    autotune = next(r for r in out.records if r.role is Role.AUTOTUNE)
    assert dict(autotune.params) == dict(out.baselines[Role.AS_WRITTEN].params)
    assert any(ReusedMeasurement.read(n) for n in autotune.notes), autotune.notes
    assert autotune.examples_per_s == out.baselines[Role.AS_WRITTEN].examples_per_s
    assert out.best.role is not Role.AUTOTUNE
