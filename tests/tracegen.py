"""Record real TensorFlow profiler traces for tests.

Each case is a small, real tf.data pipeline plus a training-like consumer, run in a
subprocess under `tf.profiler.experimental.start/stop`. `record()` returns the logdir
(`<dir>/plugins/profile/<run>/<host>.xplane.pb`). `scripts/record_traces.py` records
every case into the set of the installed TensorFlow (tests/fixtures/traces/), which
tests read through the `trace_case` fixture in conftest.py; a case with no current
recording there is recorded live by it, once per session.

A case's source defines `make_dataset()` and optionally `train_step(batch)`; the harness
below does the warm-up, the profiling window and the step markers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

HARNESS = textwrap.dedent(
    """
    import os, sys, time
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    {case}

    if "train_step" not in globals():
        def train_step(batch):
            return batch

    def _main(logdir, steps, markers, warmup, python_tracer, runs):
        if "main" in globals():  # the case drives its own profiling (e.g. Keras fit)
            main(logdir, steps)
            return
        it = iter(make_dataset())
        for _ in range(warmup):
            train_step(next(it))
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=python_tracer
        )
        for run in range(runs):
            if run:
                time.sleep(1.1)  # run folders are named by the second they start
            tf.profiler.experimental.start(logdir, options=options)
            for step in range(steps):
                if markers:
                    with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
                        train_step(next(it))
                else:
                    train_step(next(it))
            tf.profiler.experimental.stop()

    _main(
        sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]),
        int(sys.argv[5]), int(sys.argv[6]),
    )
    """
)


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    steps: int = 20
    markers: bool = True
    warmup: int = 3
    python_tracer: int = 0
    runs: int = 1


CASES: dict[str, Case] = {}


def case(name: str, source: str, **kw: int | bool) -> Case:
    c = Case(name, textwrap.dedent(source), **kw)  # type: ignore[arg-type]
    CASES[name] = c
    return c


# A latency-bound source: each element waits ~4 ms in a Python UDF, sequential map.
case(
    "latency_py",
    """
    def _slow(x):
        time.sleep(0.004)
        return x

    def make_dataset():
        ds = tf.data.Dataset.range(100000)
        ds = ds.map(lambda x: tf.py_function(_slow, [x], tf.int64))
        return ds.batch(8)
    """,
)

# A compute-bound consumer on a cheap, prefetched pipeline.
case(
    "compute_bound",
    """
    W = tf.random.normal([512, 512])

    def make_dataset():
        ds = tf.data.Dataset.from_tensors(tf.random.normal([64, 512])).repeat()
        return ds.prefetch(4)

    # Enough compute per step (~20 ms on 2 cores) that a scheduling hiccup of the
    # prefetch thread on a loaded machine cannot make the input share look moderate.
    @tf.function
    def train_step(batch):
        x = batch
        for _ in range(40):
            x = tf.tanh(tf.matmul(x, W))
        return tf.reduce_sum(x)
    """,
)


# --- Diagnosis cases (issue 4). Each is a real pipeline a user could have written; the
# analysis must name the category, the stage and the fix from the trace alone.

# Latency-bound reads: each element is fetched from slow storage (a blocking wait that
# uses no CPU) inside a py_function. The user already runs 8 fetches at once on a private
# pool of 8 threads (on 2 cores); the pool caps parallelism, and reads still starve the step.
case(
    "slow_reads",
    """
    def fetch(i):
        time.sleep(0.004)  # a remote object store answering in ~4 ms
        return i * 2

    def make_dataset():
        ds = tf.data.Dataset.range(100000)
        ds = ds.map(lambda i: tf.py_function(fetch, [i], tf.int64), num_parallel_calls=8)
        options = tf.data.Options()
        options.threading.private_threadpool_size = 8
        return ds.batch(16).with_options(options)
    """,
    steps=12,
)

# A real TFRecord file read and parsed with no parallelism, no prefetch.
case(
    "tfrecord_seq",
    """
    def _write(path, n=1500):
        rng = __import__("random").Random(0)
        with tf.io.TFRecordWriter(path) as w:
            for i in range(n):
                feat = {
                    "x": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[rng.randbytes(32768)])
                    ),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10])),
                }
                ex = tf.train.Example(features=tf.train.Features(feature=feat))
                w.write(ex.SerializeToString())

    SPEC = {
        "x": tf.io.FixedLenFeature([], tf.string),
        "y": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(record):
        ex = tf.io.parse_single_example(record, SPEC)
        x = tf.cast(tf.io.decode_raw(ex["x"], tf.uint8), tf.float32) / 255.0
        return tf.math.l2_normalize(x), ex["y"]

    def make_dataset():
        _write("data.tfrecord")
        ds = tf.data.TFRecordDataset(["data.tfrecord"]).repeat()
        ds = ds.map(parse)
        return ds.batch(32)
    """,
)

# Text tokenized with TF string ops (lower, regex, split, n-grams, hashing lookup).
case(
    "tf_strings",
    """
    WORDS = ["alpha", "Beta", "gamma!", "delta,", "Epsilon", "zeta", "eta.", "theta"]
    LINES = [" ".join(WORDS[(i + j) % 8] for j in range(60 + i % 40)) for i in range(512)]

    def tokenize(line):
        line = tf.strings.lower(line)
        line = tf.strings.regex_replace(line, "[^a-z ]", "")
        tokens = tf.strings.split(line)
        grams = tf.strings.ngrams(tokens, 2)
        ids = tf.strings.to_hash_bucket_fast(tf.concat([tokens, grams], 0), 30000)
        return ids[:64]

    def make_dataset():
        ds = tf.data.Dataset.from_tensor_slices(LINES).repeat()
        ds = ds.map(tokenize)
        return ds.padded_batch(32, padded_shapes=[64])
    """,
)

# A pure-Python tokenizer (lower-case, strip, split, a growing vocabulary), shared by the
# cases that call it through tf.py_function.
PY_TOKENIZER = """
import re
VOCAB = {}
WORDS = ["alpha", "Beta", "gamma!", "delta,", "Epsilon", "zeta", "eta.", "theta"]
LINES = [" ".join(WORDS[(i + j) % 8] for j in range(200)) for i in range(256)]

def tokenize_text(text):
    words = re.sub(r"[^a-z ]", "", text.numpy().decode().lower()).split()
    ids = [VOCAB.setdefault(w, len(VOCAB)) for w in words for _ in range(20)]
    return ids[:128] + [0] * (128 - len(ids[:128]))
"""

# The tokenizer called through tf.py_function in a sequential map (the BERT fine-tuning
# story).
case(
    "py_tokenizer",
    PY_TOKENIZER
    + """
def make_dataset():
    ds = tf.data.Dataset.from_tensor_slices(LINES).repeat()
    ds = ds.map(lambda s: tf.py_function(tokenize_text, [s], tf.int64))
    return ds.batch(16)
""",
    steps=15,
)

# JPEG decode, resize and random augmentation, sequential, no prefetch.
case(
    "image_aug",
    """
    def _jpegs(n=32):
        imgs = tf.cast(tf.random.uniform([n, 256, 256, 3], 0, 255), tf.uint8)
        return [tf.io.encode_jpeg(im).numpy() for im in imgs]

    def augment(data):
        img = tf.io.decode_jpeg(data, channels=3)
        img = tf.image.resize(img, [192, 192])
        img = tf.image.random_flip_left_right(img)
        img = tf.image.random_brightness(img, 0.2)
        return tf.image.random_crop(img, [160, 160, 3])

    def make_dataset():
        ds = tf.data.Dataset.from_tensor_slices(_jpegs()).repeat()
        ds = ds.map(augment)
        return ds.batch(16)
    """,
    steps=15,
)

# Keras fit, profiled by the TensorBoard callback (Keras' own step markers).
case(
    "keras_fit",
    """
    def features(a, b):
        # A heavy TF-native per-example transform (sequential map).
        m = tf.linalg.matmul(tf.reshape(tf.tile(a, [32]), [32, 32]), tf.eye(32) + 0.01)
        for _ in range(6):
            m = tf.tanh(tf.linalg.matmul(m, m))
        return tf.reduce_mean(m, axis=0), b

    def main(logdir, steps):
        import keras
        x = tf.random.normal([4096, 32])
        y = tf.random.uniform([4096], 0, 2, tf.int32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
        ds = ds.map(features).batch(64)
        model = keras.Sequential([keras.Input([32]), keras.layers.Dense(16, "relu"),
                                  keras.layers.Dense(2)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))

        class _NoSummaries:  # writers, scalars and traces all do nothing
            def __getattr__(self, name):
                return lambda *args, **kwargs: _NoSummaries()

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class ProfileOnly(keras.callbacks.TensorBoard):
            # This environment has no tensorboard package for the scalar summaries; the
            # profiling itself (the part under test) stays the callback's own code.
            summary = _NoSummaries()

            def on_epoch_end(self, epoch, logs=None):
                pass

        tb = ProfileOnly(logdir, profile_batch=(3, 3 + steps - 1), write_graph=False)
        model.fit(ds, epochs=1, steps_per_epoch=steps + 6, callbacks=[tb], verbose=0)
    """,
    steps=8,
)

# The latency case again, without step markers (a plain `for batch in ds` loop).
case(
    "no_markers",
    """
    def _slow(x):
        time.sleep(0.003)
        return x

    def make_dataset():
        ds = tf.data.Dataset.range(100000)
        ds = ds.map(lambda x: tf.py_function(_slow, [x], tf.int64))
        return ds.batch(8)
    """,
    markers=False,
    steps=12,
)

# Two profiling sessions in one logdir: a compute-bound consumer, profiled twice.
case(
    "two_runs",
    """
    W = tf.random.normal([256, 256])

    def make_dataset():
        return tf.data.Dataset.from_tensors(tf.random.normal([32, 256])).repeat().prefetch(2)

    @tf.function
    def train_step(batch):
        x = batch
        for _ in range(10):
            x = tf.tanh(tf.matmul(x, W))
        return tf.reduce_sum(x)
    """,
    runs=2,
    steps=10,
)


# A Python generator feeding the pipeline (Dataset.from_generator), CPU-bound per element.
case(
    "generator",
    """
    import numpy as np

    def gen():
        i = 0
        while True:
            total = sum(range(4000))  # per-record Python work
            i += 1
            yield np.full([64], i + total % 7, np.float32)

    def make_dataset():
        spec = tf.TensorSpec([64], tf.float32)
        return tf.data.Dataset.from_generator(gen, output_signature=spec).batch(16)
    """,
    steps=15,
)


def record(case: Case, out_dir: Path, timeout: float = 300) -> Path:
    """Run `case` under the profiler and return its logdir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    script = out_dir / f"{case.name}_case.py"
    script.write_text(HARNESS.replace("{case}", case.source))
    logdir = out_dir / "logdir"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            str(logdir),
            str(case.steps),
            "1" if case.markers else "0",
            str(case.warmup),
            str(case.python_tracer),
            str(case.runs),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=out_dir,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"recording {case.name} failed:\n{proc.stderr[-3000:]}")
    return logdir
