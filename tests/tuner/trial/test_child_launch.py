"""The child that runs a user's script imports the installed tftune, never a folder of
the user's: run from a checkout of tftune (whose `tftune/` holds the front package
alone) or from a project with its own `tftune/`, `tuner/` or `probes/`, discovery, a
trial and a profile still work, and the script sees the sys.path `python train.py` gives."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tftune.core.vocabulary import TrialState
from tftune.tuner.trial import MeasureSpec, discover, profile_script, run_trial

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import sys
    import tensorflow as tf

    assert sys.path[0] == __file__.rsplit("/", 1)[0], sys.path[:3]
    import helper  # a module beside the script, as `python train.py` finds it

    w = tf.Variable(1.0)
    opt = tf.keras.optimizers.SGD(1e-6)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(x * w))
        opt.apply_gradients([(tape.gradient(loss, w), w)])

    ds = tf.data.Dataset.range(10**9).map(lambda i: tf.cast(i, tf.float32)).batch(8)
    for i, x in enumerate(ds):
        step(x)
        if i >= helper.STEPS:
            break
    """
)


@pytest.fixture
def shadowed(tmp_path: Path) -> tuple[Path, Path]:
    """A working directory with folders named like tftune's, and a script elsewhere."""
    cwd = tmp_path / "project"
    for name in ("tftune", "tuner", "probes"):
        (cwd / name).mkdir(parents=True)
        (cwd / name / "__init__.py").write_text(
            f"raise ImportError('the {name}/ folder of the working directory was imported')\n"
        )
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "train.py").write_text(SCRIPT)
    (scripts / "helper.py").write_text("STEPS = 400\n")
    return cwd, scripts / "train.py"


def test_discovery_and_a_trial_ignore_the_working_directory(shadowed: tuple[Path, Path]) -> None:
    cwd, script = shadowed
    found = discover(script, cwd=cwd, timeout_s=120)
    assert found.training is not None, found.stderr_tail[-2000:]
    assert found.training.site == "train.py:17"
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.2, window_s=0.3, repeats=1)
    result = run_trial(script, (), None, spec, cwd=cwd)
    assert result.state is TrialState.COMPLETE, (result.reason, result.stderr_tail[-2000:])
    assert result.measured and result.examples == 8 * result.steps


def test_profile_ignores_the_working_directory(shadowed: tuple[Path, Path]) -> None:
    cwd, script = shadowed
    result = profile_script(script, (), 5, 10, cwd / "logs", cwd=cwd, timeout_s=180)
    assert result.captured, (result.reason, result.stderr_tail[-2000:])
    assert list((cwd / "logs").rglob("*.xplane.pb"))
