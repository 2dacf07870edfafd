"""Latency-bound I/O: records read from "remote" shards, ~5 ms per read (like GCS/NFS).

Written the way many scripts are: a sequential map and no prefetch. The reads release the
GIL (they wait), so far more parallel reads than cores pay off; AUTOTUNE stops at the
default thread pool (the core count).
"""

from __future__ import annotations

import argparse
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--latency-ms", type=float, default=5.0)
args = parser.parse_args()


def remote_read(key: tf.Tensor) -> tf.Tensor:
    def _read(k: tf.Tensor) -> tf.Tensor:
        time.sleep(args.latency_ms / 1000.0)
        return tf.fill([32], tf.cast(k, tf.float32))

    value = tf.py_function(_read, [key], tf.float32)
    value.set_shape([32])
    return value


shards = tf.data.Dataset.range(1_000_000)
ds = shards.interleave(lambda s: tf.data.Dataset.range(s * 100, s * 100 + 100), cycle_length=2)
ds = ds.map(remote_read)
ds = ds.batch(args.batch_size)

for step, batch in enumerate(ds):
    tf.reduce_mean(batch)
    if step + 1 >= args.steps:
        break
