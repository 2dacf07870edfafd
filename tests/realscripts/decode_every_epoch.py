"""Image classification where every epoch decodes and preprocesses the images again.

The "load and preprocess images" tutorial's shape without its `cache()`: the file paths
listed in Python, a sequential `map` that reads each JPEG, decodes it, resizes it with a
bicubic filter and adds an edge channel (all deterministic), then `shuffle`, `batch`,
`prefetch`, and `model.fit` for many short epochs. The data set is small enough to keep
in memory, so all of the map's work could be done once: every epoch does it again.
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
parser.add_argument("--epochs", type=int, default=12)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--size", type=int, default=160)
args = parser.parse_args()

classes = sorted(os.listdir(os.path.join(args.data, "images")))
paths, labels = [], []
for label, name in enumerate(classes):
    folder = os.path.join(args.data, "images", name)
    for file in sorted(os.listdir(folder)):
        paths.append(os.path.join(folder, file))
        labels.append(label)
print(f"{len(paths)} images in {len(classes)} classes")


def load(path, label):
    image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    image = tf.image.resize(image, [args.size, args.size], method="bicubic") / 255.0
    gray = tf.image.rgb_to_grayscale(image)
    sobel = tf.image.sobel_edges(gray[tf.newaxis])[0, :, :, 0, :]
    edges = tf.sqrt(tf.reduce_sum(tf.square(sobel), axis=-1, keepdims=True))
    return tf.concat([image, edges], axis=-1), label


train_ds = tf.data.Dataset.from_tensor_slices((paths, labels))
train_ds = train_ds.map(load)
train_ds = train_ds.shuffle(len(paths))
train_ds = train_ds.batch(args.batch_size)
train_ds = train_ds.prefetch(tf.data.AUTOTUNE)

model = keras.Sequential(
    [
        keras.Input(shape=(args.size, args.size, 4)),
        keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(len(classes)),
    ]
)


class CountExamples(keras.metrics.Metric):
    """Examples seen this epoch, from the batches themselves."""

    def __init__(self, name="n", **kwargs):
        super().__init__(name=name, **kwargs)
        self.n = self.add_variable(shape=(), initializer="zeros", name="n")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.n.assign_add(tf.cast(tf.shape(y_true)[0], "float32"))

    def result(self):
        return self.n


class TrainingTime(keras.callbacks.Callback):
    """Wall time of the training epochs after the first, first batch's wait included."""

    def __init__(self):
        super().__init__()
        self.seconds, self.examples, self.steps, self.first_batch = 0.0, 0, 0, None
        self.step_times = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.start = self.last = time.perf_counter()

    def on_train_batch_begin(self, batch, logs=None):
        if self.first_batch is None:
            self.first_batch = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.step_times.append(now - self.last)
        self.last, self.seen, self.batches = now, int(logs["n"]), batch + 1

    def on_epoch_end(self, epoch, logs=None):
        if epoch >= 1:  # the first epoch traces and fills: left out
            self.seconds += self.last - self.start
            self.examples += self.seen
            self.steps += self.batches


model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy", CountExamples()],
)
timer = TrainingTime()
history = model.fit(train_ds, epochs=args.epochs, callbacks=[timer], verbose=2)
print(f"final accuracy {history.history['accuracy'][-1]:.3f}")
print(f"preamble {timer.first_batch - START:.1f} s")
median_ms = 1000 * float(np.median(timer.step_times[2:] or timer.step_times))
print(f"trained {len(timer.step_times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
print(f"training rate {timer.examples / max(timer.seconds, 1e-9):.1f} ex/s over {timer.steps} steps")
