"""The rewrites a tuning run considered, as the reports show them: a line each in the
terminal (`rewrite_lines`), a table on the page (`rewrites_section`). Read from the
tuning document's rows (`tftune.core.tuning_rewrites.RewriteRow`); nothing is computed
here but the words.
"""

from __future__ import annotations

from tftune.core.tuning_document import TuningDocument
from tftune.core.tuning_parts import Absent
from tftune.core.tuning_rewrites import RewriteRow, RewriteState
from tftune.reports._page import esc, fmt_rate, fmt_x, nm, or_nm

_STATE_WORDS = {
    RewriteState.MEASURED: "measured",
    RewriteState.CHECKED: "checked, not measured",
    RewriteState.REFUSED: "refused",
    RewriteState.NOT_APPLICABLE: "does not apply",
}


def rows_of(doc: TuningDocument) -> tuple[RewriteRow, ...] | None:
    """The document's rewrite rows; None where the run did not consider rewrites."""
    run = doc.run
    if run is None or isinstance(run.rewrites, Absent):
        return None
    return run.rewrites


def _what(row: RewriteRow) -> str:
    return f"{row.kind.label}{f' at {row.site}' if row.site else ''}"


def _check(row: RewriteRow) -> str:
    c = row.check
    if c is None:
        return ""
    if c.passed:
        return f"equal to the script's own over {c.compared} elements ({c.how})"
    return f"{c.detail} ({c.how}, {c.compared} elements compared)"


def rewrite_words(row: RewriteRow) -> str:
    """One rewrite in one line: what, where, and where it stands."""
    what = _what(row)
    if row.state is RewriteState.MEASURED:
        alone = (
            f"alone {fmt_x(row.alone_gain)} the script as written "
            f"({fmt_rate(row.alone_examples_per_s)})"
            if row.alone_gain is not None
            else "not measured alone"
        )
        held = "in the winner" if row.in_winner else "not in the winner"
        return f"{what}: {row.trials} trial(s) ran with it; {alone}; {held}"
    if row.state is RewriteState.CHECKED:
        return f"{what}: passed its check ({_check(row)}); no trial ran with it"
    return f"{what}: {_STATE_WORDS[row.state]}: {row.reason}"


def rewrite_lines(doc: TuningDocument) -> list[str]:
    """The terminal's block of rewrites (empty where none was considered or found)."""
    rows = rows_of(doc)
    if not rows:
        return []
    return ["pipeline rewrites:", *(f"  {rewrite_words(r)}" for r in rows)]


def rewrites_section(doc: TuningDocument) -> str:
    """The page's table of the rewrites considered (empty where none was)."""
    rows = rows_of(doc)
    if rows is None:
        return ""
    if not rows:
        return (
            '<section id="rewrites"><h2>Pipeline rewrites</h2><p class="sub">The training '
            "pipeline allows none of the rewrites tftune measures (a cache(), a shuffle "
            "moved above its map, one iterator across epochs).</p></section>"
        )
    body = []
    for row in rows:
        gain = or_nm(fmt_x(row.alone_gain), unknown=row.alone_gain is None)
        why = _check(row) if row.state in (RewriteState.MEASURED, RewriteState.CHECKED) else ""
        body.append(
            f'<tr class="{"best" if row.in_winner else ""}"><td>{esc(_what(row))}</td>'
            f"<td>{esc(_STATE_WORDS[row.state])}</td>"
            f"<td>{esc(why or row.reason)}</td>"
            f'<td class="num">{row.trials if row.trials else nm()}</td>'
            f'<td class="num">{gain}</td>'
            f"<td>{'yes' if row.in_winner else 'no'}</td></tr>"
        )
    return (
        '<section id="rewrites"><h2>Pipeline rewrites</h2>'
        "<p class=\"sub\">Changes to the pipeline's shape, each checked against the script's "
        "own elements before any trial ran with it, then searched beside the knobs. Its "
        "gain alone is over the script as written.</p>"
        '<table><caption class="sr">The rewrites considered</caption><thead><tr>'
        '<th>rewrite</th><th>state</th><th>check or reason</th><th class="num">trials</th>'
        f'<th class="num">gain alone</th><th>in the winner</th></tr></thead><tbody>{"".join(body)}'
        "</tbody></table></section>"
    )
