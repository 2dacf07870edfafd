"""Apply a `Config` to an unmodified script by patching tf.data and Keras in-process.

Used by the child bootstrap (trials, discovery, `tftune run`, `tftune profile`) and by
`tftune.apply()` (`activate`). Nothing is imported from TensorFlow until the script
imports it: a post-import hook (tuner/child/imports.py) patches ``tensorflow`` and
``keras`` right after they load, before any line of the script's own pipeline or model
code runs.

What is patched:

- ``Dataset.map/interleave/batch/padded_batch/prefetch``: when called directly from user
  code, the call site (``file:line`` relative to the script's folder) is identified from
  the caller's frame, what the script passed is recorded (discovery), and the config's
  knobs for that site replace it (tuner/child/datasets.py).
- ``Dataset.__iter__`` and autograph's dataset ``for`` loop: the dataset that is iterated
  gets the global options (private threadpool, determinism, autotune budgets), a final
  prefetch where it has none (tuner/child/streams.py), and, when measuring, the step
  clock (tuner/child/step_clock.py, tuner/child/distribute.py).
- ``keras.Model.fit``: a callback that reports a NaN/inf loss; the global mixed precision
  policy is set when Keras loads, before the script can build a model
  (tuner/child/keras_fit.py).
- When measuring: what tells training apart (tuner/child/roles.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import sysconfig
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from tftune.tuner.child.check_run import CheckRun
from tftune.tuner.child.datasets import _DATASET_METHODS
from tftune.tuner.child.distribute import DistributePatches
from tftune.tuner.child.equivalence import check_spec
from tftune.tuner.child.imports import _PostImportHook
from tftune.tuner.child.keras_fit import KerasPatches
from tftune.tuner.child.roles import is_trainable_float
from tftune.tuner.child.screen_drain import SCREEN_META_KEY, record_methods
from tftune.tuner.searchspace.config import Config


def _internal_prefixes() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    prefixes = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    for pkg in ("tftune", "tftune.probes", "tftune.tuner", "tftune.reports"):
        m = sys.modules.get(pkg)
        for p in getattr(m, "__path__", []) if m is not None else []:
            prefixes.add(os.path.abspath(p))  # tftune itself, wherever it is installed
    for mod in ("tensorflow", "keras", "tf_keras"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__file__", None):
            prefixes.add(os.path.dirname(os.path.abspath(str(m.__file__))))
    return tuple(os.path.join(p, "") for p in sorted(prefixes))


class Patcher(KerasPatches, DistributePatches):
    """Installs the patches once per process. `config` may be replaced before iteration.

    The patches themselves live with their job (`DatasetOps`, `StepClock`, `Streams`,
    `DistributePatches`, `KerasPatches`, all on one `PatcherState`); this class installs
    them: tf.data's, the clock's and the update hooks when TensorFlow loads, Keras' when
    Keras does (or at once, for what is already loaded)."""

    # ---- installation -------------------------------------------------------------
    def install(self) -> None:
        """Patch now what is loaded, and hook what loads later."""
        _PostImportHook.when_imported("tensorflow", lambda _m: self._patch_tf())
        for name in ("keras", "tf_keras"):
            _PostImportHook.when_imported(name, self._patch_keras)

    def _patch_tf(self) -> None:
        if self._tf_patched:
            return
        self._tf_patched = True
        from tensorflow.python.data.ops import dataset_autograph, dataset_ops

        self._prefixes = _internal_prefixes()
        cls = dataset_ops.DatasetV2
        check = check_spec(self.config)
        if check is not None:  # tftune optimize's check run (tuner/child/check_run.py)
            self.check_run = CheckRun(
                self, check, getattr(cls.__iter__, "__tftune_original__", cls.__iter__)
            )
        # The pipeline screen and the equivalence check rebuild datasets.
        if SCREEN_META_KEY in self.config.meta or check is not None:
            self.recording = True
            record_methods()
        for op in _DATASET_METHODS:
            original = getattr(cls, op)
            setattr(cls, op, self._wrap_op(op, getattr(original, "__tftune_original__", original)))
        self._patch_parallel_interleave()
        self._patch_readers()
        self._patch_marked_ops()
        original_iter = getattr(cls.__iter__, "__tftune_original__", cls.__iter__)
        patcher = self

        def tagged_iter(prepared: Any) -> Any:
            made_ns = time.time_ns()
            iterator = original_iter(prepared)
            stream = getattr(prepared, "_tftune_stream", None)
            if stream is not None:
                with contextlib.suppress(AttributeError):
                    iterator._tftune_stream = stream
                patcher.iterator_made(int(stream), prepared, made_ns)
            return iterator

        @functools.wraps(original_iter)
        def __iter__(ds: Any) -> Any:
            user = patcher.site_of(sys._getframe(1)) is not None  # the script's own loop
            if patcher.config.one_iterator and user:
                view = patcher.epoch_view_of(ds, tagged_iter)
                if view is not None:
                    return view
            patcher.user_iter = user
            try:
                prepared = patcher.prepare(ds)
            finally:
                patcher.user_iter = False
            return tagged_iter(prepared)

        __iter__.__tftune_original__ = original_iter  # type: ignore[attr-defined]
        cls.__iter__ = __iter__  # type: ignore[method-assign]

        original_scan = getattr(
            dataset_autograph._general_purpose_scan,
            "__tftune_original__",
            dataset_autograph._general_purpose_scan,
        )

        @functools.wraps(original_scan)
        def _general_purpose_scan(ds: Any, init_state: Any, body: Any) -> Any:
            prepared = patcher.prepare(ds, dataset_clock=True)
            stream = getattr(prepared, "_tftune_stream", None)
            if stream is not None:
                patcher.roles.graph_fetch(int(stream))
            if stream is not None and patcher.hooks.on_request is None:
                init_state, body = patcher._clocked_scan(int(stream), init_state, body)
            return original_scan(prepared, init_state, body)

        _general_purpose_scan.__tftune_original__ = original_scan  # type: ignore[attr-defined]
        dataset_autograph._general_purpose_scan = _general_purpose_scan
        self._patch_iterator()
        self._patch_distributed()
        if self.instrument_clock:
            self._patch_updates()

    def _patch_updates(self) -> None:
        """What tells training apart (`roles`): calls of tf.functions, TF1 optimizers and
        raw updates of trainable variables. (Keras optimizers: `_patch_optimizer`.)"""
        from tensorflow.python.eager.polymorphic_function import polymorphic_function
        from tensorflow.python.ops import resource_variable_ops
        from tensorflow.python.training import optimizer as tf1_optimizer

        function_cls: Any = polymorphic_function.Function
        call = getattr(function_cls.__call__, "__tftune_original__", function_cls.__call__)
        function_cls.__call__ = self.roles.wrap_call(call)
        roles = self.roles

        def after_update(original: Callable[..., Any], variable_method: bool) -> Any:
            @functools.wraps(original)
            def wrapper(owner: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(owner, *args, **kwargs)
                if not variable_method or is_trainable_float(owner):
                    roles.update()
                return result

            wrapper.__tftune_original__ = original  # type: ignore[attr-defined]
            return wrapper

        targets: list[tuple[Any, str, bool]] = [(tf1_optimizer.Optimizer, "apply_gradients", False)]
        for cls in (
            resource_variable_ops.BaseResourceVariable,
            resource_variable_ops.ResourceVariable,
        ):
            targets += [
                (cls, name, True) for name in ("assign_add", "assign_sub") if name in vars(cls)
            ]
        for owner, name, variable_method in targets:
            current = getattr(owner, name)
            original = getattr(current, "__tftune_original__", current)
            setattr(owner, name, after_update(original, variable_method))
        self._patch_tape()

    def _patch_tape(self) -> None:
        """A ``GradientTape`` entered: the script is about to train (`roles`); the loss
        it differentiates, where the loss is measured (`LossLog.tape`)."""
        from tensorflow.python.eager import backprop

        cls: Any = backprop.GradientTape
        current = cls.__enter__
        original = getattr(current, "__tftune_original__", current)
        roles = self.roles

        @functools.wraps(original)
        def __enter__(tape: Any) -> Any:
            roles.expecting = True
            return original(tape)

        __enter__.__tftune_original__ = original  # type: ignore[attr-defined]
        cls.__enter__ = __enter__
        current = cls.gradient
        original_gradient = getattr(current, "__tftune_original__", current)
        patcher = self

        @functools.wraps(original_gradient)
        def gradient(tape: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
            log = patcher.losses
            if log is not None and patcher.in_fit is None:  # fit's loss: its batch logs
                with contextlib.suppress(Exception):
                    log.tape(target, log.place_of(patcher.calling_frame(sys._getframe(1))))
            return original_gradient(tape, target, *args, **kwargs)

        gradient.__tftune_original__ = original_gradient  # type: ignore[attr-defined]
        cls.gradient = gradient

    def calling_frame(self, frame: FrameType | None) -> FrameType | None:
        """The first frame above TensorFlow's and Keras' own: the script's, or the code
        autograph generated from it (autograph calls a TensorFlow method itself)."""
        while frame is not None:
            if not self._internal_file(frame.f_code.co_filename):
                return frame
            frame = frame.f_back
        return None

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (one Patcher a process)
    def _internal_file(self, path: str) -> bool:
        """Whether `path` is TensorFlow's, Keras' or tftune's own (asked every step of an
        eager loop, for the same few files)."""
        if "__autograph_generated" in path:
            return False
        return os.path.abspath(path).startswith(self._prefixes)


_ACTIVE: Patcher | None = None


def activate(config: Config, script_dir: str) -> Patcher:
    """Apply `config` to this process (``tftune.apply``); a second call replaces it."""
    global _ACTIVE
    if _ACTIVE is None:
        _ACTIVE = Patcher(config, script_dir)
        _ACTIVE.install()
    else:
        _ACTIVE.config = config
        _ACTIVE.script_dir = os.path.abspath(script_dir)
    return _ACTIVE
