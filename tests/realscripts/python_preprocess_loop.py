"""Custom loop over JPEG files with the augmentation written in numpy.

tf.data lists, decodes and batches the images; each batch is then pulled to numpy and
augmented image by image in Python (random crop, flip, colour jitter, cutout) before a
compiled train step. A common shape for code ported from a PyTorch/numpy pipeline.
"""

import argparse
import os
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()

image_dir = os.path.join(args.data, "images")
class_names = np.array(sorted(os.listdir(image_dir)))
SIZE = 64
CROP = 56


def parse_image(path):
    label = tf.argmax(tf.cast(tf.strings.split(path, os.path.sep)[-2] == class_names, tf.int32))
    image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    return image, label


files = tf.data.Dataset.list_files(os.path.join(image_dir, "*", "*.jpg"), shuffle=True, seed=3)
ds = files.map(parse_image, num_parallel_calls=tf.data.AUTOTUNE).batch(args.batch_size)


def augment_batch(images, rng):
    """Per-image augmentation in numpy: random crop, flip, jitter and cutout."""
    out = np.empty((len(images), CROP, CROP, 3), dtype=np.float32)
    for i, img in enumerate(images):
        top, left = rng.integers(0, SIZE - CROP + 1, size=2)
        patch = img[top : top + CROP, left : left + CROP].astype(np.float32) / 255.0
        if rng.random() < 0.5:
            patch = patch[:, ::-1]
        patch = patch * rng.uniform(0.8, 1.2) + rng.uniform(-0.1, 0.1, size=3)
        cy, cx = rng.integers(0, CROP, size=2)
        patch[max(0, cy - 6) : cy + 6, max(0, cx - 6) : cx + 6] = 0.0
        out[i] = np.clip(patch, 0.0, 1.0)
    return out


model = keras.Sequential(
    [
        keras.Input(shape=(CROP, CROP, 3)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(len(class_names)),
    ]
)
optimizer = keras.optimizers.RMSprop(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
    return loss


rng = np.random.default_rng(0)
step = 0
step_times = []
for epoch in range(args.epochs):
    last = time.perf_counter()
    for images, labels in ds:
        batch = augment_batch(images.numpy(), rng)
        loss = train_step(batch, labels)
        now = time.perf_counter()
        step_times.append(now - last)
        last = now
        step += 1
        if args.steps and step >= args.steps:
            break
    print(f"epoch {epoch}: loss {float(loss):.4f}")
    if args.steps and step >= args.steps:
        break

median_ms = 1000 * float(np.median(step_times[2:] or step_times))
print(f"trained {step} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
