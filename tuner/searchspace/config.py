"""A trial configuration: tf.data knobs per call site plus a few global ones.

A config is keyed by call site, ``"relative/path.py:LINE"`` relative to the directory of
the training script. In JSON, AUTOTUNE is spelled ``"AUTOTUNE"``; in memory (and in
TensorFlow) it is ``-1`` (`AUTOTUNE`). A knob that is ``None`` is left as the script
wrote it.

File format (schema 1)::

    {
      "schema": 1,
      "sites": {"train.py:42": {"num_parallel_calls": "AUTOTUNE", "batch_size": 64}},
      "threadpool_size": 32, "deterministic": false, "mixed_precision": "off",
      "final_prefetch": "AUTOTUNE", "autotune_cpu_budget": null, "autotune_ram_budget_mb": null,
      "meta": {"...": "free-form, kept as is (metrics, command, ...)"},
      "data_service": {"address": "grpc://host:5050", "cut": "train.py:40", "...": "..."},
      "one_iterator": true
    }

``data_service`` (optional) is the tf.data service, see `tftune.tuner.searchspace.service`.

Rewrites (`tftune.tuner.fixes.rewrites`) change a pipeline's shape and are written only where
set. Per call site: ``"cache": "memory"`` (or a folder for a file cache) inserts
``cache()`` right after the map at that line; ``"shuffle_first": true`` moves the
shuffle at that line above the maps directly before it, ``"filter_first": true`` the filter
at that line above the map before it; ``"vectorize": "batch"`` (or
``"vectorized_map"``) makes the map at that line over batches; ``"files_at_once": 8``
reads the flat_map over files at that line as an interleave of 8 files at once.
Globally,
``"one_iterator": true`` keeps one iterator over the training dataset across epochs, and
``"prefetch_to_device": true`` copies its next batches to the GPU ahead.
Compute switches are global and written only where set too: ``"jit_compile": true`` and
``"steps_per_execution": 16`` for Keras ``compile``, ``"compile_step": "function"`` (or
``"xla"``) for a step that runs eagerly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tftune.core.errors import ConfigError
from tftune.core.tuning_parts import ConfigSettings, Setting, Settings
from tftune.core.userfiles import read_json, write_text_atomic
from tftune.tuner.searchspace.service import ServiceConfig, service_from_json

SCHEMA = 1
AUTOTUNE = -1
AUTOTUNE_JSON = "AUTOTUNE"
MIXED_PRECISION_POLICIES = ("off", "mixed_float16", "mixed_bfloat16")
# Knobs that accept AUTOTUNE; batch_size and threadpool_size must be concrete.
AUTOTUNABLE_KNOBS = frozenset(
    {"num_parallel_calls", "buffer_size", "cycle_length", "final_prefetch", "files_at_once"}
)
MAX_KNOB = 1 << 16


@dataclass(frozen=True, slots=True)
class SiteConfig:
    """Knob overrides for one call site; ``None`` leaves the script's own value."""

    num_parallel_calls: int | None = None
    cycle_length: int | None = None
    buffer_size: int | None = None
    batch_size: int | None = None
    # A Keras PyDataset's workers are processes (True) or threads (False).
    use_multiprocessing: bool | None = None
    # Rewrites (tuner/fixes/rewrites.py): ``cache()`` right after the map or interleave at this
    # line, in memory (`CACHE_MEMORY`) or in a file under the folder given; the shuffle at
    # this line moved above the maps directly before it.
    cache: str | None = None
    shuffle_first: bool | None = None
    # The filter at this line moved above the map directly before it (its predicate
    # reads only what the map passes through unchanged).
    filter_first: bool | None = None
    # The map at this line made over batches (`VECTORIZE_BATCH`: its function as it is,
    # `VECTORIZE_PFOR`: through tf.vectorized_map): map(f).batch(b) as batch(b).map(f).
    vectorize: str | None = None
    # The flat_map over files at this line read as an interleave of this many files at
    # once (AUTOTUNE allowed): interleave(f, cycle_length=N, num_parallel_calls=N).
    files_at_once: int | None = None

    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    def to_json(self) -> dict[str, int | str | bool | None]:
        return {
            f.name: _knob_to_json(getattr(self, f.name))
            for f in fields(self)
            if getattr(self, f.name) is not None
        }


SITE_KNOBS: tuple[str, ...] = tuple(f.name for f in fields(SiteConfig))
BOOL_SITE_KNOBS = frozenset({"use_multiprocessing", "shuffle_first", "filter_first"})
# A cache in memory; any other value of the `cache` knob is the folder of a file cache.
CACHE_MEMORY = "memory"
# How a map is made over batches: its own function, or through tf.vectorized_map.
VECTORIZE_BATCH, VECTORIZE_PFOR = "batch", "vectorized_map"
VECTORIZE_WAYS = (VECTORIZE_BATCH, VECTORIZE_PFOR)
# How an eagerly run step is compiled: a tf.function, or one with XLA.
COMPILE_FUNCTION, COMPILE_XLA = "function", "xla"
COMPILE_STEPS = (COMPILE_FUNCTION, COMPILE_XLA)


def capped_interleave_calls(cycle_length: object, calls: object, cores: int) -> object:
    """An interleave's `num_parallel_calls` as TF accepts it: at most its cycle length
    (more is an InvalidArgumentError when the pipeline starts). A cycle length of
    AUTOTUNE, or none (TF's default is AUTOTUNE), is the host's `cores` to TF. AUTOTUNE
    or no value for `calls` leaves it as it is."""

    def count(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    cycle = cycle_length if count(cycle_length) else None
    if cycle is None and (cycle_length is None or cycle_length == AUTOTUNE):
        cycle = cores
    if cycle is not None and count(calls) and calls > cycle:  # type: ignore[operator]
        return cycle
    return calls


@dataclass(frozen=True, slots=True)
class Config:
    """One trial's configuration. ``Config()`` is "the script as written"."""

    sites: Mapping[str, SiteConfig] = field(default_factory=dict)
    threadpool_size: int | None = None
    deterministic: bool | None = None
    mixed_precision: str | None = None
    final_prefetch: int | None = None
    autotune_cpu_budget: int | None = None
    autotune_ram_budget_mb: int | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    # distribute() to a tf.data service at a cut point (tuner/searchspace/service.py); None: local.
    data_service: ServiceConfig | None = None
    # Rewrite: one iterator over the training dataset across epochs (tuner/fixes/rewrites.py).
    one_iterator: bool | None = None
    # Compute switches (tuner/fixes/rewrites.py): Keras compile's jit_compile and
    # steps_per_execution; the step compiled where it runs eagerly (`COMPILE_STEPS`:
    # a tf.function, or one with XLA; Keras: run_eagerly=False).
    jit_compile: bool | None = None
    steps_per_execution: int | None = None
    compile_step: str | None = None
    # Rewrite: the iterated dataset's next batches copied to the GPU ahead (a GPU only).
    prefetch_to_device: bool | None = None
    # The learning check (core/learning.py): every Keras optimizer's learning rate times
    # this factor, ramped up from the rate as written over that many updates.
    learning_rate_scale: float | None = None
    learning_rate_warmup: int | None = None

    def site(self, key: str) -> SiteConfig | None:
        return self.sites.get(key)

    def with_sites(self, sites: Mapping[str, SiteConfig]) -> Config:
        return replace(self, sites=dict(sites))

    def is_as_written(self) -> bool:
        return (
            all(s.is_empty() for s in self.sites.values())
            and all(getattr(self, name) is None for name in (*_GLOBALS, *_WHERE_SET))
            and self.data_service is None
        )

    def settings(self) -> ConfigSettings:
        """What this config sets, as its file writes it (the tuning document holds the
        winner's so): every global knob, the tf.data service where there is one, and
        the rewrites and switches where set."""
        fields: list[tuple[str, Setting | Settings]] = []
        for name in _GLOBALS:
            value = getattr(self, name)
            fields.append((name, _knob_to_json(value) if name in AUTOTUNABLE_KNOBS else value))
        if self.data_service is not None:
            fields.append(("data_service", tuple(self.data_service.to_json().items())))
        fields += [(n, getattr(self, n)) for n in _WHERE_SET if getattr(self, n) is not None]
        return ConfigSettings(
            schema=SCHEMA,
            sites=tuple((k, tuple(v.to_json().items())) for k, v in sorted(self.sites.items())),
            fields=tuple(fields),
        )

    def to_json(self) -> dict[str, Any]:
        out = self.settings().to_json()
        if self.meta:
            out["meta"] = dict(self.meta)
        return out


_GLOBALS: tuple[str, ...] = (
    "threadpool_size",
    "deterministic",
    "mixed_precision",
    "final_prefetch",
    "autotune_cpu_budget",
    "autotune_ram_budget_mb",
)
# Globals written only where set: a config file without them reads as before.
_WHERE_SET: tuple[str, ...] = (
    "one_iterator",
    "prefetch_to_device",
    "jit_compile",
    "steps_per_execution",
    "compile_step",
    "learning_rate_scale",
    "learning_rate_warmup",
)
_TOP_KEYS = frozenset({"schema", "sites", "meta", "data_service", *_GLOBALS, *_WHERE_SET})


def _knob_to_json(value: int | bool | str | None) -> int | str | bool | None:
    if value == AUTOTUNE and not isinstance(value, bool):
        return AUTOTUNE_JSON
    return value


def _parse_knob(where: str, name: str, raw: object) -> int | None:
    if raw is None:
        return None
    if name in AUTOTUNABLE_KNOBS and (raw in (AUTOTUNE_JSON, AUTOTUNE)):
        return AUTOTUNE
    if isinstance(raw, bool) or not isinstance(raw, int):
        allowed = '"AUTOTUNE" or ' if name in AUTOTUNABLE_KNOBS else ""
        raise ConfigError(f"{where}: {name} must be {allowed}a positive integer, got {raw!r}")
    if not 1 <= raw <= MAX_KNOB:
        raise ConfigError(f"{where}: {name} must be between 1 and {MAX_KNOB}, got {raw}")
    return raw


def _parse_site_knob(where: str, name: str, raw: object) -> int | bool | str | None:
    if name in BOOL_SITE_KNOBS:
        if raw is None or isinstance(raw, bool):
            return raw
        raise ConfigError(f"{where}: {name} must be true, false or null, got {raw!r}")
    if name == "cache":
        return parse_cache(where, raw)
    if name == "vectorize":
        if raw is None or (isinstance(raw, str) and raw in VECTORIZE_WAYS):
            return raw
        ways = " or ".join(map(repr, VECTORIZE_WAYS))
        raise ConfigError(f"{where}: vectorize must be {ways} or null, got {raw!r}")
    return _parse_knob(where, name, raw)


def parse_cache(where: str, raw: object) -> str | None:
    """The `cache` knob: null, "memory", or the folder of a file cache (a non-empty path)."""
    if raw is None or (isinstance(raw, str) and raw.strip()):
        return raw
    raise ConfigError(
        f'{where}: cache must be "{CACHE_MEMORY}", the folder of a file cache, or null, got {raw!r}'
    )


def _validate_site_key(where: str, key: object) -> str:
    if not isinstance(key, str):
        raise ConfigError(f"{where}: call site keys must be strings")
    path, sep, line = key.rpartition(":")
    if not sep or not path or not line.isdigit():
        raise ConfigError(f'{where}: call site "{key}" is not of the form "path.py:LINE"')
    return key


def config_from_json(data: object, source: str = "<config>") -> Config:
    """Validate parsed JSON into a `Config`; errors name `source` and the field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object at the top level")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{source}: unknown field {unknown[0]!r}")
    schema = data.get("schema", SCHEMA)
    if schema != SCHEMA:
        raise ConfigError(f"{source}: schema {schema!r} is not supported (expected {SCHEMA})")
    raw_sites = data.get("sites", {})
    if not isinstance(raw_sites, dict):
        raise ConfigError(f"{source}: sites must be an object keyed by call site")
    sites: dict[str, SiteConfig] = {}
    for key, knobs in raw_sites.items():
        site = _validate_site_key(f"{source}: sites", key)
        where = f"{source}: sites[{site!r}]"
        if not isinstance(knobs, dict):
            raise ConfigError(f"{where} must be an object of knobs")
        bad = sorted(set(knobs) - set(SITE_KNOBS))
        if bad:
            raise ConfigError(f"{where}: unknown knob {bad[0]!r}")
        values: dict[str, Any] = {k: _parse_site_knob(where, k, v) for k, v in knobs.items()}
        sites[site] = SiteConfig(**values)
    kwargs: dict[str, Any] = {}
    for name in ("threadpool_size", "final_prefetch", "autotune_cpu_budget"):
        kwargs[name] = _parse_knob(source, name, data.get(name))
    ram = data.get("autotune_ram_budget_mb")
    kwargs["autotune_ram_budget_mb"] = _parse_knob(source, "autotune_ram_budget_mb", ram)
    det = data.get("deterministic")
    if det is not None and not isinstance(det, bool):
        raise ConfigError(f"{source}: deterministic must be true, false or null, got {det!r}")
    mp = data.get("mixed_precision")
    if mp is not None and mp not in MIXED_PRECISION_POLICIES:
        raise ConfigError(
            f"{source}: mixed_precision must be one of {', '.join(MIXED_PRECISION_POLICIES)}"
            f" or null, got {mp!r}"
        )
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise ConfigError(f"{source}: meta must be an object")
    for name in ("one_iterator", "jit_compile", "prefetch_to_device"):
        flag = data.get(name)
        if flag is not None and not isinstance(flag, bool):
            raise ConfigError(f"{source}: {name} must be true, false or null, got {flag!r}")
        kwargs[name] = flag
    kwargs["steps_per_execution"] = _parse_knob(
        source, "steps_per_execution", data.get("steps_per_execution")
    )
    how = data.get("compile_step")
    if how is not None and how not in COMPILE_STEPS:
        raise ConfigError(
            f"{source}: compile_step must be {' or '.join(map(repr, COMPILE_STEPS))} or null, "
            f"got {how!r}"
        )
    kwargs["compile_step"] = how
    scale = data.get("learning_rate_scale")
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 1e3
    ):
        raise ConfigError(
            f"{source}: learning_rate_scale must be a number above 0 (at most 1000), got {scale!r}"
        )
    kwargs["learning_rate_scale"] = float(scale) if scale is not None else None
    kwargs["learning_rate_warmup"] = _parse_knob(
        source, "learning_rate_warmup", data.get("learning_rate_warmup")
    )
    kwargs["data_service"] = service_from_json(data.get("data_service"), source)
    return Config(sites=sites, deterministic=det, mixed_precision=mp, meta=meta, **kwargs)


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a config file. Raises `ConfigError` (one line) when malformed."""
    p = Path(path)
    data = read_json(p, ConfigError, "config file")
    return config_from_json(data, str(p))


def save_config(config: Config, path: str | os.PathLike[str]) -> Path:
    """Write `config` atomically (see `tftune.core.userfiles`)."""
    text = json.dumps(config.to_json(), indent=2) + "\n"
    return write_text_atomic(path, text, ConfigError)


def unknown_sites(config: Config, known: set[str] | frozenset[str]) -> list[str]:
    """Call sites named in `config` that the script no longer has (to warn about)."""
    return sorted(set(config.sites) - set(known))
