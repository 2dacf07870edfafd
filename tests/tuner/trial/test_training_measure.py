"""Live trials measure training and only it: a long preamble before the first update,
validation after every short epoch, and an epoch-start stall (real TensorFlow, real
subprocesses; figures checked against the script's own counter from the same run, by
ranges wide enough for a loaded 2-core machine and far from the wrong answers)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import requires_tf

from tftune.core.vocabulary import TrialState
from tftune.probes.live.epoch_stall import SHUFFLE_BEHIND_MAP
from tftune.tuner.trial import MeasureSpec, discover, run_trial
from tftune.tuner.trial.watch import FALLBACK_S

pytestmark = [requires_tf, pytest.mark.slow]

SPEC = MeasureSpec(warmup_steps=3, warmup_s=0.5, window_s=2.0, repeats=2, stall_s=30)


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(body.replace("SGD_STEP", SGD_STEP)))
    return path


def _own(tmp_path: Path) -> dict[str, float]:
    """What the script's own counter wrote last (its training time and examples)."""
    return json.loads((tmp_path / "own.json").read_text())


# The script counts its examples and times its training steps itself, excluding what is
# not training, and writes its running totals to own.json after every step. Its clock
# starts at the end of the run's first step, as a progress bar's rate settles after it:
# that step traces and compiles the step function (seconds on a loaded machine, enough to
# halve a short run's rate).
OWN_COUNTER = """
    import json, time
    class Own:
        def __init__(self):
            self.examples, self.train_s, self.last, self.steps = 0, 0.0, None, 0
        def begin(self):
            if self.steps:
                self.last = time.perf_counter()
        def step(self, n):
            now = time.perf_counter()
            self.steps += 1
            if self.last is not None:
                self.train_s += now - self.last
                self.examples += n
            self.last = now
            with open("own.tmp", "w") as fh:
                json.dump({"examples": self.examples, "train_s": self.train_s}, fh)
            import os; os.replace("own.tmp", "own.json")
        def pause(self):
            self.last = None
    own = Own()
"""

# A one-variable model's compiled SGD step (placed where a script says SGD_STEP).
SGD_STEP = """w = tf.Variable(1.0)
    opt = tf.keras.optimizers.SGD(1e-6)
    @tf.function
    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.cast(x, tf.float32) * w))
        opt.apply_gradients([(tape.gradient(loss, w), w)])"""

PREAMBLE = (
    OWN_COUNTER
    + """
    import tensorflow as tf
    ds = tf.data.Dataset.range(200_000).batch(16)
    # The preamble: a Python loop over the data, longer than the busiest-loop wait.
    start, counted = time.perf_counter(), 0
    while time.perf_counter() - start < FALLBACK_S + 4:
        for batch in ds.take(50):
            counted += int(batch.shape[0])
    SGD_STEP
    train = tf.data.Dataset.range(10**9).map(lambda x: x % 7).batch(32).prefetch(2)
    own.begin()
    for x in train:
        train_step(x)
        time.sleep(0.004)
        own.step(32)
"""
)


def test_a_long_preamble_is_waited_for_and_said(tmp_path: Path) -> None:
    """Discovery waits past the busiest-loop wait for the first update of a script that
    shows training, and times its preamble; the trial measures training, not the loop
    that counts the data."""
    script = _script(tmp_path, PREAMBLE.replace("FALLBACK_S", str(FALLBACK_S)))
    found = discover(script, (), cwd=tmp_path)
    trains = found.training
    assert trains is not None and not found.busiest_loop, found.streams
    loop = script.read_text().splitlines().index("for x in train:") + 1
    assert trains.place == f"train.py:{loop}", trains
    assert found.preamble_s is not None and found.preamble_s >= FALLBACK_S + 3
    m = run_trial(script, (), spec=SPEC, cwd=tmp_path)
    assert m.state is TrialState.COMPLETE, m.reason
    assert m.training is not None and m.training.preamble_s is not None
    assert m.training.preamble_s >= FALLBACK_S + 3
    own = _own(tmp_path)
    ratio = m.examples_per_s / (own["examples"] / own["train_s"])
    # The counting loop delivers batches of 16 many times faster than this 4-ms step.
    assert 0.7 <= ratio <= 1.4, (m.examples_per_s, own)


FIT_VALIDATION = (
    OWN_COUNTER
    + """
    import numpy as np, tensorflow as tf, keras
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32 * 12, 64)).astype("float32")
    y = rng.integers(0, 4, size=len(x))
    def slow(a, b):
        out = tf.numpy_function(lambda u: (time.sleep(0.03), u)[1], [a], tf.float32)
        out.set_shape([None, 64])
        return out, b
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(2)
    val = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).map(slow)  # ~1.5 s a pass
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(4)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    class Clock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            own.begin()
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(0.02)  # a 20-ms step: an epoch of 12 trains in ~0.3 s
            own.step(32)
        def on_epoch_end(self, epoch, logs=None):
            own.pause()
    model.fit(train, validation_data=val, epochs=10**6, callbacks=[Clock()], verbose=0)
"""
)


def test_validation_after_every_short_epoch_is_not_training_time(tmp_path: Path) -> None:
    """Each epoch trains ~0.3 s and validates ~1.5 s: a figure that counted validation
    would read about a fifth of the script's own training rate."""
    script = _script(tmp_path, FIT_VALIDATION)
    m = run_trial(script, (), spec=SPEC, cwd=tmp_path)
    assert m.state is TrialState.COMPLETE, m.reason
    assert m.training is not None
    assert m.training.excluded_s > 1.0  # at least one validation pass was taken out
    assert m.training.epochs_seen >= 2 and m.training.steps_per_epoch == 12
    own = _own(tmp_path)
    ratio = m.examples_per_s / (own["examples"] / own["train_s"])
    assert 0.7 <= ratio <= 1.4, (m.examples_per_s, own, m.repeats)
    # Windows that counted a validation pass in one and not the other would differ
    # several-fold; two loaded windows of whole epochs differ by up to half.
    assert m.spread is not None and m.spread < 0.75, m.repeats


SHUFFLE_FILL = (
    OWN_COUNTER
    + """
    import tensorflow as tf
    def slow(v):
        out = tf.py_function(lambda t: (time.sleep(0.002), t)[1], [v], tf.int64)
        out.set_shape([])
        return out
    # 400 elements of 2 ms behind a 400-element shuffle: each epoch opens with ~0.8 s of
    # filling, then 25 steps of ~10 ms.
    ds = tf.data.Dataset.range(400).map(slow).shuffle(400).batch(16)
    SGD_STEP
    for epoch in range(10**6):
        own.begin()
        for x in ds:
            train_step(x)
            time.sleep(0.01)
            own.step(16)
"""
)


def test_an_epoch_start_stall_is_spread_over_the_epoch(tmp_path: Path) -> None:
    """The shuffle buffer's fill at each epoch's start is training time (the knobs change
    it): the figure is the whole epoch's rate, whether or not a window holds a start."""
    script = _script(tmp_path, SHUFFLE_FILL)
    m = run_trial(script, (), spec=SPEC, cwd=tmp_path)
    assert m.state is TrialState.COMPLETE, m.reason
    t = m.training
    assert t is not None and t.steps_per_epoch == 25 and t.epochs_seen >= 1
    assert t.epoch_stall_s is not None and t.epoch_stall_s > 0.3
    assert t.stall_share is not None and t.stall_share > 0.3
    # Named with its cause: the shuffle buffer refills through the Python map.
    assert t.stall is not None and t.stall.cause == SHUFFLE_BEHIND_MAP, t.stall
    line = (
        script.read_text()
        .splitlines()
        .index("ds = tf.data.Dataset.range(400).map(slow).shuffle(400).batch(16)")
    )
    assert t.stall.sites == (f"train.py:{line + 1}",)
    assert "Python function" in t.stall.summary and "ds.shuffle(" in (t.stall.code or "")
    own = _own(tmp_path)
    ratio = m.examples_per_s / (own["examples"] / own["train_s"])
    assert 0.7 <= ratio <= 1.4, (m.examples_per_s, own, m.repeats, t)


def test_profile_and_analyze_name_the_epoch_stall_of_steady_profiled_steps(
    tmp_path: Path,
) -> None:
    """Profiled steps 5-10 sit in the middle of an epoch and wait for nothing; the step
    clock of the profiled run saw the epoch's first step, and the analysis says so with
    the cause and the fix (`tftune-clock.json` beside the trace)."""
    from tftune.probes.advice.analysis import analyze
    from tftune.probes.live.training_record import CLOCK_FILE
    from tftune.reports.analysis_terminal import render
    from tftune.tuner.trial import profile_script

    script = _script(tmp_path, SHUFFLE_FILL)
    logdir = tmp_path / "logdir"
    prof = profile_script(script, (), 5, 10, logdir, cwd=tmp_path, timeout_s=180)
    assert prof.captured, prof.reason
    assert prof.training is not None and prof.training.stall is not None
    assert list(logdir.glob(f"plugins/profile/*/{CLOCK_FILE}"))
    doc = analyze(logdir).document()
    stall = doc.training.stall if doc.training is not None else None
    assert stall is not None and stall.cause == SHUFFLE_BEHIND_MAP and stall.share > 0.3
    assert "each epoch's start waits for it" in doc.verdict.sentence
    assert "will not help much" not in doc.verdict.sentence
    text = render(doc, width=100)
    assert "Epoch start: each epoch opens with a" in text and "ds.shuffle(" in text
