"""Record real TensorFlow profiler traces for tests.

Each case is a small, real tf.data pipeline plus a training-like consumer, run in a
subprocess under `tf.profiler.experimental.start/stop`. `record()` returns the logdir
(`<dir>/plugins/profile/<run>/<host>.xplane.pb`). Tests cache recordings per session
through the `trace_case` fixture in conftest.py, so each case is recorded once.

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

    def _main(logdir, steps, markers, warmup):
        it = iter(make_dataset())
        for _ in range(warmup):
            train_step(next(it))
        tf.profiler.experimental.start(logdir)
        for step in range(steps):
            if markers:
                with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
                    train_step(next(it))
            else:
                train_step(next(it))
        tf.profiler.experimental.stop()

    _main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]))
    """
)


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    steps: int = 20
    markers: bool = True
    warmup: int = 3


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

    @tf.function
    def train_step(batch):
        x = batch
        for _ in range(20):
            x = tf.tanh(tf.matmul(x, W))
        return tf.reduce_sum(x)
    """,
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
