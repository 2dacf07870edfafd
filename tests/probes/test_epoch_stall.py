"""Naming an epoch-start stall's cause from the pipeline as built (`probes.live.epoch_stall`)."""

from __future__ import annotations

import pytest

from tftune.core.document_reading import Reader
from tftune.core.errors import UserError
from tftune.core.training import EpochStall
from tftune.probes.live.epoch_stall import (
    DISTRIBUTED_ITERATOR,
    NEW_ITERATOR,
    NO_CACHE,
    PYTHON_SOURCE,
    REBUILT,
    SHUFFLE_BEHIND_MAP,
    STALL_SHARE_NAMED,
    UNEXPLAINED,
    PipelineStage,
    chain_from_json,
    diagnose,
)

SOURCE = PipelineStage("source")
MAP = PipelineStage("map", "train.py:10", python=True)
SHUFFLE = PipelineStage("shuffle", "train.py:11")
CACHE = PipelineStage("cache", "train.py:12")
BATCH = PipelineStage("batch", "train.py:13")


def test_a_shuffle_buffer_behind_a_map_refills_through_it() -> None:
    stall = diagnose(14.0, 697, 0.45, (SOURCE, MAP, SHUFFLE, BATCH))
    assert stall is not None and stall.cause == SHUFFLE_BEHIND_MAP
    assert stall.sites == ("train.py:10", "train.py:11")
    assert "(line 11)" in stall.summary and "Python function" in stall.summary
    assert stall.code is not None and "ds.shuffle(buffer_size)" in stall.code
    assert stall.sentence.startswith("each epoch opens with a 14.00 s stall (45% of its")


def test_a_cache_between_the_map_and_the_shuffle_leaves_no_map_to_refill() -> None:
    stall = diagnose(0.5, 100, 0.2, (SOURCE, MAP, CACHE, SHUFFLE, BATCH))
    assert stall is not None and stall.cause == UNEXPLAINED


def test_a_map_without_cache_restarts_cold() -> None:
    stall = diagnose(0.5, 100, 0.2, (SOURCE, MAP, BATCH))
    assert stall is not None and stall.cause == NO_CACHE and stall.sites == ("train.py:10",)


def test_a_dataset_built_anew_each_epoch() -> None:
    stall = diagnose(0.5, 100, 0.2, (SOURCE, MAP, BATCH), rebuilt=True)
    assert stall is not None and stall.cause == REBUILT and "repeat()" in stall.summary


@pytest.mark.parametrize(
    ("stall_s", "steps", "share"),
    [(0.1, 100, STALL_SHARE_NAMED / 2), (None, 100, 0.5), (1.0, None, 0.5), (1.0, 10, None)],
)
def test_small_or_unmeasured_stalls_are_not_named(
    stall_s: float | None, steps: int | None, share: float | None
) -> None:
    assert diagnose(stall_s, steps, share, (SOURCE, MAP, SHUFFLE)) is None


def test_the_sentence_is_worded_from_the_stall_as_measured() -> None:
    """The JSON rounds the stall to 4 digits; its sentence is worded before that, once, by
    the producer, and read back as written (never worded again from rounded figures)."""
    stall = diagnose(0.0149996, 40, 0.12496, (SOURCE, MAP, BATCH))
    assert stall is not None and (stall.stall_s, stall.share) == (0.015, 0.125)
    assert "a 0.01 s stall (12% of its training time" in stall.sentence
    assert EpochStall.from_reader(Reader(stall.to_json(), source="t")).sentence == stall.sentence


def test_round_trips() -> None:
    stall = diagnose(2.0, 50, 0.3, (SOURCE, MAP, SHUFFLE, BATCH))
    assert stall is not None
    assert EpochStall.from_reader(Reader(stall.to_json(), source="t")) == stall
    with pytest.raises(UserError, match=r"^t: field 'steps_per_epoch' is missing$"):
        EpochStall.from_reader(Reader({"stall_s": 1.0}, source="t"))
    chain = (SOURCE, MAP, SHUFFLE)
    assert chain_from_json([s.to_json() for s in chain]) == chain
    assert chain_from_json([{"site": "x"}, "junk", None]) == ()


def test_a_new_iterator_over_a_distributed_dataset_each_epoch() -> None:
    stall = diagnose(1.0, 32, 0.3, (SOURCE, BATCH, PipelineStage("distribute")))
    assert stall is not None and stall.cause == DISTRIBUTED_ITERATOR
    assert stall.code is not None and "experimental_distribute_dataset(ds.repeat())" in stall.code


def test_a_python_generator_source_is_named_before_the_maps_after_it() -> None:
    generator = PipelineStage("generator", python=True)
    stall = diagnose(0.2, 12, 0.25, (SOURCE, generator, MAP, BATCH))
    assert stall is not None and stall.cause == PYTHON_SOURCE
    assert stall.code is not None and "keras.utils.PyDataset" in stall.code


def test_a_generator_cached_after_it_runs_in_the_first_epoch_only() -> None:
    generator = PipelineStage("generator", python=True)
    stall = diagnose(0.2, 12, 0.25, (SOURCE, generator, CACHE, MAP, BATCH))
    assert stall is not None and stall.cause == UNEXPLAINED


def test_a_stall_made_before_the_first_request_is_the_new_iterator_not_the_pipeline() -> None:
    """Keras fit over a finite dataset makes an iterator every epoch: where most of the
    stall comes before the first element is asked for, a cache() or a reordered shuffle
    would not touch it; one iterator over a repeat()ed dataset does."""
    for chain in [(SOURCE, MAP, BATCH), (SOURCE, MAP, SHUFFLE, BATCH)]:
        stall = diagnose(0.26, 19, 0.22, chain, made_s=0.21)
        assert stall is not None and stall.cause == NEW_ITERATOR, chain
        assert "0.21 s before its first batch" in stall.summary
        assert stall.code is not None and "steps_per_epoch=19" in stall.code
        assert "iter(ds.repeat())" in stall.code and "range(19)" in stall.code
    # Mostly the first element's wait: the pipeline's cause, as before.
    stall = diagnose(0.26, 19, 0.22, (SOURCE, MAP, SHUFFLE, BATCH), made_s=0.1)
    assert stall is not None and stall.cause == SHUFFLE_BEHIND_MAP
    # A dataset built anew, a Python source and tf.distribute's iterator keep their own.
    stall = diagnose(0.26, 19, 0.22, (SOURCE, MAP, BATCH), rebuilt=True, made_s=0.2)
    assert stall is not None and stall.cause == REBUILT
    generator = PipelineStage("generator", python=True)
    stall = diagnose(0.26, 19, 0.22, (SOURCE, generator, BATCH), made_s=0.2)
    assert stall is not None and stall.cause == PYTHON_SOURCE
    stall = diagnose(0.26, 19, 0.22, (SOURCE, PipelineStage("distribute")), made_s=0.2)
    assert stall is not None and stall.cause == DISTRIBUTED_ITERATOR
