"""What the reports say for the JSON's machine words: evidence keys and values, device
kinds, tf.data ops and timeline lanes, read as words. The JSON keeps its keys; only the
pages and the terminal read them this way."""

from __future__ import annotations

import re

# Evidence keys a plain "_" → " " would not make clear.
_EVIDENCE = {
    "stage_op": "tf.data op",
    "stage_self_ms": "stage's own time (ms)",
    "stage_wait_ms": "time waiting on its input (ms)",
    "category_ms": "time in this category (ms)",
    "bottleneck_stage": "the slowest stage",
    "udf_concurrency": "Python calls at once",
    "capped_by": "parallelism capped by",
    "top_ops_ms": "busiest kernels (ms)",
    "cores": "CPU cores",
    "autotune": "AUTOTUNE",
    "input_wait_share": "share of step time waiting for input",
    "distributed_input": "a tf.distribute dataset",
}
_DEVICES = {"CPU_ONLY": "CPU only", "GPU": "GPU", "TPU": "TPU"}
_THREAD_POOL_RE = re.compile(r"^tf_data_private_threadpool/(\d+)$")
_ITERATOR_RE = re.compile(r"^tf_data_iterator_resource/(\d+)$")
_STREAM_RE = re.compile(r"^Stream #(\d+)\((\w+)\)$")
_TF_COMPUTE_RE = re.compile(r"^tf_Compute/-?\d+$")
_FUSED_RE = re.compile(r"^fused\((.*)\)$")
_OP_ID_RE = re.compile(r":\d+$")
_STREAM_KINDS = {
    "MemcpyH2D": "copies host → device",
    "MemcpyD2H": "copies device → host",
    "MemcpyD2D": "copies device → device",
    "Compute": "kernels",
}


def evidence_label(key: str) -> str:
    """An evidence key in words: ``udf_concurrency`` → "Python calls at once"."""
    if key in _EVIDENCE:
        return _EVIDENCE[key]
    words = key[:-3] + " (ms)" if key.endswith("_ms") else key
    return words.replace("_", " ")


# What a trial's utilization was read from (`utilization_kind`), as the table heads it.
_UTILIZATION = {"nvml": "GPU utilization", "duty_cycle": "step duty cycle"}


def utilization_label(kind: str | None) -> str:
    """A utilization kind in words: ``duty_cycle`` → "step duty cycle"."""
    if kind is None:
        return "utilization"
    return _UTILIZATION.get(kind, kind.replace("_", " "))


def device_label(device: str | None) -> str | None:
    """A device kind in words: ``CPU_ONLY`` → "CPU only"."""
    return None if device is None else _DEVICES.get(device, device.replace("_", " "))


def evidence_value(key: str, value: object) -> str:
    """An evidence value in words: a mapping or a list of (name, figure) pairs as labelled
    figures (``{"EagerPyFunc": 93.0}`` → "EagerPyFunc 93"; the key's label names the unit),
    a list as a comma list, a flag as yes or no, a number to four figures."""
    if key == "stage_op" and isinstance(value, str):
        return op_label(value)
    if isinstance(value, dict):
        pairs: list[tuple[object, object]] = list(value.items())
    elif isinstance(value, (list, tuple)) and all(
        isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], str) for x in value
    ):
        pairs = [(x[0], x[1]) for x in value]
    elif isinstance(value, (list, tuple)):
        return ", ".join(evidence_value("", x) for x in value) if value else "none"
    else:
        return _scalar(value)
    if not pairs:
        return "none"
    return ", ".join(f"{k} {_scalar(v)}" for k, v in pairs)


def _scalar(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    return "not measured" if v is None else str(v)


def op_label(op: str) -> str:
    """A tf.data op in words, its graph ids left to the detail: ``ParallelMapDatasetV2:1``
    → "ParallelMapDatasetV2"; ``fused(MapDataset:2,BatchDatasetV2:3)`` → "MapDataset +
    BatchDatasetV2, fused by TensorFlow"."""
    if m := _FUSED_RE.match(op):
        parts = [_OP_ID_RE.sub("", p.strip()) for p in m.group(1).split(",") if p.strip()]
        return " + ".join(parts) + ", fused by TensorFlow"
    return _OP_ID_RE.sub("", op)


def lane_label(name: str) -> str:
    """A timeline lane (a trace's thread or stream) in words."""
    if name == "python":
        return "step thread (the training loop)"
    if m := _THREAD_POOL_RE.match(name):
        return f"tf.data worker {m.group(1)}"
    if m := _ITERATOR_RE.match(name):
        return f"tf.data iterator thread {m.group(1)}"
    if _TF_COMPUTE_RE.match(name):
        return "TensorFlow op thread"
    if m := _STREAM_RE.match(name):
        return f"GPU stream {m.group(1)}: {_STREAM_KINDS.get(m.group(2), m.group(2))}"
    return name
