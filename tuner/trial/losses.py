"""A run's training loss against its training time, from the child's ``loss`` events.

The child logs the loss as the script computes it (tuner/child/loss_log.py): each sample
is the child's wall clock, the loss and the place that computed it. A sample is timed by
the training-time clock the windows use (`PassTimeline.step_times`): the training time
up to the last training step delivered before it, so other passes (validation) and the
preamble do not count, and a stall does. The curve starts at the first training request.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from tftune.core.learning import FIT_LOSS, LossCurve, thinned
from tftune.core.units import NS_PER_S
from tftune.probes.live.clock import StepRecord
from tftune.probes.live.clock_events import ChildEvent, LossSamples
from tftune.probes.live.training_time import PassTimeline

NO_LOSS = (
    "no loss was read: the script's loss is given neither to Keras fit nor to GradientTape.gradient"
)


def loss_curve(
    events: Sequence[ChildEvent], records: Sequence[StepRecord], timeline: PassTimeline
) -> tuple[LossCurve | None, str | None]:
    """(the run's loss curve, None) or (None, why it has none)."""
    samples: list[tuple[int, float, int]] = []
    places: list[str] = []
    unread: str | None = None
    for e in events:
        if isinstance(e, LossSamples):
            samples += e.samples
            places = list(e.places or places)
            unread = e.unread or unread
    if unread is not None:
        return None, f"the loss could not be read: {unread}"
    if len(places) > 1:
        return None, (
            f"the script differentiates {len(places)} losses (a GAN, say): which one "
            "measures learning is not told apart"
        )
    if not samples or not records:
        return None, NO_LOSS
    times = timeline.step_times(records[0].request_ns, records)
    elapsed = list(itertools.accumulate(times))
    delivered = [r.deliver_ns for r in records]
    points = []
    for at_ns, loss, _ in sorted(samples):
        i = bisect.bisect_right(delivered, at_ns) - 1
        if i >= 0:
            points.append((elapsed[i] / NS_PER_S, float(loss)))
    if not points:
        return None, NO_LOSS
    return LossCurve(
        thinned(points), FIT_LOSS if places == [FIT_LOSS] else "tape", len(places)
    ), None
