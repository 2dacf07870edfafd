"""Discovery's file: its events through the clock file's codec, and what the parent
makes of them (no TensorFlow)."""

from __future__ import annotations

from typing import get_args

import pytest

from tftune.probes.live.clock_events import (
    ClockLineError,
    EpochStart,
    ScriptStarted,
    StreamFound,
    TrainingFound,
    decode_event,
    encode_event,
)
from tftune.probes.live.epoch_stall import PipelineStage
from tftune.tuner.child.discovery_events import (
    DISCOVERY_EVENTS,
    DISCOVERY_TYPES,
    CompileFound,
    DiscoveryEvent,
    ElementCounts,
    FitFound,
    KerasImported,
    PipelineIterated,
    SiteFound,
    StepFunctionFound,
)
from tftune.tuner.child.state import IterationInfo, SiteCall
from tftune.tuner.fixes.training_calls import CompileCall, FitCall, StepFunction
from tftune.tuner.searchspace.config import SiteConfig
from tftune.tuner.trial.discovery import parse_discovery

MAP = SiteCall("train.py:7", "map", SiteConfig(num_parallel_calls=4), "parse")
PIPELINE = IterationInfo(
    "train.py:9",
    final_prefetch=True,
    batched=True,
    threadpool_size=None,
    deterministic=None,
    stream=1,
    lineage=("train.py:7", "train.py:9"),
    chain=(PipelineStage("map", "train.py:7", python=True), PipelineStage("batch", "train.py:8")),
    loop="fit",
)
RUN: tuple[DiscoveryEvent, ...] = (
    ScriptStarted(1_000_000_000),
    KerasImported("keras"),
    SiteFound(MAP),
    SiteFound(MAP),
    StreamFound(0, "train.py:12", "train.py:13"),
    CompileFound(CompileCall("train.py:20", False, "auto", None)),
    FitFound(FitCall("train.py:21", 100, None, False, False)),
    PipelineIterated(PIPELINE),
    StreamFound(1, "train.py:9", "train.py:21"),
    ElementCounts(((0, 5), (1, 3))),
    TrainingFound(1, "fetched and updated in one tf.function", 3_500_000_000),
    StepFunctionFound(StepFunction("train_step", "train.py:15", eager=False)),
)


def test_every_discovery_event_round_trips_through_the_codec() -> None:
    assert set(DISCOVERY_TYPES) == set(get_args(DiscoveryEvent)) == {type(e) for e in RUN}
    for event in RUN:
        assert decode_event(encode_event(event).rstrip("\n"), DISCOVERY_EVENTS) == event


def test_a_clock_event_that_discovery_does_not_write_is_no_discovery_event() -> None:
    line = encode_event(EpochStart(1, 0, 8)).rstrip("\n")
    with pytest.raises(ClockLineError, match="unknown event kind 'epoch'"):
        decode_event(line, DISCOVERY_EVENTS)


def test_the_parent_reads_a_discovery_from_the_events() -> None:
    found = parse_discovery("train.py", RUN, 0, "")
    (site,) = found.sites
    assert (site.site, site.op, site.calls, site.function) == ("train.py:7", "map", 2, "parse")
    assert site.as_written.num_parallel_calls == 4
    (pipeline,) = found.pipelines
    assert pipeline.chain == PIPELINE.chain and pipeline.loop == "fit"
    assert found.uses_keras and found.preamble_s == pytest.approx(2.5)
    assert found.training is not None and found.training.stream == 1
    assert [(s.stream, s.elements, s.training) for s in found.streams] == [
        (0, 5, False),
        (1, 3, True),
    ]
    assert found.fits[0].x_elements == 100 and found.compiles[0].jit_compile == "auto"
    assert found.step_function == StepFunction("train_step", "train.py:15", eager=False)
