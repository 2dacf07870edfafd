"""Interrupted studies lose nothing: Ctrl-C, kill -9 of a worker, and resume.

The study-level tests inject a runner (no TensorFlow, no subprocess). The live test runs
the real `tftune optimize` on a tiny script that forks a child ignoring SIGTERM, kills it
with SIGKILL mid-trial, resumes it, interrupts that with SIGINT mid-trial, and resumes it
to the end, counting what the storage holds at each step.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_tf
from studykit import latency_bound, settings, space

from tftune.testing import FakeRunner
from tftune.tuner.searchspace.config import Config
from tftune.tuner.study import Role, open_storage, run_study
from tftune.tuner.study.storage import (
    HEARTBEAT_ATTR,
    INTERRUPTED_ATTR,
    RETRY_OF_ATTR,
    STALE_AFTER_S,
    WORKER_ATTR,
    fail_stale_trials,
    heartbeat,
    set_internal,
    this_worker,
)


def _load(storage: str, name: str = "t") -> Any:
    import optuna

    return optuna.load_study(study_name=name, storage=open_storage(storage)[0])


def _by_state(study: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for t in study.get_trials(deepcopy=False):
        out.setdefault(t.state.name, []).append(t)
    return out


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _ctrl_c(at: int) -> FakeRunner:
    """The fake runner, interrupted (KeyboardInterrupt, as Ctrl-C does) in its `at`-th
    trial."""
    runs = itertools.count(1)

    def script(config: Config) -> tuple[float, float]:
        if next(runs) == at:
            raise KeyboardInterrupt
        return latency_bound(config)

    return FakeRunner(script)


def test_ctrl_c_keeps_finished_trials_and_resume_reruns_none(tmp_path: Path) -> None:
    sp = space()
    with pytest.raises(KeyboardInterrupt):
        run_study(sp, _ctrl_c(at=3), settings(tmp_path, n_trials=6, confirm=False))
    study = _load(str(tmp_path / "study.journal"))
    states = _by_state(study)
    assert len(states["COMPLETE"]) == 2 and "RUNNING" not in states
    (stopped,) = states["FAIL"]
    assert stopped.user_attrs[INTERRUPTED_ATTR] and "interrupted" in stopped.user_attrs["reason"]
    before = {t.number: t.user_attrs["examples_per_s"] for t in states["COMPLETE"]}
    best_before = study.best_value

    runner = FakeRunner(latency_bound)
    out = run_study(sp, runner, settings(tmp_path, n_trials=6, confirm=False))
    study = _load(str(tmp_path / "study.journal"))
    states = _by_state(study)
    # Nothing finished ran again (the as-written trial is still the one measured before);
    # the interrupted trial is measured again.
    assert Config() not in runner.configs
    assert space().config(dict(stopped.params)) in runner.configs
    assert {t.number: t.user_attrs["examples_per_s"] for t in states["COMPLETE"]}.items() >= (
        before.items()
    )
    retries = [t for t in study.trials if t.user_attrs.get(RETRY_OF_ATTR) == stopped.number]
    assert len(retries) == 1 and retries[0].state.name == "COMPLETE"
    # The interrupted trial uses no budget: 6 counted trials, plus it.
    assert len(states["COMPLETE"]) + len(states.get("PRUNED", [])) == 6
    assert len(out.records) == 7 and out.ran_this_session == 4
    assert study.best_value >= best_before
    assert out.baselines[Role.AS_WRITTEN].number == 0


def test_a_dead_workers_trial_is_failed_retried_and_nothing_is_lost(tmp_path: Path) -> None:
    import optuna

    sp = space()
    run_study(sp, FakeRunner(latency_bound), settings(tmp_path, n_trials=3, confirm=False))
    study = _load(str(tmp_path / "study.journal"))
    done = {t.number: t.value for t in study.get_trials(states=[optuna.trial.TrialState.COMPLETE])}
    assert len(done) == 3
    # A worker took a trial, then was killed (-9): RUNNING forever, unless someone notices.
    killed = study.ask()
    killed.set_user_attr("role", Role.SEARCH.value)
    worker = {**this_worker(), "pid": _dead_pid()}
    killed.set_user_attr(WORKER_ATTR, worker)
    killed.set_user_attr(HEARTBEAT_ATTR, time.time())  # fresh: the pid tells, at once

    out = run_study(sp, FakeRunner(latency_bound), settings(tmp_path, n_trials=5, confirm=False))
    study = _load(str(tmp_path / "study.journal"))
    t = study.trials[killed.number]
    assert t.state is optuna.trial.TrialState.FAIL
    assert f"pid {worker['pid']}" in t.user_attrs["reason"] and "died" in t.user_attrs["reason"]
    assert any(n.startswith(f"trial(s) {killed.number} ") for n in out.notes)
    assert [x.user_attrs.get(RETRY_OF_ATTR) for x in study.trials].count(killed.number) == 1
    assert {n: study.trials[n].value for n in done} == done  # nothing finished is lost
    assert not study.get_trials(states=[optuna.trial.TrialState.RUNNING])


@pytest.mark.parametrize(
    ("host", "age_s", "pid", "stale"),
    [
        ("other-host", STALE_AFTER_S + 60, 1, True),  # preempted elsewhere: old heartbeat
        ("other-host", 1.0, 1, False),  # another host, beating: alive
        (None, STALE_AFTER_S + 60, os.getpid(), False),  # this very process: alive
        (None, 1.0, "dead", True),  # this host, process gone
    ],
    # Ids without the pid: parallel test workers must collect the same test names.
    ids=["other-host-old", "other-host-beating", "this-process", "this-host-dead"],
)
@pytest.mark.parametrize("kept_as", ["system", "user"])
def test_stale_rules(
    tmp_path: Path, host: str | None, age_s: float, pid: object, stale: bool, kept_as: str
) -> None:
    """Read where this tftune keeps the worker and heartbeat (system attributes), and
    where a study an earlier tftune wrote keeps them (user attributes)."""
    import optuna

    storage, _ = open_storage(str(tmp_path / "s.journal"))
    study = optuna.create_study(storage=storage, study_name="t", direction="maximize")
    t = study.ask()
    now = time.time()
    worker = {
        "host": host or socket.gethostname(),
        "pid": _dead_pid() if pid == "dead" else pid,
        "start": None,
    }
    for key, value in ((WORKER_ATTR, worker), (HEARTBEAT_ATTR, now - age_s)):
        if kept_as == "user":
            t.set_user_attr(key, value)
        else:
            set_internal(storage, t._trial_id, key, value)
    assert fail_stale_trials(study, now=now) == ([t.number] if stale else [])
    assert not stale or study.trials[0].user_attrs[INTERRUPTED_ATTR]


def test_a_trial_without_a_worker_record_is_left_to_its_owner(tmp_path: Path) -> None:
    import optuna

    storage, _ = open_storage(str(tmp_path / "s.journal"))
    study = optuna.create_study(storage=storage, study_name="t", direction="maximize")
    study.ask()
    assert fail_stale_trials(study) == []


def test_heartbeat_marks_the_worker_and_keeps_beating(tmp_path: Path) -> None:
    import optuna

    storage, _ = open_storage(str(tmp_path / "s.journal"))
    study = optuna.create_study(storage=storage, study_name="t", direction="maximize")
    t = study.ask()
    with heartbeat(storage, t._trial_id, every_s=0.05):
        first = storage.get_trial(t._trial_id).system_attrs[HEARTBEAT_ATTR]
        deadline = time.monotonic() + 30
        while storage.get_trial(t._trial_id).system_attrs[HEARTBEAT_ATTR] == first:
            assert time.monotonic() < deadline, "the heartbeat never refreshed"
            time.sleep(0.05)
    stored = storage.get_trial(t._trial_id)
    assert stored.system_attrs[WORKER_ATTR] == this_worker()
    # tftune's bookkeeping stays out of the user attributes optuna-dashboard lists.
    assert not {WORKER_ATTR, HEARTBEAT_ATTR} & set(stored.user_attrs)
    assert fail_stale_trials(study) == []  # this process is alive


# ------------------------------------------------------------------- live, real CLI

FORKING_SCRIPT = """
import os, signal, sys, time
marks = sys.argv[1]
pid = os.fork()
if pid == 0:  # a stubborn helper process: only SIGKILL stops it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(os.path.join(marks, f"fork-{os.getpid()}"), "w").close()
    while True:
        time.sleep(1)
open(os.path.join(marks, f"main-{os.getpid()}"), "w").close()
import tensorflow as tf
w = tf.Variable(0.0)  # a raw SGD update: this loop trains
for batch in tf.data.Dataset.range(10**9).map(lambda x: x * 2).batch(8):
    time.sleep(0.002)
    w.assign_sub(1e-12)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _pids(marks: Path, kind: str) -> list[int]:
    return [int(p.name.split("-", 1)[1]) for p in marks.glob(f"{kind}-*")]


def _wait_for(what: str, cond: Any, limit_s: float = 240.0) -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _no_survivors(marks: Path) -> list[int]:
    pids = _pids(marks, "main") + _pids(marks, "fork")
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


@pytest.mark.slow
@requires_tf
def test_kill_9_then_ctrl_c_then_resume_loses_nothing(tmp_path: Path) -> None:
    import optuna

    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(FORKING_SCRIPT))
    marks = tmp_path / "marks"
    marks.mkdir()
    journal = str(tmp_path / "s.journal")
    cmd = [
        sys.executable, "-m", "tftune", "optimize", str(script), "--trials", "10",
        "--window", "0.5", "--repeats", "1", "--no-bounds", "--no-guided", "--no-rewrites",
        "--storage", journal, "--study-name", "t", "--json", "t.json", "--", str(marks),
    ]  # fmt: skip
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    started: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        # Ctrl-C as a terminal delivers it: a suite started in the background (`cmd &`
        # in a script) has SIGINT ignored, a child inherits that, and Python then keeps
        # ignoring it, as `nohup tftune optimize ... &` should.
        p = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, text=True, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_default_sigint,
        )  # fmt: skip
        started.append(p)
        return p

    def trials_started() -> int:  # the discovery run and every trial write one mark
        return len(_pids(marks, "main"))

    try:
        # 1. kill -9 while trial 1 runs (trial 0, as written, has finished).
        first = start()
        _wait_for("trial 1 to start", lambda: trials_started() >= 3)
        first.kill()
        first.communicate(timeout=60)
        assert _no_survivors(marks) == []  # the trial and its fork went with tftune
        study = _load(journal)
        states = _by_state(study)
        assert len(states["COMPLETE"]) == 1 and len(states["RUNNING"]) == 1
        as_written = states["COMPLETE"][0]
        killed = states["RUNNING"][0]

        # 2. The next run marks it failed and goes on; Ctrl-C it during its next trial.
        second = start()
        seen = trials_started()
        _wait_for("a trial of the second run", lambda: trials_started() >= seen + 2)
        study = _load(journal)
        t = study.trials[killed.number]
        assert t.state is optuna.trial.TrialState.FAIL and "died" in t.user_attrs["reason"]
        second.send_signal(signal.SIGINT)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 130, (out[-2000:], err[-2000:])
        assert "Traceback" not in out + err
        (resume,) = [line for line in out.splitlines() if "tftune optimize" in line]
        assert f"--storage {journal} --study-name t --trials 10" in resume
        assert resume.strip().endswith(f"--no-guided --no-rewrites -- {marks}")
        assert _no_survivors(marks) == []
        study = _load(journal)
        states = _by_state(study)
        assert "RUNNING" not in states
        assert study.trials[as_written.number].value == as_written.value
        stopped = [t for t in states["FAIL"] if "Ctrl-C" in t.user_attrs.get("reason", "")]
        assert len(stopped) == 1
        finished_before = {t.number: t.value for t in states["COMPLETE"] + states.get("PRUNED", [])}
        best_before = study.best_value

        # 3. Resume to the end: nothing finished runs again, the best is kept.
        third = start()
        out, err = third.communicate(timeout=300)
        assert third.returncode == 0, (out[-2000:], err[-2000:])
        study = _load(journal)
        states = _by_state(study)
        assert "RUNNING" not in states and "WAITING" not in states
        for n, value in finished_before.items():
            assert study.trials[n].value == value
        roles = [t.user_attrs.get("role") for t in states["COMPLETE"]]
        assert roles.count(Role.AS_WRITTEN.value) == 1
        counted = [t for t in study.trials if t.state.is_finished()]
        counted = [t for t in counted if not t.user_attrs.get(INTERRUPTED_ATTR)]
        assert len(counted) == 10
        assert study.best_value >= best_before
        assert _no_survivors(marks) == []
    finally:
        for p in started:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        for pid in _pids(marks, "main") + _pids(marks, "fork"):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_during_discovery_stops_the_script_and_exits_143(tmp_path: Path) -> None:
    """A batch system's SIGTERM (preemption, scancel) unwinds like Ctrl-C: the script
    being run is stopped, one line says so, no traceback."""
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys, time\n"
        "open(os.path.join(sys.argv[1], f'main-{os.getpid()}'), 'w').close()\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tftune", "optimize", str(script), "--storage", "s.journal",
         "--", str(marks)],
        cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for("the script to start", lambda: _pids(marks, "main") != [], limit_s=120)
        proc.terminate()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, (out, err)
        assert "Traceback" not in out + err and "terminated" in err
        assert "tftune optimize" in out and "--storage s.journal" in out
        assert _no_survivors(marks) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        for pid in _pids(marks, "main"):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
