"""The real `Runner`: the user's unmodified script, measured by the trial runner.

Each `measure` is one `tftune.tuner.trial.run_trial`: the script in a child process, in
its own process group, under the config; its `Measurement` is the study's. A parallel
worker passes its slot's `RunnerDeps` (its GPUs, CPUs and stop flag: `workers.slot_deps`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tftune.core.vocabulary import TrialState
from tftune.tuner.study.contract import Mode, RepeatCallback, Runner

if TYPE_CHECKING:
    from tftune.tuner.measurement import Measurement
    from tftune.tuner.searchspace.config import Config
    from tftune.tuner.trial import MeasureSpec, RunnerDeps


class ScriptRunner(Runner):
    """`Runner` over the measured trial runner (`tftune.tuner.trial.run_trial`): the
    user's unmodified script in a child process, one process group per trial."""

    def __init__(
        self,
        script: str | os.PathLike[str],
        args: Sequence[str] = (),
        *,
        spec: MeasureSpec | None = None,
        cwd: str | os.PathLike[str] | None = None,
        gpu_visible: bool = False,
        deps: RunnerDeps | None = None,
    ) -> None:
        self.script, self.args, self.spec, self.cwd = script, tuple(args), spec, cwd
        self.gpu_visible = gpu_visible
        self.deps = deps  # a parallel worker's GPUs, CPUs and stop flag

    def measure(
        self,
        config: Config,
        *,
        mode: Mode = Mode.TRAIN,
        on_repeat: RepeatCallback | None = None,
    ) -> Measurement:
        from tftune.tuner.searchspace import bounds
        from tftune.tuner.trial import run_trial

        if mode is not Mode.TRAIN:
            config = bounds.with_bound_mode(config, mode.value)

        def on_report(index: int, eps: float) -> bool:  # run_trial: True means prune
            return on_repeat is not None and not on_repeat(index, eps)

        m = run_trial(
            self.script,
            self.args,
            config,
            self.spec,
            cwd=self.cwd,
            on_report=on_report,
            deps=self.deps,
        )
        if not m.measured:  # nothing measured, whatever stopped it: the study's failure
            return replace(m, state=TrialState.FAILED)
        # A measured run's reason, when it has none of its own, is why its utilization
        # was not measured: the trial line shows it.
        return replace(m, reason=m.reason or m.utilization_note)
