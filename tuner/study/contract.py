"""The study's contract: what goes in, what it calls, what comes out.

`Runner` is the one extension point (the measured trial runner, or a test's fake): its
docstring says who calls it and what it must return. A run is measured as ONE type,
`tftune.tuner.measurement.Measurement`, and ends in ONE of the `TrialState`s of
`tftune.core.vocabulary`. `StudySettings` is what the caller asks for; `TrialRecord` is
one finished trial, frozen (the progress display and the emitter read it, the latter
from other threads while workers run); `StudyOutcome` is everything the study measured,
frozen for the emitter. No Optuna here: it is imported where a study is opened. The
option vocabulary (`Objective` of `tuner.options`; `AUTO_TRIALS`, `DEFAULT_SEED`,
`DEFAULT_TRIALS`, `Trials` of `tuner.option_defaults`) is re-exported here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tftune.core.learning import LearningCheck, LossCurve, OptimizerSeen
from tftune.core.trial_notes import OutputPrecisionFinding
from tftune.core.vocabulary import TrialState
from tftune.tuner.option_defaults import AUTO_TRIALS as AUTO_TRIALS
from tftune.tuner.option_defaults import DEFAULT_SEED as DEFAULT_SEED
from tftune.tuner.option_defaults import DEFAULT_TRIALS as DEFAULT_TRIALS
from tftune.tuner.option_defaults import Trials as Trials
from tftune.tuner.options import Objective as Objective

if TYPE_CHECKING:
    from tftune.core.failures import CrashSummary
    from tftune.core.training import TrainingTime
    from tftune.core.tuning_trials import Instability
    from tftune.tuner.measurement import Measurement
    from tftune.tuner.searchspace.config import Config
    from tftune.tuner.searchspace.space import KnobValue

# What the study's objective values are, by objective (the values `objective.store`
# returns, in order), named in the study for optuna-dashboard (`opening.open_study`).
METRIC_NAMES: Mapping[Objective, tuple[str, ...]] = {
    Objective.THROUGHPUT: ("examples/s",),
    Objective.GPU_UTIL: ("utilization",),
    Objective.BOTH: ("examples/s", "utilization"),
}

# ``--trials auto`` (the default, `tuner.options.AUTO_TRIALS`): at most DEFAULT_TRIALS
# (`tuner.option_defaults`), and the search stops once AUTO_PATIENCE trials in a row gained
# nothing beyond the noise (`stopping.stop_reason`).
AUTO_PATIENCE = 4


def trial_budget(trials: Trials) -> tuple[int, int | None]:
    """``--trials`` as (the most trials the study holds, the auto-stop patience or None)."""
    if trials == AUTO_TRIALS:
        return DEFAULT_TRIALS, AUTO_PATIENCE
    return int(trials), None


# The final round re-measures this many of the best distinct trials, beside the
# as-written and AUTOTUNE baselines, and picks the winner from it.
FINAL_CANDIDATES = 2
# A close call (the final round's best gains at least `gains.MIN_GAIN` but less than the
# noise demands) is decided by this many more runs of it and of the script as written,
# alternately (`close_call.decide_close_call`).
DECIDE_PAIRS = 2


class Role(str, enum.Enum):
    """Why a trial ran."""

    AS_WRITTEN = "as_written"
    AUTOTUNE = "autotune"
    HEURISTIC = "heuristic"
    GUIDED = "guided"
    SEARCH = "search"
    CONFIRM = "confirm"


class Mode(str, enum.Enum):
    """What a trial measures: the script training (``train``), the dataset iterated
    without training (``pipeline_only``), or training on cached data (``model_only``)."""

    TRAIN = "train"
    PIPELINE_ONLY = "pipeline_only"
    MODEL_ONLY = "model_only"


RepeatCallback = Callable[[int, float], bool]


class Runner:
    """Runs the user's script once under a config and measures it.

    Contract: the study calls `measure` once per trial, sequentially, from one thread.
    `measure` must not raise for a failing script: a crash, OOM, stall or NaN loss is a
    `Measurement` with ``state=TrialState.FAILED``, a reason and, where it has them, the
    end of the script's stderr and its exit status (the study reads the crash from them,
    `Measurement.crash`). After each measured repeat it calls ``on_repeat(index,
    examples_per_s)``; when that returns False it stops the script and returns
    ``state=TrialState.PRUNED`` with the repeats so far. ``mode`` selects what is measured
    (`Mode`); a runner that cannot measure a mode returns FAILED with the reason.
    """

    gpu_visible: bool = False

    def measure(
        self,
        config: Config,
        *,
        mode: Mode = Mode.TRAIN,
        on_repeat: RepeatCallback | None = None,
    ) -> Measurement:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class TrialRecord:
    """One finished trial as the emitter and the progress display see it."""

    number: int
    role: Role
    state: TrialState
    params: Mapping[str, KnobValue]
    description: str
    examples_per_s: float | None = None
    utilization: float | None = None
    spread: float | None = None
    input_wait_share: float | None = None
    repeats: tuple[float, ...] = ()
    reason: str | None = None
    wall_s: float = 0.0
    feasible: bool = False
    notes: tuple[str, ...] = ()
    findings: tuple[OutputPrecisionFinding, ...] = ()  # its 16-bit output layers
    stderr_tail: str = ""  # a failed trial's, bounded (`crashes.bounded_tail`)
    crash: CrashSummary | None = None  # what a failed trial's stderr says
    training: TrainingTime | None = None  # how its training time was told apart
    # The learning check's: the run's loss curve (or why none), the optimizers it built.
    loss: LossCurve | None = None
    loss_note: str | None = None
    optimizers: tuple[OptimizerSeen, ...] = ()

    def same_config(self, other: TrialRecord) -> bool:
        """Whether the two trials measured one config (their params are equal), whatever
        their numbers and roles."""
        return dict(self.params) == dict(other.params)


@dataclass(frozen=True, slots=True)
class GuidedHint:
    """What a profile of the script as written says (`tftune analyze` on a short
    `tftune profile`): the input share and the call sites of the bottleneck stages
    (`baselines.guided_params` reads it)."""

    input_share: float | None
    bottleneck_sites: tuple[str, ...] = ()
    source: str = "profile"
    # When the step, not the input, is the limit: the analysis' next moves for the step
    # (`probes.advice.analysis.next_moves`), in words, best first.
    next_moves: tuple[str, ...] = ()
    # The bound analysis found the pipeline alone far faster than the model alone
    # (`searchspace.guided.with_bounds`): the model is the limit, whatever the profile's wait.
    model_bound: bool = False


@dataclass(frozen=True, slots=True)
class StudySettings:
    objective: Objective = Objective.THROUGHPUT
    n_trials: int = DEFAULT_TRIALS
    # ``--trials auto``: stop once this many trials in a row gained nothing beyond the
    # noise (None: run until the study holds `n_trials`, ``--trials N``).
    patience: int | None = None
    timeout_s: float | None = None
    seed: int = DEFAULT_SEED
    guided: bool = True
    storage: str | None = None
    study_name: str = "tftune"
    confirm: bool = True
    # How many of the best distinct trials the final round re-measures beside the
    # baselines (see `round_plan.final_candidates`).
    final_candidates: int = FINAL_CANDIDATES
    # More alternating runs of a close call and the script as written (0: none).
    decide_pairs: int = DECIDE_PAIRS
    # What is tuned (script and its arguments): a study resumed for another target
    # would mix incomparable measurements, so it is refused.
    target: str = ""
    hint: GuidedHint | None = None
    # The pipeline screen's best configs (`tuner.searchspace.screen.Screen.seeds`): the first
    # search trials, after the baselines.
    seeds: tuple[Mapping[str, KnobValue], ...] = ()
    # The screen ran its pipeline configs, or found the pipeline is not the limit: the
    # #cores heuristic gets no trial of its own (`baselines.baseline_roles`).
    screened: bool = False
    # A winner that changes batch or precision must learn no worse (`study.learning_check`);
    # False with ``--objective throughput``.
    learning_check: bool = True


@dataclass(frozen=True, slots=True)
class StudyOutcome:
    """Everything `optimize` measured, frozen for the emitter."""

    study_name: str
    storage: str
    objective: Objective
    utilization_kind: str
    records: tuple[TrialRecord, ...]
    baselines: Mapping[Role, TrialRecord]
    best: TrialRecord
    best_config: Config
    confirm: TrialRecord | None  # the winner's figure from the final round
    pareto: tuple[TrialRecord, ...]
    importances: Mapping[str, float]  # empty where withheld
    wall_s: float
    ran_this_session: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The final round: role CONFIRM, `number` the trial each one re-measures.
    final: tuple[TrialRecord, ...] = ()
    # The script crashes whatever the config (`crashes.find_instability`), else None.
    instability: Instability | None = None
    # Why the search stopped where it did (`stopping`), in words.
    stop_reason: str = ""
    # The winner's learning check (`study.learning_check`), where it changes batch or precision.
    learning: LearningCheck | None = None
    # Why there are no importances (`records.importances`), in words; None where there are.
    importances_withheld: str | None = None

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in TrialState}
        for r in self.records:
            out[r.state.value] += 1
        return out
