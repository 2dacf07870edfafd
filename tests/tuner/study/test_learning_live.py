"""The learning check on real scripts (real TensorFlow, real child processes): a batch 4x
as large at the same learning rate makes fewer updates in the same training time, so it
reaches a higher loss beyond the noise; tftune does not recommend it as is, and
recommends it with the learning rate scaled by the batch ratio, which learns faster. The
scripts pay a cost per step (bookkeeping) that the larger batch does not multiply, and
per example (preprocessing), and train a linear model, where a step's progress is the
learning rate times its gradient. The per-example cost is large enough that a 4x batch
is a step twice as slow or more even where the pipeline runs beside the step (Keras' fit
prefetches): with a small one, its preprocessing hid behind the step's bookkeeping, it
made nearly as many updates, and its loss was rightly equal within the noise."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import requires_tf

from tftune.core.learning import LossVerdict, ScaleRule
from tftune.core.vocabulary import TrialState
from tftune.tuner.searchspace.config import SiteConfig
from tftune.tuner.searchspace.space_build import build_space
from tftune.tuner.study import StudySettings, TrialRecord
from tftune.tuner.study.contract import Role
from tftune.tuner.study.learning_check import check_learning
from tftune.tuner.study.script_runner import ScriptRunner
from tftune.tuner.study.winner import FinalVerdict, final_round
from tftune.tuner.trial import MeasureSpec
from tftune.tuner.trial.discovery import CallSite

pytestmark = [requires_tf, pytest.mark.slow]

SPEC = MeasureSpec(warmup_steps=3, warmup_s=0.3, window_s=2.0, repeats=2, stall_s=60)

DATA = """
import time, numpy as np, tensorflow as tf
tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(50000, 32)).astype("float32")
y = (x @ rng.normal(size=(32, 1)) + 0.1 * rng.normal(size=(50000, 1))).astype("float32")
"""

FIT = (
    DATA
    + """
def prepare(a, b):  # per-example preprocessing in Python
    time.sleep(0.0001)
    return a, b
ds = tf.data.Dataset.from_tensor_slices((x, y)).map(
    lambda a, b: tf.py_function(prepare, [a, b], [tf.float32, tf.float32]))
ds = ds.map(lambda a, b: (tf.ensure_shape(a, [32]), tf.ensure_shape(b, [1])))
ds = ds.batch(32)
model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(1)])
model.compile(tf.keras.optimizers.SGD(learning_rate=0.002), "mse")
class Log(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.01)  # per-step bookkeeping
model.fit(ds.repeat(), steps_per_epoch=500, epochs=100, verbose=0, callbacks=[Log()])
"""
)

LOOP = (
    DATA
    + """
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.SGD(learning_rate=0.002)
DECORATOR
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb) - yb))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
for epoch in range(100):
    for xb, yb in ds:
        time.sleep(0.003 + 0.0002 * len(xb))  # per-step bookkeeping, per-example work
        train_step(xb, yb)
"""
)


def _line(text: str, start: str) -> int:
    lines = textwrap.dedent(text).splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith(start))


@pytest.mark.parametrize(
    "text",
    [FIT, LOOP.replace("DECORATOR", "@tf.function"), LOOP.replace("DECORATOR", "")],
    ids=["fit", "tf.function", "eager"],
)
def test_a_4x_batch_is_recommended_only_with_its_learning_rate_scaled(
    tmp_path: Path, text: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(text))
    site = f"train.py:{_line(text, 'ds = ds.batch(32)' if 'ds.batch' in text else 'ds = tf')}"
    space = build_space([CallSite(site, "batch", (), SiteConfig(batch_size=32), None, 1)], cores=2)
    knob = next(k.name for k in space.knobs if k.field == "batch_size")
    written = space.as_written_params()
    aw = TrialRecord(0, Role.AS_WRITTEN, TrialState.COMPLETE, written, "as written", 1.0)
    big = TrialRecord(1, Role.SEARCH, TrialState.COMPLETE, {**written, knob: 128}, "batch=128", 1.0)
    runner = ScriptRunner(script, spec=SPEC, cwd=tmp_path)
    runs = final_round([big, aw], runner, space)
    assert all(r.state is TrialState.COMPLETE for r in runs), [r.reason for r in runs]
    verdict = FinalVerdict(big, runs[0], runs, runs)
    settings = StudySettings(storage=str(tmp_path / "s.journal"))
    checked = check_learning(verdict, [aw, big], aw, runner, space, settings)
    check = checked.learning
    assert check is not None and check.verdict is LossVerdict.HIGHER, check
    assert check.as_written is not None and check.winner is not None
    assert check.winner.mean > 1.1 * check.as_written.mean  # higher beyond the noise
    assert checked.best is big and checked.scale is not None, (check.as_written, check.tried)
    assert checked.scale.rule is ScaleRule.LINEAR and checked.scale.factor == 4.0
    assert check.optimizers and check.optimizers[0].name == "SGD"
