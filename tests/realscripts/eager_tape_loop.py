"""A custom training loop with GradientTape, left running eagerly.

The "custom training loop from scratch" guide's shape on 28x28 shape images: shuffled,
batched, prefetched in-memory arrays, a small CNN, Adam and a metric, one epoch after
another. The author commented `@tf.function` out (to debug, and forgot), so every step
runs op by op in Python.
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
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()

with np.load(os.path.join(args.data, "shapes.npz")) as f:
    x_train, y_train = f["x_train"], f["y_train"]
x_train = x_train.reshape(-1, 28, 28, 1).astype("float32") / 255.0

train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
train_dataset = train_dataset.shuffle(buffer_size=1024).batch(args.batch_size).prefetch(2)

model = keras.Sequential(
    [
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(5),
    ]
)
optimizer = keras.optimizers.Adam(learning_rate=1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
train_acc_metric = keras.metrics.SparseCategoricalAccuracy()


# @tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    train_acc_metric.update_state(y, logits)
    return loss_value


WARMUP_STEPS = 5
step_times = []
examples, seconds, counted, first_step = 0, 0.0, 0, None
step = 0
for epoch in range(args.epochs):
    print(f"Start of epoch {epoch}")
    last = time.perf_counter()
    for x_batch_train, y_batch_train in train_dataset:
        if first_step is None:
            first_step = last
        loss_value = train_step(x_batch_train, y_batch_train)
        now = time.perf_counter()
        step_times.append(now - last)
        if step >= WARMUP_STEPS:
            examples += int(x_batch_train.shape[0])
            seconds += now - last
            counted += 1
        last = now
        step += 1
        if step % 20 == 0:
            print(f"step {step}: loss {float(loss_value):.4f}")
        if args.steps and step >= args.steps:
            break
    # The epoch's end is training time too: its last next() waits until the pipeline
    # says the data is exhausted.
    if step > WARMUP_STEPS:
        seconds += time.perf_counter() - last
    print(f"Training acc over epoch: {float(train_acc_metric.result()):.4f}")
    train_acc_metric.reset_state()
    if args.steps and step >= args.steps:
        break

print(f"preamble {first_step - START:.1f} s")
median_ms = 1000 * float(np.median(step_times[2:] or step_times))
print(f"trained {step} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
print(f"training rate {examples / max(seconds, 1e-9):.1f} ex/s over {counted} steps")
