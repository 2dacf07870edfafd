"""Typed, path-aware reading of untrusted JSON.

Every accessor names the file and the dotted field in its error, so a malformed report
JSON fails as one line: ``analysis.json: field 'steps.mean_ms' must be a number, got "x"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from tftune.core.errors import UserError

_MISSING = object()


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

    def fields(self) -> list[str]:
        return [str(k) for k in self._data]

    def mapping(self) -> Mapping[str, Any]:
        return self._data
