"""An epoch-start stall: what it costs, why, and the fix (`core.training.EpochStall`).

The step clock times each epoch's first step (`core.training.EpochCost`). Profiled
steps in the middle of an epoch are steady, so a profile alone never shows it, yet a
shuffle buffer filled through an expensive map can cost half of every epoch. A stall
that costs `STALL_SHARE_NAMED` of training time or more is named (`diagnose`) with its
cause, read from the training pipeline as the script built it (`PipelineStage`: the
child walks the iterated dataset's lineage, `tuner.child.lineage.pipeline_chain`):

- **a shuffle buffer behind an expensive map**: each epoch refills the whole buffer
  through the map before the first element comes out. Shuffle what is cheap (file
  names, indices) before the map, or ``cache()`` right after a deterministic map;
- **no cache**: the pipeline's work restarts cold every epoch (its first batch waits for
  the map, the reads, the fills): ``cache()`` after the deterministic part;
- **an iterator rebuilt each epoch** (the dataset built anew every epoch): its functions
  are traced and its buffers filled again each time. Build it once, ``repeat()`` it and
  keep one iterator;
- **a new iterator each epoch**, where most of the stall comes before the first element
  is asked for (`MADE_SHARE`): making the epoch's iterator and letting the last one go.
  Keras ``fit`` over a finite dataset does this every epoch (40 ms to 1 s an epoch
  measured on the audio script of tests/realscripts), and keeps one iterator over a
  ``repeat()``-ed dataset given ``steps_per_epoch``; a custom loop makes one iterator
  over ``ds.repeat()`` and takes an epoch's steps from it;
- **a new iterator over a tf.distribute dataset each epoch**: it starts every replica's
  pipeline (a multi-device iterator) again. Make one iterator over a ``repeat()``-ed
  dataset and take an epoch's steps from it;
- **a Python generator as the source** (``from_generator``, or Keras' adapter of a
  ``keras.utils.PyDataset``, ``Sequence`` or generator): each epoch's first batch waits
  for Python to produce it, one item at a time, and ``cache()`` or a tf.data map of the
  user's would not reach it. Give the ``PyDataset`` workers, or build the input with
  tf.data from the file list.

Pure data: no TensorFlow here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tftune.core.training import EpochStall

# A stall costing this share of an epoch's training time or more is named.
STALL_SHARE_NAMED = 0.05
# Where at least this share of the stall comes before the first element is asked for,
# the cause is the iterator's making, not the pipeline's first element.
MADE_SHARE = 0.5

SHUFFLE_BEHIND_MAP = "shuffle_behind_map"
NO_CACHE = "no_cache"
REBUILT = "rebuilt_each_epoch"
NEW_ITERATOR = "new_iterator_each_epoch"
DISTRIBUTED_ITERATOR = "distributed_iterator_each_epoch"
PYTHON_SOURCE = "python_generator_source"
UNEXPLAINED = "unexplained"


# The causes whose fix `tftune optimize` measures, and as what.
OPTIMIZED_CAUSES = {
    SHUFFLE_BEHIND_MAP: "the cache() and moved-shuffle rewrites",
    NO_CACHE: "the cache() rewrite",
    NEW_ITERATOR: "the one-iterator rewrite",
    PYTHON_SOURCE: "a PyDataset's workers are knobs",
}


@dataclass(frozen=True, slots=True)
class PipelineStage:
    """One transformation of the training pipeline, source first."""

    # map | shuffle | cache | batch | padded_batch | prefetch | repeat | interleave
    # | flat_map | source | other, and
    # distribute: tf.distribute splits the pipeline across replicas (the last stage);
    # generator: a Python generator's elements (`from_generator`, Keras' PyDataset).
    kind: str
    site: str | None = None  # the user's line, where the child saw the call
    python: bool = False  # its function runs Python (py_function, numpy_function)
    # A stateful random op in its function (its type: "RandomUniform"), or a random op
    # whose seed is a variable the function advances (a Keras random layer's).
    random: str | None = None
    # Its elements per pass as tf.data knows them (-1: infinite, -2: unknown).
    elements: int | None = None
    reader: bool = False  # its function opens a file reader (a flat_map over files)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "site": self.site, "python": self.python}
        if self.random is not None:
            out["random"] = self.random
        if self.elements is not None:
            out["elements"] = self.elements
        if self.reader:
            out["reader"] = True
        return out

    @staticmethod
    def from_json(raw: object) -> PipelineStage | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("kind"), str):
            return None
        site = raw.get("site")
        where = site if isinstance(site, str) else None
        random = raw.get("random") if isinstance(raw.get("random"), str) else None
        n = raw.get("elements")
        elements = n if isinstance(n, int) and not isinstance(n, bool) else None
        return PipelineStage(
            raw["kind"], where, bool(raw.get("python")), random, elements, bool(raw.get("reader"))
        )


def chain_from_json(raw: object) -> tuple[PipelineStage, ...]:
    items = raw if isinstance(raw, list) else []
    return tuple(s for s in (PipelineStage.from_json(r) for r in items) if s is not None)


# Stages that run a function of the script's over each element.
MAPPING_KINDS = frozenset({"map", "interleave", "flat_map"})
# Stages whose work an epoch start repeats, unless a cache below holds their output.
_EXPENSIVE = frozenset({"map", "interleave", "flat_map", "generator"})


def recurs(chain: Sequence[PipelineStage]) -> bool:
    """Whether an epoch-start stall recurs every epoch, read from the pipeline alone: not
    where a cache() comes after every map and Python source (each later epoch is read
    from it, and the first epoch's stall was its filling); else it does (a shuffle
    buffer refilled through a map, a pipeline restarting cold). An unknown pipeline (no
    chain) is taken to recur."""
    expensive = [i for i, s in enumerate(chain) if s.kind in _EXPENSIVE or s.python]
    caches = [i for i, s in enumerate(chain) if s.kind == "cache"]
    if not caches:
        return True
    return bool(expensive) and max(expensive) > max(caches)


def diagnose(
    stall_s: float | None,
    steps_per_epoch: int | None,
    share: float | None,
    chain: Sequence[PipelineStage],
    rebuilt: bool = False,
    made_s: float = 0.0,
) -> EpochStall | None:
    """The stall named with its cause and fix, or None below `STALL_SHARE_NAMED` (or
    where no epoch's length is known). `made_s`: the part of it before the first
    element was asked for."""
    if stall_s is None or not steps_per_epoch or share is None or share < STALL_SHARE_NAMED:
        return None
    # Mostly before the first element was asked for: the iterator's making is the cause,
    # unless a Python source or tf.distribute's own iterator has a fix of its own.
    made = made_s >= MADE_SHARE * stall_s > 0
    own = any(s.kind in ("generator", "distribute") for s in chain)
    if made and rebuilt:  # the dataset is built again before each iterator is made
        cause, summary, code, sites = _rebuilt()
    elif made and not own:
        cause, summary, code, sites = _new_iterator(made_s, steps_per_epoch)
    else:
        cause, summary, code, sites = _cause(chain, rebuilt)
    return EpochStall(
        stall_s=round(stall_s, 4),
        steps_per_epoch=steps_per_epoch,
        share=round(share, 4),
        cause=cause,
        summary=summary,
        code=code,
        sentence=_sentence(stall_s, steps_per_epoch, share, cause, summary),
        sites=sites,
    )


def _sentence(stall_s: float, steps: int, share: float, cause: str, summary: str) -> str:
    """The stall in one line, as the reports print it."""
    measured = OPTIMIZED_CAUSES.get(cause)
    tried = f"; tftune optimize measures this fix ({measured})" if measured else ""
    return (
        f"each epoch opens with a {stall_s:.2f} s stall ({share:.0%} of its "
        f"training time, {steps} steps an epoch): {summary}{tried}"
    )


def _new_iterator(made_s: float, steps: int) -> tuple[str, str, str | None, tuple[str, ...]]:
    return (
        NEW_ITERATOR,
        f"each epoch makes a new iterator, {made_s:.2f} s before its first batch is asked "
        "for (Keras fit and a for loop over a finite dataset each make one per epoch): "
        "repeat() the dataset "
        "and keep one iterator, with the epoch's length given",
        f"model.fit(train_ds.repeat(), steps_per_epoch={steps}, epochs=epochs, ...)\n"
        "# a custom loop: one iterator over the repeated dataset\n"
        f"it = iter(ds.repeat())\nfor epoch in range(epochs):\n    for step in range({steps}):\n"
        "        train_step(next(it))",
        (),
    )


def _cause(
    chain: Sequence[PipelineStage], rebuilt: bool
) -> tuple[str, str, str | None, tuple[str, ...]]:
    shuffle = _last(chain, "shuffle")
    cache = _last(chain, "cache", before=shuffle if shuffle is not None else len(chain))
    start = cache + 1 if cache is not None else 0
    if shuffle is not None:
        maps = [s for s in chain[start:shuffle] if s.kind in MAPPING_KINDS]
        if maps:
            where = chain[shuffle].site
            at = f" (line {_line(where)})" if where else ""
            python = " a Python function in" if any(m.python for m in maps) else ""
            return (
                SHUFFLE_BEHIND_MAP,
                f"the shuffle buffer{at} refills through{python} the map before each epoch's "
                "first element: shuffle what is cheap before the map, or cache() right "
                "after the map where it is deterministic",
                "ds = ds.shuffle(buffer_size)  # file names or indices: cheap to shuffle\n"
                "ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)\n"
                "# or, for a deterministic fn: ds.map(fn).cache().shuffle(buffer_size)",
                _sites([*maps, chain[shuffle]]),
            )
    if any(s.kind == "generator" for s in chain[start:]):
        return _python_source()
    if chain and chain[-1].kind == "distribute":
        return (
            DISTRIBUTED_ITERATOR,
            "each epoch makes a new iterator over the tf.distribute dataset, which starts "
            "every replica's pipeline again: make one iterator over a repeat()ed dataset "
            "and take an epoch's steps from it",
            "dist_ds = strategy.experimental_distribute_dataset(ds.repeat())\n"
            "it = iter(dist_ds)\nfor epoch in range(epochs):\n"
            "    for step in range(steps_per_epoch):\n        train_step(next(it))",
            (),
        )
    if rebuilt:
        return _rebuilt()
    maps = [s for s in chain[start:] if s.kind in MAPPING_KINDS]
    if cache is None and maps:
        return (
            NO_CACHE,
            "the pipeline restarts cold every epoch, its first batch waiting for the map: "
            "cache() after the deterministic part, and prefetch at the end",
            "ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE).cache()\n"
            "ds = ds.shuffle(buffer_size).batch(batch_size).prefetch(tf.data.AUTOTUNE)",
            _sites(maps),
        )
    return (
        UNEXPLAINED,
        "the pipeline's first element of each epoch waits; prefetch at the end and a "
        "cache() of what does not change between epochs shorten it",
        None,
        (),
    )


def _rebuilt() -> tuple[str, str, str | None, tuple[str, ...]]:
    return (
        REBUILT,
        "the dataset is built anew every epoch, so its functions are traced and its "
        "buffers filled again: build it once, repeat() it and keep one iterator",
        "ds = make_dataset().repeat()\nit = iter(ds)\nfor epoch in range(epochs):\n"
        "    for step in range(steps_per_epoch):\n        batch = next(it)",
        (),
    )


def _python_source() -> tuple[str, str, str | None, tuple[str, ...]]:
    return (
        PYTHON_SOURCE,
        "each epoch's first batch waits for a Python generator (a keras.utils.PyDataset, "
        "Sequence or from_generator) to make it, one item at a time: give the PyDataset "
        "workers so that batches are made ahead (threads for file reads and NumPy that "
        "release the GIL, use_multiprocessing=True for pure-Python work), or build the "
        "input with tf.data from the file list (a parallel map, cache(), prefetch)",
        "class Batches(keras.utils.PyDataset):\n"
        "    def __init__(self, files, batch_size, **kwargs):\n"
        "        super().__init__(workers=4, use_multiprocessing=False, max_queue_size=8, "
        "**kwargs)\n"
        "# or: ds = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files))\n"
        "#     ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)\n"
        "#     ds = ds.prefetch(tf.data.AUTOTUNE)",
        (),
    )


def _last(chain: Sequence[PipelineStage], kind: str, before: int | None = None) -> int | None:
    end = len(chain) if before is None else before
    found = [i for i, s in enumerate(chain[:end]) if s.kind == kind]
    return found[-1] if found else None


def _sites(stages: Sequence[PipelineStage]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s.site for s in stages if s.site))


def _line(site: str) -> str:
    return site.rsplit(":", 1)[-1]
