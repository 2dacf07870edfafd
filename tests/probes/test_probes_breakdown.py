"""The per-step breakdown: overlap rules on handwritten traces, shares on real ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tracegen_steps
from gputrace import MS, XSpaceBuilder

from tftune.core.vocabulary import BREAKDOWN_CATEGORIES
from tftune.probes.traces import breakdown, steps, trace_file


def _one_step(tmp_path: Path, fill) -> breakdown.Breakdown:  # type: ignore[no-untyped-def]
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    host.event("python", "train", 0, 10 * MS, step_num=0, _r=1)
    fill(b)
    h = trace_file.load_host(b.write(tmp_path / "run"))
    st = steps.detect_steps(h)
    assert len(st) == 1
    return breakdown.compute_breakdown(h, st)


def test_wait_beats_the_python_call_around_it_and_containers_are_other(tmp_path: Path) -> None:
    def fill(b: XSpaceBuilder) -> None:
        host = b.plane("/host:CPU")
        host.event("python", "TFE_Py_FastPathExecute_C", 0, 6 * MS)  # host compute
        host.event("python", "EagerLocalExecute: IteratorGetNext", 0, 5 * MS)  # container
        host.event("python", "IteratorGetNextOp::DoCompute", MS, 4 * MS)  # input wait
        host.event("python", "EagerLocalExecute: __inference_f_1", 7 * MS, 2 * MS)
        # The producer thread's work is not step time.
        host.event("tf_data_private_threadpool/1", "EagerPyFunc:EagerPyFunc", 0, 10 * MS)

    bd = _one_step(tmp_path, fill)
    ms = bd.mean_ms()
    assert ms["input_wait"] == pytest.approx(4.0)
    assert ms["host_compute"] == pytest.approx(2.0)  # 0-1 and 5-6
    assert ms["other"] == pytest.approx(4.0)  # 6-10: only containers and the marker
    assert sum(v for v in bd.fractions().values() if v is not None) == pytest.approx(1.0)
    assert bd.input_share == pytest.approx(0.4)


def test_device_compute_beats_input_wait_and_events_are_clipped(tmp_path: Path) -> None:
    def fill(b: XSpaceBuilder) -> None:
        host = b.plane("/host:CPU")
        host.event("python", "IteratorGetNextOp::DoCompute", -2 * MS, 6 * MS)  # 0..4 counts
        gpu = b.plane("/device:GPU:0")
        gpu.event("Stream #7(Compute)", "my_kernel", 3 * MS, 3 * MS)
        gpu.event("Stream #14(MemcpyH2D)", "MemcpyH2D", 6 * MS, MS)
        gpu.event("Stream #15(MemcpyD2H)", "MemcpyD2H", 8 * MS, 4 * MS)  # 8..10 counts
        gpu.event("XLA Ops", "my_kernel", 3 * MS, 3 * MS)  # derived line: not counted twice

    bd = _one_step(tmp_path, fill)
    ms = bd.mean_ms()
    assert ms["device_compute"] == pytest.approx(3.0)
    assert ms["input_wait"] == pytest.approx(3.0)
    assert ms["host_to_device"] == pytest.approx(1.0)
    assert ms["output"] == pytest.approx(2.0)
    assert ms["other"] == pytest.approx(1.0)
    row = bd.per_step()[0]
    assert row["step"] == 0 and row["duration_ms"] == pytest.approx(10.0)
    assert set(BREAKDOWN_CATEGORIES) <= {k[:-3] for k in row if k.endswith("_ms")}


def test_no_steps_gives_nulls_not_zeros(tmp_path: Path) -> None:
    b = XSpaceBuilder()
    b.plane("/host:CPU").event("python", "x", 0, MS)
    h = trace_file.load_host(b.write(tmp_path / "run"))
    bd = breakdown.compute_breakdown(h, steps.detect_steps(h))
    assert bd.input_share is None
    assert set(bd.fractions().values()) == {None}
    assert bd.per_step() == []
    assert breakdown.extract_timeline(h, bd.steps) is None


def test_real_input_bound_and_compute_bound(trace_case) -> None:  # type: ignore[no-untyped-def]
    slow = trace_file.load_host(tracegen_steps.one_file(trace_case("latency_py")))
    bd = breakdown.compute_breakdown(slow, steps.detect_steps(slow))
    # Ranges, not exact figures: the recording machine is shared and busy.
    assert bd.input_share is not None and bd.input_share > 0.8
    fast = trace_file.load_host(tracegen_steps.one_file(trace_case("compute_bound")))
    bd2 = breakdown.compute_breakdown(fast, steps.detect_steps(fast))
    fr = bd2.fractions()
    assert bd2.input_share is not None and bd2.input_share < 0.25
    assert fr["host_compute"] is not None and fr["host_compute"] > 3 * bd2.input_share


def test_keras_wait_inside_tf_function_counts_as_input(trace_case) -> None:  # type: ignore[no-untyped-def]
    # In Keras the IteratorGetNext op runs inside the train function, on a
    # tf_data_iterator_get_next thread, not on the Python thread.
    host = trace_file.load_host(tracegen_steps.one_file(trace_case("keras_markers")))
    bd = breakdown.compute_breakdown(host, steps.detect_steps(host))
    assert bd.input_share is not None and bd.input_share > 0.3
    assert bd.fractions()["host_compute"] is not None


def test_timeline_is_capped_and_json_ready(trace_case) -> None:  # type: ignore[no-untyped-def]
    host = trace_file.load_host(tracegen_steps.one_file(trace_case("latency_py")))
    st = steps.detect_steps(host)
    tl = breakdown.extract_timeline(host, st, max_tracks=3, max_events=5)
    assert tl is not None and len(tl.steps) == breakdown.TIMELINE_STEPS
    assert len(tl.tracks) == 3 and all(len(t.events) <= 5 for t in tl.tracks)
    assert any(t.dropped > 0 for t in tl.tracks)
    assert {t.kind for t in tl.tracks} <= {"host", "tf_data", "device"}
    for t in tl.tracks:
        for start, dur, _ in t.events:
            assert start + dur >= tl.start_ms and start <= tl.end_ms
    json.dumps(tl.to_json())
