"""Bound analysis: how fast could this script go on this machine?

Before searching, two special trials measure the halves of the script apart:

- **pipeline only**: the iterated dataset is drained without training. Its rate is what
  the input pipeline (as written) can deliver.
- **model only**: the first `MODEL_ONLY_ELEMENTS` elements are cached in memory and
  repeated (``take(k).cache().repeat()``), so training never waits for input. Its rate is
  what the model can consume.

The lower of the two is the ceiling of the script as written; the report sets the
as-written and tuned rates against it, so the user sees whether the remaining gap is in
the pipeline or in the model.

The child side (`tuner/child/streams.py`, with `bound_mode`, `drain_pipeline_only` and
`cache_for_model_only` from here) runs inside the trial's bootstrap, at the point where
the script's dataset is about to be iterated; the mode travels in the config's ``meta``
so the trial runner needs no second code path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from tftune.core.sizing import NotSized, ServiceSizing
from tftune.core.tuning_parts import CeilingFigures
from tftune.probes.advice.service_sizing import CpuMeter, CpuUsage
from tftune.probes.advice.service_sizing import size_service as _size_service
from tftune.probes.live.environment import usable_cores
from tftune.tuner.searchspace.config import Config

BOUND_META_KEY = "tftune_bound_mode"
PIPELINE_ONLY = "pipeline_only"
MODEL_ONLY = "model_only"
# Enough distinct batches that the model does not see a trivially tiny working set,
# few enough to cache in memory for any sane batch.
MODEL_ONLY_ELEMENTS = 32
EXIT_BOUND_UNAVAILABLE = 3
NOT_IN_FUNCTION = "the pipeline alone cannot be measured for a dataset iterated in a tf.function"
# tf.distribute's per-device datasets read from a multi-device iterator that is being
# built while they are first iterated: drained alone, they would wait forever.
DISTRIBUTED = (
    "a dataset that tf.distribute splits across devices cannot be drained or cached on its "
    "own: its per-device parts read from an iterator not yet running"
)


# The pipeline alone at least this many times the model alone: the model is the limit
# (the guided guess, `guided.with_bounds`; the screen stops there,
# `tuner.searchspace.screen`).
MODEL_BOUND_FACTOR = 2.0


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The two bound measurements (examples/s; None: not measured, with the reason)."""

    pipeline_only_examples_per_s: float | None
    model_only_examples_per_s: float | None
    pipeline_note: str | None = None
    model_note: str | None = None
    # When one host is not enough (probes/advice/service_sizing.py), or why it was not sized;
    # None: not measured.
    sizing: ServiceSizing | NotSized | None = None

    @property
    def examples_per_s(self) -> float | None:
        vals = [
            v
            for v in (self.pipeline_only_examples_per_s, self.model_only_examples_per_s)
            if v is not None
        ]
        return min(vals) if vals else None

    @property
    def limited_by(self) -> str | None:
        p, m = self.pipeline_only_examples_per_s, self.model_only_examples_per_s
        if p is None or m is None:
            return None
        return "pipeline" if p < m else "model"

    @property
    def far_ahead(self) -> str | None:
        """The half that runs `MODEL_BOUND_FACTOR` times faster than the other or more
        ("pipeline": the model is the limit, the pipeline's knobs are not; "model": the
        run is input-bound), or None where neither does or a half was not measured."""
        p, m = self.pipeline_only_examples_per_s, self.model_only_examples_per_s
        if not p or not m:
            return None
        if p >= MODEL_BOUND_FACTOR * m:
            return "pipeline"
        return "model" if m >= MODEL_BOUND_FACTOR * p else None

    def figures(self) -> CeilingFigures:
        """The tuning document's ``ceiling``."""
        return CeilingFigures(
            pipeline_only_examples_per_s=self.pipeline_only_examples_per_s,
            model_only_examples_per_s=self.model_only_examples_per_s,
            ceiling_examples_per_s=self.examples_per_s,
            limited_by=self.limited_by,
            notes=tuple(n for n in (self.pipeline_note, self.model_note) if n),
            pipeline_note=self.pipeline_note,
            model_note=self.model_note,
            service_sizing=self.sizing,
        )

    def to_json(self) -> dict[str, Any]:
        return self.figures().to_json()


def with_bound_mode(config: Config, mode: str) -> Config:
    """`config` marked so that the child measures only one half of the script."""
    return replace(config, meta={**dict(config.meta), BOUND_META_KEY: mode})


def bound_mode(config: Config) -> str | None:
    mode = config.meta.get(BOUND_META_KEY)
    return mode if mode in (PIPELINE_ONLY, MODEL_ONLY) else None


def pipeline_sizing(
    cpu: CpuUsage | None, examples: int, steps: int, model_rate: float | None
) -> ServiceSizing | None:
    """The sizing from the pipeline-alone trial: what its child measured (`CpuMeter`, in
    elements) scaled to examples by the trial's examples per element."""
    if cpu is None or model_rate is None or steps <= 0 or examples <= 0:
        return None
    return _size_service(
        pipeline_rate=cpu.elements_per_s * examples / steps,
        busy_cores=cpu.busy_cores,
        model_rate=model_rate,
        host_cores=usable_cores(),
        unit="examples",
    )


# --- child side ---------------------------------------------------------------------


def cache_for_model_only(ds: Any, iterate: Callable[[Any], Any]) -> Any:
    """``ds.take(k).cache().repeat()``, with the cache filled before it is returned, so
    the measured window never includes the pipeline's first pass. `iterate` is the
    unpatched ``Dataset.__iter__``. The filled cache is returned as a dataset of its own
    variant, which holds no Python reference to `ds` (the cache lives in the C++
    dataset): `ds` can be freed, and the caller can keep the cache for later epochs. A
    dataset built inside a ``tf.function`` cannot be iterated eagerly: its cache fills
    during the first k steps, which the trial's warm-up mostly covers."""
    import tensorflow as tf

    cached = ds.take(MODEL_ONLY_ELEMENTS).cache()
    if tf.inside_function():
        return cached.repeat()
    for _ in iterate(cached):
        pass
    return tf.data.experimental.from_variant(cached._variant_tensor, cached.element_spec).repeat()


def unavailable(reason: str) -> NoReturn:
    """Leave a bound's run at once, with the reason as the last stderr line (the runner
    reports it): this half of the script cannot be measured."""
    print(f"tftune: {reason}", file=sys.stderr, flush=True)
    os._exit(EXIT_BOUND_UNAVAILABLE)


def drain_pipeline_only(
    ds: Any,
    stream: int | None,
    iterate: Callable[[Any], Any],
    on_cpu: Callable[[CpuUsage], None] | None = None,
) -> None:
    """Iterate `ds` without training, its iterator timed by the step clock as the
    consumer's would be (stream `stream`), until the parent stops the process; then
    leave without running the script's training. `on_cpu` gets the CPU the pipeline
    used (`CpuMeter`, for the service sizing)."""
    import tensorflow as tf

    if tf.inside_function():
        # The dataset lives in the function's graph; it cannot be drained from here. An
        # exception would be wrapped by autograph into an unreadable StagingError.
        unavailable(NOT_IN_FUNCTION)
    iterator = iterate(ds)
    if stream is not None:
        iterator._tftune_stream = stream  # the patched __next__ times this iterator
    meter = CpuMeter(on_cpu)
    for _ in iterator:
        meter.tick()
    os._exit(0)  # the dataset ended: the parent measures what ran
