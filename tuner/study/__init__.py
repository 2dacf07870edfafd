"""The Optuna study behind `tftune optimize`.

The study runs the user's script under sampled configs through a `Runner` and chooses
the winner: the script as written first (the reference every winner must beat), then
AUTOTUNE, the #cores heuristic and the guided guess, then TPE for the rest of the
budget, then a final round that re-measures the leaders beside the baselines. tftune
never ends below the script as written, and never recommends a change that does not pay
for itself. Modules, by job (each one imports only those above it):

- `contract`: `Runner` (the extension point), `Mode`, `Role`, `Objective`,
  `StudySettings`, `TrialRecord`, `GuidedHint`, `StudyOutcome`. A run is measured as
  `tftune.tuner.measurement.Measurement`; a trial ends in a `core.vocabulary.TrialState`;
- `storage`: opening storages, worker liveness and heartbeats, the budget, the enqueue
  lock, waiting for other workers;
- `records`: a stored trial read back as a `TrialRecord`; knob values that keep failing;
- `baselines`: as written, AUTOTUNE, the heuristic and the guided guess;
- `final`: the winner, the final round and its close calls;
- `best`: the best result (winner, figure, speed-up) by one rule for `tftune optimize`
  and `tftune status`, and the decision stored in the study;
- `stopping`: when the search is done (``--trials auto``), and trials that need no run;
- `objective`: one trial as Optuna's objective sees it (skip, prune, store);
- `search`: `run_study`, as named phases;
- `workers`: several trials at once in one process (slots, `run_parallel`);
- `script_runner`: `ScriptRunner`, the real `Runner` over `tuner.trial.run_trial`.

This package exports what the other layers use; tests reach into the modules.
"""

from __future__ import annotations

from tftune.tuner.study.baselines import baseline_params
from tftune.tuner.study.contract import (
    AUTO_TRIALS,
    DEFAULT_SEED,
    DEFAULT_TRIALS,
    GuidedHint,
    Mode,
    Objective,
    RepeatCallback,
    Role,
    Runner,
    StudyOutcome,
    StudySettings,
    TrialRecord,
    Trials,
    trial_budget,
)
from tftune.tuner.study.script_runner import ScriptRunner
from tftune.tuner.study.search import run_study
from tftune.tuner.study.storage import (
    DEFAULT_STORAGE_FILE,
    StorageError,
    describe_storage_path,
    open_storage,
)
from tftune.tuner.study.workers import run_parallel

__all__ = [
    "AUTO_TRIALS",
    "DEFAULT_SEED",
    "DEFAULT_STORAGE_FILE",
    "DEFAULT_TRIALS",
    "GuidedHint",
    "Mode",
    "Objective",
    "RepeatCallback",
    "Role",
    "Runner",
    "ScriptRunner",
    "StorageError",
    "StudyOutcome",
    "StudySettings",
    "TrialRecord",
    "Trials",
    "baseline_params",
    "describe_storage_path",
    "open_storage",
    "run_parallel",
    "run_study",
    "trial_budget",
]
