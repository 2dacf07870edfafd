"""Fixes for the step rather than a tf.data stage: host-to-device copies, a compute-bound
step, work in the training loop outside tf.data, and the step markers a trace lacks.

Beside `probes.advice.recommendations` (same `Recommendation` type, same `gain` convention):

* `loop_rec(loop, share, sites)`: move the loop's own work (`probes.traces.loop_work`) into a
  parallel `map` before `prefetch`, at the user's pipeline when its line is known; for a
  loop over a `tf.distribute` dataset, whose gap is the distributed iterator's own work,
  several steps per `tf.function` call instead (never "move the iterator's ops").
* `eager_rec(facts)`: a step that runs op by op from Python: compile it with
  `@tf.function` (with `jit_compile=True` where its kernels are many and small).
* `compute_rec(device, share, facts)`: a compute-bound step: the best of its moves
  (`probes.advice.next_moves.step_moves`), the same idea, text and code as that move.
* `h2d_rec(share)`: host-to-device copies.
* `marker_rec(detection)`: the `Trace(...)` line for a trace without step markers.
"""

from __future__ import annotations

from collections.abc import Sequence

from tftune.core.analysis_advice import NextMove
from tftune.core.vocabulary import EAGER_STEP, TRAINING_LOOP, percent
from tftune.probes.advice import ideas
from tftune.probes.advice.next_moves import (
    STEPS_PER_EXECUTION,
    StepFacts,
    precision_move,
    step_moves,
    xla_helps,
)
from tftune.probes.advice.recommendations import Recommendation
from tftune.probes.traces.callsites import RecordedSite
from tftune.probes.traces.loop_work import LoopWork

# What compiling an eager step saves of the time around its ops (a ranking estimate).
COMPILE_SAVES = 0.8


def loop_rec(loop: LoopWork, share: float, sites: Sequence[RecordedSite]) -> Recommendation:
    """Move the loop's own work into the pipeline: a parallel map before prefetch (for a
    distributed loop: `steps_per_call_rec`)."""
    if loop.distributed:
        return steps_per_call_rec(loop, share)
    seen = ", ".join(k.split(" (")[0] for k, _ in loop.seen[:3]) or "Python"
    code = (
        "def preprocess(x):  # the loop's work, in TF ops (or wrap NumPy code:\n"
        "    ...             #   tf.numpy_function(augment_np, [x], tf.float32))\n"
        "ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)\n"
        "ds = ds.prefetch(tf.data.AUTOTUNE)\n"
        f"for batch in ds:\n    {loop.step_function}(batch)  # nothing between next() and the step"
    )
    where = next((s for s in reversed(sites) if s.op == "prefetch"), None) or (
        sites[-1] if sites else None
    )
    ev = {
        "per_step_ms": loop.per_step_ms,
        "untraced_ms": loop.untraced_ms,
        "step_function": loop.step_function,
    }
    if where is not None:
        code = f"# {where.site}: add the map before this {where.op}\n{code}"
        ev["call_site"] = where.site
    return Recommendation(
        kind=ideas.LOOP_TO_PIPELINE,
        summary=(
            f"The training loop works {loop.per_step_ms:.1f} ms per step on the main thread "
            f"between next() and {loop.step_function} ({seen}), where prefetch cannot hide "
            "it: move it into the pipeline as a parallel map before prefetch"
        ),
        code=code,
        gain=share * 0.8,
        category=TRAINING_LOOP,
        stage=None,
        evidence=ev,
    )


def steps_per_call_rec(loop: LoopWork, share: float) -> Recommendation:
    """A loop over a `tf.distribute` dataset: its per-step host work is the distributed
    iterator's (conversions, partial-batch handling) and `strategy.run`'s dispatch, not
    the user's. Iterating inside the `tf.function` runs it in the graph, once per call of
    several steps (the tf.distribute custom-training guide's "iterating inside a
    tf.function"); Keras' `steps_per_execution` does the same for `fit`."""
    fn, n = loop.step_function, STEPS_PER_EXECUTION
    seen = ", ".join(k.split(" (")[0] for k, _ in loop.seen[:3]) or "Python"
    return Recommendation(
        kind=ideas.STEPS_PER_CALL,
        summary=(
            f"Each step spends {loop.per_step_ms:.1f} ms on the main thread outside "
            f"{fn}: the distributed iterator's own per-step work ({seen}) and the call "
            f"itself. It is not yours to move into the pipeline: run {n} steps per "
            "tf.function call, iterating inside the function, so that it runs in the graph "
            f"(with Keras fit: model.compile(..., steps_per_execution={n}))"
        ),
        code=(
            "@tf.function\n"
            f"def train_steps(iterator, steps):  # {n} steps per call: next() runs in the graph\n"
            "    for _ in tf.range(steps):\n"
            f"        {fn}(next(iterator))\n\n"
            "iterator = iter(dist_ds)\n"
            f"for _ in range(steps_per_epoch // {n}):\n"
            f"    train_steps(iterator, tf.constant({n}))"
        ),
        gain=share * 0.8,
        category=TRAINING_LOOP,
        stage=None,
        evidence={
            "per_step_ms": loop.per_step_ms,
            "untraced_ms": loop.untraced_ms,
            "step_function": fn,
            "distributed_input": True,
        },
    )


def eager_rec(facts: StepFacts) -> Recommendation:
    """A step that runs eagerly: compile it with `@tf.function`; with `jit_compile=True`
    where XLA helps (`next_moves.xla_helps` on its eager ops and their kernels)."""
    ops, share = facts.eager_ops_per_step or 0.0, facts.dispatch_share or 0.0
    jit = xla_helps(facts.eager_ops_per_step, facts.eager_kernel_us, facts.device)
    kernels = f"{facts.eager_kernel_us:.0f} µs" if facts.eager_kernel_us is not None else "?"
    xla = (
        f", with jit_compile=True: its kernels are many and small ({kernels} on average), "
        "and XLA fuses them"
        if jit
        else "; then measure jit_compile=True (XLA), which pays where kernels are many and small"
    )
    return Recommendation(
        kind=ideas.COMPILE,
        summary=(
            f"The step runs eagerly: {ops:.0f} ops per step are dispatched one by one from "
            f"Python, and {percent(share)} of the step is the Python and dispatch around "
            f"them, which no tf.function runs: compile the step with @tf.function{xla} "
            "(Keras: compile the model without run_eagerly=True)"
        ),
        code=(
            f"@tf.function{'(jit_compile=True)' if jit else ''}  # one graph call per step, "
            "not one Python call per op\n"
            "def train_step(x, y):\n"
            "    ...  # the step as it is: GradientTape, loss, apply_gradients"
        ),
        gain=share * COMPILE_SAVES,
        category=EAGER_STEP,
        stage=None,
        evidence={
            "eager_ops_per_step": ops,
            "eager_kernel_us": facts.eager_kernel_us,
            "dispatch_share": share,
            "function_share": facts.function_share,
            "jit_compile": jit,
        },
    )


MARKER_FIX = (
    "for step, batch in enumerate(ds):\n"
    '    with tf.profiler.experimental.Trace("train", step_num=step, _r=1):\n'
    "        train_step(batch)"
)


def marker_rec(detection: str) -> Recommendation | None:
    if detection == "markers":
        return None
    return Recommendation(
        kind=ideas.STEP_MARKERS,
        summary=(
            "The trace has no step markers, so steps were "
            + ("inferred" if detection.startswith("inferred") else "not found")
            + ": wrap your step in a Trace marker (or run `tftune profile train.py`)"
        ),
        code=MARKER_FIX,
        gain=0.0,
        category="other",
        stage=None,
        evidence={"step_detection": detection},
    )


def move_rec(move: NextMove, category: str) -> Recommendation:
    """A next move as the fix of a bottleneck: the same idea, text and code."""
    return Recommendation(
        kind=move.kind,
        summary=move.summary,
        code=move.code or "",
        gain=move.score or 0.0,
        category=category,
        stage=None,
        evidence=dict(move.evidence),
    )


def compute_rec(device: str, share: float, facts: StepFacts | None = None) -> Recommendation:
    """A compute-bound step: the best of the moves its facts support (without facts, the
    precision policy for the device)."""
    category = "device_compute" if device == "GPU" else "host_compute"
    cap = facts.compute_capability if facts is not None else None
    moves = step_moves(facts, share) if facts is not None else ()
    return move_rec(moves[0] if moves else precision_move(device, cap, share), category)


def h2d_rec(share: float) -> Recommendation:
    return Recommendation(
        kind=ideas.PREFETCH_TO_DEVICE,
        summary=(
            "Host-to-device copies take a real share of the step: overlap them with compute "
            "and copy fewer, larger buffers"
        ),
        code=(
            "ds = ds.apply(tf.data.experimental.prefetch_to_device('/gpu:0', buffer_size=2))\n"
            "# and: larger batches, uint8 images cast to float on the GPU"
        ),
        gain=share * 0.7,
        category="host_to_device",
        stage=None,
        evidence={"host_to_device_share": round(share, 4)},
    )
