"""A bursty source: most reads take 0.3 ms, every 32nd takes 40 ms (a cold cache, a
slow shard). The average is fine; the stalls are not, unless the buffer absorbs them."""

from __future__ import annotations

import argparse
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()


def read(i: tf.Tensor) -> tf.Tensor:
    def _read(k: tf.Tensor) -> tf.Tensor:
        time.sleep(0.040 if int(k) % 32 == 0 else 0.0003)
        return tf.cast(k, tf.float32)

    v = tf.py_function(_read, [i], tf.float32)
    v.set_shape([])
    return v


ds = tf.data.Dataset.range(100_000_000)
ds = ds.map(read)
ds = ds.batch(args.batch_size)
ds = ds.prefetch(1)

w = tf.random.normal([256, 256])
for step, batch in enumerate(ds):
    x = tf.fill([8, 256], tf.reduce_mean(batch))
    for _ in range(4):  # ~1-2 ms of "training" per step
        x = tf.tanh(tf.matmul(x, w))
    if step + 1 >= args.steps:
        break
