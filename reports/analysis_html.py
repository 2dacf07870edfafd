"""The analysis report as one self-contained HTML page.

`render_analysis_html(model)` only formats an `AnalysisReport` (`reports.analysis_model`):
the verdict first, then what to fix in order, where step time goes (and XProf's own figures
beside tftune's when the analysis was cross-checked), the tf.data stages with what
AUTOTUNE chose, a timeline of representative steps and the run's facts. Charts are inline
SVG built in Python (`reports._svg`); the shell is `reports._page`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from tftune.core.analysis_advice import Bottleneck
from tftune.core.analysis_steps import StepRow, StepTable
from tftune.core.analysis_trace import StageRow, Timeline
from tftune.core.vocabulary import NOT_MEASURED, Band, is_host_to_device, stage_kind
from tftune.reports import _svg
from tftune.reports._page import (
    ElementIds,
    codebox,
    color_of,
    esc,
    fmt_ms,
    fmt_pct,
    label_of,
    legend,
    meta_row,
    nm,
    notes_list,
    num_cell,
    or_nm,
    page,
    stat,
)
from tftune.reports.analysis_model import AnalysisReport
from tftune.reports.words import (
    device_label,
    evidence_label,
    evidence_value,
    lane_label,
    op_label,
)

MAX_STEP_COLUMNS = 240  # beyond this the per-step chart shows evenly spaced steps
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


def render_analysis_html(model: AnalysisReport) -> str:
    """The analysis report as one self-contained HTML page (`build_analysis_model` makes
    its model from the document)."""
    ids = ElementIds()
    body = [
        _verdict_section(model),
        _stall_section(model, ids),
        _bottleneck_section(model, ids),
        _moves_section(model, ids),
        _steps_section(model),
        _xprof_section(model),
        _stages_section(model),
        _timeline_section(model),
        _run_section(model),
    ]
    if model.service_sizing:  # when one host is not enough (probes/advice/service_sizing.py)
        body.append(
            '<section id="service-sizing"><h2>When one host is not enough</h2>'
            f"<p>{esc(model.service_sizing)}</p></section>"
        )
    return page(
        "input pipeline analysis", "".join(body), model.data_json, model.generated_at, model.source
    )


def _verdict_section(m: AnalysisReport) -> str:
    level = m.verdict.level
    stats = [
        stat(
            "Waiting for input",
            or_nm(fmt_pct(m.input_share), unknown=m.input_share is None),
            "of step time",
        ),
        stat(
            "Mean step",
            or_nm(fmt_ms(m.steps.mean_ms), unknown=m.steps.mean_ms is None),
            f"p50 {esc(fmt_ms(m.steps.p50_ms))} · p90 {esc(fmt_ms(m.steps.p90_ms))}",
        ),
        stat("Steps", f"{m.steps.count:,}", esc(m.run.step_detection or NOT_MEASURED)),
        stat("Device", or_nm(device_label(m.run.device) or "", unknown=m.run.device is None)),
    ]
    if m.bottlenecks:
        top = m.bottlenecks[0]
        where = top.call_site or (stage_kind(top.stage) if top.stage else "")
        stats.append(
            stat(
                "Top bottleneck",
                esc(label_of(top.category)),
                f"{esc(fmt_pct(top.share))}{(' · ' + esc(where)) if where else ''}",
            )
        )
    return (
        f'<section class="verdict {esc(level.value if level else "unmeasured")}" id="verdict">'
        f'<span class="level">{esc(_title(level))}</span>'
        f'<div class="sentence">{esc(m.verdict.sentence)}</div>'
        f'<div class="stats">{"".join(stats)}</div></section>'
    )


def _stall_section(m: AnalysisReport, ids: ElementIds) -> str:
    """An epoch-start stall the step clock named: profiled steps never show it."""
    if m.epoch_stall is None:
        return ""
    sentence = m.epoch_stall[:1].upper() + m.epoch_stall[1:]
    code = codebox(m.epoch_stall_code, ids) if m.epoch_stall_code else ""
    return (
        '<section id="epoch-stall"><h2>Epoch start</h2>'
        f'<div class="warn">{esc(sentence)} (the step clock of the profiled run)</div>'
        f"{code}</section>"
    )


def _title(level: Band | None) -> str:
    """The verdict's badge: "Highly input-bound", as the bands call it."""
    if level is None:
        return "Input wait not measured"
    return level.words[:1].upper() + level.words[1:]


def _xprof_section(m: AnalysisReport) -> str:
    """XProf's own step time and input share beside tftune's, from the same trace."""
    x = m.xprof
    if x is None:
        return ""

    def row(who: str, step_ms: float | None, input_share: float | None) -> str:
        return (
            f"<tr><td>{esc(who)}</td>"
            f'<td class="num">{or_nm(fmt_ms(step_ms), unknown=step_ms is None)}</td>'
            f'<td class="num">{or_nm(fmt_pct(input_share), unknown=input_share is None)}</td>'
            "</tr>"
        )

    note = f'<p class="sub">{esc(x.note)}</p>' if x.note else ""
    return (
        '<section id="xprof"><h2>Cross-check with XProf</h2>'
        '<p class="sub">XProf\'s input-pipeline analyzer read the same trace: its step time '
        "and the share of it spent waiting for input, beside tftune's.</p>"
        '<table><caption class="sr">Step time and input wait, by tftune and by XProf</caption>'
        '<thead><tr><th>read by</th><th class="num">mean step</th>'
        '<th class="num">waiting for input</th></tr></thead><tbody>'
        f"{row('XProf', x.steptime_ms, x.input_share)}"
        f"{row('tftune', x.tftune_steptime_ms, x.tftune_input_share)}"
        f"</tbody></table>{note}</section>"
    )


def _bottleneck_section(m: AnalysisReport, ids: ElementIds) -> str:
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


def _moves_section(m: AnalysisReport, ids: ElementIds) -> str:
    """The next moves for the step, when the input pipeline is not the limit."""
    if not m.next_moves:
        return ""
    items = "".join(
        f'<li data-move="{esc(mv.kind)}"><p><b>{esc(mv.kind.replace("_", " "))}</b>: '
        f"{esc(mv.summary)}</p>{codebox(mv.code, ids) if mv.code else ''}</li>"
        for mv in m.next_moves
    )
    return (
        '<section id="next-moves"><h2>Next moves for the step</h2>'
        '<p class="sub">The input pipeline is not the limit: these would speed up the step '
        "itself, ranked by what the trace shows.</p>"
        f"<ol>{items}</ol></section>"
    )


def _bottleneck_card(b: Bottleneck, ids: ElementIds) -> str:
    where = []
    if b.call_site:
        where.append(f"at <code>{esc(b.call_site)}</code>")
    if b.stage:
        where.append(f'stage <code title="{esc(b.stage)}">{esc(stage_kind(b.stage))}</code>')
    if b.functions:
        where.append("runs " + ", ".join(f"<code>{esc(f)}</code>" for f in b.functions))
    if not where:
        where.append("not tied to one tf.data stage")
    fix = ""
    rec = b.recommendation
    if rec is not None:
        fix = f"<p><b>Fix:</b> {esc(rec.summary)}</p>" if rec.summary else ""
        if rec.code:
            fix += codebox(rec.code, ids)
        if rec.optimize:
            fix += f'<p class="sub">tftune optimize measures it: {esc(rec.optimize)}</p>'
    evidence = ""
    if b.evidence:
        rows = "".join(
            f'<dt title="{esc(k)}">{esc(evidence_label(k))}</dt>'
            f"<dd>{nm() if v is None else esc(evidence_value(k, v))}</dd>"
            for k, v in b.evidence.items()
        )
        opened = " open" if b.rank == 1 else ""
        evidence = (
            f"<details{opened}><summary>Evidence</summary>"
            f'<dl class="evidence">{rows}</dl></details>'
        )
    share = (
        f'{esc(fmt_pct(b.share))} <span class="where">of step time</span>'
        if b.share is not None
        else nm()
    )
    return (
        f'<div class="card{" first" if b.rank == 1 else ""}" data-category="{esc(b.category)}">'
        f'<div class="card-head"><span class="rank">#{b.rank}</span>'
        f'<span class="cat" style="background:{color_of(b.category)}">'
        f"{esc(label_of(b.category))}</span>"
        f'<span class="share">{share}</span></div>'
        f'<div class="where">{" · ".join(where)}</div>{fix}{evidence}</div>'
    )


def _step_starts(rows: Sequence[StepRow]) -> Iterable[tuple[int, float | None]]:
    """Each step's number and start, from a table's columns without a row per step."""
    if isinstance(rows, StepTable):
        return zip(rows.step, rows.start_ms, strict=True)
    return ((r.step, r.start_ms) for r in rows)


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
    swatches = legend(
        (color_of(cat), esc(label_of(cat)) + " " + (esc(fmt_pct(s)) if s is not None else nm()))
        for cat, s in m.breakdown
        if s != 0.0  # zero shares are noise; null ones say "not measured"
    )
    avg = (
        _svg.share_bar(parts, color_of, label="Average step time by category")
        if parts
        else f"<p>{nm()}</p>"
    )
    out = [
        '<section id="steps"><h2>Where step time goes</h2>',
        f'<p class="sub">On average over {m.steps.count:,} steps of '
        f"{esc(fmt_ms(mean))} ({esc(m.run.step_detection or NOT_MEASURED)} step detection).</p>",
        avg,
        swatches,
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
            f"(hover for values).{esc(note)}</p>"
        )
        out.append(
            _svg.stacked_columns(
                columns, color_of, unit="ms", reference=ref, label="Step time per step"
            )
        )
    out.append("</section>")
    return "".join(out)


_KNOBS = ("parallelism", "buffer_limit", "batch_size", "threadpool_size", "cpu_budget")


def _knobs_cell(s: StageRow) -> str:
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
        chips.append(f'<span class="badge amber">capped by {esc(s.capped_by)}</span>')
    nm = f'<div class="nm">{NOT_MEASURED}: {", ".join(missing)}</div>' if missing else ""
    return "".join(chips) + nm


def _stage_detail(s: StageRow, sites: Mapping[str, str]) -> str:
    """Under a stage's name: the user's call site where a finding named it, then its op
    in words (the op's own name and graph ids on hover)."""
    said = [f"<code>{esc(sites[s.name])}</code>"] if s.name in sites else []
    if s.op:
        said.append(esc(op_label(s.op)))
    return " · ".join(said)


def _stages_section(m: AnalysisReport) -> str:
    if not m.stages:
        return (
            '<section id="stages"><h2>tf.data pipeline</h2><p class="sub">'
            f"Stage tree {NOT_MEASURED}: the trace has no tf.data iterator events.</p></section>"
        )
    high = max([s.self_ms or 0.0 for s in m.stages] + [1e-9])
    sites = {b.stage: b.call_site for b in m.bottlenecks if b.stage and b.call_site}
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
            f'<tr class="{"hot" if s.bottleneck else ""}" data-stage="{esc(s.name)}">'
            f'<td><span class="tree" title="{esc(s.name)}">{indent}{esc(stage_kind(s.name))}</span>'
            f'{badges}<div class="op" title="{esc(s.op or "")}">{indent}'
            f"{_stage_detail(s, sites)}</div></td>"
            f'<td class="num">{bar}{or_nm(fmt_ms(s.self_ms), unknown=s.self_ms is None)}</td>'
            f'<td class="num">{num_cell(fmt_ms(s.self_per_call_ms), s.self_per_call_ms)}</td>'
            f'<td class="num">{num_cell(f"{s.calls or 0:,}", s.calls)}</td>'
            f"<td>{_knobs_cell(s)}</td></tr>"
        )
    more = ""
    if len(m.stages) < m.stages_total:
        more = f'<p class="sub">Showing the first {len(m.stages)} of {m.stages_total:,} stages.</p>'
    return (
        '<section id="stages"><h2>tf.data pipeline</h2>'
        '<p class="sub">The iterator tree as it ran (after TensorFlow\'s graph rewrites), with '
        "each stage's own time and the values AUTOTUNE chose.</p>"
        '<table><caption class="sr">The tf.data stages, their own time and tuned values</caption>'
        '<thead><tr><th>stage</th><th class="num">self time</th>'
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
    if is_host_to_device(name):
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
    seen: dict[str, int] = {}
    used: set[str] = set()
    for tr in sorted(t.tracks, key=lambda tr: kinds_order.get(tr.kind, 3)):
        events = []
        for ev in tr.events:
            cls = _event_class(ev.name, tr.kind, hot)
            used.add(cls)
            events.append((ev.start_ms, ev.duration_ms, ev.name, _EVENT_CLASSES[cls][0]))
        note = f"{tr.dropped:,} short events not shown" if tr.dropped else ""
        label = lane_label(tr.name)
        seen[label] = seen.get(label, 0) + 1  # one name a lane: "TensorFlow op thread 2"
        label += f" {seen[label]}" if seen[label] > 1 else ""
        lanes.append(_svg.Lane(label, tr.kind, tuple(events), note))
    markers = [
        (start, f"step {step}")
        for step, start in _step_starts(m.per_step)
        if start is not None and t.start_ms <= start <= t.end_ms
    ]
    chart = _svg.timeline(
        lanes,
        start_ms=t.start_ms,
        end_ms=t.end_ms,
        markers=markers,
        label="Timeline of representative steps",
    )
    swatches = legend(
        (color, esc(text)) for key, (color, text) in _EVENT_CLASSES.items() if key in used
    )
    dropped = sum(tr.dropped for tr in t.tracks)
    note = ""
    if dropped or m.timeline_dropped_tracks:
        note = (
            f'<p class="sub">Capped for size: {dropped:,} of the shortest events and '
            f"{m.timeline_dropped_tracks:,} tracks are not drawn.</p>"
        )
    span = t.end_ms - t.start_ms
    return (
        '<section id="timeline"><h2>Timeline of representative steps</h2>'
        f'<p class="sub">{esc(fmt_ms(span))} of the trace: host threads, tf.data threads and '
        "device streams (hover a box for its name and duration).</p>"
        f"{chart}{swatches}{note}</section>"
    )


# A trace does not say which TensorFlow took it; tftune's own profiles record it beside.
UNRECORDED_TF = "not in the trace (tftune profile and tftune.keras.Profile record it)"


def _run_section(m: AnalysisReport) -> str:
    r = m.run
    row = meta_row
    items = [
        row("TensorFlow", r.tf_version or UNRECORDED_TF),
        row("hosts", ", ".join(r.hosts) if r.hosts else None),
        row("devices", ", ".join(r.devices) if r.devices else None),
        row("device kind", device_label(r.device)),
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
    return (
        f'<section id="run"><h2>Run</h2><dl class="meta">{"".join(items)}</dl>'
        f"{notes_list(m.notes)}</section>"
    )
