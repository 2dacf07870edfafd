"""Apply a `Config` to an unmodified script by patching tf.data and Keras in-process.

Used by the child bootstrap (trials, discovery, `tftune run`, `tftune profile`) and by
`tftune.apply()`. Nothing is imported from TensorFlow until the script imports it: a
post-import hook patches ``tensorflow`` and ``keras`` right after they load, before any
line of the script's own pipeline or model code runs.

What is patched:

- ``Dataset.map/interleave/batch/padded_batch/prefetch``: when called directly from user
  code, the call site (``file:line`` relative to the script's folder) is identified from
  the caller's frame, what the script passed is recorded (discovery), and the config's
  knobs for that site replace it.
- ``Dataset.__iter__`` and autograph's dataset ``for`` loop: the dataset that is iterated
  gets the global options (private threadpool, determinism, autotune budgets), a final
  prefetch where it has none, and, when measuring, the step clock.
- ``keras.Model.fit``: a callback that reports a NaN/inf loss; the global mixed precision
  policy is set when Keras loads, before the script can build a model.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import inspect
import math
import os
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from types import FrameType, ModuleType
from typing import Any

from tftune.probes.clock import CLOCK_BUFFER_STEPS, CLOCK_FLUSH_S
from tftune.tuner import bounds
from tftune.tuner._roles import Roles, is_trainable_float
from tftune.tuner.config import (
    AUTOTUNE,
    BOOL_SITE_KNOBS,
    Config,
    SiteConfig,
    capped_interleave_calls,
)

# Which knobs each transformation takes, by the parameter name TF uses.
OP_KNOBS: dict[str, dict[str, str]] = {
    "map": {"num_parallel_calls": "num_parallel_calls"},
    "interleave": {"num_parallel_calls": "num_parallel_calls", "cycle_length": "cycle_length"},
    "batch": {"batch_size": "batch_size"},
    "padded_batch": {"batch_size": "batch_size"},
    "prefetch": {"buffer_size": "buffer_size"},
    # tf.data.experimental.parallel_interleave(map_func, cycle_length, ...), for ds.apply().
    "parallel_interleave": {"cycle_length": "cycle_length"},
    # File readers: files read at once (None: one after the other), their I/O parallelism.
    "TFRecordDataset": {"num_parallel_calls": "num_parallel_reads"},
    "TextLineDataset": {"num_parallel_calls": "num_parallel_reads"},
    "FixedLengthRecordDataset": {"num_parallel_calls": "num_parallel_reads"},
    # A Keras PyDataset (its `__init__`, from the subclass's ``super().__init__(...)``):
    # workers, threads or processes, and the queue of batches they fill ahead.
    "PyDataset": {
        "num_parallel_calls": "workers",
        "use_multiprocessing": "use_multiprocessing",
        "buffer_size": "max_queue_size",
    },
}
# Ops that are classes: their call site names the user's class, not a function.
_CLASS_OPS = frozenset({"PyDataset"})
_DATASET_METHODS = ("map", "interleave", "batch", "padded_batch", "prefetch")
# The reader classes (tensorflow.python.data.ops.readers) whose constructors are call sites.
READERS = {
    "TFRecordDataset": "TFRecordDatasetV2",
    "TextLineDataset": "TextLineDatasetV2",
    "FixedLengthRecordDataset": "FixedLengthRecordDatasetV2",
}
_API_MODULES = (
    "tensorflow._api.v2.data.experimental",
    "tensorflow._api.v2.compat.v2.data.experimental",
    "tensorflow._api.v2.compat.v1.data.experimental",
    "tensorflow.python.data.experimental",
)
_STREAM_LIMIT = 1 << 62
RING_STEPS = 1 << 20  # rows a stream's clock queue holds between two drains
WEIGHT_CHECK_S = 1.0  # how often a custom loop's watched weights are checked for NaN
WATCHED_PER_OPTIMIZER = 4
_BATCHING_CLASSES = ("BatchDataset", "MapAndBatchDataset", "DenseToRaggedDataset")


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
    on_finding: Callable[[str], None] | None = None
    # A new stream: (stream, the call site that built its dataset, the place that
    # iterates it); and a stream found to be training: (stream, how it was told).
    on_stream: Callable[[int, str | None, str | None], None] | None = None
    on_training: Callable[[int, str], None] | None = None
    notes: list[str] = field(default_factory=list)


def _internal_prefixes() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    prefixes = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    for pkg in ("tftune", "tftune.probes", "tftune.tuner", "tftune.reports"):
        m = sys.modules.get(pkg)
        for p in getattr(m, "__path__", []) if m is not None else []:
            prefixes.add(os.path.abspath(p))  # tftune itself, wherever it is installed
    for mod in ("tensorflow", "keras", "tf_keras"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__file__", None):
            prefixes.add(os.path.dirname(os.path.abspath(str(m.__file__))))
    return tuple(os.path.join(p, "") for p in sorted(prefixes))


def _knob_value(knob: str, value: object) -> int | bool | None:
    """A knob's value as the script passed it: a bool for a flag, else `_as_int`."""
    if knob in BOOL_SITE_KNOBS:
        return value if isinstance(value, bool) else None
    return _as_int(value)


def _as_int(value: object) -> int | None:
    """A knob value as the script wrote it, when it is a concrete integer."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        import numpy as np

        if isinstance(value, np.integer):
            return int(value)
        numpy_fn = getattr(value, "numpy", None)
        if callable(numpy_fn):
            arr = np.asarray(numpy_fn())
            if arr.shape == () and np.issubdtype(arr.dtype, np.integer):
                return int(arr)
    except Exception:  # a symbolic tensor: not a concrete value
        return None
    return None


class Patcher:
    """Installs the patches once per process. `config` may be replaced before iteration."""

    def __init__(self, config: Config, script_dir: str, hooks: Hooks | None = None) -> None:
        self.config = config
        self.script_dir = os.path.abspath(script_dir)
        self.hooks = hooks or Hooks()
        self.instrument_clock = False
        self.seen_sites: set[str] = set()
        self.batch_seen = False  # a user batch call was seen: elements count as batches
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
        self._weights = _WeightWatch()
        self.roles = Roles(on_training=self._on_training)
        self._poller: threading.Thread | None = None
        self._stopping = threading.Event()
        self._flush_lock = threading.Lock()
        self._ring_lock = threading.Lock()

    # ---- installation -------------------------------------------------------------
    def install(self) -> None:
        """Patch now what is loaded, and hook what loads later."""
        if "tensorflow" in sys.modules:
            self._patch_tf()
        else:
            _PostImportHook.register("tensorflow", lambda _m: self._patch_tf())
        for name in ("keras", "tf_keras"):
            if name in sys.modules:
                self._patch_keras(sys.modules[name])
            else:
                _PostImportHook.register(name, self._patch_keras)

    def _patch_tf(self) -> None:
        if self._tf_patched:
            return
        self._tf_patched = True
        from tensorflow.python.data.ops import dataset_autograph, dataset_ops

        self._prefixes = _internal_prefixes()
        cls = dataset_ops.DatasetV2
        for op in _DATASET_METHODS:
            original = getattr(cls, op)
            setattr(cls, op, self._wrap_op(op, getattr(original, "__tftune_original__", original)))
        self._patch_parallel_interleave()
        self._patch_readers()
        original_iter = getattr(cls.__iter__, "__tftune_original__", cls.__iter__)
        patcher = self

        def tagged_iter(prepared: Any) -> Any:
            iterator = original_iter(prepared)
            stream = getattr(prepared, "_tftune_stream", None)
            if stream is not None:
                with contextlib.suppress(AttributeError):
                    iterator._tftune_stream = stream
            return iterator

        @functools.wraps(original_iter)
        def __iter__(ds: Any) -> Any:
            return tagged_iter(patcher.prepare(ds))

        __iter__.__tftune_original__ = original_iter  # type: ignore[attr-defined]
        cls.__iter__ = __iter__  # type: ignore[method-assign]

        original_scan = getattr(
            dataset_autograph._general_purpose_scan,
            "__tftune_original__",
            dataset_autograph._general_purpose_scan,
        )

        @functools.wraps(original_scan)
        def _general_purpose_scan(ds: Any, init_state: Any, body: Any) -> Any:
            prepared = patcher.prepare(ds, dataset_clock=True)
            stream = getattr(prepared, "_tftune_stream", None)
            if stream is not None:
                patcher.roles.graph_fetch(int(stream))
            if stream is not None and patcher.hooks.on_request is None:
                init_state, body = patcher._clocked_scan(int(stream), init_state, body)
            return original_scan(prepared, init_state, body)

        _general_purpose_scan.__tftune_original__ = original_scan  # type: ignore[attr-defined]
        dataset_autograph._general_purpose_scan = _general_purpose_scan
        self._patch_iterator()
        self._patch_distributed()
        if self.instrument_clock:
            self._patch_updates()

    def _on_training(self, stream: int, how: str) -> None:
        if self.hooks.on_training is not None:
            self.hooks.on_training(stream, how)

    def _patch_updates(self) -> None:
        """What tells training apart (`_roles`): calls of tf.functions, TF1 optimizers and
        raw updates of trainable variables. (Keras optimizers: `_patch_optimizer`.)"""
        from tensorflow.python.eager.polymorphic_function import polymorphic_function
        from tensorflow.python.ops import resource_variable_ops
        from tensorflow.python.training import optimizer as tf1_optimizer

        function_cls: Any = polymorphic_function.Function
        call = getattr(function_cls.__call__, "__tftune_original__", function_cls.__call__)
        function_cls.__call__ = self.roles.wrap_call(call)
        roles = self.roles

        def after_update(original: Callable[..., Any], variable_method: bool) -> Any:
            @functools.wraps(original)
            def wrapper(owner: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(owner, *args, **kwargs)
                if not variable_method or is_trainable_float(owner):
                    roles.update()
                return result

            wrapper.__tftune_original__ = original  # type: ignore[attr-defined]
            return wrapper

        targets: list[tuple[Any, str, bool]] = [(tf1_optimizer.Optimizer, "apply_gradients", False)]
        for cls in (
            resource_variable_ops.BaseResourceVariable,
            resource_variable_ops.ResourceVariable,
        ):
            targets += [
                (cls, name, True) for name in ("assign_add", "assign_sub") if name in vars(cls)
            ]
        for owner, name, variable_method in targets:
            current = getattr(owner, name)
            original = getattr(current, "__tftune_original__", current)
            setattr(owner, name, after_update(original, variable_method))

    def _patch_parallel_interleave(self) -> None:
        from tensorflow.python.data.experimental.ops import interleave_ops

        current = interleave_ops.parallel_interleave
        original = getattr(current, "__tftune_original__", current)
        wrapped = self._wrap_op("parallel_interleave", original, method=False)
        interleave_ops.parallel_interleave = wrapped
        for name in _API_MODULES:  # the public names were bound at import time
            module = sys.modules.get(name)
            if module is not None and getattr(module, "parallel_interleave", None) is current:
                module.parallel_interleave = wrapped  # type: ignore[attr-defined]

    def _patch_readers(self) -> None:
        """`tf.data.TFRecordDataset(files, num_parallel_reads=...)` and its kin: a call
        site whose knob is how many files are read at once. A reader of one file (the
        usual body of an interleave) has nothing to parallelize and is not a site."""
        from tensorflow.python.data.ops import readers

        for op, name in READERS.items():
            cls = getattr(readers, name, None)
            if cls is None:  # pragma: no cover - every TF 2.x has them
                continue
            original = getattr(cls.__init__, "__tftune_original__", cls.__init__)
            cls.__init__ = self._wrap_op(op, original, constructor=True)

    # ---- call sites ---------------------------------------------------------------
    def site_of(self, frame: FrameType | None) -> str | None:
        """`file:line` of a user frame, relative to the script folder; None if internal."""
        if frame is None:
            return None
        filename = frame.f_code.co_filename
        if filename.startswith("<") or "__autograph_generated" in filename:
            return None
        path = os.path.abspath(filename)
        if path.startswith(self._prefixes) and not path.startswith(
            os.path.join(self.script_dir, "")
        ):
            return None
        rel = os.path.relpath(path, self.script_dir).replace(os.sep, "/")
        return f"{rel}:{frame.f_lineno}"

    def _wrap_op(
        self,
        op: str,
        original: Callable[..., Any],
        method: bool = True,
        constructor: bool = False,
    ) -> Callable[..., Any]:
        signature = inspect.signature(original)
        knobs = OP_KNOBS[op]
        patcher = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            site = patcher.site_of(sys._getframe(1))
            if site is None or ((method or constructor) and not args):
                return original(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return original(*args, **kwargs)  # let TF raise its own error
            if constructor and _one_file(bound.arguments.get("filenames")):
                return original(*args, **kwargs)
            given = dict(bound.arguments)
            fn = given.get("map_func")
            name = getattr(fn, "__name__", None) if fn is not None else None
            if op in _CLASS_OPS:  # the user's class; as written includes its defaults
                with_defaults = signature.bind(*args, **kwargs)
                with_defaults.apply_defaults()
                given = dict(with_defaults.arguments)
                name = type(args[0]).__name__
            values: dict[str, Any] = {k: _knob_value(k, given.get(p)) for k, p in knobs.items()}
            written = SiteConfig(**values)
            patcher.seen_sites.add(site)
            # (A PyDataset's items are batches too.)
            patcher.batch_seen = patcher.batch_seen or op in ("batch", "padded_batch", "PyDataset")
            if patcher.hooks.on_site is not None:
                patcher.hooks.on_site(SiteCall(site, op, written, name))
            override = patcher.config.site(site)
            if override is not None:
                for knob, param in knobs.items():
                    value = getattr(override, knob)
                    if value is not None:
                        bound.arguments[param] = value
                if op == "interleave":  # TF refuses more calls than a fixed cycle length
                    calls = _as_int(bound.arguments.get("num_parallel_calls"))
                    cycle = _as_int(bound.arguments.get("cycle_length"))
                    if capped_interleave_calls(cycle, calls) != calls:
                        bound.arguments["num_parallel_calls"] = cycle
            result = original(*bound.args, **bound.kwargs)
            if constructor:
                _tag(args[0], site)
            elif method:
                _tag(result, site)
            return result

        wrapper.__tftune_original__ = original  # type: ignore[attr-defined]
        return wrapper

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
        if self.instrument_clock:
            stream = getattr(ds, "_tftune_stream_no", None)
            if stream is None:
                stream = self._new_stream(ds, info.site)
                with contextlib.suppress(AttributeError):
                    ds._tftune_stream_no = stream
            else:  # iterated again, maybe elsewhere (a peek first, then the training loop)
                self._report_stream(stream, info.site, self._user_frame())
            self.last_stream = stream
            self._batched[stream] = info.batched
            info = replace(info, stream=stream)
        if self.hooks.on_iterate is not None:
            self.hooks.on_iterate(info)
        out = apply_globals(ds, self.config, info)
        # Bound analysis (tftune optimize, tuner/bounds.py): measure one half of the script.
        bound = bounds.bound_mode(self.config)
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
            bounds.drain_pipeline_only(out, stream, _original_iter())
        return out

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
        place = None
        if frame is not None:
            place = self.site_of(frame) or f"{frame.f_code.co_filename}:{frame.f_lineno}"
        if self.hooks.on_stream is None or self._places.get(stream) == place:
            return
        self._places[stream] = place
        self.hooks.on_stream(stream, site, place)

    # ---- the consumer's clock: around the iterator's get-next -----------------------
    def _patch_iterator(self) -> None:
        from tensorflow.python.data.ops import iterator_ops

        cls = iterator_ops.OwnedIterator
        original_next = getattr(cls._next_internal, "__tftune_original__", cls._next_internal)
        original_optional = getattr(
            cls.get_next_as_optional, "__tftune_original__", cls.get_next_as_optional
        )
        patcher = self

        @functools.wraps(original_next)
        def _next_internal(it: Any) -> Any:
            stream = patcher._stream_of(it, patcher.last_stream)
            if stream is None:
                return original_next(it)
            return patcher._timed_next(stream, lambda: original_next(it), optional=False)

        @functools.wraps(original_optional)
        def get_next_as_optional(it: Any) -> Any:
            stream = patcher._stream_of(it, patcher.last_stream)
            if stream is None:
                return original_optional(it)
            return patcher._timed_next(stream, lambda: original_optional(it), optional=True)

        _next_internal.__tftune_original__ = original_next  # type: ignore[attr-defined]
        get_next_as_optional.__tftune_original__ = original_optional  # type: ignore[attr-defined]
        cls._next_internal = _next_internal  # type: ignore[method-assign]
        cls.get_next_as_optional = get_next_as_optional  # type: ignore[method-assign]

    def _patch_distributed(self) -> None:
        """tf.distribute: a step fetches one element per replica (a multi-device iterator
        under a `DistributedIterator`). The clock times the distributed fetch, once per
        step, with the examples of all replicas; the replicas' own fetches inside it are
        not clocked (they would count each step once per replica)."""
        try:
            from tensorflow.python.distribute import input_lib
        except ImportError:  # pragma: no cover - every TF 2.x has it
            return
        patcher = self
        for cls in (input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction):
            original_iter = getattr(cls.__iter__, "__tftune_original__", cls.__iter__)

            def make_iter(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
                @functools.wraps(original)
                def __iter__(dataset: Any) -> Any:
                    iterator = original(dataset)
                    if patcher.instrument_clock:
                        stream = patcher._new_stream(dataset)
                        patcher._batched[stream] = True
                        patcher.last_distributed_stream = stream
                        with contextlib.suppress(AttributeError):
                            iterator._tftune_stream = stream
                    return iterator

                __iter__.__tftune_original__ = original  # type: ignore[attr-defined]
                return __iter__

            cls.__iter__ = make_iter(original_iter)  # type: ignore[method-assign]

        base = input_lib.DistributedIteratorBase
        for name, optional in (("get_next", False), ("get_next_as_optional", True)):
            original = getattr(base, name)
            original = getattr(original, "__tftune_original__", original)

            def make_get(original: Callable[..., Any], optional: bool) -> Callable[..., Any]:
                @functools.wraps(original)
                def get(it: Any, *args: Any, **kwargs: Any) -> Any:
                    stream = patcher._stream_of(it, patcher.last_distributed_stream)
                    if stream is None:
                        return original(it, *args, **kwargs)
                    depth: int = getattr(patcher._inside, "distributed", 0)
                    patcher._inside.distributed = depth + 1
                    try:
                        return patcher._timed_next(
                            stream, lambda: original(it, *args, **kwargs), optional=optional
                        )
                    finally:
                        patcher._inside.distributed = depth

                get.__tftune_original__ = original  # type: ignore[attr-defined]
                return get

            setattr(base, name, make_get(original, optional))

    def _in_distributed_fetch(self) -> bool:
        depth: int = getattr(self._inside, "distributed", 0)
        return depth > 0

    def _stream_of(self, it: Any, fallback: int | None) -> int | None:
        """The stream an iterator's fetch is clocked on, or None (not clocked). Inside a
        tf.function an iterator is rebuilt (from its resource, or from its type spec under
        tf.distribute) without our tag: it is then `fallback`, the one of its kind most
        recently handed out (Keras: the training iterator)."""
        if not self.instrument_clock or self._in_distributed_fetch():
            return None  # (a replica's fetch within a distributed one is not a step)
        stream = getattr(it, "_tftune_stream", None)
        if stream is not None:
            return int(stream)
        import tensorflow as tf

        return None if tf.executing_eagerly() else fallback

    def _timed_next(self, stream: int, get: Callable[[], Any], optional: bool) -> Any:
        import tensorflow as tf

        if tf.executing_eagerly():
            requested = time.time_ns()
            if self.hooks.on_request is not None:
                self.hooks.on_request(stream)
            element = get()
            delivered = time.time_ns()
            self.roles.eager_fetch(stream)
            if optional:
                if not bool(element.has_value()):
                    return element
                examples = self._examples_eager(stream, element.get_value())
            else:
                examples = self._examples_eager(stream, element)
            self._eager_record(stream, requested, delivered, examples)
            return element
        return self._graph_timed_next(stream, get, optional)

    def _examples_eager(self, stream: int, element: Any) -> int:
        if not self._batched.get(stream, False):
            return 1
        leaf = _first_leaf(element)
        replicas = _replica_values(leaf)
        if replicas is not None:
            return sum(_leading(v) for v in replicas)
        if _rank(leaf) == 0:  # e.g. `enumerate()`'s index first: the batch is further on
            import tensorflow as tf

            leaf = next((v for v in tf.nest.flatten(element) if _rank(v) != 0), leaf)
        return _leading(leaf)

    def _eager_record(self, stream: int, requested: int, delivered: int, examples: int) -> None:
        with self._flush_lock:  # the poller thread may be handing this list over
            rows = self._eager_rows.setdefault(stream, [])
            rows.append((requested, delivered, examples))
            last = self._eager_flushed.get(stream, rows[0][1])
            due = len(rows) >= CLOCK_BUFFER_STEPS or (delivered - last) >= CLOCK_FLUSH_S * 1e9
            if due:
                self._eager_rows[stream] = []
                self._eager_flushed[stream] = delivered
                self._hand_over(stream, rows)  # in order: still under the lock

    def flush(self) -> None:
        """Hand over the steps buffered so far: eager lists and in-graph rings."""
        with self._flush_lock:
            for stream, rows in list(self._eager_rows.items()):
                self._eager_rows[stream] = []
                if rows:
                    self._hand_over(stream, rows)
        with self._ring_lock:
            for stream, ring in list(self._rings.items()):
                fresh = ring.poll()
                if fresh:
                    self._hand_over(stream, fresh)
        self.roles.check_fallback()

    def _hand_over(self, stream: int, rows: list[tuple[int, int, int]]) -> None:
        self.roles.delivered(stream, len(rows))
        if self.hooks.on_records is not None:
            self.hooks.on_records(stream, rows)

    def _graph_timed_next(self, stream: int, get: Callable[[], Any], optional: bool) -> Any:
        """The same clock as ops in the caller's graph: timestamps around IteratorGetNext,
        appended to an in-graph ring that a thread polls (`_Ring`). No Python per step."""
        import numpy as np
        import tensorflow as tf

        hooks = self.hooks
        self.roles.graph_fetch(stream)
        requested = tf.timestamp()
        deps = [requested]
        if hooks.on_request is not None:

            def _request() -> Any:
                assert hooks.on_request is not None
                hooks.on_request(stream)
                return np.int64(0)

            deps.append(tf.numpy_function(_request, [], tf.int64, stateful=True))
        with tf.control_dependencies(deps):
            element = get()
        if optional:

            def record() -> Any:
                value = element.get_value()
                self._graph_record(stream, requested, value)
                return tf.constant(True)

            tf.cond(element.has_value(), record, lambda: tf.constant(False))
        else:
            self._graph_record(stream, requested, element)
        return element

    def _graph_record(self, stream: int, requested: Any, element: Any) -> None:
        import tensorflow as tf

        replicas = _replica_values(_first_leaf(element))
        if replicas is None:
            leaves = [t for t in tf.nest.flatten(element) if isinstance(t, tf.Tensor)]
            examples = self._graph_examples(stream, leaves)
        else:  # one element per replica: delivered when all are, the examples summed
            leaves = [
                t
                for t in tf.nest.flatten(element, expand_composites=True)
                if isinstance(t, tf.Tensor)
            ]
            # Each replica's shape where its value is (a metadata op is placed with its
            # input: no copy of a device's batch); the sum on the host.
            counts = [self._graph_examples(stream, [v]) for v in replicas]
            if all(isinstance(c, int) for c in counts):
                examples = sum(counts)
            else:
                with tf.device("/CPU:0"):
                    examples = tf.reshape(
                        tf.add_n(
                            [
                                tf.constant(c, tf.int64) if isinstance(c, int) else c[0]
                                for c in counts
                            ]
                        ),
                        [1],
                    )
        with tf.control_dependencies(leaves):
            delivered = tf.timestamp()
        self._ring(stream).record(requested, delivered, examples)

    def _graph_examples(self, stream: int, leaves: list[Any]) -> int | Any:
        """What the ring needs to count an element's examples, with the fewest ops: a
        count known when the graph is built (the stream is unbatched, or its batch size is
        static: no op at all), else the first leaf's shape (one op), whose leading
        dimension `_Ring.poll` reads."""
        import tensorflow as tf

        if not self._batched.get(stream, False) or not leaves:
            return 1
        # The first leaf with a batch dimension (`enumerate()` puts a scalar index first).
        leaves = [next((t for t in leaves if t.shape.rank != 0), leaves[0])]
        shape = leaves[0].shape
        if shape.rank == 0:
            return 1
        if shape.rank is not None and shape[0] is not None:
            return int(shape[0])
        if shape.rank is not None:  # a dynamic batch size: the shape itself (one op)
            return tf.shape(leaves[0], out_type=tf.int64)
        # An unknown rank (e.g. a numpy_function's output without set_shape): a scalar
        # is one example, so its empty shape gets a trailing 1.
        shape_op = tf.shape(leaves[0], out_type=tf.int64)
        with tf.device("/CPU:0"):
            return tf.concat([shape_op, [1]], 0)

    def _ring(self, stream: int) -> _Ring:
        with self._lock:
            ring = self._rings.get(stream)
            if ring is None:
                ring = self._rings[stream] = _Ring(stream)
            if self._poller is None:
                self._poller = threading.Thread(
                    target=self._poll_rings, name="tftune-clock", daemon=True
                )
                self._poller.start()
        return ring

    def _poll_rings(self) -> None:
        checked, diverged = time.monotonic(), False
        while not self._stopping.wait(CLOCK_FLUSH_S):
            self.flush()
            if diverged or self.hooks.on_nan is None:
                continue
            if time.monotonic() - checked >= WEIGHT_CHECK_S:
                checked = time.monotonic()
                diverged = self._weights.diverged()
                if diverged:
                    self.hooks.on_nan("the trained weights", math.nan)

    def stop(self) -> None:
        """The script is done: stop the clock's thread and hand over what is buffered.

        Before the interpreter shuts down: a daemon thread frozen by the shutdown while
        inside TensorFlow (draining a clock queue) can hang TF's own teardown (seen with
        a `py_function` pipeline whose iterator outlives the script)."""
        self._stopping.set()
        poller = self._poller
        if poller is not None and poller is not threading.current_thread():
            poller.join(timeout=5)
        self.flush()

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

    def _clocked_scan(self, stream: int, init_state: Any, body: Any) -> tuple[Any, Any]:
        """The measuring clock for a loop that runs inside the dataset (autograph's
        ``for x in ds`` in a ``tf.function`` becomes a scan whose body is the training
        step). The body is timed where it starts (the element was delivered) and where it
        ends (the loop asks for the next one); the end time is carried in the scan state
        as the next step's request time. A step's row is logged at its start, beside the
        user's ops rather than after them, so the only op added to the step's critical
        path is the end timestamp. No extra tf.data stage is added.

        (Measured on 2 cores, a 0.35 ms step: a variable ring written after the body cost
        ~65 us per step; this costs ~20 us. `bench/bench_probe_overhead.py` part 2.)"""
        import tensorflow as tf

        ring = self._ring(stream)

        def timed(state: Any, element: Any) -> Any:
            inner, requested = state
            leaves = [t for t in tf.nest.flatten(element) if isinstance(t, tf.Tensor)]
            with tf.control_dependencies(leaves):
                delivered = tf.timestamp()
            ring.record(requested, delivered, self._graph_examples(stream, leaves))
            new_inner, outputs = body(inner, element)
            after = [t for t in tf.nest.flatten((new_inner, outputs)) if isinstance(t, tf.Tensor)]
            with tf.control_dependencies(after):
                finished = tf.timestamp()
            return (new_inner, finished), outputs

        return (init_state, tf.timestamp()), timed

    def _with_request_marks(self, ds: Any, stream: int) -> Any:
        """Profile mode, for loops without an iterator: call `hooks.on_request` when the
        consumer asks for each element (the first zip input runs first)."""
        import numpy as np
        import tensorflow as tf
        from tensorflow.python.data.ops import dataset_ops

        hooks = self.hooks
        base_map = getattr(dataset_ops.DatasetV2.map, "__tftune_original__", None)
        assert base_map is not None

        def _request(index: Any) -> Any:
            if hooks.on_request is not None:
                hooks.on_request(stream)
            return np.int64(index)

        def mark_request(i: Any) -> Any:
            return tf.numpy_function(_request, [i], tf.int64, stateful=True, name="tftune_request")

        def drop_mark(i: Any, element: Any) -> Any:
            with tf.control_dependencies([i]):
                return tf.nest.map_structure(
                    lambda t: tf.identity(t) if isinstance(t, tf.Tensor) else t, element
                )

        requests = base_map(tf.data.Dataset.range(_STREAM_LIMIT), mark_request)
        zipped = tf.data.Dataset.zip((requests, ds))
        options = tf.data.Options()
        # TF would inject a prefetch after the marking stage, which then would mark the
        # prefetch thread's requests, not the consumer's. `_emulate_injected_prefetch` has
        # already put that prefetch where TF would have put it without us.
        options.experimental_optimization.inject_prefetch = False
        return base_map(zipped, drop_mark).with_options(options)

    # ---- keras ----------------------------------------------------------------------
    def _patch_keras(self, module: ModuleType) -> None:
        name = module.__name__
        if name in self._keras_patched:
            return
        self._keras_patched.add(name)
        policy = self.config.mixed_precision
        mp: Any = getattr(module, "mixed_precision", None)
        if policy is not None and mp is not None:
            target = "float32" if policy == "off" else policy
            mp.set_global_policy(target)
            original_set = getattr(mp.set_global_policy, "__tftune_original__", None)
            original_set = original_set or mp.set_global_policy

            def set_global_policy(value: Any) -> None:
                # The config decides the policy for this run; the script's own choice is
                # overridden (and noted), or the trial would not test what it claims.
                self.hooks.notes.append(f"script set mixed precision {value!r}; kept {target}")

            set_global_policy.__tftune_original__ = original_set  # type: ignore[attr-defined]
            mp.set_global_policy = set_global_policy
        self._patch_optimizer(module)
        self._patch_py_dataset(module)
        model_cls: Any = getattr(module, "Model", None)
        callbacks_mod: Any = getattr(module, "callbacks", None)
        if model_cls is None or callbacks_mod is None:
            return
        original_fit = getattr(model_cls.fit, "__tftune_original__", model_cls.fit)
        signature = inspect.signature(original_fit)
        callback = _nan_callback(callbacks_mod.Callback, self.hooks)

        @functools.wraps(original_fit)
        def fit(model: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(model, *args, **kwargs)
            except TypeError:
                return original_fit(model, *args, **kwargs)
            given = bound.arguments.get("callbacks") or []
            bound.arguments["callbacks"] = [*list(given), callback]
            return original_fit(*bound.args, **bound.kwargs)

        fit.__tftune_original__ = original_fit  # type: ignore[attr-defined]
        model_cls.fit = fit

    def _patch_py_dataset(self, module: ModuleType) -> None:
        """A Keras ``PyDataset`` is a call site: its ``__init__`` takes `workers`,
        `use_multiprocessing` and `max_queue_size`, which Keras reads when `fit` iterates
        it. The site is the user's line that calls it (``super().__init__(...)`` in the
        subclass, or the construction of a subclass without an ``__init__``)."""
        utils: Any = getattr(module, "utils", None)
        cls: Any = getattr(utils, "PyDataset", None)
        if cls is None or "__init__" not in vars(cls):
            return
        original = vars(cls)["__init__"]
        original = getattr(original, "__tftune_original__", original)
        cls.__init__ = self._wrap_op("PyDataset", original, constructor=True)

    def _patch_optimizer(self, module: ModuleType) -> None:
        """A custom training loop's NaN check: the first time a Keras optimizer applies
        gradients (eagerly, or while a ``tf.function`` is traced), a few of the variables
        it trains are watched (`_WeightWatch`). Keras `fit` reports its loss to a
        callback instead; a loop of raw ``assign_sub`` has no policy to break it."""
        optimizers: Any = getattr(module, "optimizers", None)
        base: Any = getattr(optimizers, "Optimizer", None)
        owner = next((c for c in getattr(base, "__mro__", ()) if "apply" in vars(c)), None)
        if owner is None:
            return
        original = vars(owner)["apply"]
        original = getattr(original, "__tftune_original__", original)
        watch = self._weights

        @functools.wraps(original)
        def apply(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if self.hooks.on_nan is not None:
                given = kwargs.get("trainable_variables", args[1] if len(args) > 1 else None)
                watch.add(optimizer, given)
            result = original(optimizer, *args, **kwargs)
            if self.instrument_clock:
                self.roles.update()
            return result

        apply.__tftune_original__ = original  # type: ignore[attr-defined]
        owner.apply = apply


class _WeightWatch:
    """Tells when a custom loop's training diverged: its weights became NaN or inf.

    A NaN or inf loss makes every gradient NaN, so one optimizer step spreads it to all
    the variables it trains. A few small ones per optimizer are enough to see it (the last,
    usually the output layer's, and the smallest), read on the clock's thread every
    `WEIGHT_CHECK_S`: a copy of a few hundred numbers, nothing in the training step. An
    optimizer with loss scaling skips non-finite steps, so its weights stay finite."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()
        self._watched: list[Any] = []

    def add(self, optimizer: Any, variables: Any) -> None:
        with self._lock:
            try:
                if optimizer in self._seen:
                    return
                self._seen.add(optimizer)
            except TypeError:
                return
        if variables is None:
            variables = getattr(optimizer, "_trainable_variables", None)
        picked = _few_small_floats(list(variables or ()))
        with self._lock:
            self._watched.extend(picked)

    def diverged(self) -> bool:
        import numpy as np

        with self._lock:
            watched = list(self._watched)
        for variable in watched:
            try:
                value = np.asarray(variable.numpy(), dtype=np.float64)
            except Exception:  # a variable being rebuilt or deleted: read it next time
                continue
            if not np.isfinite(value).all():
                return True
        return False


def _few_small_floats(variables: list[Any], count: int = WATCHED_PER_OPTIMIZER) -> list[Any]:
    """The last floating-point variable and the smallest others, `count` in all."""

    def size(v: Any) -> int:
        return math.prod(int(d or 0) for d in getattr(v, "shape", ()) or ())

    floats = [v for v in variables if "float" in str(getattr(v, "dtype", ""))]
    if not floats:
        return []
    rest = sorted(floats[:-1], key=size)
    return [floats[-1], *rest[: count - 1]]


_ACTIVE: Patcher | None = None


def activate(config: Config, script_dir: str) -> Patcher:
    """Apply `config` to this process (``tftune.apply``); a second call replaces it."""
    global _ACTIVE
    if _ACTIVE is None:
        _ACTIVE = Patcher(config, script_dir)
        _ACTIVE.install()
    else:
        _ACTIVE.config = config
        _ACTIVE.script_dir = os.path.abspath(script_dir)
    return _ACTIVE


def _nan_callback(base: type, hooks: Hooks) -> Any:
    class _TftuneNanCheck(base):  # type: ignore[misc, valid-type]
        """Reports a NaN/inf loss to the trial runner (who stops the trial), and a model
        output computed in 16 bits (tuner.precision) when training begins."""

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            _report_output_precision(getattr(self, "model", None), hooks)

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if not logs or "loss" not in logs or hooks.on_nan is None:
                return
            try:
                loss = float(logs["loss"])
            except (TypeError, ValueError):
                return
            if not math.isfinite(loss):
                hooks.on_nan("loss", loss)

    return _TftuneNanCheck()


def _report_output_precision(model: Any, hooks: Hooks) -> None:
    """Check the output layer's precision once per model; never fail the user's fit."""
    from tftune.tuner.precision import check_output_layer

    if model is None or getattr(model, "_tftune_precision_checked", False):
        return
    try:
        model._tftune_precision_checked = True
        finding = check_output_layer(model)
    except Exception:
        return
    if finding is None:
        return
    if hooks.on_finding is not None:
        hooks.on_finding(finding.message())
    else:  # tftune run / tftune.apply: tell the user directly
        print(f"tftune: warning: {finding.message()}", file=sys.stderr)


def _no_options() -> Any:
    import tensorflow as tf

    return tf.data.Options()


def _first_leaf(element: Any) -> Any:
    """The first leaf in `tf.nest.flatten` order (dict keys sorted), without flattening
    the whole element: this runs on every eager step."""
    for _ in range(64):
        if isinstance(element, (tuple, list)) and element:
            element = element[0]
        elif isinstance(element, dict) and element:
            element = element[min(element)]
        else:
            break
    return element


def _replica_values(leaf: Any) -> tuple[Any, ...] | None:
    """The per-replica values of a tf.distribute value (`PerReplica`), else None."""
    # The module first: a tensor's failed attribute lookup costs a microsecond (its
    # __getattr__ builds a numpy hint), and this runs on every eager step.
    if not type(leaf).__module__.startswith("tensorflow.python.distribute"):
        return None
    values = getattr(leaf, "values", None)
    return values if isinstance(values, tuple) else None


def _rank(value: Any) -> int | None:
    """An element leaf's rank, None when unknown."""
    dims = getattr(value, "_shape_tuple", None)
    if dims is not None:
        with contextlib.suppress(Exception):
            known = dims()
            if isinstance(known, tuple):
                return len(known)
    shape = getattr(value, "shape", None)
    return len(shape) if shape is not None and getattr(shape, "rank", 0) is not None else None


def _leading(value: Any) -> int:
    """An eager element's examples: its leading dimension, 1 for a scalar."""
    dims = getattr(value, "_shape_tuple", None)  # an EagerTensor's dims, no TensorShape
    if dims is not None:
        try:
            known = dims()
        except Exception:
            known = None
        if isinstance(known, tuple):
            return int(known[0]) if known and known[0] is not None else 1
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) > 0 and shape[0] is not None:
        return int(shape[0])
    return 1


def _original_iter() -> Callable[[Any], Any]:
    """The unpatched ``Dataset.__iter__`` (for iterating without re-entering `prepare`)."""
    from tensorflow.python.data.ops import dataset_ops

    it = dataset_ops.DatasetV2.__iter__
    return getattr(it, "__tftune_original__", it)  # type: ignore[no-any-return]


def _one_file(filenames: Any) -> bool:
    """A reader's `filenames` names a single file (a string or a scalar tensor)."""
    if isinstance(filenames, (str, bytes)):
        return True
    shape = getattr(filenames, "shape", None)
    rank = getattr(shape, "rank", None)
    return rank == 0


def _tag(ds: Any, site: str | None) -> None:
    with contextlib.suppress(AttributeError):
        ds._tftune_site = site


def _inputs(ds: Any) -> Sequence[Any]:
    try:
        return list(ds._inputs())
    except Exception:
        return []


def _unwrap_options(ds: Any) -> Any:
    while type(ds).__name__ == "_OptionsDataset":
        inputs = _inputs(ds)
        if not inputs:
            break
        ds = inputs[0]
    return ds


# Datasets whose lineage cannot be walked: one passed into a tf.function as an argument,
# and tf.distribute's per-replica datasets (fed by a multi-device iterator).
_OPAQUE_DATASETS = frozenset(
    {"_VariantDataset", "_PerDeviceGenerator", "_ReincarnatedPerDeviceGenerator"}
)
# Stages whose elements come from datasets a function builds (not walkable): a flat_map or
# interleave before any batch, such as `from_generator` (Keras' PyDataset adapter).
_ELEMENTS_FROM_A_FUNCTION = ("FlatMap", "Interleave")


def _is_batched(ds: Any, depth: int = 0) -> bool | None:
    """Whether the dataset's lineage batches (and does not unbatch after); None when the
    lineage is opaque (`_OPAQUE_DATASETS`, `_ELEMENTS_FROM_A_FUNCTION`)."""
    name = type(ds).__name__
    if "Unbatch" in name or depth > 64:
        return False
    if any(name.endswith(c) for c in _BATCHING_CLASSES):
        return True
    if name in _OPAQUE_DATASETS or any(k in name for k in _ELEMENTS_FROM_A_FUNCTION):
        return None
    answers = [_is_batched(i, depth + 1) for i in _inputs(ds)]
    if any(a is True for a in answers):
        return True
    return None if any(a is None for a in answers) else False


def describe(ds: Any, batched_default: bool = False) -> IterationInfo:
    """What the script built: its last call site, final prefetch, batching, options.

    `batched_default` answers for a lineage that cannot be walked (see `_is_batched`)."""
    last = _unwrap_options(ds)
    try:
        options = ds.options()
        threadpool = options.threading.private_threadpool_size
        deterministic = options.deterministic
    except Exception:
        threadpool, deterministic = None, None
    return IterationInfo(
        site=_lineage_site(ds),
        final_prefetch="Prefetch" in type(last).__name__,
        batched=batched if (batched := _is_batched(ds)) is not None else batched_default,
        threadpool_size=threadpool or None,
        deterministic=deterministic,
    )


def _lineage_site(ds: Any, depth: int = 0) -> str | None:
    """The call site of the nearest transformation the user called on `ds`'s lineage:
    ``ds.repeat().take(n).enumerate()`` is built at its ``batch`` line."""
    site: str | None = getattr(ds, "_tftune_site", None)
    if site is not None or depth > 16:
        return site
    for parent in _inputs(ds):
        found = _lineage_site(parent, depth + 1)
        if found is not None:
            return found
    return None


def _emulate_injected_prefetch(ds: Any) -> Any:
    """Add the final prefetch TF's ``inject_prefetch`` rewrite would add to `ds`."""
    from tensorflow.python.data.ops import dataset_ops

    try:
        options = ds.options()
        inject = options.experimental_optimization.inject_prefetch is not False
        autotune = options.autotune.enabled is not False
    except Exception:
        return ds
    if not (inject and autotune) or "Prefetch" in type(_unwrap_options(ds)).__name__:
        return ds
    prefetch = getattr(dataset_ops.DatasetV2.prefetch, "__tftune_original__", None)
    return (prefetch or dataset_ops.DatasetV2.prefetch)(ds, AUTOTUNE)


def apply_globals(ds: Any, config: Config, info: IterationInfo) -> Any:
    """Options on the iterated dataset and a final prefetch where the script has none."""
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops

    out = ds
    if config.final_prefetch is not None and not info.final_prefetch:
        prefetch = getattr(dataset_ops.DatasetV2.prefetch, "__tftune_original__", None)
        prefetch = prefetch or dataset_ops.DatasetV2.prefetch
        out = prefetch(out, config.final_prefetch)
    options = tf.data.Options()
    changed = False
    if config.threadpool_size is not None:
        options.threading.private_threadpool_size = config.threadpool_size
        changed = True
    if config.deterministic is not None:
        options.deterministic = config.deterministic
        changed = True
    if config.autotune_cpu_budget is not None and config.autotune_cpu_budget != AUTOTUNE:
        options.autotune.cpu_budget = config.autotune_cpu_budget
        changed = True
    if config.autotune_ram_budget_mb is not None:
        options.autotune.ram_budget = config.autotune_ram_budget_mb * 2**20
        changed = True
    if changed:
        out = out.with_options(options)
    return out


class _PostImportHook(importlib.abc.MetaPathFinder):
    """Runs a callback right after a named module has finished importing."""

    _instance: _PostImportHook | None = None

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}

    @classmethod
    def register(cls, name: str, callback: Callable[[ModuleType], None]) -> None:
        if cls._instance is None:
            cls._instance = cls()
            sys.meta_path.insert(0, cls._instance)
        cls._instance.callbacks.setdefault(name, []).append(callback)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        # `importlib.util.find_spec` (TensorFlow probes for Keras that way) also lands
        # here without importing: callbacks are only consumed when the module executes.
        if not self.callbacks.get(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _CallbackLoader(spec.loader, self, fullname)
                return spec
        return None


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, hook: _PostImportHook, name: str) -> None:
        self._inner = inner
        self._hook = hook
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        result: ModuleType | None = self._inner.create_module(spec)
        return result

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._inner
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        self._inner.exec_module(module)
        for callback in self._hook.callbacks.pop(self._name, []):
            callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Ring:
    """The in-graph step log of one stream: (request s, delivery s, examples) per step.

    Queues that graph code appends to with one op per step (no Python, no ``tf.cond``, no
    read-modify-write of a variable) and that a Python thread drains every
    `CLOCK_FLUSH_S`. Each enqueue is atomic, so a drain never sees a torn row.

    A step whose examples are known when the graph is built (a static batch size, an
    unbatched stream) logs only its two timestamps, into a queue kept for that count: no
    constant op runs per step. Otherwise a `tf.queue.PaddingFIFOQueue` takes the first
    leaf's shape (one op; any rank) and the drain reads its leading dimension. A queue
    holds up to `RING_STEPS` rows; it fills only if the draining thread cannot run for
    that many steps (seconds of a held GIL), and then a step waits: it is never lost. The
    ops exist only on the host, so on a GPU machine they add no copy.
    """

    def __init__(self, stream: int) -> None:
        self.stream = stream
        self._queues: dict[int | None, Any] = {}  # examples per step (None: by shape)
        self._lock = threading.Lock()

    def _queue(self, examples: int | None) -> Any:
        import tensorflow as tf

        with self._lock:
            queue = self._queues.get(examples)
            if queue is None:
                with tf.init_scope(), tf.device("/CPU:0"):
                    if examples is None:
                        queue = tf.queue.PaddingFIFOQueue(
                            RING_STEPS,
                            [tf.float64, tf.float64, tf.int64],
                            shapes=[[], [], [None]],
                            name=f"tftune_clock_{self.stream}",
                        )
                    else:
                        queue = tf.queue.FIFOQueue(
                            RING_STEPS,
                            [tf.float64, tf.float64],
                            shapes=[[], []],
                            name=f"tftune_clock_{self.stream}_x{examples}",
                        )
                self._queues[examples] = queue
            return queue

    def record(self, requested: Any, delivered: Any, examples: int | Any) -> Any:
        """Log one step: `examples` is a count known now, or the element's shape."""
        if isinstance(examples, int):
            return self._queue(examples).enqueue((requested, delivered))
        return self._queue(None).enqueue((requested, delivered, examples))

    def poll(self) -> list[tuple[int, int, int]]:
        with self._lock:
            queues = list(self._queues.items())
        rows: list[tuple[int, int, int]] = []
        for examples, queue in queues:
            waiting = int(queue.size())
            if waiting <= 0:
                continue
            parts = [t.numpy() for t in queue.dequeue_up_to(waiting)]
            if examples is None:
                requested, delivered, shapes = parts
                # Every logged shape has at least one dimension (`_graph_examples`); a zero
                # is a real empty batch (tf.distribute pads replicas that ran out with it).
                lead = shapes[:, 0] if shapes.shape[1] else [1] * len(requested)
            else:
                requested, delivered = parts
                lead = [examples] * len(requested)
            rows.extend(
                (int(r * 1e9), int(d * 1e9), int(e))
                for r, d, e in zip(requested, delivered, lead, strict=True)
            )
        if len(queues) > 1:  # one stream traced with a static and a dynamic shape
            rows.sort(key=lambda row: row[1])
        return rows
