"""tftune in a real Jupyter kernel, executed headless with nbclient and read back from
the notebook's outputs: `tftune.optimize` shows its progress live (trials done, the best
so far, the phases) with no third-party warning in the cell, and ``%%tftune`` profiles
the training a cell runs and shows the analysis inline; bad usage is one line."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_tf
from repo_paths import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = [pytest.mark.slow, requires_tf]

EXAMPLE = ROOT / "examples" / "latency_bound.py"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A tiny Keras model fed by a tf.data pipeline whose Python map is the limit.
KERAS_CELL = """\
import tensorflow as tf
import keras

def slow(x):
    return tf.py_function(lambda v: v * 2.0, [x], tf.float32)

ds = (
    tf.data.Dataset.range(2048)
    .map(lambda i: tf.cast(tf.fill([8], i % 7), tf.float32))
    .map(lambda x: (tf.ensure_shape(slow(x), [8]), tf.reduce_sum(x)))
    .batch(32)
)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
model.compile("adam", "mse")
"""


def _execute(cells: list[str], cwd: Path, timeout: int, failing: tuple[int, ...] = ()) -> Any:
    """The notebook of `cells`, executed in a fresh kernel of this Python in `cwd`;
    the cells numbered in `failing` are expected to fail (as Jupyter tags them)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    for i in failing:
        nb.cells[i].metadata["tags"] = ["raises-exception"]
    client = nbclient.NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    client.execute()
    nbformat.write(nb, cwd / "executed.ipynb")  # kept beside the test's files, to read
    return nb


def _streams(cell: Any, name: str) -> str:
    return "".join(o.text for o in cell.outputs if o.get("name") == name)


def _data(cell: Any, output_type: str) -> list[dict[str, str]]:
    return [o.data for o in cell.outputs if o.output_type == output_type]


def test_optimize_in_a_cell_shows_live_progress_and_then_its_report(tmp_path: Path) -> None:
    call = (
        f"r = tftune.optimize({str(EXAMPLE)!r}, ['--steps', '100000'], trials=3, "
        "window_s=0.5, repeats=2)"
    )
    nb = _execute(["import tftune", call, "r"], tmp_path, timeout=500)
    run, report = nb.cells[1], nb.cells[2]
    # One display, replaced in place as the run went: the last state is what stays.
    (progress,) = _data(run, "display_data")
    text = ANSI.sub("", progress["text/plain"])
    rows = [row.rstrip() for row in text.splitlines()]
    assert f"tftune optimize {EXAMPLE}" in rows
    assert "phase: discovery › screen › search › final round › done" in rows
    assert re.search(r"trials .* 3/3 best so far: [\d,]+\.\d ex/s \(trial \d\)", text), text
    assert len(re.findall(r"^trial +\d ", text, re.M)) == 3
    assert "best so far" in progress["text/html"] and "<pre" in progress["text/html"]
    # No third-party warning reached the cell (tqdm's, as Optuna is imported), nor any
    # other line on standard error.
    everything = json.dumps(nb.cells[:2])
    assert "TqdmWarning" not in everything and "IProgress" not in everything
    assert _streams(run, "stderr") == ""
    # The report renders as the result's notebook repr always did.
    (shown,) = _data(report, "execute_result")
    assert shown["text/plain"].startswith("<tftune OptimizeResult: winner trial")
    assert shown["text/html"].startswith("<iframe srcdoc=")
    assert "Tuned (tftune)" in html.unescape(shown["text/html"])


def test_the_tftune_cell_magic_shows_the_analysis_of_the_cells_training(tmp_path: Path) -> None:
    nb = _execute(
        [
            "%load_ext tftune",
            "%%tftune --bogus\npass",
            "%%tftune\n   \n",
            KERAS_CELL,
            "%%tftune --logdir logs\nmodel.fit(ds, epochs=2, verbose=0)",
            "%%tftune\nraise ValueError('boom')",
            "%%tftune\nmodel.fit(ds, epochs=1, verbose=0)\nNone",
            "print(repr(_))",
            "%%tftune\nx = sum(range(10))",
        ],
        tmp_path,
        timeout=300,
        failing=(1, 2, 5),
    )
    # Bad usage: one line each, no traceback.
    for cell, line in (
        (nb.cells[1], "UsageError: unrecognized arguments: --bogus\n"),
        (nb.cells[2], "UsageError: %%tftune: the cell is empty: put the training code below "
         "%%tftune\n"),
    ):  # fmt: skip
        assert [o.output_type for o in cell.outputs] == ["stream"]
        assert _streams(cell, "stderr") == line
    # The analysis of the profiled training, inline as an analysis repr shows it; the
    # trace kept in --logdir.
    shown = [d for d in _data(nb.cells[4], "execute_result") if "text/html" in d]
    assert len(shown) == 1
    assert shown[0]["text/plain"].startswith("<tftune Analysis ")
    assert "ms/step" in shown[0]["text/plain"]
    quoted = re.search(r'srcdoc="([^"]*)"', shown[0]["text/html"])
    assert quoted is not None
    page = html.unescape(quoted.group(1))
    assert page.startswith("<!DOCTYPE html>") and "input" in page
    assert list((tmp_path / "logs" / "plugins" / "profile").glob("*/*.xplane.pb"))
    # A cell that raises shows its own traceback, and fails; nothing is analyzed.
    raised = nb.cells[5]
    assert [o.ename for o in raised.outputs if o.output_type == "error"] == ["ValueError"]
    said = _streams(raised, "stderr").splitlines()
    assert said[-1] == "UsageError: %%tftune: the cell raised ValueError: nothing analyzed"
    assert _data(raised, "execute_result") == []
    # Without --logdir: the analysis is the cell's value (`_`).
    assert _data(nb.cells[6], "execute_result")[0]["text/plain"].startswith("<tftune Analysis")
    assert _streams(nb.cells[7], "stdout").startswith("<tftune Analysis ")
    # A cell that trains nothing: the analysis says so.
    (nothing,) = _data(nb.cells[8], "execute_result")
    assert "no verdict, input wait not measured" in nothing["text/plain"]
