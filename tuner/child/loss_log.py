"""Child side: the training loss as the script computes it, with the child's clock.

Two readings, never both for one loop:

- Keras ``fit``: the batch logs (`fit_batch`). Keras reports the loss as a running mean
  over the epoch, so the mean loss of the steps since the last call is
  ``(n * mean_n - m * mean_m) / (n - m)``; the count starts again with each epoch.
- A custom loop: the target given to ``GradientTape.gradient`` (`tape`), eager or while
  a ``tf.function`` is traced. Eagerly the tensor is kept and read when the log is
  drained, so the step never waits for it; in a graph a timestamp and one queue op per
  step log the time and the loss, a queue per place (the step clock's ring does the same,
  tuner/child/ring.py).
  Inside an XLA cluster no such op can run: the loss is then not read, and said so.

Each sample is (child wall clock ns, loss, the place that computed it): the parent times
it with the training-time clock (`tftune.tuner.trial.losses`). The log is drained by
the step clock's flush (every ``CLOCK_FLUSH_S``), so it adds no thread.
"""

from __future__ import annotations

import threading
import time
from types import FrameType
from typing import Any

from tftune.core.learning import FIT_LOSS
from tftune.tuner.child.ring import RING_STEPS


class LossLog:
    """The loss samples of one process, until they are drained."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, Any, int]] = []  # (ns, loss or eager tensor, place)
        self._places: dict[str, int] = {}
        self._queues: dict[int, Any] = {}  # place -> its graph queue
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._fit_seen = (0, 0.0)  # (steps so far in this epoch, their mean loss)
        self.unread: str | None = None  # why a loss could not be read
        self._last_call: tuple[int, int, int] | None = None  # (frame id, offset, order)

    def place_of(self, frame: FrameType | None) -> str:
        """The place of a ``GradientTape.gradient`` call made from `frame`: its function
        (autograph's generated one named as the script's) and the call's order in that
        run of it. The same loss keeps its place eager and compiled, across retraces and
        replicas; a second tape in one step (a GAN) gets another."""
        if frame is None:
            return "?"
        name = frame.f_code.co_name.removeprefix("tf__")
        last = self._last_call
        again = last is not None and last[0] == id(frame) and frame.f_lasti > last[1]
        order = last[2] + 1 if again and last is not None else 0
        self._last_call = (id(frame), frame.f_lasti, order)
        return f"{name}#{order}"

    def place(self, where: str) -> int:
        with self._lock:
            return self._places.setdefault(where, len(self._places))

    @property
    def places(self) -> list[str]:
        """The places read so far, in the order of their numbers."""
        with self._lock:
            return sorted(self._places, key=self._places.__getitem__)

    def fit_batch(self, batch: int, running_mean: float) -> None:
        """Keras' logs after `batch` (0-based within the epoch): the epoch's mean so far."""
        steps = batch + 1
        before, mean_before = self._fit_seen
        if steps <= before:  # a new epoch
            before, mean_before = 0, 0.0
        self._fit_seen = (steps, running_mean)
        loss = (steps * running_mean - before * mean_before) / (steps - before)
        self._add(time.time_ns(), loss, self.place(FIT_LOSS))

    def tape(self, target: Any, where: str) -> None:
        """The loss given to ``GradientTape.gradient`` at `where`."""
        import tensorflow as tf

        place = self.place(where)
        if not tf.inside_function():
            self._add(time.time_ns(), target, place)
            return
        from tensorflow.python.framework import ops
        from tensorflow.python.ops import control_flow_util

        if control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()):
            self.unread = "the loss is computed inside an XLA-compiled function"
            return
        loss = target if target.shape.rank == 0 else tf.reduce_mean(target)
        loss = loss if loss.dtype == tf.float32 else tf.cast(loss, tf.float32)
        with tf.control_dependencies([loss]):
            now = tf.timestamp()
        self._graph_queue(place).enqueue((now, loss))  # two ops a step for a float32 scalar

    def _graph_queue(self, place: int) -> Any:
        import tensorflow as tf

        with self._lock:
            queue = self._queues.get(place)
            if queue is None:
                with tf.init_scope(), tf.device("/CPU:0"):
                    queue = tf.queue.FIFOQueue(
                        RING_STEPS,
                        [tf.float64, tf.float32],
                        shapes=[[], []],
                        name=f"tftune_losses_{place}",
                    )
                self._queues[place] = queue
            return queue

    def _add(self, at_ns: int, loss: Any, place: int) -> None:
        with self._lock:
            self._pending.append((at_ns, loss, place))

    def drain(self) -> list[tuple[int, float, int]]:
        """Every sample logged since the last drain, read as numbers, in time order. One
        drain at a time (the clock's thread and the loop's own may both call): a queue's
        ``dequeue_up_to`` waits for as many elements as its size said."""
        with self._drain_lock:
            return self._drain()

    def _drain(self) -> list[tuple[int, float, int]]:
        with self._lock:
            pending, self._pending = self._pending, []
            queues = list(self._queues.items())
        out = [(ns, _as_float(v), place) for ns, v, place in pending]
        for place, queue in queues:
            waiting = int(queue.size())
            if waiting > 0:
                stamps, losses = (t.numpy() for t in queue.dequeue_up_to(waiting))
                out += [
                    (int(s * 1e9), float(v), place) for s, v in zip(stamps, losses, strict=True)
                ]
        return sorted(out)


def _as_float(value: Any) -> float:
    """A loss as a number: a Python float, or an eager tensor's mean (read now)."""
    if isinstance(value, float):
        return value
    try:
        import numpy as np

        return float(np.mean(value.numpy() if hasattr(value, "numpy") else value))
    except Exception:
        return float("nan")
