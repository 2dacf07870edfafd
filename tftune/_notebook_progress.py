"""The progress of `tftune.optimize` and `tftune.profile` where they run in IPython.

In a Jupyter kernel the progress is one display, drawn by rich's notebook rendering (the
library the command line's bar uses) and replaced in place through IPython's display id,
so it needs no widgets: the phase, a bar over trials or steps, the best so far, the
newest trial lines. Where no notebook display is available (IPython in a terminal, or
``progress=True`` in plain Python) it is one plain line per phase, per trial and per
note on standard output. While a call runs, other packages' warnings stay out of the
cell: importing Optuna in a kernel warns through tqdm ("IProgress not found").

`shown` opens one call's progress; `LiveProgress` takes the tuner's callbacks and hands
each change to a sink (`NotebookSink`, `LineSink`, or nothing).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeVar, cast

from tftune.core.vocabulary import Phase

if TYPE_CHECKING:
    from tftune.tuner.study import TrialRecord

# Trial lines the notebook display keeps under its bar, the newest last (and the newest
# note below them).
RECENT_TRIALS = 8
# A step count (`tftune.profile`) redraws the notebook display at most this often; a
# phase, a trial or a note always redraws it.
REDRAW_S = 0.25

Callback = TypeVar("Callback", bound=Callable[..., None])


@dataclass(slots=True)
class ProgressState:
    """What a progress display shows: live, owned by one `LiveProgress`."""

    title: str  # "tftune optimize train.py"
    unit: str  # what the bar counts: "trials" or "steps"
    phases: list[str] = field(default_factory=list)  # in order; the last is the current
    done: int = 0
    total: int | None = None  # None: not known yet
    best: str = "-"  # the best so far, in words (`best_words`)
    trials: list[str] = field(default_factory=list)  # the newest trial lines
    note: str = ""  # the newest note

    @property
    def phase(self) -> str:
        return self.phases[-1] if self.phases else "starting"

    def counted(self) -> str:
        """The count in words: "3/8 trials", or "3 trials" while the total is unknown."""
        of = f"/{self.total}" if self.total is not None else ""
        return f"{self.done}{of} {self.unit}"


class Sink(Protocol):
    """Where a progress goes. `changed` is called with the state after each change, and
    the line it adds (None for a step count, which only moves the bar)."""

    def changed(self, state: ProgressState, line: str | None) -> None: ...


def trial_words(record: TrialRecord, best: TrialRecord | None) -> str:
    """A trial's status line as every progress shows it (`best`: the best so far, starred
    where it is this trial)."""
    from tftune.reports.tuning_terminal import trial_line
    from tftune.tuner.output.assemble import trial_row

    return trial_line(trial_row(record), best.number if best is not None else None)


def best_words(best: TrialRecord | None) -> str:
    """The best trial so far as every progress shows it: "4,210.3 ex/s (trial 3)", or
    "-" before a trial has a rate."""
    if best is None or best.examples_per_s is None:
        return "-"
    return f"{best.examples_per_s:,.1f} ex/s (trial {best.number})"


class LiveProgress:
    """One call's progress: the tuner's callbacks (`phase`, `start`, `trial`, `note`) and
    `tftune.profile`'s step count (`step`), each handed to the sink. Callbacks may come
    from the study's worker threads: one at a time."""

    def __init__(self, title: str, unit: str, sink: Sink | None) -> None:
        self.state = ProgressState(title, unit)
        self.sink = sink
        self.lock = threading.Lock()

    def _tell(self, line: str | None) -> None:
        if self.sink is not None:
            self.sink.changed(self.state, line)

    def phase(self, phase: Phase | str) -> None:
        words = phase.value if isinstance(phase, Phase) else phase
        with self.lock:
            self.state.phases.append(words)
            self._tell(f"phase: {words}")

    def start(self, done: int, total: int) -> None:
        with self.lock:
            self.state.done, self.state.total = done, total
            self._tell(self.state.counted())

    def trial(self, record: TrialRecord, best: TrialRecord | None) -> None:
        line = trial_words(record, best)
        with self.lock:
            s = self.state
            s.done, s.best = s.done + 1, best_words(best)
            s.trials = [*s.trials, line][-RECENT_TRIALS:]
            self._tell(f"{line}  ({s.counted()}, best so far: {s.best})")

    def note(self, text: str) -> None:
        with self.lock:
            self.state.note = text
            self._tell(text)

    def step(self, done: int) -> None:
        with self.lock:
            self.state.done = done
            self._tell(None)

    def close(self, words: str) -> None:
        """The last phase: "done", or why the call stopped."""
        self.phase(words)


class LineSink:
    """One plain line per phase, trial and note, where no notebook display is available."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def changed(self, state: ProgressState, line: str | None) -> None:
        if line is None:
            return
        out = self.stream if self.stream is not None else sys.stdout
        out.write(f"tftune: {line}\n")
        out.flush()


class NotebookSink:
    """The progress as one notebook display, drawn by rich and replaced in place.
    `display`: IPython's ``display`` (tests pass their own); `clock`: for `REDRAW_S`."""

    def __init__(
        self,
        display: Callable[..., Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        from rich.progress import TimeElapsedColumn as Elapsed

        self.display, self.clock = display, clock
        self.bar = Progress(
            TextColumn("[bold]{task.fields[unit]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("best so far: {task.fields[best]}"),
            Elapsed(),
        )
        self.task = self.bar.add_task("", total=None, unit="", best="-")
        self.handle: Any = None
        self.drawn = float("-inf")

    def changed(self, state: ProgressState, line: str | None) -> None:
        now = self.clock()
        if line is None and now - self.drawn < REDRAW_S:
            return
        self.drawn = now
        self.bar.update(
            self.task, completed=state.done, total=state.total, unit=state.unit, best=state.best
        )
        view = self.renderable(state)
        if self.handle is None:
            self.handle = self.display(view, display_id=True)
        else:
            self.handle.update(view)

    def renderable(self, state: ProgressState) -> Any:
        """A rich table (rich draws it in the notebook, text and HTML): the title, the
        phases so far (the current one bold), the bar, the newest trials and note."""
        from rich.table import Table
        from rich.text import Text

        grid = Table.grid()
        grid.add_row(Text(state.title, style="bold"))
        trail = Text("phase: ")
        for i, words in enumerate(state.phases):
            last = i == len(state.phases) - 1
            trail.append(words, style="bold cyan" if last else "")
            trail.append("" if last else " › ")
        grid.add_row(trail)
        grid.add_row(self.bar.get_renderable())
        for line in state.trials:
            grid.add_row(Text(line, overflow="fold"))
        if state.note:
            grid.add_row(Text(state.note, style="dim", overflow="fold"))
        return grid


def both(first: Callback | None, second: Callback) -> Callback:
    """A callback that calls the caller's own (where given), then the progress's."""
    if first is None:
        return second

    def call(*args: Any) -> None:
        first(*args)
        second(*args)

    return cast(Callback, call)


def choose_sink(wanted: bool | None) -> Sink | None:
    """Where progress goes: a notebook display in a Jupyter kernel; plain lines in
    IPython elsewhere, or in plain Python where asked for (`wanted` True); nothing where
    `wanted` is False, or None outside IPython."""
    if wanted is False:
        return None
    shell = _ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        from IPython.display import display

        return NotebookSink(display)
    if wanted or shell is not None:
        return LineSink()
    return None


def _ipython() -> Any:
    """The running IPython shell, or None (IPython is never imported here)."""
    module = sys.modules.get("IPython")
    get = getattr(module, "get_ipython", None)
    return get() if get is not None else None


@contextlib.contextmanager
def shown(title: str, unit: str, wanted: bool | None) -> Iterator[LiveProgress]:
    """One call's progress (`choose_sink`), closed with "done" or why the call stopped;
    other packages' warnings are ignored while it runs (module docstring)."""
    progress = LiveProgress(title, unit, choose_sink(wanted))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield progress
        except KeyboardInterrupt:
            progress.close("interrupted")
            raise
        except Exception as exc:
            progress.close(f"stopped: {type(exc).__name__}")
            raise
    progress.close("done")
