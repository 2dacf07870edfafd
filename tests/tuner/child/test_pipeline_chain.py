"""The training pipeline as the script built it (`tuner.child.lineage.pipeline_chain`),
read from real tf.data datasets: what the epoch-start stall's cause is named from."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tftune.probes.live.epoch_stall import PYTHON_SOURCE, diagnose  # noqa: E402
from tftune.tuner.child.lineage import pipeline_chain  # noqa: E402


class _Batches(keras.utils.PyDataset):  # type: ignore[misc]
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((2, 3), "float32"), np.zeros((2,), "float32")


def _kinds(ds: object) -> list[tuple[str, bool]]:
    return [(s.kind, s.python) for s in pipeline_chain(ds)]


def test_a_python_generator_source_is_named_so() -> None:
    ds = tf.data.Dataset.from_generator(
        lambda: iter(range(8)), output_signature=tf.TensorSpec((), tf.int64)
    )
    ds = ds.map(lambda x: x * 2).batch(2)
    assert _kinds(ds) == [("source", False), ("generator", True), ("map", False), ("batch", False)]


def test_a_keras_py_dataset_is_a_python_generator_and_its_stall_says_workers() -> None:
    """Keras' adapter of a PyDataset builds a from_generator pipeline of its own: the
    fix is the PyDataset's workers, never a cache() or map of the user's."""
    from keras.src.trainers.data_adapters import get_data_adapter

    ds = get_data_adapter(_Batches(), shuffle=True).get_tf_dataset()
    chain = pipeline_chain(ds)
    assert [s.kind for s in chain if s.kind == "generator"] == ["generator"]
    stall = diagnose(0.11, 12, 0.2, chain)
    assert stall is not None and stall.cause == PYTHON_SOURCE
    assert "workers" in stall.summary and stall.code is not None
    assert "workers=4" in stall.code and "cache()" not in stall.summary.split("or build")[0]


def test_a_plain_flat_map_is_no_generator() -> None:
    ds = tf.data.Dataset.range(4).flat_map(lambda x: tf.data.Dataset.from_tensors(x))
    assert _kinds(ds) == [("source", False), ("flat_map", False)]


def test_a_stage_that_draws_anew_each_pass_is_named_with_its_op() -> None:
    """What a cache must stay above: a stateful random op, one inside a function the map
    calls, and a Keras random layer (a stateless op whose seed variable advances). A
    stateless op with a fixed seed and a plain map draw nothing anew."""
    from tftune.tuner.child.lineage import pipeline_chain

    src = tf.data.Dataset.from_tensor_slices(tf.zeros([4, 8, 8, 3]))

    @tf.function
    def jitter(x: object) -> object:
        return x + tf.random.uniform([])

    flip = keras.layers.RandomFlip()
    randoms = {
        "uniform": src.map(lambda x: x + tf.random.uniform([])),
        "nested": src.map(jitter),
        "image": src.map(tf.image.random_flip_left_right),
        "keras": src.map(lambda x: flip(x, training=True)),
    }
    for name, ds in randoms.items():
        assert pipeline_chain(ds)[-1].random is not None, name
    seeded = src.map(lambda x: tf.image.stateless_random_flip_left_right(x, seed=(1, 2)))
    plain = src.map(lambda x: x * 2.0).batch(2)
    assert pipeline_chain(seeded)[-1].random is None
    assert [s.random for s in pipeline_chain(plain)] == [None, None, None]
    assert [s.elements for s in pipeline_chain(plain)] == [4, 4, 2]
