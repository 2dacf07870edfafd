"""A run's training-time record: what an epoch start costs it (`EpochCost`), and how its
training time was told apart from the rest (`TrainingTime`: a trial's record in the tuning
JSON, and `CLOCK_FILE` beside a `tftune profile` trace, which `tftune analyze` reads).

The figures are `probes.live.training_time`'s; this module holds them and their JSON. Pure
Python: no TensorFlow here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tftune.core.userfiles import json_text, write_text_atomic
from tftune.probes.live.epoch_stall import EpochStall, PipelineStage, diagnose

# Beside a `tftune profile` trace, in its run folder: the step clock's figures of the
# whole profiled run (`write_clock_file`), which `tftune analyze` reads.
CLOCK_FILE = "tftune-clock.json"
CLOCK_SCHEMA = 1


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
class TrainingTime:
    """How one run's training time was told apart from the rest: its record in a
    trial's measurement and in the tuning JSON. None is "not measured"."""

    preamble_s: float | None = None  # the script's start to its first training request
    excluded_s: float = 0.0  # other streams' passes taken out of the measured windows
    epoch_stall_s: float | None = None  # an epoch's first-step stall (None: no epoch seen)
    steps_per_epoch: int | None = None
    epochs_seen: int = 0
    stall_share: float | None = None  # the stall's share of an epoch's training time
    first_window_dropped: bool = False  # it drained a buffer filled during warm-up
    stall: EpochStall | None = None  # the stall named, with its cause and fix

    @staticmethod
    def of(
        cost: EpochCost | None,
        typical_step_s: float,
        excluded_s: float,
        preamble_s: float | None,
        dropped: bool,
        chain: Sequence[PipelineStage] = (),
    ) -> TrainingTime:
        if cost is None:
            return TrainingTime(preamble_s, excluded_s, first_window_dropped=dropped)
        share = cost.share(typical_step_s) if cost.steps_per_epoch else None
        return TrainingTime(
            preamble_s,
            excluded_s,
            cost.stall_s,
            cost.steps_per_epoch,
            cost.epochs_seen,
            share,
            dropped,
            diagnose(cost.stall_s, cost.steps_per_epoch, share, chain, cost.rebuilt, cost.made_s),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "preamble_s": _r(self.preamble_s),
            "excluded_s": _r(self.excluded_s),
            "epoch_stall_s": _r(self.epoch_stall_s),
            "steps_per_epoch": self.steps_per_epoch,
            "epochs_seen": self.epochs_seen,
            "stall_share": _r(self.stall_share, 4),
            "first_window_dropped": self.first_window_dropped,
            "stall": self.stall.to_json() if self.stall is not None else None,
        }

    @staticmethod
    def from_json(raw: object) -> TrainingTime | None:
        if not isinstance(raw, dict):
            return None
        return TrainingTime(
            preamble_s=_f(raw.get("preamble_s")),
            excluded_s=_f(raw.get("excluded_s")) or 0.0,
            epoch_stall_s=_f(raw.get("epoch_stall_s")),
            steps_per_epoch=int(raw["steps_per_epoch"]) if raw.get("steps_per_epoch") else None,
            epochs_seen=int(raw.get("epochs_seen") or 0),
            stall_share=_f(raw.get("stall_share")),
            first_window_dropped=bool(raw.get("first_window_dropped")),
            stall=EpochStall.from_json(raw.get("stall")),
        )


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _f(x: object) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def write_clock_file(run_dir: str | os.PathLike[str], training: TrainingTime) -> Path:
    """The profiled run's step-clock figures beside its trace (`CLOCK_FILE`), atomically."""
    data = {"schema": CLOCK_SCHEMA, "training": training.to_json()}
    path = Path(run_dir) / CLOCK_FILE
    write_text_atomic(path, json_text(data))
    return path


def read_clock_file(run_dir: str | os.PathLike[str]) -> TrainingTime | None:
    """The step-clock figures beside a profile (None where there are none, or they are
    unreadable: the trace stands alone)."""
    try:
        data = json.loads((Path(run_dir) / CLOCK_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != CLOCK_SCHEMA:
        return None
    return TrainingTime.from_json(data.get("training"))
