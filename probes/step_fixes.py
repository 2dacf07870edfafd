"""Fixes for the step rather than a tf.data stage: host-to-device copies, a compute-bound
step, work in the training loop outside tf.data, and the step markers a trace lacks.

Beside `probes.recommendations` (same `Recommendation` type, same `gain` convention):

* `loop_rec(loop, share, sites)`: move the loop's own work (`probes.loop_work`) into a
  parallel `map` before `prefetch`, at the user's pipeline when its line is known.
* `compute_rec(device, share)`, `h2d_rec(share)`: a compute-bound step, host-to-device
  copies.
* `marker_rec(detection)`: the `Trace(...)` line for a trace without step markers.
"""

from __future__ import annotations

from collections.abc import Sequence

from tftune.probes.callsites import RecordedSite
from tftune.probes.loop_work import LoopWork
from tftune.probes.recommendations import Recommendation


def loop_rec(loop: LoopWork, share: float, sites: Sequence[RecordedSite]) -> Recommendation:
    """Move the loop's own work into the pipeline: a parallel map before prefetch."""
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
        summary=(
            f"The training loop works {loop.per_step_ms:.1f} ms per step on the main thread "
            f"between next() and {loop.step_function} ({seen}), where prefetch cannot hide "
            "it: move it into the pipeline as a parallel map before prefetch"
        ),
        code=code,
        gain=share * 0.8,
        category="training_loop",
        stage=None,
        evidence=ev,
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


def compute_rec(device: str, share: float) -> Recommendation:
    if device == "GPU":
        policy, note = "mixed_float16", "float16 on the GPU's tensor cores"
    else:
        policy, note = (
            "mixed_bfloat16",
            "bfloat16 on CPUs with AVX512-BF16/AMX; float16 is slower on CPUs, measure first",
        )
    return Recommendation(
        summary=f"The step is compute-bound: try mixed precision ({note}), float32 output layer",
        code=(
            f'keras.mixed_precision.set_global_policy("{policy}")\n'
            "# keep the last layer in float32 for a stable loss:\n"
            'outputs = keras.layers.Activation("linear", dtype="float32")(logits)'
        ),
        gain=share * 0.3,
        category="device_compute" if device == "GPU" else "host_compute",
        stage=None,
        evidence={"compute_share": round(share, 4), "device": device},
    )


def h2d_rec(share: float) -> Recommendation:
    return Recommendation(
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
