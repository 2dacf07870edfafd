"""Child side: tf.distribute's iterators on the step clock.

A distributed step fetches one element per replica; the clock counts it once, with the
examples of every replica (see `DistributePatches._patch_distributed`).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any

from tftune.tuner.child.lineage import describe
from tftune.tuner.child.streams import Streams


class DistributePatches(Streams):
    """``DistributedDataset.__iter__`` and the distributed iterators' get-next."""

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
                    source = getattr(dataset, "_original_dataset", None)
                    site = describe(source).site if source is not None else None
                    patcher.undrainable_here(site)
                    made_ns = time.time_ns()
                    iterator = original(dataset)
                    if patcher.instrument_clock:
                        stream = patcher._new_stream(dataset, site)
                        patcher.distributed_made(stream, source)
                        patcher._batched[stream] = True
                        patcher.last_distributed_stream = stream
                        with contextlib.suppress(AttributeError):
                            iterator._tftune_stream = stream
                        patcher.iterator_made(stream, dataset, made_ns)
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
