"""The typed notes of a run: each is a record, and its words are rendered from it.

A trial's ``notes`` in the tuning JSON (``trials_detail[].notes``), the config file's
``findings`` and the document's ``findings`` are text, so a saved document reads the same
in any tftune. The code carries the records and renders the words here, once:

- `OutputPrecisionFinding`: an output layer that computes in 16 bits (found inside the
  user's process, `tuner.fixes.precision.check_output_layer`; sent to the parent as a typed
  child event, `probes.live.clock_events.OutputLayerFound`);
- `ReusedMeasurement`: a trial that reused the measurement of an earlier trial of the same
  config (`tuner.study.objective.reuse_twin`). A report reads it back from the JSON's text
  with `ReusedMeasurement.read`, the one place such words are parsed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader

FLOAT32_OUTPUT_FIX = 'keep the output layer in float32: `Dense(..., dtype="float32")`'
FINDING_PREFIX = "mixed precision: "


@dataclass(frozen=True, slots=True)
class OutputPrecisionFinding:
    """An output layer that computes in 16 bits before a softmax/sigmoid or the loss."""

    layer: str  # the layer's name
    layer_type: str  # its class, e.g. Dense
    compute_dtype: str  # float16 | bfloat16
    before: str  # "softmax", "sigmoid", ... or "the loss"
    policy: str | None  # the layer's dtype policy name, e.g. mixed_float16

    def finding(self) -> str:
        """What is wrong and the fix, without the note's prefix."""
        under = f" under {self.policy}" if self.policy else ""
        what = f"its {self.before}" if self.before != "the loss" else "the loss"
        return (
            f"the output layer {self.layer!r} ({self.layer_type}) computes "
            f"in {self.compute_dtype}{under} before {what}; {FLOAT32_OUTPUT_FIX}"
        )

    def message(self) -> str:
        """The finding as a trial's note (and the documents' ``findings``)."""
        return f"{FINDING_PREFIX}{self.finding()}"

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "layer_type": self.layer_type,
            "compute_dtype": self.compute_dtype,
            "before": self.before,
            "policy": self.policy,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> OutputPrecisionFinding:
        return cls(
            r.required_string("layer"),
            r.required_string("layer_type"),
            r.required_string("compute_dtype"),
            r.required_string("before"),
            r.string("policy"),
        )

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], *, source: str) -> OutputPrecisionFinding:
        return cls.from_reader(Reader(raw, source=source))


_REUSED = "the same config as trial {twin}: its measurement is reused"
_REUSED_RE = re.compile(re.escape(_REUSED).replace(re.escape("{twin}"), r"(\d+)"))


@dataclass(frozen=True, slots=True)
class ReusedMeasurement:
    """A trial that reused an earlier trial's measurement: the same config, not run again."""

    twin: int  # the earlier trial's number

    def text(self) -> str:
        return _REUSED.format(twin=self.twin)

    @classmethod
    def read(cls, note: str) -> ReusedMeasurement | None:
        """The record a note's words were rendered from; None for any other note."""
        found = _REUSED_RE.fullmatch(note)
        return cls(int(found.group(1))) if found else None
