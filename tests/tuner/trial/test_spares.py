"""Warm spares (tuner/trial/spare.py): runs of the user's script start from a child whose
TensorFlow is already imported, with the same results, the same failures and no process
or folder left behind; and no spare where the script touches the environment."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tftune.core.vocabulary import TrialState
from tftune.tuner.option_defaults import EXTRA_WINDOWS
from tftune.tuner.trial import MeasureSpec, run_trial
from tftune.tuner.trial.launch import RunnerDeps, popen_launcher
from tftune.tuner.trial.spare import SparePool, spares_safe

# A raw SGD loop: each step updates a trainable variable, so the loop is training. The
# script notes whether TensorFlow was imported before its first line ran.
TRAINS = """
import sys
import time
preloaded = "tensorflow" in sys.modules
import tensorflow as tf
with open(sys.argv[1], "a") as fh:
    fh.write(f"{preloaded}\\n")
v = tf.Variable(1.0)
ds = tf.data.Dataset.range(10**9).map(lambda x: tf.cast(x, tf.float32)).batch(8)
for b in ds:
    v.assign_sub(0.001 * tf.reduce_mean(b))
    time.sleep(0.002)
"""

FAILS = """
import tensorflow as tf
raise ValueError("boom: the dataset path is wrong")
"""


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
    return path


@pytest.mark.slow
def test_runs_start_from_spares_and_measure_as_cold_runs_do(tmp_path: Path) -> None:
    trains, fails = _script(tmp_path, "train.py", TRAINS), _script(tmp_path, "bad.py", FAILS)
    marks = tmp_path / "marks.txt"
    pool = SparePool(popen_launcher, sys.executable, str(tmp_path))
    deps = RunnerDeps(spares=pool)
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.2, window_s=0.3, repeats=2)
    try:
        runs = [run_trial(trains, [str(marks)], None, spec, cwd=tmp_path, deps=deps)]
        runs.append(run_trial(trains, [str(marks)], None, spec, cwd=tmp_path, deps=deps))
        failed = run_trial(fails, [], None, spec, cwd=tmp_path, deps=deps)
        waiting = pool.waiting
    finally:
        pool.close()
    for m in runs:
        assert m.ok and m.state is TrialState.COMPLETE, (m.reason, m.stderr_tail)
        assert m.examples == 8 * m.steps and 2 <= len(m.repeats) <= 2 + EXTRA_WINDOWS
    # Both runs' scripts started with TensorFlow imported: each came from a spare.
    assert marks.read_text().split() == ["True", "True"]
    assert pool.taken == 3
    # A script that raises in a spare fails as it does cold: its reason and stderr.
    assert failed.state is TrialState.FAILED
    assert failed.reason is not None and "boom: the dataset path is wrong" in failed.reason
    assert "ValueError" in failed.stderr_tail
    # Nothing is left: the waiting spare is stopped and its folder removed.
    assert waiting is not None and waiting.proc.poll() is not None
    assert not waiting.folder.exists()


def test_a_run_in_another_folder_starts_cold(tmp_path: Path) -> None:
    pool = SparePool(popen_launcher, sys.executable, str(tmp_path / "elsewhere"))
    assert pool.take(str(tmp_path)) is None and pool.waiting is None


def test_no_spares_for_a_script_that_touches_the_environment(tmp_path: Path) -> None:
    assert spares_safe(_script(tmp_path, "train.py", TRAINS)) is None
    env = _script(tmp_path, "env.py", 'import os\nos.environ["TF_XLA_FLAGS"] = "x"\n')
    assert spares_safe(env) == "env.py touches the environment (environ)"
    _script(tmp_path, "setup_env.py", "from os import putenv\n")
    uses = _script(tmp_path, "uses.py", "import setup_env\nimport tensorflow\n")
    assert spares_safe(uses) == "setup_env.py touches the environment (putenv)"


KERAS = """
import numpy as np
import tensorflow as tf
x = np.zeros((256, 4), "float32")
ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(16)
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(ds, steps_per_epoch=10**6, epochs=1, verbose=0)
"""


@pytest.mark.slow
def test_discovery_from_a_spare_sees_what_a_cold_one_sees(tmp_path: Path) -> None:
    """TensorFlow imports Keras with it: in a spare, both are loaded before the script
    runs, and discovery must still see the script's Keras (the precision knob rests on it)."""
    from tftune.tuner.trial import discover

    script = _script(tmp_path, "fit.py", KERAS)
    pool = SparePool(popen_launcher, sys.executable, str(tmp_path))
    try:
        warm = discover(script, cwd=tmp_path, deps=RunnerDeps(spares=pool))
    finally:
        pool.close()
    cold = discover(script, cwd=tmp_path)
    assert pool.taken == 1
    assert warm.uses_keras and cold.uses_keras
    assert warm.training is not None and cold.training is not None
    assert warm.training.place == cold.training.place == "fit.py:7"
    assert [(s.site, s.op) for s in warm.sites] == [(s.site, s.op) for s in cold.sites]


@pytest.mark.slow
def test_the_screen_starts_from_the_waiting_spare_with_none_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline screen measures from its start: it takes the spare that waits, and
    no next spare imports beside its drains; the run after it starts cold, with the
    one-spare-ahead order back behind it (it starts the spare it runs in, then the next)."""
    from tftune.tuner.searchspace.screen import run_screen
    from tftune.tuner.searchspace.space_build import build_space
    from tftune.tuner.trial import discover
    from tftune.tuner.trial.spare import LastSpare

    monkeypatch.chdir(tmp_path)
    trains, marks = _script(tmp_path, "train.py", TRAINS), tmp_path / "marks.txt"
    found = discover(trains, [str(tmp_path / "discovery.txt")])
    assert found.training is not None
    space = build_space(found.sites, cores=2)
    pool = SparePool(popen_launcher, sys.executable, str(tmp_path))
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.2, window_s=0.3, repeats=2)
    try:
        first = run_trial(
            trains, [str(marks)], None, spec, cwd=tmp_path, deps=RunnerDeps(spares=pool)
        )
        waiting = pool.waiting
        where = (found.training.site, found.training.place)
        deps = RunnerDeps(spares=LastSpare(pool))
        screen = run_screen(trains, [str(marks)], space, where, deps=deps, seconds=0.2)
        after_screen, screened_by = pool.waiting, waiting.proc.poll() if waiting else None
        last = run_trial(
            trains, [str(marks)], None, spec, cwd=tmp_path, deps=RunnerDeps(spares=pool)
        )
        behind = pool.waiting
    finally:
        pool.close()
    assert first.ok and last.ok, (first.reason, last.reason)
    assert waiting is not None and screen.reason is None and screen.as_written() is not None
    assert after_screen is None and behind is not None and pool.taken == 3
    # The spare that waited ran the screen (it has ended); the run after started its own.
    assert screened_by is not None and not waiting.folder.exists()
    assert marks.read_text().split() == ["True", "True", "True"]
