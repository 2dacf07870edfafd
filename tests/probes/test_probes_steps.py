"""Step detection: handwritten traces for each rule, then real recorded traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tracegen_steps
from gputrace import MS, XSpaceBuilder

from tftune.probes.traces import steps, trace, trace_file


def _load(b: XSpaceBuilder, tmp_path: Path) -> trace.HostTrace:
    return trace_file.load_host(b.write(tmp_path / "run"))


def _consumer(b: XSpaceBuilder, n: int, period: int, wait: int, markers: bool = False) -> None:
    host = b.plane("/host:CPU")
    for i in range(n):
        t = (i + 1) * period
        if markers:
            host.event("python", "train", t, period - MS, step_num=100 + i, _r=1)
        host.event("python", "EagerLocalExecute: IteratorGetNext", t + 10, wait)
        host.event("python", "IteratorGetNextOp::DoCompute", t + 20, wait - 20)


def test_markers_give_one_step_per_marker_with_its_number(tmp_path: Path) -> None:
    b = XSpaceBuilder()
    _consumer(b, 5, 10 * MS, 3 * MS, markers=True)
    st = steps.detect_steps(_load(b, tmp_path))
    assert st.detection == "markers" and st.source == "train" and st.line == "python"
    assert st.numbers.tolist() == [100, 101, 102, 103, 104]
    assert (st.duration_ps == 9 * MS).all()
    assert st.summary()["mean_ms"] == pytest.approx(9.0)


def test_inferred_from_iterator_get_next_drops_the_open_last_step(tmp_path: Path) -> None:
    b = XSpaceBuilder()
    _consumer(b, 6, 10 * MS, 3 * MS)
    st = steps.detect_steps(_load(b, tmp_path))
    assert st.detection == "inferred:iterator_get_next"
    assert len(st) == 5  # six calls bound five steps
    assert (st.duration_ps == 10 * MS).all()
    assert st.notes and "no step markers" in st.notes[0]


def test_inferred_from_repeated_train_function(tmp_path: Path) -> None:
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    for i in range(4):
        host.event("python", "EagerLocalExecute: __inference_helper_12", i * 20 * MS, MS)
        host.event(
            "python",
            "EagerLocalExecute: __inference_multi_step_on_iterator_972",
            i * 20 * MS + 2 * MS,
            15 * MS,
        )
    st = steps.detect_steps(_load(b, tmp_path))
    assert st.detection == "inferred:train_function"
    assert "multi_step_on_iterator" in (st.source or "")
    assert len(st) == 3 and (st.duration_ps == 20 * MS).all()


def test_no_repeating_pattern_means_no_steps(tmp_path: Path) -> None:
    b = XSpaceBuilder()
    b.plane("/host:CPU").event("python", "something", 0, MS)
    st = steps.detect_steps(_load(b, tmp_path))
    assert st.detection == "none" and len(st) == 0 and st.notes
    assert st.summary() == {"count": 0, "mean_ms": None, "p50_ms": None, "p90_ms": None}


def test_xprof_style_names_win_over_other_step_num_events(tmp_path: Path) -> None:
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    for i in range(3):
        host.event("python", "train", i * 10 * MS, 9 * MS, step_num=i, _r=1)
        host.event("python", "Profiled batch", i * 10 * MS + MS, 7 * MS, step_num=i)
    st = steps.detect_steps(_load(b, tmp_path))
    assert st.source == "train"


def test_a_step_marked_on_several_threads_is_its_longest_span_in_time_order(
    tmp_path: Path,
) -> None:
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    host.event("python", "train", 30 * MS, 5 * MS, step_num=2, _r=1)
    host.event("python", "train", 10 * MS, 5 * MS, step_num=1, _r=1)
    host.event("worker", "train", 9 * MS, 8 * MS, step_num=1, _r=1)  # longer: kept
    host.event("worker", "train", 29 * MS, 5 * MS, step_num=2, _r=1)  # as long: the first
    host.event("worker", "train", 20 * MS, 4 * MS, step_num=0, _r=1)
    st = steps.detect_steps(_load(b, tmp_path))
    assert st.numbers.tolist() == [1, 0, 2]
    assert st.start_ps.tolist() == [9 * MS, 20 * MS, 30 * MS]
    assert st.duration_ps.tolist() == [8 * MS, 4 * MS, 5 * MS]


def test_real_trace_with_markers(trace_case) -> None:  # type: ignore[no-untyped-def]
    host = trace_file.load_host(tracegen_steps.one_file(trace_case("latency_py")))
    st = steps.detect_steps(host)
    assert st.detection == "markers" and st.source == "train"
    assert st.numbers.tolist() == list(range(20))
    # Steps follow each other and do not overlap; each waits for a batch of 8 x 4 ms.
    assert (st.start_ps[1:] >= st.end_ps[:-1]).all()
    assert (st.durations_ms > 8 * 4 * 0.9).all()


def test_real_trace_without_markers_is_inferred(trace_case) -> None:  # type: ignore[no-untyped-def]
    host = trace_file.load_host(tracegen_steps.one_file(trace_case("steps_nomarkers")))
    st = steps.detect_steps(host)
    assert st.detection == "inferred:iterator_get_next" and st.line == "python"
    assert len(st) == 12 - 1
    # Each inferred step starts exactly at one IteratorGetNext call.
    plane = host.host_plane
    assert plane is not None
    ((line, idx),) = list(plane.find(lambda n: n == steps.EAGER_GET_NEXT))
    assert np.isin(st.start_ps, line.start_ps[idx]).all()
    assert (st.durations_ms > 8 * 4 * 0.9).all()


def test_real_keras_fit_markers(trace_case) -> None:  # type: ignore[no-untyped-def]
    host = trace_file.load_host(tracegen_steps.one_file(trace_case("keras_markers")))
    st = steps.detect_steps(host)
    assert st.detection == "markers" and st.source == steps.KERAS_MARKER
    assert st.numbers.tolist() == list(range(3, 13))


def test_real_keras_fit_without_markers_uses_the_train_function(trace_case) -> None:  # type: ignore[no-untyped-def]
    st = steps.detect_steps(
        trace_file.load_host(tracegen_steps.one_file(trace_case("keras_plain")))
    )
    assert st.detection == "inferred:train_function"
    assert "multi_step_on_iterator" in (st.source or "")
    assert 8 <= len(st) <= 10
