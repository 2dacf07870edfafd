"""The tuning report as one self-contained HTML page.

`render_tuning_html(model)` only formats a `TuningReport` (`reports.tuning_model`): the
result first (tuned against the script as written, AUTOTUNE and the machine's ceiling), the
four-way comparison measured in the same run, the pipeline rewrites considered
(`reports.rewrite_rows`), the winning config with its diff, the
optimization history, parameter importances, what was searched, the failed and pruned
trials (with their crash) and the run's facts. Charts are inline SVG (`reports._svg`); the
shell is `reports._page`.
"""

from __future__ import annotations

from tftune.core.tuning_parts import Absent
from tftune.core.vocabulary import NOT_MEASURED, TrialState, knob_value_words, percent
from tftune.reports import _svg
from tftune.reports._page import (
    ElementIds,
    codebox,
    esc,
    fmt_pct,
    fmt_rate,
    fmt_x,
    legend,
    meta_row,
    nm,
    notes_list,
    num_cell,
    or_nm,
    page,
    stat,
)
from tftune.reports.learning_rows import learning_section
from tftune.reports.rewrite_rows import rewrites_section
from tftune.reports.tuning_model import Trial, TuningReport
from tftune.reports.words import device_label, utilization_label


def render_tuning_html(model: TuningReport) -> str:
    """The tuning report as one self-contained HTML page (`build_tuning_model` makes its
    model from the document)."""
    ids = ElementIds()
    body = [
        _tuning_hero(model),
        _instability_section(model),
        _comparison_section(model),
        rewrites_section(model.document),
        learning_section(model.document),
        _winner_section(model, ids),
        _history_section(model),
        _importance_section(model),
        _space_section(model),
        _failures_section(model),
        _tuning_run_section(model),
    ]
    return page("tuning report", "".join(body), model.data_json, model.generated_at, model.source)


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
    if ceiling and tuned is not None:  # a ceiling of 0 is no bound to compare with
        limit = "pipeline" if ceiling == m.ceiling_pipeline else "model"
        if tuned > ceiling and limit == "pipeline" and m.ceiling_model:
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
            (TrialState.COMPLETE.value, m.trials_complete),
            (TrialState.PRUNED.value, m.trials_pruned),
            (TrialState.FAILED.value, m.trials_failed),
        )
        if v is not None
    ]
    stats = [
        stat("Tuned", esc(fmt_rate(tuned)) if tuned is not None else nm()),
        stat("As written", esc(fmt_rate(base)) if base is not None else nm()),
        stat(
            ceiling_label,
            esc(fmt_rate(ceiling)) if ceiling is not None else nm(),
            esc(ceiling_text.split(" (")[0]) if ceiling_text else "",
        ),
        stat(
            "Trials",
            f"{sum(c or 0 for c in counts):,}" if trials else nm(),
            esc(" · ".join(trials)),
        ),
        stat("Tuning time", esc(f"{m.wall_s / 60:.1f} min") if m.wall_s is not None else nm()),
    ]
    return (
        '<section class="verdict tuned" id="verdict"><span class="level">tuning result</span>'
        f'<div class="sentence">{esc(sentence)}</div>'
        + (f'<p class="sub">{esc(ceiling_text)}.</p>' if ceiling_text else "")
        + _confirmed_line(m)
        + "".join(
            f'<p class="sub" id="{key}">{esc(text[:1].upper() + text[1:])}</p>'
            for key, text in (
                ("break-even", m.break_even),
                ("stop-reason", m.stop_reason),
                ("service-sizing", m.service_sizing),
                *((f"training-{i}", t) for i, t in enumerate(m.training)),
            )
            if text
        )
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
        f'<div class="warn crash">{esc(sentence)}.</div>'
        '<p class="sub">These runs count as failed trials, but no knob value is blamed for '
        f"them (crashed: trial{'s' if len(inst.trials) != 1 else ''} {esc(trials)}). Fix the "
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
        f"{esc(fmt_rate(c.examples_per_s))}{esc(spread)}.</p>"
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
            rows.append(f'<tr><td>{esc(r.label)}</td><td colspan="4">{nm()} in this run</td></tr>')
            continue
        rate = meas.examples_per_s
        bar = (
            f'<span class="bar" style="width:{max(1, round(160 * rate / high))}px;'
            f'background:{"#2563eb" if r.key == "tuned" else "#9ca3af"}"></span>'
            if rate
            else ""
        )
        spread = fmt_pct(meas.spread) if meas.spread is not None else None
        said = f' <span class="where">({esc(r.note)})</span>' if r.note else ""
        rows.append(
            f'<tr class="{"best" if r.key == "tuned" else ""}"><td>{esc(r.label)}{said}</td>'
            f'<td class="num">{bar}{or_nm(fmt_rate(rate), unknown=rate is None)}</td>'
            f'<td class="num">{num_cell(fmt_pct(meas.utilization), meas.utilization)}</td>'
            f'<td class="num">{or_nm(spread or "", unknown=spread is None)}</td>'
            f'<td class="num">{or_nm(fmt_x(r.speedup), unknown=r.speedup is None)}</td></tr>'
        )
    return (
        '<section id="comparison"><h2>As written, AUTOTUNE, tuned</h2>'
        '<p class="sub">Each measured in this run, on this machine. Spread is '
        "(max − min) / median over the repeats: speed-ups smaller than it are noise.</p>"
        '<table><caption class="sr">Each configuration measured, and its speed-up</caption>'
        f'<thead><tr><th>configuration</th><th class="num">examples/s</th>'
        f'<th class="num">{esc(utilization_label(m.utilization_kind))}</th>'
        '<th class="num">spread</th>'
        f'<th class="num">speed-up vs as written</th></tr></thead><tbody>{"".join(rows)}'
        "</tbody></table></section>"
    )


def _winner_section(m: TuningReport, ids: ElementIds) -> str:
    out = ['<section id="winner"><h2>The winning config</h2>']
    if _winner_changes_batch(m):  # the batch-size warning concerns this config
        out += [f'<div class="warn">{esc(w)}</div>' for w in m.warnings]
    saved = (
        f"Saved as <code>{esc(m.config_file)}</code>, keyed by call site. " if m.config_file else ""
    )
    what = f"{esc(m.best_description)}." if m.best_description else ""
    if saved or what:
        out.append(f'<p class="sub">{saved}{what}</p>')
    if m.config:
        rows = "".join(
            f"<tr><td><code>{esc(c.scope)}</code></td><td>{esc(c.knob)}</td>"
            f'<td class="num"><code>{esc(c.value)}</code></td></tr>'
            for c in m.config
        )
        out.append(
            '<table><caption class="sr">The winning value of each knob, by call site</caption>'
            '<thead><tr><th>call site</th><th>knob</th><th class="num">value</th></tr>'
            f"</thead><tbody>{rows}</tbody></table>"
        )
    else:
        out.append(f"<p>Config {nm()}.</p>")
    if m.command:
        out.append("<h3>Run it</h3>" + codebox(m.command, ids))
    if m.diff:
        out.append("<h3>The change to your code</h3>" + codebox(m.diff, ids, diff=True))
    if m.snippet:
        out.append("<h3>Or paste these lines</h3>" + codebox(m.snippet, ids))
    if m.stall_fix:
        out.append("<h3>The epoch-start stall's fix</h3>" + codebox(m.stall_fix, ids))
    out.append(
        "<details><summary>Config JSON</summary>" + codebox(m.config_json, ids) + "</details>"
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
            f"<tr><td><code>{esc(k.name)}</code></td>"
            f"<td>{esc(', '.join(knob_value_words(c) for c in k.choices))}</td>"
            f"<td>{esc(k.why or '')}</td></tr>"
            for k in m.knobs
        )
        out.append(
            '<table><caption class="sr">The knobs searched, their choices and why</caption>'
            "<thead><tr><th>knob</th><th>choices</th><th>why</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    if m.fixed:
        chips = "".join(
            f'<span class="chip">{esc(k)} <b>{esc(knob_value_words(v))}</b></span>'
            for k, v in m.fixed
        )
        out.append(f"<h3>Fixed</h3><p>{chips}</p>")
    if m.left_out:
        items = "".join(f"<li><code>{esc(k)}</code>: {esc(why)}</li>" for k, why in m.left_out)
        out.append(f'<h3>Left out</h3><ul class="notes">{items}</ul>')
    if not _winner_changes_batch(m):  # searched, but the winner keeps the batch size
        out += [f'<p class="sub">{esc(w)}</p>' for w in m.warnings]
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
        # An unfinished trial has no value yet: drawn on the axis, as a pruned one.
        kind = t.state if t.state is not None else TrialState.PRUNED
        value = t.value * scale if t.value is not None else None
        shown = (
            f"{value:.0f}%"
            if gpu and value is not None
            else fmt_rate(value)
            if value is not None
            else NOT_MEASURED
        )
        title = f"trial {t.number}{_role(t)} ({t.state_word}): {shown}"
        if t.number in m.pareto_trials:
            title += " · on the Pareto front"
        if t.reason:
            title += f" — {t.reason}"
        if t.crash and t.crash[0] not in (t.reason or ""):
            title += f"\n{t.crash[0]}"
        if t.params:
            title += "\n" + "\n".join(f"{k} = {knob_value_words(v)}" for k, v in t.params)
        points.append(
            _svg.Point(float(t.number), value if kind is TrialState.COMPLETE else None, kind, title)
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
            half = f"{m.ceiling_limited_by} alone" if m.ceiling_limited_by else "ceiling"
            refs.append((m.ceiling, f"{half} {_svg.tick_label(m.ceiling)}", "#15803d"))
    chart = _svg.history(points, references=refs, unit=unit, label="Optimization history")
    swatches = legend(
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
        f'<p class="sub">The objective ({esc(unit)}) of each trial, in order, and the best so far. '
        "Pruned and failed trials sit on the axis.</p>"
        f"{chart}{swatches}{both}</section>"
    )


def _importance_section(m: TuningReport) -> str:
    if not m.importances:
        withheld = m.document.importances_withheld
        why = "too few complete trials" if isinstance(withheld, Absent) else withheld
        return (
            '<section id="importances"><h2>Parameter importances</h2>'
            f'<p class="sub">Importances {NOT_MEASURED} ({esc(why)}).</p></section>'
        )
    total = sum(v for _, v in m.importances) or 1.0
    items = [(k, v, percent(v / total)) for k, v in m.importances]
    chart = _svg.hbars(items, color="#60a5fa", label="Parameter importances", highlight_first=True)
    return (
        '<section id="importances"><h2>Parameter importances</h2>'
        '<p class="sub">How much of the variation in the objective each knob explains '
        "(estimated by Optuna over the complete trials).</p>"
        f"{chart}</section>"
    )


def _params_text(t: Trial) -> str:
    if t.params:
        return ", ".join(f"{k} {knob_value_words(v)}" for k, v in t.params)
    return t.description or ""


def _role(t: Trial) -> str:
    return "" if t.role in (None, "search") else f" ({t.role.replace('_', ' ')})"


def _why_cell(t: Trial) -> str:
    """The reason, a failed trial's crash lines, and its stderr tail (folded)."""
    out = or_nm(t.reason or "", unknown=not t.reason)
    lines = [line for line in t.crash if line not in (t.reason or "")]
    if lines:
        out += f'<pre class="crash">{esc(chr(10).join(lines))}</pre>'
    if t.stderr_tail:
        count = len(t.stderr_tail.splitlines())
        out += (
            f"<details><summary>stderr, last {count} line{'s' if count != 1 else ''}</summary>"
            f'<pre class="tail">{esc(t.stderr_tail)}</pre></details>'
        )
    return out


def _failures_section(m: TuningReport) -> str:
    bad = [t for t in m.trials if t.state in (TrialState.FAILED, TrialState.PRUNED)]
    rows = "".join(
        f'<tr><td class="num">{t.number}</td><td>'
        f'<span class="badge{" red" if t.state is TrialState.FAILED else ""}">'
        f"{esc(t.state_word)}</span></td>"
        f"<td>{_why_cell(t)}</td>"
        f"<td><code>{esc(_params_text(t))}</code></td></tr>"
        for t in bad
    )
    if bad:
        table = (
            '<table><caption class="sr">Failed and pruned trials, and why</caption>'
            '<thead><tr><th class="num">trial</th><th>state</th><th>reason</th>'
            f"<th>config</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    else:
        table = '<p class="sub">None: every trial completed.</p>'
    every = "".join(
        f'<tr><td class="num">{t.number}</td><td>{esc(t.state_word + _role(t))}</td>'
        f'<td class="num">{num_cell(fmt_rate(t.examples_per_s), t.examples_per_s)}</td>'
        f'<td class="num">{num_cell(fmt_pct(t.utilization), t.utilization)}</td>'
        f"<td><code>{esc(_params_text(t))}</code></td></tr>"
        for t in m.trials
    )
    more = (
        f" (first {len(m.trials):,} of {m.trials_total:,})"
        if len(m.trials) < m.trials_total
        else ""
    )
    all_table = (
        f"<details><summary>All trials{esc(more)}</summary><table>"
        '<caption class="sr">Every trial, its state, rate and config</caption><thead><tr>'
        '<th class="num">trial</th><th>state</th><th class="num">examples/s</th>'
        f'<th class="num">utilization</th><th>config</th></tr></thead><tbody>{every}</tbody>'
        "</table></details>"
        if m.trials
        else ""
    )
    return f'<section id="failures"><h2>Failed and pruned trials</h2>{table}{all_table}</section>'


def _tuning_run_section(m: TuningReport) -> str:
    row = meta_row
    items = [
        row("script", m.script),
        row("objective", m.objective),
        row("utilization from", utilization_label(m.utilization_kind)),
        row("device", device_label(m.device)),
        row(
            "pipeline alone",
            fmt_rate(m.ceiling_pipeline) if m.ceiling_pipeline is not None else None,
        ),
        row("model alone", fmt_rate(m.ceiling_model) if m.ceiling_model is not None else None),
        row("tuning wall time", f"{m.wall_s:,.0f} s" if m.wall_s is not None else None),
        *(row(k, v) for k, v in m.study),
    ]
    return (
        f'<section id="run"><h2>Run</h2><dl class="meta">{"".join(items)}</dl>'
        f"{notes_list(m.notes)}</section>"
    )
