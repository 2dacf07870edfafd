"""The rewrites `tftune optimize` measures: which ones a training pipeline allows.

A knob changes an argument; a rewrite changes a pipeline's shape (`RewriteKind`). The
stall finder (`probes.live.epoch_stall`) and `tftune analyze` name them as fixes; here each
becomes a dimension of the search where the pipeline allows it:

- **cache** (``<map site>/cache``): ``cache()`` right after the last map or interleave
  that comes before any shuffle, random stage, repeat or Python generator. Everything
  above it then runs once; what the epochs see is the same, where the part above the
  cache gives the same elements on every pass (the check's two-pass test). In memory
  where its measured size fits the budget, else in a file under ``--cache-dir``, else
  refused with both figures;
- **order** (``<shuffle site>/shuffle_first``): a shuffle moved above the maps directly
  before it: its buffer fills with their inputs (file names, lines), so an epoch's first
  element no longer waits for a buffer's worth of maps. A map is element-wise, so with
  one seed the order and the elements are the same; never above a random map;
- **filter** (``<filter site>/filter_first``): a filter of the script's directly after its
  map moved above it, where its predicate reads only what the map passes through
  unchanged, in its place: the map runs only on the elements kept;
- **vectorize** (``<map site>/vectorize``): ``map(f).batch(b)`` made as
  ``batch(b).map(f)``, with `f` as it is where it works on a batch, or through
  ``tf.vectorized_map``: one call of its ops a batch. Never a map that runs Python or
  draws random numbers (over a batch it would draw once);
- **files** (``<flat_map site>/files_at_once``): a ``flat_map`` whose function opens a
  file reader, one file after the other, read as an ``interleave`` of several files at
  once. Its records come in another order: the check compares a whole pass as a
  multiset. (A reader given the file list itself, ``TFRecordDataset(files)``, has its
  own interleave: its ``num_parallel_reads`` is a knob);
- **iterator** (``one_iterator``): Keras ``fit`` over a finite dataset, or an eager loop
  over one, keeps one iterator across epochs (``ds.repeat()`` with the epoch's length).

`consider` reads the training pipeline as discovery saw it (`PipelineStage`s, source
first, and how the training loop iterates it) and returns the candidates, each checked
for equivalence in the child before it is measured (tuner/child/equivalence.py), and the
rows of what cannot apply, with why.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tftune.core.tuning_rewrites import Equivalence, RewriteKind, RewriteRow, RewriteState
from tftune.probes.live.epoch_stall import MAPPING_KINDS, PipelineStage
from tftune.tuner.fixes.training_calls import (
    LOOP_EAGER,
    LOOP_FIT,
    LOOP_FIT_STEPS,
    CompileCall,
    StepFunction,
)
from tftune.tuner.searchspace.config import (
    AUTOTUNE,
    CACHE_MEMORY,
    COMPILE_STEPS,
    VECTORIZE_WAYS,
    Config,
)
from tftune.tuner.searchspace.space import config_from_values

# An epoch of more steps than this makes one iterator for too many steps to matter.
ITERATOR_MAX_STEPS = 10_000
# A cache of more elements than this fills over a pass no trial sees the end of (the
# check also refuses one whose first pass it measures at over `CACHE_FILL_MAX_S`).
CACHE_MAX_ELEMENTS = 10_000_000
CACHE_FILL_MAX_S = 300.0

ONE_ITERATOR = "one_iterator"  # the study's parameter of the iterator rewrite
JIT_COMPILE, STEPS_PER_EXECUTION, COMPILE_STEP = (
    "jit_compile",
    "steps_per_execution",
    "compile_step",
)
UNKNOWN_LENGTH = -2  # tf.data's cardinality of a dataset whose length it does not know
CACHE_KNOB, ORDER_KNOB, VECTORIZE_KNOB = "cache", "shuffle_first", "vectorize"
FILES_KNOB = "files_at_once"
FILTER_KNOB = "filter_first"
PREFETCH_TO_DEVICE = "prefetch_to_device"
# The knobs' fields that are rewrites (`tuner.searchspace.config`: per call site, and global).
REWRITE_FIELDS = frozenset(
    {
        CACHE_KNOB,
        ORDER_KNOB,
        FILTER_KNOB,
        VECTORIZE_KNOB,
        FILES_KNOB,
        ONE_ITERATOR,
        PREFETCH_TO_DEVICE,
        JIT_COMPILE,
        STEPS_PER_EXECUTION,
        COMPILE_STEP,
    }
)
# The compute switches among them: searched where the step, not the input, is the limit.
COMPUTE_FIELDS = frozenset({JIT_COMPILE, STEPS_PER_EXECUTION, COMPILE_STEP})
# Stages a cache must stay above: an epoch sees them anew (shuffled, drawn, repeated, or
# made by Python, whose generator may change between epochs).
_BARRIERS = frozenset({"shuffle", "repeat", "generator", "distribute"})
# What a cache can follow: the knob ops whose call the child wraps.
_CACHEABLE = frozenset({"map", "interleave"})


@dataclass(frozen=True, slots=True)
class Candidate:
    """A rewrite the pipeline or the step allows, to be checked with `value`, then
    searched by `param` over `choices` (off, then the values it may take)."""

    kind: RewriteKind
    site: str | None
    param: str
    crosses: tuple[str, ...] = ()  # order: the maps' sites the shuffle moves above
    value: str | int | bool = True  # what the check applies (a cache: in memory)

    @property
    def choices(self) -> tuple[str | int | bool | None, ...]:
        """Off, then what it searches: its value (a count: several counts)."""
        if self.kind is RewriteKind.STEPS_PER_EXECUTION:
            return (None, *STEPS_PER_EXECUTION_CHOICES)
        if self.kind is RewriteKind.FILES:
            return (None, *FILES_AT_ONCE_CHOICES)
        return (None, self.value)

    def config(self) -> Config:
        """The script as written with this rewrite alone, at `value`."""
        return config_from_values({self.param: self.value})

    def row(
        self,
        state: RewriteState,
        reason: str,
        check: Equivalence | None = None,
        cache_bytes: int | None = None,
    ) -> RewriteRow:
        """This candidate's row, where it stands."""
        return RewriteRow(
            self.kind, self.site, self.param, state, reason, check, cache_bytes, self.value
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "site": self.site,
            "param": self.param,
            "crosses": list(self.crosses),
            "value": self.value,
        }

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> Candidate:
        value = raw.get("value", True)
        return Candidate(
            RewriteKind(raw["kind"]),
            raw.get("site"),
            str(raw["param"]),
            tuple(str(s) for s in raw.get("crosses") or ()),
            value if isinstance(value, (str, int, bool)) else True,
        )


# Steps per call searched, and the one the check runs (its equivalence does not depend on
# how many: the same steps, looped inside one call).
STEPS_PER_EXECUTION_CHOICES = (4, 16, 64)
CHECK_STEPS_PER_EXECUTION = 4
# Files read at once searched, and the count the check reads with (any count gives the
# same records in another order).
FILES_AT_ONCE_CHOICES = (2, 4, 8, 16, AUTOTUNE)
CHECK_FILES_AT_ONCE = 4


def consider(
    chain: Sequence[PipelineStage], loop: str | None
) -> tuple[list[Candidate], list[RewriteRow]]:
    """The rewrites the training pipeline `chain` (source first) allows, iterated as
    `loop` says, and the rows of those it names that cannot apply here (module
    docstring)."""
    found: list[Candidate] = []
    rows: list[RewriteRow] = []
    parts = (
        _cache(chain),
        *_orders(chain),
        *_filters(chain),
        *_vectorize(chain),
        *_files(chain),
    )
    for part in (*parts, _iterator(chain, loop)):
        if isinstance(part, Candidate):
            found.append(part)
        elif part is not None:
            rows.append(part)
    return found, rows


def _row(kind: RewriteKind, site: str | None, state: RewriteState, why: str) -> RewriteRow:
    return RewriteRow(kind, site, None, state, why)


def _line(site: str | None) -> str:
    return f"line {site.rsplit(':', 1)[-1]}" if site else "a library's stage"


def _barrier(stage: PipelineStage) -> str | None:
    """Why an epoch sees `stage` anew (a cache must stay above it), or None."""
    if stage.kind in _BARRIERS:
        return {
            "shuffle": "a shuffle",
            "repeat": "a repeat",
            "generator": "a Python generator",
            "distribute": "tf.distribute's split",
        }[stage.kind]
    if stage.random is not None:
        return f"a random op ({stage.random})"
    if stage.elements == -1:
        return "an infinite stage"
    return None


def _cache(chain: Sequence[PipelineStage]) -> Candidate | RewriteRow | None:
    """The cache after the last map before the first barrier (module docstring)."""
    end = next((i for i, s in enumerate(chain) if _barrier(s) is not None), len(chain))
    maps = [i for i in range(end) if chain[i].kind in _CACHEABLE]
    later = [s for s in chain[end:] if s.kind in MAPPING_KINDS and s.site is not None]
    if not maps:
        if later and end < len(chain):
            why = (
                f"the maps come after {_barrier(chain[end])} at {_line(chain[end].site)}: "
                "a cache below it would repeat one epoch's order or draws"
            )
            return _row(RewriteKind.CACHE, later[0].site, RewriteState.NOT_APPLICABLE, why)
        return None
    last = maps[-1]
    stage = chain[last]
    if any(s.kind == "cache" for s in chain[last + 1 : end]):
        return None  # cached already
    if stage.site is None:
        why = "the last deterministic map is a library's: no line of the script builds it"
        return _row(RewriteKind.CACHE, None, RewriteState.NOT_APPLICABLE, why)
    if sum(1 for s in chain if s.site == stage.site and s.kind in MAPPING_KINDS) > 1:
        why = f"{_line(stage.site)} holds two maps: a cache cannot be placed between them"
        return _row(RewriteKind.CACHE, stage.site, RewriteState.NOT_APPLICABLE, why)
    if (stage.elements or 0) > CACHE_MAX_ELEMENTS:
        why = (
            f"a pass holds {stage.elements:,} elements: a cache would fill over one pass that "
            "no trial sees the end of"
        )
        return _row(RewriteKind.CACHE, stage.site, RewriteState.REFUSED, why)
    return Candidate(RewriteKind.CACHE, stage.site, f"{stage.site}/{CACHE_KNOB}", (), CACHE_MEMORY)


def _orders(chain: Sequence[PipelineStage]) -> list[Candidate | RewriteRow]:
    """A shuffle of the script's directly after its maps: moved above them."""
    out: list[Candidate | RewriteRow] = []
    for i, stage in enumerate(chain):
        if stage.kind != "shuffle" or stage.site is None:
            continue
        maps: list[PipelineStage] = []
        for before in reversed(chain[:i]):
            if before.kind != "map":
                break
            maps.append(before)
        if not maps:
            continue
        if any(m.site is None for m in maps):
            why = "a library's map comes directly before the shuffle: it cannot be made again"
            out.append(_row(RewriteKind.ORDER, stage.site, RewriteState.NOT_APPLICABLE, why))
            continue
        random = next((m for m in maps if m.random is not None), None)
        if random is not None:
            why = (
                f"random op {random.random} in the map at {_line(random.site)}: a shuffle "
                "is never moved above a random map"
            )
            out.append(_row(RewriteKind.ORDER, stage.site, RewriteState.REFUSED, why))
            continue
        crosses = tuple(str(m.site) for m in reversed(maps))
        out.append(Candidate(RewriteKind.ORDER, stage.site, f"{stage.site}/{ORDER_KNOB}", crosses))
    return out


def _filters(chain: Sequence[PipelineStage]) -> list[Candidate | RewriteRow]:
    """A filter of the script's directly after its map: moved above it (where its
    predicate reads only what the map passes through: the check tells)."""
    out: list[Candidate | RewriteRow] = []
    for stage, then in itertools.pairwise(chain):
        map_site, site = stage.site, then.site
        if stage.kind != "map" or then.kind != "filter" or map_site is None or site is None:
            continue
        if stage.random is not None:
            why = (
                f"random op {stage.random} in the map at {_line(map_site)}: a filter is never "
                "moved above a random map"
            )
            out.append(_row(RewriteKind.FILTER, site, RewriteState.REFUSED, why))
            continue
        out.append(Candidate(RewriteKind.FILTER, site, f"{site}/{FILTER_KNOB}", (map_site,)))
    return out


def _vectorize(chain: Sequence[PipelineStage]) -> list[Candidate | RewriteRow]:
    """A map of the script's directly before its batch: made over batches, with its
    function as it is or through tf.vectorized_map (each checked apart)."""
    out: list[Candidate | RewriteRow] = []
    for stage, then in itertools.pairwise(chain):
        if stage.kind != "map" or then.kind != "batch" or stage.site is None:
            continue
        if stage.python:
            why = "the map runs Python, one element at a time: it cannot take a batch"
            out.append(_row(RewriteKind.VECTORIZE, stage.site, RewriteState.NOT_APPLICABLE, why))
        elif stage.random is not None:
            why = (
                f"random op {stage.random} in the map: over a batch it would draw once for "
                "the batch, not once an element"
            )
            out.append(_row(RewriteKind.VECTORIZE, stage.site, RewriteState.REFUSED, why))
        else:
            param = f"{stage.site}/{VECTORIZE_KNOB}"
            out += [
                Candidate(RewriteKind.VECTORIZE, stage.site, param, (), w) for w in VECTORIZE_WAYS
            ]
    return out


def _files(chain: Sequence[PipelineStage]) -> list[Candidate]:
    """A flat_map of the script's over files, read one file after the other: an
    interleave of several at once (checked at `CHECK_FILES_AT_ONCE`)."""
    return [
        Candidate(
            RewriteKind.FILES,
            s.site,
            f"{s.site}/{FILES_KNOB}",
            (),
            CHECK_FILES_AT_ONCE,
        )
        for s in chain
        if s.kind == "flat_map" and s.reader and s.site is not None
    ]


def _iterator(chain: Sequence[PipelineStage], loop: str | None) -> Candidate | RewriteRow | None:
    """One iterator across epochs, for Keras fit without steps_per_epoch or an eager
    loop of the script's, over a dataset of known, finite length."""
    if loop not in (LOOP_FIT, LOOP_EAGER) or not chain:
        if any(s.kind == "distribute" for s in chain):
            why = (
                "the training loop iterates a tf.distribute dataset: make one iterator over "
                "a repeat()ed dataset yourself (the epoch-stall fix shows how)"
            )
            return _row(RewriteKind.ITERATOR, None, RewriteState.NOT_APPLICABLE, why)
        return None
    elements = chain[-1].elements
    if elements == -1 or (elements or 0) > ITERATOR_MAX_STEPS:
        return None  # repeated already, or an iterator's making is nothing over an epoch
    if elements is None or elements < 1:
        why = (
            "the epoch's length is unknown to tf.data (a filter, a text reader, a "
            "generator): one iterator needs it to end each epoch where the script's did"
        )
        return _row(RewriteKind.ITERATOR, None, RewriteState.NOT_APPLICABLE, why)
    return Candidate(RewriteKind.ITERATOR, None, ONE_ITERATOR)


def consider_compute(
    loop: str | None, compiled: CompileCall | None, step: StepFunction | None
) -> tuple[list[Candidate], list[RewriteRow]]:
    """The compute switches the training step allows: for Keras ``fit``, XLA and several
    steps per call (or ``run_eagerly=False`` where the script set it); for the script's
    own loop whose update runs eagerly in a function, that function compiled."""
    kind, found, rows = RewriteKind.COMPILE_STEP, [], []
    if loop in (LOOP_FIT, LOOP_FIT_STEPS) and compiled is not None:
        if compiled.run_eagerly:
            found += [Candidate(kind, compiled.place, COMPILE_STEP, (), h) for h in COMPILE_STEPS]
        else:
            if compiled.jit_compile is not True:
                found.append(Candidate(RewriteKind.JIT_COMPILE, compiled.place, JIT_COMPILE))
            if (compiled.steps_per_execution or 1) == 1:
                spe, n = RewriteKind.STEPS_PER_EXECUTION, CHECK_STEPS_PER_EXECUTION
                found.append(Candidate(spe, compiled.place, STEPS_PER_EXECUTION, (), n))
    elif loop == LOOP_EAGER and step is not None and step.eager:
        if step.name is not None:
            found += [Candidate(kind, step.site, COMPILE_STEP, (), h) for h in COMPILE_STEPS]
        else:
            why = (
                "the update runs eagerly in the loop's own body: move the step into a function "
                "and decorate it with @tf.function"
            )
            rows.append(_row(kind, step.site, RewriteState.NOT_APPLICABLE, why))
    return found, rows


def consider_device(loop: str | None, gpu: bool) -> tuple[list[Candidate], list[RewriteRow]]:
    """The next batches prefetched to the GPU, for the script's own eager loop (Keras and
    tf.distribute place their batches themselves): searched on a GPU, advice on a CPU."""
    if loop != LOOP_EAGER:
        return [], []
    kind = RewriteKind.HOST_TO_DEVICE
    if gpu:
        return [Candidate(kind, None, PREFETCH_TO_DEVICE)], []
    why = (
        "advice only: this host has no GPU to copy batches to; on one, end the pipeline with "
        'ds.apply(tf.data.experimental.prefetch_to_device("/gpu:0"))'
    )
    return [], [_row(kind, None, RewriteState.NOT_APPLICABLE, why)]
