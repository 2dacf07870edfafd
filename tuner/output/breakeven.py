"""When tuning pays for itself: the tuning run's cost against the winner's saving.

Tuning spends the user's machine time; the winner gives it back on every step after.
At the measured rates (the script as written `r0`, the winner `r1`, both from the final
round where they ran there), the same examples take ``r0 / r1`` of the time, so an hour
of training as written saves ``3600 * (1 - r0 / r1)`` seconds, and the tuning run's
``tuning_s`` is paid back after ``tuning_s / (1 - r0 / r1)`` seconds of training. No gain
(the winner is the script as written, or not faster): nothing is saved and it never pays
back, which the JSON says with ``null``.
"""

from __future__ import annotations

from tftune.core.tuning_run import BreakEven


def saved_fraction(as_written: float | None, tuned: float | None) -> float | None:
    """The share of training time the winner saves (None: no gain was measured)."""
    if not as_written or not tuned or tuned <= as_written:
        return None
    return 1.0 - as_written / tuned


def break_even(
    tuning_s: float, as_written_examples_per_s: float | None, tuned_examples_per_s: float | None
) -> BreakEven:
    """The break-even of a tuning run that took `tuning_s` (the tuning document's
    ``break_even``, rounded as it writes it)."""
    f = saved_fraction(as_written_examples_per_s, tuned_examples_per_s)
    return BreakEven(
        tuning_s=round(tuning_s, 2),
        as_written_examples_per_s=_r(as_written_examples_per_s),
        tuned_examples_per_s=_r(tuned_examples_per_s),
        saved_s_per_hour=_r(None if f is None else 3600.0 * f),
        pays_off_after_s=_r(None if f is None else tuning_s / f),
    )


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
