"""Batch sizes the script cannot take: its data ran out before its own loop did.

Many scripts count their steps from their own batch size (``steps_per_epoch = n //
args.batch_size``, then ``next(it)`` that many times). tftune changes the dataset's
batch, not that count: with a larger batch the dataset holds fewer batches than the
script draws, and the script dies with ``StopIteration`` (or ``OutOfRangeError``: "End
of sequence"). A batch that ran out this way is the floor of the batches left out: a
larger one makes fewer batches still (`ran_out_batches`). A search trial that samples one
is skipped like a knob value that keeps failing (`study.objective.skip_if_dead`), and the
run says once why, and what to do instead (`note`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tftune.tuner.searchspace.space import split_knob
from tftune.tuner.study.records import FAILED_ATTR, ran_to_end

if TYPE_CHECKING:
    import optuna

    from tftune.tuner.searchspace.space import KnobValue

# What a failure says when the data ended before the script's loop did.
RAN_OUT_MARKERS = ("StopIteration", "OutOfRangeError", "End of sequence")


@dataclass(frozen=True, slots=True)
class RanOut:
    """Batches of `floor` and more are left out at knob `knob`: `trials` ran out of data."""

    knob: str
    floor: int
    trials: tuple[int, ...]
    reason: str

    def covers(self, value: KnobValue) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= self.floor

    def skip_reason(self, value: KnobValue) -> str:
        return (
            f"skipped: {self.knob}={value}: with a batch of {self.floor} the script ran out "
            f"of data (trial {', '.join(map(str, self.trials))}: {self.reason}); it seems to "
            "count its steps from its own batch size, and a larger batch makes fewer batches"
        )

    def note(self) -> str:
        """Said once in the run: why larger batches are left out, and what to do."""
        site = split_knob(self.knob)[0]
        return (
            f"batches of {self.floor} and more at {site} are left out: trial "
            f"{self.trials[0]} ran out of data ({self.reason}). The script seems to count its "
            "steps from its own batch size; tftune changes the dataset's batch, not that "
            "count. To try a larger batch, tune with the script's own option (say "
            f"`-- --batch-size {self.floor}`); to spend no trial on it, fix the batch with "
            "--batch-size"
        )


def ran_out(reason: str) -> bool:
    """The failure says the data ended before the script's loop did."""
    return any(m in reason for m in RAN_OUT_MARKERS)


def ran_out_batches(trials: Sequence[optuna.trial.FrozenTrial]) -> dict[str, RanOut]:
    """Batch knob -> what is left out: the smallest batch that ran out of data in a trial
    that ran (skipped trials are not runs), unless a trial with that batch or a larger one
    ran through, which says the script can take it."""
    ran = ran_to_end(trials)
    found: dict[str, RanOut] = {}
    for t in ran:
        reason = str(t.user_attrs.get("reason") or "")
        if not t.user_attrs.get(FAILED_ATTR) or not ran_out(reason):
            continue
        for knob, value in _batches(t.params):
            was = found.get(knob)
            floor = value if was is None else min(was.floor, value)
            numbers = (*was.trials, t.number) if was is not None else (t.number,)
            found[knob] = RanOut(knob, floor, numbers, reason)
    for t in ran:
        if t.user_attrs.get(FAILED_ATTR):
            continue
        for knob, value in _batches(t.params):
            if knob in found and found[knob].covers(value):
                del found[knob]  # it ran through: the script can take that batch
    return found


def ran_out_hit(
    trials: Sequence[optuna.trial.FrozenTrial], params: Mapping[str, KnobValue]
) -> tuple[RanOut, KnobValue] | None:
    """The left-out batch `params` samples, if any."""
    left_out = ran_out_batches(trials)
    return next(
        ((left_out[k], v) for k, v in params.items() if k in left_out and left_out[k].covers(v)),
        None,
    )


def _batches(params: Mapping[str, KnobValue]) -> list[tuple[str, int]]:
    return [
        (k, v)
        for k, v in params.items()
        if split_knob(k)[1] == "batch_size" and isinstance(v, int) and not isinstance(v, bool)
    ]
