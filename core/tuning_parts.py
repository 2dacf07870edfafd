"""The tuning document's parts (`tftune.core.tuning_document`), each a frozen type with
its JSON both ways: `to_json` writes what the producer stored (it computes nothing) and
`from_reader` reads it strictly from a `tftune.core.document_reading.Reader`, so that a
malformed field is one `UserError` line naming the file and the field.

Schema 1 grew fields over time; a field an older document of schema 1 does not have is
`ABSENT` (not written back), apart from ``null`` ("not measured"). Every part is typed:
the winner's config as the config file writes it (`ConfigSettings`), the service sizing
(`tftune.core.sizing`). The study's trials (each trial's row, the instability found among
them) are in `tftune.core.tuning_trials`; what the whole run adds in
`tftune.core.tuning_run`.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader, share, trial_state
from tftune.core.sizing import Sizing, sizing_from_reader
from tftune.core.vocabulary import TrialState

# The baselines every study measures, in the order the document and the reports list them.
BASELINE_KEYS = ("as_written", "autotune", "heuristic", "guided")
# The word written for a trial that has not ended (Optuna's RUNNING or WAITING).
UNFINISHED = "running"


class Absent(enum.Enum):
    """A field that an older document of schema 1 does not have."""

    ABSENT = "absent"


ABSENT = Absent.ABSENT


def as_text(value: Any) -> str:
    """A knob value as the document writes it: strings as they are, else their JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def put_present(out: dict[str, Any], key: str, value: Any) -> None:
    """``out[key] = value``, unless the document does not have that field."""
    if value is not ABSENT:
        out[key] = value


def part_json(value: Any) -> Any:
    """`value.to_json()`, None for None, `ABSENT` for `ABSENT`."""
    if value is None or value is ABSENT:
        return value
    return value.to_json()


def present(r: Reader, key: str) -> bool:
    """The document has the field (``null`` included)."""
    return key in r.mapping()


def _numbers(r: Reader, key: str) -> tuple[float, ...]:
    values = r.items(key)
    if any(
        isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
        for v in values
    ):
        raise r.error(key, "must be a list of numbers")
    return tuple(values)


def text_pairs(r: Reader | None) -> tuple[tuple[str, str], ...]:
    """An object's (key, value as text) pairs, in document order."""
    return tuple((k, as_text(v)) for k, v in r.mapping().items()) if r is not None else ()


@dataclass(frozen=True, slots=True)
class MeasuredRate:
    """A figure object: one trial's measured rate, utilization and noise (a baseline's,
    the winner's, a final-round re-measure, a Pareto member)."""

    examples_per_s: float | None = None
    utilization: float | None = None  # NVML's mean, or the duty cycle (`utilization_kind`)
    spread: float | None = None  # (max - min) / median of the repeat windows' examples/s
    input_wait_share: float | None = None
    repeats: tuple[float, ...] = ()  # each window's examples/s
    trial: int | None = None
    state: TrialState | None = TrialState.COMPLETE  # None: not finished
    reason: str | None = None

    @property
    def complete(self) -> bool:
        return self.state is TrialState.COMPLETE

    @property
    def state_word(self) -> str:
        return self.state.value if self.state is not None else "unfinished"

    def to_json(self) -> dict[str, Any]:
        return {
            "examples_per_s": self.examples_per_s,
            "utilization": self.utilization,
            "spread": self.spread,
            "input_wait_share": self.input_wait_share,
            "repeats": list(self.repeats),
            "trial": self.trial,
            "state": self.state.value if self.state is not None else UNFINISHED,
            "reason": self.reason,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> MeasuredRate:
        examples_per_s, utilization = r.number("examples_per_s"), share(r, "utilization")
        spread, state, reason = r.number("spread"), trial_state(r), r.string("reason")
        return cls(
            examples_per_s=examples_per_s,
            utilization=utilization,
            spread=spread,
            input_wait_share=share(r, "input_wait_share"),
            repeats=_numbers(r, "repeats"),
            trial=r.integer("trial"),
            state=state,
            reason=reason,
        )


@dataclass(frozen=True, slots=True)
class BaselineRun:
    """A baseline: its trial's figure, and its final-round figure measured side by side
    with the winner's (None: not re-measured)."""

    measured: MeasuredRate
    confirmed: MeasuredRate | Absent | None = ABSENT

    def to_json(self) -> dict[str, Any]:
        out = self.measured.to_json()
        put_present(out, "confirmed", part_json(self.confirmed))
        return out

    @classmethod
    def from_reader(cls, r: Reader) -> BaselineRun:
        again = r.obj("confirmed")
        confirmed = MeasuredRate.from_reader(again) if again is not None else None
        return cls(MeasuredRate.from_reader(r), confirmed if present(r, "confirmed") else ABSENT)


@dataclass(frozen=True, slots=True)
class Baselines:
    """The configs every study measures (None: that trial did not run)."""

    as_written: BaselineRun | None = None
    autotune: BaselineRun | None = None
    heuristic: BaselineRun | None = None
    guided: BaselineRun | None = None

    def get(self, key: str) -> BaselineRun | None:
        run: BaselineRun | None = getattr(self, key)
        return run

    def to_json(self) -> dict[str, Any]:
        return {key: part_json(self.get(key)) for key in BASELINE_KEYS}

    @classmethod
    def from_reader(cls, r: Reader) -> Baselines:
        subs = {key: r.obj(key) for key in BASELINE_KEYS}
        return cls(**{k: BaselineRun.from_reader(s) if s else None for k, s in subs.items()})


Setting = int | float | str | bool | None  # a knob's value as the config file writes it
Settings = tuple[tuple[str, Setting], ...]  # an object of settings, in the file's order


def _setting(r: Reader, key: str, value: object) -> Setting:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise r.error(key, "must be a knob's value (a number, a string, true, false or null)")


def _settings(r: Reader) -> Settings:
    return tuple((k, _setting(r, k, v)) for k, v in r.mapping().items())


@dataclass(frozen=True, slots=True)
class ConfigSettings:
    """A config as its file writes it (`tftune.tuner.searchspace.config.Config`, whose JSON this
    writes), less the file's free-form ``meta``: each call site's knobs, then the file's
    other fields in its order, each a global knob's value or an object of settings (the
    tf.data service's). A value is as the file has it: ``"AUTOTUNE"``; null is the
    script's own. A hand-made config may lack ``schema`` and ``sites`` (None)."""

    schema: int | None = None
    sites: tuple[tuple[str, Settings], ...] | None = None
    fields: tuple[tuple[str, Setting | Settings], ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.schema is not None:
            out["schema"] = self.schema
        if self.sites is not None:
            out["sites"] = {site: dict(knobs) for site, knobs in self.sites}
        for name, value in self.fields:
            out[name] = dict(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_reader(cls, r: Reader) -> ConfigSettings:
        sites = r.obj("sites")
        fields: list[tuple[str, Setting | Settings]] = []
        for name in r.fields():
            if name in ("schema", "sites"):
                continue
            value = r.raw(name)
            found = r.obj(name) if isinstance(value, Mapping) else None
            fields.append(
                (name, _settings(found) if found is not None else _setting(r, name, value))
            )
        return cls(
            schema=r.integer("schema"),
            sites=tuple((s, _settings(sites.required_obj(s))) for s in sites.fields())
            if sites is not None
            else None,
            fields=tuple(fields),
        )


@dataclass(frozen=True, slots=True)
class BestRun:
    """The winner: its trial's figure, its config in the config file's shape, its
    final-round figure and its speed-up over the script as written."""

    measured: MeasuredRate
    config_file: str | None = None
    config: ConfigSettings | None = None
    description: str | None = None
    role: str | None = None  # as_written | autotune | heuristic | guided | search
    confirmed: MeasuredRate | None = None
    speedup_vs_as_written: float | None = None
    requires: tuple[str, ...] | Absent = ABSENT  # the change a 16-bit winner needs

    def to_json(self) -> dict[str, Any]:
        out = self.measured.to_json()
        out.update(
            config_file=self.config_file,
            config=part_json(self.config),
            description=self.description,
            role=self.role,
            confirmed=part_json(self.confirmed),
            speedup_vs_as_written=self.speedup_vs_as_written,
        )
        put_present(out, "requires", list(self.requires) if self.requires is not ABSENT else ABSENT)
        return out

    @classmethod
    def from_reader(cls, r: Reader) -> BestRun:
        again, config = r.obj("confirmed"), r.obj("config")
        return cls(
            measured=MeasuredRate.from_reader(r),
            config_file=r.string("config_file"),
            config=ConfigSettings.from_reader(config) if config is not None else None,
            description=r.string("description"),
            role=r.string("role"),
            confirmed=MeasuredRate.from_reader(again) if again is not None else None,
            speedup_vs_as_written=r.number("speedup_vs_as_written"),
            requires=r.strings("requires") if present(r, "requires") else ABSENT,
        )


@dataclass(frozen=True, slots=True)
class TrialCounts:
    complete: int | None = None
    pruned: int | None = None
    failed: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"complete": self.complete, "pruned": self.pruned, "failed": self.failed}

    @classmethod
    def from_reader(cls, r: Reader) -> TrialCounts:
        return cls(r.integer("complete"), r.integer("pruned"), r.integer("failed"))


@dataclass(frozen=True, slots=True)
class CeilingFigures:
    """The bound analysis: the pipeline alone and the model alone, both as written."""

    pipeline_only_examples_per_s: float | None = None
    model_only_examples_per_s: float | None = None
    ceiling_examples_per_s: float | None = None  # the lower of the two
    limited_by: str | None = None  # pipeline | model
    notes: tuple[str, ...] = ()  # why a half was not measured
    pipeline_note: str | Absent | None = ABSENT
    model_note: str | Absent | None = ABSENT
    service_sizing: Sizing | Absent | None = ABSENT  # None: not measured

    @property
    def sizing(self) -> Sizing | None:
        """The service sizing; None where not measured or an older document has none."""
        return None if isinstance(self.service_sizing, Absent) else self.service_sizing

    def to_json(self) -> dict[str, Any]:
        out = {
            "pipeline_only_examples_per_s": self.pipeline_only_examples_per_s,
            "model_only_examples_per_s": self.model_only_examples_per_s,
            "ceiling_examples_per_s": self.ceiling_examples_per_s,
            "limited_by": self.limited_by,
            "notes": list(self.notes),
        }
        put_present(out, "pipeline_note", self.pipeline_note)
        put_present(out, "model_note", self.model_note)
        put_present(out, "service_sizing", part_json(self.service_sizing))
        return out

    @classmethod
    def from_reader(cls, r: Reader) -> CeilingFigures:
        def optional(key: str, read: Any) -> Any:
            return read(key) if present(r, key) else ABSENT

        return cls(
            pipeline_only_examples_per_s=r.number("pipeline_only_examples_per_s"),
            model_only_examples_per_s=r.number("model_only_examples_per_s"),
            ceiling_examples_per_s=r.number("ceiling_examples_per_s"),
            limited_by=r.string("limited_by"),
            notes=r.strings("notes"),
            pipeline_note=optional("pipeline_note", r.string),
            model_note=optional("model_note", r.string),
            service_sizing=optional("service_sizing", lambda k: _sizing(r.obj(k))),
        )


def _sizing(r: Reader | None) -> Sizing | None:
    return sizing_from_reader(r) if r is not None else None


@dataclass(frozen=True, slots=True)
class KnobChoices:
    """One searched knob as the document writes it: its choices as text, and why."""

    name: str
    choices: tuple[str, ...]
    why: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "choices": list(self.choices), "why": self.why}

    @classmethod
    def from_reader(cls, r: Reader) -> KnobChoices:
        name = r.required_string("name")
        return cls(name, tuple(as_text(c) for c in r.items("choices")), r.string("why"))


@dataclass(frozen=True, slots=True)
class KnobLeftOut:
    """A knob not searched, and why it cannot matter."""

    name: str
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "reason": self.reason}

    @classmethod
    def from_reader(cls, r: Reader) -> KnobLeftOut:
        return cls(r.required_string("name"), r.string("reason"))


@dataclass(frozen=True, slots=True)
class SearchedSpace:
    """What was searched (the document's ``space``)."""

    knobs: tuple[KnobChoices, ...] = ()
    fixed: tuple[tuple[str, str], ...] = ()  # (knob, value as text), in document order
    left_out: tuple[KnobLeftOut, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "knobs": [k.to_json() for k in self.knobs],
            "fixed": dict(self.fixed),
            "left_out": [lo.to_json() for lo in self.left_out],
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_reader(cls, r: Reader) -> SearchedSpace:
        return cls(
            knobs=tuple(KnobChoices.from_reader(k) for k in r.objects("knobs")),
            fixed=text_pairs(r.obj("fixed")),
            left_out=tuple(KnobLeftOut.from_reader(lo) for lo in r.objects("left_out")),
            warnings=r.strings("warnings"),
        )
