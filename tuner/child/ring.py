"""Child side: the in-graph step log of one stream (`_Ring`), drained by the clock's thread.

Graph code appends one row per step with one op; `StepClock` (tuner/child/step_clock.py) makes
a ring per stream and its poller hands the rows over every ``CLOCK_FLUSH_S``.
"""

from __future__ import annotations

import threading
from typing import Any

RING_STEPS = 1 << 20  # rows a stream's clock queue holds between two drains


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
