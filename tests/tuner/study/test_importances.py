"""Parameter importance (`records.importances`): only over the knobs that varied among
the complete trials, only from `MIN_IMPORTANCE_TRIALS` of them; else none, and why."""

from __future__ import annotations

from typing import Any

import pytest

from tftune.tuner.study.records import MIN_IMPORTANCE_TRIALS, importances, varied_knobs

CHOICES = (1, 2, 4, 8)


def _study(n: int, *, vary: bool = True) -> Any:
    """`n` complete trials: ``par`` decides examples/s, ``noise`` varies without effect,
    ``batch`` and ``precision`` never vary (one value each, as the script wrote them)."""
    import optuna

    study = optuna.create_study(direction="maximize")
    dist = optuna.distributions.CategoricalDistribution
    dists = {
        "par": dist(CHOICES),
        "noise": dist(CHOICES),
        "batch": dist((32, 64)),
        "precision": dist((None, "mixed_bfloat16")),
    }
    for i in range(n):
        par = CHOICES[i % 4] if vary else 1
        noise = CHOICES[(i // 4) % 4] if vary else 1
        params = {"par": par, "noise": noise, "batch": 32, "precision": None}
        study.add_trial(
            optuna.trial.create_trial(params=params, distributions=dists, value=250.0 * par)
        )
    return study


@pytest.mark.parametrize("n", [0, 1, 3, MIN_IMPORTANCE_TRIALS - 1])
def test_too_few_complete_trials_give_none_and_say_why(n: int) -> None:
    values, why = importances(_study(n))
    assert values == {} and why is not None
    assert why.startswith(f"{n} complete trial{'' if n == 1 else 's'}; ")
    assert f"from {MIN_IMPORTANCE_TRIALS} on" in why


def test_a_knob_that_never_varied_gets_no_share() -> None:
    study = _study(MIN_IMPORTANCE_TRIALS)
    assert varied_knobs(study.trials) == ["noise", "par"]
    values, why = importances(study)
    assert why is None and set(values) == {"noise", "par"}
    assert values["par"] > values["noise"]  # the knob that decides the figure leads


def test_no_knob_varied_gives_none_and_says_why() -> None:
    values, why = importances(_study(MIN_IMPORTANCE_TRIALS, vary=False))
    assert values == {} and why == (
        f"no knob took more than one value among the {MIN_IMPORTANCE_TRIALS} complete trials"
    )
