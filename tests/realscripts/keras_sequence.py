"""Image classification fed by a keras.utils.PyDataset (the old `keras.utils.Sequence`).

The data generator written by hand, as in many blog posts and Kaggle notebooks: the
class lists the files once, and `__getitem__` reads and decodes one batch of JPEGs,
resizes, flips and normalizes them in NumPy; `on_epoch_end` reshuffles. `fit` pulls
the batches with Keras' defaults (one worker thread).
"""

import time

START = time.perf_counter()

import argparse
import math
import os

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--image-size", type=int, default=56)
args = parser.parse_args()


class ImageFolderSequence(keras.utils.PyDataset):
    def __init__(self, root, batch_size, image_size, shuffle=True, **kwargs):
        super().__init__(**kwargs)
        self.class_names = sorted(os.listdir(root))
        self.files, self.labels = [], []
        for label, name in enumerate(self.class_names):
            for fname in sorted(os.listdir(os.path.join(root, name))):
                self.files.append(os.path.join(root, name, fname))
                self.labels.append(label)
        self.labels = np.array(self.labels)
        self.batch_size, self.image_size, self.shuffle = batch_size, image_size, shuffle
        self.indices = np.arange(len(self.files))
        self.rng = np.random.default_rng(0)
        self.on_epoch_end()

    def __len__(self):
        return math.ceil(len(self.files) / self.batch_size)

    def __getitem__(self, idx):
        batch = self.indices[idx * self.batch_size:(idx + 1) * self.batch_size]
        images = np.zeros((len(batch), self.image_size, self.image_size, 3), dtype="float32")
        for i, j in enumerate(batch):
            raw = tf.io.read_file(self.files[j])
            image = tf.io.decode_jpeg(raw, channels=3).numpy()
            # crop a random square and resize it by nearest neighbour, in NumPy
            h, w, _ = image.shape
            top, left = self.rng.integers(0, h - self.image_size + 1), self.rng.integers(0, w - self.image_size + 1)
            image = image[top:top + self.image_size, left:left + self.image_size]
            if self.rng.random() < 0.5:
                image = image[:, ::-1]
            images[i] = image / 255.0
        return images, self.labels[batch]

    def on_epoch_end(self):
        if self.shuffle:
            self.rng.shuffle(self.indices)


train_gen = ImageFolderSequence(os.path.join(args.data, "images"), args.batch_size, args.image_size)
print(f"{len(train_gen.files)} images, {len(train_gen)} batches an epoch")

model = keras.Sequential(
    [
        keras.Input(shape=(args.image_size, args.image_size, 3)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(len(train_gen.class_names), activation="softmax"),
    ]
)


class CountExamples(keras.metrics.Metric):
    """The number of examples in the batches seen this epoch."""

    def __init__(self, name="examples", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign_add(tf.cast(tf.shape(y_pred)[0], "float32"))

    def result(self):
        return self.total


model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
              metrics=["accuracy", CountExamples()])


class StepTimer(keras.callbacks.Callback):
    def __init__(self, warmup=5):
        super().__init__()
        self.warmup, self.times = warmup, []
        self.counted, self.examples, self.seconds, self.first = 0, 0, 0.0, None

    def on_epoch_begin(self, epoch, logs=None):
        self.last, self.seen = time.perf_counter(), 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.first is None:
            self.first = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.times.append(now - self.last)
        seen = int(logs["examples"])
        if len(self.times) > self.warmup:
            self.counted += 1
            self.examples += seen - self.seen
            self.seconds += now - self.last
        self.last, self.seen = now, seen


timer = StepTimer()
model.fit(train_gen, epochs=args.epochs, callbacks=[timer], verbose=2)
print(f"preamble {timer.first - START:.1f} s")
median_ms = 1000 * float(np.median(timer.times[2:] or timer.times))
print(f"trained {len(timer.times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
print(f"training rate {timer.examples / max(timer.seconds, 1e-9):.1f} ex/s over {timer.counted} steps")
