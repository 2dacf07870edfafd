"""One measured run of the script under one config: the one type the trial runner
produces (`tftune.tuner.trial.run_trial`), the study consumes and the emitter reads (it
once had five, with fields copied by hand between them). `to_json` is the runner's JSON
shape: the figures nested under ``"metrics"`` (None when nothing was measured).

``None`` is "not measured", never 0: `reason` says why when the state is not complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tftune.core.failures import CrashSummary, FailureKind
from tftune.core.learning import LossCurve, OptimizerSeen
from tftune.core.training import StreamSeen, TrainingTime
from tftune.core.trial_notes import OutputPrecisionFinding
from tftune.core.vocabulary import TrialState
from tftune.probes.advice.service_sizing import CpuUsage

if TYPE_CHECKING:
    from tftune.tuner.searchspace.config import Config


@dataclass(frozen=True, slots=True)
class Measurement:
    """What one run achieved in its steady-state windows, and how it ended."""

    state: TrialState
    # Throughput and utilization: the medians over the repeat windows.
    examples_per_s: float | None = None
    utilization: float | None = None  # NVML mean utilization, or the duty cycle on a CPU
    utilization_kind: str = "duty_cycle"  # "nvml" | "duty_cycle"
    utilization_note: str | None = None  # "not measured (reason)" when utilization is None
    spread: float | None = None  # (max − min) / median of the repeats' examples/s
    input_wait_share: float | None = None  # time the consumer waited for the next element
    repeats: tuple[float, ...] = ()  # examples/s of each repeat window
    # Step timing over the windows.
    steps_per_s: float | None = None
    step_p50_ms: float | None = None
    step_p90_ms: float | None = None
    steps: int = 0
    examples: int = 0
    window_s: float = 0.0  # total measured time
    truncated: bool = False  # the script ended before the full window: what ran
    gpu_memory_used_mb: float | None = None
    gpu_note: str | None = None  # "not measured (reason)" when NVML gave no figures
    # How it ended.
    failure: FailureKind | None = None
    reason: str | None = None  # one line, for failed and pruned runs
    stderr_tail: str = ""
    returncode: int | None = None  # negative: the signal that killed it
    wall_s: float = 0.0
    notes: tuple[str, ...] = ()  # what the script's run said, in words
    # The output layers found computing in 16 bits (each also among the notes, in words).
    findings: tuple[OutputPrecisionFinding, ...] = ()
    streams: tuple[StreamSeen, ...] = ()  # the datasets it iterated, and their roles
    config: Config | None = None  # what the runner applied
    # How training time was told apart: the preamble, other passes taken out, the epoch
    # stall spread over the epoch (`probes.live.training_time`).
    training: TrainingTime | None = None
    # A pipeline drained alone (the bound analysis): the CPU it used, for the sizing.
    cpu: CpuUsage | None = None
    # The training loss against training time (the learning check), or why it has none.
    loss: LossCurve | None = None
    loss_note: str | None = None
    # The Keras optimizers the script built (where a scaled learning rate applies).
    optimizers: tuple[OptimizerSeen, ...] = ()

    @property
    def ok(self) -> bool:
        return self.state is TrialState.COMPLETE

    @property
    def measured(self) -> bool:
        """Windows were measured (a complete or pruned run)."""
        return self.examples_per_s is not None

    def crash(self) -> tuple[str, CrashSummary | None]:
        """(the end of stderr to keep, what it says) for a failed run; ("", None) else."""
        from tftune.tuner.trial.crashes import bounded_tail, summarize_crash

        if self.state is not TrialState.FAILED and self.examples_per_s is not None:
            return "", None
        return bounded_tail(self.stderr_tail), summarize_crash(self.stderr_tail, self.returncode)

    def metrics_json(self) -> dict[str, Any] | None:
        """The windows' figures (the runner's `metrics` object), None when not measured."""
        if not self.measured:
            return None
        return {
            "examples_per_s": self.examples_per_s,
            "steps_per_s": self.steps_per_s,
            "step_p50_ms": self.step_p50_ms,
            "step_p90_ms": self.step_p90_ms,
            "input_wait_share": self.input_wait_share,
            "spread": self.spread,
            "repeats": list(self.repeats),
            "steps": self.steps,
            "examples": self.examples,
            "window_s": self.window_s,
            "utilization": self.utilization,
            "utilization_kind": self.utilization_kind,
            "utilization_note": self.utilization_note,
            "gpu_memory_used_mb": self.gpu_memory_used_mb,
            "truncated": self.truncated,
            "gpu_note": self.gpu_note,
            "training": self.training.to_json() if self.training is not None else None,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "failure": self.failure.value if self.failure else None,
            "reason": self.reason,
            "metrics": self.metrics_json(),
            "config": self.config.to_json() if self.config is not None else None,
            "returncode": self.returncode,
            "wall_s": self.wall_s,
            "notes": list(self.notes),
            "streams": [s.to_json() for s in self.streams],
        }
