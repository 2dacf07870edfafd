"""A measured run reads the training loss as the script computes it: Keras fit's batch
logs, the loss given to GradientTape.gradient eagerly and inside a tf.function, timed
by the training-time clock; and says why where it cannot (two losses, XLA). Real
TensorFlow, real subprocesses; the scripts write their own losses to compare."""

from __future__ import annotations

import json
import math
import textwrap
import threading
from pathlib import Path

import pytest
from conftest import requires_tf

from tftune.core.learning import CURVE_POINTS, FIT_LOSS
from tftune.core.vocabulary import TrialState
from tftune.tuner.child.loss_log import LossLog
from tftune.tuner.searchspace.config import Config
from tftune.tuner.trial import MeasureSpec, run_trial

SPEC = MeasureSpec(warmup_steps=3, warmup_s=0.3, window_s=1.5, repeats=2, stall_s=30)

DATA = """
import json, time, numpy as np, tensorflow as tf
tf.random.set_seed(1)
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
"""

TAPE = (
    DATA
    + """
w = tf.Variable(tf.zeros((8, 1)))
opt = tf.keras.optimizers.SGD(0.01)
DECORATOR
def step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(xb @ w - yb))
    opt.apply_gradients([(tape.gradient(loss, w), w)])
    return loss
seen = []
for i, (xb, yb) in enumerate(ds):
    seen.append(float(step(xb, yb)))
    time.sleep(0.01)  # a slower step: the curve keeps every point (CURVE_POINTS)
    if i % 20 == 0:
        json.dump(seen, open("own.json", "w"))
    if i >= 3000:
        break
"""
)


def _run(tmp_path: Path, text: str, config: Config | None = None):  # type: ignore[no-untyped-def]
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(text))
    m = run_trial(script, (), config=config, spec=SPEC, cwd=tmp_path)
    assert m.state is TrialState.COMPLETE, m.reason
    return m


def test_fit_batch_reads_each_steps_loss_from_the_running_mean() -> None:
    log = LossLog()
    losses = [4.0, 2.0, 3.0, 1.0]
    running = [sum(losses[: i + 1]) / (i + 1) for i in range(len(losses))]
    for batch, mean in enumerate(running):
        log.fit_batch(batch, mean)
    log.fit_batch(0, 0.5)  # a new epoch starts its count again
    log.fit_batch(2, 0.3)  # steps_per_execution: three steps in one call
    got = [v for _, v, _ in log.drain()]
    assert got == pytest.approx([4.0, 2.0, 3.0, 1.0, 0.5, (3 * 0.3 - 0.5) / 2])
    assert log.places == [FIT_LOSS]


@requires_tf
@pytest.mark.slow
@pytest.mark.parametrize("decorator", ["", "@tf.function"])
def test_a_tape_loop_is_read_as_the_script_computes_its_loss(
    tmp_path: Path, decorator: str
) -> None:
    m = _run(tmp_path, TAPE.replace("DECORATOR", decorator))
    assert m.loss is not None, m.loss_note
    own = json.loads((tmp_path / "own.json").read_text())
    assert m.loss.source == "tape" and len(m.loss.points) >= 20
    times = [t for t, _ in m.loss.points]
    assert times == sorted(times) and times[-1] <= m.window_s * 3 + 30
    # Every loss read is one the script computed.
    assert len(m.loss.points) < CURVE_POINTS  # not thinned
    for _, value in m.loss.points[: len(own) - 25]:  # own.json lags by up to 20 steps
        assert min(abs(value - o) for o in own) <= 1e-5 * max(1.0, abs(value))
    assert m.loss.points[0][1] > 3 * m.loss.points[-1][1]  # it learns


@requires_tf
@pytest.mark.slow
def test_fit_loss_is_read_from_its_batch_logs_and_learning_shows(tmp_path: Path) -> None:
    text = (
        DATA
        + """
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
model.compile(tf.keras.optimizers.SGD(0.01), "mse")
model.fit(ds, epochs=40, steps_per_epoch=50, verbose=0)
"""
    )
    m = _run(tmp_path, text)
    assert m.loss is not None, m.loss_note
    assert m.loss.source == FIT_LOSS and len(m.loss.points) >= 20
    first, last = m.loss.points[0][1], m.loss.loss_at(m.loss.span_s)
    assert last is not None and math.isfinite(last) and first > 3 * last


@requires_tf
@pytest.mark.slow
def test_two_losses_or_xla_are_said_not_read(tmp_path: Path) -> None:
    two = TAPE.replace("DECORATOR", "").replace(
        "    return loss\n",
        "    with tf.GradientTape() as t2:\n"
        "        other = tf.reduce_mean(tf.abs(xb @ w))\n"
        "    t2.gradient(other, w)\n"
        "    return loss\n",
    )
    m = _run(tmp_path, two)
    assert m.loss is None and m.loss_note is not None and "2 losses" in m.loss_note
    m = _run(tmp_path, TAPE.replace("DECORATOR", "@tf.function(jit_compile=True)"))
    assert m.loss is None and m.loss_note is not None and "XLA" in m.loss_note


SCALED = (
    DATA
    + """
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
sched = tf.keras.optimizers.schedules.ExponentialDecay(1e-2, 1000, 0.5)
opt = tf.keras.optimizers.Adam(learning_rate=1e-3)
other = tf.keras.optimizers.SGD(sched)
model.compile(opt, "mse")

class Rates(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        step = int(opt.iterations.numpy())
        if step in (1, 25, 200):
            rates[step] = float(opt.learning_rate.numpy())
            rates["sgd"] = float(other._get_current_learning_rate().numpy())
            json.dump(rates, open("rates.json", "w"))
rates = {}
model.fit(ds, epochs=40, steps_per_epoch=50, verbose=0, callbacks=[Rates()])
"""
)


@requires_tf
@pytest.mark.slow
def test_the_optimizers_are_seen_and_their_learning_rate_scaled_with_a_ramp(
    tmp_path: Path,
) -> None:
    config = Config(learning_rate_scale=4.0, learning_rate_warmup=50)
    m = _run(tmp_path, SCALED, config)
    seen = {o.name: o for o in m.optimizers}
    assert seen["Adam"].learning_rate == pytest.approx(1e-3)
    assert seen["Adam"].site == "train.py:" + str(_line(SCALED, "opt = tf.keras"))
    assert seen["SGD"].learning_rate is None and seen["SGD"].schedule == "ExponentialDecay"
    rates = json.loads((tmp_path / "rates.json").read_text())
    # Ramped linearly from the rate as written to 4x over 50 updates, then 4x.
    assert rates["1"] == pytest.approx(1e-3 * (1 + 3 * 2 / 50), rel=1e-3)
    assert rates["25"] == pytest.approx(1e-3 * (1 + 3 * 26 / 50), rel=1e-3)
    assert rates["200"] == pytest.approx(4e-3, rel=1e-4)
    assert rates["sgd"] == pytest.approx(1e-2 * (1 + 3 / 50), rel=1e-3)  # its step 0, ramped


def _line(text: str, start: str) -> int:
    lines = textwrap.dedent(text).splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith(start))


@requires_tf
@pytest.mark.slow
def test_one_loss_keeps_its_place_eager_then_compiled(tmp_path: Path) -> None:
    """The first steps run eagerly, the rest through a tf.function of the same step (as
    the compiled-step switch does): one place, not two."""
    text = (
        TAPE.replace("DECORATOR", "")
        .replace("seen = []\n", "seen = []\nfast = tf.function(step)\n")
        .replace(
            "seen.append(float(step(xb, yb)))",
            "seen.append(float((step if i < 5 else fast)(xb, yb)))",
        )
    )
    m = _run(tmp_path, text)
    assert m.loss is not None, m.loss_note
    assert m.loss.sites == 1


@requires_tf
def test_two_threads_draining_at_once_never_wait_for_each_others_samples() -> None:
    """The clock's thread and the loop's own both drain the log: a queue's
    dequeue_up_to(size) waits for elements the other took, and the step never ran again
    (three trials of one optimize run stalled so)."""
    import tensorflow as tf

    log = LossLog()

    @tf.function
    def step(x: tf.Tensor) -> tf.Tensor:
        log.tape(tf.reduce_mean(x), "step#0")
        return x

    for _ in range(300):
        for _ in range(5):
            step(tf.constant([1.0, 2.0]))
        got: list[int] = []
        barrier = threading.Barrier(2)
        threads = [
            threading.Thread(target=_drain, args=(log, barrier, got), daemon=True) for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert not any(t.is_alive() for t in threads), "a drain waits for samples forever"
        assert sum(got) == 5


def _drain(log: LossLog, barrier: threading.Barrier, got: list[int]) -> None:
    barrier.wait()
    got.append(len(log.drain()))
