"""A `tftune profile` child waits, at the script's end, for the trace being written
(`bootstrap._Profiler.finish`): a 40-step script ended while a loaded host still wrote
the trace of steps 5-10 on the helper thread, and the interpreter's exit killed the
thread before it said "profile_done" (CI: "script ended before training step 10")."""

from __future__ import annotations

import threading
import time

from tftune.probes.live.clock_events import ChildEvent, ProfileDone
from tftune.tuner.child.bootstrap import _Profiler

DONE = ProfileDone("/nonexistent", 5, 9)


class _Writer:
    def __init__(self) -> None:
        self.events: list[ChildEvent] = []

    def event(self, event: ChildEvent) -> None:
        self.events.append(event)


def _profiler(writer: _Writer) -> _Profiler:
    return _Profiler(5, 10, "/nonexistent", writer)  # type: ignore[arg-type]


def test_the_scripts_end_waits_for_a_stop_under_way() -> None:
    writer = _Writer()
    prof = _profiler(writer)

    def slow_stop() -> None:  # stands for tf.profiler's stop on a loaded host
        time.sleep(0.5)
        writer.event(DONE)

    prof.step, prof.stopping = 11, True
    prof.stopper = threading.Thread(target=slow_stop, daemon=True)
    prof.stopper.start()
    prof.finish()
    assert not prof.stopper.is_alive() and writer.events == [DONE]


def test_a_script_that_ends_before_the_stop_step_keeps_the_steps_it_ran() -> None:
    writer = _Writer()
    prof = _profiler(writer)
    stopped: list[bool] = []
    prof._stop = lambda: stopped.append(True)  # type: ignore[method-assign]
    prof.step = 7  # steps 5 and 6 profiled, then the script ended
    prof.finish()
    assert stopped == [True] and prof.stopping
    # Nothing profiled yet: nothing to stop.
    idle = _profiler(writer)
    idle._stop = lambda: stopped.append(False)  # type: ignore[method-assign]
    idle.step = 3
    idle.finish()
    assert stopped == [True]
