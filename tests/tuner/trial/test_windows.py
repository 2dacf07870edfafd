"""The windows of one run (`trial.windows.Windows`), fed step records directly: when a
run's windows disagree, more of them are measured; when they agree, no more."""

from __future__ import annotations

from collections.abc import Sequence

from tftune.probes.live.clock import StepRecord
from tftune.probes.live.training_time import PassTimeline
from tftune.tuner.option_defaults import AGREE_WITHIN
from tftune.tuner.trial.windows import MeasureSpec, Windows

# 10-step windows of at least 0.1 s of training time (the first: 0.05 s).
SPEC = MeasureSpec(warmup_steps=3, warmup_s=0.0, window_s=0.1, window_steps=10, repeats=2)
MS = 1_000_000


def _windows(spec: MeasureSpec = SPEC) -> tuple[Windows, list[tuple[int, float]]]:
    reports: list[tuple[int, float]] = []
    win = Windows(
        spec, PassTimeline(), lambda i, r: reports.append((i, r)) or False, lambda _s: True, _none
    )
    win.stream = 1
    return win, reports


def _none() -> None:
    return None


def _feed(win: Windows, step_ms: Sequence[float], start_ns: int = 0) -> int:
    """One step per duration (8 examples each), until the windows are done; returns the
    last step's time."""
    t = start_ns
    for ms in step_ms:
        if win.done():
            break
        t += int(ms * MS)
        win.add(StepRecord(1, t - MS, t, 8))
    return t


def test_windows_that_agree_are_not_extended() -> None:
    win, reports = _windows()
    _feed(win, [10.0] * 200)
    assert win.done() and win.steady
    assert len(win.windows) == 2 and [i for i, _ in reports] == [0, 1]


def test_windows_that_disagree_are_measured_further_up_to_the_extra_ones() -> None:
    """A first window at 10 ms a step, the next at 20 ms (a stalled epoch): they disagree
    by 67%, so a third window is measured; at 15 ms a step it leaves the pooled figure
    where it was, and the run is measured."""
    win, reports = _windows()
    _feed(win, [10.0] * 14 + [20.0] * 10 + [15.0] * 200)
    assert win.done() and win.steady
    assert len(win.windows) == 3 and [i for i, _ in reports] == [0, 1]


def test_windows_that_never_agree_stop_after_the_extra_ones() -> None:
    """Epochs alternating between 10 and 25 ms steps: each extra window moves the pooled
    figure by more than half of `AGREE_WITHIN`, so the run stops at the extra ones'
    limit."""
    win, reports = _windows()
    alternating = ([10.0] * 10 + [25.0] * 10) * 20
    _feed(win, [10.0] * 4 + alternating)
    assert win.done() and not win.steady
    assert len(win.windows) == SPEC.repeats + SPEC.extra_windows
    assert [i for i, _ in reports] == [0, 1]  # the pruner judges those asked for


def test_one_window_asked_for_is_never_extended() -> None:
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.0, window_s=0.1, window_steps=10, repeats=1)
    win, _ = _windows(spec)
    _feed(win, [10.0] * 4 + [30.0] * 200)
    assert win.done() and len(win.windows) == 1


def test_no_extra_windows_when_told_so() -> None:
    spec = MeasureSpec(
        warmup_steps=3, warmup_s=0.0, window_s=0.1, window_steps=10, repeats=2, extra_windows=0
    )
    win, _ = _windows(spec)
    _feed(win, [10.0] * 14 + [20.0] * 200)
    assert win.done() and len(win.windows) == 2 and not win.steady


def test_a_run_ending_in_an_extra_window_kept_what_it_measured() -> None:
    """`enough`: the windows asked for are complete, so a script that ends during an
    extra window is measured over them, not cut anew as a truncated run."""
    win, _ = _windows()
    _feed(win, [10.0] * 14 + [20.0] * 12)
    assert len(win.windows) == 2 and not win.done() and win.enough()
    assert AGREE_WITHIN < 0.67  # what made it go on


def test_a_config_with_a_cache_is_measured_after_its_first_epoch() -> None:
    """A cache fills over the first epoch: the windows open once the second has begun,
    so the slow filling epoch (30 ms a step here) is no part of the figure."""
    from tftune.probes.live.clock_events import EpochStart

    spec = MeasureSpec(
        warmup_steps=3, warmup_s=0.0, window_s=0.1, window_steps=10, repeats=2, warmup_epochs=1
    )
    win, _ = _windows(spec)
    win.timeline.epoch(EpochStart(1, 0, 400))
    t = _feed(win, [30.0] * 100)  # the first epoch: the cache filling
    assert win.window_start_ns is None  # still warming up, past warmup_steps
    win.timeline.epoch(EpochStart(1, t + 1, 400))
    _feed(win, [10.0] * 200, start_ns=t + 2)
    assert win.done() and win.windows
    first_window = win.windows[0][1]
    assert all(r.deliver_ns > t for r in first_window)
    (rate,) = {round(s.examples_per_s) for s in win.stats(win.windows)}
    assert rate == 800  # 8 examples each 10 ms: the cached epochs alone
