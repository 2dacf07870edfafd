"""Mixed-precision safety: is the model's output computed in 16 bits?

Under a 16-bit Keras policy (``mixed_float16``, ``mixed_bfloat16``) every layer computes
in float16/bfloat16 unless told otherwise, including the last one. A softmax (or sigmoid)
in float16 overflows and underflows easily, and the loss then sees 16-bit probabilities or
logits: losses go to NaN/inf, or accuracy silently drops. The fix is one argument on the
output layer: ``Dense(..., dtype="float32")`` (or a final float32 ``Activation``).

`check_output_layer(model)` inspects a built Keras model (duck-typed: nothing is imported
here) and returns a finding (`core.trial_notes.OutputPrecisionFinding`) when an output is
16-bit. The child bootstrap runs it at the start of ``fit`` (tuner.child.keras_fit); the
finding travels to the parent as a typed child event (`probes.live.clock_events.OutputLayerFound`),
is kept with the trial, and `tftune optimize` then recommends mixed precision only
together with the float32 output layer (`recommendation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tftune.core.trial_notes import OutputPrecisionFinding

LOW_PRECISION = frozenset({"float16", "bfloat16"})
SIXTEEN_BIT_POLICIES = frozenset({"mixed_float16", "mixed_bfloat16"})
_SQUASHING = ("softmax", "log_softmax", "sigmoid")


def _dtype_name(dtype: Any) -> str:
    name = getattr(dtype, "name", None)
    return str(name if isinstance(name, str) else dtype)


def _output_layers(model: Any) -> list[tuple[Any, str | None]]:
    """(layer, output dtype) for each model output; the last layer when the model has no
    symbolic outputs (a subclassed model)."""
    found: list[tuple[Any, str | None]] = []
    try:
        outputs = getattr(model, "outputs", None)
    except (AttributeError, ValueError):  # Keras raises for a model that is not built
        outputs = None
    if isinstance(outputs, Sequence):
        for tensor in outputs:
            history = getattr(tensor, "_keras_history", None)
            layer = history[0] if isinstance(history, tuple) and history else None
            if layer is not None:
                found.append((layer, _dtype_name(getattr(tensor, "dtype", None))))
    if not found:
        layers = getattr(model, "layers", None)
        if isinstance(layers, Sequence) and layers:
            found.append((layers[-1], None))
    return found


def _activation_name(layer: Any) -> str | None:
    kind = type(layer).__name__
    if kind in ("Softmax", "ReLU"):
        return kind.lower()
    activation = getattr(layer, "activation", None)
    name = getattr(activation, "__name__", None)
    return name if isinstance(name, str) else None


def check_output_layer(model: Any) -> OutputPrecisionFinding | None:
    """The first model output computed in float16/bfloat16, as a finding; None when every
    output is float32 (or the model cannot be inspected)."""
    for layer, out_dtype in _output_layers(model):
        compute = _dtype_name(getattr(layer, "compute_dtype", None))
        dtype = out_dtype if out_dtype not in (None, "None") else compute
        if dtype not in LOW_PRECISION:
            continue
        activation = _activation_name(layer)
        policy = getattr(getattr(layer, "dtype_policy", None), "name", None)
        return OutputPrecisionFinding(
            layer=str(getattr(layer, "name", "?")),
            layer_type=type(layer).__name__,
            compute_dtype=str(dtype),
            before=activation if activation in _SQUASHING else "the loss",
            policy=policy if isinstance(policy, str) else None,
        )
    return None


def recommendation(policy: str, findings: Sequence[OutputPrecisionFinding]) -> str | None:
    """The note that goes with a 16-bit winner whose output layer computes in 16 bits."""
    if policy not in SIXTEEN_BIT_POLICIES or not findings:
        return None
    return (
        f"{policy} is recommended only together with a float32 output layer: "
        f"{findings[0].finding()}"
    )
