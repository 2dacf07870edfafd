"""The step clock and the NVML sampler, with handwritten inputs and a fake reader."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tftune.probes.live.clock import (
    ClockReader,
    ClockWriter,
    StepRecord,
    decode_line,
    percentile,
    spread,
)
from tftune.probes.live.clock_events import ClockLineError, NanSeen
from tftune.probes.live.nvml import GpuFigures, GpuSample, NotMeasured, NvmlSampler, NvmlUnavailable
from tftune.probes.live.training_time import PassTimeline

MS = 1_000_000


def test_writer_and_reader_round_trip_with_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "clock.txt"
    writer = ClockWriter(str(path))
    reader = ClockReader(str(path))
    writer.records(1, [(10 * MS, 12 * MS, 32)])
    with open(path, "a") as fh:
        fh.write("S 1 20")  # a line the child has not finished writing
    first = reader.poll()
    assert first == [StepRecord(1, 10 * MS, 12 * MS, 32)]
    with open(path, "a") as fh:
        fh.write("000000 21000000 8\n")
    writer.event(NanSeen("loss", float("inf")))
    rest = reader.poll()
    assert rest == [StepRecord(1, 20 * MS, 21 * MS, 8), NanSeen("loss", float("inf"))]
    assert reader.poll() == [] and reader.skipped == 0
    writer.close()


@pytest.mark.parametrize(
    "line", ["", "S", "S 1 2", "S a b c d", "S 1 2 3 4 5", "X 1 2 3 4", "E", "E nan", "E nan {"]
)
def test_malformed_lines_raise_and_the_reader_skips_them(line: str, tmp_path: Path) -> None:
    """Decoding is strict; the reader skips a line that does not decode and counts it."""
    with pytest.raises(ClockLineError):
        decode_line(line)
    path = tmp_path / "clock.txt"
    path.write_text(f"S 1 2 3 4\n{line}\nS 1 5 6 4\n")
    reader = ClockReader(str(path))
    assert reader.poll() == [StepRecord(1, 2, 3, 4), StepRecord(1, 5, 6, 4)]
    assert reader.skipped == 1 and reader.first_skipped is not None


def test_window_stats_step_aligned() -> None:
    # Four steps of 10 ms each, 4 ms of which the consumer waited, 8 examples per step.
    start = 100 * MS
    recs = [
        StepRecord(1, start + i * 10 * MS + 6 * MS, start + (i + 1) * 10 * MS, 8) for i in range(4)
    ]
    timeline = PassTimeline()
    stats = timeline.window(start, recs)
    assert stats is not None
    assert stats.duration_s == pytest.approx(0.040)
    assert stats.examples_per_s == pytest.approx(800.0)
    assert stats.steps_per_s == pytest.approx(100.0)
    assert stats.input_wait_share == pytest.approx(0.4)
    assert timeline.step_times(start, recs) == [10 * MS] * 4
    assert timeline.window(start, []) is None


def test_percentile_and_spread() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)
    assert spread([5.0]) == 0.0


class _FakeReader:
    def __init__(self, readings: list[Sequence[GpuSample]], fail_after: int | None = None) -> None:
        self.readings = readings
        self.calls = 0
        self.fail_after = fail_after
        self.closed = False

    def read(self) -> Sequence[GpuSample]:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeError("GPU is lost")
        return self.readings[(self.calls - 1) % len(self.readings)]

    def close(self) -> None:
        self.closed = True


def test_sampler_mean_utilization_and_peak_memory() -> None:
    fake = _FakeReader(
        [
            [GpuSample(0, 0.5, 1000.0, 16000.0), GpuSample(1, 0.7, 2000.0, 16000.0)],
            [GpuSample(0, 0.9, 3000.0, 16000.0), GpuSample(1, 0.1, 500.0, 16000.0)],
        ]
    )
    sampler = NvmlSampler(fake)
    sampler.sample_once()
    sampler.sample_once()
    figures = sampler.stop()
    assert isinstance(figures, GpuFigures)
    assert figures.utilization == pytest.approx(0.55)
    assert figures.memory_used_mb == 3000.0
    assert figures.devices == (0, 1)
    assert fake.closed


def test_sampler_thread_samples_between_start_and_stop() -> None:
    import time

    fake = _FakeReader([[GpuSample(0, 1.0, 1.0, 2.0)]])
    sampler = NvmlSampler(fake, interval_s=0.01)
    sampler.start()
    time.sleep(0.1)
    figures = sampler.stop()
    assert isinstance(figures, GpuFigures) and figures.samples >= 2


def test_unavailable_nvml_is_not_measured_never_zero() -> None:
    def broken() -> _FakeReader:
        raise NvmlUnavailable("NVML unavailable: driver not loaded")

    result = NvmlSampler.open(broken)
    assert isinstance(result, NotMeasured)
    assert str(result) == "not measured (NVML unavailable: driver not loaded)"
    failing = NvmlSampler(_FakeReader([[GpuSample(0, 1.0, 1.0, 2.0)]], fail_after=0))
    failing.sample_once()
    lost = failing.stop()
    assert isinstance(lost, NotMeasured) and "GPU is lost" in lost.reason


def test_real_reader_on_this_machine_never_reports_zero_for_unknown() -> None:
    """The real NVML reader: without a GPU (CI) the figure is the reason it is missing,
    never a 0; with one, the figures are real readings of the visible devices."""
    result = NvmlSampler.open()
    if isinstance(result, NotMeasured):
        assert str(result) == f"not measured ({result.reason})" and result.reason
        assert not result.reason.startswith("0")
        return
    result.sample_once()
    figures = result.stop()
    if isinstance(figures, NotMeasured):
        assert figures.reason  # the GPU went away between two samples: said, not 0
    else:
        assert figures.samples >= 1 and figures.devices
        assert 0.0 <= figures.utilization <= 1.0 and figures.memory_used_mb > 0


def test_first_leaf_is_the_first_leaf_tf_nest_flattens() -> None:
    """The eager clock reads the batch size off the first leaf without flattening."""
    import collections

    tf = pytest.importorskip("tensorflow")
    from tftune.tuner.child.step_clock import _first_leaf

    pair = collections.namedtuple("pair", "b a")
    for element in (
        tf.zeros([3]),
        (tf.zeros([4]), tf.zeros([5])),
        {"z": tf.zeros([6]), "a": (tf.zeros([7]),)},
        pair(tf.zeros([8]), tf.zeros([9])),
        [{"b": 1, "a": tf.zeros([2])}],
    ):
        assert _first_leaf(element) is tf.nest.flatten(element)[0]


def test_in_graph_clock_queue_counts_examples_of_any_shape() -> None:
    """The in-graph step log: one enqueue per step, drained in order, and the examples
    of each row read from a static batch size, a dynamic one, an unknown rank or an
    unbatched stream."""
    tf = pytest.importorskip("tensorflow")
    from tftune.tuner.child.patcher import Patcher
    from tftune.tuner.child.ring import _Ring
    from tftune.tuner.searchspace.config import Config

    patcher = Patcher(Config(), ".")
    patcher._batched.update({1: True, 2: False})
    ring, unbatched = _Ring(1), _Ring(2)

    def logger(stream: int, ring: _Ring, spec: object) -> object:
        @tf.function(input_signature=[spec])
        def log(x: object) -> None:
            requested = tf.timestamp()
            with tf.control_dependencies([x]):
                delivered = tf.timestamp()
            ring.record(requested, delivered, patcher._graph_examples(stream, [x]))

        return log

    static = logger(1, ring, tf.TensorSpec([5, 3]))
    dynamic = logger(1, ring, tf.TensorSpec([None, 3]))
    unknown = logger(1, ring, tf.TensorSpec(None))
    static(tf.zeros([5, 3]))
    dynamic(tf.zeros([7, 3]))
    dynamic(tf.zeros([2, 3]))  # the last, partial batch
    unknown(tf.zeros([4, 2]))
    unknown(tf.constant(3.0))  # a scalar: one example
    logger(2, unbatched, tf.TensorSpec([6]))(tf.zeros([6]))

    rows = ring.poll()
    assert [examples for _, _, examples in rows] == [5, 7, 2, 4, 1]
    # A count known when the graph is built costs the step no op: two timestamps and
    # one enqueue (plus control edges), no constant, no shape.
    ops = {op.type for op in static.get_concrete_function().graph.get_operations()}
    assert "Const" not in ops and "Shape" not in ops and "Timestamp" in ops
    assert all(0 < requested <= delivered for requested, delivered, _ in rows)
    assert [r for r, _, _ in rows] == sorted(r for r, _, _ in rows)
    assert ring.poll() == []  # drained
    assert [examples for _, _, examples in unbatched.poll()] == [1]
