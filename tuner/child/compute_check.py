"""Child side: the compute switches' equivalence check. A switch changes how the step is
compiled, not what it computes: from the same weights, the same batches give the same
losses and weights, up to the last bits XLA changes (`RTOL`, `ATOL`).

- **Keras** (`keras_check`): `CHECK_STEPS` batches of the training data, trained from one
  snapshot of the model's and the optimizer's variables (the random layers' seeds among
  them) as the script compiled the model, then again with the switch; the loss and
  every weight compared.
- **an eager step** (`StepProbe`): the script's step function is called as it is for
  `CHECK_STEPS` steps from a snapshot, then compiled, from the same snapshot, on the same
  arguments; what it returns and every weight compared.

A switch that fails to compile, or changes the loss or a weight beyond the tolerance, or
makes one non-finite, is refused with the figures.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tftune.core.tuning_rewrites import Equivalence, RewriteKind, RewriteRow, RewriteState
from tftune.tuner.fixes.rewrites import Candidate
from tftune.tuner.searchspace.config import Config

CHECK_STEPS = 3
RTOL = 1e-3  # relative: float32 XLA and eager kernels differ in the last bits
ATOL = 1e-5
HOW = f"losses and weights after {CHECK_STEPS} steps, within {RTOL:g} relative, dropout off"


def _numbers(values: Sequence[Any]) -> list[Any]:
    import numpy as np

    return [np.asarray(v, dtype="float64") for v in values]


def compare_runs(
    losses: tuple[Sequence[Any], Sequence[Any]], weights: tuple[Sequence[Any], Sequence[Any]]
) -> Equivalence:
    """The switched run (second of each pair) against the script's own (first)."""
    import numpy as np

    for name, (a, b) in (("loss", losses), ("weight", weights)):
        xs, ys = _numbers(a), _numbers(b)
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            if not np.all(np.isfinite(y)):
                return Equivalence(False, CHECK_STEPS, HOW, f"{name} {i} is not finite")
            if x.shape != y.shape or not np.allclose(x, y, rtol=RTOL, atol=ATOL):
                worst = float(np.max(np.abs(x - y))) if x.shape == y.shape else math.inf
                detail = f"{name} {i} differs by up to {worst:.3g}"
                return Equivalence(False, CHECK_STEPS, HOW, detail)
    return Equivalence(True, CHECK_STEPS, HOW)


class Snapshot:
    """The values of some variables, to put back."""

    def __init__(self, variables: Sequence[Any]) -> None:
        self.variables = list(variables)
        self.values = [v.numpy() for v in self.variables]

    def restore(self) -> None:
        for v, value in zip(self.variables, self.values, strict=True):
            v.assign(value)


def _refused(c: Candidate, why: str, check: Equivalence | None = None) -> RewriteRow:
    return c.row(RewriteState.REFUSED, why, check)


def _row(c: Candidate, check: Equivalence, what: str) -> RewriteRow:
    if not check.passed:
        return _refused(c, f"the step changes under it: {check.detail}", check)
    return c.row(RewriteState.CHECKED, what, check)


# --- Keras ------------------------------------------------------------------------------


def keras_check(
    model: Any,
    batches: Sequence[Any],
    compiled_with: dict[str, Any],
    switched: Callable[[Config], dict[str, Any]],
    candidates: Sequence[Candidate],
    fit: Callable[..., Any],
    compile_: Callable[..., Any],
) -> list[RewriteRow]:
    """Each compute candidate of a Keras model (module docstring). `compiled_with`: the
    script's own compile arguments; `switched(config)` those with a candidate's switch;
    `fit`, `compile_`: Keras' own (unpatched) methods."""
    import tensorflow as tf

    if len(batches) < CHECK_STEPS:
        why = f"the training data gave {len(batches)} batches, not {CHECK_STEPS}"
        return [_refused(c, why) for c in candidates]
    spec = tf.nest.map_structure(lambda t: tf.TensorSpec.from_tensor(t), batches[0])

    def data() -> Any:
        return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)

    def train(arguments: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        compile_(model, **arguments)
        history = fit(model, data(), epochs=1, steps_per_epoch=CHECK_STEPS, verbose=0)
        return [history.history["loss"][-1]], [v.numpy() for v in model.trainable_variables]

    compile_(model, **compiled_with)
    optimizer = model.optimizer
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    snapshot = Snapshot([*model.variables, *optimizer.variables])
    rows = []
    with random_layers_off([model]):
        own = train(compiled_with)
        for c in candidates:
            snapshot.restore()
            try:
                other = train(switched(c.config()))
            except Exception as exc:  # a switch this model cannot take: a result
                why = f"the model cannot take it: {type(exc).__name__}: {exc}"
                rows.append(_refused(c, why[:300]))
                continue
            what = f"{c.kind.label} ({c.param}={c.value!r})"
            if c.kind is RewriteKind.STEPS_PER_EXECUTION:  # what the script's callbacks see
                what += ": callbacks see every Nth batch (their per-batch logs, a NaN check)"
            rows.append(_row(c, compare_runs((own[0], other[0]), (own[1], other[1])), what))
    snapshot.restore()
    compile_(model, **compiled_with)
    return rows


# --- an eager step --------------------------------------------------------------------


def keras_models() -> list[Any]:
    """Every Keras model alive in the process (a custom loop's generator, critic...)."""
    import keras

    return [o for o in gc.get_objects() if isinstance(o, keras.Model)]


class StepProbe:
    """Stands in for the script's eager step function (`name` in its module's globals):
    the next `CHECK_STEPS` calls run as written from a snapshot, then each candidate's
    compiled step (`compiled(value)`) from the same one, and `done(rows)` gets the
    results. Dropout is off throughout (`random_layers_off`)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        candidates: Sequence[Candidate],
        compiled: Callable[[str], Callable[..., Any]],
        variables: Callable[[], Sequence[Any]],
        done: Callable[[list[RewriteRow]], None],
    ) -> None:
        self.fn, self.candidates, self.compiled = fn, candidates, compiled
        self.variables, self.done = variables, done
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.returned: list[Any] = []
        self.snapshot: Snapshot | None = None
        self.quiet = random_layers_off(keras_models())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.snapshot is None:
            self.snapshot = Snapshot(self.variables())
            self.quiet.__enter__()
        out = self.fn(*args, **kwargs)
        self.calls.append((args, kwargs))
        self.returned.append(out)
        if len(self.calls) == CHECK_STEPS:
            self.done([self.finish(c) for c in self.candidates])
        return out

    def finish(self, c: Candidate) -> RewriteRow:
        import tensorflow as tf

        assert self.snapshot is not None
        if not hasattr(self, "weights"):
            self.weights = [v.numpy() for v in self.snapshot.variables]
        self.snapshot.restore()
        try:
            step = self.compiled(str(c.value))
            again = [step(*a, **k) for a, k in self.calls]
        except Exception as exc:  # e.g. Python work on a tensor's value inside the step
            return _refused(c, f"the step cannot be compiled: {type(exc).__name__}: {exc}"[:300])
        after = [v.numpy() for v in self.snapshot.variables]
        flat = tf.nest.flatten
        own = [x for r in self.returned for x in flat(r) if x is not None]
        other = [x for r in again for x in flat(r) if x is not None]
        check = compare_runs((own, other), (self.weights, after))
        kind = "XLA" if c.value == "xla" else "tf.function"
        return _row(c, check, f"the eager step compiled ({kind})")


@contextlib.contextmanager
def random_layers_off(models: Sequence[Any]) -> Iterator[None]:
    """Keras' dropout and noise layers off in `models` (their rate or stddev at 0): XLA
    draws other random numbers than the eager kernels do, and a compute switch changes
    how the step is compiled, not what it draws."""
    changed: list[tuple[Any, str, Any]] = []
    for model in models:
        for layer in getattr(model, "_flatten_layers", lambda: [])():
            for name in ("rate", "stddev"):
                value = getattr(layer, name, None)
                if isinstance(value, (int, float)) and value > 0 and _random_layer(layer):
                    changed.append((layer, name, value))
                    setattr(layer, name, 0.0)
    try:
        yield
    finally:
        for layer, name, value in changed:
            setattr(layer, name, value)


def _random_layer(layer: Any) -> bool:
    return any(part in type(layer).__name__ for part in ("Dropout", "Noise", "GaussianDropout"))


def step_variables(optimizers: Sequence[Any]) -> Callable[[], list[Any]]:
    """What a step changes: every Keras model's variables and the optimizers'."""

    def collect() -> list[Any]:
        seen: dict[int, Any] = {}
        for model in keras_models():
            for v in model.variables:
                seen.setdefault(id(v), v)
        for opt in optimizers:
            for v in getattr(opt, "variables", ()):
                seen.setdefault(id(v), v)
        return list(seen.values())

    return collect


COMPUTE_KINDS = frozenset(
    {RewriteKind.JIT_COMPILE, RewriteKind.STEPS_PER_EXECUTION, RewriteKind.COMPILE_STEP}
)
