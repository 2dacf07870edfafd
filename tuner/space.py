"""The search space of `tftune optimize`, built from the discovery pass.

A `SearchSpace` is a tuple of `Knob`s, each a small categorical dimension with the value
the script wrote (``as_written``) among its choices, plus the knobs that were left out and
why. It turns a parameter dict (what Optuna samples) into a `Config`. Parameters equal to
the script's own value become ``None`` in the config ("leave as written"), so the
as-written parameters give exactly ``Config()``: the baseline runs the script unchanged.

Parameter names: a call-site knob is ``"<site>/<knob>"`` (``"train.py:42/num_parallel_calls"``);
a global knob is its `Config` field name (``"threadpool_size"``).

Why categorical on powers of two: the effect of parallelism and buffer sizes is roughly
logarithmic, a 20-trial budget cannot resolve 64 separate integers, and the benchmark's
exhaustive grid needs the same finite value set.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from tftune.core.errors import ConfigError
from tftune.tuner import service
from tftune.tuner.child.datasets import READERS
from tftune.tuner.config import (
    AUTOTUNE,
    AUTOTUNE_JSON,
    BOOL_SITE_KNOBS,
    MAX_KNOB,
    SITE_KNOBS,
    Config,
    SiteConfig,
    capped_interleave_calls,
)
from tftune.tuner.platform import platform_policy

KnobValue = int | str | bool | None

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
GLOBAL_KNOB_NAMES = (
    "threadpool_size",
    "mixed_precision",
    "final_prefetch",
    "deterministic",
    "autotune_cpu_budget",
    "autotune_ram_budget_mb",
)
AUTOTUNABLE_KNOBS = frozenset(
    {"num_parallel_calls", "cycle_length", "buffer_size", "final_prefetch"}
)

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
class Knob:
    """One categorical dimension of the space."""

    name: str
    field: str
    site: str | None
    choices: tuple[KnobValue, ...]
    as_written: KnobValue
    why: str = ""

    def __post_init__(self) -> None:
        if self.as_written not in self.choices:
            raise ValueError(f"{self.name}: as-written value {self.as_written!r} not in choices")


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A knob deliberately not searched, with the reason shown to the user."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """The knobs to search, fixed values applied to every searched config, and what was
    left out. Frozen: the study samples from it, the emitter reads it."""

    knobs: tuple[Knob, ...]
    fixed: Mapping[str, KnobValue] = field(default_factory=dict)
    left_out: tuple[LeftOut, ...] = ()
    warnings: tuple[str, ...] = ()
    cores: int = 1

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def size(self) -> int:
        """The number of distinct configurations (the exhaustive grid's length)."""
        n = 1
        for k in self.knobs:
            n *= len(k.choices)
        return n

    def as_written_params(self) -> dict[str, KnobValue]:
        return {k.name: k.as_written for k in self.knobs}

    def grid(self) -> Iterator[dict[str, KnobValue]]:
        """Every combination of choices, in a stable order (for the benchmark)."""
        for combo in itertools.product(*(k.choices for k in self.knobs)):
            yield dict(zip(self.names, combo, strict=True))

    def nearest(self, knob: Knob, want: KnobValue) -> KnobValue:
        """The choice closest to `want` (AUTOTUNE and None only match themselves)."""
        if want in knob.choices:
            return want
        numeric = [c for c in knob.choices if isinstance(c, int) and not isinstance(c, bool)]
        numeric = [c for c in numeric if c != AUTOTUNE]
        if not isinstance(want, int) or not numeric:
            return knob.as_written
        return min(numeric, key=lambda c: (abs(c - want), c))

    def params_for(self, wanted: Mapping[str, KnobValue]) -> dict[str, KnobValue]:
        """Parameters that realise `wanted` (by knob name or by field name for every site)
        as closely as the choices allow; knobs not named stay as written."""
        out: dict[str, KnobValue] = {}
        for k in self.knobs:
            if k.name in wanted:
                out[k.name] = self.nearest(k, wanted[k.name])
            elif k.field in wanted:
                out[k.name] = self.nearest(k, wanted[k.field])
            else:
                out[k.name] = k.as_written
        return out

    def narrowed(self, fields: frozenset[str], reason: str) -> SearchSpace:
        """The space with the knobs of `fields` searched between their as-written value
        and AUTOTUNE only (where they have it), and a `LeftOut` note per knob narrowed."""
        knobs, notes = [], list(self.left_out)
        for k in self.knobs:
            keep = tuple(c for c in k.choices if c in (k.as_written, AUTOTUNE))
            if k.field in fields and keep != k.choices:
                k = replace(k, choices=keep)
                notes.append(LeftOut(k.name, f"as written or AUTOTUNE only: {reason}"))
            knobs.append(k)
        return replace(self, knobs=tuple(knobs), left_out=tuple(notes))

    def feasible(self, params: Mapping[str, KnobValue]) -> dict[str, KnobValue]:
        """`params` as TensorFlow accepts them: an interleave with a fixed cycle length
        runs at most that many calls at once (more is an InvalidArgumentError when the
        pipeline starts), so its parallelism is capped at its cycle length."""
        out = dict(params)
        written = {k.name: k.as_written for k in self.knobs}
        for k in self.knobs:
            if k.field != "cycle_length":
                continue
            par = f"{k.site}/num_parallel_calls"
            calls = out.get(par, written.get(par))
            capped = capped_interleave_calls(out.get(k.name, k.as_written), calls, self.cores)
            if capped != calls:
                out[par] = capped  # type: ignore[assignment]
        return out

    def config(self, params: Mapping[str, KnobValue], *, apply_fixed: bool = True) -> Config:
        """The `Config` for sampled parameters (`feasible`). Values equal to the script's
        own are left as ``None`` so that the as-written parameters give ``Config()``
        exactly."""
        params = self.feasible(params)
        values: dict[str, KnobValue] = dict(self.fixed) if apply_fixed else {}
        for k in self.knobs:
            if k.name in params and params[k.name] != k.as_written:
                values[k.name] = params[k.name]
        return config_from_values(values)

    def describe(self, params: Mapping[str, KnobValue]) -> str:
        """A short one-line rendering of what differs from the script as written."""
        params = self.feasible(params)
        parts = []
        for k in self.knobs:
            v = params.get(k.name, k.as_written)
            if v != k.as_written:
                parts.append(f"{_short(k.name)}={format_value(v)}")
        return ", ".join(parts) if parts else "as written"


def site_knob_name(site: str, field: str) -> str:
    """A call site's knob as the study names it: "<site>/<field>" (`split_knob`)."""
    return f"{site}/{field}"


def split_knob(name: str) -> tuple[str | None, str]:
    """(call site, field) of a knob's name; a global knob has no site: (None, name)."""
    site, sep, field = name.rpartition("/")
    return (site, field) if sep else (None, name)


def _short(name: str) -> str:
    site, knob = split_knob(name)
    if site is None:
        return name
    short_knob = {
        "num_parallel_calls": "par",
        "cycle_length": "cycle",
        "buffer_size": "prefetch",
        "batch_size": "batch",
        "use_multiprocessing": "processes",
    }.get(knob, knob)
    return f"{Path(site).name}/{short_knob}"


def format_value(v: KnobValue) -> str:
    if v == AUTOTUNE and not isinstance(v, bool):
        return AUTOTUNE_JSON
    if v is None:
        return "default"
    return str(v)


def config_from_values(values: Mapping[str, KnobValue]) -> Config:
    """Build a `Config` from ``{param name: value}`` (site knobs and global knobs)."""
    sites: dict[str, dict[str, Any]] = {}
    globals_: dict[str, KnobValue] = {}
    for name, value in values.items():
        site, knob = split_knob(name)
        if name in service.PARAM_NAMES:
            continue  # `service.service_from_values` below
        if site is not None and knob in SITE_KNOBS:
            if value is not None:
                if knob in BOOL_SITE_KNOBS:
                    if not isinstance(value, bool):
                        raise ConfigError(f"{name}: expected true or false, got {value!r}")
                elif not isinstance(value, int) or isinstance(value, bool):
                    raise ConfigError(f"{name}: expected an integer or AUTOTUNE, got {value!r}")
                sites.setdefault(site, {})[knob] = value
        elif name in GLOBAL_KNOB_NAMES:
            globals_[name] = value
        else:
            raise ConfigError(f"{name}: not a known knob")
    mp = globals_.pop("mixed_precision", None)
    det = globals_.pop("deterministic", None)
    ints: dict[str, int | None] = {}
    for name, value in globals_.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        ints[name] = value
    return Config(
        sites={s: SiteConfig(**kn) for s, kn in sorted(sites.items())},
        mixed_precision=mp if isinstance(mp, str) else None,
        deterministic=det if isinstance(det, bool) else None,
        data_service=service.service_from_values(values),
        **ints,  # type: ignore[arg-type]
    )


# --- construction ---------------------------------------------------------------------


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
