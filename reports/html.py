"""Self-contained HTML reports: one file, no network, same bytes for the same model.

`render_analysis_html(model)` and `render_tuning_html(model)` only format a report model
(see `reports.model`). Charts are inline SVG built in Python; the one inline script powers
the copy buttons, and a Content-Security-Policy pins it by hash and forbids every network
request. The report's data is embedded as `<script type="application/json" id="tftune-data">`.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from tftune.reports import _svg
from tftune.reports.model import (
    AnalysisReport,
    Bottleneck,
    Stage,
    StepRow,
    Timeline,
    Trial,
    TuningReport,
    build_analysis_model,
    build_tuning_model,
    timestamp_now,
)

NOT_MEASURED = "not measured"
MAX_STEP_COLUMNS = 240  # beyond this the per-step chart shows evenly spaced steps

CATEGORY_COLORS = {
    "input_wait": "#dc4c2c",
    "host_to_device": "#e69b00",
    "device_compute": "#2563eb",
    "host_compute": "#0f9d76",
    "kernel_launch": "#7c3aed",
    "compilation": "#a16207",
    "output": "#64748b",
    "other": "#9ca3af",
    # bottleneck categories
    "io": "#b45309",
    "tokenization": "#be185d",
    "python": "#c2410c",
    "preprocessing": "#0e7490",
}
_SPARE = ("#6d28d9", "#0369a1", "#4d7c0f", "#9f1239", "#57534e")
CATEGORY_LABELS = {
    "input_wait": "Input wait",
    "host_to_device": "Host → device",
    "device_compute": "Device compute",
    "host_compute": "Host compute",
    "kernel_launch": "Kernel launch",
    "compilation": "Compilation",
    "output": "Output",
    "other": "Other",
    "io": "I/O",
    "tokenization": "Tokenization",
    "python": "Python",
    "preprocessing": "Preprocessing",
}
# Timeline event classes: what a reader needs to tell apart at a glance.
_EVENT_CLASSES = {
    "wait": ("#dc4c2c", "waiting for input"),
    "bottleneck": ("#991b1b", "bottleneck tf.data stage"),
    "tf_data": ("#8b5cf6", "tf.data stage"),
    "tf_data_work": ("#a78bfa", "tf.data function work"),
    "python": ("#d97706", "Python function (py_function)"),
    "h2d": ("#e69b00", "host → device copy"),
    "device": ("#2563eb", "device kernel"),
    "host": ("#0f9d76", "host op / step"),
}
_LEVEL_TITLES = {
    "high": "Highly input-bound",
    "moderate": "Moderately input-bound",
    "low": "Not input-bound",
}

_SCRIPT = """\
(function () {
  function fallback(text) {
    var t = document.createElement("textarea");
    t.value = text; t.setAttribute("readonly", ""); t.style.position = "fixed";
    t.style.opacity = "0"; document.body.appendChild(t); t.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(t);
    return ok;
  }
  function done(button, ok) {
    button.textContent = ok ? "Copied" : "Select and press Ctrl+C";
    button.classList.add("done");
    setTimeout(function () { button.textContent = "Copy"; button.classList.remove("done"); }, 1600);
  }
  document.addEventListener("click", function (ev) {
    var button = ev.target.closest ? ev.target.closest("button[data-copy]") : null;
    if (!button) { return; }
    var source = document.getElementById(button.getAttribute("data-copy"));
    var text = source ? source.textContent : "";
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        function () { done(button, true); },
        function () { done(button, fallback(text)); });
    } else {
      done(button, fallback(text));
    }
  });
})();
"""
_SCRIPT_HASH = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
_CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    f"script-src 'sha256-{_SCRIPT_HASH}'; base-uri 'none'; form-action 'none'"
)

_CSS = """
:root { --ink:#111827; --muted:#6b7280; --line:#e5e7eb; --bg:#f3f4f6; --card:#fff; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
  font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif; }
main { max-width:1100px; margin:0 auto; padding:20px 24px 40px; }
header.top { display:flex; justify-content:space-between; align-items:baseline;
  color:var(--muted); font-size:12px; margin-bottom:10px; }
header.top b { color:var(--ink); font-size:14px; letter-spacing:.02em; }
section { background:var(--card); border:1px solid var(--line); border-radius:10px;
  padding:18px 22px; margin:14px 0; }
h2 { font-size:17px; margin:0 0 4px; }
h3 { font-size:14px; margin:14px 0 6px; }
p.sub { color:var(--muted); margin:0 0 12px; }
.verdict { border-left:10px solid #9ca3af; padding:22px 26px; }
.verdict.high { border-left-color:#dc2626; background:#fef2f2; }
.verdict.moderate { border-left-color:#d97706; background:#fffbeb; }
.verdict.low { border-left-color:#16a34a; background:#f0fdf4; }
.verdict.tuned { border-left-color:#2563eb; background:#eff6ff; }
.level { display:inline-block; font-size:12px; font-weight:700; text-transform:uppercase;
  letter-spacing:.06em; padding:2px 10px; border-radius:999px; color:#fff; background:#6b7280; }
.high .level { background:#dc2626; } .moderate .level { background:#b45309; }
.low .level { background:#15803d; } .tuned .level { background:#1d4ed8; }
.sentence { font-size:26px; line-height:1.3; font-weight:700; margin:10px 0 16px; }
.stats { display:flex; flex-wrap:wrap; gap:10px; }
.stat { background:#fff; border:1px solid var(--line); border-radius:8px; padding:8px 14px;
  flex:1 1 0; min-width:120px; }
.stat .k { color:var(--muted); font-size:12px; }
.stat .v { font-size:20px; font-weight:700; }
.stat .v small { display:block; font-size:12px; font-weight:400; color:var(--muted); }
.nm { color:var(--muted); font-style:italic; font-weight:400; font-size:.9em; }
.card { border:1px solid var(--line); border-radius:8px; padding:14px 16px; margin:10px 0; }
.card.first { border-color:#fca5a5; box-shadow:0 0 0 2px #fee2e2; }
.card-head { display:flex; gap:12px; align-items:baseline; flex-wrap:wrap; }
.rank { font-size:20px; font-weight:800; color:var(--muted); }
.cat { display:inline-block; color:#fff; font-weight:700; border-radius:5px; padding:1px 8px;
  font-size:13px; }
.share { font-size:18px; font-weight:700; }
.where { color:var(--muted); font-size:13px; }
code, pre { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;
  font-size:13px; }
.codebox { position:relative; margin:10px 0 4px; }
.codebox pre { background:#0f172a; color:#e2e8f0; border-radius:8px; padding:12px 90px 12px 14px;
  margin:0; overflow-x:auto; white-space:pre; }
.codebox button { position:absolute; top:8px; right:8px; border:1px solid #475569;
  background:#1e293b; color:#f8fafc; border-radius:6px; padding:4px 12px; cursor:pointer;
  font:600 12px system-ui,sans-serif; }
.codebox button:hover { background:#334155; } .codebox button.done { background:#15803d; }
.diff .add { color:#86efac; } .diff .del { color:#fca5a5; } .diff .hunk { color:#93c5fd; }
dl.evidence { display:grid; grid-template-columns:max-content 1fr; gap:2px 14px; margin:8px 0 0;
  font-size:13px; }
dl.evidence dt { color:var(--muted); }
dl.evidence dd { margin:0; font-family:ui-monospace,monospace; }
.legend { display:flex; flex-wrap:wrap; gap:6px 16px; font-size:12px; margin:8px 0 2px; }
.legend span.sw { display:inline-block; width:11px; height:11px; border-radius:2px;
  margin-right:5px; vertical-align:-1px; }
svg.chart { display:block; max-width:100%; height:auto; }
table { border-collapse:collapse; width:100%; font-size:13px; }
th { text-align:left; color:var(--muted); font-weight:600; border-bottom:2px solid var(--line);
  padding:6px 8px; white-space:nowrap; }
td { border-bottom:1px solid var(--line); padding:6px 8px; vertical-align:top; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
tr.hot td { background:#fef2f2; } tr.hot td:first-child { box-shadow:inset 4px 0 0 #dc2626; }
tr.best td { background:#eff6ff; font-weight:600; }
.tree { font-family:ui-monospace,monospace; white-space:nowrap; }
.op { color:var(--muted); font-size:11px; }
.badge { display:inline-block; font-size:11px; font-weight:700; border-radius:4px; padding:0 6px;
  margin-left:6px; background:#e5e7eb; color:#374151; font-family:system-ui,sans-serif; }
.badge.red { background:#dc2626; color:#fff; } .badge.amber { background:#fde68a; color:#78350f; }
.chip { display:inline-block; background:#f3f4f6; border:1px solid var(--line); border-radius:4px;
  padding:0 6px; margin:1px 4px 1px 0; font-family:ui-monospace,monospace; font-size:12px; }
.chip b { font-weight:700; }
.bar { display:inline-block; height:9px; background:#9ca3af; border-radius:2px;
  vertical-align:middle; margin-right:6px; }
tr.hot .bar { background:#dc2626; }
ul.notes { margin:6px 0 0; padding-left:20px; }
.warn { background:#fffbeb; border:1px solid #fcd34d; border-radius:8px; padding:8px 12px;
  margin:8px 0; color:#78350f; }
.warn.crash { background:#fef2f2; border-color:#fca5a5; color:#7f1d1d; }
pre.crash, pre.tail { margin:4px 0 0; white-space:pre-wrap; overflow-wrap:anywhere;
  font-size:12px; }
pre.crash { color:#7f1d1d; }
pre.tail { max-height:320px; overflow-y:auto; background:#f8fafc; border:1px solid var(--line);
  border-radius:6px; padding:8px; }
dl.meta { display:grid; grid-template-columns:max-content 1fr; gap:4px 18px; margin:0; }
dl.meta dt { color:var(--muted); } dl.meta dd { margin:0; word-break:break-all; }
details summary { cursor:pointer; color:#1d4ed8; margin-top:8px; }
footer { color:var(--muted); font-size:12px; text-align:center; margin-top:18px; }
"""


# ----------------------------------------------------------------------------- format


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _nm() -> str:
    return f'<span class="nm">{NOT_MEASURED}</span>'


def fmt_ms(v: float | None) -> str:
    if v is None:
        return NOT_MEASURED
    if v >= 100:
        return f"{v:,.0f} ms"
    return f"{v:.1f} ms" if v >= 1 else f"{v:.2f} ms"


def fmt_pct(v: float | None) -> str:
    if v is None:
        return NOT_MEASURED
    pct = v * 100
    return f"{pct:.0f}%" if pct >= 1 or pct == 0 else f"{pct:.1f}%"


def fmt_rate(v: float | None) -> str:
    if v is None:
        return NOT_MEASURED
    return f"{v:,.0f} el/s" if v >= 100 else f"{v:,.1f} el/s"


def fmt_x(v: float | None) -> str:
    if v is None:
        return NOT_MEASURED
    return f"{v:.1f}×" if v < 100 else f"{v:,.0f}×"


def _num_cell(text: str, value: object) -> str:
    return _nm() if value is None else _e(text)


def _h(text: str, *, unknown: bool) -> str:
    """Escaped text, or the muted "not measured" marker."""
    return _nm() if unknown else _e(text)


def color_of(cat: str) -> str:
    if cat in CATEGORY_COLORS:
        return CATEGORY_COLORS[cat]
    digest = hashlib.sha256(cat.encode()).digest()[0]
    return _SPARE[digest % len(_SPARE)]


def label_of(cat: str) -> str:
    return CATEGORY_LABELS.get(cat, cat.replace("_", " ").capitalize())


def _embed_json(data_json: str) -> str:
    # Inside <script>, only "</" can end the element early; escape every "<", ">" and "&".
    safe = data_json.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="tftune-data">{safe}</script>'


class _Ids:
    """Deterministic element ids for copy targets."""

    def __init__(self) -> None:
        self.n = 0

    def next(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"


def _codebox(code: str, ids: _Ids, *, diff: bool = False) -> str:
    target = ids.next("code")
    if diff:
        lines = []
        for line in code.splitlines():
            cls = ""
            if line.startswith("@@"):
                cls = "hunk"
            elif line.startswith("+") and not line.startswith("+++"):
                cls = "add"
            elif line.startswith("-") and not line.startswith("---"):
                cls = "del"
            lines.append(f'<span class="{cls}">{_e(line)}</span>' if cls else _e(line))
        body = "\n".join(lines)
    else:
        body = _e(code)
    return (
        f'<div class="codebox{" diff" if diff else ""}"><pre><code id="{target}">{body}'
        f'</code></pre><button type="button" data-copy="{target}" '
        f'title="Copy to the clipboard">Copy</button></div>'
    )


def _stat(key: str, value: str, small: str = "") -> str:
    extra = f" <small>{small}</small>" if small else ""
    return (
        f'<div class="stat"><div class="k">{_e(key)}</div><div class="v">{value}{extra}</div></div>'
    )


def _legend(items: Iterable[tuple[str, str]]) -> str:
    spans = "".join(
        f'<span><span class="sw" style="background:{color}"></span>{text}</span>'
        for color, text in items
    )
    return f'<div class="legend">{spans}</div>'


def _page(title: str, body: str, data_json: str, generated_at: str, source: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="generator" content="tftune">'
        '<link rel="icon" href="data:,">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>"
        f'<header class="top"><span><b>tftune</b> · {_e(title)}</span>'
        f"<span>{_e(source)} · generated {_e(generated_at)}</span></header>"
        f"{body}"
        "<footer>Self-contained report: no network access. The data behind it is embedded "
        "as JSON (<code>#tftune-data</code>); re-render with <code>tftune report</code>."
        "</footer></main>"
        f"{_embed_json(data_json)}<script>{_SCRIPT}</script></body></html>\n"
    )


# ---------------------------------------------------------------------------- analysis


def render_analysis_html(
    model: AnalysisReport | Mapping[str, Any], *, generated_at: str | None = None
) -> str:
    """The analysis report as one self-contained HTML page.

    Given the analysis JSON itself (a mapping) rather than a model, it builds the model
    first, stamped `generated_at` (default: now, or $SOURCE_DATE_EPOCH).
    """
    if not isinstance(model, AnalysisReport):
        model = build_analysis_model(model, generated_at=generated_at or timestamp_now())
    ids = _Ids()
    body = [
        _verdict_section(model),
        _bottleneck_section(model, ids),
        _steps_section(model),
        _stages_section(model),
        _timeline_section(model),
        _run_section(model),
    ]
    return _page(
        "input pipeline analysis", "".join(body), model.data_json, model.generated_at, model.source
    )


def _verdict_section(m: AnalysisReport) -> str:
    level = m.verdict.level
    stats = [
        _stat(
            "Waiting for input",
            _h(fmt_pct(m.input_share), unknown=m.input_share is None),
            "of step time",
        ),
        _stat(
            "Mean step",
            _h(fmt_ms(m.steps.mean_ms), unknown=m.steps.mean_ms is None),
            f"p50 {_e(fmt_ms(m.steps.p50_ms))} · p90 {_e(fmt_ms(m.steps.p90_ms))}",
        ),
        _stat("Steps", f"{m.steps.count:,}", _e(m.run.step_detection or NOT_MEASURED)),
        _stat("Device", _h(m.run.device or "", unknown=m.run.device is None)),
    ]
    if m.bottlenecks:
        top = m.bottlenecks[0]
        where = top.call_site or (top.stage.rsplit("::", 1)[-1] if top.stage else "")
        stats.append(
            _stat(
                "Top bottleneck",
                _e(label_of(top.category)),
                f"{_e(fmt_pct(top.share))}{(' · ' + _e(where)) if where else ''}",
            )
        )
    return (
        f'<section class="verdict {_e(level)}" id="verdict">'
        f'<span class="level">{_e(_LEVEL_TITLES.get(level, level))}</span>'
        f'<div class="sentence">{_e(m.verdict.sentence)}</div>'
        f'<div class="stats">{"".join(stats)}</div></section>'
    )


def _bottleneck_section(m: AnalysisReport, ids: _Ids) -> str:
    if not m.bottlenecks:
        return (
            '<section id="bottlenecks"><h2>What to fix</h2><p class="sub">No input-pipeline '
            "bottleneck was found in this trace.</p></section>"
        )
    cards = "".join(_bottleneck_card(b, ids) for b in m.bottlenecks)
    return (
        '<section id="bottlenecks"><h2>What to fix, in order</h2>'
        '<p class="sub">Ranked by expected gain; each share is a fraction of the mean step '
        "time.</p>"
        f"{cards}</section>"
    )


def _bottleneck_card(b: Bottleneck, ids: _Ids) -> str:
    where = []
    if b.call_site:
        where.append(f"at <code>{_e(b.call_site)}</code>")
    if b.stage:
        where.append(f"stage <code>{_e(b.stage)}</code>")
    if b.functions:
        where.append("runs " + ", ".join(f"<code>{_e(f)}</code>" for f in b.functions))
    if not where:
        where.append("not tied to one tf.data stage")
    fix = ""
    if b.fix is not None:
        fix = f"<p><b>Fix:</b> {_e(b.fix.summary)}</p>" if b.fix.summary else ""
        if b.fix.code:
            fix += _codebox(b.fix.code, ids)
    evidence = ""
    if b.evidence:
        rows = "".join(
            f"<dt>{_e(k)}</dt><dd>{_nm() if v is None else _e(_value(v))}</dd>"
            for k, v in b.evidence
        )
        opened = " open" if b.rank == 1 else ""
        evidence = (
            f"<details{opened}><summary>Evidence</summary>"
            f'<dl class="evidence">{rows}</dl></details>'
        )
    share = (
        f'{_e(fmt_pct(b.share))} <span class="where">of step time</span>'
        if b.share is not None
        else _nm()
    )
    return (
        f'<div class="card{" first" if b.rank == 1 else ""}" data-category="{_e(b.category)}">'
        f'<div class="card-head"><span class="rank">#{b.rank}</span>'
        f'<span class="cat" style="background:{color_of(b.category)}">'
        f"{_e(label_of(b.category))}</span>"
        f'<span class="share">{share}</span></div>'
        f'<div class="where">{" · ".join(where)}</div>{fix}{evidence}</div>'
    )


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    return str(v)


def _sample(rows: Sequence[StepRow], limit: int) -> list[StepRow]:
    if len(rows) <= limit:
        return list(rows)
    return [rows[round(i * (len(rows) - 1) / (limit - 1))] for i in range(limit)]


def _steps_section(m: AnalysisReport) -> str:
    parts = []
    mean = m.steps.mean_ms
    used: list[str] = []
    for cat, share in m.breakdown:
        ms = f" · {fmt_ms(share * mean)}" if share is not None and mean is not None else ""
        caption = f"{label_of(cat)} {fmt_pct(share)}{ms}"
        if share is not None and share > 0:
            parts.append((cat, share, caption))
        used.append(cat)
    legend = _legend(
        (color_of(cat), _e(label_of(cat)) + " " + (_e(fmt_pct(s)) if s is not None else _nm()))
        for cat, s in m.breakdown
        if s != 0.0  # zero shares are noise; null ones say "not measured"
    )
    avg = (
        _svg.share_bar(parts, color_of, label="Average step time by category")
        if parts
        else f"<p>{_nm()}</p>"
    )
    out = [
        '<section id="steps"><h2>Where step time goes</h2>',
        f'<p class="sub">On average over {m.steps.count:,} steps of '
        f"{_e(fmt_ms(mean))} ({_e(m.run.step_detection or NOT_MEASURED)} step detection).</p>",
        avg,
        legend,
    ]
    if m.per_step:
        shown = _sample(m.per_step, MAX_STEP_COLUMNS)
        columns = [
            _svg.Column(
                label=str(r.step),
                parts=r.parts,
                title=f"step {r.step}: {fmt_ms(r.duration_ms)} — "
                + ", ".join(f"{label_of(c)} {fmt_ms(v)}" for c, v in r.parts),
            )
            for r in shown
        ]
        ref = (mean, f"mean {fmt_ms(mean)}") if mean is not None else None
        note = ""
        if len(shown) < m.per_step_total:
            note = f" Showing {len(shown)} evenly spaced of {m.per_step_total:,} steps."
        out.append(
            f'<h3>Per step</h3><p class="sub">Each bar is one step, stacked by category '
            f"(hover for values).{_e(note)}</p>"
        )
        out.append(
            _svg.stacked_columns(
                columns, color_of, unit="ms", reference=ref, label="Step time per step"
            )
        )
    out.append("</section>")
    return "".join(out)


_KNOBS = ("parallelism", "buffer_limit", "batch_size", "threadpool_size", "cpu_budget")


def _knobs_cell(s: Stage) -> str:
    chips = []
    missing = []
    for knob in _KNOBS:
        value = getattr(s, knob)
        if value is None:
            missing.append(knob)
        else:
            chips.append(f'<span class="chip">{knob} <b>{value}</b></span>')
    if s.autotune is not None:
        chips.append(f'<span class="chip">autotune <b>{"on" if s.autotune else "off"}</b></span>')
    else:
        missing.append("autotune")
    if s.capped_by:
        chips.append(f'<span class="badge amber">capped by {_e(s.capped_by)}</span>')
    nm = f'<div class="nm">{NOT_MEASURED}: {", ".join(missing)}</div>' if missing else ""
    return "".join(chips) + nm


def _stages_section(m: AnalysisReport) -> str:
    if not m.stages:
        return (
            '<section id="stages"><h2>tf.data pipeline</h2><p class="sub">'
            f"Stage tree {NOT_MEASURED}: the trace has no tf.data iterator events.</p></section>"
        )
    high = max([s.self_ms or 0.0 for s in m.stages] + [1e-9])
    rows = []
    for s in m.stages:
        indent = "&nbsp;&nbsp;" * s.depth + ("└ " if s.depth else "")
        badges = ""
        if s.bottleneck:
            badges += '<span class="badge red">bottleneck</span>'
        if s.blocking:
            badges += '<span class="badge">blocks consumer</span>'
        bar = ""
        if s.self_ms is not None:
            bar = (
                f'<span class="bar" style="width:{max(1, round(70 * s.self_ms / high))}px"></span>'
            )
        rows.append(
            f'<tr class="{"hot" if s.bottleneck else ""}" data-stage="{_e(s.name)}">'
            f'<td><span class="tree" title="{_e(s.name)}">{indent}{_e(s.short_name)}</span>'
            f'{badges}<div class="op">{indent}{_e(s.op or "")}</div></td>'
            f'<td class="num">{bar}{_h(fmt_ms(s.self_ms), unknown=s.self_ms is None)}</td>'
            f'<td class="num">{_num_cell(fmt_ms(s.self_per_call_ms), s.self_per_call_ms)}</td>'
            f'<td class="num">{_num_cell(f"{s.calls or 0:,}", s.calls)}</td>'
            f"<td>{_knobs_cell(s)}</td></tr>"
        )
    more = ""
    if len(m.stages) < m.stages_total:
        more = f'<p class="sub">Showing the first {len(m.stages)} of {m.stages_total:,} stages.</p>'
    return (
        '<section id="stages"><h2>tf.data pipeline</h2>'
        '<p class="sub">The iterator tree as it ran (after TensorFlow\'s graph rewrites), with '
        "each stage's own time and the values AUTOTUNE chose.</p>"
        '<table><thead><tr><th>stage</th><th class="num">self time</th>'
        '<th class="num">per call</th><th class="num">calls</th><th>AUTOTUNE chose</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}</section>"
    )


def _event_class(name: str, kind: str, bottleneck_stages: frozenset[str]) -> str:
    lowered = name.lower()
    if "iteratorgetnext" in lowered:
        return "wait"
    if name.startswith("Iterator::"):
        return "bottleneck" if name in bottleneck_stages else "tf_data"
    if "pyfunc" in lowered or "py_function" in lowered or "numpyfunction" in lowered:
        return "python"
    if "memcpyh2d" in lowered or "hosttodevice" in lowered or "h2d" in lowered:
        return "h2d"
    if kind == "tf_data":
        return "tf_data_work"
    return "device" if kind == "device" else "host"


def _timeline_section(m: AnalysisReport) -> str:
    t: Timeline | None = m.timeline
    if t is None or not t.tracks:
        return (
            '<section id="timeline"><h2>Timeline</h2><p class="sub">'
            f"Timeline {NOT_MEASURED}: the analysis JSON carries no timeline.</p></section>"
        )
    hot = frozenset(s.name for s in m.stages if s.bottleneck)
    kinds_order = {"host": 0, "tf_data": 1, "device": 2}
    lanes = []
    used: set[str] = set()
    for tr in sorted(t.tracks, key=lambda tr: kinds_order.get(tr.kind, 3)):
        events = []
        for ev in tr.events:
            cls = _event_class(ev.name, tr.kind, hot)
            used.add(cls)
            events.append((ev.start_ms, ev.duration_ms, ev.name, _EVENT_CLASSES[cls][0]))
        note = f"{tr.dropped:,} short events not shown" if tr.dropped else ""
        lanes.append(_svg.Lane(tr.name, tr.kind, tuple(events), note))
    markers = [
        (r.start_ms, f"step {r.step}")
        for r in m.per_step
        if r.start_ms is not None and t.start_ms <= r.start_ms <= t.end_ms
    ]
    chart = _svg.timeline(
        lanes,
        start_ms=t.start_ms,
        end_ms=t.end_ms,
        markers=markers,
        label="Timeline of representative steps",
    )
    legend = _legend(
        (color, _e(text)) for key, (color, text) in _EVENT_CLASSES.items() if key in used
    )
    dropped = sum(tr.dropped for tr in t.tracks)
    note = ""
    if dropped or t.dropped_tracks:
        note = (
            f'<p class="sub">Capped for size: {dropped:,} of the shortest events and '
            f"{t.dropped_tracks:,} tracks are not drawn.</p>"
        )
    span = t.end_ms - t.start_ms
    return (
        '<section id="timeline"><h2>Timeline of representative steps</h2>'
        f'<p class="sub">{_e(fmt_ms(span))} of the trace: host threads, tf.data threads and '
        "device streams (hover a box for its name and duration).</p>"
        f"{chart}{legend}{note}</section>"
    )


def _run_section(m: AnalysisReport) -> str:
    r = m.run

    def row(key: str, value: str | None) -> str:
        return f"<dt>{_e(key)}</dt><dd>{_nm() if value is None else _e(value)}</dd>"

    items = [
        row("TensorFlow", r.tf_version),
        row("hosts", ", ".join(r.hosts) if r.hosts else None),
        row("devices", ", ".join(r.devices) if r.devices else None),
        row("device kind", r.device),
        row("CPU cores", str(r.cores) if r.cores is not None else None),
        row("step detection", r.step_detection),
        row("profile run", r.run),
        row(
            "profile duration",
            fmt_ms(r.profile_duration_ms) if r.profile_duration_ms is not None else None,
        ),
        row("logdir", r.logdir),
    ]
    if r.files:
        items.append(row("trace files", ", ".join(r.files)))
    if r.skipped:
        items.append(row("skipped", "; ".join(f"{p}: {why}" for p, why in r.skipped)))
    items.append(row("analysed by", r.tool))
    notes = ""
    if m.notes:
        notes = (
            '<h3>Notes</h3><ul class="notes">'
            + "".join(f"<li>{_e(n)}</li>" for n in m.notes)
            + "</ul>"
        )
    return f'<section id="run"><h2>Run</h2><dl class="meta">{"".join(items)}</dl>{notes}</section>'


# ------------------------------------------------------------------------------ tuning


def render_tuning_html(
    model: TuningReport | Mapping[str, Any], *, generated_at: str | None = None
) -> str:
    """The tuning report as one self-contained HTML page.

    Given the tuning JSON itself (a mapping) rather than a model, it builds the model
    first, stamped `generated_at` (default: now, or $SOURCE_DATE_EPOCH).
    """
    if not isinstance(model, TuningReport):
        model = build_tuning_model(model, generated_at=generated_at or timestamp_now())
    ids = _Ids()
    body = [
        _tuning_hero(model),
        _instability_section(model),
        _comparison_section(model),
        _winner_section(model, ids),
        _history_section(model),
        _importance_section(model),
        _space_section(model),
        _failures_section(model),
        _tuning_run_section(model),
    ]
    return _page("tuning report", "".join(body), model.data_json, model.generated_at, model.source)


def _row(m: TuningReport, key: str) -> float | None:
    for row in m.rows:
        if row.key == key and row.measurement is not None:
            return row.measurement.examples_per_s
    return None


def _tuning_hero(m: TuningReport) -> str:
    tuned = _row(m, "tuned")
    base = _row(m, "as_written")
    auto = _row(m, "autotune")
    if tuned is not None and base:
        sentence = f"Tuned: {fmt_rate(tuned)}, {fmt_x(tuned / base)} the script as written"
        if auto:
            sentence += f" and {fmt_x(tuned / auto)} AUTOTUNE everywhere"
        sentence += "."
    else:
        sentence = f"Tuned throughput: {fmt_rate(tuned)}."
    ceiling = m.ceiling
    ceiling_label = "Ceiling"
    ceiling_text = ""
    if ceiling is not None and tuned is not None:
        limit = "pipeline" if ceiling == m.ceiling_pipeline else "model"
        if tuned > ceiling and limit == "pipeline" and m.ceiling_model is not None:
            # The bound was the pipeline as written, which tuning lifted: what is left is
            # the model's own rate on cached data.
            ceiling, ceiling_label = m.ceiling_model, "Model alone"
            ceiling_text = (
                f"{fmt_pct(tuned / ceiling)} of what the model alone can consume "
                f"({fmt_rate(ceiling)}); the pipeline as written delivered "
                f"{fmt_rate(m.ceiling_pipeline)} on its own"
            )
        else:
            ceiling_text = (
                f"{fmt_pct(tuned / ceiling)} of this machine's ceiling "
                f"({fmt_rate(ceiling)}, set by the {limit} alone)"
            )
    counts = (m.trials_complete, m.trials_pruned, m.trials_failed)
    trials = [
        f"{v:,} {k}"
        for k, v in (
            ("complete", m.trials_complete),
            ("pruned", m.trials_pruned),
            ("failed", m.trials_failed),
        )
        if v is not None
    ]
    stats = [
        _stat("Tuned", _e(fmt_rate(tuned)) if tuned is not None else _nm()),
        _stat("As written", _e(fmt_rate(base)) if base is not None else _nm()),
        _stat(
            ceiling_label,
            _e(fmt_rate(ceiling)) if ceiling is not None else _nm(),
            _e(ceiling_text.split(" (")[0]) if ceiling_text else "",
        ),
        _stat(
            "Trials",
            f"{sum(c or 0 for c in counts):,}" if trials else _nm(),
            _e(" · ".join(trials)),
        ),
        _stat("Tuning time", _e(f"{m.wall_s / 60:.1f} min") if m.wall_s is not None else _nm()),
    ]
    return (
        '<section class="verdict tuned" id="verdict"><span class="level">tuning result</span>'
        f'<div class="sentence">{_e(sentence)}</div>'
        + (f'<p class="sub">{_e(ceiling_text)}.</p>' if ceiling_text else "")
        + _confirmed_line(m)
        + f'<div class="stats">{"".join(stats)}</div></section>'
    )


def _instability_section(m: TuningReport) -> str:
    """The script crashes whatever the config: said before any figure is read."""
    inst = m.instability
    if inst is None:
        return ""
    sentence = inst.sentence[:1].upper() + inst.sentence[1:]
    trials = ", ".join(str(n) for n in inst.trials)
    return (
        '<section id="instability"><h2>The script crashes on its own</h2>'
        f'<div class="warn crash">{_e(sentence)}.</div>'
        '<p class="sub">These runs count as failed trials, but no knob value is blamed for '
        f"them (crashed: trial{'s' if len(inst.trials) != 1 else ''} {_e(trials)}). Fix the "
        "crash, then tune again: the figures below come from the runs that did not crash."
        "</p></section>"
    )


def _confirmed_line(m: TuningReport) -> str:
    c = m.confirmed
    if c is None:
        return ""
    spread = f" (spread {fmt_pct(c.spread)})" if c.spread is not None else ""
    return (
        '<p class="sub">Re-measured after the search: '
        f"{_e(fmt_rate(c.examples_per_s))}{_e(spread)}.</p>"
    )


def _comparison_section(m: TuningReport) -> str:
    rates = [
        r.measurement.examples_per_s
        for r in m.rows
        if r.measurement and r.measurement.examples_per_s
    ]
    high = max([*rates, 1e-9])
    rows = []
    for r in m.rows:
        meas = r.measurement
        if meas is None:
            rows.append(f'<tr><td>{_e(r.label)}</td><td colspan="4">{_nm()} in this run</td></tr>')
            continue
        rate = meas.examples_per_s
        bar = (
            f'<span class="bar" style="width:{max(1, round(160 * rate / high))}px;'
            f'background:{"#2563eb" if r.key == "tuned" else "#9ca3af"}"></span>'
            if rate
            else ""
        )
        spread = fmt_pct(meas.spread) if meas.spread is not None else None
        rows.append(
            f'<tr class="{"best" if r.key == "tuned" else ""}"><td>{_e(r.label)}</td>'
            f'<td class="num">{bar}{_h(fmt_rate(rate), unknown=rate is None)}</td>'
            f'<td class="num">{_num_cell(fmt_pct(meas.utilization), meas.utilization)}</td>'
            f'<td class="num">{_h(spread or "", unknown=spread is None)}</td>'
            f'<td class="num">{_h(fmt_x(r.speedup), unknown=r.speedup is None)}</td></tr>'
        )
    kind = f" ({m.utilization_kind})" if m.utilization_kind else ""
    return (
        '<section id="comparison"><h2>As written, AUTOTUNE, heuristic, tuned</h2>'
        '<p class="sub">All four measured in the same run, on this machine. Spread is '
        "(max − min) / median over the repeats: speed-ups smaller than it are noise.</p>"
        f'<table><thead><tr><th>configuration</th><th class="num">examples/s</th>'
        f'<th class="num">utilization{_e(kind)}</th><th class="num">spread</th>'
        f'<th class="num">speed-up vs as written</th></tr></thead><tbody>{"".join(rows)}'
        "</tbody></table></section>"
    )


def _winner_section(m: TuningReport, ids: _Ids) -> str:
    out = ['<section id="winner"><h2>The winning config</h2>']
    if _winner_changes_batch(m):  # the batch-size warning concerns this config
        out += [f'<div class="warn">{_e(w)}</div>' for w in m.warnings]
    saved = (
        f"Saved as <code>{_e(m.config_file)}</code>, keyed by call site. " if m.config_file else ""
    )
    what = f"{_e(m.best_description)}." if m.best_description else ""
    if saved or what:
        out.append(f'<p class="sub">{saved}{what}</p>')
    if m.config:
        rows = "".join(
            f"<tr><td><code>{_e(c.scope)}</code></td><td>{_e(c.knob)}</td>"
            f'<td class="num"><code>{_e(c.value)}</code></td></tr>'
            for c in m.config
        )
        out.append(
            '<table><thead><tr><th>call site</th><th>knob</th><th class="num">value</th></tr>'
            f"</thead><tbody>{rows}</tbody></table>"
        )
    else:
        out.append(f"<p>Config {_nm()}.</p>")
    if m.command:
        out.append("<h3>Run it</h3>" + _codebox(m.command, ids))
    if m.diff:
        out.append("<h3>The change to your code</h3>" + _codebox(m.diff, ids, diff=True))
    if m.snippet:
        out.append("<h3>Or paste these lines</h3>" + _codebox(m.snippet, ids))
    out.append(
        "<details><summary>Config JSON</summary>" + _codebox(m.config_json, ids) + "</details>"
    )
    out.append("</section>")
    return "".join(out)


def _space_section(m: TuningReport) -> str:
    if not (m.knobs or m.fixed or m.left_out):
        return ""
    out = [
        '<section id="space"><h2>What was searched</h2>'
        '<p class="sub">The knobs found at your call sites, and those left out because they '
        "cannot matter here.</p>"
    ]
    if m.knobs:
        rows = "".join(
            f"<tr><td><code>{_e(k.name)}</code></td><td>{_e(', '.join(k.choices))}</td>"
            f"<td>{_e(k.why or '')}</td></tr>"
            for k in m.knobs
        )
        out.append(
            "<table><thead><tr><th>knob</th><th>choices</th><th>why</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    if m.fixed:
        chips = "".join(f'<span class="chip">{_e(k)} <b>{_e(v)}</b></span>' for k, v in m.fixed)
        out.append(f"<h3>Fixed</h3><p>{chips}</p>")
    if m.left_out:
        items = "".join(f"<li><code>{_e(k)}</code>: {_e(why)}</li>" for k, why in m.left_out)
        out.append(f'<h3>Left out</h3><ul class="notes">{items}</ul>')
    if not _winner_changes_batch(m):  # searched, but the winner keeps the batch size
        out += [f'<p class="sub">{_e(w)}</p>' for w in m.warnings]
    out.append("</section>")
    return "".join(out)


def _winner_changes_batch(m: TuningReport) -> bool:
    return any(c.knob == "batch_size" for c in m.config)


def _history_section(m: TuningReport) -> str:
    if not m.trials:
        return (
            '<section id="history"><h2>Optimization history</h2>'
            f'<p class="sub">Per-trial results {NOT_MEASURED} (no trials_detail).</p></section>'
        )
    gpu = m.objective == "gpu-util"
    scale = 100.0 if gpu else 1.0
    unit = "GPU utilization %" if gpu else "examples/s"
    points = []
    for t in m.trials:
        kind = {"COMPLETE": "complete", "FAIL": "failed"}.get(t.state, "pruned")
        value = t.value * scale if t.value is not None else None
        shown = (
            f"{value:.0f}%"
            if gpu and value is not None
            else fmt_rate(value)
            if value is not None
            else NOT_MEASURED
        )
        title = f"trial {t.number}{_role(t)} ({t.state.lower()}): {shown}"
        if t.number in m.pareto_trials:
            title += " · on the Pareto front"
        if t.reason:
            title += f" — {t.reason}"
        if t.crash and t.crash[0] not in (t.reason or ""):
            title += f"\n{t.crash[0]}"
        if t.params:
            title += "\n" + "\n".join(f"{k} = {v}" for k, v in t.params)
        points.append(
            _svg.Point(float(t.number), value if kind == "complete" else None, kind, title)
        )
    refs: list[tuple[float, str, str]] = []
    if not gpu:
        base = _row(m, "as_written")
        auto = _row(m, "autotune")
        if base is not None:
            refs.append((base, f"as written {_svg.tick_label(base)}", "#6b7280"))
        if auto is not None:
            refs.append((auto, f"AUTOTUNE {_svg.tick_label(auto)}", "#7c3aed"))
        if m.ceiling is not None:
            refs.append((m.ceiling, f"ceiling {_svg.tick_label(m.ceiling)}", "#15803d"))
    chart = _svg.history(points, references=refs, unit=unit, label="Optimization history")
    legend = _legend(
        [
            ("#2563eb", "complete trial"),
            ("#c2410c", "best so far"),
            ("#9ca3af", "pruned (×)"),
            ("#dc2626", "failed (×)"),
        ]
    )
    both = ""
    if m.objective == "both":
        both = (
            '<p class="sub">Objective "both": examples/s shown; utilization per trial is in '
            "the table below."
            + (
                " Pareto front: trials " + ", ".join(str(n) for n in m.pareto_trials) + "."
                if m.pareto_trials
                else ""
            )
            + "</p>"
        )
    return (
        '<section id="history"><h2>Optimization history</h2>'
        f'<p class="sub">The objective ({_e(unit)}) of each trial, in order, and the best so far. '
        "Pruned and failed trials sit on the axis.</p>"
        f"{chart}{legend}{both}</section>"
    )


def _importance_section(m: TuningReport) -> str:
    if not m.importances:
        return (
            '<section id="importances"><h2>Parameter importances</h2>'
            f'<p class="sub">Importances {NOT_MEASURED} (too few complete trials).</p></section>'
        )
    total = sum(v for _, v in m.importances) or 1.0
    items = [(k, v, f"{v / total * 100:.0f}%") for k, v in m.importances]
    chart = _svg.hbars(items, color="#60a5fa", label="Parameter importances", highlight_first=True)
    return (
        '<section id="importances"><h2>Parameter importances</h2>'
        '<p class="sub">How much of the variation in the objective each knob explains '
        "(estimated by Optuna over the complete trials).</p>"
        f"{chart}</section>"
    )


def _params_text(t: Trial) -> str:
    if t.params:
        return ", ".join(f"{k}={v}" for k, v in t.params)
    return t.description or ""


def _role(t: Trial) -> str:
    return "" if t.role in (None, "search") else f" ({t.role.replace('_', ' ')})"


def _why_cell(t: Trial) -> str:
    """The reason, a failed trial's crash lines, and its stderr tail (folded)."""
    out = _h(t.reason or "", unknown=not t.reason)
    lines = [line for line in t.crash if line not in (t.reason or "")]
    if lines:
        out += f'<pre class="crash">{_e(chr(10).join(lines))}</pre>'
    if t.stderr_tail:
        count = len(t.stderr_tail.splitlines())
        out += (
            f"<details><summary>stderr, last {count} line{'s' if count != 1 else ''}</summary>"
            f'<pre class="tail">{_e(t.stderr_tail)}</pre></details>'
        )
    return out


def _failures_section(m: TuningReport) -> str:
    bad = [t for t in m.trials if t.state in ("FAIL", "PRUNED")]
    rows = "".join(
        f'<tr><td class="num">{t.number}</td><td>'
        f'<span class="badge{" red" if t.state == "FAIL" else ""}">'
        f"{'failed' if t.state == 'FAIL' else 'pruned'}</span></td>"
        f"<td>{_why_cell(t)}</td>"
        f"<td><code>{_e(_params_text(t))}</code></td></tr>"
        for t in bad
    )
    if bad:
        table = (
            '<table><thead><tr><th class="num">trial</th><th>state</th><th>reason</th>'
            f"<th>config</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    else:
        table = '<p class="sub">None: every trial completed.</p>'
    every = "".join(
        f'<tr><td class="num">{t.number}</td><td>{_e(t.state.lower() + _role(t))}</td>'
        f'<td class="num">{_h(fmt_rate(t.examples_per_s), unknown=t.examples_per_s is None)}</td>'
        f'<td class="num">{_h(fmt_pct(t.utilization), unknown=t.utilization is None)}</td>'
        f"<td><code>{_e(_params_text(t))}</code></td></tr>"
        for t in m.trials
    )
    more = (
        f" (first {len(m.trials):,} of {m.trials_total:,})"
        if len(m.trials) < m.trials_total
        else ""
    )
    all_table = (
        f"<details><summary>All trials{_e(more)}</summary><table><thead><tr>"
        '<th class="num">trial</th><th>state</th><th class="num">examples/s</th>'
        f'<th class="num">utilization</th><th>config</th></tr></thead><tbody>{every}</tbody>'
        "</table></details>"
        if m.trials
        else ""
    )
    return f'<section id="failures"><h2>Failed and pruned trials</h2>{table}{all_table}</section>'


def _tuning_run_section(m: TuningReport) -> str:
    def row(key: str, value: str | None) -> str:
        return f"<dt>{_e(key)}</dt><dd>{_nm() if value is None else _e(value)}</dd>"

    items = [
        row("script", m.script),
        row("objective", m.objective),
        row("utilization from", m.utilization_kind),
        row("device", m.device),
        row(
            "pipeline alone",
            fmt_rate(m.ceiling_pipeline) if m.ceiling_pipeline is not None else None,
        ),
        row("model alone", fmt_rate(m.ceiling_model) if m.ceiling_model is not None else None),
        row("tuning wall time", f"{m.wall_s:,.0f} s" if m.wall_s is not None else None),
        *(row(k, v) for k, v in m.study),
    ]
    notes = ""
    if m.notes:
        notes = (
            '<h3>Notes</h3><ul class="notes">'
            + "".join(f"<li>{_e(n)}</li>" for n in m.notes)
            + "</ul>"
        )
    return f'<section id="run"><h2>Run</h2><dl class="meta">{"".join(items)}</dl>{notes}</section>'
