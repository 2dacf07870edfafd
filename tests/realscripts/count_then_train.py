"""Tabular classifier from a CSV file with a hand-written training loop.

The dataset has no length, so the script counts its rows first, peeks one batch to get
the shapes and the normalization statistics, then trains with a compiled step. Each
batch is normalized, clipped row by row and jittered with numpy in the Python loop.
"""

import argparse
import os
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
parser.add_argument("--batch-size", type=int, default=128)
args = parser.parse_args()

NUM_FEATURES = 32
NUM_CLASSES = 3

csv_path = os.path.join(args.data, "tabular.csv")
columns = [tf.float32] * NUM_FEATURES + [tf.int32]
raw = tf.data.experimental.CsvDataset(csv_path, record_defaults=columns, header=True)


def pack_row(*fields):
    return tf.stack(fields[:NUM_FEATURES]), fields[NUM_FEATURES]


rows = raw.map(pack_row)

# How many examples are there? CsvDataset does not know its length.
num_examples = 0
for _ in rows:
    num_examples += 1
steps_per_epoch = num_examples // args.batch_size
print(f"{num_examples} examples, {steps_per_epoch} steps per epoch")

train_ds = rows.shuffle(2048, seed=7).batch(args.batch_size, drop_remainder=True).prefetch(1)

# Look at one batch: shapes, and the statistics to normalize with.
first_x, first_y = next(iter(train_ds))
print("features", first_x.shape, "labels", first_y.shape)
mean = first_x.numpy().mean(axis=0)
std = first_x.numpy().std(axis=0) + 1e-6

model = keras.Sequential(
    [
        keras.Input(shape=(NUM_FEATURES,)),
        keras.layers.Dense(1024, activation="relu"),
        keras.layers.Dense(1024, activation="relu"),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(NUM_CLASSES),
    ]
)
optimizer = keras.optimizers.Adam(learning_rate=1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
train_acc = keras.metrics.SparseCategoricalAccuracy()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
    train_acc.update_state(y, logits)
    return loss


rng = np.random.default_rng(0)
step = 0
step_times = []
done = False
for epoch in range(args.epochs):
    batches = iter(train_ds)
    for _ in range(steps_per_epoch):
        start = time.perf_counter()
        x, y = next(batches)
        x = (x.numpy() - mean) / std
        for i in range(len(x)):  # clip outliers row by row
            x[i] = np.clip(x[i], -4.0, 4.0)
        x += rng.normal(0.0, 0.01, size=x.shape).astype(np.float32)
        loss = train_step(x, y)
        step_times.append(time.perf_counter() - start)
        step += 1
        if args.steps and step >= args.steps:
            done = True
            break
    print(f"epoch {epoch}: loss {float(loss):.4f} accuracy {float(train_acc.result()):.3f}")
    train_acc.reset_state()
    if done:
        break

median_ms = 1000 * float(np.median(step_times[2:] or step_times))
print(f"trained {step} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
