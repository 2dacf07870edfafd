"""Latency-bound I/O: records fetched from "remote" shards, ~5 ms per read (like GCS/NFS).

Each record is fetched by a Python client (`tf.numpy_function`, as object-store clients
are usually called) that waits ~5 ms for the network and returns the raw bytes, which
the graph decodes. Written the way many scripts are: a sequential map and no prefetch.
The reads wait without holding the GIL, so far more parallel reads than cores pay off;
AUTOTUNE stops at the default thread pool (the core count).

The per-call CPU cost is kept to what such a client costs: `tf.py_function` with eager
ops inside the reader costs several times more CPU per call (measured on 2 cores, 32
parallel reads: ~1,300 records/s with eager ops in a `py_function`, ~2,400 with bytes
from a `py_function`, ~4,400 with bytes from a `numpy_function`), which makes a
2-core machine CPU-bound well before the latency is hidden. `examples/latency_bound.py`
is that `py_function` variant.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--latency-ms", type=float, default=5.0)
args = parser.parse_args()

RECORD = np.arange(32, dtype=np.float32)


def fetch(key: np.int64) -> bytes:
    time.sleep(args.latency_ms / 1000.0)  # the round trip to the storage service
    return (RECORD + np.float32(key)).tobytes()


def remote_read(key: tf.Tensor) -> tf.Tensor:
    raw = tf.numpy_function(fetch, [key], tf.string, stateful=False)
    value = tf.io.decode_raw(raw, tf.float32)
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
