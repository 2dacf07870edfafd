"""Custom loop over TFRecords, with a full validation pass after every (short) epoch.

The training dataset repeats forever; an "epoch" is a fixed number of steps drawn from
one iterator. After each one the whole validation dataset (larger batches, forward pass
only) is evaluated, so validation runs often.
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
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--val-batch-size", type=int, default=500)
args = parser.parse_args()

FEATURES = {
    "x": tf.io.FixedLenFeature([64], tf.float32),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


def parse(record):
    example = tf.io.parse_single_example(record, FEATURES)
    return example["x"], example["label"]


record_dir = os.path.join(args.data, "records")
train_ds = (
    tf.data.TFRecordDataset(os.path.join(record_dir, "train.tfrecord"))
    .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    .shuffle(4000, seed=5)
    .repeat()
    .batch(args.batch_size)
    .prefetch(tf.data.AUTOTUNE)
)
val_ds = (
    tf.data.TFRecordDataset(os.path.join(record_dir, "val.tfrecord"))
    .map(parse)
    .batch(args.val_batch_size)
)

model = keras.Sequential(
    [
        keras.Input(shape=(64,)),
        keras.layers.Dense(1024, activation="relu"),
        keras.layers.Dropout(0.1),
        keras.layers.Dense(1024, activation="relu"),
        keras.layers.Dense(10),
    ]
)
optimizer = keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-4)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
train_loss = keras.metrics.Mean()
val_loss = keras.metrics.Mean()
val_acc = keras.metrics.SparseCategoricalAccuracy()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
    train_loss.update_state(loss)


@tf.function
def val_step(x, y):
    logits = model(x, training=False)
    val_loss.update_state(loss_fn(y, logits))
    val_acc.update_state(y, logits)


train_iter = iter(train_ds)
step_times = []
first_step = None
examples, seconds = 0, 0.0  # after a warm-up of 5 steps; validation left out
for epoch in range(args.epochs):
    for _ in range(args.steps_per_epoch):
        start = time.perf_counter()
        if first_step is None:
            first_step = start
        x, y = next(train_iter)
        train_step(x, y)
        step_times.append(time.perf_counter() - start)
        if len(step_times) > 5:
            examples += int(x.shape[0])
            seconds += step_times[-1]
    for x, y in val_ds:
        val_step(x, y)
    print(
        f"epoch {epoch}: loss {float(train_loss.result()):.4f} "
        f"val_loss {float(val_loss.result()):.4f} val_acc {float(val_acc.result()):.3f}"
    )
    for metric in (train_loss, val_loss, val_acc):
        metric.reset_state()

print(f"preamble {first_step - START:.1f} s")
median_ms = 1000 * float(np.median(step_times[2:] or step_times))
print(f"trained {len(step_times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
print(f"training rate {examples / max(seconds, 1e-9):.1f} ex/s over {max(len(step_times) - 5, 0)} steps")
