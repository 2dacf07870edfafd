"""Image classification from a folder of JPEGs, one sub-folder per class.

The Keras tutorial's shape: image_dataset_from_directory with a validation split, cache,
random augmentation in a map after the cache, prefetch, then model.fit with
validation_data.
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
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()

IMG_SIZE = (64, 64)
data_dir = os.path.join(args.data, "images")

train_ds = keras.utils.image_dataset_from_directory(
    data_dir,
    validation_split=0.2,
    subset="training",
    seed=123,
    image_size=IMG_SIZE,
    batch_size=args.batch_size,
)
val_ds = keras.utils.image_dataset_from_directory(
    data_dir,
    validation_split=0.2,
    subset="validation",
    seed=123,
    image_size=IMG_SIZE,
    batch_size=args.batch_size,
)
class_names = train_ds.class_names
print("classes:", class_names)


def augment(images, labels):
    images = tf.image.random_flip_left_right(images)
    images = tf.image.resize_with_crop_or_pad(images, IMG_SIZE[0] + 8, IMG_SIZE[1] + 8)
    images = tf.image.random_crop(images, tf.stack([tf.shape(images)[0], *IMG_SIZE, 3]))
    images = tf.image.random_brightness(images, max_delta=20.0)
    return tf.clip_by_value(images, 0.0, 255.0), labels


AUTOTUNE = tf.data.AUTOTUNE
train_ds = train_ds.cache().shuffle(1000).map(augment, num_parallel_calls=AUTOTUNE)
train_ds = train_ds.prefetch(buffer_size=AUTOTUNE)
val_ds = val_ds.cache().prefetch(buffer_size=AUTOTUNE)

model = keras.Sequential(
    [
        keras.Input(shape=(*IMG_SIZE, 3)),
        keras.layers.Rescaling(1.0 / 255),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Dropout(0.2),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(len(class_names)),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)


class StepTimer(keras.callbacks.Callback):
    """Wall time between consecutive training batches."""

    def on_train_begin(self, logs=None):
        self.times, self.last = [], None

    def on_epoch_begin(self, epoch, logs=None):
        self.last = time.perf_counter()  # validation runs between epochs: not a step

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.times.append(now - self.last)
        self.last = now


timer = StepTimer()
history = model.fit(
    train_ds, validation_data=val_ds, epochs=args.epochs, callbacks=[timer], verbose=2
)
median_ms = 1000 * float(np.median(timer.times[2:] or timer.times))
print(f"trained {len(timer.times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
