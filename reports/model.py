"""Report models: the analysis and tuning JSON, validated into frozen, typed data.

`build_analysis_model` and `build_tuning_model` are pure: the same JSON and timestamp give
an equal model. They are strict on the fields a report cannot do without and tolerant of
the optional ones; `null` stays `None` ("not measured") and is never turned into 0.
Anything malformed raises `UserError` with one line naming the file and the field.

Renderers (`reports.html`, `reports.terminal`) only format these models.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tftune.core.errors import UserError
from tftune.reports._read import Reader

SUPPORTED_SCHEMA = 1

# Defensive caps: the analysis caps its timeline upstream, but a report must stay small
# (well under 5 MB) and quick to open whatever JSON it is given.
MAX_TIMELINE_EVENTS = 6000
MAX_TIMELINE_TRACKS = 48
MAX_STEPS = 5000
MAX_STAGES = 400
MAX_BOTTLENECKS = 20
MAX_TRIALS = 2000
# A failed trial's crash lines and stderr tail (tftune stores 4 KB; a hand-made JSON may
# hold more).
MAX_CRASH_LINES = 8
MAX_CRASH_LINE_CHARS = 300
MAX_STDERR_TAIL_CHARS = 8192
MAX_STDERR_TAILS = 40  # failed trials whose stderr tail the report shows and embeds

# XProf's bands for the share of step time spent waiting for input.
HIGHLY_INPUT_BOUND_SHARE = 0.20
MODERATELY_INPUT_BOUND_SHARE = 0.05

# Step-time categories in the order a reader expects them: input first, then the device.
BREAKDOWN_ORDER = (
    "input_wait",
    "host_to_device",
    "device_compute",
    "host_compute",
    "kernel_launch",
    "compilation",
    "output",
    "other",
)
VERDICT_LEVELS = ("high", "moderate", "low")
TRACK_KINDS = ("host", "tf_data", "device")
TRIAL_STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")
BASELINE_KEYS = ("as_written", "autotune", "heuristic", "guided")
OPTIONAL_BASELINES = frozenset({"guided"})  # a row only when the run measured it

Scalar = str | int | float | bool | None
Kind = Literal["analysis", "tuning"]


# --------------------------------------------------------------------------- analysis


@dataclass(frozen=True, slots=True)
class Fix:
    summary: str
    code: str | None


@dataclass(frozen=True, slots=True)
class Bottleneck:
    rank: int
    category: str
    share: float | None
    stage: str | None
    call_site: str | None
    functions: tuple[str, ...]
    evidence: tuple[tuple[str, Scalar], ...]
    fix: Fix | None


@dataclass(frozen=True, slots=True)
class StepRow:
    step: int
    start_ms: float | None
    duration_ms: float | None
    parts: tuple[tuple[str, float | None], ...]  # (category, ms), BREAKDOWN_ORDER first


@dataclass(frozen=True, slots=True)
class Stage:
    id: str | None
    parent_id: str | None
    name: str
    op: str | None
    depth: int
    calls: int | None
    total_ms: float | None
    self_ms: float | None
    self_per_call_ms: float | None
    blocking: bool | None
    bottleneck: bool
    parallelism: int | None
    buffer_limit: int | None
    autotune: bool | None
    batch_size: int | None
    threadpool_size: int | None
    cpu_budget: int | None
    capped_by: str | None

    @property
    def short_name(self) -> str:
        return self.name.rsplit("::", 1)[-1]


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    start_ms: float
    duration_ms: float
    name: str


@dataclass(frozen=True, slots=True)
class Track:
    name: str
    kind: str
    events: tuple[TimelineEvent, ...]
    dropped: int  # events left out by the defensive cap (the shortest ones)


@dataclass(frozen=True, slots=True)
class Timeline:
    start_ms: float
    end_ms: float
    tracks: tuple[Track, ...]
    dropped_tracks: int


@dataclass(frozen=True, slots=True)
class RunInfo:
    run: str | None
    hosts: tuple[str, ...]
    device: str | None
    step_detection: str | None
    tf_version: str | None
    devices: tuple[str, ...]
    cores: int | None
    profile_duration_ms: float | None
    tool: str | None
    logdir: str | None
    files: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (path, reason)


@dataclass(frozen=True, slots=True)
class StepSummary:
    count: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None


@dataclass(frozen=True, slots=True)
class Verdict:
    level: str
    sentence: str


@dataclass(frozen=True, slots=True)
class AnalysisReport:
    source: str
    generated_at: str
    run: RunInfo
    steps: StepSummary
    input_bound: bool | None
    input_share: float | None
    verdict: Verdict
    breakdown: tuple[tuple[str, float | None], ...]
    per_step: tuple[StepRow, ...]
    per_step_total: int
    bottlenecks: tuple[Bottleneck, ...]
    stages: tuple[Stage, ...]
    stages_total: int
    timeline: Timeline | None
    notes: tuple[str, ...]
    data_json: str  # the (capped) input, embedded in the HTML for scripts


# ----------------------------------------------------------------------------- tuning


@dataclass(frozen=True, slots=True)
class Measurement:
    examples_per_s: float | None
    utilization: float | None
    spread: float | None


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    key: str  # as_written | autotune | heuristic | tuned
    label: str
    measurement: Measurement | None  # None: not measured in this run
    speedup: float | None  # examples/s relative to the script as written


@dataclass(frozen=True, slots=True)
class Trial:
    number: int
    state: str
    params: tuple[tuple[str, str], ...]
    examples_per_s: float | None
    utilization: float | None
    value: float | None  # the objective as the history plots it
    reason: str | None
    role: str | None = None  # as_written | autotune | heuristic | guided | search | confirm
    description: str | None = None
    crash: tuple[str, ...] = ()  # a failed trial's crash in a few lines (headline first)
    stderr_tail: str | None = None  # the end of a failed trial's stderr


@dataclass(frozen=True, slots=True)
class Instability:
    """The script crashes whatever the config (the tuning JSON's ``instability``)."""

    sentence: str
    trials: tuple[int, ...]  # the trials that crashed


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    choices: tuple[str, ...]
    why: str | None


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    scope: str  # a call site, or "global"
    knob: str
    value: str


@dataclass(frozen=True, slots=True)
class TuningReport:
    source: str
    generated_at: str
    script: str | None
    objective: str
    utilization_kind: str | None
    device: str | None
    trials_complete: int | None
    trials_pruned: int | None
    trials_failed: int | None
    wall_s: float | None
    ceiling_pipeline: float | None
    ceiling_model: float | None
    ceiling_value: float | None  # as measured; else the lower of the two bounds
    ceiling_limited_by: str | None
    rows: tuple[ComparisonRow, ...]
    confirmed: Measurement | None  # the winner re-measured after the search
    best_description: str | None
    config_file: str | None
    config: tuple[ConfigEntry, ...]
    config_json: str
    command: str | None
    diff: str | None
    snippet: str | None
    importances: tuple[tuple[str, float], ...]  # most important first
    trials: tuple[Trial, ...]
    trials_total: int
    pareto_trials: tuple[int, ...]
    knobs: tuple[Knob, ...]
    fixed: tuple[tuple[str, str], ...]
    left_out: tuple[tuple[str, str], ...]  # (knob, why it cannot matter)
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    study: tuple[tuple[str, str], ...]  # name, storage, seed, platform ...
    data_json: str
    instability: Instability | None = None

    @property
    def objective_label(self) -> str:
        return "GPU utilization" if self.objective == "gpu-util" else "examples/s"

    @property
    def ceiling(self) -> float | None:
        if self.ceiling_value is not None:
            return self.ceiling_value
        known = [c for c in (self.ceiling_pipeline, self.ceiling_model) if c is not None]
        return min(known) if known else None


# ---------------------------------------------------------------------------- helpers


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


def detect_kind(data: Mapping[str, Any], *, source: str = "report JSON") -> Kind:
    """Tell an analysis JSON from a tuning JSON by its content."""
    if not isinstance(data, Mapping):
        raise UserError(f"{source}: expected a JSON object at the top level")
    if "bottlenecks" in data or "breakdown" in data or "verdict" in data:
        return "analysis"
    if "baselines" in data or "best" in data or "trials_detail" in data:
        return "tuning"
    raise UserError(
        f"{source}: not a tftune analysis or tuning JSON "
        "(no 'bottlenecks'/'breakdown' nor 'baselines'/'best' field)"
    )


def _check_schema(r: Reader) -> None:
    schema = r.integer("schema", required=True, nullable=False)
    if schema != SUPPORTED_SCHEMA:
        raise r.error(
            "schema", f"is {schema}; this tftune reads schema {SUPPORTED_SCHEMA} (upgrade tftune)"
        )


def _share(r: Reader, key: str) -> float | None:
    value = r.number(key)
    if value is not None and not -1e-6 <= value <= 1.0 + 1e-6:
        raise r.error(key, f"must be a fraction between 0 and 1, got {value}")
    return value


def _scalar(value: Any) -> Scalar:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def _dump(data: Any) -> str:
    try:
        return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN somewhere in a free-form field: keep the report valid JSON
        return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).replace(
            "NaN", "null"
        )


def _ordered(keys: list[str]) -> list[str]:
    known = [k for k in BREAKDOWN_ORDER if k in keys]
    return known + sorted(k for k in keys if k not in BREAKDOWN_ORDER)


# --------------------------------------------------------------------------- builders


def build_analysis_model(
    data: Mapping[str, Any], *, generated_at: str, source: str = "analysis JSON"
) -> AnalysisReport:
    """Validate an analysis JSON (ARCHITECTURE.md, schema 1) into an `AnalysisReport`."""
    if not isinstance(data, Mapping):
        raise UserError(f"{source}: expected a JSON object at the top level")
    r = Reader(data, source=source)
    _check_schema(r)

    steps_r = r.required_obj("steps")
    steps = StepSummary(
        count=steps_r.integer("count", required=True, nullable=False) or 0,
        mean_ms=steps_r.number("mean_ms"),
        p50_ms=steps_r.number("p50_ms"),
        p90_ms=steps_r.number("p90_ms"),
    )
    if "input_bound" not in data:
        raise r.error("input_bound", "is missing")
    input_bound = r.boolean("input_bound")
    input_share = _share(r, "input_share")

    breakdown_r = r.required_obj("breakdown")
    breakdown = tuple((k, _share(breakdown_r, k)) for k in _ordered(breakdown_r.fields()))

    bottlenecks = tuple(
        _bottleneck(b, i + 1) for i, b in enumerate(r.objects("bottlenecks", required=True))
    )[:MAX_BOTTLENECKS]

    all_steps = r.objects("per_step")
    per_step = tuple(_step_row(s) for s in all_steps[:MAX_STEPS])

    all_stages = r.objects("stages")
    stages = tuple(_stage(s) for s in all_stages[:MAX_STAGES])

    timeline_r = r.obj("timeline")
    timeline = _timeline(timeline_r) if timeline_r is not None else None

    verdict_r = r.obj("verdict")
    if verdict_r is not None:
        level = verdict_r.required_string("level")
        if level not in VERDICT_LEVELS:
            raise verdict_r.error("level", f"must be one of {', '.join(VERDICT_LEVELS)}")
        verdict = Verdict(level=level, sentence=verdict_r.required_string("sentence"))
    else:
        verdict = _derived_verdict(input_bound, input_share)

    capped = dict(data)
    if all_steps:
        capped["per_step"] = list(data["per_step"])[:MAX_STEPS]
    if all_stages:
        capped["stages"] = list(data["stages"])[:MAX_STAGES]
    if timeline is not None:
        capped["timeline"] = {
            "start_ms": timeline.start_ms,
            "end_ms": timeline.end_ms,
            "tracks": [
                {
                    "name": t.name,
                    "kind": t.kind,
                    "events": [[e.start_ms, e.duration_ms, e.name] for e in t.events],
                }
                for t in timeline.tracks
            ],
        }

    return AnalysisReport(
        source=source,
        generated_at=generated_at,
        run=_run_info(r),
        steps=steps,
        input_bound=input_bound,
        input_share=input_share,
        verdict=verdict,
        breakdown=breakdown,
        per_step=per_step,
        per_step_total=len(all_steps),
        bottlenecks=bottlenecks,
        stages=stages,
        stages_total=len(all_stages),
        timeline=timeline,
        notes=r.strings("notes"),
        data_json=_dump(capped),
    )


def _derived_verdict(input_bound: bool | None, share: float | None) -> Verdict:
    """Older JSON without `verdict`: state what the numbers say, in XProf's bands."""
    if share is None:
        return Verdict("low", "Input wait was not measured: no training steps were found.")
    pct = f"{share * 100:.0f}%"
    if share >= HIGHLY_INPUT_BOUND_SHARE:
        return Verdict("high", f"Highly input-bound: {pct} of step time waits for input.")
    if share >= MODERATELY_INPUT_BOUND_SHARE or input_bound:
        return Verdict("moderate", f"Moderately input-bound: {pct} of step time waits for input.")
    return Verdict("low", f"Not input-bound: {pct} of step time waits for input.")


def _run_info(r: Reader) -> RunInfo:
    meta = r.obj("metadata")
    tool = r.obj("tool")
    src = r.obj("source")
    tool_text = None
    if tool is not None:
        tool_text = " ".join(x for x in (tool.string("name"), tool.string("version")) if x)
    files: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    if src is not None:
        files = tuple(f.string("path") or "?" for f in src.objects("files"))
        skipped = tuple(
            (s.string("path") or "?", s.string("reason") or "unknown reason")
            for s in src.objects("skipped")
        )
    return RunInfo(
        run=r.string("run"),
        hosts=r.strings("hosts"),
        device=r.string("device", required=True),
        step_detection=r.string("step_detection", required=True),
        tf_version=meta.string("tf_version") if meta else None,
        devices=meta.strings("devices") if meta else (),
        cores=meta.integer("cores") if meta else None,
        profile_duration_ms=meta.number("profile_duration_ms") if meta else None,
        tool=tool_text or None,
        logdir=src.string("logdir") if src else None,
        files=files,
        skipped=skipped,
    )


def _bottleneck(b: Reader, rank: int) -> Bottleneck:
    rec = b.obj("recommendation")
    fix = None
    if rec is not None:
        fix = Fix(summary=rec.string("summary") or "", code=rec.string("code") or None)
    evidence = b.obj("evidence")
    ev: tuple[tuple[str, Scalar], ...] = ()
    if evidence is not None:
        ev = tuple((k, _scalar(v)) for k, v in evidence.mapping().items())
    return Bottleneck(
        rank=rank,
        category=b.required_string("category"),
        share=_share(b, "share"),
        stage=b.string("stage"),
        call_site=b.string("call_site"),
        functions=b.strings("functions"),
        evidence=ev,
        fix=fix,
    )


def _step_row(s: Reader) -> StepRow:
    parts = []
    for key in s.fields():
        if key.endswith("_ms") and key not in ("start_ms", "duration_ms"):
            parts.append((key[: -len("_ms")], s.number(key)))
    order = _ordered([k for k, _ in parts])
    lookup = dict(parts)
    return StepRow(
        step=s.required_integer("step"),
        start_ms=s.number("start_ms"),
        duration_ms=s.number("duration_ms"),
        parts=tuple((k, lookup[k]) for k in order),
    )


def _stage(s: Reader) -> Stage:
    return Stage(
        id=s.string("id"),
        parent_id=s.string("parent_id"),
        name=s.required_string("name"),
        op=s.string("op"),
        depth=s.integer("depth") or 0,
        calls=s.integer("calls"),
        total_ms=s.number("total_ms"),
        self_ms=s.number("self_ms"),
        self_per_call_ms=s.number("self_per_call_ms"),
        blocking=s.boolean("blocking"),
        bottleneck=bool(s.boolean("bottleneck")),
        parallelism=s.integer("parallelism"),
        buffer_limit=s.integer("buffer_limit"),
        autotune=s.boolean("autotune"),
        batch_size=s.integer("batch_size"),
        threadpool_size=s.integer("threadpool_size"),
        cpu_budget=s.integer("cpu_budget"),
        capped_by=s.string("capped_by"),
    )


def _timeline(t: Reader) -> Timeline:
    start = t.required_number("start_ms")
    end = t.required_number("end_ms")
    if end < start:
        raise t.error("end_ms", f"must not be before start_ms ({end} < {start})")
    readers = t.objects("tracks")
    per_track_cap = max(100, MAX_TIMELINE_EVENTS // max(1, min(len(readers), MAX_TIMELINE_TRACKS)))
    tracks = []
    for tr in readers[:MAX_TIMELINE_TRACKS]:
        events = []
        for i, ev in enumerate(tr.items("events")):
            if (
                not isinstance(ev, (list, tuple))
                or len(ev) < 2
                or any(
                    isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)
                    for x in ev[:2]
                )
            ):
                raise tr.error(f"events[{i}]", "must be [start_ms, duration_ms, name]")
            name = str(ev[2]) if len(ev) > 2 and ev[2] is not None else ""
            events.append(TimelineEvent(float(ev[0]), max(0.0, float(ev[1])), name))
        dropped = max(0, len(events) - per_track_cap)
        if dropped:
            # Keep the longest events: they are the ones a reader can see at this scale.
            keep = sorted(events, key=lambda e: (-e.duration_ms, e.start_ms))[:per_track_cap]
            events = keep
        events.sort(key=lambda e: (e.start_ms, -e.duration_ms, e.name))
        kind = tr.string("kind") or "host"
        tracks.append(
            Track(
                name=tr.required_string("name"),
                kind=kind if kind in TRACK_KINDS else "host",
                events=tuple(events),
                dropped=dropped,
            )
        )
    return Timeline(
        start_ms=start,
        end_ms=end,
        tracks=tuple(tracks),
        dropped_tracks=max(0, len(readers) - MAX_TIMELINE_TRACKS),
    )


_ROW_LABELS = {
    "as_written": "As written",
    "autotune": "AUTOTUNE everywhere",
    "heuristic": "#cores heuristic",
    "guided": "Analysis-guided guess",
    "tuned": "Tuned (tftune)",
}


def _measurement(r: Reader) -> Measurement:
    return Measurement(
        examples_per_s=r.number("examples_per_s"),
        utilization=_share(r, "utilization"),
        spread=r.number("spread"),
    )


def build_tuning_model(
    data: Mapping[str, Any], *, generated_at: str, source: str = "tuning JSON"
) -> TuningReport:
    """Validate a tuning JSON (ARCHITECTURE.md, schema 1) into a `TuningReport`."""
    if not isinstance(data, Mapping):
        raise UserError(f"{source}: expected a JSON object at the top level")
    r = Reader(data, source=source)
    _check_schema(r)
    objective = r.required_string("objective")
    if objective not in ("throughput", "gpu-util", "both"):
        raise r.error("objective", "must be one of throughput, gpu-util, both")

    baselines = r.required_obj("baselines")
    best = r.required_obj("best")
    measured: dict[str, Measurement | None] = {}
    # The winner's search figure is the best of many noisy trials, so it is biased
    # upwards; the final round re-measures it beside the baselines, and those side-by-side
    # figures are the honest ones, as in the terminal.
    for key in BASELINE_KEYS:
        sub = baselines.obj(key)
        again = sub.obj("confirmed") if sub is not None else None
        measured[key] = _measurement(again or sub) if sub is not None else None
    confirmed_r = best.obj("confirmed")
    measured["tuned"] = _measurement(confirmed_r if confirmed_r is not None else best)
    base = measured["as_written"]
    base_rate = base.examples_per_s if base is not None else None
    rows = []
    for key in (*BASELINE_KEYS, "tuned"):
        m = measured[key]
        if m is None and key in OPTIONAL_BASELINES:
            continue
        rate = m.examples_per_s if m is not None else None
        speedup = rate / base_rate if rate is not None and base_rate else None
        rows.append(ComparisonRow(key, _ROW_LABELS[key], m, speedup))

    config_raw = best.raw("config")
    if config_raw is not None and not isinstance(config_raw, Mapping):
        raise best.error("config", "must be an object keyed by call site")
    config = _config_entries(config_raw or {})

    trials_r = r.obj("trials")
    ceiling = r.obj("ceiling")
    space = r.obj("space")
    knobs: list[Knob] = []
    fixed: list[tuple[str, str]] = []
    left_out: list[tuple[str, str]] = []
    warnings: tuple[str, ...] = ()
    if space is not None:
        for k in space.objects("knobs"):
            choices = tuple(_text(c) for c in k.items("choices"))
            knobs.append(Knob(k.required_string("name"), choices, k.string("why")))
        fixed_r = space.obj("fixed")
        if fixed_r is not None:
            fixed = [(k, _text(v)) for k, v in sorted(fixed_r.mapping().items())]
        for lo in space.objects("left_out"):
            left_out.append((lo.required_string("name"), lo.string("reason") or ""))
        warnings = space.strings("warnings")
    pareto = tuple(t for t in (p.integer("trial") for p in r.objects("pareto")) if t is not None)
    study: list[tuple[str, str]] = []
    for key in ("study", "platform"):
        sub = r.obj(key)
        if sub is not None:
            study += [(k, _text(v)) for k, v in sub.mapping().items() if v is not None]

    importances: list[tuple[str, float]] = []
    imp = r.obj("importances")
    if imp is not None:
        for name in imp.fields():
            value = imp.number(name, required=True, nullable=False)
            assert value is not None
            importances.append((name, value))
    importances.sort(key=lambda kv: (-kv[1], kv[0]))

    all_trials = r.objects("trials_detail")
    detail = _cap_stderr_tails(list(data.get("trials_detail") or [])[:MAX_TRIALS])
    shown = Reader({"trials_detail": detail}, source=source).objects("trials_detail")
    trials = tuple(_trial(t, objective) for t in shown)

    capped = dict(data)
    if all_trials:
        capped["trials_detail"] = detail

    return TuningReport(
        source=source,
        generated_at=generated_at,
        script=r.string("script"),
        objective=objective,
        utilization_kind=r.string("utilization_kind"),
        device=r.string("device"),
        trials_complete=trials_r.integer("complete") if trials_r else None,
        trials_pruned=trials_r.integer("pruned") if trials_r else None,
        trials_failed=trials_r.integer("failed") if trials_r else None,
        wall_s=r.number("wall_s"),
        ceiling_pipeline=ceiling.number("pipeline_only_examples_per_s") if ceiling else None,
        ceiling_model=ceiling.number("model_only_examples_per_s") if ceiling else None,
        ceiling_value=ceiling.number("ceiling_examples_per_s") if ceiling else None,
        ceiling_limited_by=ceiling.string("limited_by") if ceiling else None,
        rows=tuple(rows),
        confirmed=_measurement(confirmed_r) if confirmed_r is not None else None,
        best_description=best.string("description"),
        config_file=best.string("config_file"),
        config=config,
        config_json=json.dumps(config_raw or {}, indent=2, sort_keys=True, default=str),
        command=r.string("command"),
        diff=r.string("diff") or None,
        snippet=r.string("snippet") or None,
        importances=tuple(importances),
        trials=trials,
        trials_total=len(all_trials),
        pareto_trials=pareto,
        knobs=tuple(knobs),
        fixed=tuple(fixed),
        left_out=tuple(left_out),
        warnings=warnings,
        notes=r.strings("notes") + (ceiling.strings("notes") if ceiling else ()),
        study=tuple(study),
        data_json=_dump(capped),
        instability=_instability(r.obj("instability")),
    )


def _cap_stderr_tails(rows: list[Any]) -> list[Any]:
    """The rows, where only the first `MAX_STDERR_TAILS` keep their ``stderr_tail``."""
    out, kept = [], 0
    for row in rows:
        if isinstance(row, Mapping) and row.get("stderr_tail"):
            kept += 1
            if kept > MAX_STDERR_TAILS:
                row = {**row, "stderr_tail": None}
        out.append(row)
    return out


def _instability(r: Reader | None) -> Instability | None:
    sentence = r.string("sentence") if r is not None else None
    if r is None or not sentence:
        return None
    numbers = r.items("trials")
    if any(isinstance(n, bool) or not isinstance(n, int) for n in numbers):
        raise r.error("trials", "must be a list of trial numbers")
    return Instability(sentence, tuple(numbers))


def _crash_lines(t: Reader) -> tuple[str, ...]:
    """A failed trial's ``crash.key_lines`` (else its ``headline``), capped."""
    crash = t.obj("crash")
    if crash is None:
        return ()
    lines = crash.strings("key_lines") or tuple(h for h in (crash.string("headline"),) if h)
    return tuple(line[:MAX_CRASH_LINE_CHARS] for line in lines[:MAX_CRASH_LINES])


_CONFIG_META_KEYS = frozenset({"schema", "meta"})


def _config_entries(config: Mapping[str, Any]) -> tuple[ConfigEntry, ...]:
    """Flatten a config file: ``{"sites": {site: {knob: v}}, global_knob: v, ...}``.

    A knob that is null is left as the script wrote it, so it is not a change to show.
    """
    out = []
    scoped: dict[str, Any] = {}
    sites = config.get("sites")
    if isinstance(sites, Mapping):
        scoped.update({str(k): v for k, v in sites.items()})
    for key in sorted(config):
        value = config[key]
        if key in _CONFIG_META_KEYS or (key == "sites" and isinstance(value, Mapping)):
            continue
        if isinstance(value, Mapping):
            scoped[str(key)] = value
        elif value is not None:
            out.append(ConfigEntry("global", str(key), _text(value)))
    for scope in sorted(scoped):
        value = scoped[scope]
        if isinstance(value, Mapping):
            for knob in sorted(value):
                if value[knob] is not None:
                    out.append(ConfigEntry(scope, str(knob), _text(value[knob])))
    return tuple(out)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _trial(t: Reader, objective: str) -> Trial:
    state = (t.string("state") or "COMPLETE").upper()
    if state == "FAILED":
        state = "FAIL"
    if state not in TRIAL_STATES:
        raise t.error("state", f"must be one of {', '.join(TRIAL_STATES)}, got {state!r}")
    params_r = t.obj("params")
    params: tuple[tuple[str, str], ...] = ()
    if params_r is not None:
        params = tuple((k, _text(params_r.mapping()[k])) for k in sorted(params_r.fields()))
    rate = t.number("examples_per_s")
    util = _share(t, "utilization")
    value = t.number("value")
    if value is None:
        value = util if objective == "gpu-util" else rate
    return Trial(
        number=t.required_integer("number"),
        state=state,
        params=params,
        examples_per_s=rate,
        utilization=util,
        value=value,
        reason=t.string("reason"),
        role=t.string("role"),
        description=t.string("description"),
        crash=_crash_lines(t),
        stderr_tail=(t.string("stderr_tail") or "")[-MAX_STDERR_TAIL_CHARS:] or None,
    )
