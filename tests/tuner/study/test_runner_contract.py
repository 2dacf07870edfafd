"""The study's `Runner` contract (tuner/study/contract.py), checked on both runners: the
fake that tests and users run studies over (`tftune.testing.FakeRunner`) and the real
one (`ScriptRunner`: a tiny real script in a child process, marked slow, a few seconds a
case). Each case says one clause of the contract; both runners must pass every case.
Below them, what the fake promises besides (`tftune.testing`'s docstring)."""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import requires_tf

from tftune.core.failures import FailureKind
from tftune.core.vocabulary import TrialState
from tftune.testing import OUT_OF_MEMORY, Failure, FakeRunner, Figures, by_config
from tftune.tuner.measurement import Measurement
from tftune.tuner.option_defaults import EXTRA_WINDOWS
from tftune.tuner.searchspace.bounds import bound_mode
from tftune.tuner.searchspace.config import Config, SiteConfig
from tftune.tuner.study import Mode, Runner, ScriptRunner
from tftune.tuner.trial import MeasureSpec

REPEATS = 2
# Short windows: the real runner's cases cost the child's TensorFlow import and ~1 s.
SPEC = MeasureSpec(warmup_steps=3, warmup_s=0.2, window_s=0.3, repeats=REPEATS)

# A raw SGD loop: each step updates a trainable variable, so the loop is training.
TRAINS = """
import time
import tensorflow as tf
v = tf.Variable(1.0)
ds = tf.data.Dataset.range(10**9).map(lambda x: tf.cast(x, tf.float32)).batch(8)
for b in ds:
    v.assign_sub(0.001 * tf.reduce_mean(b))
    time.sleep(0.002)
"""
# Fails before it imports TensorFlow: a failed run costs well under a second.
FAILS = 'raise ValueError("boom: the dataset path is wrong")\n'
BOOM = "boom: the dataset path is wrong"


@dataclass(frozen=True)
class Subject:
    """One runner under the contract: one over a script that trains, one over a script
    that raises."""

    trains: Callable[[], Runner]
    fails: Callable[[], Runner]


def _fake() -> Subject:
    failure = Failure(
        f"raised ValueError: {BOOM}",
        stderr_tail=f"Traceback (most recent call last):\nValueError: {BOOM}\n",
        returncode=1,
        kind=FailureKind.EXCEPTION,
    )
    return Subject(
        trains=lambda: FakeRunner(lambda _c: 1000.0, repeats=REPEATS),
        fails=lambda: FakeRunner(lambda _c: failure, repeats=REPEATS),
    )


def _real(folder: Path) -> Subject:
    trains, fails = folder / "train.py", folder / "fails.py"
    trains.write_text(textwrap.dedent(TRAINS).lstrip(), encoding="utf-8")
    fails.write_text(FAILS, encoding="utf-8")
    return Subject(
        trains=lambda: ScriptRunner(trains, spec=SPEC, cwd=folder),
        fails=lambda: ScriptRunner(fails, spec=SPEC, cwd=folder),
    )


@pytest.fixture(
    params=["fake", pytest.param("real", marks=(pytest.mark.slow, requires_tf))],
)
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Subject:
    return _fake() if request.param == "fake" else _real(tmp_path)


def _children() -> set[int]:
    """Live processes whose parent is this test process."""
    me, out = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except (OSError, ValueError):
            continue
        if fields[0] != "Z" and int(fields[1]) == me:
            out.add(int(entry.name))
    return out


@pytest.fixture(autouse=True)
def _no_child_survives() -> Iterator[None]:
    before = _children()
    yield
    deadline = time.monotonic() + 5
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _children() - before, "a run left a child process alive"


def _one_line(text: str | None) -> bool:
    return bool(text) and "\n" not in (text or "")


def _figures_are_sane(m: Measurement) -> None:
    assert m.measured and m.examples_per_s is not None and m.examples_per_s > 0
    assert m.repeats and all(r > 0 for r in m.repeats)
    assert min(m.repeats) <= m.examples_per_s <= max(m.repeats)  # their median
    assert m.spread is None or m.spread >= 0
    assert m.input_wait_share is not None and 0.0 <= m.input_wait_share <= 1.0
    assert m.utilization_kind in ("nvml", "duty_cycle")
    if m.utilization is None:  # never 0 for "not measured": the note says why
        assert _one_line(m.utilization_note)
    else:
        assert 0.0 <= m.utilization <= 1.0
    assert isinstance(m.notes, tuple) and all(isinstance(n, str) for n in m.notes)
    assert m.failure is None


# --- the contract ------------------------------------------------------------------------


def test_a_complete_run_is_measured_over_every_window(subject: Subject) -> None:
    runner = subject.trains()
    assert isinstance(runner.gpu_visible, bool)
    m = runner.measure(Config())
    assert m.state is TrialState.COMPLETE and m.ok, (m.reason, m.stderr_tail)
    _figures_are_sane(m)
    # The windows asked for, and up to EXTRA_WINDOWS more where they disagreed.
    assert REPEATS <= len(m.repeats) <= REPEATS + EXTRA_WINDOWS
    assert m.reason is None or _one_line(m.reason)  # e.g. why utilization was not measured
    assert m.config == Config()  # what it applied
    assert m.crash() == ("", None)


def test_on_repeat_is_called_after_each_window_in_order(subject: Subject) -> None:
    seen: list[tuple[int, float]] = []

    def go_on(index: int, eps: float) -> bool:
        seen.append((index, eps))
        return True

    m = subject.trains().measure(Config(), on_repeat=go_on)
    assert m.state is TrialState.COMPLETE, (m.reason, m.stderr_tail)
    # Reported: each window asked for, in order (an extra one is not judged).
    assert [i for i, _ in seen] == list(range(REPEATS)) == list(range(len(m.repeats)))[:REPEATS]
    assert all(eps > 0 for _, eps in seen)  # examples/s so far


def test_false_from_on_repeat_stops_the_run_pruned_with_the_windows_so_far(
    subject: Subject,
) -> None:
    seen: list[int] = []

    def stop(index: int, _eps: float) -> bool:
        seen.append(index)
        return False

    m = subject.trains().measure(Config(), on_repeat=stop)
    assert m.state is TrialState.PRUNED, (m.reason, m.stderr_tail)
    assert seen == [0]  # not asked again once it said stop
    _figures_are_sane(m)
    assert len(m.repeats) == 1
    assert _one_line(m.reason)


def test_a_failing_script_is_a_failed_measurement_never_an_exception(subject: Subject) -> None:
    seen: list[int] = []
    m = subject.fails().measure(Config(), on_repeat=lambda i, _e: seen.append(i) is None)
    assert m.state is TrialState.FAILED and not m.ok
    assert not m.measured and m.examples_per_s is None and m.repeats == ()
    assert seen == []  # no window, no report
    assert _one_line(m.reason) and BOOM in (m.reason or "")
    # Where the script left them: the end of its stderr and its exit status.
    assert BOOM in m.stderr_tail and m.returncode not in (None, 0)
    tail, crash = m.crash()  # what the study keeps of it
    assert BOOM in tail and crash is not None


def test_a_bound_mode_measures_that_half_of_the_script(subject: Subject) -> None:
    """The bound analysis' call (`searchspace.guided.measure_ceiling`): the pipeline alone, as
    written, stopped after its first window."""
    m = subject.trains().measure(Config(), mode=Mode.PIPELINE_ONLY, on_repeat=lambda i, e: False)
    assert m.state is TrialState.PRUNED and m.measured, (m.reason, m.stderr_tail)
    _figures_are_sane(m)
    assert m.config is not None and bound_mode(m.config) == Mode.PIPELINE_ONLY.value


# --- what the fake promises besides ------------------------------------------------------


def _par(c: Config) -> int:
    return (c.sites.get("train.py:1") or SiteConfig()).num_parallel_calls or 1


def test_the_fake_is_deterministic_and_records_what_it_ran() -> None:
    a, b = FakeRunner(lambda c: 100.0 * _par(c)), FakeRunner(lambda c: 100.0 * _par(c))
    four = Config(sites={"train.py:1": SiteConfig(num_parallel_calls=4)})
    runs = [(c, mode) for c in (Config(), four) for mode in (Mode.TRAIN, Mode.MODEL_ONLY)]
    assert [a.measure(c, mode=m) for c, m in runs] == [b.measure(c, mode=m) for c, m in runs]
    assert a.configs == [Config(), Config(), four, four]  # as asked, unmarked
    assert [r.mode for r in a.runs] == [Mode.TRAIN, Mode.MODEL_ONLY] * 2
    assert [r.windows for r in a.runs] == [3, 3, 3, 3]
    assert a.runs[2].measurement.examples_per_s == 400.0


def test_the_fakes_figures_and_their_defaults() -> None:
    f = FakeRunner(lambda _c: (800.0, 0.75)).measure(Config())
    assert (f.utilization, f.input_wait_share, f.spread) == (0.75, 0.25, 0.02)  # duty cycle
    f = FakeRunner(lambda _c: 800.0, utilization=0.4, input_wait_share=0.9).measure(Config())
    assert (f.utilization, f.input_wait_share) == (0.4, 0.9)
    said = Figures(500.0, utilization=0.9, spread=0.3, notes=("a 16-bit output layer",))
    f = FakeRunner(lambda _c: said, utilization_kind="nvml").measure(Config())
    assert f.notes == said.notes and f.spread == 0.3 and f.utilization_kind == "nvml"


def test_the_fakes_failures() -> None:
    big = Config(sites={"train.py:1": SiteConfig(batch_size=512)})
    oom = FakeRunner(lambda _c: 100.0, fail=lambda c: c == big).measure(big)
    assert oom.state is TrialState.FAILED and oom.reason == OUT_OF_MEMORY
    assert oom.failure is FailureKind.OOM
    table = by_config([(big, Failure("raised StopIteration"))], default=100.0)
    runner = FakeRunner(table)
    assert runner.measure(big).reason == "raised StopIteration"
    assert runner.measure(Config()).examples_per_s == 100.0
    with pytest.raises(LookupError, match="no figures for"):
        FakeRunner(by_config([(big, 1.0)])).measure(Config())
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        FakeRunner(lambda _c: 1.0, repeats=0)
