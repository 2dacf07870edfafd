"""The rewrites' rung (`study.ladder.rewrite_rung`): a rewrite that gained alone over the
script as written joins the best config so far, measured next (pure, no TensorFlow)."""

from __future__ import annotations

from tftune.core.tuning_rewrites import RewriteState
from tftune.core.vocabulary import TrialState
from tftune.probes.live.epoch_stall import PipelineStage
from tftune.tuner.fixes.rewrite_check import with_rewrites
from tftune.tuner.fixes.rewrites import consider
from tftune.tuner.fixes.training_calls import LOOP_EAGER
from tftune.tuner.searchspace.config import CACHE_MEMORY, SiteConfig
from tftune.tuner.searchspace.space import KnobValue, SearchSpace
from tftune.tuner.searchspace.space_build import build_space
from tftune.tuner.study.contract import Objective, Role, TrialRecord
from tftune.tuner.study.ladder import REWRITE_LADDER_ATTR, next_rungs, rewrite_rung
from tftune.tuner.trial.discovery import CallSite

MAP = "train.py:20"
CACHE = f"{MAP}/cache"
PAR = f"{MAP}/num_parallel_calls"


def _space() -> SearchSpace:
    space = build_space([CallSite(MAP, "map", (), SiteConfig(), None, 1)], cores=2)
    chain = (
        PipelineStage("source", None, elements=2000),
        PipelineStage("map", MAP, python=True, elements=2000),
        PipelineStage("shuffle", "train.py:21", elements=2000),
        PipelineStage("batch", "train.py:22", elements=63),
    )
    found, _ = consider(chain, LOOP_EAGER)
    rows = [c.row(RewriteState.CHECKED, "ok") for c in found]
    return with_rewrites(space, rows, {CACHE: CACHE_MEMORY}, found)


def _rec(n: int, role: Role, eps: float, params: dict[str, KnobValue]) -> TrialRecord:
    return TrialRecord(
        n, role, TrialState.COMPLETE, params, "", eps, 0.5, spread=0.02, feasible=True
    )


def test_a_rewrite_that_gained_alone_joins_the_best_config() -> None:
    space = _space()
    written = space.as_written_params()
    records = [
        _rec(0, Role.AS_WRITTEN, 100.0, written),
        _rec(1, Role.SEARCH, 150.0, {**written, PAR: 4}),  # the knobs' best
        _rec(2, Role.SEARCH, 140.0, {**written, CACHE: CACHE_MEMORY}),  # the cache alone
    ]
    rung = rewrite_rung(records, space, Objective.THROUGHPUT)
    assert rung == (2, {**written, PAR: 4, CACHE: CACHE_MEMORY})
    (attr, start, params) = next_rungs(records, space, Objective.THROUGHPUT)[-1]
    assert (attr, start) == (REWRITE_LADDER_ATTR, 2) and params[CACHE] == CACHE_MEMORY
    # Measured already: no rung.
    done = [*records, _rec(3, Role.SEARCH, 210.0, {**written, PAR: 4, CACHE: CACHE_MEMORY})]
    assert rewrite_rung(done, space, Objective.THROUGHPUT) is None


def test_a_rewrite_within_the_noise_of_the_script_as_written_joins_nothing() -> None:
    space = _space()
    written = space.as_written_params()
    records = [
        _rec(0, Role.AS_WRITTEN, 100.0, written),
        _rec(1, Role.SEARCH, 150.0, {**written, PAR: 4}),
        _rec(2, Role.SEARCH, 103.0, {**written, CACHE: CACHE_MEMORY}),  # +3%: noise
    ]
    assert rewrite_rung(records, space, Objective.THROUGHPUT) is None
    best_with_it = [
        _rec(0, Role.AS_WRITTEN, 100.0, written),
        _rec(1, Role.SEARCH, 180.0, {**written, CACHE: CACHE_MEMORY}),  # it is the best
    ]
    assert rewrite_rung(best_with_it, space, Objective.THROUGHPUT) is None
