"""The compute switches' check on real scripts: discovery finds the step (Keras compile,
or the script's own function that updates eagerly), `consider_compute` names the
switches, and one run checks each from one snapshot of the weights
(tuner/child/compute_check.py). A plain step passes; one whose Python runs only while a
tf.function is traced changes its loss and is refused, as is one that reads a value."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import requires_tf

from tftune.core.tuning_rewrites import RewriteKind, RewriteRow, RewriteState
from tftune.tuner.fixes.rewrite_check import check_rewrites
from tftune.tuner.fixes.rewrites import consider_compute
from tftune.tuner.trial import discover

pytestmark = [requires_tf, pytest.mark.slow]

LOOP = """\
import sys

import keras
import numpy as np
import tensorflow as tf

x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dropout(0.2),
     keras.layers.Dense(1)]
)
optimizer = keras.optimizers.Adam(1e-2)
loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
calls = [0]


def train_step(xb, yb):
    calls[0] += 1  # Python: under a tf.function it runs once, when traced
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
        if sys.argv[1:] == ["drifts"]:
            loss = loss * calls[0]
    if sys.argv[1:] == ["reads"]:
        print(loss.numpy())
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(1000):
    for xb, yb in ds:
        train_step(xb, yb)
"""

FIT = """\
import keras
import numpy as np
import tensorflow as tf

x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dropout(0.2), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(ds, epochs=1000, verbose=0)
"""


def _checked(tmp_path: Path, source: str, *args: str) -> dict[RewriteKind, RewriteRow]:
    script = tmp_path / "train.py"
    script.write_text(source)
    found = discover(script, list(args))
    pipeline, trains = found.training_pipeline(), found.training
    assert pipeline is not None and trains is not None
    compiled = found.compiles[-1] if found.compiles else None
    candidates, rows = consider_compute(pipeline.loop, compiled, found.step_function)
    assert candidates and rows == []
    report = check_rewrites(script, list(args), candidates, (trains.site, trains.place))
    return {r.kind: r for r in report.rows}


def test_an_eager_step_compiled_gives_the_same_losses_and_weights(tmp_path: Path) -> None:
    got = _checked(tmp_path, LOOP)
    row = got[RewriteKind.COMPILE_STEP]
    assert row.state is RewriteState.CHECKED, row
    assert row.site == "train.py:19" and row.check is not None and row.check.passed
    assert "losses and weights after 3 steps" in row.check.how


def test_a_step_whose_python_changes_the_loss_when_traced_is_refused(tmp_path: Path) -> None:
    row = _checked(tmp_path, LOOP, "drifts")[RewriteKind.COMPILE_STEP]
    assert row.state is RewriteState.REFUSED
    assert row.check is not None and not row.check.passed
    assert "loss 0 differs" in row.reason  # traced once: its Python count is not the step's


def test_a_step_that_reads_a_tensors_value_cannot_be_compiled(tmp_path: Path) -> None:
    row = _checked(tmp_path, LOOP, "reads")[RewriteKind.COMPILE_STEP]
    assert row.state is RewriteState.REFUSED and "cannot be compiled" in row.reason


def test_keras_fit_takes_xla_and_several_steps_per_call(tmp_path: Path) -> None:
    got = _checked(tmp_path, FIT)
    for kind in (RewriteKind.JIT_COMPILE, RewriteKind.STEPS_PER_EXECUTION):
        assert got[kind].state is RewriteState.CHECKED, got[kind]
        check = got[kind].check
        assert check is not None and check.passed
