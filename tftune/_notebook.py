"""tftune in a notebook and in plain Python: a report page for an analysis, a tuning
result or a saved JSON (`report`), and the same page inline in a cell (`cell`), which
`Analysis` and `OptimizeResult` show as a cell's last line (`_repr_html_`).

The documents' types live in probes/ and tuner/, which may not import reports/ (the
layers point one way): `tftune.analyze` and `tftune.optimize` hand each result the
renderer (`inline`) that draws it.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# A report inside a notebook cell: tall enough for the verdict, the fix and the charts
# without a second scroll bar in most notebooks.
CELL_HEIGHT_PX = 900


def document_of(obj: object) -> tuple[Mapping[str, Any], str]:
    """The JSON document of `obj` and the name its report shows: an `Analysis`, an
    `OptimizeResult`, a JSON mapping, or the path of a saved analysis or tuning JSON."""
    from tftune.core.userfiles import read_json
    from tftune.probes.advice.analysis import Analysis
    from tftune.tuner.optimize import OptimizeResult

    if isinstance(obj, Analysis):
        data = obj.to_json()
        return data, source_of(data)
    if isinstance(obj, OptimizeResult):
        return obj.report, source_of(obj.report)
    if isinstance(obj, Mapping):
        return obj, source_of(obj)
    if isinstance(obj, (str, os.PathLike)):
        raw = read_json(obj)
        if not isinstance(raw, Mapping):
            from tftune.core.errors import UserError

            raise UserError(f"{obj}: not an analysis or tuning JSON (a JSON object expected)")
        return raw, Path(obj).name
    raise TypeError(
        f"tftune.report takes an Analysis, an OptimizeResult, a JSON mapping or the path of "
        f"a saved JSON, not {type(obj).__name__}"
    )


def source_of(data: Mapping[str, Any]) -> str:
    """What a report of `data` names as its source: the analyzed logdir, or the tuned
    script."""
    where = data.get("source")
    if isinstance(where, Mapping) and isinstance(where.get("logdir"), str):
        return str(where["logdir"])
    return str(data.get("script") or "JSON")


def page(data: Mapping[str, Any], source: str) -> str:
    """The self-contained HTML report of an analysis or a tuning JSON."""
    from tftune.reports import render_report_json, timestamp_now

    return render_report_json(data, generated_at=timestamp_now(), source=source)


def cell(page_html: str) -> str:
    """A whole report page inside a notebook cell: in an iframe, so that its styles and
    scripts stay its own and do not restyle the notebook."""
    quoted = html.escape(page_html, quote=True)
    return (
        f'<iframe srcdoc="{quoted}" title="tftune report" '
        f'style="width:100%;height:{CELL_HEIGHT_PX}px;border:0"></iframe>'
    )


def inline(data: Mapping[str, Any]) -> str:
    """The renderer `Analysis` and `OptimizeResult` are handed: their page in a cell."""
    return cell(page(data, source_of(data)))


def report(obj: object, path: str | os.PathLike[str] | None = None) -> str | Path:
    """The HTML report of `obj` (see `document_of`): returned as text, or written to
    `path` (atomically; ``-`` is standard output) and its path returned."""
    from tftune.core.userfiles import check_writable, write_output

    if path is not None:
        check_writable(path, "path")
    data, source = document_of(obj)
    html_text = page(data, source)
    if path is None:
        return html_text
    write_output(path, html_text)
    return Path(path)
