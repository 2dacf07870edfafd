"""The rewrites as the child applies them (`tftune run --config`, tuner/child/rewrite_apply.py),
on a real script that reports what each epoch saw: a cache runs the tokenizer over the
first epoch only, a moved shuffle puts the shuffle above the map, one iterator keeps one
across epochs (in the script's own loop and in Keras fit), and every epoch sees the same
elements as the script as written."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_tf

pytestmark = [requires_tf, pytest.mark.slow]

SCRIPT = """\
import json
import sys

import keras
import numpy as np
import tensorflow as tf

calls = [0]
made = [0]
original_iter = tf.data.Dataset.__iter__


def counted_iter(self):
    made[0] += 1
    return original_iter(self)


tf.data.Dataset.__iter__ = counted_iter


def tokenize(text):
    calls[0] += 1
    return np.array([sum(map(ord, w)) % 97 for w in text.numpy().decode().split()], np.int64)


def load(text):
    ids = tf.py_function(tokenize, [text], tf.int64)
    ids.set_shape([3])
    return ids, tf.cast(ids[0] % 2, tf.float32)


lines = [f"line {i} {i % 7}" for i in range(60)]
ds = tf.data.Dataset.from_tensor_slices(lines)
ds = ds.map(load)
ds = ds.shuffle(40)
ds = ds.batch(8)

if sys.argv[1] == "loop":
    epochs, kinds = [], []
    for epoch in range(3):
        it = iter(ds)
        kinds.append(type(it).__name__)
        epochs.append(sorted(int(v) for ids, _ in it for v in ids.numpy()[:, 0]))
    chain, d = [], ds
    while d is not None:
        chain.append(type(d).__name__)
        inputs = d._inputs()
        d = inputs[0] if inputs else None
    print(json.dumps({"epochs": epochs, "calls": calls[0], "iterators": kinds, "chain": chain}))
else:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(1e-3), "mse")
    scaled = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 100.0, y))
    history = model.fit(scaled, epochs=4, verbose=0)
    print(json.dumps({"made": made[0], "steps": history.params["steps"], "calls": calls[0]}))
"""


@pytest.fixture
def run_with(tmp_path: Path, run_cli: Any) -> Callable[..., dict[str, Any]]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)

    def run(mode: str, config: dict[str, Any] | None) -> dict[str, Any]:
        args = []
        if config is not None:
            path = tmp_path / "config.json"
            path.write_text(json.dumps({"schema": 1, **config}))
            args = ["--config", str(path)]
        done: subprocess.CompletedProcess[str] = run_cli("run", *args, str(script), "--", mode)
        assert done.returncode == 0, done.stderr[-3000:]
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    return run


def test_each_rewrite_changes_the_pipeline_and_no_epochs_elements(
    run_with: Callable[..., dict[str, Any]],
) -> None:
    plain = run_with("loop", None)
    assert plain["calls"] == 3 * 60 and plain["iterators"] == ["OwnedIterator"] * 3
    every_epoch = sorted(plain["epochs"][0])
    assert all(sorted(e) == every_epoch for e in plain["epochs"])

    cached = run_with("loop", {"sites": {"train.py:34": {"cache": "memory"}}})
    assert cached["calls"] == 60  # the tokenizer ran over the first epoch only
    assert [sorted(e) for e in cached["epochs"]] == [every_epoch] * 3
    assert "CacheDataset" in cached["chain"]

    moved = run_with("loop", {"sites": {"train.py:35": {"shuffle_first": True}}})
    assert [sorted(e) for e in moved["epochs"]] == [every_epoch] * 3
    # Source first: the shuffle now comes before the map.
    order = [n for n in reversed(moved["chain"]) if n in ("_ShuffleDataset", "_MapDataset")]
    assert order[:2] == ["_ShuffleDataset", "_MapDataset"], moved["chain"]

    held = run_with("loop", {"one_iterator": True})
    assert held["iterators"] == ["EpochView"] * 3
    assert [sorted(e) for e in held["epochs"]] == [every_epoch] * 3


def test_keras_fit_keeps_one_iterator_over_the_repeated_dataset(
    run_with: Callable[..., dict[str, Any]],
) -> None:
    plain = run_with("fit", None)
    held = run_with("fit", {"one_iterator": True})
    assert held["steps"] == plain["steps"] == 8  # 60 lines in batches of 8: 7 and a part
    assert held["made"] < plain["made"]  # fit made an iterator each epoch as written
    assert held["calls"] >= plain["calls"] >= 4 * 60


def test_a_trial_of_a_cache_and_one_iterator_in_fit_sees_its_epochs(tmp_path: Path) -> None:
    """With one iterator over the repeated dataset, Keras' epochs make no new iterator:
    they are reported as epoch starts all the same, so a cache's trial (measured from
    the second epoch) ends, and its epochs are whole."""
    from tftune.tuner.searchspace.config import Config, SiteConfig
    from tftune.tuner.trial import MeasureSpec, run_trial

    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("epochs=4", "epochs=100000"))
    config = Config(sites={"train.py:34": SiteConfig(cache="memory")}, one_iterator=True)
    spec = MeasureSpec(window_s=1.0, max_wall_s=240)
    m = run_trial(script, ["fit"], config, spec)
    assert m.ok, m.reason
    assert m.training is not None and m.training.epochs_seen >= 2
    assert m.training.steps_per_epoch == 8


def test_tftune_apply_in_the_script_applies_the_rewrites(tmp_path: Path) -> None:
    """`tftune.apply(config)` at the top of the script does what `tftune run --config`
    does: the cache and one iterator across the script's own epochs."""
    import sys

    first, rest = SCRIPT.split("\n", 1)  # the prelude joins line 1: call sites keep their lines
    prelude = "import tftune; tftune.apply(sys.argv[2])"
    script = tmp_path / "train.py"
    script.write_text(f"{first}; import sys; {prelude}\n{rest}")
    config = tmp_path / "best.json"
    sites = {"train.py:34": {"cache": "memory"}}
    config.write_text(json.dumps({"schema": 1, "sites": sites, "one_iterator": True}))
    done = subprocess.run(
        [sys.executable, str(script), "loop", str(config)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["calls"] == 60 and "CacheDataset" in result["chain"]
    assert result["iterators"] == ["EpochView"] * 3
    assert all(sorted(e) == sorted(result["epochs"][0]) for e in result["epochs"])
