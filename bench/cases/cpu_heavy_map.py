"""A CPU-heavy map (a small FFT and matrix product per example): compute-bound, so the
useful parallelism is the core count, and more threads only add contention."""

from __future__ import annotations

import argparse

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()


def featurize(i: tf.Tensor) -> tf.Tensor:
    x = tf.random.stateless_normal([96, 96], seed=tf.stack([i, i]))
    spec = tf.abs(tf.signal.rfft2d(x))
    return tf.reduce_mean(tf.matmul(spec, spec, transpose_b=True), axis=0)


ds = tf.data.Dataset.range(10_000_000)
ds = ds.map(featurize)
ds = ds.batch(args.batch_size)

for step, batch in enumerate(ds):
    tf.reduce_sum(batch)
    if step + 1 >= args.steps:
        break
