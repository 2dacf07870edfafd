"""XProf's own input-pipeline analysis of a trace, as typed data, for cross-checks.

XProf (tensorboard-plugin-profile / `xprof`) converts an XSpace without TensorFlow.
This module is optional: xprof is imported inside the function, so `probes` works
without it. Times are milliseconds, as XProf reports them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOOL = "input_pipeline_analyzer"


@dataclass(frozen=True, slots=True)
class XprofStep:
    name: str  # XProf's step label, e.g. "train 3", or the group number
    step_ms: float
    input_ms: float  # XProf's "Input": host wait input + host-to-device
    device_compute_ms: float
    host_compute_ms: float
    kernel_launch_ms: float
    output_ms: float
    other_ms: float


@dataclass(frozen=True, slots=True)
class XprofInputPipeline:
    hardware_type: str | None
    steps: tuple[XprofStep, ...]
    summary: dict[str, str]  # the step-breakdown table's properties, as XProf gives them
    conclusion: str

    @property
    def mean_step_ms(self) -> float | None:
        return sum(s.step_ms for s in self.steps) / len(self.steps) if self.steps else None

    @property
    def input_share(self) -> float | None:
        """Input time over step time, summed over XProf's steps."""
        total = sum(s.step_ms for s in self.steps)
        return sum(s.input_ms for s in self.steps) / total if total > 0 else None


def _table_with(tables: list[Any], column: str) -> dict[str, Any] | None:
    for t in tables:
        if isinstance(t, dict) and any(c.get("id") == column for c in t.get("cols", [])):
            return t
    return None


def xprof_input_pipeline(paths: Sequence[Path]) -> XprofInputPipeline:
    """Run XProf's `input_pipeline_analyzer` converter on `.xplane.pb` files."""
    from xprof.convert import raw_to_tool_data  # optional dependency, imported on use

    data, _ = raw_to_tool_data.xspace_to_tool_data([str(p) for p in paths], TOOL, {})
    tables = json.loads(data)
    table = _table_with(tables, "stepTimeMs")
    if table is None:
        return XprofInputPipeline(None, (), {}, "")
    cols = [c.get("id") for c in table.get("cols", [])]
    steps = []
    for row in table.get("rows", []):
        v = dict(zip(cols, (c.get("v") for c in row["c"]), strict=False))
        steps.append(
            XprofStep(
                name=str(v["stepnum"]),
                step_ms=float(v["stepTimeMs"]),
                input_ms=float(v["infeedTimeMs"]),
                device_compute_ms=float(v["deviceComputeTimeMs"]),
                host_compute_ms=float(v["hostComputeTimeMs"]),
                kernel_launch_ms=float(v["kernelLaunchTimeMs"]),
                output_ms=float(v["outfeedTimeMs"]),
                other_ms=float(v["otherTimeMs"]),
            )
        )
    props = {str(k): str(val) for k, val in (table.get("p") or {}).items()}
    return XprofInputPipeline(
        hardware_type=props.get("hardware_type"),
        steps=tuple(steps),
        summary=props,
        conclusion=props.get("input_conclusion", ""),
    )
