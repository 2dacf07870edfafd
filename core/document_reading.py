"""Typed, path-aware reading of untrusted JSON, and what both report models share.

Every accessor names the file and the dotted field in its error, so a malformed report
JSON fails as one line: ``analysis.json: field 'steps.mean_ms' must be a number, got "x"``.
`top_reader` checks the schema (`object_reader` reads an object that stands alone),
`detect_kind` tells an analysis JSON from a tuning JSON, and `trial_state` reads a trial's
state as tftune or Optuna writes it. It lives in core so that the documents' own readers
and the reports share it without the reports importing the producers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from tftune.core.errors import UserError
from tftune.core.vocabulary import OPTUNA_STATES, TrialState

_MISSING = object()

# A value as JSON holds it: what a document's free-form fields (a finding's evidence) are.
JsonValue = None | bool | int | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"]


def _show(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Reader:
    """A view of one JSON object at a dotted path inside a named file."""

    __slots__ = ("_data", "path", "source")

    def __init__(self, data: Mapping[str, Any], *, source: str, path: str = "") -> None:
        self._data = data
        self.source = source
        self.path = path

    def _field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> UserError:
        return UserError(f"{self.source}: field '{self._field(key)}' {message}")

    def has(self, key: str) -> bool:
        return self._data.get(key) is not None

    def raw(self, key: str, *, required: bool = False) -> Any:
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            if required:
                raise self.error(key, "is missing")
            return None
        return value

    def number(self, key: str, *, required: bool = False, nullable: bool = True) -> float | None:
        """A finite number; None for null ("not measured") when `nullable`."""
        value = self.raw(key, required=required)
        if value is None:
            if required and not nullable:
                raise self.error(key, "must be a number, got null")
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"must be a number, got {_show(value)}")
        if not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {_show(value)}")
        return float(value)

    def required_number(self, key: str) -> float:
        value = self.number(key, required=True, nullable=False)
        assert value is not None
        return value

    def integer(self, key: str, *, required: bool = False, nullable: bool = True) -> int | None:
        value = self.raw(key, required=required)
        if value is None:
            if required and not nullable:
                raise self.error(key, "must be an integer, got null")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise self.error(key, f"must be an integer, got {_show(value)}")
        return value

    def required_integer(self, key: str) -> int:
        value = self.integer(key, required=True, nullable=False)
        assert value is not None
        return value

    def string(self, key: str, *, required: bool = False) -> str | None:
        value = self.raw(key, required=required)
        if value is None:
            if required:
                raise self.error(key, "must be a string, got null")
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # ids are sometimes numbers; a string is what we show
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {_show(value)}")
        return value

    def required_string(self, key: str) -> str:
        value = self.string(key, required=True)
        assert value is not None
        return value

    def boolean(self, key: str, *, required: bool = False) -> bool | None:
        value = self.raw(key, required=required)
        if value is None:
            if required:
                raise self.error(key, "must be true or false, got null")
            return None
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {_show(value)}")
        return value

    def obj(self, key: str, *, required: bool = False) -> Reader | None:
        value = self.raw(key, required=required)
        if value is None:
            if required:
                raise self.error(key, "must be an object, got null")
            return None
        if not isinstance(value, Mapping):
            raise self.error(key, f"must be an object, got {_show(value)}")
        return Reader(value, source=self.source, path=self._field(key))

    def required_obj(self, key: str) -> Reader:
        value = self.obj(key, required=True)
        assert value is not None
        return value

    def items(self, key: str, *, required: bool = False) -> list[Any]:
        value = self.raw(key, required=required)
        if value is None:
            if required:
                raise self.error(key, "must be a list, got null")
            return []
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise self.error(key, f"must be a list, got {_show(value)}")
        return list(value)

    def objects(self, key: str, *, required: bool = False) -> list[Reader]:
        out = []
        for i, value in enumerate(self.items(key, required=required)):
            if not isinstance(value, Mapping):
                raise self.error(f"{key}[{i}]", f"must be an object, got {_show(value)}")
            out.append(Reader(value, source=self.source, path=self._field(f"{key}[{i}]")))
        return out

    def strings(self, key: str) -> tuple[str, ...]:
        out = []
        for i, value in enumerate(self.items(key)):
            if not isinstance(value, str):
                raise self.error(f"{key}[{i}]", f"must be a string, got {_show(value)}")
            out.append(value)
        return tuple(out)

    def integers(self, key: str) -> tuple[int, ...]:
        """A list of integers (step or trial numbers); a bool is no integer here."""
        out = []
        for i, value in enumerate(self.items(key)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(f"{key}[{i}]", f"must be an integer, got {_show(value)}")
            out.append(value)
        return tuple(out)

    def fields(self) -> list[str]:
        return [str(k) for k in self._data]

    def mapping(self) -> Mapping[str, Any]:
        return self._data


# ---- what both documents share --------------------------------------------------------

SUPPORTED_SCHEMA = 1

Kind = Literal["analysis", "tuning"]


def object_reader(data: object, *, source: str) -> Reader:
    """A reader of one JSON object that stands alone (a stored crash, a clock file's
    figures): a `UserError` naming `source` where it is no object."""
    if not isinstance(data, Mapping):
        raise UserError(f"{source}: expected a JSON object, got {_show(data)}")
    return Reader(data, source=source)


def top_reader(data: Mapping[str, Any], *, source: str) -> Reader:
    """A reader of a report JSON's top level, whose schema this tftune reads."""
    if not isinstance(data, Mapping):
        raise UserError(f"{source}: expected a JSON object at the top level")
    r = Reader(data, source=source)
    schema = r.integer("schema", required=True, nullable=False)
    if schema != SUPPORTED_SCHEMA:
        raise r.error(
            "schema", f"is {schema}; this tftune reads schema {SUPPORTED_SCHEMA} (upgrade tftune)"
        )
    return r


def share(r: Reader, key: str) -> float | None:
    """A fraction of something (0..1); None is "not measured"."""
    value = r.number(key)
    if value is not None and not -1e-6 <= value <= 1.0 + 1e-6:
        raise r.error(key, f"must be a fraction between 0 and 1, got {value}")
    return value


def dump(data: Any) -> str:
    """The (capped) input as the compact JSON a page embeds: always valid JSON."""
    try:
        return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN somewhere in a free-form field: keep the report valid JSON
        return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).replace(
            "NaN", "null"
        )


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


# Optuna's states of a trial that has not ended: a study's history may hold them while
# other workers run. Such a trial has no result (None).
UNFINISHED_STATES = ("RUNNING", "WAITING")


def trial_state(t: Reader) -> TrialState | None:
    """A trial's state, as tftune writes it (``failed``) or as Optuna names it (``FAIL``)."""
    word = (t.string("state") or TrialState.COMPLETE.value).upper()
    state = OPTUNA_STATES.get(word)
    if state is None and word.lower() in {s.value for s in TrialState}:
        state = TrialState(word.lower())
    if state is None and word not in UNFINISHED_STATES:
        known = (*OPTUNA_STATES, *UNFINISHED_STATES)
        raise t.error("state", f"must be one of {', '.join(known)}, got {word!r}")
    return state
