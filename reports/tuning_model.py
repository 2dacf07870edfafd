"""The tuning report model: the tuning JSON, validated into frozen, typed data.

`build_tuning_model` is pure: the same JSON and timestamp give an equal model. It is
strict on the fields a report cannot do without and tolerant of the optional ones; `null`
stays `None` ("not measured") and is never turned into 0. Anything malformed raises
`UserError` with one line naming the file and the field.

Renderers (`reports.tuning_html`) only format this model. Its rows are the four-way
comparison (`reports.tuning_comparison`), the one the terminal's table shows too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import (
    Reader,
    dump,
    epoch_stall_of,
    share,
    sizing_caption,
    top_reader,
    trial_state,
)
from tftune.core.vocabulary import PREAMBLE_SAID_S, TrialState
from tftune.reports.tuning_comparison import ComparisonRow, Measurement, comparison, measurement_of

MAX_TRIALS = 2000
# A failed trial's crash lines and stderr tail (tftune stores 4 KB; a hand-made JSON may
# hold more).
MAX_CRASH_LINES = 8
MAX_CRASH_LINE_CHARS = 300
MAX_STDERR_TAIL_CHARS = 8192
MAX_STDERR_TAILS = 40  # failed trials whose stderr tail the report shows and embeds

OBJECTIVES = ("throughput", "gpu-util", "both")


@dataclass(frozen=True, slots=True)
class Trial:
    number: int
    state: TrialState | None  # None: not finished (Optuna's RUNNING or WAITING)
    params: tuple[tuple[str, str], ...]
    examples_per_s: float | None
    utilization: float | None
    value: float | None  # the objective as the history plots it
    reason: str | None
    role: str | None = None  # as_written | autotune | heuristic | guided | search | confirm
    description: str | None = None
    crash: tuple[str, ...] = ()  # a failed trial's crash in a few lines (headline first)
    stderr_tail: str | None = None  # the end of a failed trial's stderr

    @property
    def state_word(self) -> str:
        return self.state.value if self.state is not None else "unfinished"


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
class Space:
    """What was searched (the tuning JSON's ``space``)."""

    knobs: tuple[Knob, ...] = ()
    fixed: tuple[tuple[str, str], ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()  # (knob, why it cannot matter)
    warnings: tuple[str, ...] = ()


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
    break_even: str | None = None  # `break_even_sentence`
    stop_reason: str | None = None  # why the search stopped, in words
    service_sizing: str | None = None  # when one host is not enough (`sizing_caption`)
    training: tuple[str, ...] = ()  # what was measured as training (`training_sentences`)
    stall_fix: str | None = None  # the code of an epoch-start stall's fix

    @property
    def objective_label(self) -> str:
        return "GPU utilization" if self.objective == "gpu-util" else "examples/s"

    @property
    def ceiling(self) -> float | None:
        if self.ceiling_value is not None:
            return self.ceiling_value
        known = [c for c in (self.ceiling_pipeline, self.ceiling_model) if c is not None]
        return min(known) if known else None


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def break_even_sentence(data: Mapping[str, Any]) -> str | None:
    """The tuning JSON's ``break_even`` (`tftune.tuner.breakeven`) in words: what tuning
    cost, what the winner saves per hour of training, and when it has paid for itself."""
    be = data.get("break_even")
    if not isinstance(be, Mapping) or not isinstance(be.get("tuning_s"), (int, float)):
        return None
    head = f"Tuning took {_minutes(float(be['tuning_s']))}"
    saved, after = be.get("saved_s_per_hour"), be.get("pays_off_after_s")
    r0, r1 = be.get("as_written_examples_per_s"), be.get("tuned_examples_per_s")
    if not isinstance(saved, (int, float)) or not isinstance(after, (int, float)):
        return f"{head}; the script as written stays, so there is nothing to pay it back."
    rates = f" ({r0:,.1f} → {r1:,.1f} ex/s)" if r0 and r1 else ""
    return (
        f"{head}; at the measured rates{rates} the winner saves {_minutes(float(saved))} of "
        f"every hour of training, and has paid for itself after {_minutes(float(after))} "
        "of training."
    )


def training_sentences(data: Mapping[str, Any]) -> tuple[str, ...]:
    """What was measured as training, in words, from the tuning JSON's ``training``: the
    loop, what was taken out of the windows, the preamble, and an epoch-start stall."""
    training = data.get("training")
    if not isinstance(training, Mapping):
        return ()
    out: list[str] = []
    loop = training.get("loop")
    raw_aw = training.get("as_written")
    aw: Mapping[str, Any] = raw_aw if isinstance(raw_aw, Mapping) else {}
    if isinstance(loop, Mapping) and not training.get("busiest_loop"):
        where = f"built at {loop.get('site')}, " if loop.get("site") else ""
        out.append(
            f"measured: training steps of the dataset {where}iterated at {loop.get('place')}"
            + (
                "; validation and other datasets' passes were taken out of the windows"
                if (aw.get("excluded_s") or 0) > 0
                else ""
            )
        )
    preamble = training.get("preamble_s")
    if isinstance(preamble, (int, float)) and preamble >= PREAMBLE_SAID_S:
        out.append(
            f"the script's preamble ({preamble:.0f} s before its first training step) is "
            "paid by every run and is not training: it is not measured"
        )
    for key, who in (("as_written", "as written"), ("tuned", "tuned")):
        part = training.get(key)
        stall = part.get("stall") if isinstance(part, Mapping) else None
        if isinstance(stall, Mapping) and stall.get("sentence"):
            out.append(f"{who}, {stall['sentence']}")
    return tuple(out)


def stall_fix(data: Mapping[str, Any]) -> str | None:
    """The code of the as-written epoch-start stall's fix, where one is named."""
    training = data.get("training")
    part = training.get("as_written") if isinstance(training, Mapping) else None
    stall = epoch_stall_of({"training": part}) if isinstance(part, Mapping) else None
    return stall[1] if stall else None


def build_tuning_model(
    data: Mapping[str, Any], *, generated_at: str, source: str = "tuning JSON"
) -> TuningReport:
    """Validate a tuning JSON (docs/json.md, schema 1) into a `TuningReport`."""
    r = top_reader(data, source=source)
    objective = r.required_string("objective")
    if objective not in OBJECTIVES:
        raise r.error("objective", f"must be one of {', '.join(OBJECTIVES)}")
    best = r.required_obj("best")
    confirmed_r = best.obj("confirmed")
    config_raw = best.raw("config")
    if config_raw is not None and not isinstance(config_raw, Mapping):
        raise best.error("config", "must be an object keyed by call site")
    trials_r = r.obj("trials")
    ceiling = r.obj("ceiling")
    space = _space(r.obj("space"))
    all_trials = r.objects("trials_detail")
    detail = _cap_stderr_tails(list(data.get("trials_detail") or [])[:MAX_TRIALS])
    shown = Reader({"trials_detail": detail}, source=source).objects("trials_detail")
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
        rows=comparison(data, source),
        confirmed=measurement_of(confirmed_r) if confirmed_r is not None else None,
        best_description=best.string("description"),
        config_file=best.string("config_file"),
        config=_config_entries(config_raw or {}),
        config_json=json.dumps(config_raw or {}, indent=2, sort_keys=True, default=str),
        command=r.string("command"),
        diff=r.string("diff") or None,
        snippet=r.string("snippet") or None,
        importances=_importances(r.obj("importances")),
        trials=tuple(_trial(t, objective) for t in shown),
        trials_total=len(all_trials),
        pareto_trials=tuple(
            t for t in (p.integer("trial") for p in r.objects("pareto")) if t is not None
        ),
        knobs=space.knobs,
        fixed=space.fixed,
        left_out=space.left_out,
        warnings=space.warnings,
        notes=r.strings("notes") + (ceiling.strings("notes") if ceiling else ()),
        study=_study(r),
        data_json=dump(capped),
        instability=_instability(r.obj("instability")),
        break_even=break_even_sentence(data),
        stop_reason=r.string("stop_reason") or None,
        service_sizing=sizing_caption((data.get("ceiling") or {}).get("service_sizing")),
        training=training_sentences(data),
        stall_fix=stall_fix(data),
    )


def _space(space: Reader | None) -> Space:
    if space is None:
        return Space()
    knobs = tuple(
        Knob(
            k.required_string("name"), tuple(_text(c) for c in k.items("choices")), k.string("why")
        )
        for k in space.objects("knobs")
    )
    fixed_r = space.obj("fixed")
    fixed = (
        tuple((k, _text(v)) for k, v in sorted(fixed_r.mapping().items()))
        if fixed_r is not None
        else ()
    )
    left_out = tuple(
        (lo.required_string("name"), lo.string("reason") or "") for lo in space.objects("left_out")
    )
    return Space(knobs, fixed, left_out, space.strings("warnings"))


def _study(r: Reader) -> tuple[tuple[str, str], ...]:
    study: list[tuple[str, str]] = []
    for key in ("study", "platform"):
        sub = r.obj(key)
        if sub is not None:
            study += [(k, _text(v)) for k, v in sub.mapping().items() if v is not None]
    return tuple(study)


def _importances(imp: Reader | None) -> tuple[tuple[str, float], ...]:
    """Most important first."""
    if imp is None:
        return ()
    out = [(name, imp.required_number(name)) for name in imp.fields()]
    return tuple(sorted(out, key=lambda kv: (-kv[1], kv[0])))


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
    state = trial_state(t)
    params_r = t.obj("params")
    params: tuple[tuple[str, str], ...] = ()
    if params_r is not None:
        params = tuple((k, _text(params_r.mapping()[k])) for k in sorted(params_r.fields()))
    rate = t.number("examples_per_s")
    util = share(t, "utilization")
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
