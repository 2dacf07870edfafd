"""Child side: what the script built, read from a dataset's lineage.

A dataset knows the datasets it was made from (``_inputs``). Walking them, source last,
tells what the script built: the last call site on the way (`describe`), whether it
batches, whether it is one of tf.distribute's per-device parts (`is_per_device`), and
the pipeline stage by stage (`pipeline_chain`: each stage's kind, the user's line where
the child saw the call, whether its function runs Python or draws random numbers anew
on each pass, and its elements per pass).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tftune.probes.live.epoch_stall import PipelineStage
from tftune.tuner.child.state import IterationInfo

_BATCHING_CLASSES = ("BatchDataset", "MapAndBatchDataset", "DenseToRaggedDataset")


def inputs_of(ds: Any) -> Sequence[Any]:
    try:
        return list(ds._inputs())
    except Exception:
        return []


def unwrap_options(ds: Any) -> Any:
    while type(ds).__name__ == "_OptionsDataset":
        inputs = inputs_of(ds)
        if not inputs:
            break
        ds = inputs[0]
    return ds


# tf.distribute's per-replica datasets (fed by a multi-device iterator), and a dataset
# passed into a tf.function as an argument: their lineage cannot be walked.
_PER_DEVICE_DATASETS = frozenset({"_PerDeviceGenerator", "_ReincarnatedPerDeviceGenerator"})
_OPAQUE_DATASETS = _PER_DEVICE_DATASETS | {"_VariantDataset"}


def is_per_device(ds: Any, depth: int = 0) -> bool:
    """A tf.distribute per-device dataset: its lineage reads from a multi-device iterator
    (`_create_device_dataset` puts a prefetch and options over the generator)."""
    if type(ds).__name__ in _PER_DEVICE_DATASETS:
        return True
    return depth < 16 and any(is_per_device(i, depth + 1) for i in inputs_of(ds))


# Stages whose elements come from datasets a function builds (not walkable): a flat_map or
# interleave before any batch, such as `from_generator` (Keras' PyDataset adapter).
_ELEMENTS_FROM_A_FUNCTION = ("FlatMap", "Interleave")


def is_batched(ds: Any, depth: int = 0) -> bool | None:
    """Whether the dataset's lineage batches (and does not unbatch after); None when the
    lineage is opaque (`_OPAQUE_DATASETS`, `_ELEMENTS_FROM_A_FUNCTION`)."""
    name = type(ds).__name__
    if "Unbatch" in name or depth > 64:
        return False
    if any(name.endswith(c) for c in _BATCHING_CLASSES):
        return True
    if name in _OPAQUE_DATASETS or any(k in name for k in _ELEMENTS_FROM_A_FUNCTION):
        return None
    answers = [is_batched(i, depth + 1) for i in inputs_of(ds)]
    if any(a is True for a in answers):
        return True
    return None if any(a is None for a in answers) else False


# Dataset classes by the kind of stage they are (the first match wins: ParallelMap
# before Map, FlatMap before Map).
_STAGE_KINDS = (
    ("FlatMap", "flat_map"),
    ("Interleave", "interleave"),
    ("MapAndBatch", "map"),
    ("Map", "map"),
    ("Shuffle", "shuffle"),
    ("Filter", "filter"),
    ("Cache", "cache"),
    ("PaddedBatch", "padded_batch"),
    ("Batch", "batch"),
    ("Prefetch", "prefetch"),
    ("Repeat", "repeat"),
)
_PYTHON_OPS = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless"})
# The file readers' dataset ops: a function that opens one reads files.
READER_OPS = frozenset(
    {
        "TFRecordDataset",
        "TFRecordDatasetV2",
        "TextLineDataset",
        "FixedLengthRecordDataset",
        "FixedLengthRecordDatasetV2",
    }
)


def pipeline_chain(ds: Any) -> tuple[PipelineStage, ...]:
    """The pipeline as the script built it, source first: each stage's kind, the user's
    line where the child saw the call, whether its function runs Python or draws random
    numbers anew on each pass (`random_op`), and its elements per pass."""
    stages: list[PipelineStage] = []
    current: Any = ds
    while current is not None and len(stages) < 64:
        name = type(current).__name__
        inputs = inputs_of(current)
        if name != "_OptionsDataset":
            kind = next((k for part, k in _STAGE_KINDS if part in name), None)
            kind = kind or ("source" if not inputs else "other")
            ops = _function_ops(current)
            if kind == "flat_map" and "GeneratorDataset" in ops:
                # from_generator (and Keras' adapter of a PyDataset or a generator) is a
                # flat_map whose function makes a Python generator's dataset.
                kind = "generator"
            site = getattr(current, "_tftune_site", None) or getattr(
                current, "_tftune_mark_site", None
            )
            python = kind == "generator" or bool(ops & _PYTHON_OPS)
            stage = PipelineStage(kind, site, python, random_op(ops), _elements(current))
            stages.append(replace(stage, reader=bool(ops & READER_OPS)))
        current = inputs[0] if inputs else None
    return tuple(reversed(stages))


def _function_ops(ds: Any) -> frozenset[str]:
    """The op types of a stage's function (a map's, a flat_map's, a filter's predicate),
    the functions it calls included; none without one."""
    fn = getattr(ds, "_map_func", None) or getattr(ds, "_predicate", None)
    try:
        graph_def = fn.function.graph.as_graph_def()  # type: ignore[union-attr]
    except Exception:
        return frozenset()
    ops = {node.op for node in graph_def.node}
    ops |= {node.op for f in graph_def.library.function for node in f.node_def}
    return frozenset(ops)


# Stateful random ops draw anew on every pass: `tf.random.uniform`, the `tf.image.random_*`
# family, `tf.random.Generator` (Rng*). A stateless random op is random across passes too
# where its seed is a variable the function advances (Keras' random layers).
_RANDOM_PREFIXES = ("Random", "Stateful", "Rng", "Multinomial", "TruncatedNormal")
_ADVANCES_STATE = frozenset({"AssignVariableOp", "AssignAddVariableOp"})


def random_op(ops: frozenset[str]) -> str | None:
    """The first random op of a function's ops that draws anew on every pass, or None."""
    calls = {"StatefulPartitionedCall"}
    found = sorted(o for o in ops if o.startswith(_RANDOM_PREFIXES) and o not in calls)
    if found:
        return found[0]
    stateless = sorted(o for o in ops if o.startswith("StatelessRandom"))
    if stateless and ops & _ADVANCES_STATE:
        return stateless[0]
    return None


def _elements(ds: Any) -> int | None:
    with contextlib.suppress(Exception):
        return int(ds.cardinality())
    return None


def describe(ds: Any, batched_default: bool = False) -> IterationInfo:
    """What the script built: its last call site, final prefetch, batching, options.

    `batched_default` answers for a lineage that cannot be walked (see `is_batched`)."""
    last = unwrap_options(ds)
    try:
        options = ds.options()
        threadpool = options.threading.private_threadpool_size
        deterministic = options.deterministic
    except Exception:
        threadpool, deterministic = None, None
    return IterationInfo(
        site=_lineage_site(ds),
        final_prefetch="Prefetch" in type(last).__name__,
        batched=batched if (batched := is_batched(ds)) is not None else batched_default,
        threadpool_size=threadpool or None,
        deterministic=deterministic,
    )


def _lineage_site(ds: Any, depth: int = 0) -> str | None:
    """The call site of the nearest transformation the user called on `ds`'s lineage:
    ``ds.repeat().take(n).enumerate()`` is built at its ``batch`` line."""
    site: str | None = getattr(ds, "_tftune_site", None)
    if site is not None or depth > 16:
        return site
    for parent in inputs_of(ds):
        found = _lineage_site(parent, depth + 1)
        if found is not None:
            return found
    return None
