"""`tftune.keras.Profile`: profile a few training steps of Keras `fit` from inside it, and
say what slows the input pipeline down, without leaving `fit`.

    model.fit(ds, epochs=3, callbacks=[tftune.keras.Profile(steps=(10, 20))])

Steps `start` to `stop - 1` of the first epoch run under the TensorFlow profiler, each
one marked as `tftune profile` marks it (``Trace("train", step_num=N, _r=1)``, around
the batch: Keras fetches the batch inside its train function, so the wait for input is
in the step). After the last one the profiler stops and the trace is analyzed on a
helper thread while training goes on; a few lines in the training log give the verdict
and the top fix, the HTML report is written beside the trace, and the result is kept as
`.analysis` (waited for when `fit` ends). Outside the profiled steps the callback does
nothing: it never changes training.

Its lines are said from Keras' own hooks, never from the helper thread, each on a line
of its own: under `fit`'s ``verbose=1`` the progress bar redraws one line in place and
ends it only when the epoch ends (after every other callback), so a line said in the
middle of an epoch first ends the bar's line, as Keras' own callbacks do.

Unlike `tftune profile`, it starts after the dataset was built, so the trace names
stages but not the lines that built them.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from pathlib import Path
from typing import Any

import keras

from tftune.core.errors import UserError

REPORT_FILE = "tftune-report.html"  # beside the trace, in the profiler's run folder
PREFIX = "tftune: "  # each line the callback says in the training log


class Profile(keras.callbacks.Callback):  # type: ignore[misc]
    """Profile steps `steps[0]` to `steps[1] - 1` of the first epoch into `logdir`, then
    analyze them (module docstring). `report`: also write the HTML report."""

    def __init__(
        self,
        steps: tuple[int, int] = (10, 20),
        logdir: str = "tftune-logs",
        report: bool = True,
        verbose: bool = True,
    ) -> None:
        super().__init__()
        start, stop = steps
        if not (0 <= start < stop):
            raise ValueError(f"steps={steps!r}: expected (START, STOP) with 0 <= START < STOP")
        self.start, self.stop = int(start), int(stop)
        self.logdir, self.report, self.verbose = str(logdir), report, verbose
        self.analysis: Any = None  # a tftune Analysis, once the profiled steps are read
        self.report_path: Path | None = None
        self.error: str | None = None  # why there is no analysis, where there is none
        self._epoch = -1
        self._running = False
        self._trace: Any = None
        self._worker: threading.Thread | None = None
        self._said: list[str] = []  # lines the helper thread left for Keras' next hook
        self._lock = threading.Lock()

    # -- Keras' hooks: nothing runs outside the profiled steps of the first epoch
    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._epoch != 0 or not self.start <= batch < self.stop:
            return
        import tensorflow as tf

        if batch == self.start:
            tf.profiler.experimental.start(self.logdir)
            self._running = True
        if self._running:
            self._trace = tf.profiler.experimental.Trace("train", step_num=batch, _r=1)
            self._trace.__enter__()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._trace = None
        if self._running and batch == self.stop - 1:
            self._finish()
        self._flush(bar_open=batch > 0)  # the bar has drawn this epoch's earlier steps

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if epoch == 0 and self._running:  # the epoch ended before `stop`: what ran
            self._finish()
        elif epoch == 0 and self._worker is None and self.error is None:
            self.error = (
                f"the first epoch ended before batch {self.start}: nothing profiled "
                f"(steps=({self.start}, {self.stop}) counts the first epoch's batches from 0)"
            )
            self._say(self.error)
        self._flush(bar_open=True)  # Keras ends the bar's line after this hook

    def on_train_end(self, logs: Any = None) -> None:
        if self._running:
            self._finish()
        if self._worker is not None:
            self._worker.join()
        self._flush(bar_open=False)

    # -- the profile
    def _finish(self) -> None:
        import tensorflow as tf

        self._running = False
        tf.profiler.experimental.stop()
        self._record_version(tf.__version__)
        self._worker = threading.Thread(target=self._analyze, name="tftune-analyze", daemon=True)
        self._worker.start()

    def _record_version(self, version: str) -> None:
        """The TensorFlow version beside the trace (the trace does not say it), for the
        analysis to show. Best effort: the trace stands alone."""
        from tftune.probes.traces.callsites import newest_run_dir, write_sites

        run_dir = newest_run_dir(self.logdir)
        if run_dir is not None:
            with contextlib.suppress(OSError):
                write_sites(run_dir, sys.argv[0] or "keras", (), tf_version=version)

    def _analyze(self) -> None:
        import tftune

        steps = f"batches {self.start}-{self.stop - 1} of epoch 1"
        try:
            self.analysis = tftune.analyze(self.logdir)
        except UserError as exc:
            self.error = str(exc)
            self._say(f"no analysis of {steps}: {exc}")
            return
        doc = self.analysis.document()
        self._say(f"{steps} profiled. {doc.verdict.sentence}")
        if doc.recommendations:
            self._say(f"top fix: {doc.recommendations[0].summary}")
        if self.report:
            run_dir = Path(self.analysis.run.path)
            self.report_path = Path(tftune.report(self.analysis, run_dir / REPORT_FILE))
            self._say(f"report: {self.report_path}")

    def _say(self, line: str) -> None:
        with self._lock:
            self._said.append(f"{PREFIX}{line}")

    def _flush(self, bar_open: bool) -> None:
        """Print the lines said so far (Keras' hooks only), on lines of their own: ended
        first where `fit`'s progress bar is drawn in the middle of its line."""
        with self._lock:
            lines, self._said = self._said, []
        if not lines or not self.verbose:
            return
        first = "\n" if bar_open and self._bar_in_place() else ""
        sys.stdout.write(first + "".join(f"{line}\n" for line in lines))
        sys.stdout.flush()

    def _bar_in_place(self) -> bool:
        """Whether `fit` draws its progress bar in place (``verbose=1``, or ``"auto"``
        where that is 1, with Keras printing to standard output)."""
        verbose = (self.params or {}).get("verbose", 0)
        return verbose in (1, "auto") and keras.utils.is_interactive_logging_enabled()
