"""Spending less on tuning: --trials auto, reused twins, successive halving, the guided
guess for a compute-bound script and the break-even figures (no TensorFlow, no
subprocess: an injected runner over a model of the script)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from studykit import BATCH, MAP, settings, space

from tftune.core.trial_notes import ReusedMeasurement
from tftune.core.vocabulary import TrialState
from tftune.reports.tuning_model import break_even_sentence
from tftune.testing import FakeRunner
from tftune.tuner.option_defaults import DEFAULT_TRIALS
from tftune.tuner.output.breakeven import break_even
from tftune.tuner.searchspace.config import AUTOTUNE, Config, SiteConfig
from tftune.tuner.study import (
    Objective,
    Role,
    TrialRecord,
    run_study,
    trial_budget,
)
from tftune.tuner.study.baselines import guided_params
from tftune.tuner.study.contract import AUTO_PATIENCE, GuidedHint
from tftune.tuner.study.stopping import stop_reason, twin_of


def plateau(config: Config) -> float:
    """Any parallel map reaches the same rate: nothing is left to find after it."""
    s = config.sites.get(MAP) or SiteConfig()
    return 1000.0 if s.num_parallel_calls in (None, 1) else 4000.0


def runs(model: Callable[[Config], float]) -> FakeRunner:
    """The shared fake over `model`: three windows a run, the consumer waiting 10%."""
    return FakeRunner(model, input_wait_share=0.1)


def rec(
    n: int, role: Role, eps: float | None, state: TrialState = TrialState.COMPLETE
) -> TrialRecord:
    return TrialRecord(n, role, state, {"p": n}, "", eps, 0.5, spread=0.02, feasible=True)


# --- --trials auto ----------------------------------------------------------------------


def test_trials_auto_means_at_most_twenty_with_patience() -> None:
    assert trial_budget("auto") == (DEFAULT_TRIALS, AUTO_PATIENCE)
    assert trial_budget(7) == (7, None)


def test_the_search_goes_on_while_trials_still_gain() -> None:
    recs = [rec(0, Role.AS_WRITTEN, 100.0), rec(1, Role.AUTOTUNE, 200.0)]
    recs += [rec(2 + i, Role.SEARCH, 300.0 * 1.1**i) for i in range(6)]  # +10% each
    assert stop_reason(recs, Objective.THROUGHPUT, 4) is None


def test_the_search_stops_after_patience_trials_without_a_gain_beyond_the_noise() -> None:
    recs = [
        rec(0, Role.AS_WRITTEN, 100.0),
        rec(1, Role.AUTOTUNE, 200.0),
        rec(2, Role.SEARCH, 500.0),
    ]
    recs += [rec(3, Role.SEARCH, 535.0), rec(4, Role.SEARCH, 90.0)]  # +7%: within the noise
    recs += [rec(5, Role.SEARCH, None, TrialState.FAILED)]
    assert stop_reason(recs, Objective.THROUGHPUT, 4) is None  # 3 so far
    recs.append(rec(6, Role.SEARCH, 250.0, TrialState.PRUNED))
    why = stop_reason(recs, Objective.THROUGHPUT, 4)
    assert why is not None
    assert "the last 4 gained nothing beyond the noise (8%)" in why
    assert "trial 2's 500.0 ex/s" in why and "after 7 trials" in why


def test_baselines_do_not_use_up_the_patience() -> None:
    recs = [rec(0, Role.AS_WRITTEN, 100.0)]
    recs += [
        rec(i, r, 100.0) for i, r in enumerate((Role.AUTOTUNE, Role.HEURISTIC, Role.GUIDED), 1)
    ]
    recs += [rec(4, Role.SEARCH, 100.0)]
    assert stop_reason(recs, Objective.THROUGHPUT, 2) is None


def test_auto_stops_a_plateaued_search_early_and_says_why(tmp_path: Path) -> None:
    runner = runs(plateau)
    out = run_study(space(), runner, settings(tmp_path, n_trials=20, patience=4))
    searched = [r for r in out.records if r.role is Role.SEARCH]
    assert len(searched) == 4, [r.examples_per_s for r in out.records]
    assert out.stop_reason.startswith("stopped after 8 trials: the last 4 gained nothing")
    assert (out.best.examples_per_s or 0) == 4000.0


def test_fixed_trials_run_to_the_end_and_say_so(tmp_path: Path) -> None:
    out = run_study(space(), runs(plateau), settings(tmp_path, n_trials=9, confirm=False))
    assert len(out.records) == 9
    assert out.stop_reason == "ran the 9 trials asked for (--trials 9)"


# --- twins: a config measured again is not run again -------------------------------------


def test_a_twin_reuses_the_complete_measurement_only() -> None:
    done = TrialRecord(3, Role.SEARCH, TrialState.COMPLETE, {"a": 1}, "", 10.0)
    pruned = TrialRecord(2, Role.SEARCH, TrialState.PRUNED, {"a": 2}, "", 1.0)
    confirm = TrialRecord(3, Role.CONFIRM, TrialState.COMPLETE, {"a": 3}, "", 1.0)
    assert twin_of([done, pruned, confirm], {"a": 1}) is done
    assert twin_of([done, pruned, confirm], {"a": 2}) is None  # one short window: again
    assert twin_of([done, pruned, confirm], {"a": 3}) is None


def test_tpe_coming_back_to_a_config_costs_no_run(tmp_path: Path) -> None:
    from tftune.tuner.searchspace.screen import PIPELINE_FIELDS

    # 16 configs in all: 20 trials of a plateau sample some twice.
    small = space().narrowed(PIPELINE_FIELDS, "as written or AUTOTUNE")
    runner = runs(plateau)
    out = run_study(small, runner, settings(tmp_path, n_trials=20, confirm=False))
    twins = [r for r in out.records if r.notes and ReusedMeasurement.read(r.notes[0])]
    assert twins, "TPE never sampled a measured config again in 20 trials of a plateau"
    assert len(runner.configs) == len(out.records) - len(twins)
    for t in twins:
        first = next(r for r in out.records if r.number < t.number and r.params == t.params)
        assert t.examples_per_s == first.examples_per_s and t.wall_s == 0.0
    assert out.ran_this_session == len(out.records)


# --- successive halving -----------------------------------------------------------------


def test_search_trials_behind_after_one_window_stop_there(tmp_path: Path) -> None:
    """Only the best first windows go on; baselines always run all their windows."""
    rates = iter([1000.0, 1500.0, 2000.0, 2500.0] + [1200.0 + 10 * i for i in range(8)])
    runner = runs(lambda _c: next(rates))
    out = run_study(space(), runner, settings(tmp_path, n_trials=12, confirm=False))
    assert [r.windows for r in runner.runs[:4]] == [3, 3, 3, 3]
    halved = [r for r in out.records if "successive halving" in (r.reason or "")]
    assert halved and all(r.role is Role.SEARCH and len(r.repeats) == 1 for r in halved)
    assert all(r.state is TrialState.PRUNED for r in halved)


def test_a_first_window_within_the_search_gain_of_the_best_is_measured_to_its_end(
    tmp_path: Path,
) -> None:
    """Halving keeps the best quarter of first windows; a window within 8% of the best
    one is not told apart from it by the search either, so it goes on, while one far
    behind stops after that window."""
    rates = [1000.0, 1500.0, 2000.0, 2500.0, 2350.0, 1400.0, 2400.0, 1380.0]
    it = iter(rates)
    runner = runs(lambda _c: next(it))
    run_study(space(), runner, settings(tmp_path, n_trials=len(rates), confirm=False))
    windows = dict(zip(rates, (r.windows for r in runner.runs), strict=False))
    assert len(runner.runs) == len(rates)  # no twin: every trial ran
    assert windows[2350.0] == 3 and windows[2400.0] == 3  # 0.94x and 0.96x the best
    assert windows[1400.0] == 1 and windows[1380.0] == 1


# --- the guided guess for a compute-bound script ------------------------------------------


def test_a_compute_bound_guess_tries_a_larger_batch() -> None:
    aw = TrialRecord(0, Role.AS_WRITTEN, TrialState.COMPLETE, {}, "", 100.0, input_wait_share=0.01)
    params, why = guided_params(space(), aw, 2, GuidedHint(0.01))
    assert params[f"{BATCH}/batch_size"] == 64
    assert params[f"{MAP}/num_parallel_calls"] == AUTOTUNE
    assert "not input-bound (1% wait, from the profile)" in why and "batch 64" in why


# --- break-even ---------------------------------------------------------------------------


def test_break_even_arithmetic() -> None:
    be = break_even(120.0, 1000.0, 4000.0)  # the same examples in a quarter of the time
    assert be.saved_s_per_hour == pytest.approx(2700.0)
    assert be.pays_off_after_s == pytest.approx(160.0)
    assert break_even(120.0, 1000.0, 990.0).to_json()["pays_off_after_s"] is None
    assert break_even(120.0, 1000.0, None).saved_s_per_hour is None
    odd = break_even(100.0 / 3, 1000.0 / 3, 4000.0 / 3)  # rounded as the JSON writes it
    assert (odd.tuning_s, odd.as_written_examples_per_s, odd.pays_off_after_s) == (
        33.33,
        333.33,
        44.44,
    )


def test_break_even_in_words() -> None:
    words = break_even_sentence(break_even(120.0, 1000.0, 4000.0))
    assert words == (
        "Tuning took 2.0 min; at the measured rates (1,000.0 → 4,000.0 ex/s) the winner saves "
        "45.0 min of every hour of training, and has paid for itself after 2.7 min of training."
    )
    kept = break_even_sentence(break_even(75.0, 1000.0, None))
    assert (
        kept == "Tuning took 75 s; the script as written stays, so there is nothing to pay it back."
    )
    assert break_even_sentence(None) is None


# --- the pipeline screen's configs: the guided guess and the first search trials ----------


def test_an_input_bound_guess_is_the_screens_best_config() -> None:
    sp = space()
    best = sp.params_for({"num_parallel_calls": 64, "threadpool_size": 64})
    aw = TrialRecord(0, Role.AS_WRITTEN, TrialState.COMPLETE, {}, "", 100.0)
    params, why = guided_params(sp, aw, 2, GuidedHint(0.9), [best])
    assert (
        params == best
        and why == "input-bound (90% wait, from the profile): the pipeline screen's best config"
    )
    params, _ = guided_params(sp, aw, 2, GuidedHint(0.01), [best])  # the step is the limit
    assert params != best and params[f"{BATCH}/batch_size"] == 64


def test_screened_configs_are_the_first_search_trials(tmp_path: Path) -> None:
    sp = space()
    seeds = tuple(sp.params_for({"num_parallel_calls": p, "threadpool_size": p}) for p in (64, 16))
    hint = GuidedHint(0.9)
    runner = runs(plateau)
    out = run_study(
        sp,
        runner,
        settings(tmp_path, n_trials=7, confirm=False, seeds=seeds, screened=True, hint=hint),
    )
    roles = [r.role for r in out.records]
    # The screen drained the #cores heuristic's pipeline: it gets no trial of its own.
    assert roles[:4] == [Role.AS_WRITTEN, Role.GUIDED, Role.AUTOTUNE, Role.SEARCH]
    assert Role.HEURISTIC not in roles
    guided = next(r for r in out.records if r.role is Role.GUIDED)
    assert guided.params == seeds[0]  # the screen's best is the guided trial ...
    # ... and the next screened config and the profile's own guess come right after it.
    profile_guess = guided_params(sp, out.records[0], 2, hint)[0]
    assert [dict(r.params) for r in out.records[3:5]] == [seeds[1], profile_guess]


def test_a_compute_bound_script_is_told_so_before_any_pipeline_trial(tmp_path: Path) -> None:
    moves = ("use 16-bit precision (keras.mixed_precision.set_global_policy(...))", "XLA")
    hint = GuidedHint(0.02, next_moves=moves)
    events: list[str] = []
    out = run_study(
        space(), runs(plateau), settings(tmp_path, n_trials=5, confirm=False, hint=hint),
        on_note=events.append, on_trial=lambda r, _b: events.append(f"trial {r.role.value}"),
    )  # fmt: skip
    said = next(n for n in out.notes if n.startswith("The input pipeline is not the limit"))
    assert said.endswith("Next moves for the step: 1) " + moves[0] + "; 2) XLA")
    assert events.index(said) < events.index("trial search")  # before pipeline trials


def test_seeds_beyond_the_budget_are_not_left_waiting_in_the_study(tmp_path: Path) -> None:
    import optuna

    from tftune.tuner.study import open_storage

    sp = space()
    seeds = tuple(sp.params_for({"num_parallel_calls": p, "threadpool_size": p}) for p in (64, 16))
    s = settings(tmp_path, n_trials=5, confirm=False, seeds=seeds, hint=GuidedHint(0.9))
    out = run_study(sp, runs(plateau), s)
    assert len(out.records) == 5
    study = optuna.load_study(study_name="t", storage=open_storage(s.storage)[0])
    assert [t.state.name for t in study.get_trials()].count("WAITING") == 0


def test_a_pipeline_far_faster_than_the_model_gets_the_compute_bound_guess() -> None:
    from tftune.tuner.searchspace.bounds import Ceiling
    from tftune.tuner.searchspace.guided import with_bounds

    sp = space()
    aw = TrialRecord(0, Role.AS_WRITTEN, TrialState.COMPLETE, {}, "", 100.0)
    best = sp.params_for({"num_parallel_calls": 64, "threadpool_size": 64})
    profiled = GuidedHint(0.07)  # "moderately input-bound" by the profile's wait alone
    assert with_bounds(profiled, Ceiling(10_000.0, 9_000.0)) is profiled
    hint = with_bounds(profiled, Ceiling(56_000.0, 6_500.0))
    assert hint is not None and hint.model_bound and hint.input_share == 0.07
    params, why = guided_params(sp, aw, 2, hint, [best])
    assert params != best and params[f"{BATCH}/batch_size"] == 64
    assert why.startswith("not input-bound (7% wait, from the profile; the pipeline alone")
    assert with_bounds(None, Ceiling(56_000.0, 6_500.0)) == GuidedHint(
        None, source="bound analysis", model_bound=True
    )


# --- the batch ladder: a larger batch that gained is doubled again -----------------------


def per_step_bound(config: Config) -> float:
    """A loop that pays 1 ms a step whatever its batch: examples/s grow with the batch."""
    s = config.sites.get(BATCH) or SiteConfig()
    return 1000.0 * (s.batch_size or 32)


def test_a_batch_that_gained_is_doubled_in_the_next_trial(tmp_path: Path) -> None:
    from tftune.tuner.study.ladder import LADDER_ATTR, next_rungs

    sp = space()
    batch = f"{BATCH}/batch_size"
    seeds = (sp.params_for({"num_parallel_calls": 8}),)
    doubled = {**seeds[0], batch: 64}
    out = run_study(
        sp,
        runs(per_step_bound),
        settings(tmp_path, n_trials=8, confirm=False, seeds=(seeds[0], doubled), patience=3),
    )
    by_batch = {}  # the first searched trial of each batch size
    for r in out.records:
        if r.role is Role.SEARCH:
            by_batch.setdefault(r.params[batch], r)
    # The seed at 64 gained 2x over the best before it: 128 (the largest offered) came
    # right after it, ahead of the seed still pending, with the seed's other knobs, and won.
    climbed = by_batch[128]
    assert climbed.number == by_batch[64].number + 1
    assert {k: v for k, v in climbed.params.items() if k != batch} == {
        k: v for k, v in doubled.items() if k != batch
    }
    assert out.best.examples_per_s == climbed.examples_per_s == 128_000.0
    # No rung past the largest batch, nor from a trial that gained some other way.
    assert all(r[0] != LADDER_ATTR for r in next_rungs(out.records, sp, out.objective))
    assert LADDER_ATTR == "batch_ladder"


# --- the pool ladder: a new best that fills its thread pool gets the next pool -----------


def test_a_best_that_fills_its_pool_is_tried_next_in_a_larger_pool_with_autotune(
    tmp_path: Path,
) -> None:
    from studykit import latency_bound

    from tftune.testing import FakeRunner
    from tftune.tuner.study.ladder import POOL_LADDER_ATTR, next_rungs, with_larger_pool

    sp = space()
    par, pool = f"{MAP}/num_parallel_calls", "threadpool_size"
    full = sp.params_for({"num_parallel_calls": 32, "threadpool_size": 32})
    out = run_study(
        sp,
        FakeRunner(latency_bound),
        settings(tmp_path, n_trials=5, confirm=False, seeds=(full,), screened=True, patience=3),
    )
    # The screen's seed (parallelism 32 filling a pool of 32) was the guided trial and a
    # new best; AUTOTUNE in a pool of 64 came next after the baselines, and won.
    guided = next(r for r in out.records if r.role is Role.GUIDED)
    assert dict(guided.params) == full
    climbed = next(r for r in out.records if dict(r.params) == {**full, par: AUTOTUNE, pool: 64})
    assert climbed.number == max(r.number for r in out.records if r.role is not Role.SEARCH) + 1
    assert out.best.number == climbed.number and climbed.examples_per_s == 250.0 * 64
    # No rung past the largest pool, nor from a site at AUTOTUNE.
    assert all(r[0] != POOL_LADDER_ATTR for r in next_rungs(out.records, sp, out.objective))
    assert with_larger_pool(sp, {**full, pool: 64, par: 64}) is None
    assert with_larger_pool(sp, {**full, par: AUTOTUNE}) is None
    # The default pool has the core count's threads: parallelism 2 fills it.
    two = sp.params_for({"num_parallel_calls": 2})
    assert two[pool] is None
    assert with_larger_pool(sp, two) == {**two, pool: 4, par: AUTOTUNE}


def test_a_seed_that_repeats_a_config_measured_before_it_is_left_out(tmp_path: Path) -> None:
    from tftune.tuner.study.baselines import baseline_params

    sp = space()
    best = sp.params_for({"num_parallel_calls": 8, "threadpool_size": 8})
    other = sp.params_for({"num_parallel_calls": 16, "threadpool_size": 16})
    auto = baseline_params(sp, Role.AUTOTUNE, 2)
    seeds = (best, dict(best), auto, other)  # the screen's best is the guided trial
    out = run_study(
        sp,
        runs(plateau),
        settings(tmp_path, n_trials=5, confirm=False, seeds=seeds, screened=True),
    )
    roles = [r.role for r in out.records]
    assert roles[:3] == [Role.AS_WRITTEN, Role.GUIDED, Role.AUTOTUNE]
    searched = [dict(r.params) for r in out.records[3:]]
    # The seeds after the guided one: not the guided config again, nor AUTOTUNE.
    assert other in searched and best not in searched and auto not in searched, searched


def test_a_window_that_beats_the_best_complete_trial_is_never_halved() -> None:
    from tftune.tuner.study.objective import prune_guard

    def would_prune(_index: int, _eps: float) -> bool:
        return True  # the pruner compares with a first window that read high

    why: list[str] = []
    guard = prune_guard(Objective.THROUGHPUT, Role.SEARCH, 500.0, 1000.0, why, would_prune)
    assert guard(0, 1100.0) is True and not why  # above the best complete trial
    assert guard(0, 900.0) is False and "successive halving" in why[-1]


def test_a_batch_rung_is_measured_to_its_end() -> None:
    from tftune.tuner.study.objective import prune_guard

    why: list[str] = []
    guard = prune_guard(
        Objective.THROUGHPUT, Role.SEARCH, 500.0, 1000.0, why, lambda _i, _e: True, rung=True
    )
    assert guard(0, 900.0) is True and not why
    assert guard(0, 400.0) is False  # far below the best (half of it) still stops it


def test_near_the_best_allows_the_measured_noise() -> None:
    from types import SimpleNamespace

    from tftune.tuner.study.objective import near_the_best

    other = SimpleNamespace(number=0, intermediate_values={1: 1000.0})
    study = SimpleNamespace(get_trials=lambda deepcopy: [other])
    trial = SimpleNamespace(number=1, study=study)
    assert near_the_best(trial, 1, 930.0)  # within 8%
    assert not near_the_best(trial, 1, 850.0)
    assert near_the_best(trial, 1, 850.0, noise=0.2)  # the as-written runs spread 20%


def test_a_resumed_study_already_done_ends_cleanly(tmp_path: Path) -> None:
    """--trials auto stopped a study; run again on its storage, it is done before TPE
    samples anything: the search phase stops there and says why (Optuna refuses
    `Study.stop` outside its optimize loop: this raised RuntimeError)."""
    first = run_study(space(), runs(plateau), settings(tmp_path, n_trials=20, patience=2))
    assert "gained nothing" in first.stop_reason
    again = run_study(space(), runs(plateau), settings(tmp_path, n_trials=20, patience=2))
    assert again.stop_reason.startswith("stopped after"), again.stop_reason
    assert "gained nothing" in again.stop_reason
    assert len([r for r in again.records if r.role is Role.SEARCH]) == len(
        [r for r in first.records if r.role is Role.SEARCH]
    )


def test_auto_stops_once_every_configuration_of_the_space_was_measured(tmp_path: Path) -> None:
    """A pipeline that is not the limit is searched between as written and AUTOTUNE only;
    where the script already is AUTOTUNE, the space holds one configuration: the
    baselines measure it (the others are its twins), and the search stops there instead
    of sampling it again until its patience runs out."""
    from dataclasses import replace

    from tftune.tuner.searchspace.space import SearchSpace
    from tftune.tuner.study.stopping import exhausted

    par = space().knob(f"{MAP}/num_parallel_calls")
    one = SearchSpace((replace(par, choices=(AUTOTUNE,), as_written=AUTOTUNE),), cores=2)
    runner = runs(plateau)
    out = run_study(one, runner, settings(tmp_path, n_trials=20, patience=4))
    assert len(runner.configs) == 1  # the script as written, run once
    # The baselines ran (twins of the script as written), and no search trial after them.
    roles = [r.role for r in out.records]
    assert roles == [Role.AS_WRITTEN, Role.GUIDED, Role.AUTOTUNE, Role.HEURISTIC], roles
    assert out.stop_reason.endswith("the one configuration of the search space measured")
    recs = [rec(0, Role.AS_WRITTEN, 100.0), rec(1, Role.SEARCH, 120.0)]
    assert exhausted(recs, 3) is None
    assert (
        exhausted(recs, 2)
        == "stopped after 2 trials: all 2 configurations of the search space measured"
    )
