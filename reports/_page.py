"""The page shell every HTML report shares: one self-contained file, no network.

The one inline script powers the copy buttons, and a Content-Security-Policy pins it by
hash and forbids every network request. The report's data is embedded as
`<script type="application/json" id="tftune-data">`. Here too: escaping, the figure
formats ("not measured" is never 0), category colours and labels (`core.vocabulary`), and
the small parts both pages use (stat boxes, legends, copyable code boxes).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from html import escape

from tftune.core.vocabulary import CATEGORY_COLORS, NOT_MEASURED, category_label, percent

# Colours of categories the vocabulary does not know, picked by a hash of the name.
_SPARE = ("#6d28d9", "#0369a1", "#4d7c0f", "#9f1239", "#57534e")

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
header.top h1 { font-size:12px; font-weight:normal; margin:0; }
header.top b { color:var(--ink); font-size:14px; letter-spacing:.02em; }
caption.sr { position:absolute; width:1px; height:1px; overflow:hidden;
  clip:rect(0 0 0 0); white-space:nowrap; }
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


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def nm() -> str:
    return f'<span class="nm">{NOT_MEASURED}</span>'


def fmt_ms(v: float | None) -> str:
    if v is None:
        return NOT_MEASURED
    if v >= 100:
        return f"{v:,.0f} ms"
    return f"{v:.1f} ms" if v >= 1 else f"{v:.2f} ms"


def fmt_pct(v: float | None) -> str:
    return NOT_MEASURED if v is None else percent(v)


def fmt_rate(v: float | None) -> str:
    if v is None:
        return NOT_MEASURED
    return f"{v:,.0f} ex/s" if v >= 100 else f"{v:,.1f} ex/s"


def fmt_x(v: float | None) -> str:
    if v is None:
        return NOT_MEASURED
    return f"{v:.1f}×" if v < 100 else f"{v:,.0f}×"


def num_cell(text: str, value: object) -> str:
    return nm() if value is None else esc(text)


def or_nm(text: str, *, unknown: bool) -> str:
    """Escaped text, or the muted "not measured" marker."""
    return nm() if unknown else esc(text)


def color_of(cat: str) -> str:
    if cat in CATEGORY_COLORS:
        return CATEGORY_COLORS[cat]
    digest = hashlib.sha256(cat.encode()).digest()[0]
    return _SPARE[digest % len(_SPARE)]


def label_of(cat: str) -> str:
    return category_label(cat)


def _embed_json(data_json: str) -> str:
    # Inside <script>, only "</" can end the element early; escape every "<", ">" and "&".
    safe = data_json.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="tftune-data">{safe}</script>'


class ElementIds:
    """Deterministic element ids for copy targets."""

    def __init__(self) -> None:
        self.n = 0

    def next(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"


def codebox(code: str, ids: ElementIds, *, diff: bool = False) -> str:
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
            lines.append(f'<span class="{cls}">{esc(line)}</span>' if cls else esc(line))
        body = "\n".join(lines)
    else:
        body = esc(code)
    return (
        f'<div class="codebox{" diff" if diff else ""}"><pre><code id="{target}">{body}'
        f'</code></pre><button type="button" data-copy="{target}" '
        f'title="Copy to the clipboard">Copy</button></div>'
    )


def stat(key: str, value: str, small: str = "") -> str:
    extra = f" <small>{small}</small>" if small else ""
    return (
        f'<div class="stat"><div class="k">{esc(key)}</div>'
        f'<div class="v">{value}{extra}</div></div>'
    )


def legend(items: Iterable[tuple[str, str]]) -> str:
    spans = "".join(
        f'<span><span class="sw" style="background:{color}"></span>{text}</span>'
        for color, text in items
    )
    return f'<div class="legend">{spans}</div>'


def page(title: str, body: str, data_json: str, generated_at: str, source: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(_CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="generator" content="tftune">'
        '<link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body><main>"
        f'<header class="top"><h1><b>tftune</b> · {esc(title)}</h1>'
        f"<span>{esc(source)} · generated {esc(generated_at)}</span></header>"
        f"{body}"
        "<footer>Self-contained report: no network access. The data behind it is embedded "
        "as JSON (<code>#tftune-data</code>); re-render with <code>tftune report</code>."
        "</footer></main>"
        f"{_embed_json(data_json)}<script>{_SCRIPT}</script></body></html>\n"
    )


def meta_row(key: str, value: str | None) -> str:
    """One ``<dt>``/``<dd>`` pair of a run's facts; None is "not measured"."""
    return f"<dt>{esc(key)}</dt><dd>{nm() if value is None else esc(value)}</dd>"


def notes_list(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    return (
        '<h3>Notes</h3><ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"
    )


def timestamp_now() -> str:
    """The report timestamp: now in UTC, or $SOURCE_DATE_EPOCH for reproducible output."""
    import datetime as dt
    import os

    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    when = (
        dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc)
        if epoch.isdigit()
        else dt.datetime.now(dt.timezone.utc)
    )
    return when.strftime("%Y-%m-%d %H:%M UTC")
