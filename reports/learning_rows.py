"""The learning check as the reports show it: a block of lines in the terminal
(`learning_lines`), a table on the page (`learning_section`). Read from the tuning
document's `core.learning.LearningCheck`; nothing is computed here but the words.
"""

from __future__ import annotations

from tftune.core.learning import LearningCheck, LossRuns, LossVerdict
from tftune.core.tuning_document import TuningDocument
from tftune.core.tuning_parts import Absent
from tftune.reports._page import esc

_WORDS = {
    LossVerdict.LOWER: "lower: learns faster than the script as written",
    LossVerdict.EQUAL: "equal within the noise",
    LossVerdict.HIGHER: "higher: learns worse than the script as written",
    LossVerdict.NOT_CHECKED: "not checked",
}


def check_of(doc: TuningDocument) -> LearningCheck | None:
    """The document's learning check; None where the winner changes nothing it checks."""
    return None if isinstance(doc.learning, Absent) else doc.learning


def _losses(row: LossRuns) -> str:
    runs = ", ".join(f"{v:.4g}" for v in row.losses)
    return f"{row.mean:.4g} (runs: {runs})"


def verdict_words(check: LearningCheck) -> str:
    """The winner's loss at equal training time against the script as written's."""
    if check.verdict is LossVerdict.NOT_CHECKED:
        return f"not checked: {check.reason}"
    noise = f", noise {check.noise:.0%}" if check.noise is not None else ""
    return f"{_WORDS[check.verdict]}{noise}"


def learning_lines(doc: TuningDocument) -> list[str]:
    """The terminal's block (empty where the winner changes neither batch nor precision)."""
    check = check_of(doc)
    if check is None:
        return []
    lines = [f"learning check ({', '.join(check.changes)}): {verdict_words(check)}"]
    if check.equal_time_s is not None:
        lines.append(f"  loss after {check.equal_time_s:.1f} s of training:")
        rows = [r for r in (check.as_written, check.winner, *check.tried) if r is not None]
        lines += [f"    {r.label}: {_losses(r)}" for r in rows]
    if check.throughput_only is not None:
        lines.append(
            f"  trial {check.throughput_only} was fastest but learns worse: not recommended; "
            "the config above changes neither batch nor precision"
        )
    return lines


def learning_section(doc: TuningDocument) -> str:
    """The page's table of the learning check (empty where there was none)."""
    check = check_of(doc)
    if check is None:
        return ""
    rows = [r for r in (check.as_written, check.winner, *check.tried) if r is not None]
    body = "".join(
        f'<tr><td>{esc(r.label)}</td><td class="num">{r.mean:.4g}</td>'
        f"<td>{esc(', '.join(f'{v:.4g}' for v in r.losses))}</td></tr>"
        for r in rows
    )
    when = (
        f" after {check.equal_time_s:.1f} s of training" if check.equal_time_s is not None else ""
    )
    aside = (
        f"<p>Trial {check.throughput_only} was fastest but learns worse: it is not the "
        "recommendation.</p>"
        if check.throughput_only is not None
        else ""
    )
    table = (
        '<table><caption class="sr">Training loss at equal training time</caption><thead>'
        '<tr><th>config</th><th class="num">mean loss</th><th>each run</th></tr></thead>'
        f"<tbody>{body}</tbody></table>"
        if rows
        else ""
    )
    return (
        '<section id="learning"><h2>Does it learn no worse?</h2>'
        f'<p class="sub">The winner changes {esc(", ".join(check.changes))}: its training '
        f"loss{when} against the script as written's: <b>{esc(verdict_words(check))}</b>."
        "</p>"
        f"{table}{aside}</section>"
    )
