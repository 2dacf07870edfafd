"""Child side: the consumer's step clock, eagerly and in graphs.

A step is one element the training loop asks for (requested) and gets (delivered).
`StepClock` times it where the consumer calls the iterator's get-next: eagerly with
``time.time_ns()`` around the call, buffered per stream and handed over in batches
(``hooks.on_records``); in a traced graph with ``tf.timestamp()`` ops around
``IteratorGetNext`` that append to an in-graph ring (tuner/child/ring.py) which a thread
(the poller) drains every ``CLOCK_FLUSH_S``. A loop with no iterator (autograph's
``for x in ds`` in a ``tf.function``) is clocked in the loop body (`_clocked_scan`);
profile markers for it come from a request-marking stage (`_with_request_marks`). The
poller also checks the watched weights for NaN (tuner/child/nanwatch.py).

Every fetch also tells the roles (tuner/child/roles.py) that its stream delivered, so
they can tell the training stream apart.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from tftune.probes.live.clock import CLOCK_BUFFER_STEPS, CLOCK_FLUSH_S
from tftune.tuner.child.nanwatch import WEIGHT_CHECK_S
from tftune.tuner.child.ring import _Ring
from tftune.tuner.child.state import PatcherState

_STREAM_LIMIT = 1 << 62


class StepClock(PatcherState):
    """The step clock around the iterators' get-next, its rings and its poller."""

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
        return examples_of(element) if self._batched.get(stream, False) else 1

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
        if due:
            self.flush_losses()

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
        self.flush_losses()
        self.roles.check_fallback()

    def flush_losses(self) -> None:
        """Hand over the loss samples logged so far (`LossLog`)."""
        log, hook = self.losses, self.hooks.on_losses
        if log is None or hook is None:
            return
        samples = log.drain()
        if samples or log.unread:
            hook(samples, log.places, log.unread)

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


def examples_of(element: Any) -> int:
    """A batched eager element's examples: the leading dimension of its first batched
    leaf (summed over replicas of a distributed one)."""
    leaf = _first_leaf(element)
    replicas = _replica_values(leaf)
    if replicas is not None:
        return sum(_leading(v) for v in replicas)
    if _rank(leaf) == 0:  # e.g. `enumerate()`'s index first: the batch is further on
        import tensorflow as tf

        leaf = next((v for v in tf.nest.flatten(element) if _rank(v) != 0), leaf)
    return _leading(leaf)


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
