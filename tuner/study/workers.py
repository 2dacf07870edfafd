"""Parallel trials: several workers on one Optuna study, in one process.

Optuna's storage is the distributed engine (`storage`): every worker asks the same study
for its next trial, so there is no home-made scheduler. This module adds what running
several trials at once on one machine needs:

- `assign_slots`: which GPUs (``CUDA_VISIBLE_DEVICES``) and CPUs each concurrent trial
  gets, so one trial's utilization is measured on its own GPUs only;
- `slot_deps`: the trial runner's injection points for one slot (the child's
  environment and CPU affinity, the NVML reader over the slot's GPUs, a stop flag);
- `run_parallel`: N worker threads running trials against one storage, then the winner;
- the warnings for trials that share a CPU-only machine or every GPU.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import IO, TYPE_CHECKING, Any

from tftune.core.errors import ConfigError
from tftune.core.vocabulary import Phase
from tftune.tuner.study.search import run_study

if TYPE_CHECKING:
    from tftune.tuner.searchspace.space import SearchSpace
    from tftune.tuner.study.contract import Runner, StudyOutcome, StudySettings, TrialRecord
    from tftune.tuner.trial.launch import ChildProcess, RunnerDeps

# How long a stop request waits for the worker threads to wind down their trials.
JOIN_POLL_S = 0.2
CPU_ONLY_WARNING = (
    "warning: {n} trials at a time on a CPU-only machine share its cores, so they perturb "
    "each other's measurements; use --workers 1 for clean figures, or --cpus-per-trial K "
    "to give each trial its own cores"
)

SHARED_GPU_WARNING = (
    "warning: {n} trials at a time share every GPU, so each one's utilization includes the "
    "others'; --gpus-per-trial K gives each trial its own GPUs"
)


@dataclass(frozen=True, slots=True)
class Slot:
    """What one concurrent trial may use. ``None`` means "inherit" (no pinning)."""

    index: int
    gpus: tuple[int, ...] | None = None
    cpus: tuple[int, ...] | None = None

    def describe(self) -> str:
        parts = [f"worker {self.index}"]
        if self.gpus is not None:
            parts.append("GPUs " + ",".join(map(str, self.gpus)))
        if self.cpus is not None:
            parts.append("CPUs " + _ranges(self.cpus))
        return ": ".join([parts[0], ", ".join(parts[1:])]) if len(parts) > 1 else parts[0]


def _ranges(values: Sequence[int]) -> str:
    out: list[str] = []
    for v in sorted(values):
        if out and "-" not in out[-1] and int(out[-1]) == v - 1:
            out[-1] = f"{out[-1]}-{v}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == v - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ",".join(out)


def assign_slots(
    workers: int,
    *,
    gpus: Sequence[int] = (),
    gpus_per_trial: int | None = None,
    cpus: Sequence[int] = (),
    cpus_per_trial: int | None = None,
) -> tuple[Slot, ...]:
    """Disjoint GPU and CPU sets, one per worker. `gpus` are the NVML indices visible to
    tftune, `cpus` the CPUs it may run on (its affinity). Too few of either is a
    `ConfigError` naming what is needed."""
    if workers < 1:
        raise ConfigError(f"--workers {workers}: must be at least 1")
    for name, k in (("--gpus-per-trial", gpus_per_trial), ("--cpus-per-trial", cpus_per_trial)):
        if k is not None and k < 1:
            raise ConfigError(f"{name} {k}: must be at least 1")
    if gpus_per_trial is not None and gpus_per_trial * workers > len(gpus):
        raise ConfigError(
            f"--workers {workers} --gpus-per-trial {gpus_per_trial} needs "
            f"{gpus_per_trial * workers} GPUs; {len(gpus)} visible"
        )
    if cpus_per_trial is not None and cpus_per_trial * workers > len(cpus):
        raise ConfigError(
            f"--workers {workers} --cpus-per-trial {cpus_per_trial} needs "
            f"{cpus_per_trial * workers} CPUs; {len(cpus)} available"
        )
    g, c = sorted(gpus), sorted(cpus)
    return tuple(
        Slot(
            index=i,
            gpus=None
            if gpus_per_trial is None
            else tuple(g[i * gpus_per_trial : (i + 1) * gpus_per_trial]),
            cpus=None
            if cpus_per_trial is None
            else tuple(c[i * cpus_per_trial : (i + 1) * cpus_per_trial]),
        )
        for i in range(workers)
    )


def available_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def visible_gpus() -> tuple[int, ...]:
    """NVML indices of the GPUs visible to tftune (read-only query); () without NVML."""
    from tftune.probes.live.nvml import NvmlUnavailable, PynvmlReader

    try:
        reader = PynvmlReader()
    except NvmlUnavailable:
        return ()
    try:
        return reader.devices
    finally:
        reader.close()


class WorkerStopped(KeyboardInterrupt):
    """Raised inside a worker's trial loop once a stop was requested (Ctrl-C, SIGTERM, or
    another worker failed): the trial runner's cleanup then stops the child's process
    group, and the study records the trial as interrupted (as for Ctrl-C), so that a
    resumed run measures it again and it uses no budget."""


class _SlotLauncher:
    """Wraps a launcher: the slot's GPUs in the child's environment, its CPUs as the
    child's affinity (threads the child starts later inherit it), and every child kept
    so that a stopped worker leaves none behind."""

    def __init__(self, slot: Slot, base: Callable[..., ChildProcess]) -> None:
        self.slot, self.base = slot, base
        self.children: list[ChildProcess] = []
        self._lock = threading.Lock()

    def __call__(
        self,
        argv: Sequence[str],
        cwd: str,
        env: dict[str, str],
        stdout: IO[Any] | None,
        stderr: IO[Any] | None,
    ) -> ChildProcess:
        env = dict(env)
        if self.slot.gpus is not None:
            # NVML numbers GPUs in PCI bus order; CUDA must use the same order, or the
            # trial would run on other GPUs than the ones it is measured on.
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.slot.gpus))
        proc = self.base(argv, cwd, env, stdout, stderr)
        if self.slot.cpus is not None and hasattr(os, "sched_setaffinity"):
            # Set from the parent right after exec: no preexec_fn, which is unsafe when
            # the parent runs threads (the workers are threads).
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(proc.pid, self.slot.cpus)
        with self._lock:
            self.children = [c for c in self.children if c.poll() is None] + [proc]
        return proc

    def reap(self) -> None:
        """SIGKILL the process group of every child still alive."""
        import signal

        for c in self.children:
            if c.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(c.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    c.wait(timeout=10)


def slot_deps(
    slot: Slot, stop: threading.Event, base: RunnerDeps | None = None
) -> tuple[RunnerDeps, _SlotLauncher]:
    """The trial runner's dependencies for one slot, and its launcher (to reap)."""
    from tftune.probes.live.nvml import PynvmlReader
    from tftune.tuner.trial.launch import RunnerDeps

    base = base or RunnerDeps()
    launcher = _SlotLauncher(slot, base.launcher)
    inner_sleep = base.sleep
    raised = threading.Event()

    def sleep(seconds: float) -> None:
        # Raise once: the runner's cleanup, which sleeps too, must run to the end.
        if stop.is_set() and not raised.is_set():
            raised.set()
            raise WorkerStopped("stopped")
        inner_sleep(seconds)

    reader = base.nvml_reader
    if slot.gpus is not None and reader is PynvmlReader:
        gpus = slot.gpus

        def reader_factory() -> PynvmlReader:
            return PynvmlReader(devices=gpus)

        reader = reader_factory
    return replace(base, launcher=launcher, sleep=sleep, nvml_reader=reader), launcher


# --- N workers in one process ----------------------------------------------------------


def run_parallel(
    space: SearchSpace,
    runners: Sequence[Runner],
    settings: StudySettings,
    *,
    on_trial: Callable[[TrialRecord, TrialRecord | None], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    on_phase: Callable[[Phase], None] | None = None,
    stop: threading.Event | None = None,
    reap: Sequence[Callable[[], None]] = (),
) -> StudyOutcome:
    """One worker thread per runner, each running trials of the same study until it
    holds ``settings.n_trials``; then the winner is chosen (and confirmed) once, from
    every worker's trials. The first error of any worker stops the others and is raised;
    so is Ctrl-C, after every worker's trial has been stopped."""
    stop = stop or threading.Event()
    started = time.monotonic()
    report_lock = threading.Lock()
    errors: list[BaseException] = []
    ran = [0] * len(runners)

    def report(r: TrialRecord, best: TrialRecord | None) -> None:
        if on_trial is not None:
            with report_lock:
                on_trial(r, best)

    def work(i: int) -> None:
        try:
            outcome = run_study(
                space,
                runners[i],
                replace(settings, confirm=False),
                on_trial=report,
                on_start=on_start if i == 0 else None,
            )
            ran[i] = outcome.ran_this_session
        except BaseException as exc:  # handed to the main thread, which raises it
            errors.append(exc)
            stop.set()

    threads = [
        threading.Thread(target=work, args=(i,), name=f"tftune-worker-{i}", daemon=True)
        for i in range(len(runners))
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(JOIN_POLL_S)
    except KeyboardInterrupt:
        stop.set()
        for t in threads:
            t.join()
        raise
    finally:
        for r in reap:
            r()
    real = [e for e in errors if not isinstance(e, WorkerStopped)]
    if real:
        raise real[0]
    final = run_study(space, runners[0], settings, on_note=on_note, on_phase=on_phase)
    return replace(final, ran_this_session=sum(ran), wall_s=time.monotonic() - started)
