"""The tuning report model: the tuning document as a report shows it.

`build_tuning_model` takes the tuning document (`tftune.core.tuning_document
.TuningDocument`: `tftune optimize`'s own, or a saved JSON read with `TuningDocument
.from_json`, strict on the fields a report cannot do without, tolerant of the optional
ones; `null` stays `None`, "not measured", never 0; anything malformed is one `UserError`
line naming the file and the field) and adds only what is the report's own: where the
document came from and when the report was made, the caps on trials and stderr tails,
the embedded data, and the report's views (`Trial`, `ConfigEntry`, the sentences), read
from the document's types. It is pure: the same document and timestamp give an equal
model.

Renderers (`reports.tuning_html`) only format this model. Its rows are the four-way
comparison (`reports.tuning_comparison`), the one the terminal's table shows too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import dump
from tftune.core.sizing import caption
from tftune.core.training import TrainingFacts
from tftune.core.tuning_document import TuningDocument
from tftune.core.tuning_parts import (
    ABSENT,
    ConfigSettings,
    KnobChoices,
    MeasuredRate,
    as_text,
)
from tftune.core.tuning_run import BreakEven
from tftune.core.tuning_trials import Instability, TrialRow
from tftune.core.vocabulary import PREAMBLE_SAID_S, TrialState
from tftune.reports.tuning_comparison import ComparisonRow, comparison

MAX_TRIALS = 2000
# A failed trial's crash lines and stderr tail (tftune stores 4 KB; a hand-made JSON may
# hold more).
MAX_CRASH_LINES = 8
MAX_CRASH_LINE_CHARS = 300
MAX_STDERR_TAIL_CHARS = 8192
MAX_STDERR_TAILS = 40  # failed trials whose stderr tail the report shows and embeds


@dataclass(frozen=True, slots=True)
class Trial:
    """A trial as the report shows it (`TrialRow`, with its history value and its crash
    and stderr capped)."""

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
class ConfigEntry:
    scope: str  # a call site, or "global"
    knob: str
    value: str


@dataclass(frozen=True, slots=True)
class TuningReport:
    """A tuning document as the report shows it: the document itself, where it came
    from and when the report was made, its trials capped, and what the report words."""

    source: str
    generated_at: str
    document: TuningDocument
    rows: tuple[ComparisonRow, ...]
    config: tuple[ConfigEntry, ...]
    config_json: str
    importances: tuple[tuple[str, float], ...]  # most important first
    trials: tuple[Trial, ...]  # the first `MAX_TRIALS`
    trials_total: int
    pareto_trials: tuple[int, ...]
    notes: tuple[str, ...]  # the document's, then the ceiling's
    study: tuple[tuple[str, str], ...]  # name, storage, seed, platform ...
    data_json: str  # the document as embedded in the page (capped)
    break_even: str | None = None  # `break_even_sentence`
    service_sizing: str | None = None  # when one host is not enough (`core.sizing.caption`)
    training: tuple[str, ...] = ()  # what was measured as training (`training_sentences`)
    stall_fix: str | None = None  # the code of an epoch-start stall's fix

    @property
    def objective(self) -> str:
        return self.document.objective

    @property
    def objective_label(self) -> str:
        return "GPU utilization" if self.objective == "gpu-util" else "examples/s"

    @property
    def script(self) -> str | None:
        return self.document.script

    @property
    def utilization_kind(self) -> str | None:
        return self.document.utilization_kind

    @property
    def device(self) -> str | None:
        return self.document.device

    @property
    def wall_s(self) -> float | None:
        return self.document.wall_s

    @property
    def trials_complete(self) -> int | None:
        return self.document.trials.complete if self.document.trials else None

    @property
    def trials_pruned(self) -> int | None:
        return self.document.trials.pruned if self.document.trials else None

    @property
    def trials_failed(self) -> int | None:
        return self.document.trials.failed if self.document.trials else None

    @property
    def ceiling_pipeline(self) -> float | None:
        c = self.document.ceiling
        return c.pipeline_only_examples_per_s if c is not None else None

    @property
    def ceiling_model(self) -> float | None:
        c = self.document.ceiling
        return c.model_only_examples_per_s if c is not None else None

    @property
    def ceiling_limited_by(self) -> str | None:
        c = self.document.ceiling
        return c.limited_by if c is not None else None

    @property
    def ceiling(self) -> float | None:
        """As measured; else the lower of the two bounds."""
        c = self.document.ceiling
        if c is not None and c.ceiling_examples_per_s is not None:
            return c.ceiling_examples_per_s
        known = [x for x in (self.ceiling_pipeline, self.ceiling_model) if x is not None]
        return min(known) if known else None

    @property
    def confirmed(self) -> MeasuredRate | None:
        """The winner re-measured after the search."""
        return self.document.best.confirmed

    @property
    def best_description(self) -> str | None:
        return self.document.best.description

    @property
    def config_file(self) -> str | None:
        return self.document.best.config_file

    @property
    def command(self) -> str | None:
        return self.document.command

    @property
    def diff(self) -> str | None:
        return self.document.diff or None

    @property
    def snippet(self) -> str | None:
        return self.document.snippet or None

    @property
    def knobs(self) -> tuple[KnobChoices, ...]:
        return self.document.space.knobs if self.document.space else ()

    @property
    def fixed(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.document.space.fixed)) if self.document.space else ()

    @property
    def left_out(self) -> tuple[tuple[str, str], ...]:
        """(knob, why it cannot matter)."""
        space = self.document.space
        return tuple((lo.name, lo.reason or "") for lo in space.left_out) if space else ()

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.document.space.warnings if self.document.space else ()

    @property
    def instability(self) -> Instability | None:
        found = self.document.instability
        return found if isinstance(found, Instability) else None

    @property
    def stop_reason(self) -> str | None:
        """Why the search stopped, in words."""
        run = self.document.run
        return (run.stop_reason or None) if run is not None else None


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def break_even_sentence(be: BreakEven | None) -> str | None:
    """The tuning document's ``break_even`` (`tftune.tuner.output.breakeven`) in words: what
    tuning cost, what the winner saves per hour of training, and when it has paid for
    itself."""
    if be is None:
        return None
    head = f"Tuning took {_minutes(be.tuning_s)}"
    saved, after = be.saved_s_per_hour, be.pays_off_after_s
    r0, r1 = be.as_written_examples_per_s, be.tuned_examples_per_s
    if saved is None or after is None:
        return f"{head}; the script as written stays, so there is nothing to pay it back."
    rates = f" ({r0:,.1f} → {r1:,.1f} ex/s)" if r0 and r1 else ""
    return (
        f"{head}; at the measured rates{rates} the winner saves {_minutes(saved)} of "
        f"every hour of training, and has paid for itself after {_minutes(after)} "
        "of training."
    )


def _training(doc: TuningDocument) -> TrainingFacts:
    training = doc.run.training if doc.run is not None else None
    return training if training is not None else TrainingFacts()


def training_sentences(doc: TuningDocument) -> tuple[str, ...]:
    """What was measured as training, in words, from the document's ``training``: the
    loop, what was taken out of the windows, the preamble, and an epoch-start stall."""
    training = _training(doc)
    out: list[str] = []
    loop, aw = training.loop, training.as_written
    if loop is not None and not training.busiest_loop:
        where = f"built at {loop.site}, " if loop.site else ""
        out.append(
            f"measured: training steps of the dataset {where}iterated at {loop.place}"
            + (
                "; validation and other datasets' passes were taken out of the windows"
                if aw is not None and aw.excluded_s > 0
                else ""
            )
        )
    preamble = training.preamble_s
    if preamble is not None and preamble >= PREAMBLE_SAID_S:
        out.append(
            f"the script's preamble ({preamble:.0f} s before its first training step) is "
            "paid by every run and is not training: it is not measured"
        )
    for part, who in ((aw, "as written"), (training.tuned, "tuned")):
        stall = part.stall if part is not None else None
        if stall is not None and stall.sentence:
            out.append(f"{who}, {stall.sentence}")
    return tuple(out)


def stall_fix(doc: TuningDocument) -> str | None:
    """The code of the as-written epoch-start stall's fix, where one is named."""
    aw = _training(doc).as_written
    stall = aw.stall if aw is not None else None
    return (stall.code or None) if stall is not None else None


def _study(doc: TuningDocument) -> tuple[tuple[str, str], ...]:
    """The study's name, storage and seed, and the machine's Python and cores, as text."""
    study, machine = doc.study, doc.platform
    pairs: list[tuple[str, object]] = []
    if study is not None:
        pairs += [("name", study.name), ("storage", study.storage), ("seed", study.seed)]
    if machine is not None:
        pairs += [("python", machine.python), ("cores", machine.cores)]
    return tuple((k, as_text(v)) for k, v in pairs if v is not None)


def build_tuning_model(
    document: TuningDocument,
    *,
    generated_at: str,
    source: str = "tuning JSON",
    data: Mapping[str, Any] | None = None,
) -> TuningReport:
    """The `TuningReport` of a tuning document. `data` is its JSON where the caller has
    it already (`tftune report` read it): the page embeds it; else the page embeds
    `document.to_json()`."""
    doc = document
    settings = doc.best.config
    config = settings.to_json() if settings is not None else {}
    ceiling = doc.ceiling
    return TuningReport(
        source=source,
        generated_at=generated_at,
        document=doc,
        rows=comparison(doc),
        config=_config_entries(settings) if settings is not None else (),
        config_json=json.dumps(config, indent=2, sort_keys=True, default=str),
        importances=tuple(sorted(doc.importances, key=lambda kv: (-kv[1], kv[0]))),
        trials=_shown_trials(doc),
        trials_total=len(doc.trials_detail),
        pareto_trials=tuple(p.trial for p in doc.pareto if p.trial is not None),
        notes=doc.notes + (ceiling.notes if ceiling is not None else ()),
        study=_study(doc),
        data_json=dump(_capped(data if data is not None else doc.to_json())),
        break_even=break_even_sentence(doc.run.break_even if doc.run is not None else None),
        service_sizing=caption(ceiling.sizing if ceiling is not None else None),
        training=training_sentences(doc),
        stall_fix=stall_fix(doc),
    )


def _capped(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The document to embed: its first `MAX_TRIALS` trials, of which only the first
    `MAX_STDERR_TAILS` failed ones keep their ``stderr_tail``."""
    rows = data.get("trials_detail")
    if not rows:
        return data
    out, kept = [], 0
    for row in list(rows)[:MAX_TRIALS]:
        if isinstance(row, Mapping) and row.get("stderr_tail"):
            kept += 1
            if kept > MAX_STDERR_TAILS:
                row = {**row, "stderr_tail": None}
        out.append(row)
    return {**data, "trials_detail": out}


def _shown_trials(doc: TuningDocument) -> tuple[Trial, ...]:
    """The first `MAX_TRIALS` trials, of which only the first `MAX_STDERR_TAILS` failed
    ones keep their stderr tail (as `_capped` embeds them)."""
    out, kept = [], 0
    for row in doc.trials_detail[:MAX_TRIALS]:
        tail = row.stderr_tail if isinstance(row.stderr_tail, str) else None
        if tail:
            kept += 1
            tail = tail if kept <= MAX_STDERR_TAILS else None
        out.append(_trial(row, doc.objective, tail))
    return tuple(out)


def _config_entries(config: ConfigSettings) -> tuple[ConfigEntry, ...]:
    """The config's settings, flattened: the global knobs by name, then each scope's (a
    call site's, the tf.data service's) by scope and knob. A knob that is null is left
    as the script wrote it, so it is not a change to show."""
    out = [
        ConfigEntry("global", name, as_text(value))
        for name, value in sorted(config.fields, key=lambda f: f[0])
        if value is not None and not isinstance(value, tuple)
    ]
    scoped = dict(config.sites or ())
    scoped.update((n, v) for n, v in config.fields if isinstance(v, tuple))
    for scope in sorted(scoped):
        out += [
            ConfigEntry(scope, knob, as_text(value))
            for knob, value in sorted(scoped[scope], key=lambda k: k[0])
            if value is not None
        ]
    return tuple(out)


def _trial(row: TrialRow, objective: str, stderr_tail: str | None) -> Trial:
    """A trial as the report shows it: its value for the history (the objective where
    the row has none), its crash in a few capped lines, its stderr tail capped."""
    value = row.value if row.value is not ABSENT else None
    if value is None:
        value = row.utilization if objective == "gpu-util" else row.examples_per_s
    crash = row.crash_lines()[:MAX_CRASH_LINES]
    return Trial(
        number=row.number,
        state=row.state,
        params=tuple(sorted(row.params)),
        examples_per_s=row.examples_per_s,
        utilization=row.utilization,
        value=value,
        reason=row.reason,
        role=row.role,
        description=row.description,
        crash=tuple(line[:MAX_CRASH_LINE_CHARS] for line in crash),
        stderr_tail=(stderr_tail or "")[-MAX_STDERR_TAIL_CHARS:] or None,
    )
