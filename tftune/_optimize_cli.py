"""The terminal side of ``tftune optimize``: progress bar, status lines, the resume
command on interruption (`tuner.options.resume_command`), summary.

Kept out of cli.py so the command stays thin and ``--help`` imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO, cast

from tftune.core.errors import Terminated
from tftune.core.userfiles import STDOUT

if TYPE_CHECKING:
    from tftune.tuner.optimize import OptimizeResult
    from tftune.tuner.options import OptimizeOptions
    from tftune.tuner.study import TrialRecord


class ProgressView:
    """A rich progress bar over trials with the best so far, and one line per trial."""

    def __init__(self, console: Any) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.console = console
        self.progress = Progress(
            TextColumn("[bold]trials"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task("best: -", total=None)

    def start(self, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=total)
        self.progress.start()

    def trial(self, r: TrialRecord, best: TrialRecord | None) -> None:
        from tftune._notebook_progress import best_words, trial_words

        self.progress.console.print(trial_words(r, best), highlight=False, markup=False)
        self.progress.update(self.task, advance=1, description=f"best: {best_words(best)}")

    def note(self, text: str) -> None:
        self.progress.console.print(f"[dim]{text}[/dim]", highlight=False)

    def stop(self) -> None:
        self.progress.stop()


class _PlainLines:
    """A text stream for rich: on a terminal it passes through; elsewhere (a pipe, a
    file, a CI log) each line loses the padding rich adds to fill its width."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.pending = stream, ""

    def isatty(self) -> bool:
        return self.stream.isatty()

    def write(self, text: str) -> int:
        if self.stream.isatty():
            return self.stream.write(text)
        *whole, self.pending = (self.pending + text).split("\n")
        for line in whole:
            self.stream.write(line.rstrip() + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def fileno(self) -> int:
        return self.stream.fileno()


def _invocation() -> list[str] | None:
    """The command line as typed, for the reproducibility record; None when the command
    was invoked in-process (e.g. a test's CliRunner), where sys.argv is someone else's."""
    name = Path(sys.argv[0]).name if sys.argv else ""
    if name in ("tftune", "__main__.py"):
        return ["tftune", *sys.argv[1:]]
    return None


def run_optimize_command(
    script: str, script_args: list[str], options: OptimizeOptions, words: TextIO | None
) -> None:
    """Runs `tftune.optimize` with the options the command built, showing progress and
    the summary on `words` (None: --quiet; standard error where a document takes
    standard output). Off a terminal the lines are plain: no colour, no padding."""
    import io

    from rich.console import Console

    quiet = words is None
    target = words if words is not None else io.StringIO()
    console = Console(file=cast(TextIO, _PlainLines(target)), highlight=False, quiet=quiet)
    view = ProgressView(console)
    with _sigterm_as_interrupt():
        _run(script, script_args, options, console, view)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (Slurm preemption, `scancel`, `kill`) unwinds like Ctrl-C, so the running
    trial's processes are stopped and the trial is recorded as interrupted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(
    script: str,
    script_args: list[str],
    options: OptimizeOptions,
    console: Any,
    view: ProgressView,
) -> None:
    import tftune
    from tftune.tuner.options import resume_command

    if script_args and script_args[0] == "--":
        script_args = script_args[1:]
    try:
        result = tftune.optimize(
            script,
            script_args,
            options,
            on_trial=view.trial,
            on_start=view.start,
            on_note=view.note,
            invocation=_invocation(),
        )
    except KeyboardInterrupt:
        view.stop()
        storage, name = options.where(script)
        console.print(
            f"interrupted: the finished trials are kept in {storage} (study {name!r}); "
            "a trial stopped midway runs again. Resume with:",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        console.print(
            f"  {resume_command(script, script_args, options)}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        raise
    finally:
        view.stop()
    _summary(console, result)


def _summary(console: Any, result: OptimizeResult) -> None:
    """What the run found, drawn from its tuning JSON: the table, the rewrites, the
    learning check, the stall's fix, the winner, its diff and the command."""
    from tftune.reports.learning_rows import learning_lines
    from tftune.reports.rewrite_rows import rewrite_lines
    from tftune.reports.tuning_model import stall_fix
    from tftune.reports.tuning_terminal import render_table

    doc = result.document  # what --json wrote
    console.print(render_table(doc))
    for line in (*rewrite_lines(doc), *learning_lines(doc)):
        console.print(line, markup=False, highlight=False)
    fix = stall_fix(doc)
    if fix is not None:
        console.print("\nthe epoch-start stall's fix:", style="bold")
        console.print(fix, markup=False, highlight=False)
    o = result.outcome
    counts = o.counts()
    console.print(
        f"{counts['complete']} complete, {counts['pruned']} pruned, {counts['failed']} failed "
        f"trials in study {o.study_name!r} ({o.storage}); {o.ran_this_session} ran now, "
        f"{o.wall_s:.0f} s"
    )
    console.print(f"winner: {o.best.description} (trial {o.best.number}, {o.best.role.value})")
    if result.diff:
        console.print("\nchange your own lines:", style="bold")
        console.print(result.diff, markup=False, highlight=False)
    if result.snippet:
        console.print("and add:", style="bold")
        console.print(result.snippet, markup=False, highlight=False)
    console.print(f"config written to {result.best_file}; train with it:", style="bold")
    console.print(f"  {result.command}", markup=False, highlight=False)
    for path in (result.json_file, result.html_file):
        if path is not None and str(path) != STDOUT:  # `-` went to standard output
            console.print(f"wrote {path}")
    console.print(
        f"every trial in a browser: {dashboard_command(o.storage)}", soft_wrap=True, markup=False
    )
    if o.importances_withheld is not None:  # optuna-dashboard estimates it regardless
        console.print(
            f"  its parameter importance means nothing here: {o.importances_withheld}",
            soft_wrap=True,
            markup=False,
        )


def dashboard_command(storage: str) -> str:
    """The optuna-dashboard command for a study's storage (a journal file or a URL), with
    how to get it where the extra is not installed."""
    import importlib.util
    import shlex

    command = f"optuna-dashboard {shlex.quote(storage)}"
    if importlib.util.find_spec("optuna_dashboard") is None:
        command += "  (pip install 'tftune[dashboard]')"
    return command
