"""`tftune.keras.Profile` in Keras 3 `fit` (a subprocess each: the TF profiler is one per
process): plain, with `validation_data`, and under `MirroredStrategy`. It profiles the
asked steps with markers, says the verdict and the top fix in the training log, writes
the report beside the trace, keeps `.analysis`, and never changes training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import requires_tf

pytestmark = [pytest.mark.slow, requires_tf]

SCRIPT = """\
import json, os, sys
import numpy as np
import tensorflow as tf
import keras
import tftune

MODE = sys.argv[1]
if MODE == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
keras.utils.set_random_seed(7)
tf.config.experimental.enable_op_determinism()
x = np.random.default_rng(0).random((2048, 16), dtype=np.float32)
y = (x.sum(axis=1, keepdims=True) > 8).astype("float32")

def slow(v):  # a Python map: the input pipeline is the limit
    return v * 1.0

def dataset():
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.map(lambda a, b: (tf.py_function(slow, [a], tf.float32), b))
    ds = ds.map(lambda a, b: (tf.ensure_shape(a, [16]), b))
    return ds.batch(32)

def build():
    keras.utils.set_random_seed(7)
    m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(1)])
    m.compile("sgd", "mse")
    return m

def fit(callbacks):
    if MODE == "mirrored":
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            model = build()
    else:
        model = build()
    kw = {"validation_data": dataset().take(4)} if MODE == "validation" else {}
    model.fit(dataset(), epochs=2, verbose=int(os.environ["FIT_VERBOSE"]), callbacks=callbacks,
              **kw)
    return model

cb = tftune.keras.Profile(steps=(5, 15), logdir=os.environ["LOGDIR"])
with_cb = fit([cb])
a = cb.analysis
print("RESULT " + json.dumps({
    "steps": a.steps.summary()["count"] if a is not None else None,
    "input_bound": a.findings.verdict.input_bound if a is not None else None,
    "report": str(cb.report_path),
    "error": cb.error,
}))
if MODE == "plain":
    without = fit([])
    same = all(np.array_equal(p, q) for p, q in zip(with_cb.get_weights(), without.get_weights()))
    print("SAME_WEIGHTS", same)
"""


# Each of fit's `verbose` settings once: 1 redraws the progress bar in place, ending its
# line only at the epoch's end; 2 prints a line per epoch; 0 nothing.
@pytest.mark.parametrize(
    ("mode", "verbose"), [("plain", 1), ("validation", 2), ("mirrored", 0), ("plain", 0)]
)
def test_profile_callback_in_fit(mode: str, verbose: int, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    logdir = tmp_path / "logs"
    env = {
        **os.environ,
        "LOGDIR": str(logdir),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "FIT_VERBOSE": str(verbose),
    }
    run = subprocess.run(
        [sys.executable, str(script), mode], capture_output=True, env=env, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # Its lines start lines of their own in the training log, never glued to the bar's
    # ("loss: 0.6088tftune: Highly input-bound"), whatever fit prints around them. The
    # bytes as a terminal or a log file gets them: "\r" is not a line's end.
    stdout = run.stdout.decode()
    lines = stdout.split("\n")
    assert all(line.startswith("tftune: ") for line in lines if "tftune: " in line), lines
    said = [line for line in lines if line.startswith("tftune: ")]
    assert said[0].startswith("tftune: batches 5-14 of epoch 1 profiled. "), said
    assert "input-bound" in said[0], said
    assert said[1].startswith("tftune: top fix: ") and said[2].startswith("tftune: report: ")
    assert len(said) == 3, said
    if verbose == 1:  # the bar was drawn in place, and its line ended before tftune's
        assert "\r" in stdout and "━" in stdout
        (before,) = [lines[i - 1] for i, line in enumerate(lines) if i and line is said[0]]
        assert "step" in before, before  # the bar's own line: no blank line between
    if verbose == 2:
        assert "Epoch 1/2" in stdout and "Epoch 2/2" in stdout
    (result_line,) = [line for line in lines if line.startswith("RESULT ")]
    result = json.loads(result_line.removeprefix("RESULT "))
    assert result["error"] is None, result
    assert result["steps"] == 10, result  # steps 5 to 14, each marked
    assert result["input_bound"] is True, result
    report = Path(result["report"])
    assert report.is_file() and report.parent.parent.name == "profile"
    assert report.read_text().startswith("<!DOCTYPE html>")
    import tensorflow as tf  # the version the callback recorded beside its trace

    assert f"<dt>TensorFlow</dt><dd>{tf.__version__}</dd>" in report.read_text()
    if mode == "plain":
        assert "SAME_WEIGHTS True" in stdout, stdout[-2000:]


def test_profile_refuses_steps_out_of_order() -> None:
    pytest.importorskip("keras")
    import tftune

    with pytest.raises(ValueError, match="START < STOP"):
        tftune.keras.Profile(steps=(20, 10))
    source = textwrap.dedent(tftune.keras.__doc__ or "")
    assert "never changes training" in source
