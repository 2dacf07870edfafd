"""Workers started together on one fresh study, as a Slurm array starts its tasks: real
processes (spawned, so nothing is inherited from the test process), held at a barrier,
then each running tftune's study on the same storage (`run_study`: the storage opened,
the study created or loaded, the script as written and the baselines enqueued, the
search) with a `FakeRunner` (no TensorFlow). Not a test module: the tests import it.

One crowd runs several rounds, each on its own fresh storage, so that each worker
imports Optuna once: every round starts all workers at the same instant again.
"""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# How long a worker waits at the barrier for the others (a crashed one breaks it).
BARRIER_TIMEOUT_S = 120.0
# The study's name in every round, and the trials each round's study is asked for.
STUDY = "shared"
OK = "ok"


@dataclass(frozen=True, slots=True)
class CrowdRun:
    """What a crowd did: each worker's exit code, and each worker's result in each round
    (`OK`, or the error it would have exited with), by round then by worker."""

    exit_codes: tuple[int | None, ...]
    results: tuple[tuple[str, ...], ...]

    def failures(self) -> list[str]:
        return [
            f"round {r}, worker {w}: {text}"
            for r, row in enumerate(self.results)
            for w, text in enumerate(row)
            if text != OK
        ]


def _result_file(out_dir: Path, round_: int, worker: int) -> Path:
    return out_dir / f"round{round_}-worker{worker}.txt"


def _one_round(index: int, url: str, n_trials: int) -> str:
    """One worker's run of one round's study: `OK`, or what it failed with, in one line."""
    from studykit import latency_bound, space

    from tftune.core.errors import UserError
    from tftune.testing import FakeRunner
    from tftune.tuner.study import StudySettings, run_study

    runner = FakeRunner(latency_bound, repeats=1, spread=0.01, input_wait_share=0.9)
    settings = StudySettings(
        n_trials=n_trials, storage=url, study_name=STUDY, seed=index, confirm=False
    )
    try:
        run_study(space(), runner, settings)
    except UserError as exc:  # what `tftune optimize` prints before it exits 1
        return f"error: {exc}"
    except Exception as exc:  # a traceback, exit 1
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"crash: {type(exc).__name__}: {first[:300]}"
    return OK


def worker(index: int, urls: Sequence[str], barrier: Any, out_dir: str, n_trials: int) -> None:
    """A spawned worker: for each round, wait for every worker, then run the study."""
    import sys
    import threading

    import tftune.tuner.study.search as search

    # Workers that wait for the as-written trial poll for it quickly; the runs are short.
    search.AS_WRITTEN_POLL_S = 0.05  # type: ignore[misc]
    failed = False
    for r, url in enumerate(urls):
        try:
            barrier.wait(BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            sys.exit(1)
        text = _one_round(index, url, n_trials)
        failed = failed or text != OK
        _result_file(Path(out_dir), r, index).write_text(text)
        gc.collect()  # the round's storage and its connections go now
    sys.exit(1 if failed else 0)


def run_crowd(urls: Sequence[str], out_dir: Path, *, workers: int, n_trials: int) -> CrowdRun:
    """Start `workers` processes that run one study per url in `urls`, all at once each
    time; wait for them (none is left alive) and return what each did."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(workers)
    procs = [
        ctx.Process(target=worker, args=(i, list(urls), barrier, str(out_dir), n_trials))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(BARRIER_TIMEOUT_S * len(urls))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    results = tuple(
        tuple(
            f.read_text() if (f := _result_file(out_dir, r, w)).exists() else "no result"
            for w in range(workers)
        )
        for r in range(len(urls))
    )
    return CrowdRun(tuple(p.exitcode for p in procs), results)
