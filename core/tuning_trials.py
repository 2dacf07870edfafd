"""The study's trials in the tuning document (`tftune.core.tuning_document`): each
trial's row (``trials_detail``) and the instability found among them, each with its JSON
both ways, as the other parts (`tftune.core.tuning_parts`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tftune.core.document_reading import Reader, share, trial_state
from tftune.core.failures import CrashSummary
from tftune.core.training import TrainingTime
from tftune.core.tuning_parts import (
    ABSENT,
    UNFINISHED,
    Absent,
    part_json,
    present,
    put_present,
    text_pairs,
)
from tftune.core.vocabulary import TrialState

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TrialRow:
    """One trial of the study (``trials_detail``). A failed trial keeps its stderr tail
    and its crash (`tftune.core.failures.CrashSummary`)."""

    number: int
    role: str | None = None
    state: TrialState | None = TrialState.COMPLETE  # None: not finished
    params: tuple[tuple[str, str], ...] = ()  # (knob, value as text), in document order
    description: str | None = None
    examples_per_s: float | None = None
    utilization: float | None = None
    spread: float | None = None
    reason: str | None = None  # why it was pruned or failed
    wall_s: float | None = None
    notes: tuple[str, ...] | Absent = ABSENT
    stderr_tail: str | Absent | None = ABSENT
    crash: CrashSummary | Absent | None = ABSENT
    training: TrainingTime | Absent | None = ABSENT
    value: float | Absent | None = ABSENT  # the objective, where a history plots it

    @property
    def state_word(self) -> str:
        return self.state.value if self.state is not None else "unfinished"

    def crash_lines(self) -> tuple[str, ...]:
        """The crash's key lines, else its headline."""
        crash = self.crash
        if not isinstance(crash, CrashSummary):
            return ()
        return crash.key_lines or ((crash.headline,) if crash.headline else ())

    def to_json(self) -> dict[str, Any]:
        out = {
            "number": self.number,
            "role": self.role,
            "state": self.state.value if self.state is not None else UNFINISHED,
            "params": dict(self.params),
            "description": self.description,
            "examples_per_s": self.examples_per_s,
            "utilization": self.utilization,
            "spread": self.spread,
            "reason": self.reason,
            "wall_s": self.wall_s,
        }
        put_present(out, "notes", list(self.notes) if self.notes is not ABSENT else ABSENT)
        put_present(out, "stderr_tail", self.stderr_tail)
        put_present(out, "crash", part_json(self.crash))
        put_present(out, "training", part_json(self.training))
        put_present(out, "value", self.value)
        return out

    @classmethod
    def from_reader(cls, r: Reader) -> TrialRow:
        state, params = trial_state(r), text_pairs(r.obj("params"))
        rate, utilization = r.number("examples_per_s"), share(r, "utilization")
        value = r.number("value") if present(r, "value") else ABSENT
        return cls(
            number=r.required_integer("number"),
            role=r.string("role"),
            state=state,
            params=params,
            description=r.string("description"),
            examples_per_s=rate,
            utilization=utilization,
            spread=r.number("spread"),
            reason=r.string("reason"),
            wall_s=r.number("wall_s"),
            notes=r.strings("notes") if present(r, "notes") else ABSENT,
            stderr_tail=r.string("stderr_tail") if present(r, "stderr_tail") else ABSENT,
            crash=_part(r, "crash", CrashSummary.from_reader),
            training=_part(r, "training", TrainingTime.from_reader),
            value=value,
        )


def _part(r: Reader, key: str, read: Callable[[Reader], T]) -> T | Absent | None:
    """An optional part: ABSENT where an older document has no such field."""
    if not present(r, key):
        return ABSENT
    found = r.obj(key)
    return read(found) if found is not None else None


@dataclass(frozen=True, slots=True)
class Instability:
    """The script crashes whatever the config: `crashed` of `runs` runs ended in a native
    crash, `as_written` of them the script as written, or one crash showed in configs that
    share no knob value (`unrelated`); `sentence` says so (`tftune.tuner.trial.crashes`)."""

    sentence: str
    trials: tuple[int, ...]  # the trials that crashed
    crashed: int | None = None
    runs: int | None = None
    as_written: int | None = None
    unrelated: bool | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "sentence": self.sentence,
            "crashed": self.crashed,
            "runs": self.runs,
            "as_written_crashed": self.as_written,
            "unrelated_configs": self.unrelated,
            "message": self.message,
            "trials": list(self.trials),
        }

    @classmethod
    def from_reader(cls, r: Reader) -> Instability | None:
        """None where the object has no sentence (nothing to say)."""
        sentence = r.string("sentence")
        if not sentence:
            return None
        return cls(
            sentence=sentence,
            trials=r.integers("trials"),
            crashed=r.integer("crashed"),
            runs=r.integer("runs"),
            as_written=r.integer("as_written_crashed"),
            unrelated=r.boolean("unrelated_configs"),
            message=r.string("message"),
        )
