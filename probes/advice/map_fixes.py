"""Fixes for a map stage's work (`probes.advice.recommendations` has the type): a Python
function (parallel calls, TF ops instead, a tokenizer, numpy_function), a CPU-heavy map
(parallelism, the threadpool, more CPUs), `cache()` after deterministic decode,
vectorizing short calls, a Keras PyDataset's workers.
"""

from __future__ import annotations

import re
from typing import Any

from tftune.core.units import PS_PER_MS
from tftune.probes.advice.ideas import (
    CACHE,
    MORE_CPUS,
    NUMPY_FUNCTION,
    PARALLEL_GENERATORS,
    PARALLEL_MAP,
    PY_DATASET_WORKERS,
    TF_OPS,
    THREADPOOL,
    VECTORIZE,
)
from tftune.probes.advice.recommendations import (
    Change,
    ChangeKind,
    Recommendation,
    one_at_a_time,
    runs_python,
)
from tftune.probes.traces.callsites import RecordedSite
from tftune.probes.traces.input_work import StageWork, ms
from tftune.probes.traces.stage_events import PY_UDF_OPS
from tftune.probes.traces.stages import Stage

# A map function call this short is dominated by per-element overhead: vectorize.
VECTORIZE_MAX_CALL_MS = 0.05


# Share of a category's work that must be deterministic decode/parse to suggest cache().
CACHEABLE_MIN_FRACTION = 0.3


# Deterministic decode/parse kernels whose output can be cached.
_CACHEABLE_OP_RE = re.compile(r"^(Decode.*|Parse.*|ParseExample.*|.*Resize.*|DecodeRaw)$")


# Kernels whose output changes from one epoch to the next: a map with one is not cached whole.
_RANDOM_OP_RE = re.compile(r"(Random|Shuffle|Dropout|Multinomial)", re.IGNORECASE)


def _cacheable_ops(st: Stage) -> list[tuple[str, int]]:
    """The kernels whose output cache() could keep: all of a map with nothing random (or
    Python) in it, else its decode/parse/resize kernels."""
    if st.ops_ps and not any(_RANDOM_OP_RE.search(op) or op in PY_UDF_OPS for op, _ in st.ops_ps):
        return list(st.ops_ps)
    return [(op, ps) for op, ps in st.ops_ps if _CACHEABLE_OP_RE.match(op)]


def py_dataset_rec(
    st: Stage, share: float, category: str, site: RecordedSite, cores: int | None
) -> Recommendation:
    """A Keras PyDataset read by Keras one batch at a time: its own knobs, not tf.data's
    (Keras feeds the batches to a `from_generator` pipeline; tf.data cannot parallelize
    them)."""
    workers = max(8, cores or 1)
    name = site.function or "your PyDataset"
    return Recommendation(
        kind=PY_DATASET_WORKERS,
        summary=(
            f"Keras fetches the batches of {name} one at a time from __getitem__: give it "
            f"workers (threads help while it waits on storage or in NumPy; add "
            f"use_multiprocessing=True when it computes in Python), or let tftune optimize "
            f"choose them"
        ),
        code=(
            f"super().__init__(workers={workers}, use_multiprocessing=True, "
            f"max_queue_size={2 * workers}, **kwargs)"
        ),
        gain=share * 0.8,
        category=category,
        stage=st.name,
        evidence={"py_dataset": name},
    )


def _numpy_function_rec(
    st: Stage, share: float, category: str, ev: dict[str, Any]
) -> list[Recommendation]:
    """`tf.py_function` (EagerPyFunc) wraps every argument and result in eager tensors:
    on 2 cores with 32 calls in flight it did ~1,300-2,400 calls/s where
    `tf.numpy_function` did ~4,400 (bench/cases/latency_io.py). Worth saying wherever a
    py_function is the bottleneck and the function needs NumPy values only."""
    if not any(op == "EagerPyFunc" for op, _ in st.ops_ps):
        return []
    return [
        Recommendation(
            kind=NUMPY_FUNCTION,
            summary=(
                "It calls tf.py_function, which wraps every argument and result in eager "
                "tensors; if the function only needs NumPy values, tf.numpy_function costs "
                "about half the CPU per call (and the function should not run TF ops itself)"
            ),
            code=(
                "def fn_np(x):  # gets and returns NumPy values, no eager tensors\n"
                "    ...\n"
                "ds = ds.map(lambda x: tf.numpy_function(fn_np, [x], tf.float32),\n"
                "            num_parallel_calls=tf.data.AUTOTUNE)"
            ),
            gain=share * 0.2,
            category=category,
            stage=st.name,
            evidence=ev,
        )
    ]


def map_recs(w: StageWork, share: float, cores: int | None, category: str) -> list[Recommendation]:
    """The fixes for a stage that runs a function (a map, a generator): by what the
    function does (waits, runs Python, tokenizes in Python, computes) and how parallel
    it already runs."""
    st = w.stage
    ev = _map_evidence(st, cores)
    if w.latency_bound:
        waits = _threadpool_rec(st, share, cores, category, ev)
        return [waits, *_numpy_function_rec(st, share, category, ev)]
    if category == "python" and "Generator" in st.kind:
        return [_generator_rec(st, share, category, ev)]
    if category == "python":
        return _python_recs(w, share, cores, category, ev)
    if category == "tokenization" and runs_python(st):
        return [_py_tokenizer_rec(st, share, category, ev)]
    return _cpu_map_recs(st, share, cores, category, ev)


def _map_evidence(st: Stage, cores: int | None) -> dict[str, Any]:
    return {
        "stage": st.name,
        "op": st.op,
        "parallelism": st.knob("parallelism"),
        "autotune": st.knob("autotune"),
        "threadpool_size": st.knob("threadpool_size"),
        "cores": cores,
        "capped_by": st.capped_by,
        "function_calls": st.function_calls,
        "function_ms": ms(st.function_ps),
        "wait_ms": ms(st.wait_ps) if st.wait_ps is not None else None,
    }


def _threadpool_rec(
    st: Stage,
    share: float,
    cores: int | None,
    category: str,
    ev: dict[str, Any],
    waits: str | None = None,
) -> Recommendation:
    """More calls in flight than AUTOTUNE allows, for a map that waits (storage, network):
    `waits` None where the trace shows it waits, else why it might."""
    pool = st.knob("threadpool_size")
    target = max(32, 4 * (pool or cores or 1))
    summary = (
        f"The map waits on storage/network, not CPU: raise the private threadpool together "
        f"with num_parallel_calls (AUTOTUNE stops at the threadpool size, {pool}); e.g. "
        f"{target} calls in flight"
    )
    return Recommendation(
        kind=THREADPOOL,
        change=Change(ChangeKind.THREADPOOL, target),
        summary=summary if waits is None else waits,
        code=(
            f"options = tf.data.Options()\n"
            f"options.threading.private_threadpool_size = {target}\n"
            f"ds = ds.map(fn, num_parallel_calls={target}).with_options(options)"
        ),
        gain=share * (0.9 if waits is None else 0.4),
        category=category,
        stage=st.name,
        evidence=ev,
    )


def _generator_rec(st: Stage, share: float, category: str, ev: dict[str, Any]) -> Recommendation:
    return Recommendation(
        kind=PARALLEL_GENERATORS,
        change=Change(ChangeKind.CYCLE_LENGTH, 4),
        summary=(
            "Dataset.from_generator runs your Python generator one element at a time "
            "under the GIL: produce the data with tf.data sources (from_tensor_slices, "
            "TFRecordDataset) and TF ops, or at least run several generators in "
            "parallel (a Keras PyDataset is read this way too: give it workers in its "
            "super().__init__; a profile from tftune profile names its line)"
        ),
        code=(
            "ds = tf.data.Dataset.range(4).interleave(\n"
            "    lambda i: tf.data.Dataset.from_generator(gen, output_signature=spec, "
            "args=(i,)),\n"
            "    cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE)"
        ),
        gain=share * 0.6,
        category=category,
        stage=st.name,
        evidence=ev,
    )


def _python_recs(
    w: StageWork, share: float, cores: int | None, category: str, ev: dict[str, Any]
) -> list[Recommendation]:
    """A map that runs Python under the GIL: rewrite it in TF ops; meanwhile more calls in
    flight, in case it waits."""
    st = w.stage
    par = st.knob("parallelism")
    recs: list[Recommendation] = []
    recs.append(
        Recommendation(
            kind=TF_OPS,
            summary=(
                "The map runs Python (py_function/numpy_function), which holds the GIL: "
                "rewrite it with TensorFlow ops so it can run in parallel, then map with "
                "num_parallel_calls=tf.data.AUTOTUNE"
            ),
            code="ds = ds.map(fn_in_tf_ops, num_parallel_calls=tf.data.AUTOTUNE)",
            gain=share * 0.8,
            category=category,
            stage=st.name,
            evidence=ev,
        )
    )
    if st.capped_by is not None and w.latency_bound is None:
        waits = (
            f"If this function waits on storage or the network, its parallelism is stuck at "
            f"the {st.capped_by.replace('_', ' ')} ({par}): raise the private threadpool "
            "together with num_parallel_calls"
        )
        recs.append(_threadpool_rec(st, share, cores, category, ev, waits))
    if one_at_a_time(st):
        recs.append(
            Recommendation(
                kind=PARALLEL_MAP,
                change=Change(ChangeKind.PARALLEL_CALLS),
                summary=(
                    "Until then, run the Python UDF in parallel: it helps only while the "
                    "function releases the GIL (I/O, NumPy)"
                ),
                code="ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)",
                gain=share * 0.3,
                category=category,
                stage=st.name,
                evidence=ev,
            )
        )
    return recs + _numpy_function_rec(st, share, category, ev)


def _py_tokenizer_rec(st: Stage, share: float, category: str, ev: dict[str, Any]) -> Recommendation:
    return Recommendation(
        kind=TF_OPS,
        summary=(
            "Tokenization runs in a Python tokenizer (GIL-bound): use TF text ops "
            "(tf.strings / tensorflow_text) and a parallel map"
        ),
        code=(
            "tokenizer = tensorflow_text.WhitespaceTokenizer()  # or tf.strings.split\n"
            "ds = ds.map(lambda s: tokenizer.tokenize(tf.strings.lower(s)),\n"
            "            num_parallel_calls=tf.data.AUTOTUNE)"
        ),
        gain=share * 0.8,
        category=category,
        stage=st.name,
        evidence=ev,
    )


def _cpu_map_recs(
    st: Stage, share: float, cores: int | None, category: str, ev: dict[str, Any]
) -> list[Recommendation]:
    """A map that computes: run it on every core, or say that it already does."""
    par = st.knob("parallelism")
    recs: list[Recommendation] = []
    if one_at_a_time(st):
        n = cores or 1
        how = f"parallelism {par}" if isinstance(par, int) else "a synchronous map"
        recs.append(
            Recommendation(
                kind=PARALLEL_MAP,
                change=Change(ChangeKind.PARALLEL_CALLS),
                summary=(
                    f"The map runs one element at a time ({how}): let tf.data run "
                    f"it on all {n} cores"
                ),
                code="ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)",
                gain=share * (1 - 1 / max(n, 1)) if n > 1 else share * 0.1,
                category=category,
                stage=st.name,
                evidence=ev,
            )
        )
    elif st.capped_by is not None:
        recs.append(
            Recommendation(
                kind=MORE_CPUS,
                summary=(
                    f"Parallelism is already at the {st.capped_by.replace('_', ' ')} "
                    f"({par}) and the CPU work still blocks the step: do less per element "
                    "(cache, vectorize), move the work offline, or give the pipeline more "
                    "CPUs with the tf.data service"
                ),
                # Not the parallelism again (it is in place): more CPUs, on service workers.
                code=(
                    "ds = ds.apply(tf.data.experimental.service.distribute(\n"
                    '    processing_mode="distributed_epoch", service="grpc://DISPATCHER:5050"))'
                ),
                gain=share * 0.05,
                category=category,
                stage=st.name,
                evidence=ev,
            )
        )
    return recs


def cache_rec(w: StageWork, share: float) -> Recommendation | None:
    st = w.stage
    found = _cacheable_ops(st)
    cacheable = sum(ps for _, ps in found)
    if not st.function_ps or cacheable < CACHEABLE_MIN_FRACTION * st.function_ps:
        return None
    frac = min(1.0, cacheable / st.function_ps)
    ops = sorted({op for op, _ in found[:4]})
    return Recommendation(
        kind=CACHE,
        change=Change(ChangeKind.CACHE),
        summary=(
            f"{round(100 * frac)}% of the map is deterministic work ({', '.join(ops)}): "
            "decode once, cache(), and keep only the random augmentation after the cache"
        ),
        code=(
            "ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE).cache()\n"
            "ds = ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE)"
        ),
        gain=share * frac * 0.9,
        category="preprocessing",
        stage=st.name,
        evidence={"cacheable_ms": ms(cacheable), "function_ms": ms(st.function_ps)},
    )


def vectorize_rec(w: StageWork, share: float) -> Recommendation | None:
    st = w.stage
    if st.function_calls == 0 or (st.kind == "MapAndBatch" and st.knob("batch_size") is None):
        return None
    per_call_ms = st.function_ps / st.function_calls / PS_PER_MS
    if per_call_ms > VECTORIZE_MAX_CALL_MS or runs_python(st):
        return None
    return Recommendation(
        kind=VECTORIZE,
        summary=(
            f"Each map call does little work ({per_call_ms * 1000:.0f} µs over "
            f"{st.function_calls} calls): batch first, then map the function over whole batches"
        ),
        code=(
            "ds = ds.batch(batch_size).map(lambda records: tf.io.parse_example(records, spec),\n"
            "                              num_parallel_calls=tf.data.AUTOTUNE)"
            if any(op.startswith("ParseExample") for op, _ in st.ops_ps)
            else "ds = ds.batch(batch_size).map(fn_on_batch, num_parallel_calls=tf.data.AUTOTUNE)"
        ),
        gain=share * 0.5,
        category=(w.by_category and max(w.by_category, key=lambda k: w.by_category[k])) or "other",
        stage=st.name,
        evidence={"per_call_ms": round(per_call_ms, 4), "calls": st.function_calls},
    )
