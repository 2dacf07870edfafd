"""The rule that no fix the trace shows already in place is recommended, on handwritten
stage trees (each case is one knob the trace can show)."""

from __future__ import annotations

from typing import Any

import pytest

from tftune.core.vocabulary import stage_kind, stage_parent
from tftune.probes.advice.findings import find
from tftune.probes.advice.read_fixes import prefetch_rec
from tftune.probes.advice.recommendations import (
    Change,
    ChangeKind,
    Recommendation,
    at_site,
    in_place,
)
from tftune.probes.traces.stages import Stage, StageTree

MS = 1_000_000_000


def _stage(name: str, *, fn_ops: tuple[tuple[str, int], ...] = (), **knobs: Any) -> Stage:
    fn_ps = sum(ps for _, ps in fn_ops)
    return Stage(
        name=name,
        kind=stage_kind(name),
        parent=stage_parent(name),
        depth=name.count("::") - 1,
        id=None,
        parent_id=None,
        op=None,
        types=None,
        calls=100,
        total_ps=fn_ps + MS,
        self_ps=fn_ps + MS,
        work_ps=fn_ps + MS,
        active_ps=fn_ps + MS,
        wait_ps=None,
        function_ps=fn_ps,
        function_calls=100 if fn_ops else 0,
        ops_ps=fn_ops,
        op_nodes=(),
        python_frames=(),
        function_names=(),
        udf_concurrency=None,
        is_async=False,
        blocking=True,
        bottleneck=False,
        knobs={"cpu_budget": 2, **knobs},
    )


def _rec(stage: str | None, change: Change | None) -> Recommendation:
    return Recommendation("fix", "ds = ...", 0.5, "preprocessing", stage, change=change)


MAP = "Iterator::Root::ParallelMapV2"
PARALLEL = Change(ChangeKind.PARALLEL_CALLS)


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [({"parallelism": 2, "autotune": True}, True), ({}, True), ({"parallelism": 1}, False)],
)
def test_parallel_map_is_not_told_to_add_parallelism(knobs: dict[str, Any], expected: bool) -> None:
    # A ParallelMapV2 whose parallelism the trace missed is parallel all the same.
    tree = StageTree((_stage("Iterator::Root"), _stage(MAP, **knobs)), 10 * MS)
    assert (in_place(_rec(MAP, PARALLEL), tree) is not None) is expected
    # Rewriting the function is no knob change, whatever the parallelism.
    assert in_place(_rec(MAP, None), tree) is None


def test_a_fix_at_the_users_line_keeps_its_change() -> None:
    """`in_place` reads a fix's change, never its code: a fix tied to the user's line
    (the site prefixed, the function renamed) is the same change."""
    stage = _stage(MAP, parallelism=4)
    tree = StageTree((_stage("Iterator::Root"), stage), 10 * MS)
    fix = at_site(_rec(MAP, PARALLEL), "t.py:3", "aug")
    assert fix.code.startswith("# t.py:3") and fix.change == PARALLEL
    assert in_place(fix, tree) is not None
    prefetch = prefetch_rec(tree, 0.5, 0.3)
    assert prefetch is not None and prefetch.change == Change(ChangeKind.FINAL_PREFETCH)


def test_prefetch_already_last_is_not_recommended() -> None:
    pre = "Iterator::Root::Prefetch"
    with_prefetch = StageTree((_stage("Iterator::Root"), _stage(pre, buffer_limit=8)), MS)
    without = StageTree((_stage("Iterator::Root"), _stage("Iterator::Root::MapAndBatch")), MS)
    final = Change(ChangeKind.FINAL_PREFETCH)
    assert in_place(_rec(pre, final), with_prefetch) is not None
    assert in_place(_rec(None, final), without) is None
    assert prefetch_rec(with_prefetch, 0.5, 0.3) is None


def test_threadpool_interleave_and_cache_already_there() -> None:
    inter = "Iterator::Root::ParallelInterleaveV4"
    tree = StageTree(
        (
            _stage("Iterator::Root"),
            _stage(inter, parallelism=8, cycle_length=16, threadpool_size=32),
            _stage("Iterator::Root::ParallelInterleaveV4::MemoryCache"),
        ),
        MS,
    )
    assert in_place(_rec(inter, Change(ChangeKind.THREADPOOL, 32)), tree) is not None
    assert in_place(_rec(inter, Change(ChangeKind.THREADPOOL, 64)), tree) is None
    assert in_place(_rec(inter, Change(ChangeKind.CYCLE_LENGTH, 8)), tree) is not None
    assert in_place(_rec(inter, Change(ChangeKind.CYCLE_LENGTH, 32)), tree) is None
    assert in_place(_rec(inter, Change(ChangeKind.CACHE)), tree) is not None


def test_find_drops_the_parallelism_fix_for_an_already_parallel_map() -> None:
    """End to end through `find`: CPU-bound work in a ParallelMapV2 at parallelism 2 on 2
    cores gets no `num_parallel_calls` fix."""
    work = (("Conv2D", 40 * MS), ("Tanh", 20 * MS))
    tree = StageTree(
        (_stage("Iterator::Root"), _stage(MAP, fn_ops=work, parallelism=2, threadpool_size=2)),
        100 * MS,
    )
    f = find(tree, 0.6, 0.6, {"host_compute": 0.3}, "CPU", "markers")
    assert f.bottlenecks and f.bottlenecks[0].category == "preprocessing"
    assert not any(r.code.startswith("ds = ds.map(fn, num_parallel") for r in f.recommendations)
    assert all(in_place(r, tree) is None for r in f.recommendations)


def test_flat_map_over_files_gets_the_parallel_interleave() -> None:
    from tftune.probes.advice.read_fixes import file_open_recs
    from tftune.probes.traces.input_work import StageWork, opens_files

    flat = "Iterator::Root::FlatMap"
    opener = _stage(flat, fn_ops=(("TFRecordDataset", 30 * MS),))
    tree = StageTree((_stage("Iterator::Root"), opener, _stage(flat + "::TFRecord")), MS)
    assert opens_files(opener, tree.stages)
    assert not opens_files(_stage("Iterator::Root::FlatMap"), (opener,))  # no reader below
    first, merge = file_open_recs(StageWork(opener, {"io": opener.work_ps}, None, {}), 0.8, 2)
    assert "flat_map" in first.summary and "num_parallel_calls=tf.data.AUTOTUNE" in first.code
    assert "deterministic=False" in first.code and first.gain > merge.gain
    # Already parallel over 16 files: only the larger-files fix is left.
    par = _stage(
        "Iterator::Root::ParallelInterleaveV4", fn_ops=(("X", MS),), parallelism=8, cycle_length=16
    )
    (only,) = file_open_recs(StageWork(par, {"io": par.work_ps}, None, {}), 0.8, 2)
    assert "larger files" in only.summary


def _facts(**kw: Any) -> Any:
    from tftune.probes.advice.next_moves import StepFacts

    base: dict[str, Any] = dict(
        device="GPU",
        steps=20,
        step_ms=10.0,
        ops_per_step=40.0,
        mean_op_us=200.0,
        busy_share=0.9,
        host_overhead_share=0.0,
        step_function="train_step",
        keras=False,
        compute_capability=(8, 0),
    )
    return StepFacts(**{**base, **kw})


@pytest.mark.parametrize(
    ("cap", "policy", "fast"),
    [((8, 0), "mixed_bfloat16", True), ((7, 5), "mixed_float16", True), ((6, 1), "", False)],
)
def test_precision_move_follows_the_gpus_16_bit_hardware(
    cap: tuple[int, int], policy: str, fast: bool
) -> None:
    from tftune.probes.advice.next_moves import moves_from

    (move,) = moves_from(_facts(compute_capability=cap), {"device_compute": 0.9}, 0.01)
    assert move.kind == "precision" and policy in move.code
    assert ("no tensor cores" in move.summary) is not fast
    assert move.evidence["compute_capability"] == f"{cap[0]}.{cap[1]}"


def test_next_moves_need_a_run_that_is_not_input_bound() -> None:
    from tftune.probes.advice.next_moves import moves_from

    facts = _facts(
        ops_per_step=800.0,
        mean_op_us=5.0,
        busy_share=0.3,
        keras=True,
        host_overhead_share=0.2,
        step_function="multi_step_on_iterator",
    )
    assert moves_from(facts, {"device_compute": 0.6}, 0.3) == ()
    assert moves_from(facts, {"device_compute": 0.6}, None) == ()
    kinds = {m.kind for m in moves_from(facts, {"device_compute": 0.6}, 0.01)}
    assert kinds == {"precision", "xla", "batch_size", "steps_per_execution"}


@pytest.mark.parametrize("opener", ["FlatMap", "Interleave"])
def test_a_reader_fed_one_file_at_a_time_gets_a_parallel_read_fix(opener: str) -> None:
    """Large files through flat_map or interleave(cycle_length=1): the reader is the
    busiest io stage; its fix reads several files at once (under an interleave: that
    interleave's own fix)."""
    top_name = f"Iterator::Root::{opener}"
    reader = _stage(top_name + "::TFRecord")
    reader = Stage(
        **{
            **{f: getattr(reader, f) for f in Stage.__slots__},
            "work_ps": 80 * MS,
            "self_ps": 80 * MS,
        }
    )
    tree = StageTree(
        (_stage("Iterator::Root"), _stage(top_name, fn_ops=(("TFRecordDataset", MS),)), reader),
        100 * MS,
    )
    f = find(tree, 0.9, 0.9, {"host_compute": 0.05}, "CPU", "markers")
    top = f.bottlenecks[0]
    assert top.category == "io" and top.stage == reader.name
    rec = top.recommendation
    assert rec is not None and "interleave(" in rec.code and "num_parallel_calls" in rec.code
    if opener == "Interleave":
        assert rec.stage == top_name and "deterministic=False" in rec.code


def test_distributed_prefetch_goes_under_the_rebatch_unless_in_place() -> None:
    """TF 2.21's experimental_distribute_dataset: Prefetch::Rebatch over the user's
    pipeline, beside the MultiDeviceIterator's per-replica Generator."""
    from tftune.probes.advice.read_fixes import distributed_prefetch_rec
    from tftune.probes.advice.recommendations import distributed_iterator_stage

    top = "Iterator::Root::Prefetch"
    gen, reb = _stage(top + "::Generator"), _stage(top + "::Rebatch")
    common = (_stage("Iterator::Root"), _stage(top), gen, reb)
    assert distributed_iterator_stage(gen) and not distributed_iterator_stage(reb)
    bare = StageTree((*common, _stage(top + "::Rebatch::BatchV2")), 100 * MS)
    r = distributed_prefetch_rec(bare, 0.1)
    assert r.kind == "distributed_prefetch" and r.stage == top + "::Rebatch::BatchV2"
    assert "strategy.experimental_distribute_dataset(ds)" in r.code
    assert in_place(r, bare) is None
    done = StageTree(
        (
            *common,
            _stage(top + "::Rebatch::Prefetch"),
            _stage(top + "::Rebatch::Prefetch::BatchV2"),
        ),
        100 * MS,
    )
    assert in_place(distributed_prefetch_rec(done, 0.1), done) is not None
    # No rebatch: distribute_datasets_from_function, whose dataset_fn should prefetch.
    per_replica = StageTree((_stage("Iterator::Root"), _stage("Iterator::Root::BatchV2")), MS)
    assert "distribute_datasets_from_function" in distributed_prefetch_rec(per_replica, 0.1).code
