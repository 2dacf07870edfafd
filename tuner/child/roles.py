"""Child side: which streams are training. Training is what updates weights.

A script iterates many datasets: it counts one before training, peeks a batch, `adapt`s a
preprocessing layer, validates every epoch, calls `predict` in a callback. Only the
stream whose elements feed optimizer updates is training; the others are never clocked
as steps nor profiled. A stream is declared training (`on_training`, once) when:

- inside one traced graph (a ``tf.function``: Keras ``fit``'s train function, ``next``
  in a ``tf.function``, autograph's ``for x in ds`` loop), an element of it is fetched
  and an update is applied: declared while the graph is traced, before its first step;
- eagerly, it delivered elements between consecutive updates `CONFIRM_UPDATES` times in
  a row. An update is an optimizer applying gradients eagerly, or a call of a
  ``tf.function`` whose trace applied one. One update credits every stream fetched since
  the update before it and resets the others: a counting loop or a peek before training
  is credited once, then reset; a validation pass between epochs likewise. An update with
  no fetch since the last (a GAN step applies two optimizers) changes nothing.

A script that never updates anything (a pipeline benchmark: a loop that only consumes)
has no training stream. Where the caller allows it (`fallback_s`), once streams have
delivered for that long with no update anywhere in the process, the busiest one is
declared instead, as `FALLBACK_HOW` says; unless the process has shown that it is about
to train (`expect_training`: Keras ``fit`` called, a ``GradientTape`` entered), however
long it counts, builds a vocabulary or calls ``adapt`` first.

Two streams that both feed updates (a GAN's, multi-task loops) are both declared. An
update is a Keras optimizer's ``apply`` (``apply_gradients`` calls it), TF1's
``Optimizer.apply_gradients`` (``minimize`` calls it), or an ``assign_add``/``assign_sub``
on a trainable floating-point variable (a raw SGD loop).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from tftune.core.vocabulary import FALLBACK_HOW

# Consecutive updates a stream must have fed, eagerly, to be training.
CONFIRM_UPDATES = 2


class Roles:
    """The streams' roles, from fetches and updates reported by the patches."""

    def __init__(
        self,
        on_training: Callable[[int, str], None] | None = None,
        fallback_s: float | None = None,
    ) -> None:
        self.on_training = on_training
        self.fallback_s = fallback_s
        self.updated = False  # any update, anywhere in the process
        self.expecting = False  # the process has shown it trains: no fallback
        self.training: set[int] = set()
        self._elements: dict[int, int] = {}
        self._first_element: float | None = None
        self._lock = threading.Lock()
        self._calls = threading.local()  # .stack: the tf.functions this thread is in
        self._stacks: dict[int, list[Any]] = {}  # thread id -> that thread's stack
        self._fetched: set[int] = set()  # eager fetches since the last update
        self._credit: dict[int, int] = {}

    # ---- what the patches report -------------------------------------------------------
    def eager_fetch(self, stream: int) -> None:
        with self._lock:
            self._fetched.add(stream)

    def graph_fetch(self, stream: int) -> None:
        """An element of `stream` is fetched inside a graph being traced."""
        marks = _marks(_outermost_graph())
        if marks is None:
            return
        marks["streams"].add(stream)
        for fn in self._functions():
            fmarks = _marks(fn)
            if fmarks is not None:
                fmarks["streams"].add(stream)
        if marks["updates"]:
            self.declare(stream, "fetched and updated in one tf.function")

    def delivered(self, stream: int, elements: int) -> None:
        """The clock handed over `elements` steps of `stream` (for the fallback)."""
        with self._lock:
            self._elements[stream] = self._elements.get(stream, 0) + elements
            if self._first_element is None:
                self._first_element = time.monotonic()

    def check_fallback(self) -> None:
        """Declare the busiest stream when nothing updates (see the module docstring)."""
        if self.fallback_s is None or self.updated or self.training or self.expecting:
            return
        with self._lock:
            first, counts = self._first_element, dict(self._elements)
        if first is None or time.monotonic() - first < self.fallback_s or not counts:
            return
        self.declare(max(counts, key=lambda n: counts[n]), FALLBACK_HOW)

    def expect_training(self) -> None:
        """The script is about to train (``fit`` called, a tape entered): the busiest
        loop never stands in for training now."""
        self.expecting = True

    def update(self) -> None:
        """An update was applied: eagerly, or traced into a graph."""
        import tensorflow as tf

        self.updated = True
        if not tf.inside_function():
            self._eager_update()
            return
        marks = _marks(_outermost_graph())
        if marks is not None:
            marks["updates"] = True
            for stream in list(marks["streams"]):
                self.declare(stream, "fetched and updated in one tf.function")
        for fn in self._functions():
            fmarks = _marks(fn)
            if fmarks is not None:
                fmarks["updates"] = True

    # ---- tf.function calls ---------------------------------------------------------------
    def wrap_call(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``Function.__call__``, tracking the functions a thread is in: an update traced
        inside marks them, and a call of one that updates is an update."""
        roles = self

        @functools.wraps(original)
        def __call__(fn: Any, *args: Any, **kwargs: Any) -> Any:
            stack = roles._stack()
            stack.append(fn)
            try:
                return original(fn, *args, **kwargs)
            finally:
                stack.pop()
                if not stack:
                    roles._called(fn)

        __call__.__tftune_original__ = original  # type: ignore[attr-defined]
        return __call__

    def _called(self, fn: Any) -> None:
        marks = getattr(fn, "_tftune_roles", None)
        if marks is None:
            return
        if marks["updates"] and marks["streams"]:
            for stream in list(marks["streams"]):
                self.declare(stream, "fetched and updated in one tf.function")
        elif marks["updates"]:
            self._eager_update()
        else:
            for stream in list(marks["streams"]):
                self.eager_fetch(stream)

    def _stack(self) -> list[Any]:
        stack: list[Any] | None = getattr(self._calls, "stack", None)
        if stack is None:
            stack = self._calls.stack = []
            with self._lock:
                self._stacks[threading.get_ident()] = stack
        return stack

    def _functions(self) -> list[Any]:
        """The tf.functions being called: this thread's, or (a replica thread of
        tf.distribute, which traces for the caller) every thread's."""
        mine = self._stack()
        if mine:
            return list(mine)
        with self._lock:
            return [fn for stack in self._stacks.values() for fn in list(stack)]

    # ---- decisions -----------------------------------------------------------------------
    def _eager_update(self) -> None:
        with self._lock:
            fetched, self._fetched = self._fetched, set()
            if not fetched:
                return  # a second optimizer in the same step
            confirmed = []
            for stream in list(self._credit):
                if stream not in fetched:
                    self._credit[stream] = 0
            for stream in fetched - self.training:
                self._credit[stream] = self._credit.get(stream, 0) + 1
                if self._credit[stream] >= CONFIRM_UPDATES:
                    confirmed.append(stream)
        for stream in confirmed:
            self.declare(stream, "fed consecutive optimizer updates")

    def declare(self, stream: int, how: str) -> None:
        with self._lock:
            if stream in self.training:
                return
            self.training.add(stream)
            self._credit.pop(stream, None)
        if self.on_training is not None:
            self.on_training(stream, how)


def _marks(owner: Any) -> dict[str, Any] | None:
    """The role marks kept on a traced graph or a tf.function."""
    if owner is None:
        return None
    marks: dict[str, Any] | None = getattr(owner, "_tftune_roles", None)
    if marks is None:
        marks = {"updates": False, "streams": set()}
        try:
            owner._tftune_roles = marks
        except (AttributeError, TypeError):
            return None
    return marks


def _outermost_graph() -> Any:
    """The outermost graph being traced (a nested tf.function is inlined into it)."""
    from tensorflow.python.framework import func_graph, ops

    graph = ops.get_default_graph()
    if not isinstance(graph, func_graph.FuncGraph):
        return None
    while isinstance(getattr(graph, "outer_graph", None), func_graph.FuncGraph):
        graph = graph.outer_graph
    return graph


def is_trainable_float(variable: Any) -> bool:
    """A variable an update of which is training: trainable and floating-point."""
    with contextlib.suppress(Exception):
        return bool(variable.trainable) and bool(variable.dtype.is_floating)
    return False
