"""Child side: the rewrites a config asks for, applied to the script's own pipeline.

A rewrite changes a pipeline's shape, where a knob changes an argument
(`tftune.tuner.fixes.rewrites` says which ones exist, when each applies and how each is
checked). The patches apply them where the script builds or iterates its datasets:

- **cache** (`with_cache`): ``cache()`` right after the map or interleave at a call site
  (`SiteConfig.cache`), in memory or in a file under the folder the config names;
- **order** (`shuffle_above_maps`): the shuffle at a call site moved above the maps
  directly before it (`SiteConfig.shuffle_first`): its buffer then fills with the maps'
  inputs (file names, lines), and the maps run after it. A map is remembered with its
  call (`remember_call`) so that it can be made again over the shuffled input;
- **a filter moved** (`filter_above_map`): ``map(f).filter(p)`` made as
  ``filter(p).map(f)`` where `p` reads only what `f` passes through unchanged, in its
  place (`filter_plan`): the map runs only on the elements kept;
- **files** (`as_interleave`): a ``flat_map`` whose function opens a file reader read
  as an ``interleave`` of several files at once (`SiteConfig.files_at_once`);
- **vectorize** (`batch_before_map`): ``map(f).batch(b)`` made as ``batch(b).map(f)``
  (`SiteConfig.vectorize` at the map's line), with `f` as it is where it works on a
  batch, or through ``tf.vectorized_map``: one call a batch, not one an element;
- **one iterator** (`Config.one_iterator`): Keras ``fit`` over a finite dataset trains on
  ``ds.repeat()`` with ``steps_per_epoch`` set to the dataset's length (and validation
  likewise: `one_iterator_fit`); a loop that iterates a finite dataset eagerly each
  epoch gets an `EpochView` of one iterator over ``ds.repeat()`` that ends after one
  epoch's elements, as a new iterator would.

The equivalence check (`tuner/child/equivalence.py`) runs before any of them is
measured; here they are applied as the config says.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import re
import threading
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from tftune.tuner.fixes.training_calls import FitCall
from tftune.tuner.searchspace.config import CACHE_MEMORY, VECTORIZE_BATCH

CALL_ATTR = "_tftune_call"
# Where one-iterator state lives on the user's dataset (`EpochView`).
HELD_ATTR = "_tftune_held"


@dataclass(frozen=True, slots=True)
class MadeBy:
    """How a dataset was made by a user's call: `fn` (the patched op) over `args` (the
    input dataset first) and `kwargs`, at `site`."""

    op: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    site: str | None = None


def remember_call(result: Any, made: MadeBy) -> None:
    with contextlib.suppress(AttributeError, TypeError):
        setattr(result, CALL_ATTR, made)


def _original(name: str) -> Callable[..., Any]:
    from tensorflow.python.data.ops import dataset_ops

    method = getattr(dataset_ops.DatasetV2, name)
    return getattr(method, "__tftune_original__", method)  # type: ignore[no-any-return]


# --- cache ----------------------------------------------------------------------------

_CACHE_FILES: list[str] = []
_CACHE_LOCK = threading.Lock()


def cache_file(folder: str, site: str) -> str:
    """A file cache's path prefix for `site`, private to this process: a cache file left
    by another run (of other data, or one still being written) is never read."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", site).strip("_") or "site"
    return os.path.join(folder, f"tftune-cache-{name}-{os.getpid()}")


def with_cache(ds: Any, where: str, site: str) -> Any:
    """``ds.cache()`` in memory, or ``ds.cache(file)`` under the folder `where`."""
    cache = _original("cache")
    if where == CACHE_MEMORY:
        return cache(ds)
    os.makedirs(where, exist_ok=True)
    path = cache_file(where, site)
    with _CACHE_LOCK:
        if not _CACHE_FILES:
            atexit.register(_remove_cache_files)
        _CACHE_FILES.append(path)
    return cache(ds, path)


def _remove_cache_files() -> None:
    for prefix in _CACHE_FILES:
        for path in glob.glob(glob.escape(prefix) + "*"):
            with contextlib.suppress(OSError):
                os.remove(path)


# --- order ----------------------------------------------------------------------------


def maps_before(ds: Any) -> list[MadeBy]:
    """The user's ``map`` calls directly before `ds`, nearest first (stopping at anything
    else: a batch, a filter, a dataset the script did not make through a map)."""
    found: list[MadeBy] = []
    current = ds
    while len(found) < 64:
        made: MadeBy | None = getattr(current, CALL_ATTR, None)
        if made is None or made.op != "map" or not made.args:
            break
        found.append(made)
        current = made.args[0]
    return found


def shuffle_above_maps(
    ds: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    remap: Callable[[MadeBy, Any], Any],
) -> Any | None:
    """``ds.shuffle(*args, **kwargs)`` with the shuffle moved above the maps directly
    before it: the maps' input shuffled, then each map made again over it (`remap`, so
    that its call site's knobs still apply). None where no map is directly before."""
    maps = maps_before(ds)
    if not maps:
        return None
    shuffled = _original("shuffle")(maps[-1].args[0], *args, **kwargs)
    for made in reversed(maps):
        shuffled = remap(made, shuffled)
    return shuffled


# --- a filter moved ----------------------------------------------------------------------


def _through_identities(t: Any) -> Any:
    while t.op.type == "Identity" and t.op.inputs:
        t = t.op.inputs[0]
    return t


def filter_plan(mapped: Any, filtered: Any) -> str | None:
    """Why the filter made over the map `mapped` (`filtered`) cannot go above it, in
    words; None where it can: its predicate reads only components of the element that
    the map passes through unchanged, each in its own place, so that the predicate, as it
    is, reads the same values from the map's input."""
    try:
        graph = mapped._map_func.function.graph
        predicate = filtered._predicate.function.graph
        n_in = len(_flat(mapped._input_dataset.element_spec))
    except AttributeError:
        return "the map's or the predicate's function cannot be read"
    n_out = len(_flat(mapped.element_spec))
    if n_in != n_out:
        return f"the map makes {n_out} components of {n_in}: the predicate's would move"
    position = {t.name: i for i, t in enumerate(graph.inputs[:n_in])}
    for j, t in enumerate(predicate.inputs[:n_out]):
        if not t.consumers():
            continue
        source = _through_identities(graph.outputs[j]).name
        if position.get(source) != j:
            return f"the predicate reads component {j} of the element, which the map writes"
    return None


def _flat(spec: Any) -> list[Any]:
    import tensorflow as tf

    return list(tf.nest.flatten(spec))


def filter_above_map(
    ds: Any, args: tuple[Any, ...], kwargs: dict[str, Any], remap: Callable[[MadeBy, Any], Any]
) -> Any | None:
    """``ds.filter(p)`` where `ds` is the script's map: ``filter(p)`` made over the map's
    input, then the map over what it keeps. None where it does not apply
    (`filter_plan`)."""
    made: MadeBy | None = getattr(ds, CALL_ATTR, None)
    if made is None or made.op != "map" or not made.args:
        return None
    filter_ = _original("filter")
    if filter_plan(ds, filter_(*args, **kwargs)) is not None:
        return None
    return remap(made, filter_(made.args[0], *args[1:], **kwargs))


# --- files -----------------------------------------------------------------------------


def as_interleave(args: tuple[Any, ...], kwargs: dict[str, Any], files: int) -> Any | None:
    """``ds.flat_map(f)`` (its `args` and `kwargs`) as ``ds.interleave(f,
    cycle_length=files, num_parallel_calls=files)``: `files` of the file list read at
    once, their records interleaved. None where the call has no function."""
    fn = args[1] if len(args) > 1 else kwargs.get("map_func")
    if not args or fn is None:
        return None
    interleave = _original("interleave")
    return interleave(args[0], fn, cycle_length=files, num_parallel_calls=files)


# --- vectorize ------------------------------------------------------------------------


def vectorized(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A map function of one element made over a batch of them with tf.vectorized_map."""
    import tensorflow as tf

    def over_batch(*elements: Any) -> Any:
        if len(elements) == 1:
            return tf.vectorized_map(fn, elements[0])
        return tf.vectorized_map(lambda parts: fn(*parts), elements)

    return over_batch


def batch_before_map(
    ds: Any,
    batch: Callable[[Any], Any],
    how: Callable[[str | None], str | None],
    remap: Callable[[MadeBy, Any, Callable[..., Any]], Any],
) -> Any | None:
    """``ds.batch(...)`` where `ds` is the script's map whose site the config vectorizes
    (`how(site)`: "batch" or "vectorized_map"): the batch made over the map's input
    (`batch`), then the map over the batches (`remap`, with the function as it is, or
    through tf.vectorized_map). None where it does not apply."""
    made: MadeBy | None = getattr(ds, CALL_ATTR, None)
    if made is None or made.op != "map" or not made.args:
        return None
    way = how(made.site)
    fn = made.args[1] if len(made.args) > 1 else made.kwargs.get("map_func")
    if way is None or fn is None:
        return None
    return remap(made, batch(made.args[0]), fn if way == VECTORIZE_BATCH else vectorized(fn))


# --- one iterator ---------------------------------------------------------------------


def finite_length(ds: Any) -> int | None:
    """The dataset's elements per pass where tf.data knows them and they are finite."""
    try:
        n = int(ds.cardinality())
    except Exception:
        return None
    return n if n > 0 else None


def _dataset_length(value: Any) -> int | None:
    import tensorflow as tf

    return finite_length(value) if isinstance(value, tf.data.Dataset) else None


def fit_call(arguments: Mapping[str, Any], place: str | None) -> FitCall:
    """What a Keras ``fit`` call was given, for the one-iterator rewrite."""
    return FitCall(
        place,
        _dataset_length(arguments.get("x")),
        _dataset_length(arguments.get("validation_data")),
        arguments.get("steps_per_epoch") is not None,
        arguments.get("validation_steps") is not None,
    )


def one_iterator_fit(arguments: MutableMapping[str, Any]) -> list[str]:
    """Keras ``fit``'s bound arguments rewritten to keep one iterator: a finite dataset
    `x` without `steps_per_epoch` becomes ``x.repeat()`` with its length as
    `steps_per_epoch`, and a finite `validation_data` without `validation_steps` the same.
    Returns what changed, in words (for the notes)."""
    import tensorflow as tf

    changed: list[str] = []
    repeat = _original("repeat")
    pairs = (("x", "steps_per_epoch"), ("validation_data", "validation_steps"))
    for data_key, steps_key in pairs:
        ds = arguments.get(data_key)
        if not isinstance(ds, tf.data.Dataset) or arguments.get(steps_key) is not None:
            continue
        n = finite_length(ds)
        if n is None:
            continue
        repeated = repeat(ds)
        with contextlib.suppress(AttributeError):
            repeated._tftune_repeated_for_fit = True
        arguments[data_key] = repeated
        arguments[steps_key] = n
        changed.append(f"{data_key}.repeat(), {steps_key}={n}")
    return changed


class EpochView:
    """One epoch of a dataset, read from one iterator that lives across epochs.

    ``for x in ds`` makes a new iterator every epoch: its pipeline starts cold (buffers
    empty, a shuffle buffer refilled before the first element). With one iterator over
    ``ds.repeat()``, whatever prefetches above the repeat keeps working across the
    epoch's end. The view yields exactly one pass's elements, then ends as the epoch
    would; a view left before its end (a ``break``) leaves its iterator behind, and the
    next epoch starts a fresh one, as the script's own new iterator would have."""

    def __init__(self, held: dict[str, Any], length: int, reused: bool) -> None:
        self._held, self._length, self._given = held, length, 0
        self.reused = reused  # read from an iterator an earlier epoch left at its end

    @property
    def iterator(self) -> Any:
        return self._held["iterator"]

    def __iter__(self) -> EpochView:
        return self

    def __next__(self) -> Any:
        if self._given >= self._length:
            self._held["at_boundary"] = True
            raise StopIteration
        element = next(self._held["iterator"])
        self._given += 1
        return element

    @property
    def element_spec(self) -> Any:
        return self._held["iterator"].element_spec


_HELD: list[dict[str, Any]] = []


def _release_held() -> None:
    """Let the held iterators go while the interpreter is whole: one still prefetching
    the next epoch through a ``py_function`` would deadlock its teardown at exit."""
    for held in _HELD:
        held.pop("iterator", None)
    _HELD.clear()


def epoch_view(ds: Any, length: int, make_iterator: Callable[[Any], Any]) -> EpochView:
    """A view of `ds`'s next epoch (`EpochView`), from the iterator held on `ds` where the
    last view ended at an epoch's end, else from a new one over ``ds.repeat()``
    (`make_iterator`: prepared and clocked as the script's own iterator would be)."""
    held: dict[str, Any] | None = getattr(ds, HELD_ATTR, None)
    reused = held is not None and bool(held.get("at_boundary"))
    if held is None or not reused:
        repeated = getattr(ds, "_tftune_repeated", None)
        if repeated is None:
            repeated = _original("repeat")(ds)
            with contextlib.suppress(AttributeError):
                ds._tftune_repeated = repeated
        held = {"iterator": make_iterator(repeated)}
        with _CACHE_LOCK:
            if not _HELD:
                atexit.register(_release_held)
            _HELD.append(held)
        with contextlib.suppress(AttributeError):
            setattr(ds, HELD_ATTR, held)
    held["at_boundary"] = False
    return EpochView(held, length, reused)
