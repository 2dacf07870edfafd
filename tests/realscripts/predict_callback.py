"""model.fit with a callback that predicts on held-out data every few batches.

A shape classifier on 28x28 images. The callback calls `self.model.predict` on a held-out
tf.data dataset every `--every` training batches and at each epoch's end, and logs the
held-out accuracy, the way people track a metric Keras does not compute for them.
"""

import argparse
import os
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--every", type=int, default=10, help="predict every N training batches")
args = parser.parse_args()

with np.load(os.path.join(args.data, "shapes.npz")) as f:
    x_train, y_train = f["x_train"], f["y_train"]
    x_test, y_test = f["x_test"], f["y_test"]


def preprocess(image, label):
    return tf.cast(image, tf.float32)[..., tf.newaxis] / 255.0, label


train_ds = (
    tf.data.Dataset.from_tensor_slices((x_train, y_train))
    .shuffle(2000, seed=11)
    .map(preprocess)
    .batch(args.batch_size)
    .prefetch(2)
)
heldout_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(preprocess).batch(256)


class HeldOutAccuracy(keras.callbacks.Callback):
    def __init__(self, dataset, labels, every):
        super().__init__()
        self.dataset, self.labels, self.every = dataset, labels, every
        self.history = []

    def _evaluate(self):
        probs = self.model.predict(self.dataset, verbose=0)
        acc = float(np.mean(np.argmax(probs, axis=1) == self.labels))
        self.history.append(acc)
        return acc

    def on_train_batch_end(self, batch, logs=None):
        if batch > 0 and batch % self.every == 0:
            self._evaluate()

    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch}: held-out accuracy {self._evaluate():.3f}")


class StepTimer(keras.callbacks.Callback):
    """Time of each training batch alone (predict calls in between are left out)."""

    def on_train_begin(self, logs=None):
        self.times = []

    def on_train_batch_begin(self, batch, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self.start)


model = keras.Sequential(
    [
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(5, activation="softmax"),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
)
timer = StepTimer()
model.fit(
    train_ds,
    epochs=args.epochs,
    callbacks=[timer, HeldOutAccuracy(heldout_ds, y_test, args.every)],
    verbose=0,
)
median_ms = 1000 * float(np.median(timer.times[2:] or timer.times))
print(f"trained {len(timer.times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
