"""The rewrites' equivalence check on real scripts: discovery reads the training
pipeline, `consider` names the candidates, and one run of the script checks each on a
rebuild of its real dataset (tuner/child/equivalence.py). A deterministic tokenizer
passes every check; the same tokenizer drawing random numbers in Python is refused a
cache and a moved shuffle, with where its outputs differed."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import requires_tf

from tftune.core.tuning_rewrites import RewriteKind, RewriteRow, RewriteState
from tftune.tuner.fixes.rewrite_check import check_rewrites
from tftune.tuner.fixes.rewrites import consider
from tftune.tuner.fixes.training_calls import LOOP_EAGER
from tftune.tuner.trial import discover

pytestmark = [requires_tf, pytest.mark.slow]

SCRIPT = """\
import sys

import numpy as np
import tensorflow as tf

RANDOM = sys.argv[1:] == ["random"]
lines = [f"review {i} says {'good' if i % 3 else 'bad'} things" for i in range(400)]


def tokenize(text):
    words = text.numpy().decode().split()
    ids = [sum(map(ord, w)) % 97 + 1 for w in words]
    if RANDOM:
        ids = [i + int(np.random.randint(0, 5)) for i in ids]
    return np.array(ids, np.int64)


def load(text):
    ids = tf.py_function(tokenize, [text], tf.int64)
    ids.set_shape([None])
    return ids


ds = tf.data.Dataset.from_tensor_slices(lines)
ds = ds.map(load)
ds = ds.shuffle(300)
ds = ds.padded_batch(16, padded_shapes=[None])
w = tf.Variable(0.0)
opt = tf.keras.optimizers.SGD(0.01)
for epoch in range(1000):
    for ids in ds:
        with tf.GradientTape() as tape:
            loss = (w - tf.reduce_mean(tf.cast(ids, tf.float32))) ** 2
        opt.apply_gradients([(tape.gradient(loss, w), w)])
"""


def _checked(tmp_path: Path, *args: str) -> dict[RewriteKind, RewriteRow]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    found = discover(script, list(args))
    pipeline = found.training_pipeline()
    assert pipeline is not None and pipeline.loop == LOOP_EAGER
    candidates, rows = consider(pipeline.chain, pipeline.loop)
    assert rows == []
    assert {c.kind for c in candidates} == {
        RewriteKind.CACHE,
        RewriteKind.ORDER,
        RewriteKind.ITERATOR,
    }
    trains = found.training
    assert trains is not None
    checked = check_rewrites(script, list(args), candidates, (trains.site, trains.place))
    assert checked.epoch_examples is None  # tf.data knows the length: nothing counted
    return {r.kind: r for r in checked.rows}


def test_a_deterministic_tokenizer_passes_every_check(tmp_path: Path) -> None:
    got = _checked(tmp_path)
    assert {r.state for r in got.values()} == {RewriteState.CHECKED}, got
    cache = got[RewriteKind.CACHE]
    assert cache.site == "train.py:25" and cache.check is not None
    assert cache.check.passed and cache.check.compared >= 256  # examples, before the batch
    # 400 reviews of 5 int64 ids each, and the strings' shapes: measured, not guessed.
    assert cache.cache_bytes is not None and 400 * 5 * 8 <= cache.cache_bytes < 100_000
    order = got[RewriteKind.ORDER]
    assert order.site == "train.py:26" and order.check is not None
    assert order.check.how == "in order"  # one seed: the same order, the same elements
    iterator = got[RewriteKind.ITERATOR]
    assert iterator.check is not None and "epoch's end" in iterator.check.how
    assert iterator.check.compared > 25  # one epoch of 25 batches and the next one's start


def test_a_tokenizer_that_draws_random_numbers_is_refused_a_cache_and_a_moved_shuffle(
    tmp_path: Path,
) -> None:
    got = _checked(tmp_path, "random")
    cache, order = got[RewriteKind.CACHE], got[RewriteKind.ORDER]
    assert cache.state is RewriteState.REFUSED
    assert "not deterministic" in cache.reason and "differ at element" in cache.reason
    assert order.state is RewriteState.REFUSED and "differ" in order.reason
    # One iterator changes nothing a pass computes: its epochs are as long.
    iterator = got[RewriteKind.ITERATOR]
    assert iterator.state is RewriteState.CHECKED
    assert iterator.check is not None and "random" in iterator.check.how


LINES_SCRIPT = """\
import pathlib

import tensorflow as tf

folder = pathlib.Path(__file__).parent / "texts"
folder.mkdir(exist_ok=True)
for i in range(30):
    (folder / f"{i}.txt").write_text("\\n".join(f"line {i} {j}" for j in range(10)))
files = sorted(str(p) for p in folder.glob("*.txt"))
ds = tf.data.TextLineDataset(files)
ds = ds.map(lambda line: tf.strings.length(line))
ds = ds.shuffle(64).batch(8)
w = tf.Variable(0.0)
opt = tf.keras.optimizers.SGD(0.01)
for epoch in range(1000):
    for n in ds:
        with tf.GradientTape() as tape:
            loss = (w - tf.reduce_mean(tf.cast(n, tf.float32))) ** 2
        opt.apply_gradients([(tape.gradient(loss, w), w)])
"""


def test_an_epoch_whose_length_tf_data_does_not_know_is_counted(tmp_path: Path) -> None:
    """A text reader's length is unknown to tf.data: the check run counts the lines
    below the map and the batch (300), and one iterator does not apply."""
    script = tmp_path / "train.py"
    script.write_text(LINES_SCRIPT)
    found = discover(script, [])
    pipeline = found.training_pipeline()
    assert pipeline is not None and pipeline.chain[-1].elements == -2
    _, rows = consider(pipeline.chain, pipeline.loop)
    assert [r.kind for r in rows] == [RewriteKind.ITERATOR]
    trains = found.training
    assert trains is not None
    report = check_rewrites(script, [], [], (trains.site, trains.place))
    assert report.epoch_examples == 300


VECTOR_SCRIPT = """\\
import tensorflow as tf

x = tf.random.stateless_uniform([512, 4], seed=(1, 2))
ds = tf.data.Dataset.from_tensor_slices(x)
ds = ds.map(lambda v: tf.reshape(v, [2, 2]) * 2.0 + tf.reduce_sum(v))
ds = ds.batch(32)
w = tf.Variable(0.0)
opt = tf.keras.optimizers.SGD(0.01)
for epoch in range(1000):
    for b in ds:
        with tf.GradientTape() as tape:
            loss = (w - tf.reduce_mean(b)) ** 2
        opt.apply_gradients([(tape.gradient(loss, w), w)])
"""


def test_a_map_made_over_batches_keeps_only_the_way_that_gives_the_same_batches(
    tmp_path: Path,
) -> None:
    """The map reshapes one element and sums it: as it is over a batch it would reshape
    and sum the whole batch (refused, with where the batches differ); through
    tf.vectorized_map it gives the same batches."""
    script = tmp_path / "train.py"
    script.write_text(VECTOR_SCRIPT)
    found = discover(script, [])
    pipeline, trains = found.training_pipeline(), found.training
    assert pipeline is not None and trains is not None
    candidates, _ = consider(pipeline.chain, pipeline.loop)
    vectorize = [c for c in candidates if c.kind is RewriteKind.VECTORIZE]
    assert [c.value for c in vectorize] == ["batch", "vectorized_map"]
    report = check_rewrites(script, [], vectorize, (trains.site, trains.place))
    as_it_is, pfor = report.rows
    assert as_it_is.state is RewriteState.REFUSED, as_it_is
    assert "gives other batches" in as_it_is.reason or "failed" in as_it_is.reason
    assert pfor.state is RewriteState.CHECKED, pfor
    assert pfor.check is not None and pfor.check.compared >= 8  # 256 examples, 32 a batch


FILES_SCRIPT = """\\
import pathlib

import tensorflow as tf

folder = pathlib.Path(__file__).parent / "shards"
folder.mkdir(exist_ok=True)
for shard in range(12):
    with tf.io.TFRecordWriter(str(folder / f"{shard}.tfrecord")) as out:
        for i in range(50):
            out.write(f"shard {shard} record {i}".encode())
files = tf.data.Dataset.from_tensor_slices(sorted(str(p) for p in folder.glob("*.tfrecord")))
ds = files.flat_map(tf.data.TFRecordDataset)
ds = ds.map(tf.strings.length).batch(16)
w = tf.Variable(0.0)
opt = tf.keras.optimizers.SGD(0.01)
for epoch in range(1000):
    for n in ds:
        with tf.GradientTape() as tape:
            loss = (w - tf.reduce_mean(tf.cast(n, tf.float32))) ** 2
        opt.apply_gradients([(tape.gradient(loss, w), w)])
"""


def test_a_flat_map_over_files_read_as_an_interleave_holds_the_same_records(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(FILES_SCRIPT)
    found = discover(script, [])
    pipeline, trains = found.training_pipeline(), found.training
    assert pipeline is not None and trains is not None
    candidates, _ = consider(pipeline.chain, pipeline.loop)
    files = [c for c in candidates if c.kind is RewriteKind.FILES]
    assert [c.site for c in files] == ["train.py:13"]
    report = check_rewrites(script, [], files, (trains.site, trains.place))
    (row,) = report.rows
    assert row.state is RewriteState.CHECKED, row
    assert row.check is not None and row.check.compared == 600
    assert "multiset, over a whole pass" in row.check.how


@pytest.mark.gpu
def test_batches_prefetched_to_the_gpu_are_the_same_batches(tmp_path: Path) -> None:
    """Where a GPU is visible: the batches copied to it ahead equal the script's own."""
    from tftune.tuner.fixes.rewrites import consider_device

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    found = discover(script, [])
    trains = found.training
    assert trains is not None
    (device,), _ = consider_device(LOOP_EAGER, gpu=True)
    report = check_rewrites(script, [], [device], (trains.site, trains.place))
    (row,) = report.rows
    assert row.state is RewriteState.CHECKED and row.check is not None and row.check.passed


FILTER_SCRIPT = """\\
import sys

import tensorflow as tf

paths = [f"img_{i:04d}.jpg" for i in range(600)]
labels = [i % 7 for i in range(600)]
ds = tf.data.Dataset.from_tensor_slices((paths, labels))
ds = ds.map(lambda p, y: (tf.strings.length(p) * 3 + y, y))
if sys.argv[1:] == ["reads_written"]:
    ds = ds.filter(lambda x, y: x % 2 == 0)
else:
    ds = ds.filter(lambda x, y: y != 3)
ds = ds.batch(16)
w = tf.Variable(0.0)
opt = tf.keras.optimizers.SGD(0.001)
for epoch in range(1000):
    for x, y in ds:
        with tf.GradientTape() as tape:
            loss = (w - tf.reduce_mean(tf.cast(x, tf.float32))) ** 2
        opt.apply_gradients([(tape.gradient(loss, w), w)])
"""


@pytest.mark.parametrize("which", ["reads_label", "reads_written"])
def test_a_filter_moves_above_the_map_only_where_it_reads_what_the_map_passes(
    tmp_path: Path, which: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text(FILTER_SCRIPT)
    found = discover(script, [which])
    pipeline, trains = found.training_pipeline(), found.training
    assert pipeline is not None and trains is not None
    candidates, _ = consider(pipeline.chain, pipeline.loop)
    filters = [c for c in candidates if c.kind is RewriteKind.FILTER]
    assert [c.site for c in filters] == [
        "train.py:11" if which == "reads_written" else "train.py:13"
    ]
    (row,) = check_rewrites(script, [which], filters, (trains.site, trains.place)).rows
    if which == "reads_label":
        assert row.state is RewriteState.CHECKED, row
        assert row.check is not None and row.check.how == "in order"
    else:
        assert row.state is RewriteState.NOT_APPLICABLE
        assert "reads component 0 of the element, which the map writes" in row.reason
