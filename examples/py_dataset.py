"""A Keras PyDataset: Keras fetches each batch from `__getitem__`, one after another.

Each batch waits ~8 ms on "storage" and is then built in NumPy. With Keras' defaults
(`workers=1`) training waits for every fetch; worker threads (or processes, for Python
that computes) fetch several at once. The knobs live in the subclass's
`super().__init__(...)` call. Try: tftune optimize examples/py_dataset.py
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--latency-ms", type=float, default=8.0)
args = parser.parse_args()


class Shards(tf.keras.utils.PyDataset):
    def __init__(self, batches: int, batch_size: int = 32, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batches, self.batch_size = batches, batch_size

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(args.latency_ms / 1000.0)  # the read
        rng = np.random.default_rng(index)
        x = rng.normal(size=(self.batch_size, 32)).astype(np.float32)
        return x, (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)


model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(32,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(1, activation="sigmoid", dtype="float32"),
    ]
)
model.compile(optimizer="adam", loss="binary_crossentropy")
started = time.perf_counter()
model.fit(Shards(args.steps), epochs=args.epochs, verbose=0)
elapsed = time.perf_counter() - started
print(f"{args.steps * args.epochs * 32 / elapsed:,.0f} examples/s")
