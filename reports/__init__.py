"""tftune.reports: everything that shows.

A pure `build_*_model(document, ...)` step, then renderers that only format
(`render(model) -> str`). Renderers take the documents' types (`core.analysis_document`,
`core.tuning_document`) or their models, never JSON. Writing files belongs to the CLI.
Nothing here imports tensorflow, optuna or the tuner.

    model = build_analysis_model(analysis.document(), generated_at="2026-11-30 03:40 UTC")
    html = render_analysis_html(model)

`render_report` does both for either document; a saved JSON enters here once, through
`read_report_json` (the document's strict reader); `render_report_json` reads and renders
one (what `tftune report` needs).

- analysis: `core.analysis_document` (the document's types, read strictly) →
  `analysis_model` → `analysis_html` (the page); `analysis_terminal` (the summary, from
  the document);
- tuning: `tuning_model` → `tuning_html` (the page), `tuning_terminal` (the table, the
  ceiling caption and the per-trial lines, from the document); both tables' rows are
  `tuning_comparison`'s;
- shared: `core.document_reading` (validating readers, `detect_kind`), `_page` (the HTML
  shell, `timestamp_now`), `_svg` (the charts).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tftune.core.analysis_document import AnalysisDocument
    from tftune.core.document_reading import detect_kind
    from tftune.core.tuning_document import TuningDocument
    from tftune.reports._page import timestamp_now
    from tftune.reports.analysis_html import render_analysis_html
    from tftune.reports.analysis_model import AnalysisReport, build_analysis_model
    from tftune.reports.tuning_html import render_tuning_html
    from tftune.reports.tuning_model import TuningReport, build_tuning_model

__all__ = [
    "AnalysisReport",
    "TuningReport",
    "build_analysis_model",
    "build_tuning_model",
    "detect_kind",
    "read_report_json",
    "render_analysis_html",
    "render_report",
    "render_report_json",
    "render_tuning_html",
    "timestamp_now",
]

# Imported on first use: `tftune analyze` needs neither the tuning report's modules nor
# the page's until it writes one.
_HOMES = {
    "AnalysisReport": "tftune.reports.analysis_model",
    "TuningReport": "tftune.reports.tuning_model",
    "build_analysis_model": "tftune.reports.analysis_model",
    "build_tuning_model": "tftune.reports.tuning_model",
    "detect_kind": "tftune.core.document_reading",
    "render_analysis_html": "tftune.reports.analysis_html",
    "render_tuning_html": "tftune.reports.tuning_html",
    "timestamp_now": "tftune.reports._page",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tftune.reports' has no attribute {name!r}")
    return getattr(import_module(home), name)


def read_report_json(data: Mapping[str, Any], *, source: str) -> AnalysisDocument | TuningDocument:
    """A saved analysis or tuning JSON, told apart by its content, read strictly into its
    document: a malformed one is one `UserError` line naming `source` and the field."""
    from tftune.core.document_reading import detect_kind
    from tftune.core.tuning_document import TuningDocument
    from tftune.reports.analysis_model import read_analysis_json

    if detect_kind(data, source=source) == "analysis":
        return read_analysis_json(data, source=source)
    return TuningDocument.from_json(data, source=source)


def render_report(
    document: AnalysisDocument | TuningDocument,
    *,
    generated_at: str,
    source: str,
    data: Mapping[str, Any] | None = None,
) -> str:
    """The HTML report of an analysis or a tuning document. `data`: its JSON, where the
    caller has it already, for the page to embed (else the document's `to_json`)."""
    from tftune.core.analysis_document import AnalysisDocument
    from tftune.reports.analysis_html import render_analysis_html
    from tftune.reports.analysis_model import build_analysis_model
    from tftune.reports.tuning_html import render_tuning_html
    from tftune.reports.tuning_model import build_tuning_model

    if isinstance(document, AnalysisDocument):
        model = build_analysis_model(document, generated_at=generated_at, source=source, data=data)
        return render_analysis_html(model)
    tuning = build_tuning_model(document, generated_at=generated_at, source=source, data=data)
    return render_tuning_html(tuning)


def render_report_json(data: Mapping[str, Any], *, generated_at: str, source: str) -> str:
    """The HTML report of a saved analysis or tuning JSON (`read_report_json`, then
    `render_report`; the page embeds `data` as given)."""
    document = read_report_json(data, source=source)
    return render_report(document, generated_at=generated_at, source=source, data=data)
