"""Recorded traces for the step and breakdown tests, beyond tests/tracegen.py's cases.

* `steps_nomarkers`: tracegen's latency-bound pipeline without step markers, the case
  where XProf says "No step marker observed".
* `keras_markers`, `keras_plain`: a Keras 3 `fit` run profiled the way
  `keras.callbacks.TensorBoard(profile_batch=...)` profiles: `tf.profiler.experimental.start`
  at the first profiled batch, each batch wrapped by Keras' own
  `start_batch_trace`/`stop_batch_trace` (a `Trace("Profiled batch", step_num=batch)`;
  `keras_plain` leaves them out), then `stop`. The TensorBoard callback itself also writes
  summaries, which needs the tensorboard package; these cases call the same Keras
  backend functions for the profiling part only.

They register in `tracegen.CASES`, so the `trace_case` fixture serves them.
"""

from __future__ import annotations

from pathlib import Path

import tracegen

tracegen.case(
    "steps_nomarkers",
    tracegen.CASES["latency_py"].source,
    markers=False,
    steps=12,
)

# Keras' own profiling functions around `fit`; MARKERS says whether each batch is wrapped.
KERAS_SOURCE = """
import keras
from keras.src.backend.tensorflow import tensorboard as ktb

# Many small ops per element: the input side takes far longer than the tiny model,
# so the run is input-bound on any machine.
def heavy(x):
    v = tf.cast(tf.fill([16, 64], x), tf.float32)
    for _ in range(100):
        v = tf.sin(v) + tf.cos(v)
    return tf.reduce_mean(v, axis=1), tf.cast(x % 2, tf.float32)

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

def main(logdir, steps):
    ds = tf.data.Dataset.range(100000).map(heavy).batch(64).repeat()
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse")
    cb = Profile(logdir, 3, 3 + steps - 1, MARKERS)  # batches 3..12 of 15 are profiled
    model.fit(ds, steps_per_epoch=steps + 5, epochs=1, callbacks=[cb], verbose=0)
"""

# A Keras fit trace (10 profiled batches), with Keras' per-batch markers and without.
tracegen.case("keras_markers", "MARKERS = True\n" + KERAS_SOURCE, steps=10)
tracegen.case("keras_plain", "MARKERS = False\n" + KERAS_SOURCE, steps=10)


def one_file(logdir: Path) -> Path:
    (f,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    return f
