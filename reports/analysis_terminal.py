"""The terminal summary of an analysis, rendered with rich from the analysis document.

Readable in ten seconds: the verdict, where the step time goes, the ranked bottlenecks,
the top fix as code, the next moves for the step when the input pipeline is not the
limit, and the tf.data stages with what AUTOTUNE chose; with ``--xprof``,
XProf's own step time and input share beside tftune's. It renders only the document
(`core.analysis_document`; a saved JSON is read with `AnalysisDocument.from_json`), so it
renders a saved analysis exactly as a fresh one.
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from tftune.core.analysis_advice import Bottleneck
from tftune.core.analysis_document import AnalysisDocument
from tftune.core.analysis_trace import XProfCheck
from tftune.core.sizing import caption
from tftune.core.vocabulary import (
    NOT_MEASURED,
    Band,
    category_label,
    percent,
    stage_kind,
    stage_short_name,
)
from tftune.reports.words import device_label

_LEVEL_STYLE = {Band.HIGH: "bold red", Band.MODERATE: "bold yellow", Band.LOW: "bold green"}
MAX_BOTTLENECKS = 5
MAX_MORE_RECS = 3
MAX_STAGES = 12
MAX_MOVES = 4


def _pct(v: Any) -> str:
    return "n/a" if not isinstance(v, (int, float)) else percent(v)


def _ms(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return "–"
    return f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def _header(d: AnalysisDocument) -> Text:
    steps = d.steps
    det = d.step_detection
    t = Text()
    t.append("tftune analyze", style="bold")
    t.append(f"  run {d.run}  host {d.host or ','.join(d.hosts)}")
    t.append(f"  {device_label(d.device)}")
    if steps.count:
        t.append(f"\n{steps.count} steps ({det}), mean {_ms(steps.mean_ms)} ms, ")
        t.append(f"p90 {_ms(steps.p90_ms)} ms")
    else:
        t.append(f"\nno steps found ({det})", style="yellow")
    return t


def _verdict(d: AnalysisDocument) -> Text:
    level = d.verdict.level
    return Text(d.verdict.sentence, style=_LEVEL_STYLE[level] if level is not None else "bold")


def _breakdown(d: AnalysisDocument) -> Text:
    parts = [
        f"{category_label(k).lower()} {_pct(v)}"
        for k, v in sorted(d.breakdown, key=lambda kv: -(kv[1] or 0))
        if v is not None and v >= 0.005
    ]
    t = Text("step time: " + (" · ".join(parts) if parts else NOT_MEASURED))
    if d.input_categories:
        inner = " · ".join(
            f"{k} {_pct(v)}"
            for k, v in sorted(d.input_categories, key=lambda kv: -(kv[1] or 0))
            if v is not None and v >= 0.005
        )
        t.append(f"\ninput wait is for: {inner}")
    return t


def _where(b: Bottleneck) -> str:
    fns = b.functions
    names = ", ".join(f.rsplit("/", 1)[-1] for f in fns[: 2 if b.call_site else 3])
    if b.call_site:  # the line, then what runs there
        return f"{b.call_site} ({names})" if names else b.call_site
    return names or "–"


def _xprof(d: AnalysisDocument) -> Text | None:
    """XProf's step time and input share beside tftune's (``tftune analyze --xprof``)."""
    x = d.xprof
    if x is None or x == XProfCheck(None, None, None, None, None):
        return None

    def figures(step_ms: float | None, share: float | None) -> str:
        step = f"{_ms(step_ms)} ms" if step_ms is not None else NOT_MEASURED
        return f"step {step}, input {_pct(share) if share is not None else 'not measured'}"

    t = Text(
        f"XProf: {figures(x.steptime_ms, x.input_share)} · "
        f"tftune: {figures(x.tftune_steptime_ms, x.tftune_input_share)}"
    )
    if x.note:
        t.append(f" ({x.note})", style="dim")
    return t


def _bottlenecks(d: AnalysisDocument) -> Table | Text:
    rows = d.bottlenecks
    if not rows:
        return Text("No bottleneck above the reporting threshold.", style="green")
    table = Table(title="Bottlenecks (most important first)", title_justify="left", expand=False)
    table.add_column("#", justify="right")
    table.add_column("category")
    table.add_column("share", justify="right")
    table.add_column("stage")
    table.add_column("where / functions", overflow="fold")
    for i, b in enumerate(rows[:MAX_BOTTLENECKS], 1):
        table.add_row(
            str(i),
            b.category,
            _pct(b.share),
            stage_short_name(b.stage) if b.stage is not None else "–",
            _where(b),
        )
    return table


def _fix(d: AnalysisDocument) -> Group | Text:
    recs = d.recommendations
    if not recs:
        return Text("")
    top = recs[0]
    parts: list[Any] = [
        Text("Top fix: ", style="bold cyan").append(top.summary, style="default"),
        Padding(Text(str(top.code), style="green"), (0, 0, 0, 4)),
    ]
    if top.optimize:
        parts.append(Text(f"tftune optimize measures it: {top.optimize}", style="dim"))
    marker_fixes = [r for r in recs[1:] if "step_detection" in r.evidence]
    more = [r for r in recs[1 : 1 + MAX_MORE_RECS] if r not in marker_fixes]
    for r in more:
        parts.append(Text("also: ", style="cyan").append(r.summary, style="default"))
    for r in marker_fixes:  # no step markers: always show the one-line fix for the loop
        parts.append(Text("steps: ", style="bold yellow").append(r.summary))
        parts.append(Padding(Text(str(r.code), style="green"), (0, 0, 0, 4)))
    return Group(*parts)


def _next_moves(d: AnalysisDocument) -> Group | None:
    """What would speed up the step when the input pipeline is not the limit."""
    if not d.next_moves:
        return None
    parts: list[Any] = [
        Text("Next moves for the step (ranked by what the trace shows):", style="bold")
    ]
    for i, m in enumerate(d.next_moves[:MAX_MOVES], 1):
        parts.append(Text(f"{i}. ", style="bold cyan").append(m.summary, style="default"))
        if m.code:
            parts.append(Padding(Text(m.code, style="green"), (0, 0, 0, 4)))
    return Group(*parts)


def _stages(d: AnalysisDocument) -> Table | Text:
    if not d.stages:
        return Text("No tf.data iterator events in this trace.", style="yellow")
    table = Table(title="tf.data stages (what AUTOTUNE chose)", title_justify="left")
    table.add_column("stage")
    table.add_column("self ms", justify="right")
    table.add_column("wait ms", justify="right")
    table.add_column("parallelism", justify="right")
    table.add_column("buffer", justify="right")
    table.add_column("autotune")
    table.add_column("capped by")
    for s in d.stages[:MAX_STAGES]:
        name = "  " * s.depth + stage_kind(s.name)
        style = "bold red" if s.bottleneck else ("" if s.blocking else "dim")
        mark = " ◀" if s.bottleneck else ""
        table.add_row(
            name + mark,
            _ms(s.self_ms),
            _ms(s.wait_ms),
            "–" if s.parallelism is None else str(s.parallelism),
            "–" if s.buffer_limit is None else str(s.buffer_limit),
            "–" if s.autotune is None else ("yes" if s.autotune else "no"),
            s.capped_by or "",
            style=style,
        )
    return table


def text_console(file: io.StringIO, width: int, color: bool) -> Console:
    """A console that writes to `file` at a fixed `width`: ANSI styles only when `color`
    (what the CLI passes for a terminal), never a width or colour read from the
    environment, so the same JSON gives the same text (tests/golden/)."""
    return Console(
        file=file,
        width=width,
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        highlight=False,
        emoji=False,
    )


def plain_lines(text: str) -> str:
    """`text` without the padding a console adds to fill its width (trailing spaces on
    table, panel and code lines): what a pipe or a file gets."""
    return "\n".join(line.rstrip() for line in text.split("\n"))


def render(data: AnalysisDocument, width: int = 100, color: bool = False) -> str:
    """The summary as text: ANSI-styled when `color` (a terminal), else plain lines."""
    buf = io.StringIO()
    console = text_console(buf, width, color)
    console.print(_header(data))
    console.print(_verdict(data))
    stall = data.training.stall if data.training is not None else None
    if stall is not None:  # the step clock's, beside a `tftune profile` trace
        console.print(Text("Epoch start: ", style="bold yellow").append(stall.sentence))
        if stall.code:
            console.print(Padding(Text(stall.code, style="green"), (0, 0, 0, 4)))
    console.print(_breakdown(data))
    xprof = _xprof(data)
    if xprof is not None:
        console.print(xprof)
    console.print()
    console.print(_bottlenecks(data))
    console.print(_fix(data))
    moves = _next_moves(data)
    if moves is not None:
        console.print()
        console.print(moves)
    console.print()
    console.print(_stages(data))
    for note in data.notes:
        console.print(Text(f"note: {note}", style="dim"))
    sizing = caption(data.service_sizing)
    if sizing is not None:
        console.print(Text(sizing, style="bold"))
    return buf.getvalue() if color else plain_lines(buf.getvalue())
