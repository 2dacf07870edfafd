"""What the whole `tftune optimize` run adds to its study's figures in the tuning JSON
(`WholeRun`): the break-even, what was measured as training, the reproducibility record,
the pipeline screen's ranking and the rewrites considered; and the study's and the
machine's names (`StudyInfo`, `PlatformInfo`), which every tuning document has.

Each is a frozen type with its JSON both ways, as the other parts
(`tftune.core.tuning_parts`): the producers (`tftune.tuner`) compute every figure and
round it as the JSON writes it; `to_json` only serializes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader
from tftune.core.run_record import Record
from tftune.core.training import TrainingFacts
from tftune.core.tuning_parts import ABSENT, Absent, part_json, present
from tftune.core.tuning_rewrites import RewriteRow, rows_from_reader, rows_json

# The fields of the whole run (`WholeRun`), written after the study's.
WHOLE_RUN_KEYS = (
    "break_even",
    "stop_reason",
    "training",
    "record",
    "findings",
    "screen",
    "rewrites",
)


@dataclass(frozen=True, slots=True)
class BreakEven:
    """When tuning pays for itself (`tftune.tuner.output.breakeven`): the tuning run's time, the
    rates as written and tuned, what the winner saves per hour of training and after
    how much training it has paid the tuning back (None: no gain, it never does)."""

    tuning_s: float
    as_written_examples_per_s: float | None
    tuned_examples_per_s: float | None
    saved_s_per_hour: float | None
    pays_off_after_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "tuning_s": self.tuning_s,
            "as_written_examples_per_s": self.as_written_examples_per_s,
            "tuned_examples_per_s": self.tuned_examples_per_s,
            "saved_s_per_hour": self.saved_s_per_hour,
            "pays_off_after_s": self.pays_off_after_s,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> BreakEven:
        return cls(
            tuning_s=r.required_number("tuning_s"),
            as_written_examples_per_s=r.number("as_written_examples_per_s"),
            tuned_examples_per_s=r.number("tuned_examples_per_s"),
            saved_s_per_hour=r.number("saved_s_per_hour"),
            pays_off_after_s=r.number("pays_off_after_s"),
        )


@dataclass(frozen=True, slots=True)
class StudyInfo:
    """The study the run searched in (the document's ``study``)."""

    name: str | None
    storage: str | None
    seed: int | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "storage": self.storage, "seed": self.seed}

    @classmethod
    def from_reader(cls, r: Reader) -> StudyInfo:
        return cls(r.string("name"), r.string("storage"), r.integer("seed"))


@dataclass(frozen=True, slots=True)
class PlatformInfo:
    """The Python and the cores of the machine that ran the study (``platform``)."""

    python: str | None
    cores: int | None

    def to_json(self) -> dict[str, Any]:
        return {"python": self.python, "cores": self.cores}

    @classmethod
    def from_reader(cls, r: Reader) -> PlatformInfo:
        return cls(r.string("python"), r.integer("cores"))


@dataclass(frozen=True, slots=True)
class ScreenCandidate:
    """One config the pipeline screen drained (`tftune.tuner.searchspace.screen`)."""

    description: str
    examples_per_s: float | None  # None: not measured (`error` says why)
    error: str | None = None
    missing: tuple[str, ...] = ()  # call sites it could not rebuild: not ranked
    busy_cores: float | None = None  # the child's CPU time over the wall time, drained

    def to_json(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "examples_per_s": self.examples_per_s,
            "error": self.error,
            "missing": list(self.missing),
            "busy_cores": self.busy_cores,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> ScreenCandidate:
        return cls(
            description=r.required_string("description"),
            examples_per_s=r.number("examples_per_s"),
            error=r.string("error"),
            missing=r.strings("missing"),
            busy_cores=r.number("busy_cores"),
        )


@dataclass(frozen=True, slots=True)
class ScreenRanking:
    """The pipeline screen's candidates in the order they ran (the document's
    ``screen``); `reason` when none was measured."""

    wall_s: float
    reason: str | None
    candidates: tuple[ScreenCandidate, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall_s,
            "reason": self.reason,
            "candidates": [c.to_json() for c in self.candidates],
        }

    @classmethod
    def from_reader(cls, r: Reader) -> ScreenRanking:
        return cls(
            wall_s=r.required_number("wall_s"),
            reason=r.string("reason"),
            candidates=tuple(ScreenCandidate.from_reader(c) for c in r.objects("candidates")),
        )


@dataclass(frozen=True, slots=True)
class WholeRun:
    """What the whole `tftune optimize` run adds to its study's figures."""

    break_even: BreakEven | None = None
    stop_reason: str | None = None  # why the search stopped, in words
    training: TrainingFacts | None = None  # what was measured as training
    record: Record | None = None  # the reproducibility record
    findings: tuple[str, ...] = ()  # the output-layer findings of every run
    screen: ScreenRanking | Absent | None = ABSENT  # None: the screen did not run
    # Every rewrite the run considered: measured, checked, refused or not applicable.
    rewrites: tuple[RewriteRow, ...] | Absent = ABSENT

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "break_even": part_json(self.break_even),
            "stop_reason": self.stop_reason,
            "training": part_json(self.training),
            "record": part_json(self.record),
            "findings": list(self.findings),
        }
        if not isinstance(self.screen, Absent):
            out["screen"] = part_json(self.screen)
        if not isinstance(self.rewrites, Absent):
            out["rewrites"] = rows_json(self.rewrites)
        return out

    @classmethod
    def from_reader(cls, r: Reader) -> WholeRun | None:
        """The run's part of a top-level reader, None where the document has none."""
        if not any(present(r, key) for key in WHOLE_RUN_KEYS):
            return None
        break_even, training = r.obj("break_even"), r.obj("training")
        record, screen = r.obj("record"), r.obj("screen")
        return cls(
            break_even=BreakEven.from_reader(break_even) if break_even is not None else None,
            stop_reason=r.string("stop_reason"),
            training=TrainingFacts.from_reader(training) if training is not None else None,
            record=Record.from_reader(record) if record is not None else None,
            findings=r.strings("findings"),
            screen=(
                (ScreenRanking.from_reader(screen) if screen is not None else None)
                if present(r, "screen")
                else ABSENT
            ),
            rewrites=rows_from_reader(r, "rewrites") if present(r, "rewrites") else ABSENT,
        )
