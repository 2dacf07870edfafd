"""Child side: Keras. The precision policy, PyDataset, the optimizer hook and ``fit``.

- The config's mixed precision policy is set when Keras loads, before the script can
  build a model; the script's own ``set_global_policy`` is then noted and ignored.
- A ``PyDataset`` subclass' ``super().__init__(...)`` is a call site (workers,
  multiprocessing, queue size), wrapped like a Dataset op (tuner/child/datasets.py).
- A Keras optimizer's ``apply`` registers the weights the NaN watch checks
  (tuner/child/nanwatch.py) and counts as an update for the roles (tuner/child/roles.py).
- ``Model.fit`` gets a callback that reports a NaN/inf loss, and a model output
  computed in 16 bits when training begins (tuner/fixes/precision.py); with the one-iterator
  rewrite, a finite dataset is repeated with its length as ``steps_per_epoch``
  (tuner/child/rewrite_apply.py).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import sys
import time
from collections.abc import Callable, Mapping
from types import FrameType, ModuleType
from typing import Any

from tftune.probes.live.clock_events import EpochStart
from tftune.tuner.child.compute import (
    compile_arguments,
    compile_call,
    compile_in_place,
    step_function,
)
from tftune.tuner.child.datasets import DatasetOps
from tftune.tuner.child.learning_rate import patch_optimizers
from tftune.tuner.child.loss_log import LossLog
from tftune.tuner.child.rewrite_apply import fit_call, one_iterator_fit
from tftune.tuner.child.state import Hooks
from tftune.tuner.fixes.training_calls import LOOP_FIT, LOOP_FIT_STEPS


class KerasPatches(DatasetOps):
    """The patches applied to a Keras module (``keras`` or ``tf_keras``) once it loads."""

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
        patch_optimizers(
            module,
            self.site_of,
            lambda: (self.config.learning_rate_scale, self.config.learning_rate_warmup or 0),
            self.hooks.on_optimizer,
            self.hooks.notes,
        )
        self._patch_py_dataset(module)
        model_cls: Any = getattr(module, "Model", None)
        callbacks_mod: Any = getattr(module, "callbacks", None)
        if model_cls is None or callbacks_mod is None:
            return
        original_fit = getattr(model_cls.fit, "__tftune_original__", model_cls.fit)
        signature = inspect.signature(original_fit)
        callback = _nan_callback(callbacks_mod.Callback, self.hooks, lambda: self.losses)

        @functools.wraps(original_fit)
        def fit(model: Any, *args: Any, **kwargs: Any) -> Any:
            self.roles.expect_training()
            try:
                bound = signature.bind(model, *args, **kwargs)
            except TypeError:
                return original_fit(model, *args, **kwargs)
            given = bound.arguments.get("callbacks") or []
            bound.arguments["callbacks"] = [*list(given), callback]
            if self.hooks.on_fit is not None:
                self.hooks.on_fit(fit_call(bound.arguments, self.site_of(sys._getframe(1))))
            if self.config.one_iterator:  # the rewrite: one iterator across epochs
                for change in one_iterator_fit(bound.arguments):
                    self.hooks.notes.append(f"fit trains with one iterator: {change}")
                held = bound.arguments.get("x")
                if getattr(held, "_tftune_repeated_for_fit", False) and self.hooks.on_epoch:
                    epochs = _epoch_callback(callbacks_mod.Callback, bound.arguments, self.hooks)
                    bound.arguments["callbacks"] = [*bound.arguments["callbacks"], epochs]
                val = bound.arguments.get("validation_data")
                if getattr(val, "_tftune_repeated_for_fit", False):
                    self.held_validation = (val, bound.arguments.get("validation_steps"))
            run = self.check_run
            if run is not None and self._is_training_fit(sys._getframe(1)):
                run.at_fit(model, bound.arguments, original_fit, model_cls.compile)
            given_steps = bound.arguments.get("steps_per_epoch") is not None
            outer, self.in_fit = self.in_fit, LOOP_FIT_STEPS if given_steps else LOOP_FIT
            try:
                return original_fit(*bound.args, **bound.kwargs)
            finally:
                self.in_fit, self.held_validation = outer, None

        fit.__tftune_original__ = original_fit  # type: ignore[attr-defined]
        model_cls.fit = fit
        self._patch_compile(model_cls)
        self._patch_evaluate(model_cls)

    def _patch_evaluate(self, model_cls: Any) -> None:
        """``Model.evaluate``: where fit validates on one iterator over a repeated
        validation set (`held_validation`), the pass starts here, as the iterator it no
        longer makes would have shown."""
        original = getattr(model_cls.evaluate, "__tftune_original__", model_cls.evaluate)

        @functools.wraps(original)
        def evaluate(model: Any, *args: Any, **kwargs: Any) -> Any:
            if self.held_validation is not None:
                epoch_started(*self.held_validation, self.hooks)
            return original(model, *args, **kwargs)

        evaluate.__tftune_original__ = original  # type: ignore[attr-defined]
        model_cls.evaluate = evaluate

    def _patch_compile(self, model_cls: Any) -> None:
        """``Model.compile``: reported (discovery), with the config's compute switches
        (tuner/child/compute.py)."""
        original = getattr(model_cls.compile, "__tftune_original__", model_cls.compile)
        signature = inspect.signature(original)

        @functools.wraps(original)
        def compile(model: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(model, *args, **kwargs)
            except TypeError:
                return original(model, *args, **kwargs)
            if self.hooks.on_compile is not None:
                where = self.site_of(sys._getframe(1))
                self.hooks.on_compile(compile_call(bound.arguments, where))
            with contextlib.suppress(AttributeError):  # as written: the check run's
                model._tftune_compiled_with = {
                    k: v for k, v in bound.arguments.items() if k not in ("self", "model")
                }
            for change in compile_arguments(bound.arguments, self.config):
                self.hooks.notes.append(f"compile with {change}")
            return original(*bound.args, **bound.kwargs)

        compile.__tftune_original__ = original  # type: ignore[attr-defined]
        model_cls.compile = compile

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
            if optimizer not in self.optimizers:
                self.optimizers.append(optimizer)
            self._eager_update(sys._getframe(1))
            result = original(optimizer, *args, **kwargs)
            if self.instrument_clock:
                self.roles.update()
            return result

        apply.__tftune_original__ = original  # type: ignore[attr-defined]
        owner.apply = apply

    def _is_training_fit(self, frame: FrameType | None) -> bool:
        """Whether a ``fit`` called from `frame` trains on the training data discovery
        found (its place is the fit call's line)."""
        at = self.training_at
        return at is None or at[1] is None or self.site_of(frame) == at[1]

    def _eager_update(self, frame: FrameType | None) -> None:
        """The first update applied eagerly: the script's own function around it is
        reported (discovery) and, with ``compile_step``, compiled for its next call."""
        import tensorflow as tf

        if self._eager_step_seen or tf.inside_function():
            return
        self._eager_step_seen = True
        step, where = step_function(frame, self.site_of)
        if self.hooks.on_step_function is not None:
            self.hooks.on_step_function(step)
        if self.check_run is not None:
            self.check_run.at_step(where, step.name, self.optimizers)
        how, name = self.config.compile_step, step.name
        if how is None or where is None or name is None:
            return
        if compile_in_place(where, name, how):
            self.hooks.notes.append(f"compiled the step {name} ({how})")


def epoch_started(dataset: Any, length: Any, hooks: Hooks) -> None:
    """A new epoch (a pass) of `dataset`'s stream, where no new iterator shows it."""
    stream = getattr(dataset, "_tftune_stream_no", None)
    if stream is not None and hooks.on_epoch is not None:
        size = int(length) if isinstance(length, int) else -2
        hooks.on_epoch(EpochStart(int(stream), time.time_ns(), size, False, None))


def _epoch_callback(base: type, arguments: Mapping[str, Any], hooks: Hooks) -> Any:
    """With one iterator over a repeated dataset, Keras' epochs make no new iterator: each
    epoch after the first is reported as an epoch start of the training stream all the
    same, so that the step clock sees the script's own epochs. (Each validation pass of
    a repeated validation set is reported where `evaluate` begins: `_patch_evaluate`.)"""
    train, steps = arguments.get("x"), arguments.get("steps_per_epoch")

    class _TftuneEpochStarts(base):  # type: ignore[misc, valid-type]
        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            if epoch > 0:
                epoch_started(train, steps, hooks)

    return _TftuneEpochStarts()


def _nan_callback(base: type, hooks: Hooks, losses: Callable[[], LossLog | None]) -> Any:
    class _TftuneNanCheck(base):  # type: ignore[misc, valid-type]
        """Reports a NaN/inf loss to the trial runner (who stops the trial), and a model
        output computed in 16 bits (tuner.fixes.precision) when training begins; logs each
        batch's loss where it is measured (`LossLog.fit_batch`)."""

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            _report_output_precision(getattr(self, "model", None), hooks)

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            log = losses()
            if not logs or "loss" not in logs or (hooks.on_nan is None and log is None):
                return
            try:
                loss = float(logs["loss"])
            except (TypeError, ValueError):
                return
            if log is not None:
                log.fit_batch(batch, loss)
            if hooks.on_nan is not None and not math.isfinite(loss):
                hooks.on_nan("loss", loss)

    return _TftuneNanCheck()


def _report_output_precision(model: Any, hooks: Hooks) -> None:
    """Check the output layer's precision once per model; never fail the user's fit."""
    from tftune.tuner.fixes.precision import check_output_layer

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
        hooks.on_finding(finding)
    else:  # tftune run / tftune.apply: tell the user directly
        print(f"tftune: warning: {finding.message()}", file=sys.stderr)
