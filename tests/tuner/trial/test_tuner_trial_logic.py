"""The trial runner's logic with an injected launcher and NVML reader: a tiny fake child
(no TensorFlow) writes step records, so windows, NVML figures and events are checked fast."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import pytest

from tftune.core.failures import FailureKind
from tftune.core.vocabulary import TrialState
from tftune.probes.live.nvml import GpuSample, NvmlUnavailable
from tftune.tuner.trial import MeasureSpec, RunnerDeps, run_trial
from tftune.tuner.trial.launch import ChildProcess

FAKE_CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    spec = json.load(open(os.environ["TFTUNE_CHILD_SPEC"]))
    steps, step_s, examples, then = int(sys.argv[1]), float(sys.argv[2]), 8, sys.argv[3]
    with open(spec["clock_file"], "a", buffering=1) as fh:
        if then == "peek":  # one element taken from another dataset first (a setup peek)
            fh.write(f"S 7 {time.time_ns()} {time.time_ns()} 1\\n")
        if then != "untrained":  # the child found stream 1 feeding optimizer updates
            fh.write('E training {"stream": 1, "how": "fake"}\\n')
        for i in range(steps):
            t0 = time.time_ns()
            time.sleep(step_s / 4)          # the consumer waits a quarter of each step
            t1 = time.time_ns()
            fh.write(f"S 1 {t0} {t1} {examples}\\n")
            time.sleep(step_s * 3 / 4)
        if then == "nan":
            fh.write('E nan {"what": "loss", "value": NaN}\\n')
            time.sleep(60)
        elif then == "hang":
            time.sleep(600)
        elif then == "teardown_hang":  # done, then stuck in the interpreter's teardown
            fh.write('E finished {"code": 0}\\n')
            time.sleep(600)
        elif then == "raise":
            fh.write('E exception {"type": "InvalidArgumentError", "message": "bad record",'
                     ' "bases": ["InvalidArgumentError", "Exception"]}\\n')
            sys.exit(1)
    """
)


def _launcher(*child_args: str):  # type: ignore[no-untyped-def]
    def launch(
        argv: Sequence[str], cwd: str, env: dict[str, str], out: IO[Any] | None, err: IO[Any] | None
    ) -> ChildProcess:
        return subprocess.Popen(
            [sys.executable, "-c", FAKE_CHILD, *child_args],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )

    return launch


class _Reader:
    def read(self) -> Sequence[GpuSample]:
        return [GpuSample(0, 0.75, 4096.0, 81920.0)]

    def close(self) -> None:
        pass


def _no_gpu() -> _Reader:
    raise NvmlUnavailable("NVML unavailable: NVML Shared Library Not Found")


# No extra windows: a loaded host's sleeps can make windows disagree, and these tests
# count windows (`test_windows.py` covers the extra ones).
SPEC = MeasureSpec(
    warmup_steps=3, warmup_s=0.05, window_s=0.3, repeats=3, stall_s=1.5, extra_windows=0
)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('the fake child runs instead')\n")
    return path


def test_windows_rates_and_nvml_figures(script: Path) -> None:
    deps = RunnerDeps(launcher=_launcher("400", "0.01", "end"), nvml_reader=_Reader)
    reports: list[tuple[int, float]] = []
    result = run_trial(
        script, (), None, SPEC, deps=deps, on_report=lambda i, v: reports.append((i, v)) or False
    )
    assert result.state is TrialState.COMPLETE, result
    m = result
    assert m.measured and not m.truncated
    assert 300 < m.examples_per_s < 900  # 8 examples per ~10 ms step, give or take sleep
    assert m.examples == 8 * m.steps
    # The run's rate is its windows' examples over their training time, not a window's.
    assert m.examples_per_s == pytest.approx(m.examples / m.window_s)
    assert 0.1 < m.input_wait_share < 0.45
    assert m.utilization_kind == "nvml" and m.utilization == pytest.approx(0.75)
    assert m.gpu_memory_used_mb == 4096.0 and m.gpu_note is None
    assert len(m.repeats) == 3 and [i for i, _ in reports] == [0, 1, 2]
    assert result.wall_s < 30  # stopped once the windows were measured, not after 400 steps
    row = json.loads(json.dumps(result.to_json()))
    assert row["state"] == "complete" and row["metrics"]["utilization_kind"] == "nvml"


def test_cpu_reports_duty_cycle_and_says_nvml_not_measured(script: Path) -> None:
    deps = RunnerDeps(launcher=_launcher("400", "0.01", "end"), nvml_reader=_no_gpu)
    m = run_trial(script, (), None, SPEC, deps=deps)
    assert m.measured
    assert m.utilization_kind == "duty_cycle"
    assert m.utilization == pytest.approx(1 - m.input_wait_share)
    assert m.gpu_memory_used_mb is None
    assert m.gpu_note == "not measured (NVML unavailable: NVML Shared Library Not Found)"


def test_pruning_stops_the_trial(script: Path) -> None:
    deps = RunnerDeps(launcher=_launcher("4000", "0.01", "end"), nvml_reader=None)
    result = run_trial(script, (), None, SPEC, deps=deps, on_report=lambda i, v: i == 0)
    assert result.state is TrialState.PRUNED and result.reason == "pruned after 1 window(s)"
    assert result.measured and len(result.repeats) == 1


@pytest.mark.parametrize(
    ("then", "kind", "words"),
    [
        ("nan", FailureKind.NAN, "NaN"),
        ("hang", FailureKind.STALL, "no further training step for 2 s"),
        ("raise", FailureKind.EXCEPTION, "InvalidArgumentError: bad record"),
    ],
)
def test_events_become_failures(script: Path, then: str, kind: FailureKind, words: str) -> None:
    deps = RunnerDeps(launcher=_launcher("10", "0.01", then), nvml_reader=None)
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.01, window_s=30, repeats=1, stall_s=1.5)
    result = run_trial(script, (), None, spec, deps=deps)
    assert result.state is TrialState.FAILED and result.failure is kind
    assert result.reason is not None and words in result.reason, result.reason


def test_short_script_is_measured_over_what_it_ran(script: Path) -> None:
    deps = RunnerDeps(launcher=_launcher("30", "0.01", "end"), nvml_reader=None)
    result = run_trial(
        script, (), None, MeasureSpec(warmup_steps=5, warmup_s=0.05, window_s=5), deps=deps
    )
    assert result.state is TrialState.COMPLETE
    assert result.measured and result.truncated
    assert 0 < result.steps <= 25


def test_a_script_done_but_stuck_in_teardown_is_measured_not_stalled(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child said it finished, then never exited: after the grace period it is
    stopped and measured over what it ran, like a script that exits early."""
    import tftune.tuner.trial.launch as launch

    monkeypatch.setattr(launch, "EXIT_GRACE_S", 0.5)
    deps = RunnerDeps(launcher=_launcher("30", "0.01", "teardown_hang"), nvml_reader=None)
    spec = MeasureSpec(warmup_steps=5, warmup_s=0.05, window_s=30, stall_s=20)
    result = run_trial(script, (), None, spec, deps=deps)
    assert result.state is TrialState.COMPLETE, result.reason
    assert result.measured and result.truncated
    assert result.returncode is not None and result.returncode < 0  # stopped by a signal


def test_no_steps_at_all_is_a_failure_with_a_reason(script: Path) -> None:
    deps = RunnerDeps(launcher=_launcher("0", "0.01", "end"), nvml_reader=None)
    result = run_trial(script, (), None, SPEC, deps=deps)
    assert result.failure is FailureKind.NO_STEPS and result.reason
    assert json.dumps(result.reason)


def test_training_is_the_stream_found_training_not_the_first(script: Path) -> None:
    """tf.distribute and Keras' setup may take one element of another dataset before
    training starts: that stream must not become the one measured."""
    result = run_trial(
        script, [], None, SPEC, deps=RunnerDeps(launcher=_launcher("60", "0.02", "peek"))
    )
    assert result.state is TrialState.COMPLETE, (result.reason, result.stderr_tail)
    assert result.measured and result.examples == 8 * result.steps


def test_steps_of_a_stream_that_feeds_no_update_are_never_measured(script: Path) -> None:
    """A loop that updates nothing (a counting loop, `adapt`) is seen, not measured: the
    trial fails with what it saw, once the script ends."""
    deps = RunnerDeps(launcher=_launcher("60", "0.01", "untrained"), nvml_reader=None)
    result = run_trial(script, (), None, SPEC, deps=deps)
    assert result.failure is FailureKind.NO_STEPS, result
    assert result.reason is not None
    assert "no dataset fed an optimizer update" in result.reason
    assert "#1" in result.reason and "60 elements, not training" in result.reason


def test_a_script_that_never_trains_is_stopped_at_the_first_step_deadline(
    script: Path,
) -> None:
    deps = RunnerDeps(launcher=_launcher("100000", "0.01", "untrained"), nvml_reader=None)
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.05, window_s=0.3, startup_timeout_s=1.5)
    result = run_trial(script, (), None, spec, deps=deps)
    assert result.failure is FailureKind.STALL, result
    assert result.reason is not None and "no training step within 2 s" in result.reason
    assert "--step-timeout" in result.reason and result.wall_s < 30


def test_a_window_holds_at_least_its_step_count(script: Path) -> None:
    """Slow steps (real models on a GPU: 0.05-2 s): a window runs until it holds
    window_steps steps, whatever window_s says."""
    deps = RunnerDeps(launcher=_launcher("400", "0.05", "end"), nvml_reader=None)
    spec = MeasureSpec(warmup_steps=2, warmup_s=0.01, window_s=0.05, window_steps=6, repeats=2)
    result = run_trial(script, (), None, spec, deps=deps)
    assert result.measured, result.reason
    assert result.steps >= 12 and not result.notes


def test_a_short_run_says_its_windows_held_too_few_steps(script: Path) -> None:
    deps = RunnerDeps(launcher=_launcher("12", "0.01", "end"), nvml_reader=None)
    spec = MeasureSpec(warmup_steps=2, warmup_s=0.01, window_s=30, repeats=2)
    result = run_trial(script, (), None, spec, deps=deps)
    assert result.measured and result.truncated
    assert any("held only" in n for n in result.notes), result.notes


def test_the_first_of_several_windows_is_half_as_long(script: Path) -> None:
    """Successive halving's short first rung: a run the pruner stops after its first
    window pays half a window; a run of one window measures it whole."""
    spec = MeasureSpec(warmup_steps=2, warmup_s=0.01, window_s=0.6, repeats=2, extra_windows=0)
    assert spec.window_length(0) == pytest.approx(0.3) and spec.window_length(1) == 0.6
    assert MeasureSpec(window_s=0.6, repeats=1).window_length(0) == 0.6
    deps = RunnerDeps(launcher=_launcher("400", "0.01", "end"), nvml_reader=None)
    two = run_trial(script, (), None, spec, deps=deps)
    assert two.measured and len(two.repeats) == 2
    assert 0.9 <= two.window_s < 1.15  # 0.3 + 0.6, not 2 x 0.6
    pruned = run_trial(script, (), None, spec, deps=deps, on_report=lambda i, v: i == 0)
    assert pruned.state is TrialState.PRUNED and 0.3 <= pruned.window_s < 0.55
    one = run_trial(
        script,
        (),
        None,
        MeasureSpec(warmup_steps=2, warmup_s=0.01, window_s=0.6, repeats=1),
        deps=deps,
    )
    assert one.measured and one.window_s >= 0.6


def test_an_exception_without_a_message_is_named_alone() -> None:
    """StopIteration carries no message: "raised StopIteration", not a dangling colon."""
    from tftune.probes.live.clock_events import ScriptRaised
    from tftune.tuner.trial.failure import classify_exit

    bare = classify_exit(1, ScriptRaised("StopIteration", (), "", None), "")
    assert bare == (FailureKind.EXCEPTION, "raised StopIteration")
    said = classify_exit(1, ScriptRaised("ValueError", (), "bad path", "t.py:3"), "")
    assert said == (FailureKind.EXCEPTION, "raised ValueError: bad path")
