"""What the reports say for the JSON's machine words: evidence keys, device kinds and
timeline lanes, read as words. The JSON keeps its keys; only the pages and the terminal
read them this way."""

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


def device_label(device: str | None) -> str | None:
    """A device kind in words: ``CPU_ONLY`` → "CPU only"."""
    return None if device is None else _DEVICES.get(device, device.replace("_", " "))


def lane_label(name: str) -> str:
    """A timeline lane (a trace's thread or stream) in words."""
    if name == "python":
        return "the training loop (Python)"
    if m := _THREAD_POOL_RE.match(name):
        return f"tf.data thread pool (thread {m.group(1)})"
    if m := _ITERATOR_RE.match(name):
        return f"tf.data iterator (thread {m.group(1)})"
    if m := _STREAM_RE.match(name):
        return f"GPU stream {m.group(1)}: {_STREAM_KINDS.get(m.group(2), m.group(2))}"
    return name
