"""tftune.reports: everything that shows.

A pure `build_*_model(...)` step, then renderers that only format (`render(model) -> str`).
Writing files belongs to the CLI. Nothing here imports tensorflow or optuna.

    model = build_analysis_model(json.loads(text), generated_at="2026-11-30 03:40 UTC")
    html = render_analysis_html(model)

`render_report_json` does both for either kind of JSON (what `tftune report` needs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tftune.reports.html import render_analysis_html, render_tuning_html
from tftune.reports.model import (
    AnalysisReport,
    TuningReport,
    build_analysis_model,
    build_tuning_model,
    detect_kind,
)

__all__ = [
    "AnalysisReport",
    "TuningReport",
    "build_analysis_model",
    "build_tuning_model",
    "detect_kind",
    "render_analysis_html",
    "render_report_json",
    "render_tuning_html",
]


def render_report_json(data: Mapping[str, Any], *, generated_at: str, source: str) -> str:
    """The HTML report for an analysis or a tuning JSON, told apart by its content."""
    if detect_kind(data, source=source) == "analysis":
        return render_analysis_html(
            build_analysis_model(data, generated_at=generated_at, source=source)
        )
    return render_tuning_html(build_tuning_model(data, generated_at=generated_at, source=source))
