"""Child side: tell when a custom training loop diverged, from its weights.

Keras ``fit`` reports its loss to a callback (tuner/child/keras_fit.py); a custom loop has no
such place. `_WeightWatch` watches a few of the variables each Keras optimizer trains
(registered by the optimizer hook) and the clock's thread checks them every
`WEIGHT_CHECK_S` (tuner/child/step_clock.py).
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any

WEIGHT_CHECK_S = 1.0  # how often a custom loop's watched weights are checked for NaN
WATCHED_PER_OPTIMIZER = 4


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
