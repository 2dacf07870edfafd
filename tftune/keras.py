"""`tftune.keras.Profile`: profile a few training steps of Keras `fit` from inside it, and
say what slows the input pipeline down, without leaving `fit`.

    model.fit(ds, epochs=3, callbacks=[tftune.keras.Profile(steps=(10, 20))])

Steps `start` to `stop - 1` of the first epoch run under the TensorFlow profiler, each
one marked as `tftune profile` marks it (``Trace("train", step_num=N, _r=1)``, around
the batch: Keras fetches the batch inside its train function, so the wait for input is
in the step). After the last one the profiler stops and the trace is analyzed on a
helper thread while training goes on; one or two lines in the training log give the
verdict and the top fix, the HTML report is written beside the trace, and the result is
kept as `.analysis` (waited for when `fit` ends). Outside the profiled steps the
callback does nothing: it never changes training.

Unlike `tftune profile`, it starts after the dataset was built, so the trace names
stages but not the lines that built them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import keras

from tftune.core.errors import UserError

REPORT_FILE = "tftune-report.html"  # beside the trace, in the profiler's run folder


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

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if epoch == 0 and self._running:  # the epoch ended before `stop`: what ran
            self._finish()
        elif epoch == 0 and self._worker is None and self.error is None:
            self.error = f"the first epoch ended before step {self.start}: nothing profiled"
            self._say(f"tftune: {self.error}")

    def on_train_end(self, logs: Any = None) -> None:
        if self._running:
            self._finish()
        if self._worker is not None:
            self._worker.join()

    # -- the profile
    def _finish(self) -> None:
        import tensorflow as tf

        self._running = False
        tf.profiler.experimental.stop()
        self._worker = threading.Thread(target=self._analyze, name="tftune-analyze", daemon=True)
        self._worker.start()

    def _analyze(self) -> None:
        import tftune

        try:
            self.analysis = tftune.analyze(self.logdir)
        except UserError as exc:
            self.error = str(exc)
            self._say(f"tftune: no analysis: {exc}")
            return
        data = self.analysis.to_json()
        self._say(f"tftune: {data['verdict']['sentence']}")
        fixes = data.get("recommendations") or []
        if fixes:
            self._say(f"tftune: top fix: {fixes[0]['summary']}")
        if self.report:
            run_dir = Path(self.analysis.run.path)
            self.report_path = Path(tftune.report(self.analysis, run_dir / REPORT_FILE))
            self._say(f"tftune: report {self.report_path}")

    def _say(self, line: str) -> None:
        if self.verbose:
            print(line, flush=True)
