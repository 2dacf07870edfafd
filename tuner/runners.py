"""The runners of one tuning run: one per worker slot (its GPUs and CPUs), each a
`ScriptRunner` of the user's script measured as ``--window``/``--repeats``/
``--step-timeout`` say, or the injected runner for every worker (tests, the API).

`make_runners` → `RunnerPool`: the runners, the event that stops them all, and each
slot's reaper of the processes it leaves behind. `tuner.optimize` runs the study on them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tftune.tuner.study import Runner
from tftune.tuner.trial import Discovery

if TYPE_CHECKING:
    from tftune.tuner.trial.spare import SparePool


@dataclass(frozen=True, slots=True)
class Slots:
    """``--workers``, ``--gpus-per-trial``, ``--cpus-per-trial``."""

    workers: int
    gpus_per_trial: int | None
    cpus_per_trial: int | None


@dataclass(frozen=True, slots=True)
class MeasureOptions:
    """``--window``, ``--repeats``, ``--step-timeout``: how one trial is measured."""

    window_s: float | None
    repeats: int | None
    step_timeout_s: float | None


@dataclass(frozen=True, slots=True)
class RunnerPool:
    """The runners (one per worker), the event that stops them all and, for the real
    script, each slot's reaper of the processes it leaves behind."""

    runners: tuple[Runner, ...]
    stop: threading.Event
    reap: tuple[Callable[[], None], ...]
    spares: SparePool | None = None  # the warm spares the runners start from, if any


def make_runners(
    path: Path,
    args: Sequence[str],
    found: Discovery,
    gpu: bool,
    runner: Runner | None,
    slots_opt: Slots,
    measure: MeasureOptions,
    note: Callable[[str], None],
    spares: SparePool | None = None,
    epoch_examples: int | None = None,
) -> RunnerPool:
    """A `ScriptRunner` per worker slot (with its GPUs and CPUs), or the injected
    runner for every worker. `epoch_examples`: the training dataset's examples per pass
    where tf.data does not know its length (`MeasureSpec.epoch_examples`)."""
    from tftune.tuner.study import ScriptRunner
    from tftune.tuner.study import workers as parallel
    from tftune.tuner.trial import MeasureSpec

    workers = slots_opt.workers
    slots = parallel.assign_slots(
        workers,
        gpus=parallel.visible_gpus() if slots_opt.gpus_per_trial is not None else (),
        gpus_per_trial=slots_opt.gpus_per_trial,
        cpus=parallel.available_cpus(),
        cpus_per_trial=slots_opt.cpus_per_trial,
    )
    if workers > 1 and not gpu:
        note(parallel.CPU_ONLY_WARNING.format(n=workers))
    elif workers > 1 and slots_opt.gpus_per_trial is None:
        note(parallel.SHARED_GPU_WARNING.format(n=workers))
    stop = threading.Event()
    if runner is not None:
        return RunnerPool((runner,) * workers, stop, ())
    trains = found.training
    spec = MeasureSpec(
        step_timeout_s=measure.step_timeout_s,
        busiest_loop=found.busiest_loop,
        training_at=(trains.site, trains.place) if trains is not None else None,
        epoch_examples=epoch_examples,
    )
    if measure.window_s is not None:
        window = measure.window_s
        spec = replace(spec, window_s=window, warmup_s=min(spec.warmup_s, window))
    if measure.repeats is not None:
        spec = replace(spec, repeats=measure.repeats)
    if spares is not None and found.uses_keras:  # the spares to come import Keras too
        spares.preload = (*spares.preload, KERAS_PRELOAD)
    reap: list[Callable[[], None]] = []
    runners: list[Runner] = []
    for slot in slots:
        deps, launcher = parallel.slot_deps(slot, stop)
        if spares is not None:  # one slot (`spare_pool`): its runs start from the spares
            deps = replace(deps, spares=spares)
        reap.append(launcher.reap)
        runners.append(ScriptRunner(path, args, spec=spec, gpu_visible=gpu, deps=deps))
        if slot.gpus is not None or slot.cpus is not None:
            note(slot.describe())
    return RunnerPool(tuple(runners), stop, tuple(reap), spares)


# Loads Keras with the TensorFlow it goes with (`tf.keras` resolves it lazily): a spare
# of a script that uses Keras imports both.
KERAS_PRELOAD = "tensorflow.keras.layers"


@contextlib.contextmanager
def spare_pool(
    path: Path, slots: Slots, runner: Runner | None, note: Callable[[str], None]
) -> Iterator[SparePool | None]:
    """The warm spares of a tuning run (`trial.spare`), stopped when it ends: where the
    real script runs in one slot with the whole machine (no ``--workers``, no per-trial
    GPUs or CPUs, whose slots launch their own way) and the script allows it
    (`spares_safe`). Otherwise None: every run starts a fresh interpreter."""
    from tftune.tuner.trial.launch import popen_launcher
    from tftune.tuner.trial.spare import SparePool, spares_safe

    one_slot = slots.workers == 1 and slots.gpus_per_trial is None and slots.cpus_per_trial is None
    if runner is not None or not one_slot:
        yield None
        return
    unsafe = spares_safe(path)
    if unsafe is not None:
        note(f"each run starts a fresh interpreter: {unsafe}, which TensorFlow may read on import")
        yield None
        return
    pool = SparePool(popen_launcher, sys.executable, os.getcwd())
    try:
        yield pool
    finally:
        pool.close()
