"""A latency-bound input pipeline: each element waits ~4 ms (like a remote read).

The map is sequential and there is no prefetch, so the consumer waits for every element.
AUTOTUNE caps parallelism at the core count; many threads with a large private threadpool
hide the latency. Try: tftune optimize examples/latency_bound.py -- --steps 400
"""

from __future__ import annotations

import argparse
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--latency-ms", type=float, default=4.0)
args = parser.parse_args()


def slow_read(index: tf.Tensor) -> tf.Tensor:
    def _read(i: tf.Tensor) -> tf.Tensor:
        time.sleep(args.latency_ms / 1000.0)
        # A value in [0, 1): the raw index grows without bound, and a fast pipeline
        # reached indices whose squares made SGD diverge (the weights became NaN).
        return tf.cast(i % 1000, tf.float32) / 1000.0

    value = tf.py_function(_read, [index], tf.float32)
    value.set_shape([])
    return value


ds = tf.data.Dataset.range(1_000_000_000)
ds = ds.map(slow_read)
ds = ds.batch(args.batch_size)

# A small model: the step is quick, so the input pipeline is the limit.
weight = tf.Variable(0.0)
optimizer = tf.keras.optimizers.SGD(1e-9)


@tf.function
def train_step(batch: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(batch * weight - 1.0))
    optimizer.apply_gradients([(tape.gradient(loss, weight), weight)])
    return loss


start = time.perf_counter()
for step, batch in enumerate(ds):
    train_step(batch)
    if step + 1 >= args.steps:
        break
elapsed = time.perf_counter() - start
print(f"{args.steps * args.batch_size / elapsed:.0f} examples/s")
