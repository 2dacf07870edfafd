"""HTML renderers: self-contained, deterministic, honest about what was not measured."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import time
from typing import Any

import pytest
from repo_paths import FIXTURES

from tftune.core.tuning_document import TuningDocument
from tftune.reports import render_report_json
from tftune.reports.analysis_model import AnalysisReport, build_analysis_model, read_analysis_json

WHEN = "2026-11-30 03:40 UTC"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def analysis(data: dict[str, Any], when: str = WHEN) -> str:
    return render_report_json(data, generated_at=when, source="a.json")


def tuning(data: dict[str, Any]) -> str:
    return render_report_json(data, generated_at=WHEN, source="t.json")


def analysis_model(data: dict[str, Any]) -> AnalysisReport:
    doc = read_analysis_json(data, source="a.json")
    return build_analysis_model(doc, generated_at=WHEN, source="a.json", data=data)


def text_of(page: str) -> str:
    """The visible text, roughly: tags stripped, entities decoded, whitespace collapsed."""
    page = re.sub(r"<script.*?</script>", " ", page, flags=re.S)
    page = re.sub(r"<style.*?</style>", " ", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def embedded(page: str) -> Any:
    match = re.search(
        r'<script type="application/json" id="tftune-data">(.*?)</script>', page, re.S
    )
    assert match is not None
    return json.loads(match.group(1))


def assert_self_contained(page: str) -> None:
    # Nothing that could make the browser fetch: no URLs, no external src/href.
    assert "http://" not in page and "https://" not in page and "//" not in page.split("<style>")[0]
    for attr in re.findall(r'\b(?:src|href)="([^"]*)"', page):
        assert attr.startswith("data:"), attr
    assert "@import" not in page and "url(" not in page
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp is not None and "default-src 'none'" in html.unescape(csp.group(1))


def test_analysis_page_leads_with_the_verdict_and_carries_every_section() -> None:
    data = load("analysis_cpu_pyfunc.json")
    page = analysis(data)
    assert page.startswith("<!DOCTYPE html>")
    assert_self_contained(page)
    # The verdict is the first thing in the page body.
    body = page.split("<main>", 1)[1]
    assert body.index('id="verdict"') < body.index('id="bottlenecks"') < body.index('id="steps"')
    assert body.index('id="steps"') < body.index('id="stages"') < body.index('id="timeline"')
    visible = text_of(page)
    assert data["verdict"]["sentence"] in visible
    code = data["bottlenecks"][0]["recommendation"]["code"]
    assert html.escape(code, quote=True) in page
    assert page.count("data-copy=") == 2  # one copy button per code fix
    assert 'data-category="python"' in page and "Python" in visible
    assert "MapAndBatch" in visible and "bottleneck" in visible
    assert "parallelism 1" in visible and "threadpool_size 2" in visible
    assert "not measured: buffer_limit" in visible  # MapAndBatch's null buffer_limit
    assert "TensorFlow 2.21.0" in visible and "markers" in visible
    # Charts: stacked bars per step (20 steps, >= 2 categories each), the share bar, timeline.
    assert page.count('<svg class="chart') == 3
    assert page.count('data-cat="input_wait"') >= 21
    assert "step 5" in visible and "EagerPyFunc" in page
    assert "mean 37.2 ms" in visible
    assert embedded(page) == json.loads(analysis_model(data).data_json)


def test_not_measured_is_never_shown_as_zero() -> None:
    data = load("analysis_gpu_h2d.json")
    data["input_share"] = None
    data["steps"]["mean_ms"] = None
    data["stages"][3]["self_ms"] = None
    visible = text_of(analysis(data))
    assert "Waiting for input not measured" in visible
    assert "Mean step not measured" in visible
    assert "Kernel launch not measured" in visible  # breakdown.kernel_launch is null
    assert "TensorFlow not in the trace" in visible  # metadata.tf_version is null
    assert "FlatMap" in visible
    flatmap_row = re.search(r'data-stage="[^"]*::FlatMap".*?</tr>', analysis(data), re.S)
    assert flatmap_row is not None and "not measured" in flatmap_row.group(0)
    assert "0.00 ms" not in flatmap_row.group(0).split("per call")[0][:400]


def test_an_outlier_step_is_cut_instead_of_flattening_the_others() -> None:
    data = load("analysis_cpu_pyfunc.json")
    page = analysis(data)
    chart = re.search(r'<svg class="chart stacked".*?</svg>', page, re.S)
    assert chart is not None and 'class="cut"' not in chart.group(0)
    data["per_step"][0]["other_ms"] = 4900.0  # a first step that compiles for 5 s
    chart = re.search(r'<svg class="chart stacked".*?</svg>', analysis(data), re.S)
    assert chart is not None
    assert chart.group(0).count('class="cut"') == 1 and "4,936 ms</text>" in chart.group(0)
    # The axis still fits the ordinary steps (~37 ms), not the outlier.
    labels = [
        float(v) for v in re.findall(r'text-anchor="end" fill="#6b7280">(\d+)', chart.group(0))
    ]
    assert max(labels) < 200


def test_output_is_deterministic_and_only_the_timestamp_moves() -> None:
    data = load("analysis_gpu_h2d.json")
    assert analysis(data) == analysis(load("analysis_gpu_h2d.json"))
    other = analysis(data, "2030-01-01 00:00 UTC")
    assert other.replace("2030-01-01 00:00 UTC", WHEN) == analysis(data)
    assert tuning(load("tuning_latency.json")) == tuning(load("tuning_latency.json"))


def test_hostile_names_are_escaped_and_the_embedded_json_round_trips() -> None:
    data = load("analysis_cpu_pyfunc.json")
    evil = "</script><script>alert(1)</script><b>&"
    data["bottlenecks"][0]["functions"] = [evil]
    data["bottlenecks"][0]["recommendation"]["code"] = f"ds.map({evil})"
    data["timeline"]["tracks"][0]["name"] = evil
    page = analysis(data)
    assert "<script>alert(1)" not in page
    assert page.count("<script") == 2  # the JSON data and the copy script, nothing injected
    assert embedded(page)["bottlenecks"][0]["functions"] == [evil]
    assert html.escape(f"ds.map({evil})", quote=True) in page


def test_the_csp_pins_the_inline_script_by_hash() -> None:
    page = analysis(load("analysis_cpu_pyfunc.json"))
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp is not None
    assert f"script-src 'sha256-{digest}'" in html.unescape(csp.group(1))


@pytest.mark.slow
def test_report_stays_small_for_a_huge_run() -> None:
    """A 40 MB trace's worth of data: tens of thousands of events, steps and stages."""
    data = load("analysis_cpu_pyfunc.json")
    base_tracks = data["timeline"]["tracks"]
    data["timeline"] = {
        "start_ms": 0.0,
        "end_ms": 80.0,
        "tracks": [
            {
                "name": f"{t['name']}/{k}",
                "kind": t["kind"],
                "events": [
                    [i * 0.0004, 0.0003, "Iterator::Root::Prefetch::Map"] for i in range(20_000)
                ],
            }
            for k in range(6)
            for t in base_tracks
        ],
    }
    step = data["per_step"][1]
    data["per_step"] = [dict(step, step=i) for i in range(50_000)]
    stage = data["stages"][2]
    data["stages"] = [dict(stage, id=str(i), bottleneck=False) for i in range(3000)]
    started = time.perf_counter()
    page = analysis(data)
    elapsed = time.perf_counter() - started
    assert len(page.encode()) < 5_000_000, len(page.encode())
    assert elapsed < 20
    visible = text_of(page)
    assert "Showing 240 evenly spaced of 50,000 steps" in visible
    assert "Showing the first 400 of 3,000 stages" in visible
    assert "Capped for size" in visible


def test_tuning_page() -> None:
    data = load("tuning_latency.json")
    page = tuning(data)
    assert_self_contained(page)
    visible = text_of(page)
    assert "31.0× the script as written" in visible and "15.6× AUTOTUNE" in visible
    assert "80% of this machine's ceiling" in visible  # 7,310 re-measured / 9,100
    labels = ("As written", "AUTOTUNE everywhere", "#cores heuristic", "Analysis-guided guess")
    for label in (*labels, "Tuned (tftune)", "Re-measured after the search: 7,310 ex/s"):
        assert label in visible
    assert "7,400 ex/s" in visible and "236 ex/s" in visible
    assert "ResourceExhaustedError" in visible and "below the median" in visible
    assert page.count('<span class="add">') == 5 and page.count('<span class="del">') == 2
    assert "tftune run --config tftune-best.json train.py" in visible
    assert page.count("data-copy=") == 4  # command, diff, snippet, config JSON
    assert "--batch-size to tune it" in visible  # knobs left out say why
    history = re.search(r'<svg class="chart history".*?</svg>', page, re.S)
    assert history is not None
    complete = sum(1 for t in data["trials_detail"] if t["state"].upper() == "COMPLETE")
    assert history.group(0).count("<circle") == complete
    assert 'class="best"' in history.group(0) and "best 7,400" in history.group(0)
    bars = re.search(r'<svg class="chart hbars".*?</svg>', page, re.S)
    assert bars is not None and bars.group(0).count("<rect") == len(data["importances"])
    assert embedded(page)["best"]["examples_per_s"] == 7400.0


def test_the_batch_size_warning_goes_with_a_winner_that_changes_it() -> None:
    warning = "the batch size is part of the search: it changes training dynamics"

    def sections(batch: int | None) -> tuple[str, str]:
        data = load("tuning_latency.json")
        data["space"]["warnings"] = [warning]
        if batch is not None:
            data["best"]["config"]["sites"]["train.py:19"]["batch_size"] = batch
        page = tuning(data)
        winner = re.search(r'<section id="winner">.*?</section>', page, re.S)
        space = re.search(r'<section id="space">.*?</section>', page, re.S)
        assert winner is not None and space is not None
        return winner.group(0), space.group(0)

    winner, space = sections(batch=None)  # the winner keeps the script's batch size
    assert warning not in winner and warning in space
    winner, space = sections(batch=256)
    assert warning in winner and warning not in space


def test_tuning_page_without_optional_parts_says_so() -> None:
    data = load("tuning_latency.json")
    for key in ("trials_detail", "importances", "diff", "command", "ceiling"):
        data.pop(key)
    data["baselines"].pop("heuristic")
    visible = text_of(tuning(data))
    assert "Importances not measured" in visible
    assert "Per-trial results not measured" in visible
    assert "#cores heuristic" not in visible  # no row: the screen drained it instead
    assert "Ceiling not measured" in visible


def test_the_page_says_why_importances_are_withheld() -> None:
    data = load("tuning_latency.json")
    data["importances"] = {}
    data["importances_withheld"] = "3 complete trials; importance is estimated from 10 on"
    visible = text_of(tuning(data))
    assert "Importances not measured (3 complete trials; importance is estimated from 10 on)" in (
        visible
    )


def test_a_ceiling_of_zero_is_no_bound_to_compare_with() -> None:
    data = load("tuning_latency.json")
    data["ceiling"].update(ceiling_examples_per_s=0, model_only_examples_per_s=0)
    visible = text_of(tuning(data))
    assert "of this machine's ceiling" not in visible and "model alone can consume" not in visible


@pytest.mark.parametrize(
    ("name", "marker"),
    [("analysis_cpu_pyfunc.json", "input pipeline analysis"), ("tuning_latency.json", "tuning")],
)
def test_render_report_json_picks_the_kind(name: str, marker: str) -> None:
    page = render_report_json(load(name), generated_at=WHEN, source=name)
    assert f"<title>{marker}" in page


@pytest.mark.parametrize("objective", ["gpu-util", "both"])
def test_tuning_history_follows_the_objective(objective: str) -> None:
    data = load("tuning_latency.json")
    data["objective"] = objective
    for i, trial in enumerate(data["trials_detail"]):
        if trial["state"].upper() == "COMPLETE":
            trial["utilization"] = round(0.05 + i * 0.04, 2)
    page = tuning(data)
    history = re.search(r'<svg class="chart history".*?</svg>', page, re.S)
    assert history is not None
    if objective == "gpu-util":
        assert "GPU utilization %" in history.group(0)
        assert "as written 236" not in history.group(0)  # examples/s baselines do not apply
        assert "trial 19 (complete): 81%" in history.group(0)
    else:
        assert "examples/s" in history.group(0) and "as written 236" in history.group(0)
        assert "utilization per trial is in the table below" in text_of(page)
        data["pareto"] = [{"trial": 16}, {"trial": 19}]
        page = tuning(data)
        assert "Pareto front: trials 16, 19." in text_of(page)
        assert "trial 16 (complete): 7,400 ex/s · on the Pareto front" in page


def test_the_page_of_a_document_is_the_page_of_its_saved_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`tftune optimize --html` renders the document it holds (no JSON read back): the
    same page, byte for byte, as `tftune report` of the JSON it wrote."""
    from tftune._notebook import tuning_page

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1796000000")
    data = load("tuning_latency.json")
    page = tuning_page(TuningDocument.from_json(data))
    assert "generated 2026-11-30 00:53 UTC" in page
    assert page == render_report_json(
        data, generated_at="2026-11-30 00:53 UTC", source="tuning JSON"
    )
    page = analysis(load("analysis_gpu_h2d.json"))
    assert f"generated {WHEN}" in page and "prefetch_to_device" in page


XPROF = {
    "steptime_ms": 12.3,
    "input_share": 0.54,
    "tftune_steptime_ms": 12.4,
    "tftune_input_share": 0.55,
    "note": None,
}


def _xprof_section(page: str) -> str | None:
    match = re.search(r'<section id="xprof">.*?</section>', page, re.S)
    return match.group(0) if match else None


def test_the_xprof_cross_check_sits_beside_tftunes_figures() -> None:
    """`tftune analyze --xprof`: XProf's own step time and input share beside tftune's."""
    data = load("analysis_cpu_pyfunc.json")
    page = analysis({**data, "xprof": XPROF})
    section = _xprof_section(page)
    assert section is not None
    visible = text_of(section)
    assert visible.startswith("Cross-check with XProf")
    assert "XProf 12.3 ms 54%" in visible and "tftune 12.4 ms 55%" in visible
    body = page.split("<main>", 1)[1]
    assert body.index('id="steps"') < body.index('id="xprof"') < body.index('id="stages"')
    assert embedded(page)["xprof"] == XPROF
    # A figure XProf did not give is "not measured", and the note says why.
    partial = {**XPROF, "steptime_ms": None, "note": "XProf found no step markers"}
    visible = text_of(_xprof_section(analysis({**data, "xprof": partial})) or "")
    assert "XProf not measured 54%" in visible and "XProf found no step markers" in visible


@pytest.mark.parametrize("xprof", [None, dict.fromkeys(XPROF), "absent"])
def test_no_xprof_block_without_a_cross_check(xprof: Any) -> None:
    data = load("analysis_cpu_pyfunc.json")
    if xprof != "absent":
        data["xprof"] = xprof
    page = analysis(data)
    assert _xprof_section(page) is None and "Cross-check with XProf" not in page


def test_device_to_device_is_a_category_like_any_other() -> None:
    data = load("analysis_gpu_h2d.json")
    data["breakdown"]["device_to_device"] = 0.04
    data["breakdown"]["other"] -= 0.04
    page = analysis(data)
    visible = text_of(page)
    assert "Device → device 4%" in visible
    assert re.search(r'fill="#0369a1" data-cat="device_to_device"', page) is not None
    # ... in the documented order: after the other device categories, before "other".
    order = [k for k, _ in analysis_model(data).breakdown]
    assert order.index("device_to_device") == order.index("other") - 1


@pytest.mark.parametrize(
    ("name", "level", "badge"),
    [
        ("analysis_cpu_pyfunc.json", "high", "Highly input-bound"),
        ("analysis_gpu_h2d.json", "moderate", "Moderately input-bound"),
    ],
)
def test_the_verdict_is_styled_and_named_by_its_band(name: str, level: str, badge: str) -> None:
    head = f'<section class="verdict {level}" id="verdict"><span class="level">{badge}</span>'
    assert head in analysis(load(name))


def test_each_page_reads_as_words_with_one_heading_and_captioned_tables() -> None:
    """One <h1>; a caption on every table; evidence keys, device kinds and trace lanes
    in words (the keys stay in the JSON and in a title)."""
    import re

    from repo_paths import TESTS

    pages = sorted((TESTS / "golden").glob("*/report.html"))
    assert len(pages) >= 6
    for path in pages:
        page = path.read_text()
        assert page.count("<h1") == 1, path
        assert page.count("<table") == page.count("<caption"), path
        shown = re.sub(r'title="[^"]*"', "", page.split('id="tftune-data"')[0])
        for raw in ("udf_concurrency", "stage_self_ms", "top_ops_ms", "CPU_ONLY"):
            assert f">{raw}<" not in shown and f"> {raw}<" not in shown, (path, raw)
        assert "tf_data_private_threadpool/" not in shown, path
        assert "tf_Compute/" not in shown and "fused(" not in shown, path
        assert " el/s" not in shown, path  # one unit word: examples/s, short ex/s
        assert not re.search(r"<dd>[\[{]", shown), path  # evidence as words, not JSON
        # A self-contained page names no docs file it cannot link to.
        assert not re.search(r"docs/\w+\.md", shown), path
    pyfunc = (TESTS / "golden" / "analysis_cpu_pyfunc" / "report.html").read_text()
    assert "Python calls at once" in pyfunc and "CPU only" in pyfunc
    assert "tf.data worker 5" in pyfunc and "step thread (the training loop)" in pyfunc


def test_machine_words_read_as_words() -> None:
    """Evidence values, fused ops and thread lanes as a reader says them."""
    from tftune.reports.words import evidence_value, lane_label, op_label

    assert evidence_value("top_ops_ms", {"EagerPyFunc": 93.033}) == "EagerPyFunc 93.03"
    assert evidence_value("top_ops_ms", [["DecodeJpeg", 120.0]]) == "DecodeJpeg 120"
    assert evidence_value("functions", []) == "none"
    assert evidence_value("functions", ["slow_read", "decode"]) == "slow_read, decode"
    assert evidence_value("autotune", True) == "yes"
    assert evidence_value("counts", {"a": 3, "b": None}) == "a 3, b not measured"
    assert op_label("fused(MapDataset:2,BatchDatasetV2:3)") == (
        "MapDataset + BatchDatasetV2, fused by TensorFlow"
    )
    assert op_label("ParallelMapDatasetV2:1") == "ParallelMapDatasetV2"
    assert lane_label("tf_data_private_threadpool/3") == "tf.data worker 3"
    assert lane_label("tf_Compute/-4570691277634749999") == "TensorFlow op thread"
    assert lane_label("python") == "step thread (the training loop)"
