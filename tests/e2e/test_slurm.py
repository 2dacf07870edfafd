"""The Slurm examples, run with bash as Slurm would run them (one process per array task).

The array's workers share one journal file; every trial must be recorded exactly once:
unique numbers, one trial per baseline role, and the collected winner covers them all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, requires_tf

SLURM = ROOT / "examples" / "slurm"
WORKERS = 2
TRIALS = 6
# Cheap trial windows: the test checks the bookkeeping, not the tuning.
FAST = "--window 0.4 --repeats 1"

# A latency-bound pipeline (a sleeping py_function in a sequential map), so the
# baselines differ and the search has something to find.
TRAIN = """\
import argparse
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100000)
args = parser.parse_args()


def slow(i):
    return tf.py_function(lambda v: (time.sleep(0.002), v)[1], [i], tf.int64)


ds = tf.data.Dataset.range(10**9).map(slow).batch(4)
w = tf.Variable(0.0)  # a raw SGD update: this loop trains
for step, batch in enumerate(ds):
    w.assign_sub(1e-12 * tf.cast(tf.reduce_sum(batch), tf.float32))
    if step + 1 >= args.steps:
        break
print("done")
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    # `tftune` of this Python, as the job would find it on PATH after `module load`/venv.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID", "TFTUNE_COLLECT"):
        env.pop(name, None)
    env.update(extra)
    return env


def _sbatch(name: str) -> list[str]:
    bash = shutil.which("bash")
    assert bash is not None
    return [bash, str(SLURM / name)]


def _journal_trials(journal: Path) -> list[dict[str, object]]:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(journal)))
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    return [
        {"number": t.number, "state": t.state.name, "role": t.user_attrs.get("role")}
        for t in study.get_trials(deepcopy=False)
    ]


def test_workers_started_at_once_enqueue_each_baseline_once(tmp_path: Path) -> None:
    """Three workers (threads, each with its own storage object, as processes would have)
    start on one journal at the same instant: the as-written trial and each baseline are
    enqueued by exactly one of them."""
    import threading
    import time

    from tftune.testing import FakeRunner
    from tftune.tuner.searchspace.config import SiteConfig
    from tftune.tuner.searchspace.space_build import build_space
    from tftune.tuner.study import StudySettings, run_study
    from tftune.tuner.trial.discovery import CallSite

    space = build_space([CallSite("train.py:3", "map", (), SiteConfig(), None, 1)], cores=2)

    journal = tmp_path / "study.journal"
    settings = StudySettings(storage=str(journal), n_trials=9, study_name="s", confirm=False)
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    def worker() -> None:
        start.wait()
        try:
            # 0.05 s a run: long enough for the workers' steps to interleave
            slow = FakeRunner(lambda _c: 100.0, repeats=1, seconds=0.05)
            run_study(space, slow, settings, sleep=lambda _s: time.sleep(0.02))
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    trials = _journal_trials(journal)
    roles = [t["role"] for t in trials if t["role"] is not None]
    for role in ("as_written", "autotune", "heuristic", "guided"):
        assert roles.count(role) == 1, (role, trials)
    assert sorted(t["number"] for t in trials) == list(range(len(trials)))
    assert 9 <= len(trials) <= 9 + 2


def test_every_flag_the_scripts_pass_exists(tmp_path: Path) -> None:
    """The scripts' tftune command lines, checked against the commands' own options."""
    from click.testing import CliRunner

    from tftune.cli import main

    def options(command: str) -> set[str]:
        out = CliRunner().invoke(main, [command, "--help"]).output
        return {w.rstrip(",") for line in out.splitlines() for w in line.split() if w[:1] == "-"}

    for script, commands in (
        ("optimize-array.sbatch", ("optimize",)),
        ("sandbox.sbatch", ("profile", "analyze")),
    ):
        text = (SLURM / script).read_text()
        for command in commands:
            known = options(command)
            used = set()
            for line in text.split(f"tftune {command} ")[1:]:
                body = line.split("\n\n")[0].split('-- "$@"')[0]
                used |= {w for w in body.split() if w.startswith("-") and not w.startswith("-$")}
            used.discard("--")
            assert used, (script, command)
            assert used <= known, (script, command, used - known)
    # Every #SBATCH line is a directive sbatch knows the shape of.
    for script in ("optimize-array.sbatch", "sandbox.sbatch"):
        for line in (SLURM / script).read_text().splitlines():
            if line.startswith("#SBATCH"):
                assert line.split()[1].startswith("--"), line


@requires_tf
@pytest.mark.slow
def test_array_workers_share_one_journal_study(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    out = tmp_path / "out"
    common = {"TFTUNE_TRIALS": str(TRIALS), "TFTUNE_OUT": str(out), "TFTUNE_EXTRA": FAST}
    procs = []
    logs = []
    try:
        for task in range(WORKERS):
            log = open(tmp_path / f"task-{task}.log", "w+")  # noqa: SIM115
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [*_sbatch("optimize-array.sbatch"), "train.py", "--", "--steps", "100000"],
                    cwd=tmp_path,
                    env=_env(SLURM_ARRAY_TASK_ID=str(task), **common),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        for p in procs:
            p.wait(timeout=600)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    for task, (p, log) in enumerate(zip(procs, logs, strict=True)):
        log.seek(0)
        text = log.read()
        log.close()
        assert p.returncode == 0, f"task {task}:\n{text[-3000:]}"

    journal = tmp_path / "tftune-study.journal"
    trials = _journal_trials(journal)
    numbers = [t["number"] for t in trials]
    assert sorted(numbers) == list(range(len(numbers)))  # unique, none lost
    assert all(t["state"] in ("COMPLETE", "PRUNED", "FAIL") for t in trials), trials
    roles = [t["role"] for t in trials if t["role"] is not None]
    for role in ("as_written", "autotune", "guided"):
        assert roles.count(role) == 1, (role, trials)  # no duplicated enqueued baseline
    # No heuristic trial where a worker's pipeline screen drained it; never two.
    assert roles.count("heuristic") <= 1, trials
    # The study stops at TRIALS; a worker that started its last trial while another
    # finished may add one (Optuna's MaxTrialsCallback is checked after each trial).
    assert TRIALS <= len(trials) <= TRIALS + WORKERS - 1

    # Each task wrote its own files, with its own seed, and counted the shared study.
    for task in range(WORKERS):
        report = json.loads((out / f"tftune-tuning-{task}.json").read_text())
        assert report["study"]["seed"] == task
        record = report["record"]  # the exact command of this task, and its seed
        assert record["argv"][:2] == ["tftune", "optimize"] and record["seed"] == task
        argv = record["argv"]
        assert argv[argv.index("--seed") + 1] == str(task)
        assert argv[argv.index("--storage") + 1] == str(journal)
        assert argv[argv.index("--") :] == ["--", "--steps", "100000"]
        assert report["study"]["storage"] == str(journal)
        assert sum(report["trials"].values()) <= len(trials)
        assert (out / f"tftune-best-{task}.json").is_file()
        assert (out / f"tftune-tuning-{task}.html").is_file()

    # Collecting the winner after the array runs no new trial and sees every one.
    collect = subprocess.run(
        [*_sbatch("optimize-array.sbatch"), "train.py", "--", "--steps", "100000"],
        cwd=tmp_path,
        env=_env(TFTUNE_COLLECT="1", **common),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert collect.returncode == 0, collect.stdout[-3000:] + collect.stderr[-3000:]
    assert _journal_trials(journal) == trials
    final = json.loads((out / "tftune-tuning.json").read_text())
    assert sum(final["trials"].values()) == len(trials)
    assert sorted(r["number"] for r in final["trials_detail"]) == numbers
    best = json.loads((out / "tftune-best.json").read_text())
    assert best["meta"]["measured"]["trial"] == final["best"]["trial"]


@requires_tf
@pytest.mark.slow
def test_sandbox_job_profiles_and_analyzes(tmp_path: Path) -> None:
    out = tmp_path / "sandbox"
    run = subprocess.run(
        [
            *_sbatch("sandbox.sbatch"),
            str(ROOT / "examples" / "eager_for.py"),
            "--",
            "--steps",
            "40",
        ],
        cwd=tmp_path,
        env=_env(TFTUNE_STEPS="5:10", TFTUNE_OUT=str(out), SLURM_JOB_ID="123"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    analysis = json.loads((out / "analysis.json").read_text())
    assert analysis["step_detection"] == "markers"
    assert analysis["steps"]["count"] >= 3
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert f"report in {out}/report.html" in run.stdout
