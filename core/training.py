"""What was measured as training, as the documents hold it.

- `EpochCost`: what an epoch's start costs the training stream over a run (the step
  clock's measure, `tftune.probes.live.training_time`; the trial's windows spread it);
- `EpochStall`: an epoch-start stall named with its cause and fix
  (`tftune.probes.live.epoch_stall.diagnose`);
- `TrainingTime`: how one run's training time was told apart from the rest: a trial's
  record (the study's storage, ``trials_detail[].training``), the clock file beside a
  `tftune profile` trace and the analysis JSON's ``training``;
- `StreamSeen`: one dataset a run iterated, as the parent saw it;
- `TrainingFacts`: the tuning JSON's ``training`` (the loop, the preamble, the script
  as written's and the winner's `TrainingTime`).

The producers compute every figure and sentence, rounded as the JSON writes them; `to_json`
only serializes and `from_json` (`from_reader` inside a document) reads one back strictly.
Pure Python: no TensorFlow here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader, object_reader, share
from tftune.core.vocabulary import FALLBACK_HOW


@dataclass(frozen=True, slots=True)
class EpochCost:
    """What an epoch's start costs the training stream, measured over a run."""

    stall_s: float  # the mean extra time of an epoch's first step over a typical step
    steps_per_epoch: int | None  # None: unknown, so nothing is spread
    epochs_seen: int
    first_steps: frozenset[int]  # the epoch-start steps, by delivery time
    rebuilt: bool = False  # a later epoch iterated a dataset built anew
    # The part of `stall_s` before the first element was asked for: making the epoch's
    # iterator (and letting the last one go) and the loop's work around it; the rest is
    # the first element's wait.
    made_s: float = 0.0

    @property
    def spread(self) -> bool:
        """Whether the stall is spread over the epoch's steps."""
        return bool(self.steps_per_epoch) and self.epochs_seen > 0

    def per_step_s(self) -> float:
        """The stall's share of every step, where it is spread."""
        if not self.spread or not self.steps_per_epoch:
            return 0.0
        return self.stall_s / self.steps_per_epoch

    def period_s(self, typical_step_s: float) -> float | None:
        """An epoch's training time: its steps and its stall (None: length unknown)."""
        if not self.steps_per_epoch:
            return None
        return typical_step_s * self.steps_per_epoch + self.stall_s

    def share(self, typical_step_s: float) -> float:
        """The stall's share of an epoch's training time."""
        epoch_s = self.period_s(typical_step_s)
        if not epoch_s or typical_step_s <= 0:
            return 0.0
        return self.stall_s / epoch_s


@dataclass(frozen=True, slots=True)
class EpochStall:
    """A named epoch-start stall: its cost, cause and fix, and the sentence reports print
    (`tftune.probes.live.epoch_stall`: its causes and their words)."""

    stall_s: float  # extra time of each epoch's first step
    steps_per_epoch: int
    share: float  # of an epoch's training time
    cause: str  # one of `tftune.probes.live.epoch_stall`'s causes
    summary: str
    code: str | None
    sentence: str  # the stall, its cost and its fix in one line
    sites: tuple[str, ...] = ()  # the lines involved

    def to_json(self) -> dict[str, Any]:
        return {
            "stall_s": self.stall_s,
            "steps_per_epoch": self.steps_per_epoch,
            "share": self.share,
            "cause": self.cause,
            "summary": self.summary,
            "code": self.code,
            "sites": list(self.sites),
            "sentence": self.sentence,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> EpochStall:
        return cls(
            stall_s=r.required_number("stall_s"),
            steps_per_epoch=r.required_integer("steps_per_epoch"),
            share=r.required_number("share"),
            cause=r.required_string("cause"),
            summary=r.required_string("summary"),
            code=r.string("code"),
            sentence=r.required_string("sentence"),
            sites=r.strings("sites"),
        )


@dataclass(frozen=True, slots=True)
class TrainingTime:
    """How one run's training time was told apart from the rest. None is "not
    measured"."""

    preamble_s: float | None = None  # the script's start to its first training request
    excluded_s: float = 0.0  # other streams' passes taken out of the measured windows
    epoch_stall_s: float | None = None  # an epoch's first-step stall (None: no epoch seen)
    steps_per_epoch: int | None = None
    epochs_seen: int = 0
    stall_share: float | None = None  # the stall's share of an epoch's training time
    first_window_dropped: bool = False  # it drained a buffer filled during warm-up
    stall: EpochStall | None = None  # the stall named, with its cause and fix

    def to_json(self) -> dict[str, Any]:
        return {
            "preamble_s": self.preamble_s,
            "excluded_s": self.excluded_s,
            "epoch_stall_s": self.epoch_stall_s,
            "steps_per_epoch": self.steps_per_epoch,
            "epochs_seen": self.epochs_seen,
            "stall_share": self.stall_share,
            "first_window_dropped": self.first_window_dropped,
            "stall": self.stall.to_json() if self.stall is not None else None,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> TrainingTime:
        stall = r.obj("stall")
        return cls(
            preamble_s=r.number("preamble_s"),
            excluded_s=r.number("excluded_s") or 0.0,
            epoch_stall_s=r.number("epoch_stall_s"),
            steps_per_epoch=r.integer("steps_per_epoch"),
            epochs_seen=r.integer("epochs_seen") or 0,
            stall_share=share(r, "stall_share"),
            first_window_dropped=bool(r.boolean("first_window_dropped")),
            stall=EpochStall.from_reader(stall) if stall is not None else None,
        )

    @classmethod
    def from_json(cls, data: object, *, source: str = "training JSON") -> TrainingTime:
        return cls.from_reader(object_reader(data, source=source))


@dataclass(frozen=True, slots=True)
class StreamSeen:
    """One stream (a dataset iterated) as the parent saw it."""

    stream: int
    site: str | None  # the call site that built its dataset
    place: str | None  # the line that iterates it (a `for`, `next`, `fit`, `adapt`...)
    elements: int
    training: bool
    how: str | None = None  # how it was told to be training

    def where(self) -> str:
        built = f"built at {self.site}" if self.site else "built in a library"
        return f"{built}, iterated at {self.place}" if self.place else built

    @property
    def busiest(self) -> bool:
        """Nothing was updated: the busiest loop stands in for training."""
        return self.training and self.how == FALLBACK_HOW

    @property
    def role(self) -> str:
        if not self.training:
            return "not training"
        return "the busiest loop (nothing updated)" if self.busiest else "training"

    def describe(self) -> str:
        return f"#{self.stream} ({self.where()}): {self.elements:,} elements, {self.role}"

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "site": self.site,
            "place": self.place,
            "elements": self.elements,
            "training": self.training,
            "how": self.how,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> StreamSeen:
        return cls(
            stream=r.required_integer("stream"),
            site=r.string("site"),
            place=r.string("place"),
            elements=r.integer("elements") or 0,
            training=bool(r.boolean("training")),
            how=r.string("how"),
        )


def _timing(r: Reader, key: str) -> TrainingTime | None:
    found = r.obj(key)
    return TrainingTime.from_reader(found) if found is not None else None


@dataclass(frozen=True, slots=True)
class TrainingFacts:
    """What a tuning run measured as training (the tuning JSON's ``training``): the loop,
    the preamble every run pays and, for the script as written and the winner (where it
    is not the script as written), what was taken out of their windows and the
    epoch-start stall."""

    loop: StreamSeen | None = None  # the stream found training
    busiest_loop: bool = False  # nothing was updated: the busiest loop stood in
    preamble_s: float | None = None
    as_written: TrainingTime | None = None
    tuned: TrainingTime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "loop": self.loop.to_json() if self.loop is not None else None,
            "busiest_loop": self.busiest_loop,
            "preamble_s": self.preamble_s,
            "as_written": self.as_written.to_json() if self.as_written is not None else None,
            "tuned": self.tuned.to_json() if self.tuned is not None else None,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> TrainingFacts:
        loop = r.obj("loop")
        return cls(
            loop=StreamSeen.from_reader(loop) if loop is not None else None,
            busiest_loop=bool(r.boolean("busiest_loop")),
            preamble_s=r.number("preamble_s"),
            as_written=_timing(r, "as_written"),
            tuned=_timing(r, "tuned"),
        )
