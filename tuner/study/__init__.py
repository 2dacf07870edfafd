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
- `rdb`, `storage`: opening storages (an RDB one by many workers at once), worker
  liveness and heartbeats, the budget, the enqueue lock, waiting for other workers;
- `records`: a stored trial read back as a `TrialRecord`; knob values that keep failing;
  `batch_limits`: batch sizes the script cannot take;
- `baselines`: as written, AUTOTUNE, the heuristic and the guided guess;
- `gains`: what counts as a gain, and the noise it must clear;
- `best`: the best result (winner, figure, speed-up) by one rule for `tftune optimize`
  and `tftune status`, and the decision stored in the study;
- `stopping`: when the search is done (``--trials auto``), and trials that need no run;
- `ladder`: where a new best points past itself, the next rung;
- `round_plan`, `winner`: the final round's runs; the winner, chosen from that round,
  and its close calls;
- `learning_check`: a faster config must not train worse;
- `objective`: one trial as Optuna's objective sees it (skip, prune, store);
- `opening`: the Optuna study, created or resumed;
- `search`: `run_study`, as named phases;
- `workers`: several trials at once in one process (slots, `run_parallel`);
- `script_runner`: `ScriptRunner`, the real `Runner` over `tuner.trial.run_trial`;
- `status`: where a study stands, read from its storage alone (``tftune status``).

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
