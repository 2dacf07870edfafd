"""Diagnoses of real recorded pipelines: category, stage, share and fix."""

from __future__ import annotations

from typing import Any

import pytest

from tftune.core.vocabulary import MODERATELY_INPUT_BOUND
from tftune.probes.advice.analysis import Analysis, analyze
from tftune.probes.advice.findings import verdict


def _top(a: Analysis) -> Any:
    assert a.bottlenecks, a.to_json()["verdict"]
    return a.bottlenecks[0]


@pytest.mark.parametrize(
    ("share", "level", "bound"),
    [(0.5, "high", True), (0.2, "high", True), (0.1, "moderate", True), (0.01, "low", False)],
)
def test_verdict_bands(share: float, level: str, bound: bool) -> None:
    v = verdict(share, {"host_compute": 0.3, "device_compute": 0.0}, "CPU")
    assert (v.level, v.input_bound) == (level, bound)
    assert f"{round(100 * share)}%" in v.sentence and "host compute takes 30%" in v.sentence


def test_verdict_without_steps_is_not_measured() -> None:
    v = verdict(None, {}, "CPU")
    assert v.input_bound is None and v.level is None and v.input_share is None


def test_latency_bound_reads_are_io_and_need_a_bigger_threadpool(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("slow_reads"))
    assert a.input_bound and a.findings.verdict.level == "high"
    top = _top(a)
    assert top.category == "io" and top.share > 0.5
    assert top.stage == "Iterator::Root::MapAndBatch"
    assert top.evidence["latency_bound"] is True and top.evidence["capped_by"] == "threadpool_size"
    rec = top.recommendation
    assert rec is not None and "private_threadpool_size" in rec.code
    assert "num_parallel_calls" in rec.code
    # the reads go through tf.py_function: its per-call cost is worth a second fix
    mine = [r for r in a.findings.recommendations if r.stage == top.stage]
    assert any("tf.numpy_function(" in r.code for r in mine[1:])


def test_tfrecord_reading_and_parsing(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("tfrecord_seq"))
    assert a.input_bound
    cats = {b.category: b for b in a.bottlenecks}
    assert "io" in cats and cats["io"].stage is not None and cats["io"].stage.endswith("TFRecord")
    assert "preprocessing" in cats
    # The stage named runs `parse`: its busiest kernels are parse's own. Which of them
    # leads moves with the load on the machine (ParseExample ranked 3rd of 5 and DecodeRaw
    # 7th on a quiet one), so the parsing kernels are looked for among the stage's 8.
    pre = cats["preprocessing"]
    parse_ops = ("ParseExample", "DecodeRaw", "Cast", "truediv", "l2_normalize")
    assert pre.functions and all(any(op in f for op in parse_ops) for f in pre.functions)
    (stage,) = [s for s in a.stages.stages if s.name == pre.stage]
    assert any("ParseExample" in n or "DecodeRaw" in n for n in stage.op_nodes)
    codes = " ".join(r.code for r in a.findings.recommendations)
    assert "interleave(" in codes and "cycle_length" in codes


def test_tf_strings_tokenization(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("tf_strings"))
    top = _top(a)
    assert top.category == "tokenization"
    assert top.stage is not None and top.stage.endswith("ParallelMapV2")
    assert any("String" in f for f in top.functions)


def test_python_tokenizer_in_py_function(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("py_tokenizer"))
    top = _top(a)
    assert top.category == "tokenization" and top.evidence.get("text_to_ids") is True
    assert top.evidence["parallelism"] == 1
    rec = top.recommendation
    assert rec is not None and "TF text ops" in rec.summary and "num_parallel_calls" in rec.code


def test_image_decode_and_augment(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("image_aug"))
    top = _top(a)
    assert top.category == "preprocessing" and top.share > 0.5
    assert "DecodeJpeg" in top.functions
    codes = [r.code for r in a.findings.recommendations]
    assert any(".cache()" in c for c in codes)
    assert any("num_parallel_calls=tf.data.AUTOTUNE" in c for c in codes)


def test_compute_bound_model(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("compute_bound"))
    assert a.input_bound is False and a.input_share is not None
    assert a.input_share < MODERATELY_INPUT_BOUND
    top = _top(a)
    assert top.category == "host_compute" and top.stage is None
    assert top.functions[:1] == ("train_step",)  # the tf.function the step spends its time in
    assert top.recommendation is not None and "mixed_bfloat16" in top.recommendation.code


def test_keras_fit_through_the_tensorboard_callback(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("keras_fit"))
    assert a.steps.detection == "markers" and len(a.steps) >= 4
    assert a.input_share is not None and a.findings.verdict.sentence
    maps = [s for s in a.stages.stages if s.function_calls]
    # The user's map (fused with batch(64)) and the time its function ran are found.
    assert maps and maps[0].function_ps > 0 and maps[0].knob("batch_size") == 64


def test_no_step_markers_gives_the_one_line_fix(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("no_markers"))
    assert a.steps.detection.startswith("inferred:")
    top = _top(a)
    assert top.category == "python" and top.stage == "Iterator::Root::MapAndBatch"
    data = a.to_json()
    assert any(
        "Trace(" in r["code"] and "step_num=step" in r["code"] for r in data["recommendations"]
    )
    assert any("step markers" in n for n in data["notes"])


def test_two_runs_newest_by_default_and_selectable(trace_case) -> None:  # type: ignore[no-untyped-def]
    from tftune.probes.traces.locate import list_runs

    logdir = trace_case("two_runs")
    runs = list_runs(logdir)
    assert len(runs) == 2
    assert analyze(logdir).run.name == runs[-1].name
    assert analyze(logdir, run=runs[0].name).run.name == runs[0].name


def test_from_generator_is_python_with_a_generator_fix(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("generator"))
    top = _top(a)
    assert top.category == "python" and top.stage is not None and "Generator" in top.stage
    assert top.recommendation is not None and "from_generator" in top.recommendation.summary
    assert "PyDataset" in top.recommendation.summary  # Keras' own from_generator user
    # a generator runs through PyFunc, not py_function: no numpy_function advice
    assert not any("numpy_function" in r.summary for r in a.findings.recommendations)
