"""Report models: validation of the analysis and tuning JSON into frozen, typed data."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from repo_paths import FIXTURES

from tftune.core.analysis_document import AnalysisDocument
from tftune.core.analysis_trace import XProfCheck
from tftune.core.errors import UserError
from tftune.core.tuning_document import TuningDocument
from tftune.core.vocabulary import TrialState, stage_kind
from tftune.reports import analysis_model, detect_kind, tuning_model
from tftune.reports.analysis_html import render_analysis_html
from tftune.reports.analysis_model import AnalysisReport, build_analysis_model
from tftune.reports.tuning_html import render_tuning_html
from tftune.reports.tuning_model import TuningReport, build_tuning_model

WHEN = "2026-11-30 03:40 UTC"


def analysis_report(
    data: dict[str, Any], *, generated_at: str = WHEN, source: str = "analysis JSON"
) -> AnalysisReport:
    """The model of a saved analysis JSON, as `tftune report` makes it."""
    doc = analysis_model.read_analysis_json(data, source=source)
    return build_analysis_model(doc, generated_at=generated_at, source=source, data=data)


def tuning_report(
    data: dict[str, Any], *, generated_at: str = WHEN, source: str = "tuning JSON"
) -> TuningReport:
    """The model of a saved tuning JSON, as `tftune report` makes it."""
    doc = TuningDocument.from_json(data, source=source)
    return build_tuning_model(doc, generated_at=generated_at, source=source, data=data)


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


CPU = "analysis_cpu_pyfunc.json"
GPU = "analysis_gpu_h2d.json"
TUNING = "tuning_latency.json"


def test_same_input_gives_equal_models_and_the_timestamp_is_injected() -> None:
    a = analysis_report(load(CPU), generated_at=WHEN, source=CPU)
    b = analysis_report(load(CPU), generated_at=WHEN, source=CPU)
    assert a == b
    later = analysis_report(load(CPU), generated_at="2027-01-01 00:00 UTC", source=CPU)
    assert later != a
    assert dataclasses.replace(later, generated_at=WHEN) == a
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.source = "x"  # type: ignore[misc]


def test_cpu_fixture_reads_as_the_run_it_describes() -> None:
    m = analysis_report(load(CPU), generated_at=WHEN, source=CPU)
    assert m.verdict.level == "high"
    assert m.input_bound is True and m.input_share == pytest.approx(0.93)
    assert m.steps.count == 20 and len(m.per_step) == 20 == m.per_step_total
    top = m.bottlenecks[0]
    assert (top.rank, top.category, top.stage) == (
        1,
        "python",
        "Iterator::Root::Prefetch::MapAndBatch",
    )
    assert top.recommendation is not None and top.recommendation.code is not None
    assert "num_parallel_calls" in top.recommendation.code
    assert ("parallelism", 1) in top.evidence.items()
    (hot,) = [s for s in m.stages if s.bottleneck]
    assert stage_kind(hot.name) == "MapAndBatch" and hot.parallelism == 1 and hot.autotune is False
    assert hot.buffer_limit is None  # null in the JSON: not measured, not 0
    # Breakdown follows the documented category order, input first.
    assert [k for k, _ in m.breakdown][:4] == [
        "input_wait",
        "host_to_device",
        "device_compute",
        "host_compute",
    ]
    assert m.per_step[0].parts[0][0] == "input_wait"
    assert m.run.tf_version == "2.21.0" and m.run.cores == 2
    assert m.timeline is not None and {t.kind for t in m.timeline.tracks} == {"host", "tf_data"}
    assert json.loads(m.data_json)["run"] == "2026_11_30_03_38_26"


def test_null_stays_not_measured() -> None:
    m = analysis_report(load(GPU), generated_at=WHEN, source=GPU)
    assert m.run.tf_version is None
    assert dict(m.breakdown)["kernel_launch"] is None
    assert dict(m.breakdown)["compilation"] == 0.0
    assert m.run.skipped and "truncated" in m.run.skipped[0][1]
    assert m.timeline is not None and any(t.kind == "device" for t in m.timeline.tracks)


def test_minimal_guide_json_is_enough_and_the_verdict_is_derived() -> None:
    minimal = {
        "schema": 1,
        "device": "CPU_ONLY",
        "step_detection": "inferred:iterator_get_next",
        "steps": {"count": 30, "mean_ms": 12.3, "p50_ms": 11.9, "p90_ms": 15.0},
        "input_bound": True,
        "input_share": 0.62,
        "breakdown": {"input_wait": 0.62, "host_compute": 0.3, "other": 0.08},
        "bottlenecks": [{"category": "io", "share": 0.5, "stage": None, "call_site": None}],
    }
    m = analysis_report(minimal, generated_at=WHEN)
    assert m.verdict.level == "high" and "62%" in m.verdict.sentence
    assert m.stages == () and m.per_step == () and m.timeline is None
    assert m.bottlenecks[0].recommendation is None and m.run.hosts == ()
    low = {**minimal, "input_bound": False, "input_share": 0.01}
    assert analysis_report(low, generated_at=WHEN).verdict.level == "low"
    unknown = {**minimal, "input_bound": None, "input_share": None}
    assert "not measured" in analysis_report(unknown, generated_at=WHEN).verdict.sentence


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("steps"), "'steps' is missing"),
        (lambda d: d["steps"].update(mean_ms="fast"), "'steps.mean_ms' must be a number"),
        (lambda d: d["steps"].update(count=None), "'steps.count' must be an integer"),
        (lambda d: d["bottlenecks"][1].pop("category"), "'bottlenecks[1].category' is missing"),
        (lambda d: d["bottlenecks"][0].update(share=1.7), "'bottlenecks[0].share'"),
        (lambda d: d.update(schema=2), "'schema' is 2"),
        (lambda d: d.update(input_bound="yes"), "'input_bound' must be true or false"),
        (lambda d: d.pop("input_bound"), "'input_bound' is missing"),
        (lambda d: d["verdict"].update(level="severe"), "'verdict.level' must be one of"),
        (lambda d: d.update(stages={"a": 1}), "'stages' must be a list"),
        (lambda d: d["stages"][2].update(parallelism="1x"), "'stages[2].parallelism'"),
        (lambda d: d["timeline"]["tracks"][0]["events"].append([1.0]), "'timeline.tracks[0]"),
        (lambda d: d["timeline"].update(end_ms=-5.0), "'timeline.end_ms' must not be before"),
        (
            lambda d: d["timeline"]["tracks"][1]["events"].append([float("nan"), 1.0, "x"]),
            "'timeline.tracks[1].events[8]' must be [start_ms, duration_ms, name]",
        ),
    ],
)
def test_malformed_analysis_fails_naming_file_and_field(mutate: Any, field: str) -> None:
    data = load(CPU)
    mutate(data)
    with pytest.raises(UserError) as err:
        analysis_report(data, generated_at=WHEN, source="run.json")
    message = str(err.value)
    assert message.startswith("run.json: field ") and field in message
    assert "\n" not in message


def test_detect_kind() -> None:
    assert detect_kind(load(CPU)) == "analysis"
    assert detect_kind(load(TUNING)) == "tuning"
    with pytest.raises(UserError, match=r"x\.json: not a tftune analysis or tuning JSON"):
        detect_kind({"schema": 1, "hello": "world"}, source="x.json")
    with pytest.raises(UserError, match="top level"):
        detect_kind([1, 2], source="x.json")  # type: ignore[arg-type]


def test_timeline_and_steps_are_capped_keeping_the_longest_events() -> None:
    data = load(CPU)
    events = [[i * 0.001, 0.0005, "tiny"] for i in range(60_000)]
    events.append([5.0, 30.0, "IteratorGetNext"])
    data["timeline"]["tracks"][0]["events"] = events
    data["per_step"] = data["per_step"] * 400  # 8000 rows
    m = analysis_report(data, generated_at=WHEN, source=CPU)
    assert m.timeline is not None
    kept = m.timeline.tracks[0]
    assert len(kept.events) <= analysis_model.MAX_TIMELINE_EVENTS
    assert kept.dropped == 60_001 - len(kept.events)
    assert any(e.name == "IteratorGetNext" for e in kept.events)
    assert [e.start_ms for e in kept.events] == sorted(e.start_ms for e in kept.events)
    assert len(m.per_step) == analysis_model.MAX_STEPS and m.per_step_total == 8000
    embedded = json.loads(m.data_json)
    assert len(embedded["per_step"]) == analysis_model.MAX_STEPS
    assert len(embedded["timeline"]["tracks"][0]["events"]) == len(kept.events)


def test_tuning_model() -> None:
    m = tuning_report(load(TUNING), generated_at=WHEN, source=TUNING)
    assert m == tuning_report(load(TUNING), generated_at=WHEN, source=TUNING)
    assert [r.key for r in m.rows] == ["as_written", "autotune", "heuristic", "guided", "tuned"]
    speedups = {r.key: r.speedup for r in m.rows}
    assert speedups["as_written"] == pytest.approx(1.0)
    assert speedups["tuned"] == pytest.approx(7310 / 236)  # the re-measured winner
    assert m.ceiling == 9100.0
    assert m.importances[0] == ("train.py:18/num_parallel_calls", 0.71)
    assert [v for _, v in m.importances] == sorted((v for _, v in m.importances), reverse=True)
    states = [t.state for t in m.trials]
    assert states.count(TrialState.PRUNED) == 2 and states.count(TrialState.FAILED) == 1
    failed = next(t for t in m.trials if t.state is TrialState.FAILED)
    assert failed.reason is not None and "ResourceExhausted" in failed.reason
    assert failed.value is None
    assert tuning_model.ConfigEntry("train.py:18", "num_parallel_calls", "32") in m.config
    assert tuning_model.ConfigEntry("global", "threadpool_size", "32") in m.config
    # null knobs are left as written, and the file's bookkeeping is not a knob
    assert {c.knob for c in m.config}.isdisjoint({"deterministic", "schema", "mixed_precision"})
    assert m.confirmed is not None and m.confirmed.examples_per_s == 7310.0
    assert m.ceiling_limited_by == "pipeline"
    assert ("batch_size", m.left_out[1][1]) == m.left_out[1] and "--batch-size" in m.left_out[1][1]
    assert m.knobs[0].name == "train.py:18/num_parallel_calls" and "AUTOTUNE" in m.knobs[0].choices
    assert m.trials[0].role == "as_written" and m.trials[5].role == "search"
    assert ("storage", "sqlite:///tftune.db") in m.study
    assert m.diff is not None and m.diff.startswith("--- train.py")


def test_tuning_rows_prefer_the_final_rounds_side_by_side_figures() -> None:
    data = load(TUNING)
    data["baselines"]["as_written"]["confirmed"] = {"examples_per_s": 365.5, "spread": 0.1}
    data["baselines"]["autotune"]["confirmed"] = {"examples_per_s": 731.0}
    m = tuning_report(data, generated_at=WHEN, source=TUNING)
    rows = {r.key: r for r in m.rows}
    assert rows["as_written"].measurement is not None
    assert rows["as_written"].measurement.examples_per_s == 365.5
    assert rows["autotune"].speedup == pytest.approx(2.0)
    assert rows["tuned"].speedup == pytest.approx(7310 / 365.5)  # both from the final round
    guided = data["baselines"]["guided"]["examples_per_s"]
    assert rows["guided"].measurement.examples_per_s == guided  # type: ignore[union-attr]


def test_tuning_tolerates_missing_optional_and_rejects_bad_required() -> None:
    data = load(TUNING)
    for key in ("trials_detail", "importances", "diff", "command", "ceiling", "notes"):
        data.pop(key)
    del data["baselines"]["heuristic"]
    m = tuning_report(data, generated_at=WHEN)
    assert m.trials == () and m.importances == () and m.ceiling is None
    # The heuristic is optional (no trial where the pipeline screen drained it): no row.
    assert [r.key for r in m.rows] == ["as_written", "autotune", "guided", "tuned"]
    guide_shape = load(TUNING)  # GUIDE.md's config shape: {call site: {knob: value}}
    guide_shape["best"]["config"] = {"train.py:18": {"num_parallel_calls": 32}, "global": {"x": 1}}
    entries = tuning_report(guide_shape, generated_at=WHEN).config
    assert entries == (
        tuning_model.ConfigEntry("global", "x", "1"),
        tuning_model.ConfigEntry("train.py:18", "num_parallel_calls", "32"),
    )

    gpu = load(TUNING)
    gpu["objective"] = "gpu-util"
    gpu["trials_detail"][0]["utilization"] = 0.3
    assert tuning_report(gpu, generated_at=WHEN).trials[0].value == 0.3

    for mutate, field in [
        (lambda d: d.pop("best"), "'best' is missing"),
        (lambda d: d.update(objective="speed"), "'objective' must be one of"),
        (lambda d: d["trials_detail"][3].update(state="EXPLODED"), "'trials_detail[3].state'"),
        (lambda d: d["best"].update(config=[1]), "'best.config' must be an object"),
        (lambda d: d["importances"].update(batch_size="high"), "'importances.batch_size'"),
        (lambda d: d["baselines"]["autotune"].update(utilization=3), "utilization"),
    ]:
        bad = load(TUNING)
        mutate(bad)
        with pytest.raises(UserError, match=field.replace("[", r"\[").replace("]", r"\]")):
            tuning_report(bad, generated_at=WHEN, source="t.json")


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children)
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            out += _paths(v, (*prefix, i))
    return out


_CPU_PATHS = _paths(load(CPU))
_TUNING_PATHS = _paths(load(TUNING))


@settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    which=st.booleans(),
    index=st.integers(min_value=0, max_value=10_000),
    value=_JSON_VALUES,
)
def test_any_corrupted_field_gives_a_model_or_a_user_error(
    which: bool, index: int, value: Any
) -> None:
    """Whatever one field holds, building and rendering fail with a UserError or not at all."""
    name, paths = (CPU, _CPU_PATHS) if which else (TUNING, _TUNING_PATHS)
    data = copy.deepcopy(load(name))
    path = paths[index % len(paths)]
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    try:
        if which:
            html = render_analysis_html(analysis_report(data, generated_at=WHEN, source=name))
        else:
            html = render_tuning_html(tuning_report(data, generated_at=WHEN, source=name))
    except UserError as exc:
        assert str(exc).startswith(name + ": ") and "\n" not in str(exc)
    else:
        assert html.startswith("<!DOCTYPE html>")


def _doc(data: dict[str, Any]) -> AnalysisDocument:
    return AnalysisDocument.from_json(data)


XPROF = {
    "steptime_ms": 12.3,
    "input_share": 0.54,
    "tftune_steptime_ms": 12.4,
    "tftune_input_share": 0.55,
    "note": None,
}


def test_the_xprof_cross_check_is_read_when_present() -> None:
    data = load(CPU)
    assert analysis_report(data, generated_at=WHEN).xprof is None
    m = analysis_report({**data, "xprof": XPROF}, generated_at=WHEN)
    assert m.xprof == XProfCheck(12.3, 0.54, 12.4, 0.55, None)
    # null, or an object without a figure or a note: nothing to show
    assert analysis_report({**data, "xprof": None}, generated_at=WHEN).xprof is None
    empty = {**data, "xprof": dict.fromkeys(XPROF)}
    assert analysis_report(empty, generated_at=WHEN).xprof is None
    for bad, field in [
        ([1], "'xprof' must be an object"),
        ({**XPROF, "input_share": 54}, "'xprof.input_share' must be a fraction"),
        ({**XPROF, "steptime_ms": "fast"}, "'xprof.steptime_ms' must be a number"),
    ]:
        with pytest.raises(UserError, match=field):
            analysis_report({**data, "xprof": bad}, generated_at=WHEN, source="a.json")


def test_the_terminal_summary_has_one_xprof_line_when_cross_checked() -> None:
    from tftune.reports.analysis_terminal import render

    data = load(CPU)
    line = "XProf: step 12.3 ms, input 54% · tftune: step 12.4 ms, input 55%"
    text = render(_doc({**data, "xprof": XPROF}), width=200)
    assert [row for row in text.splitlines() if row.startswith("XProf")] == [line]
    noted = render(_doc({**data, "xprof": {**XPROF, "note": "3 steps fewer in XProf"}}), width=200)
    assert f"{line} (3 steps fewer in XProf)" in noted
    partial = render(_doc({**data, "xprof": {**XPROF, "input_share": None}}), width=200)
    assert "XProf: step 12.3 ms, input not measured · tftune" in partial
    for absent in (None, dict.fromkeys(XPROF)):
        assert "XProf" not in render(_doc({**data, "xprof": absent}), width=200)
    assert "XProf" not in render(_doc(data), width=200)


def test_the_terminal_speaks_the_vocabulary() -> None:
    from tftune.reports.analysis_terminal import render

    data = load(GPU)
    data["breakdown"]["device_to_device"] = 0.04
    text = render(_doc(data), width=200)
    assert "host → device 23%" in text and "device → device 4%" in text
    # Bottlenecks name a stage by its kind and its consumer; the stage tree by its kind.
    text = render(_doc(load(CPU)), width=200)
    assert "│ Prefetch::MapAndBatch │" in text and "│     MapAndBatch ◀ │" in text
