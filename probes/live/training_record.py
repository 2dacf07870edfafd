"""A run's training-time record (`core.training.TrainingTime`), made from what an epoch
start costs it (`training_time_of`), and the clock file beside a `tftune profile` trace
(`CLOCK_FILE`), which `tftune analyze` reads.

The figures are `probes.live.training_time`'s. Pure Python: no TensorFlow here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from tftune.core.errors import UserError
from tftune.core.training import EpochCost, TrainingTime
from tftune.core.userfiles import json_text, write_text_atomic
from tftune.probes.live.epoch_stall import PipelineStage, diagnose

# Beside a `tftune profile` trace, in its run folder: the step clock's figures of the
# whole profiled run (`write_clock_file`), which `tftune analyze` reads.
CLOCK_FILE = "tftune-clock.json"
CLOCK_SCHEMA = 1


def training_time_of(
    cost: EpochCost | None,
    typical_step_s: float,
    excluded_s: float,
    preamble_s: float | None,
    dropped: bool,
    chain: Sequence[PipelineStage] = (),
) -> TrainingTime:
    """A run's `TrainingTime` from its epoch cost (None: no epoch start seen), its figures
    rounded as the JSON writes them and its stall diagnosed (`epoch_stall.diagnose`)."""
    if cost is None:
        return TrainingTime(_r(preamble_s), _r(excluded_s) or 0.0, first_window_dropped=dropped)
    share = cost.share(typical_step_s) if cost.steps_per_epoch else None
    return TrainingTime(
        _r(preamble_s),
        _r(excluded_s) or 0.0,
        _r(cost.stall_s),
        cost.steps_per_epoch,
        cost.epochs_seen,
        _r(share, 4),
        dropped,
        diagnose(cost.stall_s, cost.steps_per_epoch, share, chain, cost.rebuilt, cost.made_s),
    )


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


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
    try:
        return TrainingTime.from_json(data.get("training"), source=CLOCK_FILE)
    except UserError:
        return None
