"""Child side: a dataset's elements, as the equivalence checks read them
(tuner/child/equivalence.py): each as numpy arrays (`leaves`), taken under a deadline
(`take`), compared in order or as multisets (`compare`), sized (`nbytes`), and a pass's
length counted where tf.data does not know it (`pass_length`, `pass_examples`).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tftune.core.tuning_rewrites import Equivalence
from tftune.tuner.child.rewrite_apply import finite_length

# At least this many examples are compared, and at least `CHECK_BATCHES` elements.
CHECK_EXAMPLES = 256
CHECK_BATCHES = 2


class Late(Exception):
    """A check ran past its deadline."""


Leaves = tuple[Any, ...]


def leaves(element: Any) -> Leaves:
    """An element as numpy arrays: its tensors, ragged and sparse ones taken apart."""
    import numpy as np
    import tensorflow as tf

    return tuple(np.asarray(x) for x in tf.nest.flatten(element, expand_composites=True))


# Floating-point elements made another way (a batched op) may differ in the last bits.
FLOAT_RTOL = 1e-6


def _same(a: Leaves, b: Leaves, rtol: float = 0.0) -> bool:
    import numpy as np

    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        nan = x.dtype.kind in "fc"
        if rtol and nan:
            if not np.allclose(x, y, rtol=rtol, atol=rtol, equal_nan=True):
                return False
        elif not np.array_equal(x, y, equal_nan=nan):
            return False
    return True


def _key(element: Leaves) -> tuple[Any, ...]:
    return tuple(
        (x.dtype.str, x.shape, repr(x.tolist()) if x.dtype.kind == "O" else x.tobytes())
        for x in element
    )


def nbytes(element: Leaves) -> int:
    """An element's size in memory (a string's by its length)."""
    total = 0
    for x in element:
        if x.dtype.kind == "O":
            total += sum(len(v) if isinstance(v, (bytes, str)) else 8 for v in x.ravel())
        else:
            total += int(x.nbytes)
    return total


def compare(
    a: Sequence[Leaves], b: Sequence[Leaves], multiset: bool, rtol: float = 0.0
) -> Equivalence:
    """`b` against `a`: element by element (floating point within `rtol`), else (where
    `multiset`) as multisets."""
    n = min(len(a), len(b))
    first = next((i for i in range(n) if not _same(a[i], b[i], rtol)), None)
    if first is None and len(a) == len(b):
        return Equivalence(True, n, f"in order, within {rtol:g} relative" if rtol else "in order")
    if multiset and collections.Counter(map(_key, a)) == collections.Counter(map(_key, b)):
        return Equivalence(True, n, "as a multiset")
    if first is None:
        detail = f"{len(a)} elements against {len(b)}"
    else:
        detail = f"outputs differ at element {first}"
    return Equivalence(False, n, "as a multiset" if multiset else "in order", detail)


def take(ds: Any, n: int, deadline: float, iterate: Callable[[Any], Iterator[Any]]) -> list[Leaves]:
    """Up to `n` elements of `ds` (fewer where it ends), or `Late` past `deadline`."""
    out: list[Leaves] = []
    it = iterate(ds)
    while len(out) < n:
        if time.monotonic() > deadline:
            raise Late
        try:
            out.append(leaves(next(it)))
        except StopIteration:
            break
    return out


def wanted(sample: Sequence[Leaves], batched: bool) -> int:
    """Elements to compare: `CHECK_EXAMPLES` examples and `CHECK_BATCHES` elements."""
    per = max(1, _examples(sample[0]) if sample and batched else 1)
    return max(CHECK_BATCHES, -(-CHECK_EXAMPLES // per))


def _examples(element: Leaves) -> int:
    return int(element[0].shape[0]) if element and element[0].shape else 1


def shapes(elements: Sequence[Leaves]) -> list[tuple[tuple[str, tuple[int, ...]], ...]]:
    """Each element's structure: its leaves' dtypes and ranks (sizes may vary)."""
    return [tuple((x.dtype.str, (x.ndim,)) for x in e) for e in elements]


# Counting a pass's elements where tf.data does not know them gives up after this long.
CHECK_COUNT_S = 15.0
# Stages that give one element per element of their input.
_ONE_TO_ONE = ("Map", "Prefetch", "Options", "Cache", "Shuffle", "Enumerate")


def cache_bytes(
    sample: Sequence[Leaves], target: Any, iterate: Any
) -> tuple[int | None, int | None]:
    """What a cache of the whole pass holds: bytes per element of `sample` times the
    elements of a pass (`pass_length`), and those elements (None where they cannot be
    known)."""
    n = pass_length(target, iterate)
    if not sample or n is None:
        return None, n
    per = sum(nbytes(e) for e in sample) / len(sample)
    return int(per * n), n


_BATCHES = ("BatchDataset", "PaddedBatchDataset", "MapAndBatchDataset")


def pass_examples(ds: Any, iterate: Any, seconds: float = CHECK_COUNT_S) -> int | None:
    """The training dataset's examples per pass where tf.data does not know its length
    (a text reader, a filter): the elements below its batches and maps, counted within
    `seconds` without running the maps (a step's examples turn it into an epoch's
    steps: `probes.live.training_time`). None where that cannot be told."""
    below = ds
    while any(part in type(below).__name__ for part in (*_BATCHES, *_ONE_TO_ONE)):
        try:
            inputs = list(below._inputs())
        except Exception:
            return None
        if len(inputs) != 1:
            return None
        below = inputs[0]
    return pass_length(below, iterate, seconds)


def pass_length(ds: Any, iterate: Any, seconds: float = CHECK_COUNT_S) -> int | None:
    """`ds`'s elements per pass: tf.data's count where it knows it, else the count of
    the nearest stage below it that gives a different number of elements (the reads
    before a map; the maps themselves are not run again), within `seconds`."""
    n = finite_length(ds)
    if n is not None:
        return n
    below = ds
    while any(part in type(below).__name__ for part in _ONE_TO_ONE):
        try:
            inputs = list(below._inputs())
        except Exception:
            return None
        if len(inputs) != 1:
            return None
        below = inputs[0]
    deadline, count = time.monotonic() + seconds, 0
    for _ in iterate(below):
        count += 1
        if time.monotonic() > deadline:
            return None
    return count
