"""The scaled learning rate as code on the user's optimizer line (`tuner.output.emit` puts it in
the diff): the learning check recommends a batch change with the optimizer's rate scaled
(`core.learning.LearningRateScale`), and the script's own call says so:

- ``Adam(learning_rate=1e-3)`` becomes ``Adam(learning_rate=0.004)  # tftune: was 1e-3,
  batch 64 -> 256``; a rate given positionally likewise; a rate not given gets one (the
  default the optimizer reported, scaled); an expression becomes ``(expr) * 4``;
- with a warm-up, a number becomes Keras' ``CosineDecay`` with ``alpha=1.0`` (constant
  after the ramp) from the rate as written to its scaled value over the ramp's updates;
- a schedule is not rewritten: a comment says how it is scaled, which ``tftune run
  --config`` does.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from tftune.core.learning import LearningRateScale, OptimizerSeen
from tftune.tuner.output.source_edits import Edit, find_calls, keyword_added, span


def _number(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value) if not isinstance(node.value, bool) else None
    return None


def _rate_text(written: float, scale: LearningRateScale, alias: str) -> str:
    scaled = f"{written * scale.factor:.6g}"
    if not scale.warmup_steps:
        return scaled
    return (
        f"{alias}.keras.optimizers.schedules.CosineDecay({written:g}, decay_steps=1, "
        f"alpha=1.0, warmup_target={scaled}, warmup_steps={scale.warmup_steps})"
    )


def rate_edits(
    tree: ast.Module,
    source: bytes,
    starts: Sequence[int],
    line: int,
    seen: OptimizerSeen,
    scale: LearningRateScale,
    alias: str,
) -> list[Edit]:
    """The edits of the optimizer call `seen.name(...)` at `line` (module docstring)."""
    calls = find_calls(tree, line, (seen.name,))
    if not calls:
        return []
    call = calls[0]
    given = next((k.value for k in call.keywords if k.arg == "learning_rate"), None)
    if given is None and call.args:
        given = call.args[0]
    was = f"batch {scale.batch_from} -> {scale.batch_to}"
    end = span(call, starts)[1]
    line_end = source.find(b"\n", end)
    line_end = len(source) if line_end < 0 else line_end
    if seen.learning_rate is None:  # a schedule: said, applied by tftune run --config
        note = f"  # tftune: scale this rate x{scale.factor:.3g} ({was})"
        return [Edit(line_end, line_end, note)]
    if given is None:
        text = _rate_text(seen.learning_rate, scale, alias)
        edit = keyword_added(call, "learning_rate", text, starts)
    else:
        number = _number(given)
        text = (
            _rate_text(number, scale, alias)
            if number is not None
            else f"({ast.get_source_segment(source.decode('utf-8', 'replace'), given)}) "
            f"* {scale.factor:.6g}"
        )
        edit = Edit(*span(given, starts), text)
    note = f"  # tftune: was {seen.learning_rate:g}, {was}"
    return [edit, Edit(line_end, line_end, note)]
