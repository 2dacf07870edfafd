"""The analysis document's steps: how many and how long (`StepSummary`), and each step's
time by category (`per_step`: `StepRow`, held column by column as a `StepTable`).

Part types of `core.analysis_document.AnalysisDocument`, as `core.analysis_trace`'s are:
frozen, `to_json` writes what docs/json.md describes, `read` reads one back strictly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, overload

from tftune.core.document_reading import Reader
from tftune.core.userfiles import JsonRows

_STEP_TIMES = ("start_ms", "duration_ms")


@cache
def _part_keys(categories: tuple[str, ...]) -> tuple[str, ...]:
    """A step row's keys of its parts: `<category>_ms`."""
    return tuple(f"{c}_ms" for c in categories)


@dataclass(frozen=True, slots=True)
class StepSummary:
    """How many steps, and their mean, median and p90 time (`steps`); times are `None`
    without steps."""

    count: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean_ms": self.mean_ms,
            "p50_ms": self.p50_ms,
            "p90_ms": self.p90_ms,
        }

    @classmethod
    def read(cls, r: Reader) -> StepSummary:
        return cls(
            count=r.integer("count", required=True, nullable=False) or 0,
            mean_ms=r.number("mean_ms"),
            p50_ms=r.number("p50_ms"),
            p90_ms=r.number("p90_ms"),
        )


@dataclass(frozen=True, slots=True)
class StepRow:
    """One step of `per_step`: its number, start and duration, and its disjoint parts
    (category, ms), in the document's order, that sum to the duration."""

    step: int
    start_ms: float | None
    duration_ms: float | None
    parts: tuple[tuple[str, float | None], ...]
    host_to_device_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "step": self.step,
            "start_ms": self.start_ms,
            "duration_ms": self.duration_ms,
        }
        if self.parts:  # tens of thousands of rows: the keys are made once per order
            categories, ms = zip(*self.parts, strict=True)
            out.update(zip(_part_keys(categories), ms, strict=True))
        out["host_to_device_bytes"] = self.host_to_device_bytes
        return out

    @classmethod
    def read(cls, r: Reader) -> StepRow:
        parts = tuple(
            (key[: -len("_ms")], r.number(key))
            for key in r.fields()
            if key.endswith("_ms") and key not in _STEP_TIMES
        )
        return cls(
            step=r.required_integer("step"),
            start_ms=r.number("start_ms"),
            duration_ms=r.number("duration_ms"),
            parts=parts,
            host_to_device_bytes=r.integer("host_to_device_bytes"),
        )


@dataclass(frozen=True, slots=True, eq=False)
class StepTable(Sequence[StepRow]):
    """`per_step` as its producer has it, column by column: each column holds one value
    per step, and a `StepRow` is made only where one is asked for (`table[i]`), so that
    tens of thousands of steps cost a tuple per column rather than objects per step. It
    equals any sequence of the same rows (a document read back holds a tuple of them),
    and `to_json` writes the rows `StepRow.to_json` would."""

    step: tuple[int, ...]
    start_ms: tuple[float | None, ...]
    duration_ms: tuple[float | None, ...]
    parts: tuple[tuple[str, tuple[float | None, ...]], ...]  # (category, its ms per step)
    host_to_device_bytes: tuple[int | None, ...]

    def __len__(self) -> int:
        return len(self.step)

    @overload
    def __getitem__(self, index: int) -> StepRow: ...

    @overload
    def __getitem__(self, index: slice) -> StepTable: ...

    def __getitem__(self, index: int | slice) -> StepRow | StepTable:
        if isinstance(index, slice):
            return StepTable(
                self.step[index],
                self.start_ms[index],
                self.duration_ms[index],
                tuple((c, ms[index]) for c, ms in self.parts),
                self.host_to_device_bytes[index],
            )
        return StepRow(
            self.step[index],
            self.start_ms[index],
            self.duration_ms[index],
            tuple((c, ms[index]) for c, ms in self.parts),
            self.host_to_device_bytes[index],
        )

    def __iter__(self) -> Iterator[StepRow]:
        categories = tuple(c for c, _ in self.parts)
        parts = [ms for _, ms in self.parts]
        rows = zip(
            self.step,
            self.start_ms,
            self.duration_ms,
            zip(*parts, strict=True) if parts else [()] * len(self.step),
            self.host_to_device_bytes,
            strict=True,
        )
        for s, t, d, ms, b in rows:
            yield StepRow(s, t, d, tuple(zip(categories, ms, strict=True)), b)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def json_rows(self) -> JsonRows:
        """The rows `to_json` writes, held as these columns (`JsonRows`)."""
        parts = _part_keys(tuple(c for c, _ in self.parts))
        keys = ("step", *_STEP_TIMES, *parts, "host_to_device_bytes")
        columns = (self.step, self.start_ms, self.duration_ms, *(ms for _, ms in self.parts))
        try:
            return JsonRows(keys, (*columns, self.host_to_device_bytes))
        except ValueError:
            raise ValueError("a StepTable's columns must have one value per step") from None

    def to_json(self) -> list[dict[str, Any]]:
        return list(self.json_rows())


def steps_json(rows: Sequence[StepRow]) -> list[dict[str, Any]]:
    """`per_step` as the JSON writes it, from a `StepTable` or any rows."""
    if isinstance(rows, StepTable):
        return rows.to_json()
    return [s.to_json() for s in rows]


def steps_rows(rows: Sequence[StepRow]) -> Sequence[dict[str, Any]]:
    """`steps_json`'s rows, column by column where they are held so (`JsonRows`: what
    `core.userfiles.json_text` writes without an object per row)."""
    return rows.json_rows() if isinstance(rows, StepTable) else steps_json(rows)
