"""A stand-in for the study's `Runner`: test code around the study without TensorFlow.

`FakeRunner` honours the `tftune.tuner.study.Runner` contract as the real runner
(`tftune.tuner.study.ScriptRunner`, the user's script in a child process) does, and
`tests/tuner/study/test_runner_contract.py` checks both against it; but it runs nothing. What
each run measures comes from a function of the config, so a study over it is fast and
deterministic::

    from tftune.testing import FakeRunner
    from tftune.tuner.study import StudySettings, run_study

    def script(config):  # a latency-bound map: parallelism pays, up to 8
        site = config.sites.get("train.py:10")
        par = (site.num_parallel_calls if site else None) or 1
        return 250.0 * min(max(par, 1), 8)  # examples/s

    # space: `tftune.tuner.searchspace.space_build.build_space`
    runner = FakeRunner(script, repeats=2)
    outcome = run_study(space, runner, StudySettings(storage="s.journal", n_trials=8))
    assert runner.configs[0].is_as_written()  # what ran, in order: `runner.runs`

The function returns, for one config, one of:

- a number: examples/s, with the runner's `utilization` and input-wait share;
- ``(examples/s, utilization)``: the input-wait share is ``1 - utilization`` (the duty
  cycle, as on a CPU) unless the runner was given `input_wait_share`;
- `Figures`: every figure of a measured run, notes included;
- `Failure`: the run failed (crash, OOM, NaN...), with its reason, stderr and exit code.

It may also raise (``KeyboardInterrupt`` stands for Ctrl-C in the middle of a trial).
`by_config` builds the function from a table of configs. For `Mode.PIPELINE_ONLY` and
`Mode.MODEL_ONLY` the function sees the config marked as the real runner marks it
(`tftune.tuner.searchspace.bounds.bound_mode` names the half measured).

Each run measures `repeats` windows at the run's figure; after each, ``on_repeat(index,
examples/s so far)``, and False stops the run: PRUNED, with the windows so far and the
real runner's reason ("pruned after N window(s)"). `fail` marks configs that run out of
memory; `seconds` makes each run take that long (so that parallel workers overlap).
A `Figures` may carry the loss curve the run read and the optimizers it built (the
learning check). What it does not model stays empty: steps, examples, step times,
streams, training time. One runner per thread, as the study's workers have (`runs` is appended to).

Imports neither TensorFlow nor Optuna.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from tftune.core.failures import FailureKind
from tftune.core.learning import LossCurve, OptimizerSeen
from tftune.core.trial_notes import OutputPrecisionFinding
from tftune.core.vocabulary import TrialState
from tftune.probes.live.clock import percentile
from tftune.tuner.measurement import Measurement
from tftune.tuner.searchspace.bounds import with_bound_mode
from tftune.tuner.searchspace.config import Config
from tftune.tuner.study.contract import Mode, RepeatCallback, Runner

__all__ = [
    "OUT_OF_MEMORY",
    "Failure",
    "FakeRun",
    "FakeRunner",
    "FigureLike",
    "Figures",
    "ScriptModel",
    "by_config",
]

# What a config that `fail` marks ends with: the real runner's words for an OOM kill.
OUT_OF_MEMORY = "out of memory (exit code 137)"


@dataclass(frozen=True, slots=True)
class Figures:
    """What one measured run of the script achieves. A figure left None is the
    runner's default (`FakeRunner`'s `utilization`, `input_wait_share`, `spread`)."""

    examples_per_s: float
    utilization: float | None = None
    input_wait_share: float | None = None
    spread: float | None = None
    notes: tuple[str, ...] = ()  # what the script's run said, in words
    # The 16-bit output layers it found (among the run's notes too, as the runner's are).
    findings: tuple[OutputPrecisionFinding, ...] = ()
    # The training loss the run read (the learning check), and the optimizers it built.
    loss: LossCurve | None = None
    optimizers: tuple[OptimizerSeen, ...] = ()


@dataclass(frozen=True, slots=True)
class Failure:
    """A run that failed: nothing measured, the reason in one line, and where the
    script left them, the end of its stderr and its exit status (negative: a signal)."""

    reason: str
    stderr_tail: str = ""
    returncode: int | None = None
    kind: FailureKind | None = None


FigureLike = float | tuple[float, float] | Figures | Failure
# The script, as the fake sees it: what a run under a config measures.
ScriptModel = Callable[[Config], FigureLike]


@dataclass(frozen=True, slots=True)
class FakeRun:
    """One `FakeRunner.measure` call, as it ran."""

    config: Config  # as the study asked for it (unmarked by the mode)
    mode: Mode
    windows: int  # windows measured: fewer than `repeats` when pruned, 0 when failed
    thread: str  # the thread that called (parallel workers each have their own)
    measurement: Measurement


def by_config(
    table: Iterable[tuple[Config, FigureLike]], default: FigureLike | None = None
) -> ScriptModel:
    """A `ScriptModel` from (config, figures) pairs, compared by equality (a `Config`
    holds mappings, so it is no dict key); `default` for any other config. A config
    that is in neither is a mistake in the test: `LookupError`."""
    pairs = list(table)

    def look_up(config: Config) -> FigureLike:
        for known, figures in pairs:
            if known == config:
                return figures
        if default is None:
            raise LookupError(f"by_config: no figures for {config.to_json()}")
        return default

    return look_up


class FakeRunner(Runner):
    """A `Runner` over a model of the script (module docstring): deterministic, no
    process, no TensorFlow. `runs` records every call in order; `configs` is their
    configs."""

    def __init__(
        self,
        script: ScriptModel,
        *,
        repeats: int = 3,
        utilization: float = 0.5,
        input_wait_share: float | None = None,
        spread: float = 0.02,
        utilization_kind: str = "duty_cycle",
        fail: Callable[[Config], bool] | None = None,
        seconds: float = 0.0,
        gpu_visible: bool = False,
    ) -> None:
        if repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {repeats}")
        self.script, self.repeats, self.fail, self.seconds = script, repeats, fail, seconds
        self.utilization, self.input_wait_share = utilization, input_wait_share
        self.spread, self.utilization_kind = spread, utilization_kind
        self.gpu_visible = gpu_visible
        self.runs: list[FakeRun] = []

    @property
    def configs(self) -> list[Config]:
        """The configs measured so far, in order."""
        return [r.config for r in self.runs]

    def measure(
        self,
        config: Config,
        *,
        mode: Mode = Mode.TRAIN,
        on_repeat: RepeatCallback | None = None,
    ) -> Measurement:
        applied = config if mode is Mode.TRAIN else with_bound_mode(config, mode.value)
        if self.fail is not None and self.fail(applied):
            outcome: FigureLike = Failure(OUT_OF_MEMORY, kind=FailureKind.OOM)
        else:
            outcome = self.script(applied)
        if self.seconds > 0:
            time.sleep(self.seconds)
        if isinstance(outcome, Failure):
            m, windows = self._failed(outcome), 0
        else:
            m, windows = self._measured(self._figures(outcome), on_repeat)
        m = replace(m, config=applied, wall_s=self.seconds)
        thread = threading.current_thread().name
        self.runs.append(FakeRun(config, mode, windows, thread, m))
        return m

    def _figures(self, outcome: float | tuple[float, float] | Figures) -> Figures:
        if isinstance(outcome, Figures):
            f = outcome
        elif isinstance(outcome, tuple):
            f = Figures(float(outcome[0]), float(outcome[1]))
        else:
            f = Figures(float(outcome))
        util = self.utilization if f.utilization is None else f.utilization
        wait = f.input_wait_share
        if wait is None:
            wait = self.input_wait_share
        if wait is None:
            wait = max(0.0, 1.0 - util)  # the duty cycle
        spread = self.spread if f.spread is None else f.spread
        return replace(f, utilization=util, input_wait_share=wait, spread=spread)

    def _measured(self, f: Figures, on_repeat: RepeatCallback | None) -> tuple[Measurement, int]:
        done: list[float] = []
        state, reason = TrialState.COMPLETE, None
        for index in range(self.repeats):
            done.append(f.examples_per_s)
            if on_repeat is not None and not on_repeat(index, _median(done)):
                state, reason = TrialState.PRUNED, f"pruned after {len(done)} window(s)"
                break
        m = Measurement(
            state,
            _median(done),
            f.utilization,
            self.utilization_kind,
            spread=f.spread,
            input_wait_share=f.input_wait_share,
            repeats=tuple(done),
            reason=reason,
            notes=(*f.notes, *(x.message() for x in f.findings)),
            findings=f.findings,
            loss=f.loss,
            optimizers=f.optimizers,
        )
        return m, len(done)

    @staticmethod
    def _failed(f: Failure) -> Measurement:
        return Measurement(
            TrialState.FAILED,
            failure=f.kind,
            reason=f.reason,
            stderr_tail=f.stderr_tail,
            returncode=f.returncode,
        )


def _median(values: Sequence[float]) -> float:
    return percentile(values, 50)  # the real runner's median of its windows
