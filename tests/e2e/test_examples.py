"""The examples are the README's quick start: they run on their own, on CPU, in seconds.

Every example also runs under the trial bootstrap in test_tuner_runner.py (each loop
style, the latency-bound speed-up); here the two the README names run plainly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import requires_tf
from repo_paths import EXAMPLES

SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py"))


def test_every_loop_style_has_an_example() -> None:
    assert {
        "keras_fit.py",
        "eager_for.py",
        "iter_next.py",
        "tf_function_loop.py",
        "latency_bound.py",
        "py_dataset.py",
    } <= set(SCRIPTS)


@requires_tf
@pytest.mark.slow
@pytest.mark.parametrize("name", ["keras_fit.py", "latency_bound.py"])
def test_example_runs_plainly(name: str, tmp_path: Path) -> None:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--steps", "10"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip()
