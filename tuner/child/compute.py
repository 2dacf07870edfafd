"""Child side: the compute switches a config asks for, and what discovery reports of
the training step.

- Keras ``compile``: the call is reported (`CompileCall`: where, ``run_eagerly``,
  ``jit_compile``, ``steps_per_execution``) and the config's switches replace the
  script's arguments (`compile_arguments`);
- a step that applies its optimizer's update eagerly: the first update finds the
  script's own function around it (`step_function`: the first frame of the script's
  files, and the module-level name it is called by) and reports it (`StepFunction`);
  with ``compile_step`` that name is bound to the function compiled (`compiled`), so the
  loop's next call runs the ``tf.function``, as ``@tf.function`` above its ``def`` would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, MutableMapping
from types import FrameType, FunctionType
from typing import Any

from tftune.tuner.fixes.training_calls import CompileCall, StepFunction
from tftune.tuner.searchspace.config import COMPILE_XLA, Config

# Marks a function tftune compiled (so that it is compiled once).
COMPILED_ATTR = "__tftune_compiled__"


def compile_call(arguments: MutableMapping[str, Any], place: str | None) -> CompileCall:
    """What a Keras ``compile`` call was given (its defaults where it gave none)."""
    jit = arguments.get("jit_compile", "auto")
    spe = arguments.get("steps_per_execution", 1)
    return CompileCall(
        place,
        bool(arguments.get("run_eagerly", False)),
        jit if isinstance(jit, (bool, str)) else None,
        spe if isinstance(spe, int) and not isinstance(spe, bool) else None,
    )


def compile_arguments(arguments: MutableMapping[str, Any], config: Config) -> list[str]:
    """Keras ``compile``'s bound arguments with the config's compute switches; what
    changed, in words (for the notes)."""
    changed: dict[str, Any] = {}
    if config.compile_step is not None and arguments.get("run_eagerly"):
        changed["run_eagerly"] = False
        if config.compile_step == COMPILE_XLA:
            changed["jit_compile"] = True
    if config.jit_compile is not None:
        changed["jit_compile"] = config.jit_compile
    if config.steps_per_execution is not None:
        changed["steps_per_execution"] = config.steps_per_execution
    arguments.update(changed)
    return [f"{k}={v!r}" for k, v in changed.items()]


def step_function(
    frame: FrameType | None, site_of: Callable[[FrameType], str | None]
) -> tuple[StepFunction, MutableMapping[str, Any] | None]:
    """The script's own function running the update at `frame` (the first frame, going
    out, in the script's files), and the globals that call it by name (None where the
    update is in the loop's own body, or the function is not called by its own name)."""
    while frame is not None and site_of(frame) is None:
        frame = frame.f_back
    if frame is None:
        return StepFunction(None, None, True), None
    code = frame.f_code
    fn = frame.f_globals.get(code.co_name)
    if code.co_name == "<module>" or getattr(fn, "__code__", None) is not code:
        return StepFunction(None, site_of(frame), True), None
    line = f"{(site_of(frame) or ':').rpartition(':')[0]}:{code.co_firstlineno}"
    return StepFunction(code.co_name, line, True), frame.f_globals


def compiled(fn: FunctionType, how: str) -> Any:
    """`fn` as a ``tf.function`` (with XLA where `how` says so), marked as tftune's."""
    import tensorflow as tf

    out = tf.function(fn, jit_compile=how == COMPILE_XLA)
    with contextlib.suppress(AttributeError):
        setattr(out, COMPILED_ATTR, True)
    return out


def compile_in_place(globals_: MutableMapping[str, Any], name: str, how: str) -> bool:
    """Bind `name` in `globals_` to its function compiled (once); whether it was."""
    fn = globals_.get(name)
    if not isinstance(fn, FunctionType) or getattr(fn, COMPILED_ATTR, False):
        return False
    globals_[name] = compiled(fn, how)
    return True
