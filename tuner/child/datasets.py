"""Child side: the Dataset ops the script calls, and the dataset it iterates.

- `DatasetOps` wraps ``Dataset.map/interleave/batch/padded_batch/prefetch``,
  ``tf.data.experimental.parallel_interleave`` and the file readers' constructors: when
  called directly from user code, the call site (``file:line`` relative to the script's
  folder) is identified from the caller's frame, what the script passed is recorded
  (``hooks.on_site``: the as-written values), and the config's knobs for that site
  replace it.
- `apply_globals` puts the config's global options and a final prefetch on the iterated
  dataset (what the script built on it is read by `tuner/child/lineage.py`).

`OP_KNOBS` (which knobs each op takes) and `READERS` are the vocabulary of call sites:
the search space and the emitted config read them too.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from tftune.tuner.child.lineage import unwrap_options
from tftune.tuner.child.rewrite_apply import (
    MadeBy,
    as_interleave,
    batch_before_map,
    filter_above_map,
    remember_call,
    shuffle_above_maps,
    with_cache,
)
from tftune.tuner.child.screen_drain import Replay, remember
from tftune.tuner.child.state import IterationInfo, PatcherState, SiteCall
from tftune.tuner.searchspace.config import (
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
# No knob: only their line is recorded (and a rewrite may make them otherwise).
_MARKED_METHODS = ("shuffle", "cache", "flat_map", "filter")
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


class DatasetOps(PatcherState):
    """The wrapped Dataset ops, readers and ``parallel_interleave``: call sites and knobs."""

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

    def _patch_marked_ops(self) -> None:
        """``shuffle`` and ``cache`` take no knob, but an epoch-start stall's cause and fix
        name their lines (`pipeline_chain`): the result is marked with the user's line. A
        shuffle whose site the config moves (`SiteConfig.shuffle_first`) is made above
        the maps before it (`rewrites.shuffle_above_maps`)."""
        from tensorflow.python.data.ops import dataset_ops

        cls = dataset_ops.DatasetV2
        patcher = self
        for op in _MARKED_METHODS:
            current = getattr(cls, op)
            original = getattr(current, "__tftune_original__", current)

            def make(op: str, original: Callable[..., Any]) -> Callable[..., Any]:
                @functools.wraps(original)
                def marked(*args: Any, **kwargs: Any) -> Any:
                    site = patcher.forced_site or patcher.site_of(sys._getframe(1))
                    patcher.forced_site = None
                    override = patcher.config.site(site) if site is not None else None
                    result = None
                    if op == "shuffle" and override is not None and override.shuffle_first:
                        result = shuffle_above_maps(args[0], args[1:], kwargs, patcher._remap)
                    if op == "flat_map" and override is not None and override.files_at_once:
                        result = as_interleave(args, kwargs, override.files_at_once)
                    if op == "filter" and override is not None and override.filter_first:
                        result = filter_above_map(args[0], args, kwargs, patcher._remap)
                    if result is None:
                        result = original(*args, **kwargs)
                    if site is not None:
                        patcher.seen_sites.add(site)
                        with contextlib.suppress(AttributeError):
                            result._tftune_mark_site = site
                    if patcher.recording and args:  # replayed at its site (the check)
                        remember(result, Replay(marked, args, kwargs, site))
                    return result

                marked.__tftune_original__ = original  # type: ignore[attr-defined]
                return marked

            setattr(cls, op, make(op, original))

    def _rewritten(
        self,
        made: MadeBy,
        override: SiteConfig | None,
        original: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """The op's call (`original` with the knobs applied: `args`, `kwargs`) with the
        rewrites the config asks for around it: a batch made before a vectorized map,
        a map remembered (a moved shuffle makes it again), a cache after a map."""
        op, site, result = made.op, made.site, None
        if op == "batch" and made.args:  # a map before it the config vectorizes
            result = batch_before_map(
                made.args[0],
                lambda ds: original(ds, *args[1:], **kwargs),
                self._vectorize_way,
                self._remap_with,
            )
        if result is None:
            result = original(*args, **kwargs)
        if op == "map":
            remember_call(result, made)
        if override is not None and override.cache and op in ("map", "interleave") and site:
            _tag(result, site)
            result = with_cache(result, override.cache, site)
        return result

    def _remap(self, made: MadeBy, ds: Any) -> Any:
        """A user's map made again over `ds`, at its own call site (its knobs apply)."""
        self.forced_site = made.site
        try:
            return made.fn(ds, *made.args[1:], **made.kwargs)
        finally:
            self.forced_site = None

    def _remap_with(self, made: MadeBy, ds: Any, fn: Callable[..., Any]) -> Any:
        """A user's map made again over `ds` with the function `fn`, at its own site."""
        args, kwargs = made.args[2:], {k: v for k, v in made.kwargs.items() if k != "map_func"}
        self.forced_site = made.site
        try:
            return made.fn(ds, fn, *args, **kwargs)
        finally:
            self.forced_site = None

    def _vectorize_way(self, site: str | None) -> str | None:
        override = self.config.site(site) if site is not None else None
        return override.vectorize if override is not None else None

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
            # A call the pipeline screen replays is made at the user's site it records.
            site = patcher.forced_site or patcher.site_of(sys._getframe(1))
            patcher.forced_site = None
            result = knobbed(site, args, kwargs)
            if patcher.recording and (method or constructor) and args:
                if constructor:
                    remember(args[0], Replay(type(args[0]), args, kwargs, site, True))
                else:
                    remember(result, Replay(wrapper, args, kwargs, site))
            return result

        def knobbed(site: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
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
            if override is not None and patcher.replay_reached is not None:
                patcher.replay_reached.add(site)
            if override is not None:
                for knob, param in knobs.items():
                    value = getattr(override, knob)
                    if value is not None:
                        bound.arguments[param] = value
                if op == "interleave":  # TF refuses more calls than a fixed cycle length
                    calls = _as_int(bound.arguments.get("num_parallel_calls"))
                    cycle = _as_int(bound.arguments.get("cycle_length"))
                    capped = capped_interleave_calls(cycle, calls, len(os.sched_getaffinity(0)))
                    if capped != calls:
                        bound.arguments["num_parallel_calls"] = capped
            made = MadeBy(op, wrapper, args, dict(kwargs), site)
            result = patcher._rewritten(made, override, original, bound.args, bound.kwargs)
            if constructor:
                _tag(args[0], site)
            elif method:
                _tag(result, site)
            return result

        wrapper.__tftune_original__ = original  # type: ignore[attr-defined]
        return wrapper


def _no_options() -> Any:
    import tensorflow as tf

    return tf.data.Options()


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


def _emulate_injected_prefetch(ds: Any) -> Any:
    """Add the final prefetch TF's ``inject_prefetch`` rewrite would add to `ds`."""
    from tensorflow.python.data.ops import dataset_ops

    try:
        options = ds.options()
        inject = options.experimental_optimization.inject_prefetch is not False
        autotune = options.autotune.enabled is not False
    except Exception:
        return ds
    if not (inject and autotune) or "Prefetch" in type(unwrap_options(ds)).__name__:
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
    if config.prefetch_to_device:
        out = to_device(out)
    return out


def to_device(ds: Any) -> Any:
    """`ds`'s next batches copied to the first GPU ahead of the step (the last stage);
    `ds` itself where no GPU is visible."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    if not gpus:
        return ds
    return ds.apply(tf.data.experimental.prefetch_to_device(gpus[0].name))
