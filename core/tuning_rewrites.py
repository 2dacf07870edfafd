"""The rewrites a tuning run considered: what each is, whether it passed its equivalence
check, and what it gained when measured. A rewrite changes the pipeline's shape (a
cache, a moved shuffle, one iterator) or how the step is compiled (a compute switch);
both are checked, searched and reported alike.

One type crosses every boundary: the child's equivalence check writes `RewriteRow`s (a
rewrite checked, refused or not applicable), the parent measures the ones that passed
and fills in their figures, and the tuning document carries the rows
(`tftune.core.tuning_document`) for both reports. Each has its JSON both ways: `to_json`
writes what the producer stored and `from_reader` reads it strictly.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader


class RewriteKind(enum.Enum):
    """A change to a pipeline's shape or to the step's compilation."""

    CACHE = "cache"  # cache() after the last deterministic expensive stage
    ORDER = "order"  # a shuffle moved above the deterministic maps before it
    FILTER = "filter"  # a filter moved above the map before it
    ITERATOR = "iterator"  # one iterator across epochs instead of one per epoch
    VECTORIZE = "vectorize"  # map(f).batch(b) as batch(b).map(f)
    FILES = "files"  # several files read at once through an interleave
    HOST_TO_DEVICE = "host_to_device"  # the next batch copied to the device ahead
    # Compute switches: how the step is compiled.
    JIT_COMPILE = "jit_compile"  # Keras compile(jit_compile=True): XLA
    STEPS_PER_EXECUTION = "steps_per_execution"  # Keras: several steps per call
    COMPILE_STEP = "compile_step"  # an eager step compiled (tf.function; run_eagerly=False)

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    RewriteKind.CACHE: "cache() after the deterministic map",
    RewriteKind.ORDER: "shuffle moved above the map",
    RewriteKind.FILTER: "filter moved above the map",
    RewriteKind.ITERATOR: "one iterator across epochs",
    RewriteKind.VECTORIZE: "map vectorized over batches",
    RewriteKind.FILES: "files read through an interleave",
    RewriteKind.HOST_TO_DEVICE: "batches prefetched to the device",
    RewriteKind.JIT_COMPILE: "the train step compiled with XLA",
    RewriteKind.STEPS_PER_EXECUTION: "several steps per call",
    RewriteKind.COMPILE_STEP: "the eager step compiled",
}


class RewriteState(enum.Enum):
    """Where a rewrite stands in a tuning run."""

    MEASURED = "measured"  # checked, and trials ran with it
    CHECKED = "checked"  # passed its check; no trial ran with it
    REFUSED = "refused"  # its check failed, or it would not fit: never run
    NOT_APPLICABLE = "not_applicable"  # the pipeline's shape does not allow it here


@dataclass(frozen=True, slots=True)
class Equivalence:
    """An equivalence check's result: the rewritten pipeline's first `compared`
    elements against the script's own, `how` they were compared, and where they
    differed (`detail`) when they did."""

    passed: bool
    compared: int
    how: str  # "in order" | "as a multiset" | ...
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "compared": self.compared,
            "how": self.how,
            "detail": self.detail,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> Equivalence:
        passed = r.boolean("passed", required=True)
        return cls(
            bool(passed),
            r.required_integer("compared"),
            r.required_string("how"),
            r.string("detail") or "",
        )


@dataclass(frozen=True, slots=True)
class RewriteRow:
    """One rewrite a run considered, at one place of the script."""

    kind: RewriteKind
    site: str | None  # the user's line it applies at (None: the training loop's)
    param: str | None  # the study's parameter that turns it on (None: never searched)
    state: RewriteState
    reason: str  # what it does, or why it was refused or does not apply
    check: Equivalence | None = None
    cache_bytes: int | None = None  # a cache: the measured size of what it holds
    # The value of `param` it was checked at ("memory", True, 4, "xla"; None: none).
    value: str | int | bool | None = None
    # Measured (state MEASURED): the trials that ran with it, the best of those with it
    # alone (the script as written plus this rewrite) and its gain over as written, and
    # whether the winner holds it.
    trials: int = 0
    alone_examples_per_s: float | None = None
    alone_gain: float | None = None
    in_winner: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "site": self.site,
            "param": self.param,
            "state": self.state.value,
            "reason": self.reason,
            "check": self.check.to_json() if self.check is not None else None,
            "cache_bytes": self.cache_bytes,
            "value": self.value,
            "trials": self.trials,
            "alone_examples_per_s": self.alone_examples_per_s,
            "alone_gain": self.alone_gain,
            "in_winner": self.in_winner,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> RewriteRow:
        check = r.obj("check")
        return cls(
            kind=_enum(r, "kind", RewriteKind),
            site=r.string("site"),
            param=r.string("param"),
            state=_enum(r, "state", RewriteState),
            reason=r.required_string("reason"),
            check=Equivalence.from_reader(check) if check is not None else None,
            cache_bytes=r.integer("cache_bytes"),
            value=_value(r, "value"),
            trials=r.integer("trials") or 0,
            alone_examples_per_s=r.number("alone_examples_per_s"),
            alone_gain=r.number("alone_gain"),
            in_winner=bool(r.boolean("in_winner")),
        )


def _value(r: Reader, key: str) -> str | int | bool | None:
    value = r.raw(key)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    raise r.error(key, "must be a string, a whole number, true, false or null")


def _enum(r: Reader, key: str, kind: type[Any]) -> Any:
    value = r.required_string(key)
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise r.error(key, f"must be one of {allowed}, got {value!r}") from None


def rows_json(rows: Sequence[RewriteRow]) -> list[dict[str, Any]]:
    return [row.to_json() for row in rows]


def rows_from_reader(r: Reader, key: str) -> tuple[RewriteRow, ...]:
    return tuple(RewriteRow.from_reader(sub) for sub in r.objects(key))


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What the child's equivalence check run writes for the parent: a row per
    candidate so far, and the training dataset's examples per pass where it counted them
    (tf.data knew no length: `tuner.child.equivalence.pass_examples`)."""

    rows: tuple[RewriteRow, ...] = ()
    epoch_examples: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"rows": rows_json(self.rows), "epoch_examples": self.epoch_examples}

    @classmethod
    def from_reader(cls, r: Reader) -> CheckReport:
        return cls(rows_from_reader(r, "rows"), r.integer("epoch_examples"))
