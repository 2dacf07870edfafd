"""Opening a study: Optuna's study for one search space and script, created or resumed.

The sampler is TPE (multivariate, seeded) and the pruner successive halving
(`objective.make_pruner`). A resumed study must have been made for the same space and
script (`space_fingerprint`), or a new --study-name is asked for; what `tftune status`
reads from storage alone is kept in the study's user attributes, and its objective values
are named (`contract.METRIC_NAMES`) for optuna-dashboard. Workers that open a new
study at the same instant create it once (`open_study`).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from typing import TYPE_CHECKING, Any

from tftune.core.errors import ConfigError
from tftune.tuner.study.contract import METRIC_NAMES, Objective, StudySettings
from tftune.tuner.study.objective import make_pruner
from tftune.tuner.study.rdb import retry_racing
from tftune.tuner.study.storage import open_storage, study_lock

if TYPE_CHECKING:
    import optuna

    from tftune.tuner.searchspace.space import SearchSpace

# TPE's random start-up trials, counting the enqueued baselines: small, because the
# budget is small and the baselines already cover the corners of the space.
TPE_STARTUP_TRIALS = 6


def space_fingerprint(space: SearchSpace, target: str = "") -> str:
    blob = json.dumps(
        [[k.name, [repr(c) for c in k.choices]] for k in space.knobs]
        + [[n, repr(v)] for n, v in sorted(space.fixed.items())]
        + [target]
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def open_study(space: SearchSpace, settings: StudySettings) -> tuple[optuna.Study, str]:
    """Open (or resume) the study, refusing one made for another space or script.

    Workers started together create it once: its creation and its first attributes are
    made under the study's lock (`storage.study_lock`), and tried again where they
    collide with another worker's (`rdb.retry_racing`)."""
    storage, storage_name = open_storage(settings.storage)
    with study_lock(settings.storage, settings.study_name):
        study = retry_racing(lambda: _create_or_load(storage, settings))
        retry_racing(lambda: _mark(study, space, settings, storage_name))
    return study, storage_name


def _create_or_load(storage: Any, settings: StudySettings) -> optuna.Study:
    import optuna

    n_obj = 2 if settings.objective is Objective.BOTH else 1
    directions = [optuna.study.StudyDirection.MAXIMIZE] * n_obj
    sampler = optuna.samplers.TPESampler(
        seed=settings.seed,
        multivariate=True,
        n_startup_trials=TPE_STARTUP_TRIALS,
    )
    try:
        return optuna.create_study(
            storage=storage,
            sampler=sampler,
            pruner=make_pruner(),
            study_name=settings.study_name,
            directions=directions,
            load_if_exists=True,
        )
    except ValueError as exc:  # e.g. a resumed study with other directions
        raise ConfigError(f"--study-name {settings.study_name}: {exc}") from None


def _mark(
    study: optuna.Study, space: SearchSpace, settings: StudySettings, storage_name: str
) -> None:
    """Check the study's fingerprint, or set it on a new study, and store what `tftune
    status` reads from storage alone (no space, no script needed)."""
    fp = space_fingerprint(space, settings.target)
    have_fp = study.user_attrs.get("space")
    if have_fp is None:
        study.set_user_attr("space", fp)
    elif have_fp != fp:
        raise ConfigError(
            f"--study-name {settings.study_name}: the study in {storage_name} was created for "
            "another search space or script (the script, its arguments, --space or --batch-size "
            "changed); pick a new --study-name"
        )
    names = list(METRIC_NAMES[settings.objective])
    if study.metric_names != names:  # optuna-dashboard's axis and column names
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna calls it experimental
            study.set_metric_names(names)
    for key, value in (
        ("n_trials", settings.n_trials),
        ("objective", settings.objective.value),
        ("target", settings.target),
    ):
        if study.user_attrs.get(key) != value:
            study.set_user_attr(key, value)
