"""Keras `fit` on a small synthetic dataset: the loop style most users have."""

from __future__ import annotations

import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()

rng = np.random.default_rng(0)
features = rng.normal(size=(2048, 16)).astype("float32")
labels = (features.sum(axis=1) > 0).astype("float32")


def augment(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return x + tf.random.normal(tf.shape(x), stddev=0.01), y


ds = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(2048).repeat()
ds = ds.map(augment)
ds = ds.batch(args.batch_size)

model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(16,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(1, activation="sigmoid", dtype="float32"),
    ]
)
model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(ds, steps_per_epoch=args.steps, epochs=args.epochs, verbose=0)
print("done")
