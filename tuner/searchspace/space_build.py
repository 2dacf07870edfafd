"""The default search space of `tftune optimize`, built from the discovery pass.

`build_space` turns the call sites discovery found (`DiscoveredSite`) into `Knob`s: each
parallel call site's parallelism, an interleave's width, a prefetch's depth, a
PyDataset's workers, the training batch around the script's own value, the private
thread pool and a final prefetch where the script has none, the platform's 16-bit
policy, and the tf.data service's cut where ``--data-service`` asks for it; with the
reasons for what is left out (`LeftOut`). The choices are powers of two (`tuner.searchspace.space`
says why).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tftune.core.errors import ConfigError, ScriptError
from tftune.tuner.child.datasets import READERS
from tftune.tuner.searchspace import service
from tftune.tuner.searchspace.config import AUTOTUNE, MAX_KNOB, SiteConfig
from tftune.tuner.searchspace.platform import platform_policy
from tftune.tuner.searchspace.space import Knob, KnobValue, LeftOut, SearchSpace, site_knob_name

if TYPE_CHECKING:
    from tftune.tuner.trial.discovery import Discovery

POWERS_TO_64: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
PARALLELISM_CHOICES: tuple[int, ...] = (*POWERS_TO_64, AUTOTUNE)
CYCLE_LENGTH_CHOICES: tuple[int, ...] = (*POWERS_TO_64, AUTOTUNE)
PREFETCH_CHOICES: tuple[int, ...] = (*POWERS_TO_64, AUTOTUNE)
# None is TensorFlow's default pool, whose size is the core count.
THREADPOOL_CHOICES: tuple[int | None, ...] = (None, 2, 4, 8, 16, 32, 64)
# The batch size is searched around the script's own value: x1/2 .. x4.
BATCH_FACTORS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)

# Which transformation exposes which knob (TensorFlow's own argument names).
READER_OPS = frozenset(READERS)  # file readers over several files: num_parallel_reads
PARALLEL_OPS = frozenset({"map", "interleave", "parallel_interleave", "map_and_batch", *READER_OPS})
INTERLEAVE_OPS = frozenset({"interleave", "parallel_interleave"})
BATCH_OPS = frozenset({"batch", "padded_batch", "map_and_batch", "ragged_batch"})
PREFETCH_OPS = frozenset({"prefetch"})
# A Keras PyDataset: its workers (threads or processes) and their queue of batches.
PY_DATASET_OPS = frozenset({"PyDataset"})
WORKER_CHOICES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
QUEUE_CHOICES: tuple[int, ...] = POWERS_TO_64
BATCH_SIZE_WARNING = (
    "the batch size is part of the search: it changes training dynamics (learning rate, "
    "convergence), so check accuracy before adopting a different one, or fix it with "
    "--batch-size"
)


class DiscoveredSite(Protocol):
    """What the discovery pass knows about one call site (read-only)."""

    @property
    def site(self) -> str:
        """``"path.py:LINE"`` relative to the script's directory."""

    @property
    def op(self) -> str:
        """The Dataset method called there: ``"map"``, ``"interleave"``, ``"batch"``..."""

    @property
    def as_written(self) -> SiteConfig:
        """The knobs' values as the script passed them (``None``: not passed)."""


@dataclass(frozen=True, slots=True)
class BatchBound:
    """``--batch-size``: a fixed value (lo == hi) or bounds."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str) -> BatchBound:
        lo_s, sep, hi_s = text.partition(":")
        try:
            lo = int(lo_s) if lo_s else 1
            hi = int(hi_s) if sep and hi_s else (MAX_KNOB if sep else lo)
        except ValueError:
            raise ConfigError(
                f"--batch-size {text!r}: expected N (fixed) or MIN:MAX (bounds)"
            ) from None
        if lo < 1 or hi < lo:
            raise ConfigError(f"--batch-size {text!r}: need 1 <= MIN <= MAX")
        return cls(lo, hi)


def _site_knob(site: DiscoveredSite, knob: str, base: Sequence[KnobValue], why: str) -> Knob:
    written = getattr(site.as_written, knob)
    # Not passing num_parallel_calls means sequential; not passing a buffer means none
    # (the knob only exists where the script calls prefetch, so a buffer is always given).
    if written is None and knob == "num_parallel_calls":
        written = 1
    choices = tuple(base) if written in base else (*base, written)
    return Knob(site_knob_name(site.site, knob), knob, site.site, choices, written, why)


def _batch_choices(written: int, bound: BatchBound | None) -> tuple[int, ...]:
    cands = {max(1, int(written * f)) for f in BATCH_FACTORS}
    if bound is None:
        return tuple(sorted(cands))
    kept = {c for c in cands if bound.lo <= c <= bound.hi}
    kept |= {bound.lo} if bound.lo == bound.hi else set()
    if not kept:
        kept = {min(max(written, bound.lo), bound.hi)}
    return tuple(sorted(kept))


def build_space(
    sites: Sequence[DiscoveredSite],
    *,
    cores: int,
    gpu_visible: bool = False,
    flags: Iterable[str] = (),
    uses_keras: bool | None = None,
    batch: BatchBound | None = None,
    data_service: str | None = None,
    job_name: str | None = None,
    training_sites: frozenset[str] | None = None,
    elsewhere_sites: frozenset[str] = frozenset(),
) -> SearchSpace:
    """The default search space for the discovered call sites on this machine.
    `training_sites`: the sites the training dataset was built through (None: unknown);
    a batch call outside them batches a validation or test set, and is not searched.
    `elsewhere_sites`: sites only other datasets were built through (validation, an
    ``adapt`` sample): none of their knobs is searched."""
    knobs: list[Knob] = []
    fixed: dict[str, KnobValue] = {}
    left: list[LeftOut] = []
    warnings: list[str] = []
    # A call site inside a function called twice is discovered twice; it is one knob.
    sites = list({(s.site, s.op): s for s in sites}.values())
    for s in sites:
        if s.site in elsewhere_sites:
            left += [LeftOut(k.name, NOT_TRAINING_SITE) for k in _site_knobs(s)]
        else:
            knobs += _site_knobs(s)
        if s.op in BATCH_OPS and training_sites is not None and s.site not in training_sites:
            left.append(LeftOut(site_knob_name(s.site, "batch_size"), NOT_TRAINING_BATCH))
        elif s.op in BATCH_OPS:
            knobs += _batch_knob(s, batch, fixed, left, warnings)
    knobs += _global_knobs(sites, cores, left)
    if data_service is not None:
        knobs += _service_knobs(sites, left)
        fixed.update({service.ADDRESS: data_service, service.JOB_NAME: job_name})
    policy, why = platform_policy(gpu_visible, flags)
    if uses_keras is False:
        left.append(
            LeftOut("mixed_precision", "the code never uses Keras: a policy changes nothing")
        )
    elif policy is None:
        left.append(LeftOut("mixed_precision", why))
    else:
        knobs.append(Knob("mixed_precision", "mixed_precision", None, (None, policy), None, why))
    left.append(
        LeftOut("deterministic", "changes the element order; add it with --space to search it")
    )
    # Two transformations on one line share the line's key (``ds.map(f).batch(8)``):
    # a knob name they both have (num_parallel_calls) is one knob, applied to both.
    unique: dict[str, Knob] = {}
    for k in knobs:
        unique.setdefault(k.name, k)
    return SearchSpace(tuple(unique.values()), fixed, tuple(left), tuple(warnings), cores)


NOT_TRAINING_SITE = (
    "only datasets that feed no training update are built here (validation, an adapt "
    "sample): it cannot change the training rate"
)
NOT_TRAINING_BATCH = (
    "it batches a dataset that does not feed training (validation, a test set): its "
    "batch is not searched"
)


def _site_knobs(s: DiscoveredSite) -> list[Knob]:
    """The parallelism, interleave width, prefetch depth and PyDataset knobs of a site."""
    knobs: list[Knob] = []
    if s.op in PARALLEL_OPS:
        why = "files read at once" if s.op in READER_OPS else f"{s.op} parallelism"
        knobs.append(_site_knob(s, "num_parallel_calls", PARALLELISM_CHOICES, why))
    if s.op in INTERLEAVE_OPS:
        if s.as_written.cycle_length is None:
            # TF's default cycle length is AUTOTUNE-like (the core count).
            k = _site_knob(s, "cycle_length", CYCLE_LENGTH_CHOICES, "interleave width")
            knobs.append(Knob(k.name, k.field, k.site, (*CYCLE_LENGTH_CHOICES, None), None, k.why))
        else:
            knobs.append(_site_knob(s, "cycle_length", CYCLE_LENGTH_CHOICES, "width"))
    if s.op in PREFETCH_OPS:
        knobs.append(_site_knob(s, "buffer_size", PREFETCH_CHOICES, "prefetch depth"))
    if s.op in PY_DATASET_OPS:
        knobs.append(_site_knob(s, "num_parallel_calls", WORKER_CHOICES, "PyDataset workers"))
        knobs.append(_site_knob(s, "use_multiprocessing", (False, True), "workers as processes"))
        knobs.append(_site_knob(s, "buffer_size", QUEUE_CHOICES, "PyDataset queue"))
    return knobs


def _service_knobs(sites: Sequence[DiscoveredSite], left: list[LeftOut]) -> list[Knob]:
    """``--data-service``: where distribute() cuts the pipeline (None: it stays local,
    the script as written), the processing mode, compression and outstanding requests."""
    cuts = service.cut_choices([(s.site, s.op) for s in sites])
    if not cuts:
        left.append(LeftOut(service.CUT, "no map, interleave or batch call site to cut after"))
        return []
    modes, comp = service.PROCESSING_MODES, service.COMPRESSIONS
    return [
        Knob(service.CUT, service.CUT, None, (None, *cuts), None, "tf.data service cut"),
        Knob(service.MODE, service.MODE, None, modes, modes[0], "service processing mode"),
        Knob(service.COMPRESSION, service.COMPRESSION, None, comp, comp[0], "compression"),
        Knob(
            service.MAX_OUTSTANDING,
            service.MAX_OUTSTANDING,
            None,
            service.MAX_OUTSTANDING_CHOICES,
            None,
            "outstanding requests",
        ),
    ]


def _batch_knob(
    s: DiscoveredSite,
    batch: BatchBound | None,
    fixed: dict[str, KnobValue],
    left: list[LeftOut],
    warnings: list[str],
) -> list[Knob]:
    """A batch call's batch size: searched around the script's own value, fixed by
    ``--batch-size``, or left out when the script's value is not a known constant."""
    written = s.as_written.batch_size
    name = site_knob_name(s.site, "batch_size")
    if written is None or written == AUTOTUNE:
        left.append(LeftOut(name, "the script's batch size is not a known constant"))
        return []
    choices = _batch_choices(written, batch)
    if len(choices) == 1:
        fixed[name] = choices[0] if choices[0] != written else None
        left.append(LeftOut(name, f"fixed at {choices[0]} by --batch-size"))
        return []
    if BATCH_SIZE_WARNING not in warnings:
        warnings.append(BATCH_SIZE_WARNING)
    return [Knob(name, "batch_size", s.site, choices, written, "batch size")]


def _global_knobs(sites: Sequence[DiscoveredSite], cores: int, left: list[LeftOut]) -> list[Knob]:
    """The private thread pool (when anything runs in parallel) and a final prefetch
    (when the script never prefetches)."""
    knobs: list[Knob] = []
    if any(s.op in PARALLEL_OPS for s in sites):
        tp = THREADPOOL_CHOICES if cores in THREADPOOL_CHOICES else (*THREADPOOL_CHOICES, cores)
        knobs.append(Knob("threadpool_size", "threadpool_size", None, tp, None, "thread pool"))
    else:
        left.append(
            LeftOut("threadpool_size", "nothing runs in parallel (no map or interleave call site)")
        )
    if not any(s.op in PREFETCH_OPS for s in sites):
        choices: tuple[KnobValue, ...] = (None, 1, 2, 4, 8, AUTOTUNE)
        why = "the script never prefetches"
        knobs.append(Knob("final_prefetch", "final_prefetch", None, choices, None, why))
    else:
        left.append(LeftOut("final_prefetch", "the script prefetches; its depth is searched"))
    return knobs


def build_search_space(
    script: str | os.PathLike[str],
    path: Path,
    found: Discovery,
    gpu: bool,
    space_file: str | os.PathLike[str] | None,
    bound: BatchBound | None,
    note: Callable[[str], None],
    data_service: str | None = None,
) -> SearchSpace:
    """The space over the discovered call sites, narrowed by ``--space`` and
    ``--batch-size``, with the tf.data service's knobs for ``--data-service`` (the
    trainers' job name: ``tftune-<script>``); `ScriptError` when nothing is left."""
    from tftune.tuner.searchspace.platform import cpu_flags, mentions_keras
    from tftune.tuner.searchspace.space_file import apply_space_file

    if not found.sites:
        note(
            "note: no map, interleave, batch or prefetch call (nor a Keras PyDataset) in "
            "your own files: the dataset is built by a library (e.g. Keras from numpy "
            "arrays), so only the global knobs are searched"
        )
    space = build_space(
        found.sites,
        cores=os.cpu_count() or 1,
        gpu_visible=gpu,
        flags=cpu_flags(),
        uses_keras=found.uses_keras and mentions_keras(path),
        batch=bound,
        data_service=data_service,
        job_name=f"tftune-{path.stem}" if data_service else None,
        training_sites=found.training_sites(),
        elsewhere_sites=found.elsewhere_sites(),
    )
    if space_file is not None:
        space = apply_space_file(space, space_file, found.site_keys())
    if not space.knobs:
        raise ScriptError(f"{script}: nothing to search (every knob is fixed or left out)")
    for w in space.warnings:
        note(f"warning: {w}")
    for lo in space.left_out:
        note(f"left out {lo.name}: {lo.reason}")
    return space
