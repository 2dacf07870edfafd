"""`tftune analyze` as a user runs it: subprocess, JSON contract, errors, no TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tftune.core.analysis_document import AnalysisDocument
from tftune.reports.analysis_terminal import render


def test_analyze_cli_writes_json_and_summary(trace_case, run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out, html = tmp_path / "a.json", tmp_path / "report.html"
    proc = run_cli("analyze", str(trace_case("image_aug")), "--json", str(out), "-o", str(html))
    assert proc.returncode == 0, proc.stderr
    assert "input-bound" in html.read_text()  # the HTML report renders from the same JSON
    assert "input-bound" in proc.stdout and "DecodeJpeg" in proc.stdout
    data = json.loads(out.read_text())
    assert data["schema"] == 1 and data["device"] == "CPU_ONLY"
    assert data["step_detection"] == "markers" and data["steps"]["count"] > 0
    assert data["bottlenecks"][0]["category"] == "preprocessing"
    b = data["bottlenecks"][0]
    assert set(b) >= {"category", "share", "stage", "call_site", "evidence", "recommendation"}
    assert set(b["recommendation"]) >= {"summary", "code"}
    stage = next(s for s in data["stages"] if s["bottleneck"])
    assert stage["parallelism"] == 1 and stage["autotune"] is False and stage["blocking"]
    assert not list(tmp_path.glob(".a.json.*"))  # the temporary file was replaced


def test_analyze_list_and_run_selection(trace_case, run_cli) -> None:  # type: ignore[no-untyped-def]
    logdir = trace_case("two_runs")
    proc = run_cli("analyze", str(logdir), "--list")
    assert proc.returncode == 0, proc.stderr
    runs = [ln.split()[0] for ln in proc.stdout.splitlines() if not ln.startswith(" ")]
    assert len(runs) == 2 and "vm" in proc.stdout
    proc = run_cli("analyze", str(logdir), "--run", runs[0])
    assert proc.returncode == 0 and runs[0] in proc.stdout


def test_analyze_bad_input_is_one_line(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "vm.xplane.pb"
    bad.write_bytes(b"\x00garbage")
    for target in (tmp_path / "missing", bad):
        proc = run_cli("analyze", str(target))
        assert proc.returncode == 1
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and str(target) in lines[0] and "Traceback" not in proc.stderr


def test_analysis_path_never_imports_tensorflow(trace_case) -> None:  # type: ignore[no-untyped-def]
    code = (
        "import sys, tftune; a = tftune.analyze(sys.argv[1]); a.to_json();"
        "from tftune.cli import main;"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(trace_case("latency_py"))], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "tftune", "analyze", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "--json" in proc.stdout


def test_terminal_summary_renders_a_saved_analysis_without_the_trace() -> None:
    data = {
        "schema": 1,
        "run": "r",
        "host": "vm",
        "device": "CPU_ONLY",
        "step_detection": "none",
        "steps": {"count": 0},
        "verdict": {"level": None, "sentence": "No steps were found."},
        "breakdown": {},
        "bottlenecks": [],
        "recommendations": [
            {
                "summary": "Add step markers",
                "code": "with Trace(...):",
                "category": "other",
                "stage": None,
                "evidence": {"step_detection": "none"},
            }
        ],
        "stages": [],
        "notes": ["no steps"],
    }
    text = render(AnalysisDocument.from_json(data), width=80)
    assert "No steps were found." in text and "with Trace(...):" in text
    assert "not measured" in text and "0%" not in text


def test_the_xprof_cross_check_is_only_there_when_asked_for(trace_case, run_cli) -> None:  # type: ignore[no-untyped-def]
    import tftune

    assert "xprof" not in tftune.analyze(trace_case("latency_py")).to_json()
    proc = run_cli("analyze", "--help")
    assert proc.returncode == 0 and "--xprof" in proc.stdout
