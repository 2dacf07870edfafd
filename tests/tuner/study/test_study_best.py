"""One best result for one study: `tftune status`, from the storage alone, gives the
winner, figure and speed-up that `tftune optimize`'s document and table give
(`tuner.study.best`); and a study an earlier tftune wrote (its bookkeeping among the
user attributes) still resumes and is still read."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from studykit import MAP, latency_bound, outcome_json, settings, space, table_rows

from tftune.core.vocabulary import TrialState
from tftune.testing import FakeRunner
from tftune.tuner.searchspace.config import Config
from tftune.tuner.study import Role, open_storage, run_study
from tftune.tuner.study.objective import CONSTRAINT, reuse_twin
from tftune.tuner.study.opening import space_fingerprint
from tftune.tuner.study.status import render_status, study_status
from tftune.tuner.study.storage import HEARTBEAT_ATTR, WORKER_ATTR, this_worker

# A change measures this much less when measured again: the search's figure of a config
# is the top of its noisy draws, and the final round's, beside the baselines, is lower.
AGAIN = 0.96


def regressing() -> Any:
    """The latency-bound script, each changed config slower after its first run; the
    script as written measures the same every time."""
    seen: dict[str, int] = {}

    def script(config: Config) -> tuple[float, float]:
        key = json.dumps(config.to_json(), sort_keys=True)
        runs = seen[key] = seen.get(key, 0) + 1
        eps, util = latency_bound(config)
        return (eps if runs == 1 or config.is_as_written() else eps * AGAIN), util

    return script


def test_status_gives_the_best_the_optimize_table_gives(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.journal")
    out = run_study(space(), FakeRunner(regressing()), settings(tmp_path, n_trials=8))
    doc = outcome_json(out)
    tuned = next(r for r in table_rows(out) if r[0] == "tuned")
    s = study_status(storage, "t")
    b = s.best
    assert b is not None and b.decided
    assert b.number == doc["best"]["trial"] and b.role == doc["best"]["role"] != "as_written"
    # The final round's figure, not the search's (the rule the old status broke).
    assert doc["best"]["confirmed"]["examples_per_s"] < doc["best"]["examples_per_s"]
    assert round(b.examples_per_s, 2) == doc["best"]["confirmed"]["examples_per_s"]
    assert b.speedup == doc["best"]["speedup_vs_as_written"]
    # As printed: the table's figure and speed-up, and the status line's.
    assert (f"{b.examples_per_s:,.1f}", f"{b.speedup:.2f}x") == (tuned[1], tuned[4])
    line = next(x for x in render_status(s).splitlines() if x.startswith("best:"))
    assert f"{tuned[1]} examples/s, {tuned[4]} as written" in line


def test_status_gives_the_search_best_until_a_round_decides(tmp_path: Path) -> None:
    """Before any final round (or once trials finished after one), the search's best so
    far, said to be undecided; the round's decision is over the trials it saw."""
    storage = str(tmp_path / "study.journal")
    run_study(space(), FakeRunner(regressing()), settings(tmp_path, n_trials=6, confirm=False))
    s = study_status(storage, "t")
    assert s.best is not None and not s.best.decided
    assert "the final round re-measures it" in render_status(s)
    decided = run_study(space(), FakeRunner(regressing()), settings(tmp_path, n_trials=6))
    s = study_status(storage, "t")
    assert s.best is not None and s.best.decided and s.best.number == decided.best.number
    run_study(space(), FakeRunner(latency_bound), settings(tmp_path, n_trials=8, confirm=False))
    s = study_status(storage, "t")
    assert s.best is not None and not s.best.decided


def _earlier_study(path: Path) -> Any:
    """A study as an earlier tftune left it: the worker, heartbeat and constraint among
    each trial's user attributes, AUTOTUNE as -1 and no knob words; one trial still
    running on a worker of this host that died."""
    import optuna

    sp = space()
    study = optuna.create_study(
        storage=open_storage(str(path))[0], study_name="t", direction="maximize"
    )
    study.set_user_attr("space", space_fingerprint(sp, ""))
    study.set_user_attr("objective", "throughput")
    dists = {k.name: optuna.distributions.CategoricalDistribution(k.choices) for k in sp.knobs}
    aw = sp.as_written_params()
    floor = latency_bound(sp.config(aw, apply_fixed=False))[0]
    autotune = {**aw, f"{MAP}/num_parallel_calls": -1}
    for role, params in (("as_written", aw), ("autotune", autotune)):
        eps = latency_bound(sp.config(params))[0]
        attrs = {
            "role": role,
            "examples_per_s": eps,
            "utilization": 0.1,
            "feasible": eps >= floor,
            "constraint": floor - eps,
            WORKER_ATTR: this_worker(),
            HEARTBEAT_ATTR: time.time(),
        }
        study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions=dists, value=eps, user_attrs=attrs
            )
        )
    running = study.ask(dists)
    running.set_user_attr(WORKER_ATTR, {**this_worker(), "pid": _dead_pid(), "start": None})
    running.set_user_attr(HEARTBEAT_ATTR, time.time())
    return study


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def test_an_earlier_tftunes_study_is_read_and_resumes(tmp_path: Path) -> None:
    import optuna

    journal = tmp_path / "study.journal"
    study = _earlier_study(journal)
    s = study_status(str(journal), "t")
    assert s.counts["complete"] == 2 and s.counts["running"] == 1
    dead = study.trials[-1].user_attrs[WORKER_ATTR]
    assert s.running[0].worker == f"{dead['host']}:{dead['pid']}"
    assert s.best is not None and s.best.role == "autotune" and s.best.speedup == 2.0
    assert not s.best.decided and f"{MAP}/num_parallel_calls=AUTOTUNE" in s.best.summary

    # Its running trial's worker died: failed, measured again, and the study resumes.
    out = run_study(space(), FakeRunner(latency_bound), settings(tmp_path, n_trials=6))
    assert out.records[0].role is Role.AS_WRITTEN and out.records[0].number == 0
    assert out.records[2].state is TrialState.FAILED and "died" in (out.records[2].reason or "")
    trials = optuna.load_study(study_name="t", storage=open_storage(str(journal))[0]).trials
    new = [t for t in trials[3:] if t.state.is_finished()]
    assert len(new) >= 4 and all(WORKER_ATTR in t.system_attrs for t in new)
    assert not any({WORKER_ATTR, HEARTBEAT_ATTR, "constraint"} & set(t.user_attrs) for t in new)
    after = study_status(str(journal), "t")
    assert after.best is not None and after.best.decided and after.best.number == out.best.number


def test_a_twin_of_an_earlier_trial_takes_its_constraint() -> None:
    """Where an earlier tftune kept the constraint's value (a user attribute), and where
    Optuna keeps it (a system attribute, which wins)."""
    import optuna

    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.CategoricalDistribution((1, 2))}
    earlier = optuna.trial.create_trial(
        params={"x": 2}, distributions=dist, value=500.0, user_attrs={"constraint": -250.0}
    )
    study.add_trial(earlier)
    twin = study.ask(dist)
    reuse_twin(twin, study.trials[0])
    assert study.trials[twin.number].constraints == {CONSTRAINT: -250.0}
    assert "constraint" not in study.trials[twin.number].user_attrs
    again = study.ask(dist)
    reuse_twin(again, study.trials[twin.number])
    assert study.trials[again.number].constraints == {CONSTRAINT: -250.0}


@pytest.mark.parametrize("decided", [True, False])
def test_the_status_json_says_whether_a_round_decided(tmp_path: Path, decided: bool) -> None:
    run_study(space(), FakeRunner(latency_bound), settings(tmp_path, n_trials=6, confirm=decided))
    data = study_status(str(tmp_path / "study.journal"), "t").to_json()
    assert data["best"]["decided"] is decided
