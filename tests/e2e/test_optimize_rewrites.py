"""`tftune optimize` on a script whose real win is a rewrite: a Python tokenizer (1 ms an
element, sequential) filling a shuffle buffer at every epoch's start. The installed CLI
checks the rewrites, measures them beside the knobs, picks the cache (its work done once
for many short epochs), writes it into the diff and both reports, and `tftune run
--config` trains with it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_tf

pytestmark = [requires_tf, pytest.mark.slow]

SCRIPT = """\
import argparse
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()


def tokenize(text):
    time.sleep(0.001)  # a Python tokenizer's work, one element at a time
    return np.array([sum(map(ord, w)) % 97 for w in text.numpy().decode().split()], np.int64)


def load(text):
    ids = tf.py_function(tokenize, [text], tf.int64)
    ids.set_shape([4])
    return ids


lines = [f"review {i} {i % 5} stars" for i in range(320)]
ds = tf.data.Dataset.from_tensor_slices(lines)
ds = ds.map(load)
ds = ds.shuffle(200)
ds = ds.batch(16)
w = tf.Variable(tf.zeros([4, 1]))
opt = tf.keras.optimizers.SGD(1e-4)


@tf.function
def step(ids):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.matmul(tf.cast(ids, tf.float32), w) ** 2)
    opt.apply_gradients([(tape.gradient(loss, w), w)])
    return loss


for epoch in range(args.epochs):
    for ids in ds:
        step(ids)
print("trained")
"""

MAP_LINE = SCRIPT.splitlines().index("ds = ds.map(load)") + 1


def test_optimize_finds_measures_and_writes_the_cache(tmp_path: Path, run_cli: Any) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = run_cli(
        "optimize", str(script), "--trials", "8", "--window", "1.5",
        "--json", "t.json", "-o", "t.html", "--best", "best.json",
        "--", "--epochs", "100000",
        timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    doc = json.loads((tmp_path / "t.json").read_text())
    rows = {r["kind"]: r for r in doc["rewrites"]}
    cache = rows["cache"]
    assert cache["state"] == "measured" and cache["in_winner"], rows
    assert cache["check"]["passed"] and cache["alone_gain"] > 1.2
    assert rows["order"]["check"]["passed"] and rows["iterator"]["check"]["passed"]
    best = json.loads((tmp_path / "best.json").read_text())
    assert best["sites"][f"train.py:{MAP_LINE}"]["cache"] == "memory"
    # The knobs the winner sets at that map may sit inside the call; the cache ends it.
    assert re.search(r"^\+ds = ds\.map\(load[^\n]*\)\.cache\(\)$", doc["diff"], re.M), doc["diff"]
    said = out.stdout + out.stderr
    assert "pipeline rewrites:" in said and "in the winner" in said
    assert '<section id="rewrites">' in (tmp_path / "t.html").read_text()
    ran = run_cli("run", "--config", "best.json", str(script), "--", "--epochs", "2")
    assert ran.returncode == 0 and "trained" in ran.stdout, ran.stderr[-2000:]
