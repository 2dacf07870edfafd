"""Whether a faster config learns no worse: the training loss each run reached, compared
at equal training time.

A larger batch makes fewer optimizer updates per example, and 16-bit math changes the
numerics: a config that trains faster may reach a higher loss in the same time. Three
types cross the boundaries, each with its JSON both ways:

- `LossCurve`: one run's training loss against its training time (the child reads the
  loss as the script computes it; the parent times it with the training-time clock the
  windows use). It crosses from the trial runner to the study.
- `LearningRateScale`: the optimizer's learning rate scaled with a batch change (the
  linear rule or its square root, with a warm-up ramp above `WARMUP_ABOVE`). It goes to
  the child in a `Config` and to the user as code.
- `LearningCheck`: the final round's verdict on the winner (its loss at equal training
  time against the script as written's, with the noise), carried by the tuning
  document for both reports.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader

# The loss at a training time is the mean of the samples over the last LAST_PART of it:
# one batch's loss varies by its examples, the mean over a stretch does not.
LAST_PART = 0.25
# A config learns worse only when every run of it ends above every run of the script as
# written AND its mean is higher by more than this share and more than the runs' spread.
LOSS_TOLERANCE = 0.02
# A scaled learning rate ramps up linearly over this many optimizer updates where the
# scale is above WARMUP_ABOVE (Goyal et al. 2017: the linear rule with a warm-up). Short:
# the check compares a trial's first seconds, where a long ramp is most of the run, and
# a batch grows at most 4x here.
WARMUP_STEPS = 20
WARMUP_ABOVE = 2.0
# The place of Keras fit's own loss (its batch logs), beside GradientTape's places.
FIT_LOSS = "fit"
# A curve keeps at most this many points: equal stretches of training averaged.
CURVE_POINTS = 400


class LossVerdict(enum.Enum):
    """The winner's loss at equal training time against the script as written's."""

    LOWER = "lower"
    EQUAL = "equal within the noise"
    HIGHER = "higher"
    NOT_CHECKED = "not checked"


class ScaleRule(enum.Enum):
    """How the learning rate follows a batch change."""

    LINEAR = "linear"  # by the batch ratio
    SQRT = "sqrt"  # by its square root

    def factor(self, ratio: float) -> float:
        return ratio if self is ScaleRule.LINEAR else math.sqrt(ratio)


@dataclass(frozen=True, slots=True)
class LossCurve:
    """One run's training loss: (training time in s, loss) points, in time order."""

    points: tuple[tuple[float, float], ...]
    source: str  # FIT_LOSS: Keras' batch logs; "tape": the loss given to GradientTape
    sites: int = 1  # the places whose losses were read (two: a GAN, say)

    @property
    def span_s(self) -> float:
        return self.points[-1][0] if self.points else 0.0

    def loss_at(self, end_s: float, part: float = LAST_PART) -> float | None:
        """The mean loss over the last `part` of `end_s` seconds of training; None where
        no finite sample falls there."""
        start = end_s * (1.0 - part)
        values = [v for t, v in self.points if start <= t <= end_s and math.isfinite(v)]
        return sum(values) / len(values) if values else None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "sites": self.sites,
            "points": [[round(t, 4), v] for t, v in self.points],
        }

    @classmethod
    def from_reader(cls, r: Reader) -> LossCurve:
        points = []
        for i, raw in enumerate(r.items("points", required=True)):
            if not (isinstance(raw, list) and len(raw) == 2 and all(_number(x) for x in raw)):
                raise r.error(f"points[{i}]", "must be [training s, loss]")
            points.append((float(raw[0]), float(raw[1])))
        return cls(tuple(points), r.required_string("source"), r.required_integer("sites"))


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def thinned(
    points: Sequence[tuple[float, float]], most: int = CURVE_POINTS
) -> tuple[tuple[float, float], ...]:
    """`points` averaged in consecutive groups down to at most `most` points."""
    if len(points) <= most:
        return tuple(points)
    size = math.ceil(len(points) / most)
    out = []
    for i in range(0, len(points), size):
        group = points[i : i + size]
        out.append((group[-1][0], sum(v for _, v in group) / len(group)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class LearningRateScale:
    """The optimizer's learning rate scaled for a batch change."""

    rule: ScaleRule
    factor: float
    batch_from: int
    batch_to: int
    warmup_steps: int = 0  # a linear ramp from the rate as written (0: none)

    @classmethod
    def for_batch(cls, rule: ScaleRule, batch_from: int, batch_to: int) -> LearningRateScale:
        factor = rule.factor(batch_to / batch_from)
        warmup = WARMUP_STEPS if factor > WARMUP_ABOVE else 0
        return cls(rule, factor, batch_from, batch_to, warmup)

    def describe(self) -> str:
        ramp = f", ramped up over {self.warmup_steps} updates" if self.warmup_steps else ""
        return (
            f"learning rate x{self.factor:.3g} ({self.rule.value} rule, batch "
            f"{self.batch_from} -> {self.batch_to}{ramp})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule.value,
            "factor": self.factor,
            "batch_from": self.batch_from,
            "batch_to": self.batch_to,
            "warmup_steps": self.warmup_steps,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> LearningRateScale:
        rule = r.required_string("rule")
        if rule not in {s.value for s in ScaleRule}:
            raise r.error("rule", f"must be one of {', '.join(s.value for s in ScaleRule)}")
        factor = r.required_number("factor")
        if not factor > 0:
            raise r.error("factor", "must be above 0")
        return cls(
            ScaleRule(rule),
            factor,
            r.required_integer("batch_from"),
            r.required_integer("batch_to"),
            r.integer("warmup_steps") or 0,
        )


@dataclass(frozen=True, slots=True)
class LossRuns:
    """One config's loss at equal training time, run by run."""

    label: str  # "as written", "the winner", "the winner, learning rate x4 (linear)"
    losses: tuple[float, ...]
    scale: LearningRateScale | None = None

    @property
    def mean(self) -> float:
        return sum(self.losses) / len(self.losses)

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "losses": list(self.losses),
            "scale": self.scale.to_json() if self.scale is not None else None,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> LossRuns:
        losses = []
        for i, raw in enumerate(r.items("losses", required=True)):
            if not _number(raw):
                raise r.error(f"losses[{i}]", "must be a number")
            losses.append(float(raw))
        scale = r.obj("scale")
        return cls(
            r.required_string("label"),
            tuple(losses),
            LearningRateScale.from_reader(scale) if scale is not None else None,
        )


def compare_losses(base: Sequence[float], other: Sequence[float]) -> tuple[LossVerdict, float]:
    """(`other`'s verdict against `base`, the noise it had to clear as a share of base's
    mean): higher or lower only when every run of one lies beyond every run of the other
    and the means differ by more than the noise (`LOSS_TOLERANCE`, or the runs' own
    spread where that is larger)."""
    mb, mo = sum(base) / len(base), sum(other) / len(other)
    scale = abs(mb) or 1.0
    spreads = [(max(xs) - min(xs)) / scale for xs in (base, other) if len(xs) > 1]
    noise = max([LOSS_TOLERANCE, *spreads])
    if min(other) > max(base) and (mo - mb) / scale > noise:
        return LossVerdict.HIGHER, noise
    if max(other) < min(base) and (mb - mo) / scale > noise:
        return LossVerdict.LOWER, noise
    return LossVerdict.EQUAL, noise


@dataclass(frozen=True, slots=True)
class LearningCheck:
    """The learning check of the winner: its loss at equal training time against the
    script as written's, and the scaled learning rates tried where a batch change
    learned worse."""

    verdict: LossVerdict
    changes: tuple[str, ...]  # what in the winner can change learning ("batch 64 -> 256")
    equal_time_s: float | None = None  # the training time both were compared at
    as_written: LossRuns | None = None
    winner: LossRuns | None = None
    tried: tuple[LossRuns, ...] = ()  # the winner with a scaled learning rate
    noise: float | None = None  # the share a difference had to clear
    reason: str | None = None  # why not checked
    # The winner by examples/s alone, where it learned worse and another was recommended.
    throughput_only: int | None = None  # its trial number
    optimizers: tuple[OptimizerSeen, ...] = ()  # what a scaled learning rate applies to

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "changes": list(self.changes),
            "equal_time_s": self.equal_time_s,
            "as_written": self.as_written.to_json() if self.as_written else None,
            "winner": self.winner.to_json() if self.winner else None,
            "tried": [t.to_json() for t in self.tried],
            "noise": self.noise,
            "reason": self.reason,
            "throughput_only": self.throughput_only,
            "optimizers": [o.to_json() for o in self.optimizers],
        }

    @classmethod
    def from_reader(cls, r: Reader) -> LearningCheck:
        verdict = r.required_string("verdict")
        if verdict not in {v.value for v in LossVerdict}:
            raise r.error("verdict", f"must be one of {', '.join(v.value for v in LossVerdict)}")
        runs = {k: r.obj(k) for k in ("as_written", "winner")}
        return cls(
            LossVerdict(verdict),
            r.strings("changes"),
            r.number("equal_time_s"),
            LossRuns.from_reader(runs["as_written"]) if runs["as_written"] else None,
            LossRuns.from_reader(runs["winner"]) if runs["winner"] else None,
            tuple(LossRuns.from_reader(t) for t in r.objects("tried")),
            r.number("noise"),
            r.string("reason"),
            r.integer("throughput_only"),
            tuple(OptimizerSeen.from_reader(o) for o in r.objects("optimizers")),
        )


@dataclass(frozen=True, slots=True)
class OptimizerSeen:
    """A Keras optimizer the script built: where, and its learning rate as written."""

    site: str | None  # `file:line` of the script's call, relative to its folder
    name: str  # the optimizer's class, e.g. "Adam"
    learning_rate: float | None  # None: a schedule or something else
    schedule: str | None = None  # the schedule's class where the rate is one

    def to_json(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "name": self.name,
            "learning_rate": self.learning_rate,
            "schedule": self.schedule,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> OptimizerSeen:
        return cls(
            r.string("site"),
            r.required_string("name"),
            r.number("learning_rate"),
            r.string("schedule"),
        )
