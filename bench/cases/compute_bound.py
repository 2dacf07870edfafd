"""A compute-bound Keras model on an in-memory dataset: the pipeline is never the limit,
so pipeline knobs cannot help; only the model's cost (precision, batch) can."""

from __future__ import annotations

import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()

rng = np.random.default_rng(0)
features = rng.normal(size=(4096, 512)).astype("float32")
labels = rng.integers(0, 10, size=(4096,)).astype("int32")

ds = tf.data.Dataset.from_tensor_slices((features, labels)).repeat()
ds = ds.map(lambda x, y: (x * 0.5, y))
ds = ds.batch(args.batch_size)

model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(512,)),
        tf.keras.layers.Dense(1024, activation="relu"),
        tf.keras.layers.Dense(1024, activation="relu"),
        tf.keras.layers.Dense(10, dtype="float32"),
    ]
)
model.compile(
    optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
)
model.fit(ds, steps_per_epoch=args.steps, epochs=1, verbose=0)
