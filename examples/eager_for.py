"""A custom training loop: eager `for batch in ds`, with a compiled train step."""

from __future__ import annotations

import argparse

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()


def make_example(i: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    x = tf.random.stateless_normal([16], seed=tf.stack([i, i]))
    return x, tf.cast(tf.reduce_sum(x) > 0, tf.float32)


ds = tf.data.Dataset.range(1_000_000).map(make_example, num_parallel_calls=2)
ds = ds.batch(args.batch_size).prefetch(2)

model = tf.keras.Sequential([tf.keras.Input(shape=(16,)), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(0.01)


@tf.function
def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x)[:, 0] - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
    return loss


for step, (x, y) in enumerate(ds):
    loss = train_step(x, y)
    if step + 1 >= args.steps:
        break
print(f"loss {float(loss):.3f}")
