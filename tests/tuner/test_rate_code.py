"""The scaled learning rate written on the user's optimizer line: a number scaled, a
rate not given added, an expression multiplied, a warm-up as Keras' CosineDecay (which
really ramps and then holds), a schedule left with a comment."""

from __future__ import annotations

import ast

import pytest
from conftest import requires_tf

from tftune.core.learning import LearningRateScale, OptimizerSeen, ScaleRule
from tftune.tuner.output.rate_code import rate_edits
from tftune.tuner.output.source_edits import apply_edits, line_starts

X4 = LearningRateScale.for_batch(ScaleRule.SQRT, 64, 256)  # x2: no warm-up
X4_RAMP = LearningRateScale.for_batch(ScaleRule.LINEAR, 64, 256)  # x4, ramped


def _edit(code: str, seen: OptimizerSeen, scale: LearningRateScale) -> str:
    source = f"import tensorflow as tf\n{code}\nprint(opt)\n".encode()
    tree = ast.parse(source)
    edits = rate_edits(tree, source, line_starts(source), 2, seen, scale, "tf")
    out = apply_edits(source, edits).decode()
    ast.parse(out)
    return out.splitlines()[1]


@pytest.mark.parametrize(
    ("code", "rate", "want"),
    [
        ("opt = tf.keras.optimizers.Adam(learning_rate=1e-3)", 1e-3, "Adam(learning_rate=0.002)"),
        ("opt = tf.keras.optimizers.Adam(1e-3, beta_1=0.8)", 1e-3, "Adam(0.002, beta_1=0.8)"),
        ("opt = tf.keras.optimizers.Adam()", 1e-3, "Adam(learning_rate=0.002)"),
        ("opt = tf.keras.optimizers.Adam(LR * 2)", 2e-3, "Adam((LR * 2) * 2)"),
    ],
)
def test_a_number_is_scaled_on_its_line_and_the_line_says_what_it_was(
    code: str, rate: float, want: str
) -> None:
    line = _edit(code, OptimizerSeen("train.py:2", "Adam", rate), X4)
    assert want in line
    assert line.endswith(f"# tftune: was {rate:g}, batch 64 -> 256")


def test_a_schedule_gets_a_comment() -> None:
    code = "opt = tf.keras.optimizers.SGD(sched)"
    line = _edit(code, OptimizerSeen("train.py:2", "SGD", None, "ExponentialDecay"), X4)
    assert line.startswith(code) and "scale this rate x2 (batch 64 -> 256)" in line


@requires_tf
def test_a_warm_up_is_written_as_a_cosine_decay_that_ramps_then_holds() -> None:
    import tensorflow as tf

    line = _edit("opt = tf.keras.optimizers.Adam(1e-3)", OptimizerSeen(None, "Adam", 1e-3), X4_RAMP)
    expr = ast.parse(line.split("# tftune")[0].strip().removeprefix("opt = ")).body[0]
    assert isinstance(expr, ast.Expr) and isinstance(expr.value, ast.Call)
    rate = eval(ast.unparse(expr.value.args[0]), {"tf": tf})  # the written schedule
    assert float(rate(0)) == pytest.approx(1e-3)
    ramp = X4_RAMP.warmup_steps
    assert float(rate(ramp // 2)) == pytest.approx(1e-3 + 3e-3 * (ramp // 2) / ramp, rel=1e-4)
    assert float(rate(ramp)) == pytest.approx(4e-3) and float(rate(5000)) == pytest.approx(4e-3)
