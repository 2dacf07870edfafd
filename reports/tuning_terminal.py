"""The terminal side of a tuning result, rendered from the tuning JSON.

- `render_table`: the four-way table (as written, AUTOTUNE everywhere, the #cores
  heuristic, tuned), with the ceiling caption (`ceiling_sentence`) and, when the script
  crashes on its own, that warning below it; `table_rows` is the table as text.
- `trial_line`: one status line per trial, from one `trials_detail` row (a failed trial's
  crash in a few lines).
- `render`: a saved tuning JSON as text: every trial's line (the winner starred), then the
  table, as `tftune optimize` prints them.

They render the tuning document (`tftune.core.tuning_document.TuningDocument`: `tftune
optimize`'s own, or a saved JSON read with `TuningDocument.from_json`), never the tuner's
objects: a saved tuning JSON renders as a fresh one. The table's rows are
`tuning_comparison.comparison`'s, as in the HTML: each row's honest figure (the final
round's, measured side by side with the winner's, where there is one) and its speed-up.
``null`` is "not measured", never 0.
"""

from __future__ import annotations

import io

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tftune.core.failures import CrashSummary, FailureKind
from tftune.core.sizing import caption
from tftune.core.trial_notes import ReusedMeasurement
from tftune.core.tuning_document import TuningDocument
from tftune.core.tuning_parts import Absent, CeilingFigures, MeasuredRate
from tftune.core.tuning_trials import TrialRow
from tftune.core.vocabulary import (
    NOT_MEASURED,
    UNDER_ONE_PERCENT,
    TrialState,
    input_band,
    percent,
)
from tftune.reports.analysis_terminal import plain_lines, text_console
from tftune.reports.learning_rows import learning_lines
from tftune.reports.rewrite_rows import rewrite_lines
from tftune.reports.tuning_comparison import comparison
from tftune.reports.tuning_model import break_even_sentence, training_sentences
from tftune.reports.words import utilization_label

# At this share of the ceiling, the tuned run has reached it (the rest is noise).
CEILING_REACHED = 0.9
# A failed trial's status line is followed by at most this many of its crash's key lines
# (its messages, then the frames: the crash JSON's ``key_lines``) ...
TRIAL_CRASH_LINES = 5
# ... and, for a Python exception (its reason already names it), where it was raised.
TRIAL_EXCEPTION_LINES = 1
# What the terminal adds below the instability sentence.
INSTABILITY_CONSEQUENCE = (
    "its crashes are counted as failed trials, but no knob value is blamed for them; "
    "fix the crash, then tune again"
)
# The table's rows: (label, the tuning JSON's baseline key); the tuned row comes last.
_BASELINE_ROWS = (
    ("as written", "as_written"),
    ("AUTOTUNE everywhere", "autotune"),
    ("#cores heuristic", "heuristic"),
)


def _fmt_eps(x: float | None) -> str:
    return NOT_MEASURED if x is None else f"{x:,.1f}"


def _fmt_util(x: float | None) -> str:
    return NOT_MEASURED if x is None else percent(x)


# The terminal's labels of the comparison's rows (`tuning_comparison.comparison`), in order;
# the analysis-guided guess is the HTML's only.
_ROW_LABELS = {
    "as_written": "as written",
    "autotune": "AUTOTUNE everywhere",
    "heuristic": "#cores heuristic",
    "tuned": "tuned",
}


def table_rows(doc: TuningDocument) -> list[tuple[str, str, str, str, str]]:
    """(row, examples/s, utilization, spread, speed-up) for the four-way comparison."""
    out = []
    for row in comparison(doc):
        label, r = _ROW_LABELS.get(row.key), row.measurement
        if label is None:
            continue
        if r is None or not r.complete:
            why = NOT_MEASURED if r is None else f"{r.state_word}: {r.reason or ''}"
            out.append((label, why.strip(), "", "", ""))
            continue
        out.append(
            (
                label,
                _fmt_eps(r.examples_per_s),
                _fmt_util(r.utilization),
                "" if r.spread is None else f"±{percent(r.spread / 2, compact=True)}",
                "" if row.speedup is None else f"{row.speedup:.2f}x",
            )
        )
    return out


def render_table(doc: TuningDocument) -> Table | Group:
    """A rich Table (rendered by the CLI's console); when the script crashes on its own
    (the document's ``instability``), a Group of the table and that warning below it."""
    util = utilization_label(doc.utilization_kind)
    t = Table(title="tftune optimize: measured in this run", title_justify="left")
    t.add_column("", justify="left")
    for col in ("examples/s", util, "spread", "speed-up"):
        t.add_column(col, justify="right")
    for row in table_rows(doc):
        t.add_row(*row)
    ceiling, run = doc.ceiling, doc.run
    lines = []
    if ceiling is not None and ceiling.ceiling_examples_per_s is not None:
        lines.append(ceiling_sentence(doc))
    if run is not None:
        lines += [s for s in (break_even_sentence(run.break_even), run.stop_reason) if s]
    lines += list(training_sentences(doc))
    sizing = caption(ceiling.sizing if ceiling is not None else None)
    lines += [sizing] if sizing else []
    if lines:
        t.caption = "\n".join(str(s) for s in lines)
        t.caption_justify = "left"
    instability = doc.instability
    if instability is None or isinstance(instability, Absent) or not instability.sentence:
        return t
    warning = Text(f"warning: {instability.sentence}", style="bold red")
    return Group(t, warning, Text(f"  {INSTABILITY_CONSEQUENCE}"))


def _rate(x: float | None) -> str:
    return _fmt_eps(x) if x is None else f"{_fmt_eps(x)} ex/s"


def ceiling_sentence(doc: TuningDocument) -> str:
    """Where the remaining gap is: the as-written and tuned rates against the ceiling (the
    lower of the pipeline alone and the model alone, both as written; once the tuned run
    is past the pipeline's, the model's), and, below it, whether the tuned run still waits
    for input (the pipeline) or not (the two halves slow each other down when they run
    together, e.g. on shared CPU cores)."""
    ceiling = doc.ceiling or CeilingFigures()
    model = ceiling.model_only_examples_per_s
    model_note = ceiling.model_note if isinstance(ceiling.model_note, str) else None
    model_words = (
        f"model alone {model_note}"
        if model is None and model_note
        else f"model alone on cached data {_rate(model)}"
    )
    parts = [f"pipeline alone {_rate(ceiling.pipeline_only_examples_per_s)}, {model_words}"]
    top = ceiling.ceiling_examples_per_s
    figures = {row.key: row.measurement for row in comparison(doc)}
    aw, tuned = figures.get("as_written"), figures.get("tuned")
    aw_eps = aw.examples_per_s if aw is not None else None
    tuned_eps = tuned.examples_per_s if tuned is not None else None
    if not top or not aw_eps or not tuned_eps or tuned is None:
        return "; ".join(parts)
    limited_by = ceiling.limited_by
    half = {"pipeline": "the input pipeline", "model": "the model"}.get(
        limited_by or "", "the half that was measured"
    )
    if (
        limited_by == "pipeline"
        and model
        and tuned_eps * CEILING_REACHED > top
        and tuned_eps * CEILING_REACHED <= model
    ):
        # The pipeline alone was measured as written: tuning lifted that ceiling, and the
        # model alone is the one left.
        parts.append(
            f"as written reaches {percent(aw_eps / top)} of the pipeline alone; tuning "
            f"lifted the pipeline past it ({tuned_eps / top:.1f}x), and tuned reaches "
            f"{percent(tuned_eps / model)} of the model alone"
        )
        top, half = model, "the model"
    elif model is None and model_note and tuned_eps * CEILING_REACHED > top:
        # No model half (the script trains nothing): the pipeline is the whole run.
        parts.append(
            f"as written reaches {percent(aw_eps / top)} of the pipeline alone; tuning lifted the "
            f"pipeline past it ({tuned_eps / top:.1f}x)"
        )
        return "; ".join(parts)
    elif tuned_eps * CEILING_REACHED > max(top, model or 0):
        # Past both halves as written: the tuned config changed what they were measured
        # with (a batch size changes the model's rate too).
        parts.append(
            f"as written reaches {percent(aw_eps / top)} of the ceiling ({half}); tuned "
            f"runs {tuned_eps / top:.1f}x past it: its config changes what the two halves were "
            "measured with as written (a batch size changes the model's rate too), so that "
            "ceiling does not bound it"
        )
        return "; ".join(parts)
    else:
        parts.append(
            f"as written reaches {percent(aw_eps / top)} and tuned "
            f"{percent(tuned_eps / top)} of the ceiling ({half})"
        )
    parts += _gap(tuned, tuned_eps, top, half)
    return "; ".join(parts)


def _gap(tuned: MeasuredRate, tuned_eps: float, top: float, half: str) -> list[str]:
    """Below the ceiling: is the remaining gap the input pipeline (the tuned run still
    waits for input, in the vocabulary's input-bound bands) or the two halves together?"""
    wait = tuned.input_wait_share
    if tuned_eps >= CEILING_REACHED * top:
        return [f"{half} is now the limit"]
    if wait is not None and input_band(wait).input_bound:
        return [
            f"tuned still waits for input {percent(wait)} of each step: the remaining gap is in "
            "the input pipeline"
        ]
    if wait is not None:
        only = "" if percent(wait) == UNDER_ONE_PERCENT else "only "
        return [
            f"tuned waits for input {only}{percent(wait)} of each step: the remaining gap is the "
            "two halves slowing each other down when they run together (shared CPU cores), "
            "not the input pipeline alone"
        ]
    return []


def trial_line(row: TrialRow, best: int | None = None) -> str:
    """One status line per trial, from its ``trials_detail`` row; `best` is the number of
    the best trial so far (starred)."""
    head = f"trial {row.number:>3} {row.role!s:<10}"
    reason = row.reason
    if row.state is TrialState.COMPLETE:
        body = f"{_fmt_eps(row.examples_per_s)} ex/s, "
        body += f"util {_fmt_util(row.utilization)}"
        if row.spread is not None:
            body += f" (±{percent(row.spread / 2, compact=True)})"
        # TPE came back to a measured config (`tuner.study.stopping.twin_of`): not run again.
        notes = row.notes if isinstance(row.notes, tuple) else ()
        reused = (ReusedMeasurement.read(n) for n in notes)
        body += "".join(f"; {r.text()}" for r in reused if r is not None)
    elif row.state is TrialState.PRUNED:
        so_far = row.examples_per_s
        body = f"pruned: {reason or ''}"
        if so_far is not None:
            body += f" ({_fmt_eps(so_far)} ex/s so far)"
    else:
        body = f"failed: {reason or 'unknown reason'}"
    star = " *best*" if best is not None and best == row.number else ""
    line = f"{head} {body}{star}  [{row.description}]"
    crash = row.crash
    if row.state is not TrialState.FAILED or not isinstance(crash, CrashSummary):
        return line
    # The reason is one line ("killed by signal 6"); the crash says what the script said.
    shown = [k for k in crash.key_lines if k not in (reason or "")]
    limit = TRIAL_CRASH_LINES if crash.kind is FailureKind.NATIVE else TRIAL_EXCEPTION_LINES
    return "\n".join([line, *(f"    {k}" for k in shown[:limit])])


def render(doc: TuningDocument, width: int = 100, color: bool = False) -> str:
    """The tuning document as text (ANSI-styled when `color`, else plain lines): each
    trial's status line, the winner starred, then the table with its caption."""
    buf = io.StringIO()
    console = text_console(buf, width, color)
    best = doc.best.measured.trial
    for row in doc.trials_detail:
        console.print(trial_line(row, best), markup=False, highlight=False)
    console.print(render_table(doc))
    for line in (*rewrite_lines(doc), *learning_lines(doc)):
        console.print(line, markup=False, highlight=False)
    return buf.getvalue() if color else plain_lines(buf.getvalue())
