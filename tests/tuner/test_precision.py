"""Mixed-precision safety: a 16-bit output layer is a finding, recommended fixes carry
it, and a NaN/inf loss under a 16-bit policy fails the trial with that reason."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, requires_tf

from tftune.core.trial_notes import FINDING_PREFIX, FLOAT32_OUTPUT_FIX, OutputPrecisionFinding
from tftune.tuner.fixes.precision import check_output_layer, recommendation
from tftune.tuner.searchspace.config import Config

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture
def keras_mixed_float16() -> Iterator[Any]:
    """Keras with the global mixed_float16 policy, restored afterwards."""
    keras = pytest.importorskip("keras")
    before = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield keras
    finally:
        keras.mixed_precision.set_global_policy(before)


def _classifier(keras: Any, **output: Any) -> Any:
    return keras.Sequential(
        [
            keras.Input(shape=(4,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(3, activation="softmax", name="probs", **output),
        ]
    )


@requires_tf
def test_float16_softmax_output_is_a_finding(keras_mixed_float16: Any) -> None:
    keras = keras_mixed_float16
    finding = check_output_layer(_classifier(keras))
    assert finding is not None
    assert (finding.layer, finding.layer_type) == ("probs", "Dense")
    assert (finding.compute_dtype, finding.before, finding.policy) == (
        "float16",
        "softmax",
        "mixed_float16",
    )
    assert finding.message().endswith(FLOAT32_OUTPUT_FIX)
    assert FLOAT32_OUTPUT_FIX == 'keep the output layer in float32: `Dense(..., dtype="float32")`'
    # The same model with the output layer in float32: nothing to say.
    assert check_output_layer(_classifier(keras, dtype="float32")) is None


@requires_tf
def test_16bit_logits_before_a_softmax_or_the_loss(keras_mixed_float16: Any) -> None:
    keras = keras_mixed_float16
    inputs = keras.Input(shape=(4,))
    logits = keras.layers.Dense(3, name="logits")(inputs)
    # Logits straight into a from_logits loss: computed in float16 before the loss.
    finding = check_output_layer(keras.Model(inputs, logits))
    assert finding is not None and (finding.layer, finding.before) == ("logits", "the loss")
    # A softmax layer under the policy is 16-bit too ...
    probs = keras.layers.Activation("softmax", name="act")(logits)
    finding = check_output_layer(keras.Model(inputs, probs))
    assert finding is not None and (finding.layer, finding.before) == ("act", "softmax")
    # ... and Keras' recommended pattern, a float32 softmax after 16-bit logits, is fine.
    safe = keras.layers.Activation("softmax", dtype="float32")(logits)
    assert check_output_layer(keras.Model(inputs, safe)) is None


@requires_tf
def test_float32_policy_has_no_finding() -> None:
    keras = pytest.importorskip("keras")
    assert keras.mixed_precision.global_policy().name == "float32"
    assert check_output_layer(_classifier(keras)) is None


def test_recommendation_only_with_a_16bit_winner_and_a_finding() -> None:
    found = OutputPrecisionFinding("probs", "Dense", "bfloat16", "the loss", None)
    assert found.message() == (
        f"{FINDING_PREFIX}the output layer 'probs' (Dense) computes in bfloat16 before the "
        f"loss; {FLOAT32_OUTPUT_FIX}"
    )
    advice = recommendation("mixed_bfloat16", [found])
    assert advice == (
        "mixed_bfloat16 is recommended only together with a float32 output layer: "
        + found.message().removeprefix(FINDING_PREFIX)
    )
    assert recommendation("off", [found]) is None
    assert recommendation("mixed_float16", []) is None


KERAS_SCRIPT = """\
import numpy as np
import tensorflow as tf

x = np.random.default_rng(0).normal(size=(512, 4)).astype("float32") * {scale}
y = (x.sum(axis=1) > 0).astype("int32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(4,)),
        tf.keras.layers.Dense(8, activation="relu", kernel_initializer="ones"),
        tf.keras.layers.Dense(2, activation="softmax"{output_dtype}),
    ]
)
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
model.fit(ds, steps_per_epoch=100000, epochs=1, verbose=0)
"""


@requires_tf
@pytest.mark.slow
def test_trial_under_a_16bit_policy_reports_the_output_layer(tmp_path: Path) -> None:
    from tftune.core.vocabulary import TrialState
    from tftune.tuner.trial import MeasureSpec, run_trial

    spec = MeasureSpec(warmup_steps=3, warmup_s=0.2, window_s=0.4, repeats=1, stall_s=60)
    policy = Config(mixed_precision="mixed_float16")
    results = {}
    for name, output_dtype in (("f16", ""), ("f32", ', dtype="float32"')):
        script = tmp_path / f"{name}.py"
        script.write_text(KERAS_SCRIPT.format(scale=1.0, output_dtype=output_dtype))
        results[name] = run_trial(script, [], policy, spec, cwd=tmp_path)
    f16, f32 = results["f16"], results["f32"]
    assert f16.state is TrialState.COMPLETE, f16.reason
    # The child sent the finding as a typed event; the trial keeps it and its words.
    (finding,) = f16.findings
    assert finding == OutputPrecisionFinding(
        "dense_1", "Dense", "float16", "softmax", "mixed_float16"
    )
    assert finding.message() in f16.notes
    assert f32.state is TrialState.COMPLETE, f32.reason
    assert f32.findings == () and not any(FINDING_PREFIX in n for n in f32.notes)


@requires_tf
@pytest.mark.slow
def test_inf_loss_under_a_16bit_policy_fails_the_trial_with_that_reason(tmp_path: Path) -> None:
    """Inputs of 1e5 overflow float16 (max 65504) in the first Dense: the loss is NaN."""
    from tftune.core.failures import FailureKind
    from tftune.core.vocabulary import TrialState
    from tftune.tuner.trial import MeasureSpec, run_trial

    script = tmp_path / "overflow.py"
    script.write_text(KERAS_SCRIPT.format(scale=1e5, output_dtype=', dtype="float32"'))
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.2, window_s=0.4, repeats=1, stall_s=60)
    result = run_trial(script, [], Config(mixed_precision="mixed_float16"), spec, cwd=tmp_path)
    assert result.state is TrialState.FAILED and result.failure is FailureKind.NAN
    assert result.reason is not None and "under the mixed_float16 policy" in result.reason


@requires_tf
@pytest.mark.slow
def test_optimize_recommends_16bit_only_with_a_float32_output(tmp_path: Path) -> None:
    """The study's notes reach tftune-best.json and the tuning JSON (trials faked: a
    16-bit trial is faster and reports the finding, as the child would)."""
    import tftune
    from tftune.testing import FakeRunner, Figures

    found = OutputPrecisionFinding("dense_1", "Dense", "float16", "softmax", "mixed_float16")
    finding = found.message()

    def script(config: Config) -> float | Figures:
        if config.mixed_precision == "mixed_float16":
            return Figures(200.0, findings=(found,))
        return 100.0

    space = tmp_path / "space.json"
    space.write_text(json.dumps({"knobs": {"mixed_precision": "mixed_float16"}}))
    from tftune.tuner.output.repro import current_environment_cheap

    tftune.optimize(
        ROOT / "examples" / "keras_fit.py",
        ["--steps", "10"],
        trials=5,
        runner=FakeRunner(script, repeats=1),
        bounds=False,
        space_file=space,
        storage=str(tmp_path / "s.journal"),
        best_file=tmp_path / "best.json",
        json_file=tmp_path / "t.json",
        html_file=None,
        environment=current_environment_cheap,
    )
    best = json.loads((tmp_path / "best.json").read_text())
    tuning = json.loads((tmp_path / "t.json").read_text())
    assert best["mixed_precision"] == "mixed_float16"
    (advice,) = best["meta"]["notes"]
    assert advice.startswith("mixed_float16 is recommended only together with a float32 output")
    assert advice in tuning["notes"]
    assert tuning["best"]["requires"] == [FLOAT32_OUTPUT_FIX]
    assert tuning["findings"] == [finding] == best["meta"]["findings"]
    rows = [r for r in tuning["trials_detail"] if finding in r["notes"]]
    assert rows and all(r["role"] != "as_written" for r in rows)


@requires_tf
@pytest.mark.slow
def test_tftune_run_prints_the_finding(tmp_path: Path, run_cli: Any) -> None:
    script = tmp_path / "train.py"
    text = KERAS_SCRIPT.format(scale=1.0, output_dtype="").replace("100000", "3")
    script.write_text(text + "print('trained')\n")
    cfg = tmp_path / "mp.json"
    cfg.write_text(json.dumps({"schema": 1, "mixed_precision": "mixed_float16"}))
    out = run_cli("run", "--config", str(cfg), str(script))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "trained" in out.stdout
    (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("tftune: warning: mixed")]
    assert line.endswith(FLOAT32_OUTPUT_FIX)
