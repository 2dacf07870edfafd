"""A GIL-bound tokenizer: pure Python in a py_function holds the interpreter lock, so
parallel calls barely help; prefetching overlaps it with the training step."""

from __future__ import annotations

import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()

WORDS = [f"w{i}" for i in range(5000)]
VOCAB = {w: i for i, w in enumerate(WORDS)}


def tokenize(i: tf.Tensor) -> tf.Tensor:
    def _tok(k: tf.Tensor) -> np.ndarray:
        n = int(k)
        text = " ".join(WORDS[(n * 7 + j * 13) % len(WORDS)] for j in range(400))
        ids = [VOCAB[w] for w in text.split()][:64]
        return np.asarray(ids, dtype=np.int32)

    out = tf.py_function(_tok, [i], tf.int32)
    out.set_shape([64])
    return out


ds = tf.data.Dataset.range(10_000_000).map(tokenize)
ds = ds.batch(args.batch_size)

embed = tf.random.normal([5000, 64])
for step, batch in enumerate(ds):
    tf.reduce_sum(tf.matmul(tf.nn.embedding_lookup(embed, batch), embed, transpose_b=True))
    if step + 1 >= args.steps:
        break
