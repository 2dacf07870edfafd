"""The child's events: one tagged union, one strict codec, and the clock file's bytes as
tftune wrote them before the events were typed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import get_args

import pytest
from repo_paths import FIXTURES

from tftune.core.learning import OptimizerSeen
from tftune.core.trial_notes import OutputPrecisionFinding
from tftune.probes.advice.service_sizing import CpuUsage
from tftune.probes.live.clock import ClockReader, ClockWriter, StepRecord, decode_line
from tftune.probes.live.clock_events import (
    CLOCK_EVENTS,
    EVENT_TYPES,
    ChildEvent,
    ChildNotes,
    ClockLineError,
    CpuMeasured,
    EpochStart,
    LossSamples,
    NanSeen,
    OptimizerBuilt,
    OutputLayerFound,
    ProfileDone,
    ProfileFailed,
    ScriptFinished,
    ScriptRaised,
    ScriptStarted,
    StreamFound,
    TrainingFound,
    decode_event,
    encode_event,
    event_from_json,
)
from tftune.probes.live.epoch_stall import PipelineStage
from tftune.probes.live.training_time import PassTimeline

# Recorded with tftune before its events were typed: a Keras fit under mixed_float16
# with a float16 softmax, validation, three epochs (`tests/fixtures/clock_keras_fit.txt`).
RECORDED = FIXTURES / "clock_keras_fit.txt"

ONE_OF_EACH: tuple[ChildEvent, ...] = (
    ScriptStarted(1_700_000_000_000_000_000),
    ScriptFinished(3),
    ScriptRaised("ValueError", ("ValueError", "Exception"), "bad path", "train.py:4"),
    NanSeen("the trained weights", math.inf),
    ChildNotes(("compile with jit_compile=True", "fit trains with one iterator")),
    OutputLayerFound(OutputPrecisionFinding("probs", "Dense", "float16", "softmax", None)),
    CpuMeasured(CpuUsage(1.5, 240.0)),
    StreamFound(2, "train.py:9", None),
    TrainingFound(1, "fetched and updated in one tf.function", at_ns=12),
    EpochStart(1, 5, 8, True, (PipelineStage("map", "t.py:3", True, "RandomUniform", 64),)),
    LossSamples(((10, 0.5, 0), (20, 0.25, 0)), ("fit",), None),
    OptimizerBuilt(OptimizerSeen("train.py:18", "Adam", 0.001)),
    ProfileDone("/tmp/logs", 5, 9),
    ProfileFailed("RuntimeError: no profiler"),
)


def test_every_event_type_round_trips_through_its_line(tmp_path: Path) -> None:
    """Each member of the union is written as one line and read back equal, through the
    writer and the reader the child and the parent use."""
    assert set(EVENT_TYPES) == set(get_args(ChildEvent)) == {type(e) for e in ONE_OF_EACH}
    assert len({t.kind for t in EVENT_TYPES}) == len(EVENT_TYPES)
    path = tmp_path / "clock.txt"
    writer = ClockWriter(str(path))
    for event in ONE_OF_EACH:
        writer.event(event)
        line = encode_event(event)
        assert line.endswith("\n") and line.count("\n") == 1
        assert decode_event(line.rstrip("\n")) == event
    writer.close()
    reader = ClockReader(str(path))
    assert tuple(reader.poll()) == ONE_OF_EACH and reader.skipped == 0


def test_a_nan_keeps_its_value() -> None:
    (event,) = [decode_event(encode_event(NanSeen("loss", math.nan)).rstrip("\n"))]
    assert isinstance(event, NanSeen) and math.isnan(event.value)


def test_a_recorded_clock_file_reads_and_writes_back_byte_for_byte() -> None:
    """The line format is unchanged: every line of a file recorded before the events were
    typed decodes, and its type encodes to the very same bytes."""
    lines = RECORDED.read_text(encoding="utf-8").splitlines()
    decoded = [decode_line(line) for line in lines]
    events = [d for d in decoded if not isinstance(d, StepRecord)]
    assert {type(e) for e in events} >= {ScriptStarted, EpochStart, LossSamples, ScriptFinished}
    for line, item in zip(lines, decoded, strict=True):
        if not isinstance(item, StepRecord):
            assert encode_event(item) == line + "\n"
    # What the parent reads from it: the training stream, the epochs and their pipeline.
    timeline = PassTimeline()
    for e in events:
        timeline.event(e)
    assert [e.stream for e in events if isinstance(e, StreamFound)] == [1, 2]
    assert [e.stream for e in events if isinstance(e, TrainingFound)] == [1]
    assert len(timeline.starts(1)) >= 3 and timeline.starts(1)[0].chain
    # Then, the finding was a note in words: it reads back as one (now a typed event).
    (notes,) = [e for e in events if isinstance(e, ChildNotes)]
    assert notes.notes[0].startswith("mixed precision: the output layer 'dense_1'")


@pytest.mark.parametrize(
    ("kind", "payload", "words"),
    [
        ("epochs", {}, "unknown event kind 'epochs'"),
        ("started", [], "must be a JSON object"),
        ("started", {}, "'at_ns' is missing"),
        ("started", {"at_ns": "soon"}, "must be an integer"),
        ("started", {"at_ns": 1, "at": 2}, "has no field at"),
        ("loss", {"t": [1, 2], "v": [0.5], "p": [0, 0]}, "must be as long as"),
        ("epoch", {"stream": 1, "at_ns": 0, "cardinality": 2, "chain": [3]}, "pipeline stages"),
        ("nan", {"what": "loss", "value": "nan"}, "must be a number"),
    ],
)
def test_decoding_is_strict(kind: str, payload: object, words: str) -> None:
    with pytest.raises(ClockLineError, match=words):
        event_from_json(kind, payload, CLOCK_EVENTS, source="test")
    with pytest.raises(ClockLineError, match=words):
        decode_line(f"E {kind} {json.dumps(payload)}")
