"""What the input wait was spent on: each blocking stage's work, split by category.

The consumer's input wait (from the step
breakdown) is time the step spent blocked on tf.data; what it waited *for* is the work of
the stages that block it (`Stage.blocking`). That work is classified from what the events
mean:

* `io`: file-reading sources (TFRecord, TextLine, FixedLengthRecord, ... any source
  stage whose kind names records, files, lines or readers); the interleave or flat_map
  above such a reader (its function builds one reader per file, its own time opens the
  file: with many small files that is where reading goes); read kernels (`ReadFile`,
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
from dataclasses import dataclass
from typing import Any

from tftune.core.units import PS_PER_MS
from tftune.probes.traces.stage_events import PY_UDF_OPS
from tftune.probes.traces.stages import Stage, StageTree

# Python UDFs running at once beyond the cores, by this factor, cannot be CPU work.
LATENCY_CONCURRENCY_OVER_CORES = 1.25
# Fraction of a UDF's time in blocking calls (Python tracer) that makes it io.
LATENCY_BLOCKED_FRACTION = 0.5


def ms(ps: int) -> float:
    """Picoseconds as milliseconds, as the analysis JSON rounds them."""
    return round(ps / PS_PER_MS, 3)


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
class StageWork:
    """One blocking stage's work, split by category (picoseconds)."""

    stage: Stage
    by_category: Mapping[str, int]
    latency_bound: bool | None
    evidence: Mapping[str, Any]


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


# Stages whose function makes one dataset per input element (interleave, flat_map).
_OPENER_KIND_RE = re.compile(
    r"^(Interleave|FlatMap|ParallelInterleave\w*|LegacyParallelInterleave\w*)$"
)


def opens_files(stage: Stage, stages: Sequence[Stage]) -> bool:
    """An interleave/flat_map whose inputs include a file reader: each call of its function
    opens a file (`from_tensor_slices(files).interleave(TFRecordDataset)`)."""
    if not _OPENER_KIND_RE.match(stage.kind):
        return False
    below = stage.name + "::"
    return any(s.name.startswith(below) and is_io_source(s) for s in stages)


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


def stage_work(
    stage: Stage, cores: int | None, inputs: Sequence[Stage] = (), opener: bool = False
) -> StageWork:
    """`opener`: the stage opens one file per element (`opens_files`): all its work is io."""
    cats: dict[str, int] = defaultdict(int)
    if opener:
        opened: dict[str, Any] = {"opens_files": True, "files_opened": stage.function_calls}
        return StageWork(stage, {"io": stage.work_ps}, None, opened)
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
        ev["top_ops_ms"] = {op: ms(ps) for op, ps in stage.ops_ps[:5]}
    return StageWork(stage, dict(cats), latency, ev)


def input_split(tree: StageTree) -> list[StageWork]:
    """The blocking stages' work, by category (what the consumer's wait was for)."""
    cores = tree.root_knobs.get("cpu_budget")
    out = []
    for st in tree.stages:
        if not st.blocking or st.parent is None:
            continue
        w = stage_work(
            st,
            cores if isinstance(cores, int) else None,
            tree.children(st.name),
            opener=opens_files(st, tree.stages),
        )
        if sum(w.by_category.values()) > 0:
            out.append(w)
    return out
