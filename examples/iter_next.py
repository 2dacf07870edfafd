"""A step loop that pulls batches with `iter`/`next`."""

from __future__ import annotations

import argparse

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()


def make_example(i: tf.Tensor) -> dict[str, tf.Tensor]:
    x = tf.random.stateless_normal([16], seed=tf.stack([i, i]))
    return {"x": x, "y": tf.reduce_sum(x)}


ds = tf.data.Dataset.range(1_000_000).map(make_example).batch(args.batch_size)

weights = tf.Variable(tf.zeros([16]))


@tf.function
def train_step(batch: dict[str, tf.Tensor]) -> tf.Tensor:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.linalg.matvec(batch["x"], weights) - batch["y"]))
    weights.assign_sub(0.01 * tape.gradient(loss, weights))
    return loss


iterator = iter(ds)
for _ in range(args.steps):
    loss = train_step(next(iterator))
print(f"loss {float(loss):.3f}")
