"""The bound analysis on a script that counts its data and validates before training:
the pipeline-alone and model-alone runs transform the training dataset only (the site and
place discovery found), so neither measures the counting loop nor loops on it forever."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import requires_tf

from tftune.tuner.searchspace import bounds
from tftune.tuner.searchspace.config import Config
from tftune.tuner.trial import MeasureSpec, discover, run_trial

pytestmark = [pytest.mark.slow, requires_tf]

SCRIPT = textwrap.dedent(
    """
    import time
    import tensorflow as tf

    count = 0
    for _ in tf.data.Dataset.range(300).batch(3):  # count the data first, 3 a batch
        count += 1
    ds = tf.data.Dataset.range(10**9).map(lambda i: tf.cast(i, tf.float32)).batch(16)
    w = tf.Variable(0.0)

    @tf.function
    def step(x):
        time.sleep(0)  # traced away: the step is tiny
        w.assign_sub(1e-9 * tf.reduce_sum(x))

    for x in ds:
        step(x)
    """
)


@pytest.mark.parametrize("mode", [bounds.PIPELINE_ONLY, bounds.MODEL_ONLY])
def test_each_half_is_measured_on_the_training_dataset(tmp_path: Path, mode: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    found = discover(script)
    trains = found.training
    assert trains is not None and trains.site == "train.py:8" and trains.place == "train.py:16"
    spec = MeasureSpec(
        warmup_steps=3,
        warmup_s=0.2,
        window_s=0.5,
        repeats=1,
        training_at=(trains.site, trains.place),
        step_timeout_s=60,
    )
    m = run_trial(script, (), bounds.with_bound_mode(Config(), mode), spec)
    assert m.ok, (m.reason, m.stderr_tail[-1500:])
    assert m.examples == 16 * m.steps  # the training batches, never the counting loop's 3
