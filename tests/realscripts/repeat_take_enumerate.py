"""Autoencoder plus a classifier head on its codes, trained with two optimizers.

A fixed number of steps over a repeated dataset:
`for step, (x, y) in train_ds.repeat().take(steps).enumerate()`. The encoder/decoder learn
to reconstruct with one Adam; the head learns the labels from the (frozen) codes with an
SGD of its own, after a warm-up the step number controls.
"""

import argparse
import os
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--steps", type=int, default=500)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--warmup", type=int, default=20)
args = parser.parse_args()

with np.load(os.path.join(args.data, "shapes.npz")) as f:
    x_train, y_train = f["x_train"], f["y_train"]
    x_test, y_test = f["x_test"], f["y_test"]


def to_float(image, label):
    image = tf.cast(image, tf.float32)[..., tf.newaxis] / 255.0
    return image, label


train_ds = (
    tf.data.Dataset.from_tensor_slices((x_train, y_train))
    .shuffle(len(x_train), seed=1)
    .map(to_float, num_parallel_calls=tf.data.AUTOTUNE)
    .batch(args.batch_size, drop_remainder=True)
)
test_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(to_float).batch(250)

sample_images, sample_labels = next(iter(test_ds.take(1)))
print("test batch", sample_images.shape, sample_labels.shape)

encoder = keras.Sequential(
    [
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
        keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(32),
    ],
    name="encoder",
)
decoder = keras.Sequential(
    [
        keras.Input(shape=(32,)),
        keras.layers.Dense(7 * 7 * 64, activation="relu"),
        keras.layers.Reshape((7, 7, 64)),
        keras.layers.Conv2DTranspose(32, 3, strides=2, padding="same", activation="relu"),
        keras.layers.Conv2DTranspose(1, 3, strides=2, padding="same", activation="sigmoid"),
    ],
    name="decoder",
)
head = keras.Sequential(
    [keras.Input(shape=(32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(5)],
    name="head",
)

ae_optimizer = keras.optimizers.Adam(1e-3)
head_optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
ae_vars = encoder.trainable_variables + decoder.trainable_variables


@tf.function
def train_step(x, y, step):
    with tf.GradientTape() as ae_tape, tf.GradientTape() as head_tape:
        codes = encoder(x, training=True)
        recon = decoder(codes, training=True)
        recon_loss = tf.reduce_mean(tf.square(recon - x))
        logits = head(tf.stop_gradient(codes), training=True)
        head_loss = xent(y, logits)
    ae_grads = ae_tape.gradient(recon_loss, ae_vars)
    ae_optimizer.apply_gradients(zip(ae_grads, ae_vars, strict=False))
    # The head starts once the codes mean something.
    if step >= args.warmup:
        head_grads = head_tape.gradient(head_loss, head.trainable_variables)
        head_optimizer.apply_gradients(zip(head_grads, head.trainable_variables, strict=False))
    return recon_loss, head_loss


step_times = []
last = time.perf_counter()
for step, (x, y) in train_ds.repeat().take(args.steps).enumerate():
    recon_loss, head_loss = train_step(x, y, step)
    now = time.perf_counter()
    step_times.append(now - last)
    last = now
    if step % 100 == 0:
        print(f"step {int(step)}: recon {float(recon_loss):.4f} head {float(head_loss):.4f}")

test_logits = head(encoder(sample_images))
accuracy = float(np.mean(np.argmax(test_logits, axis=1) == sample_labels.numpy()))
print(f"test accuracy on the peeked batch: {accuracy:.3f}")
median_ms = 1000 * float(np.median(step_times[2:] or step_times))
print(f"trained {len(step_times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
