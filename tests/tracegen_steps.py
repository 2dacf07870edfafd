"""Recorded traces for the step and breakdown tests, beyond tests/tracegen.py's cases.

* `steps_nomarkers`: tracegen's latency-bound pipeline without step markers, the case
  where XProf says "No step marker observed".
* a Keras 3 `fit` run profiled the way `keras.callbacks.TensorBoard(profile_batch=...)`
  profiles: `tf.profiler.experimental.start` at the first profiled batch, each batch
  wrapped by Keras' own `start_batch_trace`/`stop_batch_trace` (a
  `Trace("Profiled batch", step_num=batch)`), then `stop`. The TensorBoard callback itself
  also writes summaries, which needs the tensorboard package; these helpers call the
  same Keras backend functions for the profiling part only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tracegen

tracegen.case(
    "steps_nomarkers",
    tracegen.CASES["latency_py"].source,
    markers=False,
    steps=12,
)

KERAS_SCRIPT = textwrap.dedent(
    """
    import os, sys
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import keras
    from keras.src.backend.tensorflow import tensorboard as ktb

    # Many small ops per element: the input side takes far longer than the tiny model,
    # so the run is input-bound on any machine.
    def heavy(x):
        v = tf.cast(tf.fill([16, 64], x), tf.float32)
        for _ in range(100):
            v = tf.sin(v) + tf.cos(v)
        return tf.reduce_mean(v, axis=1), tf.cast(x % 2, tf.float32)

    ds = tf.data.Dataset.range(100000).map(heavy).batch(64).repeat()

    class Profile(keras.callbacks.Callback):
        def __init__(self, logdir, first, last, markers):
            super().__init__()
            self.logdir, self.first, self.last, self.markers = logdir, first, last, markers
            self.ctx, self.on = None, False

        def on_train_batch_begin(self, batch, logs=None):
            if batch == self.first:
                ktb.start_trace(self.logdir)
                self.on = True
            if self.on and self.markers:
                self.ctx = ktb.start_batch_trace(batch)

        def on_train_batch_end(self, batch, logs=None):
            if not self.on:
                return
            if self.ctx is not None:
                ktb.stop_batch_trace(self.ctx)
                self.ctx = None
            if batch >= self.last:
                ktb.stop_trace(True)
                self.on = False

    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse")
    cb = Profile(sys.argv[1], 3, 12, sys.argv[2] == "1")
    model.fit(ds, steps_per_epoch=15, epochs=1, callbacks=[cb], verbose=0)
    """
)

_KERAS: dict[bool, Path] = {}


def keras_logdir(tmp_path_factory: pytest.TempPathFactory, markers: bool = True) -> Path:
    """A Keras fit trace (10 profiled batches), recorded once per session."""
    if markers not in _KERAS:
        out = tmp_path_factory.mktemp("keras_markers" if markers else "keras_plain")
        script = out / "keras_case.py"
        script.write_text(KERAS_SCRIPT)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
        proc = subprocess.run(
            [sys.executable, str(script), str(out / "logdir"), "1" if markers else "0"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=out,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"recording the Keras case failed:\n{proc.stderr[-3000:]}")
        _KERAS[markers] = out / "logdir"
    return _KERAS[markers]


def one_file(logdir: Path) -> Path:
    (f,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    return f
