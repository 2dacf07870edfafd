"""A sharded TFRecord data set read one shard after the other.

The shards are listed with `Dataset.list_files` (shuffled each epoch, as its default
is), then `flat_map(tf.data.TFRecordDataset)`: each shard is opened and read to its end
before the next one is opened. A parse map, a shuffle buffer, `batch`, `prefetch`, and a
custom training loop whose update is a `tf.function`, for several epochs.
"""

import time

START = time.perf_counter()

import argparse
import os

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()

FEATURES = {
    "x": tf.io.FixedLenFeature([64], tf.float32),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


def parse(record):
    example = tf.io.parse_single_example(record, FEATURES)
    x = example["x"]
    x = (x - tf.reduce_mean(x)) / (tf.math.reduce_std(x) + 1e-6)
    return x, example["label"]


files = tf.data.Dataset.list_files(os.path.join(args.data, "shards", "train-*.tfrecord"))
train_ds = files.flat_map(tf.data.TFRecordDataset)
train_ds = train_ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
train_ds = train_ds.shuffle(1000).batch(args.batch_size).prefetch(tf.data.AUTOTUNE)

model = keras.Sequential(
    [
        keras.Input(shape=(64,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ]
)
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


examples, seconds, steps, first, step_times = 0, 0.0, 0, None, []
for epoch in range(args.epochs):
    start = last = time.perf_counter()
    first = first or start
    seen = 0
    for x, y in train_ds:
        loss = train_step(x, y)
        now = time.perf_counter()
        step_times.append(now - last)
        last = now
        seen += int(x.shape[0])
        steps += epoch >= 1
    elapsed = time.perf_counter() - start
    if epoch >= 1:  # the first epoch traces: left out
        examples, seconds = examples + seen, seconds + elapsed
    print(f"epoch {epoch + 1}: loss {float(loss):.4f} ({elapsed:.2f} s)")

print(f"preamble {first - START:.1f} s")
median_ms = 1000 * float(np.median(step_times[2:] or step_times))
print(f"trained {len(step_times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
print(f"training rate {examples / max(seconds, 1e-9):.1f} ex/s over {steps} steps")
