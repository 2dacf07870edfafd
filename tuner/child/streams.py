"""Child side: the dataset a loop iterates becomes a numbered stream.

`Streams.prepare` is called where the script starts iterating a dataset (``__iter__``,
autograph's dataset loop). It puts the config's global options and a final prefetch on
it (`apply_globals`), reads it from a tf.data service when the config says so
(tuner/child/service_read.py), applies the bound analysis' transformation
(tuner/searchspace/bounds.py) and,
when measuring, gives it a stream number: one per place in the user's code that
iterates (`_new_stream`), reported to the parent with its call site and place
(``hooks.on_stream``). The step clock (tuner/child/step_clock.py) counts steps per stream.
"""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import Any

from tftune.probes.live.clock_events import EpochStart
from tftune.probes.live.epoch_stall import PipelineStage
from tftune.tuner.child.datasets import (
    DatasetOps,
    _emulate_injected_prefetch,
    _no_options,
    _original_iter,
    _tag,
    apply_globals,
)
from tftune.tuner.child.lineage import describe, is_per_device, pipeline_chain
from tftune.tuner.child.rewrite_apply import EpochView, epoch_view, finite_length
from tftune.tuner.child.screen_drain import lineage_sites, run_screen, screen_spec, unscreenable
from tftune.tuner.child.service_read import distribute_at_cut
from tftune.tuner.child.state import IterationInfo
from tftune.tuner.child.step_clock import StepClock
from tftune.tuner.fixes.training_calls import LOOP_EAGER, LOOP_GRAPH, LOOP_OTHER
from tftune.tuner.searchspace import bounds


class Streams(DatasetOps, StepClock):
    """Preparing the iterated dataset, and numbering its stream by place and liveness."""

    # ---- the iterated dataset -----------------------------------------------------
    def prepare(self, ds: Any, dataset_clock: bool = False) -> Any:
        """The dataset to iterate instead of `ds`: options and a final prefetch.

        When measuring, it gets a stream number; its iterators are timed where the
        consumer calls them (`_timed_next`). A loop that iterates the dataset without an
        iterator (autograph's ``for x in ds`` inside a ``tf.function``) needs the clock
        inside the dataset instead (`dataset_clock`).

        The prepared dataset is cached on `ds` by a weak reference: it holds `ds` (its
        input chain), so a strong one would be a cycle that keeps every dataset alive
        until the cyclic GC runs, and `_new_stream` tells datasets apart by whether they
        are alive. It lives while an iterator over it does; the next epoch may prepare it
        again, in the same stream (`ds` keeps its stream number).
        """
        if getattr(ds, "_tftune_is_prepared", False):
            return ds
        cached_ref = getattr(ds, "_tftune_prepared", None)
        cached = cached_ref() if cached_ref is not None else None
        if cached is not None:
            return cached
        self._warn_unknown_sites()
        info = describe(ds, batched_default=self.batch_seen)
        stream: int | None = None
        # tf.distribute's per-device parts read from a multi-device iterator still being
        # built: drained alone (the screen, the pipeline alone) they would wait forever,
        # and their fetches are the distributed step's own: no stream, no screen, no bound
        # (`distributed_made` speaks for the distributed dataset).
        per_device = is_per_device(ds)
        if self.instrument_clock and not per_device:
            stream = getattr(ds, "_tftune_stream_no", None)
            if stream is None:
                stream = self._new_stream(ds, info.site)
                with contextlib.suppress(AttributeError):
                    ds._tftune_stream_no = stream
            else:  # iterated again, maybe elsewhere (a peek first, then the training loop)
                self._report_stream(stream, info.site, self._user_frame())
            self.last_stream = stream
            self._batched[stream] = info.batched
            if self.hooks.on_epoch is not None:
                self._note_source(stream, ds)
            info = replace(info, stream=stream)
        if self.hooks.on_iterate is not None:
            lineage = tuple(sorted(lineage_sites(ds)))
            loop = self._loop_kind(dataset_clock)
            self.hooks.on_iterate(
                replace(info, lineage=lineage, chain=pipeline_chain(ds), loop=loop)
            )
        training_here = self._is_training_at(info.site) and not per_device
        if training_here:
            self._look_before_training(ds, info)
        src = ds
        if self.config.data_service is not None and training_here:
            # tftune optimize --data-service (tuner/child/service_read.py): read from the service.
            src = distribute_at_cut(ds, self.config.data_service, trial=self.instrument_clock)
        out = apply_globals(src, self.config, info)
        # Bound analysis (tftune optimize, tuner/searchspace/bounds.py): measure one half
        # of the script.
        bound = bounds.bound_mode(self.config) if training_here else None
        if bound == bounds.PIPELINE_ONLY and stream is not None:
            # No model, no update: the drained dataset is what is measured.
            self.roles.declare(stream, "the pipeline alone (bound analysis)")
        if bound == bounds.MODEL_ONLY:
            out = self._model_only(out, stream)
        if stream is not None and dataset_clock and self.hooks.on_request is not None:
            # Profile markers: a Python call per request, from a stage of the dataset.
            # (The measuring clock for such loops is in the loop body: `_clocked_scan`.)
            out = _emulate_injected_prefetch(out)
            out = self._with_request_marks(out, stream)
        if out is not ds or stream is not None:
            with contextlib.suppress(AttributeError, TypeError):
                if out is ds:
                    out = out.with_options(_no_options())
                _tag(out, info.site)
                out._tftune_stream = stream
                out._tftune_is_prepared = True
                ds._tftune_prepared = weakref.ref(out)
        if bound == bounds.PIPELINE_ONLY:
            bounds.drain_pipeline_only(out, stream, _original_iter(), self.hooks.on_cpu)
        return out

    def _look_before_training(self, ds: Any, info: IterationInfo) -> None:
        """What `tftune optimize` runs on the training dataset before its study, each in
        a run of its own that leaves after it: the rewrites' equivalence check
        (tuner/child/equivalence.py) and the pipeline screen (tuner/child/screen_drain.py)."""
        if self.check_run is not None:
            self.check_run.at_dataset(ds, bool(info.batched))
        screen = screen_spec(self.config)
        if screen is not None:
            run_screen(self, ds, info, screen, _original_iter(), apply_globals)

    def _loop_kind(self, dataset_clock: bool) -> str:
        """How the dataset being prepared is iterated (`tuner.fixes.rewrites`' loop words)."""
        import tensorflow as tf

        if self.in_fit is not None:
            return self.in_fit
        if dataset_clock or not tf.executing_eagerly():
            return LOOP_GRAPH
        return LOOP_EAGER if self.user_iter else LOOP_OTHER

    def iterator_made(self, stream: int, dataset: Any, made_ns: int) -> None:
        """An iterator over `stream`'s dataset was made at `made_ns` (the child's wall
        clock, as the step clock's): an epoch starts (``hooks.on_epoch``), with the
        pipeline as built for a stream's first epoch and a rebuilt one. Only eagerly: an
        iterator made while a ``tf.function`` is traced is made once, not per epoch."""
        on_epoch = self.hooks.on_epoch
        if on_epoch is None:
            return
        import tensorflow as tf

        if not tf.executing_eagerly():
            return
        rebuilt = self._rebuilt.pop(stream, False)
        first = stream not in self._epochs_seen
        self._epochs_seen.add(stream)
        chain = self._chains.get(stream) if first or rebuilt else None
        on_epoch(EpochStart(stream, made_ns, _cardinality(dataset), rebuilt, chain))

    def epoch_view_of(self, ds: Any, make: Callable[[Any], Any]) -> EpochView | None:
        """The one-iterator rewrite (`Config.one_iterator`) of a loop that iterates `ds`
        eagerly: this epoch's view of one iterator over ``ds.repeat()`` (`epoch_view`),
        made by `make` from the prepared dataset (`prepare`: options, clock). An epoch
        read from the held iterator is still an epoch start for the step clock. None
        where `ds` has no known, finite length or is iterated while a graph is traced."""
        import tensorflow as tf

        length = finite_length(ds)
        if length is None or not tf.executing_eagerly():
            return None
        made_ns = time.time_ns()
        view = epoch_view(ds, length, lambda repeated: make(self.prepare(repeated)))
        if view.reused:
            stream = getattr(view.iterator, "_tftune_stream", None)
            if stream is not None and self.hooks.on_epoch is not None:
                self.hooks.on_epoch(EpochStart(int(stream), made_ns, length, False, None))
        return view

    def distributed_made(self, stream: int, source: Any) -> None:
        """An iterator over a tf.distribute dataset (stream `stream`) built from the
        user's `source` dataset: reported as iterated, with its lineage; its pipeline, then
        the split (`distribute`), for the epoch-start diagnosis."""
        info = describe(source, batched_default=True) if source is not None else None
        if info is not None and self.hooks.on_iterate is not None:
            lineage = tuple(sorted(lineage_sites(source)))
            self.hooks.on_iterate(replace(info, batched=True, stream=stream, lineage=lineage))
        if self.hooks.on_epoch is not None and stream not in self._chains:
            built = pipeline_chain(source) if source is not None else ()
            self._chains[stream] = (*built, PipelineStage("distribute"))

    def undrainable_here(self, site: str | None) -> None:
        """The training dataset, built at `site`, is iterated here through tf.distribute,
        whose per-device parts cannot be drained alone: a pipeline screen or a bound
        analysis run leaves at once, saying so."""
        if not self._is_training_at(site):
            return
        screen = screen_spec(self.config)
        if screen is not None:
            unscreenable(screen, bounds.DISTRIBUTED)
        if bounds.bound_mode(self.config) is not None:
            bounds.unavailable(bounds.DISTRIBUTED)

    def _note_source(self, stream: int, ds: Any) -> None:
        """The user's dataset `stream` iterates now: its pipeline, and whether it is
        another one than last time (a dataset built anew each epoch)."""
        before = self._sources.get(stream)
        self._rebuilt[stream] = before is not None and before() is not ds
        with contextlib.suppress(TypeError):
            self._sources[stream] = weakref.ref(ds)
        if stream not in self._chains or self._rebuilt[stream]:
            self._chains[stream] = pipeline_chain(ds)

    def _place(self, frame: FrameType | None) -> str | None:
        """Where the user iterates: `file:line` relative to the script's folder, or the
        absolute path of a file outside it."""
        if frame is None:
            return None
        return self.site_of(frame) or f"{frame.f_code.co_filename}:{frame.f_lineno}"

    def _is_training_at(self, site: str | None) -> bool:
        """Whether the dataset being iterated here is the training one discovery found
        (the bound analysis transforms it alone); True when none was named."""
        if self.training_at is None:
            return True
        return (site, self._place(self._user_frame())) == self.training_at

    def _model_only(self, ds: Any, stream: int | None) -> Any:
        """The model-only bound's cached elements, filled once per stream: an epoch that
        prepares its dataset again, or a dataset rebuilt every epoch, reuses them rather
        than filling the cache (the pipeline's time) inside the measured window."""
        import tensorflow as tf

        if stream is None or tf.inside_function():
            return bounds.cache_for_model_only(ds, _original_iter())
        with self._lock:
            cached = self._model_only_cache.get(stream)
        if cached is None:
            cached = bounds.cache_for_model_only(ds, _original_iter())
            with self._lock:
                self._model_only_cache[stream] = cached
        return cached

    def _new_stream(self, ds: Any = None, site: str | None = None) -> int:
        """A stream number for a dataset about to be iterated, with its ring made now.

        A stream is a place in the user's code that iterates: the first frame outside
        TensorFlow, Keras and tftune. Inside a ``tf.function`` trace, the dataset is
        rebuilt on each retrace; its place keeps it one stream, so the retrace creates no
        new state. Eagerly, a dataset built at one call site (`site`) and iterated at one
        place takes over the stream of one built and iterated there before that is gone:
        a loop that builds a fresh dataset every epoch trains on one stream, where a new
        stream per epoch would end the measurement with the first epoch (it follows one
        stream once its window has begun). Datasets there that are all alive (training
        and validation from one helper, or Keras `fit` with `validation_data`) are
        streams of their own."""
        import tensorflow as tf

        key: tuple[str, int, str | None, bool] | None = None
        frame = self._user_frame()
        eager = tf.executing_eagerly()
        if frame is not None:
            key = (frame.f_code.co_filename, frame.f_lineno, site if eager else None, eager)
        ref: weakref.ReferenceType[Any] | None = None
        if eager and ds is not None:
            with contextlib.suppress(TypeError):
                ref = weakref.ref(ds)
        with self._lock:
            held = self._streams_by_place.setdefault(key, []) if key is not None else []
            mine = [e for e in held if ds is not None and e[0] is not None and e[0]() is ds]
            gone = [e for e in held if not eager or e[0] is None or e[0]() is None]
            for entry in mine or gone[:1]:  # iterated here again, or a successor
                entry[0] = ref
                return int(entry[1])
            self._streams += 1
            stream = self._streams
            if key is not None:
                held.append([ref, stream])
        self._ring(stream)
        self._report_stream(stream, site, frame)
        return stream

    def _user_frame(self) -> FrameType | None:
        """The first frame outside TensorFlow, Keras and tftune: where the user iterates."""
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(self._prefixes):
            frame = frame.f_back
        return frame

    def _report_stream(self, stream: int, site: str | None, frame: FrameType | None) -> None:
        """Tell the parent where a stream is built and iterated, when that is news: the
        last place it is iterated at names it (the training loop, after a peek)."""
        place = self._place(frame)
        if self.hooks.on_stream is None or self._places.get(stream) == place:
            return
        self._places[stream] = place
        self.hooks.on_stream(stream, site, place)

    def _warn_unknown_sites(self) -> None:
        """Once, when iteration starts: config sites the script never called (stale)."""
        if self._warned:
            return
        self._warned = True
        missing = sorted(set(self.config.sites) - self.seen_sites)
        if missing:
            message = (
                f"config names call sites this script does not have: {', '.join(missing)}; "
                "the rest of the config is applied"
            )
            self.hooks.notes.append(message)
            print(f"tftune: warning: {message}", file=sys.stderr, flush=True)


def _cardinality(dataset: Any) -> int:
    """Elements per epoch as tf.data knows them (-1: infinite, -2: unknown). A distributed
    dataset's count is of its global batches, where TensorFlow exposes it."""
    from tensorflow.data.experimental import UNKNOWN_CARDINALITY

    with contextlib.suppress(Exception):
        value = dataset.cardinality
        return int(value() if callable(value) else value)
    return int(UNKNOWN_CARDINALITY)
