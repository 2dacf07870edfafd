"""What the child's patches share: the hooks they call and the state they keep.

`Hooks` is the contract between the patches and whoever runs them (the bootstrap's
discovery recorder, step clock writer and profiler, or nothing for ``tftune.apply``):
the patches call a hook when it is set, at the moment described beside it. `SiteCall`
and `IterationInfo` are the frozen facts those hooks receive.

`PatcherState` holds the state of one `Patcher` (tuner/child/patcher.py). The patches
are split by job into classes that all build on it (`DatasetOps`, `StepClock`,
`Streams`, `DistributePatches`, `KerasPatches`), and `Patcher` combines them: one object
per process, so a stream number, a ring or a watched weight is the same for every patch.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from tftune.core.learning import OptimizerSeen
from tftune.core.trial_notes import OutputPrecisionFinding
from tftune.probes.advice.service_sizing import CpuUsage
from tftune.probes.live.clock_events import EpochStart
from tftune.probes.live.epoch_stall import PipelineStage
from tftune.tuner.child.loss_log import LossLog
from tftune.tuner.child.nanwatch import _WeightWatch
from tftune.tuner.child.ring import _Ring
from tftune.tuner.child.roles import Roles
from tftune.tuner.fixes.training_calls import CompileCall, FitCall, StepFunction
from tftune.tuner.searchspace.config import Config, SiteConfig


@dataclass(frozen=True, slots=True)
class SiteCall:
    """A user call of a tf.data transformation, as written (before any override)."""

    site: str
    op: str
    as_written: SiteConfig
    function: str | None


@dataclass(frozen=True, slots=True)
class IterationInfo:
    """The dataset a loop iterates, as the script built it."""

    site: str | None
    final_prefetch: bool
    batched: bool
    threadpool_size: int | None
    deterministic: bool | None
    stream: int | None = None  # the clock's stream number (when streams are followed)
    lineage: tuple[str, ...] = ()  # the user's call sites the dataset was built through
    # For discovery: the pipeline stage by stage (`lineage.pipeline_chain`), and how the
    # loop iterates it (`tuner.fixes.rewrites`: fit, fit_steps, eager, graph, other).
    chain: tuple[PipelineStage, ...] = ()
    loop: str | None = None


@dataclass(slots=True)
class Hooks:
    """What the patched functions call back into (discovery recorder, step clock...)."""

    on_site: Callable[[SiteCall], None] | None = None
    on_iterate: Callable[[IterationInfo], None] | None = None
    # Called in Python when the consumer requests each element (profile markers only:
    # it costs a Python call per step).
    on_request: Callable[[int], object] | None = None
    # Step records handed over in batches: (stream, rows of request_ns, deliver_ns,
    # examples). This is the measuring clock; it runs no Python per step in graphs.
    on_records: Callable[[int, list[tuple[int, int, int]]], object] | None = None
    on_nan: Callable[[str, float], None] | None = None
    # A finding about the script as it runs (e.g. a 16-bit output layer), reported at
    # once: a measured trial is stopped by a signal, before any end-of-run hook.
    on_finding: Callable[[OutputPrecisionFinding], None] | None = None
    # What a pipeline drained alone used (`probes.advice.service_sizing.CpuMeter`), as it goes.
    on_cpu: Callable[[CpuUsage], None] | None = None
    # A new stream: (stream, the call site that built its dataset, the place that
    # iterates it); and a stream found to be training: (stream, how it was told).
    on_stream: Callable[[int, str | None, str | None], None] | None = None
    on_training: Callable[[int, str], None] | None = None
    # A new iterator over a stream's dataset, made eagerly (an epoch of Keras `fit`, a
    # `for` loop's start, an `iter()`). The parent spreads each epoch's first-step stall
    # over the epoch and names its cause (`probes.live.training_time`, `probes.live.epoch_stall`).
    on_epoch: Callable[[EpochStart], None] | None = None
    # The script's first line is about to run: the child's wall clock in ns (its preamble,
    # up to the first training step, is timed from here).
    on_start: Callable[[int], None] | None = None
    # A Keras fit call, as the script made it (discovery: the one-iterator rewrite).
    on_fit: Callable[[FitCall], None] | None = None
    # A Keras compile call, and the function that applies the first update eagerly
    # (discovery: the compute switches).
    on_compile: Callable[[CompileCall], None] | None = None
    on_step_function: Callable[[StepFunction], None] | None = None
    # The training loss as read (tuner/child/loss_log.py): (ns, loss, place) samples, the
    # places read so far, and why a loss could not be read (None: every one was).
    on_losses: Callable[[list[tuple[int, float, int]], list[str], str | None], None] | None = None
    # A Keras optimizer built by the script (the learning check's scaled rate).
    on_optimizer: Callable[[OptimizerSeen], None] | None = None
    notes: list[str] = field(default_factory=list)


class CheckPoints(Protocol):
    """Where the patches hand the check run its places (tuner/child/check_run.py)."""

    def at_dataset(self, ds: Any, batched: bool, then_leave: bool = True) -> None: ...

    def at_fit(
        self,
        model: Any,
        arguments: MutableMapping[str, Any],
        fit: Callable[..., Any],
        compile_: Callable[..., Any],
    ) -> NoReturn: ...

    def at_step(
        self, where: MutableMapping[str, Any] | None, name: str | None, optimizers: Sequence[Any]
    ) -> None: ...


class PatcherState:
    """The state every part of the `Patcher` reads and writes (one per process)."""

    def __init__(self, config: Config, script_dir: str, hooks: Hooks | None = None) -> None:
        self.config = config
        self.script_dir = os.path.abspath(script_dir)
        self.hooks = hooks or Hooks()
        self.instrument_clock = False
        # (site, place) of the training dataset, from discovery: the bound analysis
        # transforms only that one (`Streams.prepare`); None: every iterated dataset.
        self.training_at: tuple[str | None, str | None] | None = None
        self.seen_sites: set[str] = set()
        # The pipeline screen (tuner/child/screen_drain.py): record the calls that build
        # datasets; the site a replayed call is made at; the sites a rebuild reached.
        self.recording = False
        self.forced_site: str | None = None
        self.replay_reached: set[str] | None = None
        self.batch_seen = False  # a user batch call was seen: elements count as batches
        # How the dataset being prepared is iterated (`IterationInfo.loop`): inside Keras
        # fit (with or without steps_per_epoch), or from the script's own frame.
        self.in_fit: str | None = None
        # Fit's repeated validation set and its steps (the one-iterator rewrite): each
        # evaluate of it is a pass of its stream (`keras_fit._patch_evaluate`).
        self.held_validation: tuple[Any, Any] | None = None
        self.user_iter = False
        self._eager_step_seen = False  # the first eager update was looked at
        self.optimizers: list[Any] = []  # the Keras optimizers that applied updates
        self.losses: LossLog | None = None  # the training loss, read where measured
        # tftune optimize's check run (tuner/child/check_run.py), where the config asks.
        self.check_run: CheckPoints | None = None
        self._prefixes: tuple[str, ...] = ()
        self._streams = 0
        self._lock = threading.Lock()
        self._tf_patched = False
        self._keras_patched: set[str] = set()
        self._warned = False
        self.last_stream: int | None = None
        self.last_distributed_stream: int | None = None
        self._inside = threading.local()  # .distributed: a distributed fetch is running
        self._batched: dict[int, bool] = {}
        self._eager_rows: dict[int, list[tuple[int, int, int]]] = {}
        self._eager_flushed: dict[int, int] = {}
        self._rings: dict[int, _Ring] = {}
        # place -> [weak reference to the dataset last given the stream, stream]
        self._streams_by_place: dict[tuple[str, int, str | None, bool], list[list[Any]]] = {}
        self._places: dict[int, str | None] = {}  # the place each stream was last reported at
        self._model_only_cache: dict[int, Any] = {}
        # stream -> the pipeline as built (`pipeline_chain`), a weak reference to the
        # user's dataset it last prepared, and whether the next epoch's is another one.
        self._chains: dict[int, tuple[PipelineStage, ...]] = {}
        self._sources: dict[int, Any] = {}
        self._rebuilt: dict[int, bool] = {}
        self._epochs_seen: set[int] = set()
        self._weights = _WeightWatch()
        self.roles = Roles(on_training=self._on_training)
        self._poller: threading.Thread | None = None
        self._stopping = threading.Event()
        self._flush_lock = threading.Lock()
        self._ring_lock = threading.Lock()

    def _on_training(self, stream: int, how: str) -> None:
        if self.hooks.on_training is not None:
            self.hooks.on_training(stream, how)
