"""The tf.data stage tree: invariants on handwritten inputs, then real recorded traces."""

from __future__ import annotations

import numpy as np

from tftune.probes.traces import intervals, locate, trace_file
from tftune.probes.traces.stage_events import op_type, stage_name
from tftune.probes.traces.stage_scan import nest
from tftune.probes.traces.stages import StageTree, _capped_by, build_stage_tree


def nesting_parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The innermost enclosing event of each event: the parent column of `nest`."""
    return nest(starts, ends, np.zeros(starts.shape[0], dtype=np.int8))[0]


def union_ps(starts: list[int], ends: list[int]) -> int:
    return intervals.union_ps(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))


def _tree(trace_case, name: str) -> StageTree:  # type: ignore[no-untyped-def]
    info = locate.locate(trace_case(name))
    return build_stage_tree(trace_file.load_host(info.hosts[0].path))


def test_nesting_parents_finds_innermost_enclosing_event() -> None:
    starts = np.array([0, 1, 2, 10, 11], dtype=np.int64)
    ends = np.array([9, 8, 3, 20, 12], dtype=np.int64)
    assert nesting_parents(starts, ends).tolist() == [-1, 0, 1, -1, 3]


def test_union_counts_overlap_once() -> None:
    assert union_ps([0, 5, 20], [10, 15, 30]) == 25
    assert union_ps([], []) == 0


def test_names_and_op_types() -> None:
    assert stage_name("Iterator::Root::Repeat[3]::FlatMap[0]::TFRecord") == (
        "Iterator::Root::Repeat::FlatMap::TFRecord"
    )
    assert op_type("resize/ResizeBilinear:ResizeBilinear") == "ResizeBilinear"
    assert op_type("EagerPyFunc:EagerPyFunc") == "EagerPyFunc"
    assert op_type("sequential/conv/Relu:_MklNativeFusedConv2D") == "_MklNativeFusedConv2D"
    assert op_type("EagerLocalExecute: Mul") is None  # a dispatch wrapper, not a kernel
    assert op_type("DecodeImageV2Op::JPEG") is None  # an annotation inside a kernel


def test_capped_by_threadpool_then_cores() -> None:
    assert _capped_by({"parallelism": 8, "threadpool_size": 8, "cpu_budget": 2}) == (
        "threadpool_size"
    )
    assert _capped_by({"parallelism": 2, "threadpool_size": 4, "cpu_budget": 2}) == "cores"
    assert _capped_by({"parallelism": 1, "threadpool_size": 2, "cpu_budget": 2}) is None
    assert _capped_by({"threadpool_size": 2}) is None


def test_sequential_image_map_is_the_blocking_bottleneck(trace_case) -> None:  # type: ignore[no-untyped-def]
    tree = _tree(trace_case, "image_aug")
    bn = tree.bottleneck
    assert bn is not None and bn.kind == "MapAndBatch" and bn.blocking and bn.is_async
    assert bn.knob("parallelism") == 1 and bn.knob("autotune") is False
    assert bn.knob("batch_size") == 16
    assert bn.op is not None and "MapDataset" in bn.op
    ops = dict(bn.ops_ps)
    assert ops.get("DecodeJpeg", 0) > 0 and "ResizeBilinear" in ops
    # The consumer-side time of an async stage is waiting on its buffer, not work.
    assert bn.wait_ps is not None and bn.wait_ps > 0.5 * tree.window_ps
    # Parents come before children; every stage but the root has a parent in the tree.
    names = [s.name for s in tree.stages]
    for s in tree.stages:
        assert s.parent is None or names.index(s.parent) < names.index(s.name)
    root = tree.by_name("Iterator::Root")
    assert root is not None and root.knob("threadpool_size") and root.knob("cpu_budget")
    # Self time never exceeds total for synchronous stages.
    for s in tree.stages:
        if not s.is_async:
            assert 0 <= s.self_ps <= s.total_ps


def test_latency_bound_map_is_capped_by_its_threadpool(trace_case) -> None:  # type: ignore[no-untyped-def]
    tree = _tree(trace_case, "slow_reads")
    bn = tree.bottleneck
    assert bn is not None and bn.kind == "MapAndBatch"
    assert bn.knob("parallelism") == 8 and bn.knob("threadpool_size") == 8
    assert bn.capped_by == "threadpool_size"
    cores = tree.root_knobs["cpu_budget"]
    assert bn.udf_concurrency is not None and bn.udf_concurrency > cores


def test_prefetch_hides_nothing_when_the_map_starves_it(trace_case) -> None:  # type: ignore[no-untyped-def]
    tree = _tree(trace_case, "tf_strings")
    prefetch = tree.by_name("Iterator::Root::Prefetch")
    assert prefetch is not None and prefetch.is_async and prefetch.blocking
    assert prefetch.knob("buffer_limit") is not None and prefetch.knob("autotune") is True
    bn = tree.bottleneck
    table = [(s.name, s.self_ps, s.wait_ps, s.blocking, dict(s.knobs)) for s in tree.stages]
    assert bn is not None and bn.kind == "ParallelMapV2", table
    assert bn.knob("parallelism") is not None and bn.knob("autotune") is True, table


def test_compute_bound_pipeline_has_no_blocking_work(trace_case) -> None:  # type: ignore[no-untyped-def]
    tree = _tree(trace_case, "compute_bound")
    prefetch = tree.by_name("Iterator::Root::Prefetch")
    assert prefetch is not None and not prefetch.blocking
    assert all(not s.blocking for s in tree.children(prefetch.name))
