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

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class BreakEven:
    tuning_s: float
    as_written_examples_per_s: float | None
    tuned_examples_per_s: float | None

    @property
    def saved_fraction(self) -> float | None:
        """The share of training time the winner saves (None: no gain was measured)."""
        r0, r1 = self.as_written_examples_per_s, self.tuned_examples_per_s
        if not r0 or not r1 or r1 <= r0:
            return None
        return 1.0 - r0 / r1

    @property
    def saved_s_per_hour(self) -> float | None:
        f = self.saved_fraction
        return None if f is None else 3600.0 * f

    @property
    def pays_off_after_s(self) -> float | None:
        """Seconds of training (at the as-written pace) that pay the tuning run back."""
        f = self.saved_fraction
        return None if f is None else self.tuning_s / f

    def to_json(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 2)

        return {
            "tuning_s": r(self.tuning_s),
            "as_written_examples_per_s": r(self.as_written_examples_per_s),
            "tuned_examples_per_s": r(self.tuned_examples_per_s),
            "saved_s_per_hour": r(self.saved_s_per_hour),
            "pays_off_after_s": r(self.pays_off_after_s),
        }
