"""Diagnoses of public-style training scripts (issue 19), from the recorded traces of
tests/tracegen_real.py's cases: the verdict, category, stage and fix a person who reads
the script would give, and the next moves for a compute-bound step."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import tracegen_real  # noqa: F401  (registers the cases)

from tftune.core.vocabulary import TRAINING_LOOP
from tftune.probes.advice.analysis import Analysis, analyze
from tftune.probes.advice.findings import NOT_THE_LIMIT
from tftune.probes.advice.recommendations import in_place
from tftune.probes.traces.callsites import RecordedSite, write_sites
from tftune.probes.traces.locate import locate
from tftune.reports import render_report_json
from tftune.reports.analysis_terminal import render


def _top(a: Analysis) -> Any:
    assert a.bottlenecks, a.to_json()["verdict"]
    return a.bottlenecks[0]


def _no_fix_in_place(a: Analysis) -> None:
    for r in a.findings.recommendations:
        assert in_place(r, a.stages) is None, (r.summary, in_place(r, a.stages))


def _with_sites(logdir: Path, tmp: Path, sites: list[RecordedSite]) -> Path:
    """A copy of a recorded logdir with the call sites `tftune profile` would record."""
    copy = tmp / "logdir"
    shutil.copytree(logdir, copy)
    write_sites(locate(copy).path, "train.py", sites)
    return copy


def test_many_small_files_are_io_at_the_interleave(trace_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    logdir = trace_case("small_files")
    a = analyze(logdir)
    assert a.findings.verdict.level == "high"
    top = _top(a)
    assert top.category == "io" and top.share > 0.5
    assert top.stage is not None and top.stage.endswith("::BatchV2::Interleave")
    assert top.evidence["opens_files"] is True and top.evidence["files_opened"] > 100
    rec = top.recommendation
    assert rec is not None and "interleave(tf.data.TFRecordDataset" in rec.code
    for knob in ("cycle_length=", "num_parallel_calls=tf.data.AUTOTUNE", "deterministic=False"):
        assert knob in rec.code
    mine = [r for r in a.findings.recommendations if r.stage == top.stage]
    assert any("larger files" in r.summary and "TFRecordWriter" in r.code for r in mine[1:])
    # The map after the batch is already a ParallelMapV2: never told to add parallelism.
    assert not any(
        "one element at a time" in r.summary or r.code.startswith("ds = ds.map(fn, num_parallel")
        for r in a.findings.recommendations
    )
    _no_fix_in_place(a)
    # With the call sites tftune profile records, the fix names the interleave's line.
    sites = [
        RecordedSite("train.py:30", "interleave", "TFRecordDataset"),
        RecordedSite("train.py:31", "batch"),
        RecordedSite("train.py:31", "map", "parse_batch"),
    ]
    placed = _top(analyze(_with_sites(logdir, tmp_path, sites)))
    assert placed.call_site == "train.py:30"
    assert placed.recommendation.code.startswith("# train.py:30\nds = files.interleave(")


def test_python_work_in_the_training_loop_is_its_own_finding(trace_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    logdir = trace_case("eager_loop")
    a = analyze(logdir)
    top = _top(a)
    # Its share moves with the load on the machine that recorded the trace (0.37 with the
    # suite on both cores, more alone); it is the top finding either way.
    assert top.category == TRAINING_LOOP and top.stage is None and top.share > 0.25
    assert a.input_share is not None and top.share > a.input_share  # the loop costs most
    assert top.evidence["step_function"] == "train_step"
    assert any(f.startswith("tf.constant") for f in top.functions)  # the NumPy batch, back
    assert top.evidence["untraced_ms_per_step"] > 1.0
    rec = top.recommendation
    assert rec is not None and "num_parallel_calls=tf.data.AUTOTUNE" in rec.code
    assert (
        rec.code.index(".map(") < rec.code.index(".prefetch(") and "train_step(batch)" in rec.code
    )
    assert a.moves == ()  # the loop is the limit, not the step
    data = a.to_json()
    assert data["bottlenecks"][0]["category"] == TRAINING_LOOP and data["next_moves"] == []
    sites = [RecordedSite("train.py:20", "batch"), RecordedSite("train.py:20", "prefetch")]
    placed = _top(analyze(_with_sites(logdir, tmp_path, sites)))
    assert placed.recommendation.code.startswith("# train.py:20: add the map before this prefetch")
    text = render(a.document(), width=120)
    assert "training_loop" in text and "Top fix" in text and "prefetch" in text


def test_compute_bound_keras_steps_get_ranked_next_moves(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("keras_small_steps"))
    assert a.input_bound is False
    assert a.findings.verdict.sentence.endswith(NOT_THE_LIMIT)
    top = _top(a)
    assert top.category == "host_compute"
    # The compute-bound step's fix is its best move (XLA: ~1,390 kernels of a few µs);
    # the next moves are the others, never that idea again.
    fix = top.recommendation
    assert fix is not None and fix.kind == "xla" and "jit_compile=True" in fix.code
    assert a.findings.recommendations[0] == fix
    moves = a.moves
    kinds = [m.kind for m in moves]
    assert {"steps_per_execution", "precision"} <= set(kinds) and "xla" not in kinds
    assert [m.score for m in moves] == sorted((m.score for m in moves), reverse=True)
    by = {m.kind: m for m in moves}
    assert "steps_per_execution=" in by["steps_per_execution"].code
    # CPU-only trace: the precision move says where 16-bit helps, and ranks last.
    assert "AVX512-BF16" in by["precision"].summary and kinds[-1] == "precision"
    data = a.to_json()
    assert [m["kind"] for m in data["next_moves"]] == kinds
    assert data["recommendations"][0]["kind"] == "xla"
    assert "Next moves for the step" in render(a.document(), width=120)
    html = render_report_json(data, generated_at="2026-12-01T00:00:00Z", source="a.json")
    assert 'id="next-moves"' in html and 'data-move="precision"' in html


def test_gan_step_is_compute_bound(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("gan"))
    assert a.input_bound is False and a.findings.verdict.sentence.endswith(NOT_THE_LIMIT)
    top = _top(a)
    assert top.category == "host_compute" and top.functions[:1] == ("train_step",)
    # Its one move, precision, is the compute bottleneck's fix: not offered twice.
    assert top.recommendation is not None and top.recommendation.kind == "precision"
    assert "mixed_bfloat16" in top.recommendation.code
    moves = a.moves
    assert "precision" not in {m.kind for m in moves}
    assert not any(m.kind == "steps_per_execution" for m in moves)  # not Keras' fit loop
    assert not any(b.category == TRAINING_LOOP for b in a.bottlenecks)


def test_image_folders_decode_is_preprocessing_with_cache(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("image_folders"))
    assert a.findings.verdict.level == "high" and a.moves == ()
    top = _top(a)
    assert top.category == "preprocessing" and top.stage == "Iterator::Root::MapAndBatch"
    assert "DecodeJpeg" in top.functions
    rec = top.recommendation
    assert rec is not None and ".cache()" in rec.code
    codes = [r.code for r in a.findings.recommendations]
    assert "ds = ds.prefetch(tf.data.AUTOTUNE)" in codes  # the script never prefetches
    _no_fix_in_place(a)


def test_text_vectorization_is_tokenization_in_a_sequential_map(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("text_vectorization"))
    assert a.findings.verdict.level == "high"
    top = _top(a)
    assert top.category == "tokenization" and top.stage == "Iterator::Root::Prefetch::Map"
    assert any("StringSplit" in f or "RegexReplace" in f for f in top.functions)
    rec = top.recommendation
    assert rec is not None and "num_parallel_calls=tf.data.AUTOTUNE" in rec.code
    _no_fix_in_place(a)


def test_audio_decoding_is_preprocessing_and_cacheable(trace_case) -> None:  # type: ignore[no-untyped-def]
    a = analyze(trace_case("audio_wav"))
    assert a.findings.verdict.level == "high"
    top = _top(a)
    assert top.category == "preprocessing" and top.stage == "Iterator::Root::MapAndBatch"
    assert any("rfft" in f.lower() or "DecodeWav" in f for f in top.functions)
    assert top.recommendation is not None and ".cache()" in top.recommendation.code
    _no_fix_in_place(a)
