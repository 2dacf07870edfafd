"""The search space of `tftune optimize`: its dimensions, and configs from its parameters.

A `SearchSpace` is a tuple of `Knob`s, each a small categorical dimension with the value
the script wrote (``as_written``) among its choices, plus the knobs that were left out and
why. It turns a parameter dict (what Optuna samples) into a `Config`. Parameters equal to
the script's own value become ``None`` in the config ("leave as written"), so the
as-written parameters give exactly ``Config()``: the baseline runs the script unchanged.

Parameter names: a call-site knob is ``"<site>/<knob>"`` (``"train.py:42/num_parallel_calls"``);
a global knob is its `Config` field name (``"threadpool_size"``).

Why categorical on powers of two: the effect of parallelism and buffer sizes is roughly
logarithmic, a 20-trial budget cannot resolve 64 separate integers, and the benchmark's
exhaustive grid needs the same finite value set. The default space is built from the
discovery pass by `tuner.searchspace.space_build`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tftune.core.errors import ConfigError
from tftune.core.vocabulary import KNOB_AS_WRITTEN_JSON, knob_value_words
from tftune.tuner.searchspace import service
from tftune.tuner.searchspace.config import (
    AUTOTUNE,
    AUTOTUNE_JSON,
    BOOL_SITE_KNOBS,
    SITE_KNOBS,
    VECTORIZE_WAYS,
    Config,
    SiteConfig,
    capped_interleave_calls,
    parse_cache,
)

KnobValue = int | str | bool | None

GLOBAL_KNOB_NAMES = (
    "threadpool_size",
    "mixed_precision",
    "final_prefetch",
    "deterministic",
    "autotune_cpu_budget",
    "autotune_ram_budget_mb",
    "one_iterator",
    "prefetch_to_device",
    "jit_compile",
    "steps_per_execution",
    "compile_step",
)


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
    # A rewrite that others switch off: a shuffle is not moved above a map that a cache
    # follows (the cache would keep one epoch's order). {knob: the knobs that win over it}
    overridden_by: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

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
        for name, winners in self.overridden_by.items():
            if any(out.get(w) not in (None, False) for w in winners):
                out[name] = written.get(name)
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
                parts.append(f"{_short(k.name)} {value_words(v)}")
        return ", ".join(parts) if parts else "as written"


def site_knob_name(site: str, field: str) -> str:
    """A call site's knob as the study names it: "<site>/<field>" (`split_knob`)."""
    return f"{site}/{field}"


def split_knob(name: str) -> tuple[str | None, str]:
    """(call site, field) of a knob's name; a global knob has no site: (None, name)."""
    site, sep, field = name.rpartition("/")
    return (site, field) if sep else (None, name)


# A knob in a trial's one-line description: the words for its field.
_KNOB_WORDS = {
    "num_parallel_calls": "parallel calls",
    "cycle_length": "cycle length",
    "buffer_size": "prefetch",
    "batch_size": "batch",
    "use_multiprocessing": "processes",
    "threadpool_size": "thread pool",
}


def _short(name: str) -> str:
    """A knob as a trial's description names it: "train.py:8 parallel calls"."""
    site, knob = split_knob(name)
    words = _KNOB_WORDS.get(knob, knob.replace("_", " "))
    return words if site is None else f"{Path(site).name} {words}"


def format_value(v: KnobValue) -> str:
    """A knob's value as the tuning JSON writes it (its space and trials): ``AUTOTUNE``
    spelled out, ``None`` (tftune sets nothing) as `core.vocabulary.KNOB_AS_WRITTEN_JSON`.
    In words (`value_words`): what the reports, `tftune status` and the knob attributes
    optuna-dashboard shows say."""
    if v == AUTOTUNE and not isinstance(v, bool):
        return AUTOTUNE_JSON
    if v is None:
        return KNOB_AS_WRITTEN_JSON
    return str(v)


def value_words(v: KnobValue) -> str:
    """A knob's value as the reports say it: "AUTOTUNE", "as written", "on", "16"."""
    return knob_value_words(format_value(v))


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
                elif knob == "cache":
                    parse_cache(name, value)
                elif knob == "vectorize":
                    if value not in VECTORIZE_WAYS:
                        raise ConfigError(
                            f"{name}: expected one of {VECTORIZE_WAYS}, got {value!r}"
                        )
                elif not isinstance(value, int) or isinstance(value, bool):
                    raise ConfigError(f"{name}: expected an integer or AUTOTUNE, got {value!r}")
                sites.setdefault(site, {})[knob] = value
        elif name in GLOBAL_KNOB_NAMES:
            globals_[name] = value
        else:
            raise ConfigError(f"{name}: not a known knob")
    mp = globals_.pop("mixed_precision", None)
    det = globals_.pop("deterministic", None)
    one = globals_.pop("one_iterator", None)
    device = globals_.pop("prefetch_to_device", None)
    jit = globals_.pop("jit_compile", None)
    how = globals_.pop("compile_step", None)
    ints: dict[str, int | None] = {}
    for name, value in globals_.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        ints[name] = value
    return Config(
        sites={s: SiteConfig(**kn) for s, kn in sorted(sites.items())},
        mixed_precision=mp if isinstance(mp, str) else None,
        deterministic=det if isinstance(det, bool) else None,
        one_iterator=one if isinstance(one, bool) else None,
        prefetch_to_device=device if isinstance(device, bool) else None,
        jit_compile=jit if isinstance(jit, bool) else None,
        compile_step=how if isinstance(how, str) else None,
        data_service=service.service_from_values(values),
        **ints,  # type: ignore[arg-type]
    )
