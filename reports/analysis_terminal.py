"""The terminal summary of an analysis, rendered with rich from the analysis JSON.

Readable in ten seconds: the verdict, where the step time goes, the ranked bottlenecks,
the top fix as code, the next moves for the step when the input pipeline is not the
limit, and the tf.data stages with what AUTOTUNE chose; with ``--xprof``,
XProf's own step time and input share beside tftune's. It reads only the JSON contract (a
mapping), so it renders a saved analysis exactly as a fresh one.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from tftune.core.document_reading import epoch_stall_of, sizing_caption
from tftune.core.vocabulary import Band, category_label, percent, stage_kind, stage_short_name
from tftune.reports.words import device_label

_LEVEL_STYLE = {Band.HIGH: "bold red", Band.MODERATE: "bold yellow", Band.LOW: "bold green"}
MAX_BOTTLENECKS = 5
MAX_MORE_RECS = 3
MAX_STAGES = 12
MAX_MOVES = 4
_XPROF_FIELDS = ("steptime_ms", "input_share", "tftune_steptime_ms", "tftune_input_share", "note")


def _pct(v: Any) -> str:
    return "n/a" if not isinstance(v, (int, float)) else percent(v)


def _ms(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return "–"
    return f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def _header(d: Mapping[str, Any]) -> Text:
    steps = d.get("steps") or {}
    det = d.get("step_detection", "none")
    t = Text()
    t.append("tftune analyze", style="bold")
    t.append(f"  run {d.get('run')}  host {d.get('host') or ','.join(d.get('hosts', []))}")
    t.append(f"  {device_label(d.get('device'))}")
    if steps.get("count"):
        t.append(f"\n{steps['count']} steps ({det}), mean {_ms(steps.get('mean_ms'))} ms, ")
        t.append(f"p90 {_ms(steps.get('p90_ms'))} ms")
    else:
        t.append(f"\nno steps found ({det})", style="yellow")
    return t


def _verdict(d: Mapping[str, Any]) -> Text:
    v = d.get("verdict") or {}
    level = str(v.get("level"))
    style = _LEVEL_STYLE[Band(level)] if level in {b.value for b in Band} else "bold"
    return Text(str(v.get("sentence", "")), style=style)


def _breakdown(d: Mapping[str, Any]) -> Text:
    bd = d.get("breakdown") or {}
    parts = [
        f"{category_label(k).lower()} {_pct(v)}"
        for k, v in sorted(bd.items(), key=lambda kv: -(kv[1] or 0))
        if isinstance(v, (int, float)) and v >= 0.005
    ]
    cats = d.get("input_categories") or {}
    t = Text("step time: " + (" · ".join(parts) if parts else "not measured"))
    if cats:
        inner = " · ".join(
            f"{k} {_pct(v)}" for k, v in sorted(cats.items(), key=lambda kv: -kv[1]) if v >= 0.005
        )
        t.append(f"\ninput wait is for: {inner}")
    return t


def _where(b: Mapping[str, Any]) -> str:
    fns: Sequence[str] = b.get("functions") or []
    names = ", ".join(str(f).rsplit("/", 1)[-1] for f in fns[: 2 if b.get("call_site") else 3])
    if b.get("call_site"):  # the line, then what runs there
        return f"{b['call_site']} ({names})" if names else str(b["call_site"])
    return names or "–"


def _xprof(d: Mapping[str, Any]) -> Text | None:
    """XProf's step time and input share beside tftune's (``tftune analyze --xprof``)."""
    x = d.get("xprof")
    if not isinstance(x, Mapping) or all(x.get(k) is None for k in _XPROF_FIELDS):
        return None

    def figures(step_ms: Any, share: Any) -> str:
        step = f"{_ms(step_ms)} ms" if isinstance(step_ms, (int, float)) else "not measured"
        return f"step {step}, input {_pct(share) if share is not None else 'not measured'}"

    t = Text(
        f"XProf: {figures(x.get('steptime_ms'), x.get('input_share'))} · "
        f"tftune: {figures(x.get('tftune_steptime_ms'), x.get('tftune_input_share'))}"
    )
    if x.get("note"):
        t.append(f" ({x['note']})", style="dim")
    return t


def _bottlenecks(d: Mapping[str, Any]) -> Table | Text:
    rows = d.get("bottlenecks") or []
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
            str(b.get("category")),
            _pct(b.get("share")),
            stage_short_name(b["stage"]) if isinstance(b.get("stage"), str) else "–",
            _where(b),
        )
    return table


def _fix(d: Mapping[str, Any]) -> Group | Text:
    recs = d.get("recommendations") or []
    if not recs:
        return Text("")
    top = recs[0]
    parts: list[Any] = [
        Text("Top fix: ", style="bold cyan").append(str(top.get("summary")), style="default"),
        Padding(Text(str(top.get("code")), style="green"), (0, 0, 0, 4)),
    ]
    marker_fixes = [r for r in recs[1:] if "step_detection" in (r.get("evidence") or {})]
    more = [r for r in recs[1 : 1 + MAX_MORE_RECS] if r not in marker_fixes]
    for r in more:
        parts.append(Text("also: ", style="cyan").append(str(r.get("summary")), style="default"))
    for r in marker_fixes:  # no step markers: always show the one-line fix for the loop
        parts.append(Text("steps: ", style="bold yellow").append(str(r.get("summary"))))
        parts.append(Padding(Text(str(r.get("code")), style="green"), (0, 0, 0, 4)))
    return Group(*parts)


def _next_moves(d: Mapping[str, Any]) -> Group | None:
    """What would speed up the step when the input pipeline is not the limit."""
    moves = [m for m in d.get("next_moves") or [] if isinstance(m, Mapping)]
    if not moves:
        return None
    parts: list[Any] = [
        Text("Next moves for the step (ranked by what the trace shows):", style="bold")
    ]
    for i, m in enumerate(moves[:MAX_MOVES], 1):
        parts.append(
            Text(f"{i}. ", style="bold cyan").append(str(m.get("summary")), style="default")
        )
        if m.get("code"):
            parts.append(Padding(Text(str(m["code"]), style="green"), (0, 0, 0, 4)))
    return Group(*parts)


def _stages(d: Mapping[str, Any]) -> Table | Text:
    stages = d.get("stages") or []
    if not stages:
        return Text("No tf.data iterator events in this trace.", style="yellow")
    table = Table(title="tf.data stages (what AUTOTUNE chose)", title_justify="left")
    table.add_column("stage")
    table.add_column("self ms", justify="right")
    table.add_column("wait ms", justify="right")
    table.add_column("parallelism", justify="right")
    table.add_column("buffer", justify="right")
    table.add_column("autotune")
    table.add_column("capped by")
    for s in stages[:MAX_STAGES]:
        name = "  " * int(s.get("depth") or 0) + stage_kind(str(s.get("name", "")))
        style = "bold red" if s.get("bottleneck") else ("" if s.get("blocking") else "dim")
        mark = " ◀" if s.get("bottleneck") else ""
        table.add_row(
            name + mark,
            _ms(s.get("self_ms")),
            _ms(s.get("wait_ms")),
            "–" if s.get("parallelism") is None else str(s["parallelism"]),
            "–" if s.get("buffer_limit") is None else str(s["buffer_limit"]),
            {True: "yes", False: "no"}.get(s.get("autotune"), "–"),  # type: ignore[arg-type]
            s.get("capped_by") or "",
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


def render(data: Mapping[str, Any], width: int = 100, color: bool = False) -> str:
    """The summary as text: ANSI-styled when `color` (a terminal), else plain lines."""
    buf = io.StringIO()
    console = text_console(buf, width, color)
    console.print(_header(data))
    console.print(_verdict(data))
    stall = epoch_stall_of(data)
    if stall is not None:  # the step clock's, beside a `tftune profile` trace
        console.print(Text("Epoch start: ", style="bold yellow").append(stall[0]))
        if stall[1]:
            console.print(Padding(Text(stall[1], style="green"), (0, 0, 0, 4)))
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
    for note in data.get("notes") or []:
        console.print(Text(f"note: {note}", style="dim"))
    sizing = sizing_caption(data.get("service_sizing"))
    if sizing is not None:
        console.print(Text(sizing, style="bold"))
    return buf.getvalue() if color else plain_lines(buf.getvalue())
