"""Findings: what the input time is spent on, which stage and line, and what to change.

Small, pure finders over the frozen stage tree and step breakdown. Each returns typed
values; `probes.analysis` turns them into the JSON contract.

How input time is split into categories. The consumer's input wait (from the step
breakdown) is time the step spent blocked on tf.data; what it waited *for* is the work of
the stages that block it (`Stage.blocking`). That work is classified from what the events
mean:

* `io`: file-reading sources (TFRecord, TextLine, FixedLengthRecord, ... any source
  stage whose kind names records, files, lines or readers), read kernels (`ReadFile`,
  `*Reader*`) inside map functions, and Python UDFs that are latency-bound: more of them
  run at once than there are cores, which CPU-bound (let alone GIL-bound) work cannot do,
  or the Python tracer shows them blocked in sleep/read/recv calls.
* `tokenization`: string and text kernels (`String*`, regex, unicode, n-grams, lookup
  tables, tensorflow_text / SentencePiece / WordPiece ops), and Python tokenizers when
  the Python tracer shows them inside the UDF.
* `python`: `EagerPyFunc` / `PyFunc` kernels (py_function, numpy_function,
  from_generator): GIL-bound work.
* `preprocessing`: every other kernel in a map function (decode, resize, parse, augment),
  and function time whose kernels the tracer did not record individually.
* Glue kernels (concat, slicing, casts, ragged bookkeeping) take the category of the
  function they serve: a tokenizer's `ConcatV2` is tokenization.
* Stage overhead outside functions (batching, shuffling, iterator bookkeeping) is `other`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tftune.probes.callsites import PY_DATASET_CALLS, RecordedSite, site_for_stage
from tftune.probes.stages import PY_UDF_OPS, Stage, StageTree

# XProf's input-bound bands (input share of step time).
HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05
# Report a category as a bottleneck from this share of step time on.
MIN_BOTTLENECK_SHARE = 0.02
# Compute dominates the step from this share on (mixed-precision advice).
COMPUTE_BOUND_SHARE = 0.5
# Host-to-device copies worth acting on.
H2D_SHARE = 0.05
# Python UDFs running at once beyond the cores, by this factor, cannot be CPU work.
LATENCY_CONCURRENCY_OVER_CORES = 1.25
# Fraction of a UDF's time in blocking calls (Python tracer) that makes it io.
LATENCY_BLOCKED_FRACTION = 0.5
# A map function call this short is dominated by per-element overhead: vectorize.
VECTORIZE_MAX_CALL_MS = 0.05
# Share of a category's work that must be deterministic decode/parse to suggest cache().
CACHEABLE_MIN_FRACTION = 0.3
PS_PER_MS = 1e9

INPUT_CATEGORIES = ("io", "tokenization", "python", "preprocessing", "other")

_IO_SOURCE_RE = re.compile(
    r"(Record|TextLine|FixedLength|File|Reader|Csv|CSV|Sql|Parquet|ArrayRecord|SSTable|"
    r"Tfds|LMDB|Lmdb|DataService|Snapshot|LoadDataset|Load)",
)
_IO_OP_RE = re.compile(r"^(ReadFile|MatchingFiles|.*Reader.*|.*RecordRead.*|Gcs.*|S3.*)$")
_TOKENIZATION_OP_RE = re.compile(
    r"(String|Regex|Unicode|Substr|Tokeni[sz]e|Wordpiece|WordPiece|Sentencepiece|"
    r"SentencePiece|Ngram|NGram|LookupTable|HashTable|CaseFold|NormalizeUTF8|"
    r"BertNormalize|ToHashBucket|AsString|ReduceJoin|Base64|Utf8|UTF8)"
)
# Kernels that move and reshape data for whatever function they are in.
_GLUE_OP_RE = re.compile(
    r"^(ConcatV2|Concat|StridedSlice|Slice|Cast|Pack|Unpack|Reshape|Squeeze|ExpandDims|"
    r"Identity|Shape|ShapeN|Size|Rank|Fill|Range|Max|Min|Sum|Prod|Cumsum|Greater|Less|"
    r"Equal|NotEqual|GreaterEqual|LessEqual|Select|SelectV2|Where|GatherV2|Gather|"
    r"DenseBincount|Bincount|Add|AddV2|Sub|Mul|FloorMod|FloorDiv|Maximum|Minimum|Tile|"
    r"Pad|PadV2|ZerosLike|OnesLike|Transpose|OneHot|BroadcastTo|Assert|NoOp|Const|"
    r"ConcatOffset|Split|SplitV|.*Ragged.*|TensorList.*)$"
)
# Deterministic decode/parse kernels whose output can be cached.
_CACHEABLE_OP_RE = re.compile(r"^(Decode.*|Parse.*|ParseExample.*|.*Resize.*|DecodeRaw)$")
# Python-tracer frames of blocking waits and of tokenizers.
_PY_BLOCKING_RE = re.compile(
    r"(sleep|\bread\b|readinto|recv|urlopen|select|poll|wait|acquire|connect|getaddrinfo|"
    r"request|download|fetch|\bget\b|\bopen\b)",
    re.IGNORECASE,
)
_PY_TOKENIZER_RE = re.compile(
    r"(tokeni[sz]|wordpiece|sentencepiece|bpe|encode|\bsplit\b|\blower\b|re\.sub|"
    r"\bsub\b|findall|normaliz)",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Verdict:
    input_bound: bool | None
    level: str | None  # "high" | "moderate" | "low"; None: not measured
    input_share: float | None
    device_compute_share: float | None
    host_compute_share: float | None
    sentence: str


@dataclass(frozen=True, slots=True)
class StageWork:
    """One blocking stage's work, split by category (picoseconds)."""

    stage: Stage
    by_category: Mapping[str, int]
    latency_bound: bool | None
    evidence: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Recommendation:
    summary: str
    code: str
    gain: float  # expected fraction of step time saved (a ranking estimate, not a promise)
    category: str
    stage: str | None
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Bottleneck:
    category: str
    share: float
    stage: str | None
    call_site: str | None
    functions: tuple[str, ...]
    evidence: Mapping[str, Any]
    recommendation: Recommendation | None


# -- verdict ----------------------------------------------------------------------------


def verdict(
    input_share: float | None,
    fractions: Mapping[str, float | None],
    device: str,
) -> Verdict:
    dev = fractions.get("device_compute")
    host = fractions.get("host_compute")
    if input_share is None:
        return Verdict(
            None, None, None, dev, host, "No steps were found, so the input share is not measured."
        )
    pct = round(100 * input_share)
    if input_share >= HIGHLY_INPUT_BOUND:
        level, bound = "high", True
        head = f"Highly input-bound: {pct}% of step time is spent waiting for input"
    elif input_share >= MODERATELY_INPUT_BOUND:
        level, bound = "moderate", True
        head = f"Moderately input-bound: {pct}% of step time is spent waiting for input"
    else:
        level, bound = "low", False
        head = f"Not input-bound: only {pct}% of step time is spent waiting for input"
    compute = dev if device == "GPU" else host
    what = "device compute" if device == "GPU" else "host compute"
    tail = f"; {what} takes {round(100 * (compute or 0.0))}%." if compute is not None else "."
    return Verdict(bound, level, input_share, dev, host, head + tail)


# -- categories -------------------------------------------------------------------------


def _op_category(op: str) -> str:
    if op in PY_UDF_OPS:
        return "python"
    if _IO_OP_RE.match(op) and not op.startswith("ReadVariable"):
        return "io"
    if _TOKENIZATION_OP_RE.search(op):
        return "tokenization"
    if _GLUE_OP_RE.match(op):
        return "glue"
    return "preprocessing"


def is_io_source(stage: Stage) -> bool:
    return stage.function_calls == 0 and bool(_IO_SOURCE_RE.search(stage.kind))


def _latency_evidence(stage: Stage, cores: int | None) -> tuple[bool | None, dict[str, Any]]:
    """Whether the stage's Python UDFs wait (io) rather than compute, and why we think so."""
    ev: dict[str, Any] = {}
    py_ps = sum(ps for op, ps in stage.ops_ps if op in PY_UDF_OPS)
    if not py_ps:
        return None, ev
    if stage.python_frames:
        blocked = [f for f in stage.python_frames if _PY_BLOCKING_RE.search(f)]
        ev["python_frames"] = list(stage.python_frames[:5])
        if blocked:
            ev["blocking_calls"] = blocked[:3]
            return True, ev
    conc = stage.udf_concurrency
    ev["udf_concurrency"] = conc
    ev["cores"] = cores
    if conc is not None and cores is not None and conc > cores * LATENCY_CONCURRENCY_OVER_CORES:
        ev["reason"] = (
            f"{conc:.1f} Python UDF calls ran at once on {cores} cores: they wait "
            "(storage, network, sleep) rather than compute"
        )
        return True, ev
    if conc is not None and conc > 1.0 and cores is not None:
        ev["reason"] = (
            f"{conc:.1f} calls ran at once on {cores} cores: as consistent with CPU work "
            "(GIL-bound) as with waiting; more calls in flight than cores would tell"
        )
        return None, ev
    ev["reason"] = (
        "cannot tell waiting from computing inside the UDF from this trace "
        "(run more calls in parallel, or profile with the Python tracer)"
    )
    return None, ev


_ID_TYPES = frozenset({"int32", "int64"})


def turns_text_into_ids(stage: Stage, inputs: Sequence[Stage]) -> bool:
    """Strings in, integer ids out: what a tokenizer does, whatever language it is in."""
    in_types = {t for s in inputs for t in (s.types or "").split()}
    out_types = set((stage.types or "").split())
    return "string" in in_types and bool(out_types) and out_types <= _ID_TYPES


def stage_work(stage: Stage, cores: int | None, inputs: Sequence[Stage] = ()) -> StageWork:
    cats: dict[str, int] = defaultdict(int)
    latency, ev = _latency_evidence(stage, cores)
    tokenizer = turns_text_into_ids(stage, inputs)
    if tokenizer:
        ev["text_to_ids"] = True
    if is_io_source(stage):
        cats["io"] += stage.work_ps
        return StageWork(stage, dict(cats), None, {"source": stage.kind})
    op_total = sum(ps for _, ps in stage.ops_ps)
    specific: dict[str, int] = defaultdict(int)
    glue = 0
    for op, ps in stage.ops_ps:
        c = _op_category(op)
        if c == "python":
            if latency:
                c = "io"
            elif tokenizer or any(_PY_TOKENIZER_RE.search(f) for f in stage.python_frames):
                c = "tokenization"
        if c == "glue":
            glue += ps
        else:
            specific[c] += ps
    if specific:
        dominant = max(specific, key=lambda k: specific[k])
        specific[dominant] += glue
    elif glue:
        specific["preprocessing"] += glue
    untraced = max(0, stage.function_ps - op_total)
    if untraced:
        if specific:
            tot = sum(specific.values())
            for c, ps in list(specific.items()):
                specific[c] += int(untraced * ps / tot)
        else:
            specific["preprocessing"] += untraced
    for c, ps in specific.items():
        cats[c] += ps
    overhead = max(0, stage.work_ps - stage.function_ps)
    if overhead:
        cats["other"] += overhead
    ev = dict(ev)
    if stage.ops_ps:
        ev["top_ops_ms"] = {op: round(ps / PS_PER_MS, 3) for op, ps in stage.ops_ps[:5]}
    return StageWork(stage, dict(cats), latency, ev)


def input_split(tree: StageTree) -> list[StageWork]:
    """The blocking stages' work, by category (what the consumer's wait was for)."""
    cores = tree.root_knobs.get("cpu_budget")
    out = []
    for st in tree.stages:
        if not st.blocking or st.parent is None:
            continue
        w = stage_work(st, cores if isinstance(cores, int) else None, tree.children(st.name))
        if sum(w.by_category.values()) > 0:
            out.append(w)
    return out


# -- call sites -------------------------------------------------------------------------

_FRAME_RE = re.compile(r"^\$(?P<file>[^:]+\.py):(?P<line>\d+) ")
_LIBRARY_MARKERS = ("site-packages", "dist-packages", "/tensorflow/", "/keras/", "<frozen")


def call_site(stage: Stage) -> str | None:
    """`file:line` of the user's code the stage runs, when the Python tracer shows it."""
    for frame in stage.python_frames:
        m = _FRAME_RE.match(frame)
        if m and not any(k in m.group("file") for k in _LIBRARY_MARKERS):
            return f"{m.group('file').rsplit('/', 1)[-1]}:{m.group('line')}"
    return None


def functions_of(stage: Stage) -> tuple[str, ...]:
    if stage.function_names:
        return stage.function_names
    nodes = tuple(n for n in stage.op_nodes if n not in PY_UDF_OPS)
    if stage.python_frames:
        return tuple(stage.python_frames[:3])
    py_ops = sorted({op for op, _ in stage.ops_ps if op in PY_UDF_OPS})
    if py_ops:
        return (f"Python UDF ({', '.join(py_ops)})", *nodes[:4])
    if nodes:
        return nodes[:5]
    # The tracer recorded no kernel inside: name the dataset op the stage runs instead.
    return (stage.op,) if stage.op else ()


def _py_dataset_rec(
    st: Stage, share: float, category: str, site: RecordedSite, cores: int | None
) -> Recommendation:
    """A Keras PyDataset read by Keras one batch at a time: its own knobs, not tf.data's
    (Keras feeds the batches to a `from_generator` pipeline; tf.data cannot parallelize
    them)."""
    workers = max(8, cores or 1)
    name = site.function or "your PyDataset"
    return Recommendation(
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


def _at_site(r: Recommendation, site: str, function: str | None) -> Recommendation:
    """`r` tied to the user's line: its code says where, and calls their function by name."""
    code = r.code
    if function:
        code = code.replace("(fn,", f"({function},")
        code = code.replace("(fn_in_tf_ops,", f"({function}_in_tf_ops,")
    return replace(r, code=f"# {site}\n{code}", evidence={**r.evidence, "call_site": site})


# -- recommendations --------------------------------------------------------------------


def _ms(ps: int) -> float:
    return round(ps / PS_PER_MS, 3)


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


def _parallel_map_recs(
    w: StageWork, share: float, cores: int | None, category: str
) -> list[Recommendation]:
    st = w.stage
    par = st.knob("parallelism")
    pool = st.knob("threadpool_size")
    ev: dict[str, Any] = {
        "stage": st.name,
        "op": st.op,
        "parallelism": par,
        "autotune": st.knob("autotune"),
        "threadpool_size": pool,
        "cores": cores,
        "capped_by": st.capped_by,
        "function_calls": st.function_calls,
        "function_ms": _ms(st.function_ps),
        "wait_ms": _ms(st.wait_ps) if st.wait_ps is not None else None,
    }
    recs = []
    if w.latency_bound:
        target = max(32, 4 * (pool or cores or 1))
        recs.append(
            Recommendation(
                summary=(
                    f"The map waits on storage/network, not CPU: raise the private threadpool "
                    f"together with num_parallel_calls (AUTOTUNE stops at the threadpool size, "
                    f"{pool}); e.g. {target} calls in flight"
                ),
                code=(
                    f"options = tf.data.Options()\n"
                    f"options.threading.private_threadpool_size = {target}\n"
                    f"ds = ds.map(fn, num_parallel_calls={target}).with_options(options)"
                ),
                gain=share * 0.9,
                category=category,
                stage=st.name,
                evidence=ev,
            )
        )
        return recs + _numpy_function_rec(st, share, category, ev)
    if category == "python" and "Generator" in st.kind:
        recs.append(
            Recommendation(
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
        )
        return recs
    if category == "python":
        recs.append(
            Recommendation(
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
            target = max(32, 4 * (pool or cores or 1))
            recs.append(
                Recommendation(
                    summary=(
                        f"If this function waits on storage or the network, its parallelism is "
                        f"stuck at the {st.capped_by.replace('_', ' ')} ({par}): raise the "
                        "private threadpool together with num_parallel_calls"
                    ),
                    code=(
                        f"options = tf.data.Options()\n"
                        f"options.threading.private_threadpool_size = {target}\n"
                        f"ds = ds.map(fn, num_parallel_calls={target}).with_options(options)"
                    ),
                    gain=share * 0.4,
                    category=category,
                    stage=st.name,
                    evidence=ev,
                )
            )
        if not isinstance(par, int) or par <= 1:
            recs.append(
                Recommendation(
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
    if category == "tokenization" and any(op in PY_UDF_OPS for op, _ in st.ops_ps):
        recs.append(
            Recommendation(
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
        )
        return recs
    if not isinstance(par, int) or par <= 1:
        n = cores or 1
        how = f"parallelism {par}" if isinstance(par, int) else "a synchronous map"
        recs.append(
            Recommendation(
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
                summary=(
                    f"Parallelism is already at the {st.capped_by.replace('_', ' ')} "
                    f"({par}) and the CPU work still blocks the step: do less per element "
                    "(cache, vectorize) or move the work offline"
                ),
                code="ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)  # already at cap",
                gain=share * 0.05,
                category=category,
                stage=st.name,
                evidence=ev,
            )
        )
    return recs


def _cache_rec(w: StageWork, share: float) -> Recommendation | None:
    st = w.stage
    cacheable = sum(ps for op, ps in st.ops_ps if _CACHEABLE_OP_RE.match(op))
    if not st.function_ps or cacheable < CACHEABLE_MIN_FRACTION * st.function_ps:
        return None
    frac = cacheable / st.function_ps
    ops = sorted({op for op, _ in st.ops_ps if _CACHEABLE_OP_RE.match(op)})
    return Recommendation(
        summary=(
            f"{round(100 * frac)}% of the map is deterministic decoding ({', '.join(ops)}): "
            "decode once, cache(), and keep only the random augmentation after the cache"
        ),
        code=(
            "ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE).cache()\n"
            "ds = ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE)"
        ),
        gain=share * frac * 0.9,
        category="preprocessing",
        stage=st.name,
        evidence={"cacheable_ms": _ms(cacheable), "function_ms": _ms(st.function_ps)},
    )


def _vectorize_rec(w: StageWork, share: float) -> Recommendation | None:
    st = w.stage
    if st.function_calls == 0 or (st.kind == "MapAndBatch" and st.knob("batch_size") is None):
        return None
    per_call_ms = st.function_ps / st.function_calls / PS_PER_MS
    if per_call_ms > VECTORIZE_MAX_CALL_MS or any(op in PY_UDF_OPS for op, _ in st.ops_ps):
        return None
    return Recommendation(
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


def _io_rec(w: StageWork, share: float, tree: StageTree) -> Recommendation | None:
    st = w.stage
    if not is_io_source(st):
        return None
    under_interleave = any("Interleave" in part for part in st.name.split("::"))
    if under_interleave:
        return None
    return Recommendation(
        summary=(
            f"Files are read one at a time ({st.kind}, {_ms(st.self_ps)} ms reading): shard the "
            "data and read several files at once"
        ),
        code=(
            'files = tf.data.Dataset.list_files("data-*.tfrecord", shuffle=True)\n'
            "ds = files.interleave(tf.data.TFRecordDataset, cycle_length=8,\n"
            "                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)"
        ),
        gain=share * 0.8,
        category="io",
        stage=st.name,
        evidence={"source": st.kind, "op": st.op, "read_ms": _ms(st.self_ps), "calls": st.calls},
    )


def _prefetch_rec(tree: StageTree, input_share: float, host_share: float) -> Recommendation | None:
    root = tree.root
    top = tree.children(root.name) if root is not None else ()
    if not top or top[0].kind == "Prefetch":
        return None
    return Recommendation(
        summary=(
            f"The pipeline does not end in prefetch (top stage: {top[0].kind}): the next batch is "
            "only prepared while the step waits"
        ),
        code="ds = ds.prefetch(tf.data.AUTOTUNE)",
        gain=min(input_share, max(host_share, 0.0)),
        category="other",
        stage=top[0].name,
        evidence={"top_stage": top[0].name},
    )


MARKER_FIX = (
    "for step, batch in enumerate(ds):\n"
    '    with tf.profiler.experimental.Trace("train", step_num=step, _r=1):\n'
    "        train_step(batch)"
)


def marker_rec(detection: str) -> Recommendation | None:
    if detection == "markers":
        return None
    return Recommendation(
        summary=(
            "The trace has no step markers, so steps were "
            + ("inferred" if detection.startswith("inferred") else "not found")
            + ": wrap your step in a Trace marker (or run `tftune profile train.py`)"
        ),
        code=MARKER_FIX,
        gain=0.0,
        category="other",
        stage=None,
        evidence={"step_detection": detection},
    )


def compute_rec(device: str, share: float) -> Recommendation:
    if device == "GPU":
        policy, note = "mixed_float16", "float16 on the GPU's tensor cores"
    else:
        policy, note = (
            "mixed_bfloat16",
            "bfloat16 on CPUs with AVX512-BF16/AMX; float16 is slower on CPUs, measure first",
        )
    return Recommendation(
        summary=f"The step is compute-bound: try mixed precision ({note}), float32 output layer",
        code=(
            f'keras.mixed_precision.set_global_policy("{policy}")\n'
            "# keep the last layer in float32 for a stable loss:\n"
            'outputs = keras.layers.Activation("linear", dtype="float32")(logits)'
        ),
        gain=share * 0.3,
        category="device_compute" if device == "GPU" else "host_compute",
        stage=None,
        evidence={"compute_share": round(share, 4), "device": device},
    )


def h2d_rec(share: float) -> Recommendation:
    return Recommendation(
        summary=(
            "Host-to-device copies take a real share of the step: overlap them with compute "
            "and copy fewer, larger buffers"
        ),
        code=(
            "ds = ds.apply(tf.data.experimental.prefetch_to_device('/gpu:0', buffer_size=2))\n"
            "# and: larger batches, uint8 images cast to float on the GPU"
        ),
        gain=share * 0.7,
        category="host_to_device",
        stage=None,
        evidence={"host_to_device_share": round(share, 4)},
    )


# -- putting it together ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Findings:
    verdict: Verdict
    bottlenecks: tuple[Bottleneck, ...]
    recommendations: tuple[Recommendation, ...]
    category_shares: Mapping[str, float]
    notes: tuple[str, ...]


def find(
    tree: StageTree,
    input_wait_share: float | None,
    input_share: float | None,
    fractions: Mapping[str, float | None],
    device: str,
    detection: str,
    compute_functions: Sequence[str] = (),
    sites: Sequence[RecordedSite] = (),
) -> Findings:
    """All findings for one host: verdict, ranked bottlenecks, ranked recommendations.
    `sites`: the call sites `tftune profile` recorded beside the trace (they name the
    line of a stage the Python tracer did not see)."""
    v = verdict(input_share, fractions, device)
    cores_v = tree.root_knobs.get("cpu_budget")
    cores = cores_v if isinstance(cores_v, int) else None
    works = input_split(tree)
    total_work = sum(sum(w.by_category.values()) for w in works)
    wait = input_wait_share if input_wait_share is not None else None
    cat_share: dict[str, float] = defaultdict(float)
    stage_share: dict[tuple[str, str], float] = defaultdict(float)
    if wait is not None and total_work > 0:
        for w in works:
            for c, ps in w.by_category.items():
                s = wait * ps / total_work
                cat_share[c] += s
                stage_share[(c, w.stage.name)] += s
    recs: list[Recommendation] = []
    bottlenecks: list[Bottleneck] = []
    host_share = fractions.get("host_compute") or 0.0
    for c in INPUT_CATEGORIES:
        share = cat_share.get(c, 0.0)
        if share < MIN_BOTTLENECK_SHARE or c == "other":
            continue
        stage_name, _ = max(
            ((n, s) for (cc, n), s in stage_share.items() if cc == c), key=lambda t: t[1]
        )
        w = next(x for x in works if x.stage.name == stage_name)
        c_recs: list[Recommendation] = []
        io = _io_rec(w, share, tree) if c == "io" else None
        if io is not None:
            c_recs.append(io)
        if w.stage.function_calls:
            c_recs.extend(_parallel_map_recs(w, share, cores, c))
            for r in (_cache_rec(w, share), _vectorize_rec(w, share)):
                if r is not None and (r.category == c or c == "preprocessing"):
                    c_recs.append(r)
        c_recs.sort(key=lambda r: -r.gain)
        where = call_site(w.stage)
        functions = functions_of(w.stage)
        recorded = site_for_stage(w.stage, tree.stages, sites) if where is None else None
        if recorded is not None:
            where = recorded.site
            if recorded.function and recorded.function not in functions:
                functions = (recorded.function, *functions)  # the UDF's own name first
        if recorded is not None and recorded.op in PY_DATASET_CALLS:
            c_recs = [_py_dataset_rec(w.stage, share, c, recorded, cores)]
        if where is not None:
            c_recs = [_at_site(r, where, recorded.function if recorded else None) for r in c_recs]
        recs.extend(c_recs)
        evidence: dict[str, Any] = {
            "stage_op": w.stage.op,
            "stage_self_ms": _ms(w.stage.self_ps),
            "stage_wait_ms": _ms(w.stage.wait_ps) if w.stage.wait_ps is not None else None,
            "category_ms": _ms(w.by_category.get(c, 0)),
            "parallelism": w.stage.knob("parallelism"),
            "autotune": w.stage.knob("autotune"),
            "capped_by": w.stage.capped_by,
            "bottleneck_stage": w.stage.bottleneck,
            **w.evidence,
        }
        if c == "io" and w.latency_bound:
            evidence["latency_bound"] = True
        if recorded is not None:
            evidence["call_site_from"] = "the call sites tftune profile recorded"
        bottlenecks.append(
            Bottleneck(
                category=c,
                share=round(share, 4),
                stage=w.stage.name,
                call_site=where,
                functions=functions,
                evidence=evidence,
                recommendation=c_recs[0] if c_recs else None,
            )
        )
    if input_share is not None and input_share >= MODERATELY_INPUT_BOUND:
        pf = _prefetch_rec(tree, input_share, host_share)
        if pf is not None:
            recs.append(pf)
    h2d = fractions.get("host_to_device") or 0.0
    if h2d >= H2D_SHARE:
        r = h2d_rec(h2d)
        recs.append(r)
        bottlenecks.append(
            Bottleneck("host_to_device", round(h2d, 4), None, None, (), dict(r.evidence), r)
        )
    compute_cat = "device_compute" if device == "GPU" else "host_compute"
    compute = fractions.get(compute_cat) or 0.0
    if compute >= COMPUTE_BOUND_SHARE:
        r = compute_rec(device, compute)
        recs.append(r)
        bottlenecks.append(
            Bottleneck(
                compute_cat,
                round(compute, 4),
                None,
                None,
                tuple(compute_functions),
                {"functions": list(compute_functions)},
                r,
            )
        )
    bottlenecks.sort(key=lambda b: -b.share)
    recs.sort(key=lambda r: -r.gain)
    mr = marker_rec(detection)
    notes: list[str] = []
    if mr is not None:
        recs.append(mr)
        notes.append(mr.summary)
    return Findings(
        verdict=v,
        bottlenecks=tuple(bottlenecks),
        recommendations=tuple(recs),
        category_shares={k: round(val, 4) for k, val in cat_share.items()},
        notes=tuple(notes),
    )


def dedupe(recs: Sequence[Recommendation]) -> tuple[Recommendation, ...]:
    seen: set[str] = set()
    out = []
    for r in recs:
        if r.code not in seen:
            seen.add(r.code)
            out.append(r)
    return tuple(out)
