"""A run's typed notes: the words are rendered from the records, and a reused
measurement's words read back to the record they came from (and nothing else does)."""

from __future__ import annotations

import pytest

from tftune.core.document_reading import Reader
from tftune.core.errors import UserError
from tftune.core.trial_notes import (
    FINDING_PREFIX,
    FLOAT32_OUTPUT_FIX,
    OutputPrecisionFinding,
    ReusedMeasurement,
)
from tftune.core.tuning_trials import TrialRow
from tftune.reports.tuning_terminal import trial_line


def test_a_reused_measurement_reads_back_from_its_words() -> None:
    note = ReusedMeasurement(12).text()
    assert note == "the same config as trial 12: its measurement is reused"
    assert ReusedMeasurement.read(note) == ReusedMeasurement(12)
    for other in ("its measurement is reused", f"{note}, twice", "the same config as trial x"):
        assert ReusedMeasurement.read(other) is None


def test_the_terminal_shows_the_reused_note_and_no_other() -> None:
    row = {
        "number": 7,
        "role": "search",
        "state": "complete",
        "params": {},
        "description": "map=4",
        "examples_per_s": 100.0,
        "notes": ["each measured window held only 8 steps", ReusedMeasurement(3).text()],
    }
    line = trial_line(TrialRow.from_reader(Reader(row, source="trials_detail row")))
    assert line.endswith("; the same config as trial 3: its measurement is reused  [map=4]")
    assert "8 steps" not in line


def test_a_finding_renders_its_words_and_keeps_its_json() -> None:
    found = OutputPrecisionFinding("probs", "Dense", "float16", "sigmoid", "mixed_float16")
    assert found.message() == (
        f"{FINDING_PREFIX}the output layer 'probs' (Dense) computes in float16 under "
        f"mixed_float16 before its sigmoid; {FLOAT32_OUTPUT_FIX}"
    )
    assert OutputPrecisionFinding.from_json(found.to_json(), source="t") == found
    with pytest.raises(UserError, match="'layer' must be a string"):
        OutputPrecisionFinding.from_json({**found.to_json(), "layer": None}, source="t")
