"""What each tf.data event of a host plane is: the names and kinds `probes.traces.stages` reads.

`index_plane(plane)` names each event metadata id's kind (iterator, function dispatch,
function execution, runner `Produce`, kernel, note) and the stage of each iterator id;
the helpers read stage names (instance indices removed), kernel types and knob values.
See `probes.traces.stages` for what the events mean. `probes.traces.stage_scan` walks the lines with
this index.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tftune.core.vocabulary import stage_parent
from tftune.probes.traces.trace import Plane

I64 = npt.NDArray[np.int64]

ITERATOR_PREFIX = "Iterator::"
FUNCTION_RUN = "FunctionRun"
# Dispatch of a tf.data function (map fn, filter predicate, generator, ...): these carry the
# `id` stat that the function's `ExecutorState::Process` events repeat.
CAPTURED_FUNCTION_PREFIX = "InstantiatedCapturedFunction::"
EXECUTOR_PROCESS = "ExecutorState::Process"
PRODUCE_SUFFIX = "Produce"
# `[N]` instance indices that repeat/interleave/flat_map add to a child's path.
_INSTANCE_RE = re.compile(r"\[\d+\]")
# A kernel's event: `node_name:OpType` (no spaces after the colon; `A::B` are annotations).
# oneDNN rewrites name their kernels with a leading underscore (`conv:_MklNativeFusedConv2D`).
_OP_EVENT_RE = re.compile(r"^[^:\s][^:]*:(_?[A-Za-z][A-Za-z0-9_]*)$")
# Python tracer events: `$file.py:42 function`.
PY_EVENT_RE = re.compile(r"^\$(?P<file>[^:]+\.py):(?P<line>\d+) (?P<fn>.+)$")
# A Python frame in a file whose path holds one of these is a library's, not the user's.
_LIBRARY_MARKERS = ("site-packages", "dist-packages", "/tensorflow/", "/keras/", "<frozen")
# Function names TF gives tf.data UDFs when it names them (`__inference_Dataset_map_fn_12`).
DATASET_FN_RE = re.compile(r"__inference_Dataset_(?:map|filter|flat_map|interleave)_(.+?)_\d+")
# Python UDF kernels: `tf.py_function` (EagerPyFunc), `tf.numpy_function` / legacy
# `tf.py_func` (PyFunc, PyFuncStateless). `from_generator` runs its generator through them.
PY_UDF_OPS = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless"})
# Stats that carry what AUTOTUNE (or the user) chose.
KNOBS_INT = (
    "parallelism",
    "buffer_limit",
    "batch_size",
    "threadpool_size",
    "cpu_budget",
    "ram_budget_megabytes",
    "cycle_length",
    "block_length",
)
KNOB_EVENTS = 8  # latest events per stage read for knobs

# Event kinds (0: not read).
K_ITER, K_FR, K_PROC, K_PRODUCE, K_OP, K_NOTE = 1, 2, 3, 4, 5, 6


def stage_name(event_name: str) -> str:
    """`Iterator::Root::Repeat[3]::TFRecord` -> `Iterator::Root::Repeat::TFRecord`."""
    return _INSTANCE_RE.sub("", event_name)


def is_function_dispatch(event_name: str) -> bool:
    return event_name == FUNCTION_RUN or event_name.startswith(CAPTURED_FUNCTION_PREFIX)


def op_type(event_name: str) -> str | None:
    """The kernel type of a `node:OpType` event, else None."""
    m = _OP_EVENT_RE.match(event_name)
    return m.group(1) if m else None


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, str)):
        text = value.decode() if isinstance(value, bytes) else value
        try:
            return int(text)
        except ValueError:
            return None
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (bytes, str)):
        text = (value.decode() if isinstance(value, bytes) else value).lower()
        if text in ("true", "1"):
            return True
        if text in ("false", "0"):
            return False
        return None
    if isinstance(value, int):
        return bool(value)
    return None


def knobs_of(stats: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs among one event's stats, as ints and bools."""
    out: dict[str, Any] = {}
    for k in KNOBS_INT:
        if k in stats:
            v = as_int(stats[k])
            if v is not None:
                out[k] = v
    if "autotune" in stats:
        out["autotune"] = _as_bool(stats["autotune"])
    if "deterministic" in stats:
        out["deterministic"] = _as_bool(stats["deterministic"])
    return out


# -- the plane's metadata ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class PlaneIndex:
    """What each event metadata id of the host plane is (`kind_of`, `stage_of`)."""

    names: Mapping[int, str]
    stat_id_keys: frozenset[int]  # stat metadata ids named `id`
    stat_id_array: I64  # the same, as an array
    op_types: Mapping[int, str]  # kernel metadata id -> op type
    udf_mids: I64  # metadata ids of Python UDF kernels
    stage_list: list[str]  # every stage, sorted; a stage's index is its position
    stage_ix: Mapping[str, int]
    parent_ix: I64  # per stage, its parent's index (-1: none known)
    kind_of: npt.NDArray[np.int8]  # per metadata id
    stage_of: I64  # per metadata id: the stage index of an iterator event (-1: none)
    max_mid: int


def index_plane(plane: Plane) -> PlaneIndex | None:
    """The plane's event kinds and stages; None when it has no tf.data iterator event."""
    iter_ids = plane.metadata_ids(lambda n: n.startswith(ITERATOR_PREFIX))
    if iter_ids.size == 0:
        return None
    names = plane.event_names
    fr_ids = set(plane.metadata_ids(is_function_dispatch).tolist())
    proc_ids = set(plane.metadata_ids(lambda n: n == EXECUTOR_PROCESS).tolist())
    produce_ids = set(plane.metadata_ids(lambda n: n.endswith(PRODUCE_SUFFIX)).tolist())
    op_types = {mid: t for mid, n in names.items() if (t := op_type(n)) is not None}
    py_ids = {mid for mid, n in names.items() if n.startswith("$")}
    iter_set = set(iter_ids.tolist())
    stage_of_mid = {mid: stage_name(names[mid]) for mid in iter_set}
    stage_list = sorted(set(stage_of_mid.values()))
    stage_ix = {n: i for i, n in enumerate(stage_list)}
    parent_ix = np.array(
        [stage_ix.get(stage_parent(n) or "", -1) for n in stage_list] or [-1], dtype=np.int64
    )
    max_mid = max(names) if names else 0
    stat_ids = [k for k, v in plane.stat_names.items() if v == "id"]
    kind_of = np.zeros(max_mid + 2, dtype=np.int8)
    stage_of = np.full(max_mid + 2, -1, dtype=np.int64)
    for mid in iter_set:
        kind_of[mid] = K_ITER
        stage_of[mid] = stage_ix[stage_of_mid[mid]]
    for ids, k in ((fr_ids, K_FR), (proc_ids, K_PROC), (produce_ids, K_PRODUCE)):
        for mid in ids:
            kind_of[mid] = k
    for mid in op_types:
        kind_of[mid] = K_OP
    for mid in py_ids | {m for m, n in names.items() if DATASET_FN_RE.search(n)}:
        kind_of[mid] = K_NOTE
    return PlaneIndex(
        names=names,
        stat_id_keys=frozenset(stat_ids),
        stat_id_array=np.array(sorted(stat_ids), dtype=np.int64),
        op_types=op_types,
        udf_mids=np.array([m for m, t in op_types.items() if t in PY_UDF_OPS], dtype=np.int64),
        stage_list=stage_list,
        stage_ix=stage_ix,
        parent_ix=parent_ix,
        kind_of=kind_of,
        stage_of=stage_of,
        max_mid=max_mid,
    )


def is_library_file(path: str) -> bool:
    """Whether a Python tracer frame's file is a library's (TensorFlow, Keras, an installed
    package, the interpreter's own), not the user's code."""
    return any(marker in path for marker in _LIBRARY_MARKERS)
