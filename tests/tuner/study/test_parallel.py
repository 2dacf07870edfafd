"""Parallel trials and shared studies: slot assignment (injected GPU counts), the slot's
child environment and CPU affinity, the multi-GPU NVML mean (injected NVML), the enqueue
lock, N worker threads on one journal file or PostgreSQL study (injected runner), and two
real `tftune optimize` processes sharing one study on each storage."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_tf
from repo_paths import ROOT
from studykit import latency_bound, space

from tftune.core.errors import ConfigError
from tftune.probes.live.nvml import GpuSample, NvmlSampler, PynvmlReader
from tftune.testing import FakeRunner
from tftune.tuner.searchspace.config import Config
from tftune.tuner.study import (
    Role,
    StudySettings,
    run_study,
)
from tftune.tuner.study.storage import (
    HEARTBEAT_ATTR,
    STALE_AFTER_S,
    STALE_RUNNING_S,
    WORKER_ATTR,
    booked,
    running_fresh,
    study_lock,
    this_worker,
)
from tftune.tuner.study.workers import (
    Slot,
    WorkerStopped,
    assign_slots,
    available_cpus,
    run_parallel,
    slot_deps,
    visible_gpus,
)
from tftune.tuner.trial.launch import RunnerDeps, popen_launcher

EXAMPLE = ROOT / "examples" / "latency_bound.py"


# --- slots ---------------------------------------------------------------------------


def test_gpus_are_split_into_disjoint_sets_per_trial() -> None:
    slots = assign_slots(2, gpus=[3, 0, 2, 1], gpus_per_trial=2)
    assert [s.gpus for s in slots] == [(0, 1), (2, 3)]
    assert all(s.cpus is None for s in slots)
    eight = assign_slots(3, gpus=range(8), gpus_per_trial=2)
    assert [s.gpus for s in eight] == [(0, 1), (2, 3), (4, 5)]  # two left idle
    assert [s.gpus for s in assign_slots(4, gpus=range(4), gpus_per_trial=1)] == [
        (0,),
        (1,),
        (2,),
        (3,),
    ]
    with pytest.raises(ConfigError, match="needs 6 GPUs; 4 visible"):
        assign_slots(3, gpus=range(4), gpus_per_trial=2)
    with pytest.raises(ConfigError, match="needs 1 GPUs; 0 visible"):
        assign_slots(1, gpus=(), gpus_per_trial=1)


def test_cpus_are_split_and_unpinned_workers_inherit() -> None:
    slots = assign_slots(2, cpus=[4, 5, 6, 7, 8], cpus_per_trial=2)
    assert [s.cpus for s in slots] == [(4, 5), (6, 7)]
    assert slots[1].describe() == "worker 1: CPUs 6-7"
    assert assign_slots(2) == (Slot(0), Slot(1))
    with pytest.raises(ConfigError, match="needs 4 CPUs; 2 available"):
        assign_slots(2, cpus=[0, 1], cpus_per_trial=2)
    with pytest.raises(ConfigError, match="--workers 0"):
        assign_slots(0)


def test_slot_launcher_sets_the_trials_gpus_in_the_child_environment() -> None:
    seen: list[dict[str, str]] = []

    class Proc:
        pid, returncode = 999999, 0

        def poll(self) -> int | None:
            return 0

        def wait(self, timeout: float | None = None) -> int:
            return 0

    def fake(argv: Sequence[str], cwd: str, env: dict[str, str], o: Any, e: Any) -> Proc:
        seen.append(env)
        return Proc()

    deps, _ = slot_deps(Slot(1, gpus=(2, 3)), threading.Event(), RunnerDeps(launcher=fake))
    deps.launcher(["x"], ".", {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "A": "b"}, None, None)
    assert seen[0]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert seen[0]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert seen[0]["A"] == "b"
    plain, _ = slot_deps(Slot(0), threading.Event(), RunnerDeps(launcher=fake))
    plain.launcher(["x"], ".", {"CUDA_VISIBLE_DEVICES": "0"}, None, None)
    assert seen[1]["CUDA_VISIBLE_DEVICES"] == "0" and "CUDA_DEVICE_ORDER" not in seen[1]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_slot_launcher_pins_the_child_to_its_cpus(tmp_path: Path) -> None:
    cpus = available_cpus()
    mine = (cpus[-1],)
    deps, launcher = slot_deps(Slot(0, cpus=mine), threading.Event(), RunnerDeps())
    out = tmp_path / "out.txt"
    code = "import os,sys,time; time.sleep(0.3); print(sorted(os.sched_getaffinity(0)))"
    with open(out, "w") as fh:
        proc = deps.launcher([sys.executable, "-c", code], str(tmp_path), dict(os.environ), fh, fh)
        proc.wait(timeout=60)
    assert out.read_text().strip() == str(list(mine))
    launcher.reap()
    assert proc.poll() is not None


def test_a_stop_request_raises_once_in_the_runner_sleep() -> None:
    stop = threading.Event()
    deps, _ = slot_deps(Slot(0), stop, RunnerDeps(sleep=lambda s: None, launcher=popen_launcher))
    deps.sleep(0.1)  # not stopped: sleeps
    stop.set()
    with pytest.raises(WorkerStopped):
        deps.sleep(0.1)
    deps.sleep(0.1)  # the runner's cleanup sleeps too: it must run to the end


# --- multi-GPU utilization -------------------------------------------------------------


def _fake_pynvml(util: dict[int, int]) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.nvmlInit = lambda: None  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: len(util)  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=util[h])  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(  # type: ignore[attr-defined]
        used=(h + 1) * 2**30, total=80 * 2**30
    )
    return m


def test_utilization_is_the_mean_over_the_trials_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    # A MirroredStrategy trial on GPUs 1 and 3 of four: 90% and 50% busy -> 70%; the
    # other workers' GPUs (0: idle, 2: full) must not count.
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml({0: 0, 1: 90, 2: 100, 3: 50}))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    deps, _ = slot_deps(Slot(0, gpus=(1, 3)), threading.Event(), RunnerDeps())
    assert deps.nvml_reader is not None
    sampler = NvmlSampler(deps.nvml_reader())
    for _ in range(3):
        sampler.sample_once()
    figures = sampler.stop()
    assert not isinstance(figures, type(None))
    assert figures.devices == (1, 3)  # type: ignore[union-attr]
    assert figures.utilization == pytest.approx(0.7)  # type: ignore[union-attr]
    assert figures.memory_used_mb == pytest.approx(4 * 1024)  # type: ignore[union-attr]
    # Unpinned, every visible GPU counts: (0 + 90 + 100 + 50) / 4.
    whole = NvmlSampler(PynvmlReader())
    whole.sample_once()
    assert whole.stop().utilization == pytest.approx(0.6)  # type: ignore[union-attr]
    assert visible_gpus() == (0, 1, 2, 3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpus() == (2, 3)
    slots = assign_slots(2, gpus=visible_gpus(), gpus_per_trial=1)
    assert [s.gpus for s in slots] == [(2,), (3,)]


def test_uneven_multi_gpu_samples_average_per_reading() -> None:
    class Reader:
        def __init__(self) -> None:
            self.n = 0

        def read(self) -> list[GpuSample]:
            self.n += 1
            u = 0.2 * self.n
            return [GpuSample(0, u, 1.0, 2.0), GpuSample(1, 1.0 - u, 1.0, 2.0)]

        def close(self) -> None:
            pass

    s = NvmlSampler(Reader())
    for _ in range(4):
        s.sample_once()
    figures = s.stop()
    assert figures.utilization == pytest.approx(0.5)  # type: ignore[union-attr]
    assert figures.samples == 4  # type: ignore[union-attr]


# --- the enqueue lock ----------------------------------------------------------------


def _exclusive(storage: str) -> list[str]:
    order: list[str] = []
    a_in = threading.Event()

    def a() -> None:
        with study_lock(storage, "s"):
            order.append("a-in")
            a_in.set()
            time.sleep(0.3)
            order.append("a-out")

    def b() -> None:
        a_in.wait()
        with study_lock(storage, "s"):
            order.append("b-in")

    ts = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return order


def test_study_lock_excludes_on_a_journal_file(tmp_path: Path) -> None:
    journal = str(tmp_path / "s.journal")
    assert _exclusive(journal) == ["a-in", "a-out", "b-in"]
    assert not list(tmp_path.glob("*.lock"))  # released


def test_study_lock_excludes_on_a_sqlite_file(tmp_path: Path) -> None:
    assert _exclusive(f"sqlite:///{tmp_path / 's.db'}") == ["a-in", "a-out", "b-in"]


@pytest.mark.slow
def test_study_lock_excludes_on_postgresql(pg_url: str) -> None:
    assert _exclusive(pg_url) == ["a-in", "a-out", "b-in"]


# --- N workers, one study (injected runner) -------------------------------------------


def slow_fake(seconds: float = 0.01) -> FakeRunner:
    """The latency-bound model, one window a run, each run taking `seconds` so that
    workers overlap."""
    return FakeRunner(latency_bound, repeats=1, spread=0.01, input_wait_share=0.9, seconds=seconds)


def _check_shared(storage: str, name: str, n: int, workers: int) -> list[Any]:
    import optuna

    from tftune.tuner.study import open_storage

    study = optuna.load_study(study_name=name, storage=open_storage(storage)[0])
    trials = study.get_trials(deepcopy=False)
    numbers = [t.number for t in trials]
    assert sorted(numbers) == list(range(len(trials)))  # each recorded once, none lost
    finished = [t for t in trials if t.state.is_finished()]
    assert len(finished) == len(trials)  # nothing left running or queued
    # Exactly the requested count, or at most one extra per other worker (two workers
    # that finish within the same instant may both start a last trial).
    assert n <= len(finished) <= n + workers - 1
    roles = [t.user_attrs.get("role") for t in trials]
    for role in ("as_written", "autotune", "heuristic", "guided"):
        assert roles.count(role) == 1, roles
    return trials


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["journal", "postgresql"])
def test_worker_threads_share_one_study(
    kind: str, tmp_path: Path, request: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The others poll for the as-written trial quickly; trials take longer than that.
    monkeypatch.setattr("tftune.tuner.study.search.AS_WRITTEN_POLL_S", 0.05)
    storage = (
        str(tmp_path / "s.journal") if kind == "journal" else request.getfixturevalue("pg_url")
    )
    name = f"threads-{kind}"
    runners = [slow_fake(0.2) for _ in range(3)]
    seen: list[int] = []
    settings = StudySettings(n_trials=10, storage=storage, study_name=name, target="train.py")
    outcome = run_parallel(space(), runners, settings, on_trial=lambda r, b: seen.append(r.number))
    trials = _check_shared(storage, name, 10, 3)
    assert sorted(seen) == sorted(t.number for t in trials)  # each reported once
    assert sum(1 for r in runners if r.runs) >= 2  # they did share the work
    assert outcome.ran_this_session == len(trials)
    best = max(
        (t for t in trials if t.state.name == "COMPLETE"),
        key=lambda t: t.user_attrs["examples_per_s"],
    )
    assert outcome.best.examples_per_s == best.user_attrs["examples_per_s"]
    assert outcome.best.role is not Role.AS_WRITTEN and outcome.confirm is not None

    from tftune.tuner.study.status import study_status

    s = study_status(storage, name)
    assert s.finished == len(trials) and s.target == 10 and s.counts["running"] == 0
    assert s.best is not None and s.best.examples_per_s == outcome.best.examples_per_s


def test_a_failing_worker_stops_the_others(tmp_path: Path) -> None:
    def broken(config: Config) -> float:
        raise RuntimeError("runner bug")

    settings = StudySettings(n_trials=6, storage=str(tmp_path / "j"), study_name="b")
    with pytest.raises(RuntimeError, match="runner bug"):
        run_parallel(space(), [FakeRunner(broken), FakeRunner(broken)], settings)


def test_budget_counts_other_workers_running_trials(tmp_path: Path) -> None:
    import optuna

    from tftune.tuner.study import open_storage

    storage = str(tmp_path / "j")
    st = open_storage(storage)[0]
    study = optuna.create_study(storage=st, study_name="b", direction="maximize")
    study.ask()  # another worker's trial, running now
    assert booked(study.get_trials()) == 1
    later = time.time() + STALE_RUNNING_S + 1
    assert booked(study.get_trials(), now=later) == 0  # a dead worker's
    t = study.ask()
    study.tell(t, 1.0)
    assert booked(study.get_trials()) == 2
    # A trial of a worker on this host whose process is gone (kill -9) will never finish.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = study.ask()
    gone.set_user_attr(WORKER_ATTR, {"host": socket.gethostname(), "pid": dead.pid})
    assert booked(study.get_trials()) == 2
    assert running_fresh(study.get_trials()) == 1
    mine = study.ask()
    mine.set_user_attr(WORKER_ATTR, this_worker())
    mine.set_user_attr(HEARTBEAT_ATTR, time.time())
    assert booked(study.get_trials()) == 3
    # Another host's worker: only its heartbeat tells.
    far = study.ask()
    far.set_user_attr(WORKER_ATTR, {"host": "elsewhere", "pid": 1})
    far.set_user_attr(HEARTBEAT_ATTR, time.time() - STALE_AFTER_S - 60)
    assert booked(study.get_trials()) == 3
    far.set_user_attr(HEARTBEAT_ATTR, time.time())
    assert booked(study.get_trials()) == 4


def test_single_worker_still_runs_the_whole_budget(tmp_path: Path) -> None:
    settings = StudySettings(n_trials=7, storage=str(tmp_path / "j"), study_name="one")
    outcome = run_study(space(), slow_fake(), settings)
    assert len(outcome.records) == 7


# --- tftune status ---------------------------------------------------------------------


def _status_cli(*args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from tftune import cli

    r = CliRunner().invoke(cli.main, ["status", *args])
    return r.exit_code, r.stdout if r.exit_code == 0 else r.output


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
@pytest.mark.parametrize("kind", ["journal", "postgresql"])
def test_status_reads_progress_running_and_best(kind: str, tmp_path: Path, request: Any) -> None:
    import optuna

    from tftune.tuner.study import open_storage
    from tftune.tuner.study.status import render_status, study_status

    storage = (
        str(tmp_path / "s.journal") if kind == "journal" else request.getfixturevalue("pg_url")
    )
    name = f"status-{kind}"
    settings = StudySettings(n_trials=6, storage=storage, study_name=name, target="train.py")
    # Every change doubles the script as written: no trial is behind, none is pruned.
    runner = FakeRunner(lambda c: 250.0 if c.is_as_written() else 500.0, repeats=1)
    run_study(space(), runner, settings)
    study = optuna.load_study(study_name=name, storage=open_storage(storage)[0])
    running = study.ask(dict(study.trials[-1].distributions))
    running.set_user_attr("role", "search")

    s = study_status(storage, name)
    assert s.counts == {"complete": 6, "pruned": 0, "failed": 0, "running": 1, "waiting": 0}
    assert s.target == 6 and s.objective == "throughput" and s.script == "train.py"
    assert [r.number for r in s.running] == [running.number]
    assert s.running[0].params == running.params and running.params
    assert s.best is not None and s.as_written_examples_per_s == 250.0
    assert s.best.examples_per_s > 250.0 and s.best.speedup == s.best.examples_per_s / 250.0
    text = render_status(s)
    assert "6 of 6 trials finished" in text and f"running: trial {running.number}" in text
    assert f"best: trial {s.best.number}" in text

    code, out = _status_cli("--storage", storage, "--study-name", name, "--json")
    assert code == 0, out
    data = json.loads(out)  # standard output holds the document alone
    assert data["trials"]["running"] == 1 and data["best"]["number"] == s.best.number
    assert data["running"][0]["since"] is not None
    saved = tmp_path / "status.json"
    code, out = _status_cli("--storage", storage, "--study-name", name, "--json", str(saved), "-q")
    assert code == 0 and out == "" and json.loads(saved.read_text())["trials"] == data["trials"]
    finished = [t for t in study.get_trials() if t.state.is_finished()]
    assert {t.system_attrs[WORKER_ATTR]["pid"] for t in finished} == {os.getpid()}
    # A worker of an earlier tftune kept it among the user attributes: still read.
    running.set_user_attr(WORKER_ATTR, this_worker())
    assert study_status(storage, name).running[0].worker == f"{socket.gethostname()}:{os.getpid()}"
    assert data["best"]["config"] == dict(s.best.params)


def test_status_study_name_is_optional_with_one_study_and_checked(tmp_path: Path) -> None:
    storage = str(tmp_path / "s.journal")
    run_study(space(), slow_fake(), StudySettings(n_trials=4, storage=storage, study_name="a"))
    code, out = _status_cli("--storage", storage)
    assert code == 0 and "study 'a'" in out and "4 of 4 trials finished" in out
    run_study(space(), slow_fake(), StudySettings(n_trials=4, storage=storage, study_name="b"))
    code, out = _status_cli("--storage", storage)
    assert code == 1 and "holds 2 studies" in out and "a, b" in out
    assert len(out.strip().splitlines()) == 1
    code, out = _status_cli("--storage", storage, "--study-name", "zz")
    assert code == 1 and "--study-name zz: not in" in out and "a, b" in out
    code, out = _status_cli("--storage", str(tmp_path / "missing.journal"))
    assert code == 1 and "no such journal file" in out
    assert not (tmp_path / "missing.journal").exists()
    code, out = _status_cli("--storage", f"sqlite:///{tmp_path / 'missing.db'}")
    assert code == 1 and "no such database file" in out
    assert not (tmp_path / "missing.db").exists()


# --- two real `tftune optimize` processes on one study ----------------------------------

FAST = ["--trials", "4", "--window", "0.5", "--repeats", "1", "--no-bounds", "--no-guided"]


def _two_workers(storage: str, name: str, cwd: Path) -> list[tuple[str, dict[str, Any]]]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    procs = []
    try:
        for i in range(2):
            argv = [
                sys.executable, "-m", "tftune", "optimize", str(EXAMPLE), *FAST,
                "--storage", storage, "--study-name", name, "--json", f"w{i}.json",
                "--best", f"best{i}.json", "-o", f"w{i}.html", "--", "--steps", "100000",
            ]  # fmt: skip
            procs.append(
                subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outs = [p.communicate(timeout=400)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    return [(out, json.loads((cwd / f"w{i}.json").read_text())) for i, out in enumerate(outs)]


@pytest.mark.slow
@requires_tf
# Two processes on one journal file are `tests/e2e/test_slurm.py`'s array test (with the
# screen and the guided trial); this one is PostgreSQL's, and without them. Add "journal"
# here to run both storages through it (~55 s more of the suite on 2 cores).
@pytest.mark.parametrize("kind", ["postgresql"])
def test_two_optimize_processes_share_one_study(kind: str, tmp_path: Path, request: Any) -> None:
    storage = "study.journal" if kind == "journal" else request.getfixturevalue("pg_url")
    name = f"procs-{kind}"
    results = _two_workers(storage, name, tmp_path)
    full = str(tmp_path / storage) if kind == "journal" else storage
    trials = _check_shared_procs(full, name)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    aw = next(t for t in complete if t.user_attrs["role"] == "as_written")
    for out, data in results:
        assert data["trials"]["complete"] + data["trials"]["pruned"] + data["trials"][
            "failed"
        ] == len(trials)
        # Each process chose its winner in its own final round over the combined trials:
        # one of the study's trials, re-measured and not slower than the script as written
        # in that round (or the script as written itself, saying why).
        b = data["best"]
        assert b["trial"] in {t.number for t in complete}
        if b["role"] == "as_written":
            assert b["trial"] == aw.number
            assert any("did not hold up" in n for n in data["notes"]), data["notes"]
        else:
            c = b["confirmed"]
            floor = data["baselines"]["as_written"]["confirmed"] or data["baselines"]["as_written"]
            assert c["trial"] == b["trial"] and c["examples_per_s"] >= floor["examples_per_s"]
            assert f"(trial {b['trial']}," in out
    ran = [int(m) for out, _ in results for m in re.findall(r"(\d+) ran now", out)]
    assert sum(ran) == len(trials) and all(r >= 1 for r in ran), ran  # both worked

    from tftune.tuner.study.status import study_status

    # The session's PostgreSQL server holds other tests' studies too.
    s = study_status(full, None if kind == "journal" else name)
    assert s.study_name == name and s.finished == len(trials) and s.best is not None
    # Status reads the winner a process decided (stored in the study; `study.best`), not
    # the search's highest figure: the last process to decide wrote it. A decision taken
    # before the other process's last trial finished is stale: then the search's best.
    chosen = {data["best"]["trial"] for _, data in results}
    if s.best.decided:
        assert s.best.number in chosen, (s.best, chosen)
    else:
        top = max(complete, key=lambda t: t.user_attrs["examples_per_s"])
        assert s.best.number == top.number, (s.best, top.number)


def _check_shared_procs(storage: str, name: str) -> list[Any]:
    import optuna

    from tftune.tuner.study import open_storage

    trials = optuna.load_study(study_name=name, storage=open_storage(storage)[0]).get_trials()
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    assert all(t.state.is_finished() for t in trials)
    assert 4 <= len(trials) <= 5  # --trials 4, two workers: at most one extra
    roles = [t.user_attrs.get("role") for t in trials]
    for role in ("as_written", "autotune", "heuristic"):
        assert roles.count(role) == 1, roles
    assert "guided" not in roles
    return trials


def test_one_workers_error_stops_the_others_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whichever worker does not get the as-written trial measures its own at once.
    monkeypatch.setattr("tftune.tuner.study.search.AS_WRITTEN_WAIT_S", 0.0)
    stop = threading.Event()
    stopped: list[str] = []

    def blocking(config: Config) -> float:
        """Stands for a trial in progress: it ends only when the stop flag is set (the
        real runner's sleep raises `WorkerStopped` then)."""
        if not stop.wait(120):
            return 1.0
        stopped.append(threading.current_thread().name)
        raise WorkerStopped("stopped")

    def interrupted(config: Config) -> float:
        time.sleep(0.2)  # the other worker is inside its trial by now
        raise KeyboardInterrupt

    settings = StudySettings(n_trials=6, storage=str(tmp_path / "j"), study_name="k")
    blocks, ctrl_c = FakeRunner(blocking, repeats=1), FakeRunner(interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_parallel(space(), [blocks, ctrl_c], settings, stop=stop)
    assert stop.is_set()
    assert not [t for t in threading.enumerate() if t.name.startswith("tftune-worker")]
    import optuna

    from tftune.tuner.study import open_storage
    from tftune.tuner.study.storage import INTERRUPTED_ATTR

    study = optuna.load_study(study_name="k", storage=open_storage(str(tmp_path / "j"))[0])
    # Both trials in flight are recorded as interrupted: a resumed run measures them again.
    assert stopped
    failed = [t for t in study.get_trials() if t.state.name == "FAIL"]
    assert len(failed) == 2 and all(t.user_attrs.get(INTERRUPTED_ATTR) for t in failed)
