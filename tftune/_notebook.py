"""tftune in a notebook and in plain Python: a report page for an analysis, a tuning
result or a saved JSON (`report`), and the same page inline in a cell (`cell`), which
`Analysis` and `OptimizeResult` show as a cell's last line (`_repr_html_`).

The documents' producers live in probes/ and tuner/, which may not import reports/ (the
layers point one way): `tftune.analyze` and `tftune.optimize` hand each result the
renderer (`inline`) that draws the document it holds. A page is rendered from the
document itself; only a JSON mapping or a saved file is read (strictly) first.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from tftune.core.analysis_document import AnalysisDocument

if TYPE_CHECKING:  # `tftune analyze` never needs the tuning document's types
    from tftune.core.tuning_document import TuningDocument

# A report inside a notebook cell: tall enough for the verdict, the fix and the charts
# without a second scroll bar in most notebooks.
CELL_HEIGHT_PX = 900
# What the page of `tftune optimize --html` names as its source.
TUNING_SOURCE = "tuning JSON"

Document: TypeAlias = "AnalysisDocument | TuningDocument"


def document_of(obj: object) -> tuple[Document, Mapping[str, Any] | None, str]:
    """The document of `obj`, its JSON where `obj` is one (the page embeds it as given)
    and the name its report shows: an `Analysis`, an `OptimizeResult`, a JSON mapping,
    or the path of a saved analysis or tuning JSON."""
    from tftune.core.userfiles import read_json
    from tftune.probes.advice.analysis import Analysis
    from tftune.reports import read_report_json
    from tftune.tuner.optimize import OptimizeResult

    if isinstance(obj, Analysis):
        doc: Document = obj.document()
        return doc, None, source_of(doc)
    if isinstance(obj, OptimizeResult):
        return obj.document, None, source_of(obj.document)
    if isinstance(obj, Mapping):
        doc = read_report_json(obj, source="report JSON")
        return doc, obj, source_of(doc)
    if isinstance(obj, (str, os.PathLike)):
        raw = read_json(obj)
        if not isinstance(raw, Mapping):
            from tftune.core.errors import UserError

            raise UserError(f"{obj}: not an analysis or tuning JSON (a JSON object expected)")
        name = Path(obj).name
        return read_report_json(raw, source=name), raw, name
    raise TypeError(
        f"tftune.report takes an Analysis, an OptimizeResult, a JSON mapping or the path of "
        f"a saved JSON, not {type(obj).__name__}"
    )


def source_of(doc: Document) -> str:
    """What a report of `doc` names as its source: the analyzed logdir, or the tuned
    script."""
    if isinstance(doc, AnalysisDocument):
        logdir = doc.source.logdir if doc.source is not None else None
        return logdir or "JSON"
    return doc.script or "JSON"


def page(doc: Document, source: str, data: Mapping[str, Any] | None = None) -> str:
    """The self-contained HTML report of an analysis or a tuning document (`data`: its
    JSON as given, which the page embeds)."""
    from tftune.reports import render_report, timestamp_now

    return render_report(doc, generated_at=timestamp_now(), source=source, data=data)


def tuning_page(doc: TuningDocument) -> str:
    """The page of `tftune optimize --html`: the renderer `tftune.optimize` hands over."""
    return page(doc, TUNING_SOURCE)


def cell(page_html: str) -> str:
    """A whole report page inside a notebook cell: in an iframe, so that its styles and
    scripts stay its own and do not restyle the notebook."""
    quoted = html.escape(page_html, quote=True)
    return (
        f'<iframe srcdoc="{quoted}" title="tftune report" '
        f'style="width:100%;height:{CELL_HEIGHT_PX}px;border:0"></iframe>'
    )


def inline(doc: Document) -> str:
    """The renderer `Analysis` and `OptimizeResult` are handed: their page in a cell."""
    return cell(page(doc, source_of(doc)))


def report(obj: object, path: str | os.PathLike[str] | None = None) -> str | Path:
    """The HTML report of `obj` (see `document_of`): returned as text, or written to
    `path` (atomically; ``-`` is standard output) and its path returned."""
    from tftune.core.userfiles import check_writable, write_output

    if path is not None:
        check_writable(path, "path")
    doc, data, source = document_of(obj)
    html_text = page(doc, source, data)
    if path is None:
        return html_text
    write_output(path, html_text)
    return Path(path)
