"""The whole loop inside a `tf.function`: Python's `next` is never called per step."""

from __future__ import annotations

import argparse

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()


def make_example(i: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    x = tf.random.stateless_normal([16], seed=tf.stack([i, i]))
    return x, tf.reduce_sum(x)


ds = tf.data.Dataset.range(1_000_000).map(make_example).batch(args.batch_size)
ds = ds.take(args.steps)
weights = tf.Variable(tf.zeros([16]))


@tf.function
def train(dataset: tf.data.Dataset) -> tf.Tensor:
    loss = tf.constant(0.0)
    for x, y in dataset:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, weights) - y))
        weights.assign_sub(0.01 * tape.gradient(loss, weights))
    return loss


print(f"loss {float(train(ds)):.3f}")
