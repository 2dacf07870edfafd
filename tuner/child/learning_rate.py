"""Child side: the Keras optimizers the script builds, and their learning rate scaled
where the config asks (`Config.learning_rate_scale`, with a batch change).

The base optimizer's ``__init__`` is wrapped (the class in the MRO that takes
``learning_rate``), so every optimizer the script builds is seen with the rate it
passed, and the scale applies at the optimizer's own ``learning_rate``:

- a number becomes the number times the factor, or, with a warm-up, a schedule that
  ramps linearly from the number to its scaled value over the first updates;
- a ``LearningRateSchedule`` becomes one that returns its value times the factor (the
  ramp likewise);
- anything else (a callable, a variable, a tensor) is left as written, and said so.

A ``LossScaleOptimizer`` wraps an inner optimizer that is scaled on its own; its own rate
is not the training's.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from tftune.core.learning import OptimizerSeen

WRAPPER_NAMES = frozenset({"LossScaleOptimizer"})


def _owner(base: Any) -> Any:
    for cls in getattr(base, "__mro__", ()):
        init = vars(cls).get("__init__")
        if init is not None and "learning_rate" in inspect.signature(init).parameters:
            return cls
    return None


def _user_site(
    frame: FrameType | None, site_of: Callable[[FrameType | None], str | None]
) -> str | None:
    while frame is not None:
        site = site_of(frame)
        if site is not None:
            return site
        frame = frame.f_back
    return None


def patch_optimizers(
    module: Any,
    site_of: Callable[[FrameType | None], str | None],
    scale: Callable[[], tuple[float | None, int]],
    seen: Callable[[OptimizerSeen], None] | None,
    notes: list[str],
) -> None:
    """Wrap the Keras base optimizer's ``__init__`` in `module` (``keras``/``tf_keras``)."""
    optimizers = getattr(module, "optimizers", None)
    owner = _owner(getattr(optimizers, "Optimizer", None))
    if owner is None:
        return
    original = vars(owner)["__init__"]
    original = getattr(original, "__tftune_original__", original)
    signature = inspect.signature(original)
    schedules = getattr(optimizers, "schedules", None)
    schedule_base = getattr(schedules, "LearningRateSchedule", None)

    @functools.wraps(original)
    def __init__(optimizer: Any, *args: Any, **kwargs: Any) -> None:
        name = type(optimizer).__name__
        try:
            bound = signature.bind(optimizer, *args, **kwargs)
        except TypeError:
            original(optimizer, *args, **kwargs)
            return
        rate = bound.arguments.get("learning_rate")
        factor, warmup_steps = scale()
        if name not in WRAPPER_NAMES:
            number = float(rate) if isinstance(rate, (int, float)) else None
            kind = type(rate).__name__ if number is None and rate is not None else None
            if seen is not None:
                site = _user_site(sys._getframe(1), site_of)
                seen(OptimizerSeen(site, name, number, kind))
            if factor is not None:
                scaled = _scaled(rate, factor, warmup_steps, schedule_base)
                if scaled is None:
                    notes.append(f"learning rate of {name} not scaled: it is a {kind}")
                else:
                    bound.arguments["learning_rate"] = scaled
        original(*bound.args, **bound.kwargs)

    __init__.__tftune_original__ = original  # type: ignore[attr-defined]
    owner.__init__ = __init__


def _scaled(rate: Any, factor: float, warmup_steps: int, schedule_base: Any) -> Any:
    """The learning rate `rate` times `factor`, ramped over `warmup_steps`; None where it
    is neither a number nor a schedule."""
    is_number = isinstance(rate, (int, float)) and not isinstance(rate, bool)
    is_schedule = schedule_base is not None and isinstance(rate, schedule_base)
    if not (is_number or is_schedule):
        return None
    if is_number and warmup_steps <= 0:
        return float(rate) * factor
    return _scaled_schedule(schedule_base)(rate, factor, warmup_steps)


@functools.cache
def _scaled_schedule(schedule_base: Any) -> Any:
    class TftuneScaledRate(schedule_base):  # type: ignore[misc, valid-type]
        """The script's learning rate times a factor, ramped linearly from the rate as
        written over the first `warmup_steps` updates."""

        def __init__(self, inner: Any, factor: float, warmup_steps: int) -> None:
            super().__init__()
            self.inner, self.factor, self.warmup_steps = inner, factor, warmup_steps

        def __call__(self, step: Any) -> Any:
            import tensorflow as tf

            base = self.inner(step) if callable(self.inner) else self.inner
            base = tf.cast(base, tf.float32)
            if self.warmup_steps <= 0:
                return base * self.factor
            done = tf.minimum(1.0, (tf.cast(step, tf.float32) + 1.0) / self.warmup_steps)
            return base * (1.0 + (self.factor - 1.0) * done)

        def get_config(self) -> dict[str, Any]:
            inner = self.inner.get_config() if hasattr(self.inner, "get_config") else self.inner
            return {"inner": inner, "factor": self.factor, "warmup_steps": self.warmup_steps}

    return TftuneScaledRate
