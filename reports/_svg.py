"""Small, deterministic inline-SVG charts: no JavaScript, no library, no network.

Each function returns one `<svg>` element as a string. Coordinates are rounded so that the
same input always gives the same bytes. Every mark carries a `<title>` for hover text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from tftune.core.vocabulary import TrialState, percent

FONT = 'font-family="system-ui,-apple-system,Segoe UI,Roboto,sans-serif"'
AXIS = "#6b7280"
GRID = "#e5e7eb"
CHAR_PX = 6.6  # average glyph width at 11px, to decide whether a label fits
OUTLIER_FACTOR = 3.0  # a bar this many times the median is cut, not allowed to set the scale


def _f(x: float) -> str:
    """A coordinate: short and stable."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _e(text: str) -> str:
    return escape(text, quote=True)


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 up to at least `high`."""
    if high <= 0 or not math.isfinite(high):
        return [0.0, 1.0]
    raw = high / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(high / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def tick_label(v: float) -> str:
    if v >= 10000:
        return f"{v / 1000:,.0f}k"
    if v >= 100 or v == int(v):
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 1 else f"{v:.2g}"


def _svg_open(width: float, height: float, label: str, cls: str) -> str:
    return (
        f'<svg class="chart {cls}" role="img" '
        f'viewBox="0 0 {_f(width)} {_f(height)}" width="{_f(width)}" height="{_f(height)}" '
        f'aria-label="{_e(label)}" {FONT} font-size="11">'
    )


def _y_axis(
    ticks: list[float], y_of: Callable[[float], float], left: float, right: float, unit: str
) -> list[str]:
    out = []
    for t in ticks:
        y = y_of(t)
        out.append(
            f'<line x1="{_f(left)}" x2="{_f(right)}" y1="{_f(y)}" y2="{_f(y)}" stroke="{GRID}"/>'
        )
        out.append(
            f'<text x="{_f(left - 6)}" y="{_f(y + 4)}" text-anchor="end" fill="{AXIS}">'
            f"{tick_label(t)}{_e(unit) if t == ticks[-1] else ''}</text>"
        )
    return out


@dataclass(frozen=True, slots=True)
class Column:
    label: str  # shown under the axis (every few columns)
    parts: tuple[tuple[str, float | None], ...]  # (category, value); None: not measured
    title: str  # hover text


def _column_scale(totals: Sequence[float], reference: float) -> float:
    """The value the axis must reach: every column and the reference, unless a few
    outliers (beyond OUTLIER_FACTOR x the median) would flatten the others."""
    positive = sorted(t for t in totals if t > 0)
    median = positive[len(positive) // 2] if positive else 0.0
    high = max([*totals, reference, 1e-9])
    if median > 0 and high > OUTLIER_FACTOR * median:
        high = max(OUTLIER_FACTOR * median * 0.8, reference)
    return high


def _cut_mark(x: float, bar_w: float, top: float, caption: str) -> str:
    """The break on a column cut at the top of the axis, labelled with its real value."""
    yb = top + 8
    return (
        f'<path class="cut" d="M{_f(x - 2)},{_f(yb + 3)}L{_f(x + bar_w + 2)},{_f(yb - 3)}'
        f'M{_f(x - 2)},{_f(yb + 8)}L{_f(x + bar_w + 2)},{_f(yb + 2)}" stroke="#fff" '
        f'stroke-width="2.5"/><text x="{_f(x + bar_w / 2)}" y="{_f(top - 5)}" '
        f'text-anchor="middle" fill="#111827" font-weight="600">{_e(caption)}</text>'
    )


def stacked_columns(
    columns: Sequence[Column],
    colors: Callable[[str], str],
    *,
    unit: str,
    reference: tuple[float, str] | None = None,
    width: float = 1040,
    height: float = 260,
    label: str,
) -> str:
    """Stacked vertical bars, one per column, with an optional dashed reference line.

    A few outliers (a first step that traces and compiles, say) would flatten every other
    bar: bars beyond OUTLIER_FACTOR x the median are cut at the top of the axis, marked
    with a break and labelled with their real value.
    """
    left, right, top, bottom = 52.0, 12.0, 22.0, 26.0
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(v for _, v in c.parts if v is not None and v > 0) for c in columns]
    ticks = nice_ticks(_column_scale(totals, reference[0] if reference else 0.0))
    top_v = ticks[-1]

    def y_of(v: float) -> float:
        return top + plot_h * (1 - v / top_v)

    out = [_svg_open(width, height, label, "stacked")]
    out += _y_axis(ticks, y_of, left, width - right, f" {unit}")
    n = max(1, len(columns))
    slot = plot_w / n
    bar_w = max(1.0, slot * 0.72)
    every = max(1, math.ceil(n / max(1, plot_w // 34)))
    for i, col in enumerate(columns):
        x = left + i * slot + (slot - bar_w) / 2
        acc = 0.0
        out.append(f"<g><title>{_e(col.title)}</title>")
        for cat, v in col.parts:
            if v is None or v <= 0:
                continue
            if acc >= top_v:
                break
            y1, y0 = y_of(min(acc + v, top_v)), y_of(acc)
            out.append(
                f'<rect x="{_f(x)}" y="{_f(y1)}" width="{_f(bar_w)}" '
                f'height="{_f(max(0.5, y0 - y1))}" fill="{colors(cat)}" data-cat="{_e(cat)}"/>'
            )
            acc += v
        if totals[i] > top_v:
            out.append(_cut_mark(x, bar_w, top, f"{tick_label(totals[i])} {unit}"))
        out.append("</g>")
        if i % every == 0:
            out.append(
                f'<text x="{_f(x + bar_w / 2)}" y="{_f(height - bottom + 15)}" '
                f'text-anchor="middle" fill="{AXIS}">{_e(col.label)}</text>'
            )
    if reference is not None:
        y = y_of(reference[0])
        out.append(
            f'<line x1="{_f(left)}" x2="{_f(width - right)}" y1="{_f(y)}" y2="{_f(y)}" '
            f'stroke="#111827" stroke-dasharray="5 4" stroke-width="1.2"/>'
            f'<text x="{_f(width - right - 4)}" y="{_f(y - 5)}" text-anchor="end" '
            f'fill="#111827" font-weight="600">{_e(reference[1])}</text>'
        )
    out.append(
        f'<line x1="{_f(left)}" x2="{_f(width - right)}" y1="{_f(y_of(0))}" '
        f'y2="{_f(y_of(0))}" stroke="{AXIS}"/>'
    )
    out.append("</svg>")
    return "".join(out)


def share_bar(
    parts: Sequence[tuple[str, float, str]],
    colors: Callable[[str], str],
    *,
    width: float = 1040,
    height: float = 44,
    label: str,
) -> str:
    """One horizontal 100% bar: (category, fraction, caption) segments, captions inside."""
    out = [_svg_open(width, height, label, "sharebar")]
    total = sum(f for _, f, _ in parts if f > 0) or 1.0
    scale = width / max(1.0, total)
    x = 0.0
    for cat, frac, caption in parts:
        if frac <= 0:
            continue
        w = frac * scale
        out.append(
            f'<g><title>{_e(caption)}</title><rect x="{_f(x)}" y="0" width="{_f(w)}" '
            f'height="{_f(height)}" fill="{colors(cat)}" data-cat="{_e(cat)}"/>'
        )
        short = percent(frac, compact=True)
        text = caption if len(caption) * CHAR_PX * 1.15 < w - 10 else short
        if len(text) * CHAR_PX * 1.15 < w - 6:
            out.append(
                f'<text x="{_f(x + 8)}" y="{_f(height / 2 + 5)}" fill="#fff" '
                f'font-size="13" font-weight="600">{_e(text)}</text>'
            )
        out.append("</g>")
        x += w
    out.append("</svg>")
    return "".join(out)


def hbars(
    items: Sequence[tuple[str, float, str]],
    *,
    color: str,
    width: float = 1040,
    label: str,
    highlight_first: bool = False,
) -> str:
    """Horizontal bars: (label, value, value caption), largest scale = widest value."""
    row_h, label_w, gap = 26.0, 300.0, 6.0
    height = max(row_h, len(items) * row_h) + 4
    high = max([v for _, v, _ in items] + [1e-9])
    plot_w = width - label_w - 90
    out = [_svg_open(width, height, label, "hbars")]
    for i, (name, value, caption) in enumerate(items):
        y = 2 + i * row_h
        w = max(1.0, plot_w * value / high) if value > 0 else 0.0
        fill = "#c2410c" if highlight_first and i == 0 else color
        shown = name if len(name) * CHAR_PX <= label_w - 12 else "…" + name[-int(label_w / 7) :]
        out.append(
            f"<g><title>{_e(name)}: {_e(caption)}</title>"
            f'<text x="{_f(label_w - 10)}" y="{_f(y + row_h / 2 + 3)}" text-anchor="end" '
            f'fill="#111827">{_e(shown)}</text>'
            f'<rect x="{_f(label_w)}" y="{_f(y + gap / 2)}" width="{_f(w)}" '
            f'height="{_f(row_h - gap)}" rx="2" fill="{fill}"/>'
            f'<text x="{_f(label_w + w + 6)}" y="{_f(y + row_h / 2 + 3)}" fill="#374151">'
            f"{_e(caption)}</text></g>"
        )
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Point:
    x: float
    y: float | None  # None: no value (pruned or failed), drawn on the axis
    kind: TrialState
    title: str


def _reference_lines(
    references: Sequence[tuple[float, str, str]],
    y_of: Callable[[float], float],
    left: float,
    right: float,
    base: float,
) -> list[str]:
    """Dashed (value, label, colour) lines, labelled right of the plot."""
    out = []
    label_y = base + 12.0  # push labels of close reference lines apart, bottom up
    for value, name, color in sorted(references):
        y = y_of(value)
        label_y = min(y + 4, label_y - 13)
        out.append(
            f'<line x1="{_f(left)}" x2="{_f(right)}" y1="{_f(y)}" y2="{_f(y)}" '
            f'stroke="{color}" stroke-dasharray="5 4" stroke-width="1.2"/>'
            f'<text x="{_f(right + 6)}" y="{_f(label_y)}" fill="{color}">{_e(name)}</text>'
        )
    return out


def _best_so_far(
    points: Sequence[Point], x_of: Callable[[float], float], y_of: Callable[[float], float]
) -> tuple[float | None, list[str]]:
    """(the best value, the step line of the best so far) over the complete trials."""
    best: float | None = None
    path: list[str] = []
    for p in points:
        if p.kind is not TrialState.COMPLETE or p.y is None:
            continue
        if best is None:
            best = p.y
            path.append(f"M{_f(x_of(p.x))},{_f(y_of(best))}")
        elif p.y > best:
            path.append(f"H{_f(x_of(p.x))}")
            best = p.y
            path.append(f"V{_f(y_of(best))}")
    return best, path


def _trial_mark(p: Point, cx: float, y_of: Callable[[float], float], base: float) -> str:
    """A complete trial's dot at its value; a pruned or failed one's cross on the axis."""
    if p.kind is TrialState.COMPLETE and p.y is not None:
        return (
            f'<circle cx="{_f(cx)}" cy="{_f(y_of(p.y))}" r="4.5" fill="#2563eb" '
            f'fill-opacity="0.85"><title>{_e(p.title)}</title></circle>'
        )
    color = "#dc2626" if p.kind is TrialState.FAILED else "#9ca3af"
    y = base - 7
    return (
        f'<g><title>{_e(p.title)}</title><path d="M{_f(cx - 4)},{_f(y - 4)}'
        f"L{_f(cx + 4)},{_f(y + 4)}M{_f(cx - 4)},{_f(y + 4)}L{_f(cx + 4)},{_f(y - 4)}"
        f'" stroke="{color}" stroke-width="2"/></g>'
    )


def history(
    points: Sequence[Point],
    *,
    references: Sequence[tuple[float, str, str]] = (),
    unit: str,
    width: float = 1040,
    height: float = 300,
    label: str,
) -> str:
    """Trial objective per trial (dots), the best-so-far step line and dashed references."""
    left, right, top, bottom = 60.0, 150.0, 16.0, 34.0
    plot_w, plot_h = width - left - right, height - top - bottom
    ys = [p.y for p in points if p.y is not None] + [r[0] for r in references]
    ticks = nice_ticks(max([*ys, 1e-9]))
    top_v = ticks[-1]
    xs = [p.x for p in points] or [0.0]
    x_lo, x_hi = min(xs), max(xs)
    span = max(1.0, x_hi - x_lo)

    def x_of(v: float) -> float:
        return left + 8 + (plot_w - 16) * (v - x_lo) / span

    def y_of(v: float) -> float:
        return top + plot_h * (1 - v / top_v)

    out = [_svg_open(width, height, label, "history")]
    out += _y_axis(ticks, y_of, left, width - right, "")
    out.append(
        f'<text x="{_f(left - 48)}" y="{_f(top + plot_h / 2)}" fill="{AXIS}" '
        f'transform="rotate(-90 {_f(left - 48)} {_f(top + plot_h / 2)})" '
        f'text-anchor="middle">{_e(unit)}</text>'
    )
    base = y_of(0)
    out.append(
        f'<line x1="{_f(left)}" x2="{_f(width - right)}" y1="{_f(base)}" y2="{_f(base)}" '
        f'stroke="{AXIS}"/>'
    )
    every = max(1, math.ceil(len(points) / 25))
    for i, p in enumerate(points):
        if i % every == 0 or i == len(points) - 1:
            out.append(
                f'<text x="{_f(x_of(p.x))}" y="{_f(base + 15)}" text-anchor="middle" '
                f'fill="{AXIS}">{tick_label(p.x)}</text>'
            )
    out.append(
        f'<text x="{_f(left + plot_w / 2)}" y="{_f(height - 3)}" text-anchor="middle" '
        f'fill="{AXIS}">trial</text>'
    )
    out += _reference_lines(references, y_of, left, width - right, base)
    best, path = _best_so_far(points, x_of, y_of)
    if path:
        path.append(f"H{_f(x_of(x_hi))}")
        out.append(
            f'<path class="best" d="{"".join(path)}" fill="none" stroke="#c2410c" '
            f'stroke-width="2.2"/>'
        )
    out += [_trial_mark(p, x_of(p.x), y_of, base) for p in points]
    if best is not None:
        out.append(
            f'<text x="{_f(width - right + 6)}" y="{_f(y_of(best) + 4)}" fill="#c2410c" '
            f'font-weight="600">best {tick_label(best)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


MAX_NEST_LEVELS = 4


def _levels(
    events: Sequence[tuple[float, float, str, str]],
) -> list[tuple[int, tuple[float, float, str, str]]]:
    """Stack nested events (a parent and the calls inside it) on rows below each other."""
    ordered = sorted(events, key=lambda e: (e[0], -e[1], e[2]))
    open_ends: list[float] = []
    out = []
    for ev in ordered:
        while open_ends and open_ends[-1] <= ev[0] + 1e-9:
            open_ends.pop()
        level = min(len(open_ends), MAX_NEST_LEVELS - 1)
        out.append((level, ev))
        if len(open_ends) < MAX_NEST_LEVELS:
            open_ends.append(ev[0] + ev[1])
    return out


@dataclass(frozen=True, slots=True)
class Lane:
    name: str
    kind: str
    events: tuple[tuple[float, float, str, str], ...]  # (start_ms, duration_ms, name, color)
    note: str  # e.g. "120 short events not shown"


def timeline(
    lanes: Sequence[Lane],
    *,
    start_ms: float,
    end_ms: float,
    markers: Sequence[tuple[float, str]] = (),
    width: float = 1040,
    label: str,
) -> str:
    """Tracks as lanes of event boxes over [start_ms, end_ms], with step markers."""
    label_w, row_h, top = 250.0, 17.0, 30.0
    placed = [_levels(lane.events) for lane in lanes]
    heights = [row_h * max(1, max((lv for lv, _ in p), default=0) + 1) + 8 for p in placed]
    height = top + sum(heights) + 20
    plot_w = width - label_w - 10
    span = max(1e-6, end_ms - start_ms)

    def x_of(t: float) -> float:
        return label_w + plot_w * (t - start_ms) / span

    out = [_svg_open(width, height, label, "timeline")]
    for t in nice_ticks(span, 8):
        if t > span + 1e-9:
            continue
        x = x_of(start_ms + t)
        out.append(
            f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{_f(top - 6)}" y2="{_f(height - 14)}" '
            f'stroke="{GRID}"/><text x="{_f(x)}" y="{_f(top - 10)}" text-anchor="middle" '
            f'fill="{AXIS}">{tick_label(t)} ms</text>'
        )
    y = top
    for i, (lane, events, lane_h) in enumerate(zip(lanes, placed, heights, strict=True)):
        if i % 2 == 0:
            out.append(
                f'<rect x="0" y="{_f(y)}" width="{_f(width)}" height="{_f(lane_h)}" '
                f'fill="#f9fafb"/>'
            )
        name = lane.name if len(lane.name) * CHAR_PX <= label_w - 16 else "…" + lane.name[-34:]
        out.append(
            f'<text x="{_f(label_w - 8)}" y="{_f(y + row_h / 2 + 8)}" text-anchor="end" '
            f'fill="#111827"><title>{_e(lane.name)} ({_e(lane.kind)})'
            f"{(' · ' + _e(lane.note)) if lane.note else ''}</title>{_e(name)}</text>"
        )
        for level, (start, dur, ev_name, color) in events:
            x0 = max(label_w, x_of(start))
            x1 = min(width - 10, x_of(start + dur))
            if x1 < label_w or x0 > width - 10:
                continue
            w = max(0.8, x1 - x0)
            ey = y + 4 + level * row_h
            out.append(
                f"<g><title>{_e(ev_name)}: {dur:.3g} ms at {start - start_ms:.3g} ms</title>"
                f'<rect x="{_f(x0)}" y="{_f(ey)}" width="{_f(w)}" height="{_f(row_h - 2)}" '
                f'rx="1.5" fill="{color}"/>'
            )
            if len(ev_name) * CHAR_PX * 0.92 + 8 < w:
                out.append(
                    f'<text x="{_f(x0 + 4)}" y="{_f(ey + row_h / 2 + 3)}" fill="#fff" '
                    f'font-size="10.5">{_e(ev_name)}</text>'
                )
            out.append("</g>")
        y += lane_h
    for t, text in markers:
        x = x_of(t)
        if label_w <= x <= width - 10:
            anchor = "end" if x > width - 60 else "start"
            out.append(
                f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{_f(top - 4)}" y2="{_f(height - 14)}" '
                f'stroke="#111827" stroke-dasharray="3 3"/>'
                f'<text x="{_f(x + (-3 if anchor == "end" else 3))}" y="{_f(height - 4)}" '
                f'fill="#111827" font-size="10" text-anchor="{anchor}">{_e(text)}</text>'
            )
    out.append("</svg>")
    return "".join(out)
