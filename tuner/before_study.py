"""What `tftune optimize` does before its study: the input checks, discovery of the
training loop and the search space over it, the objective, the bound analysis and the
guided profile.

The building blocks of `tuner.optimize` (which runs them in order and re-exports them):
each either returns frozen data or raises a `UserError` (`ConfigError` for an option or
an output path, `ScriptError` for a script that never trains). Nothing here imports
TensorFlow in this process: the script runs in child processes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tftune.core.errors import ConfigError, ScriptError
from tftune.core.userfiles import check_writable
from tftune.core.vocabulary import PREAMBLE_SAID_S, TrialState
from tftune.tuner.bounds import MODEL_BOUND_FACTOR, Ceiling, pipeline_sizing
from tftune.tuner.config import Config
from tftune.tuner.options import OptimizeOptions
from tftune.tuner.screen import Screen, with_screen_sizing
from tftune.tuner.space import SearchSpace
from tftune.tuner.space_build import BatchBound
from tftune.tuner.study import GuidedHint, Mode, Objective, Runner
from tftune.tuner.trial import Discovery

if TYPE_CHECKING:
    from tftune.tuner.trial.spare import SparePool


def check_inputs(script: str | os.PathLike[str], options: OptimizeOptions) -> Path:
    """The script's path; `UserError` for a missing script, an unreachable storage or
    an output file that cannot be written: all before any trial runs. (The option
    values were checked when `options` was built.)"""
    from tftune.tuner.study import open_storage
    from tftune.tuner.trial import check_script

    path = check_script(script)
    open_storage(options.storage)  # fail fast on an unreachable URL, before any trial runs
    for out_path, flag in options.outputs():
        if out_path is not None:  # fail now, not after the whole study
            check_writable(out_path, flag, ConfigError)
    return path


def check_search_options(options: OptimizeOptions) -> BatchBound | None:
    """``--batch-size`` parsed; a malformed ``--space`` file fails now, not after
    discovery."""
    from tftune.tuner.space_build import build_space
    from tftune.tuner.space_file import apply_space_file

    bound = BatchBound.parse(options.batch_size) if options.batch_size else None
    if options.space_file is not None:
        apply_space_file(build_space([], cores=1), options.space_file, known_sites=None)
    return bound


def gpu_visible() -> bool:
    """Whether NVML sees a GPU (read-only query)."""
    from tftune.probes.nvml import NvmlUnavailable, PynvmlReader

    try:
        reader = PynvmlReader()
    except NvmlUnavailable:
        return False
    reader.close()
    return True


ModelHalf = tuple[float | None, str | None]  # the model alone: examples/s, or why not


def _first_windows(index: int, _eps: float) -> bool:  # False: stop, measured enough
    return index + 1 < BOUND_WINDOWS


def _value(m: Any) -> ModelHalf:
    if m.state in (TrialState.COMPLETE, TrialState.PRUNED) and m.examples_per_s:
        return float(m.examples_per_s), None
    return None, f"not measured ({m.reason or 'no steps'})"


def measure_model(runner: Runner, busiest_loop: bool = False) -> ModelHalf:
    """The model alone on cached data, as written, over its first `BOUND_WINDOWS`
    windows. A script that trains nothing (`busiest_loop`) has no model to measure: its
    loop only consumes the pipeline."""
    if busiest_loop:
        return None, f"not measured ({NO_MODEL})"
    return _value(runner.measure(Config(), mode=Mode.MODEL_ONLY, on_repeat=_first_windows))


def measure_ceiling(
    runner: Runner,
    on_note: Callable[[str], None] | None = None,
    screen: Screen | None = None,
    busiest_loop: bool = False,
    model: ModelHalf | None = None,
) -> Ceiling:
    """Bound analysis: the pipeline alone and the model alone on cached data (`model`,
    when `measure_model` already measured it), both as written, each over its first
    `BOUND_WINDOWS` windows (a bound, not a decision: the trials that decide measure all
    theirs). A half that cannot be measured (e.g. the script never iterates a dataset in
    a way we can isolate) is reported as not measured, with the reason. When the pipeline
    screen drained the script as written, its figure is the pipeline alone (one run
    fewer), and the sizing comes from the pipeline at its best screened config."""
    written = screen.as_written() if screen is not None else None
    mo, mn = model if model is not None else measure_model(runner, busiest_loop)
    if written is not None:
        c = Ceiling(written.examples_per_s, mo, None, mn)
        c = with_screen_sizing(c, screen) or c
    else:
        pipe = runner.measure(Config(), mode=Mode.PIPELINE_ONLY, on_repeat=_first_windows)
        p, pn = _value(pipe)
        c = Ceiling(p, mo, pn, mn, pipeline_sizing(pipe.cpu, pipe.examples, pipe.steps, mo))
    if on_note is not None:
        drained = c.pipeline_only_examples_per_s
        on_note(
            "bound analysis: pipeline alone "
            + (f"{drained:,.1f} ex/s" if drained else str(c.pipeline_note or "not measured"))
            + (" (the screen's, as written)" if written is not None else "")
            + (f", model alone {mo:,.1f} ex/s" if mo is not None else f", model alone {mn}")
        )
    return c


# Windows each half of the bound analysis measures.
BOUND_WINDOWS = 1
NO_MODEL = "the script trains nothing: its loop only consumes the dataset"


def with_bounds(hint: GuidedHint | None, ceiling: Ceiling | None) -> GuidedHint | None:
    """`hint` marked `model_bound` when the bound analysis measured the pipeline alone at
    `MODEL_BOUND_FACTOR` times the model alone or more: a profile's few percent of input
    wait then is scheduling, not a pipeline to tune."""
    if ceiling is None or ceiling.far_ahead != "pipeline":
        return hint
    return replace(hint or GuidedHint(None, source="bound analysis"), model_bound=True)


def discover_training(
    path: Path,
    args: Sequence[str],
    step_timeout_s: float | None,
    note: Callable[[str], None],
    spares: SparePool | None = None,
) -> Discovery:
    """Discovery, run until the script trains (from a warm spare where there are some);
    `ScriptError` with what was seen (streams, the script's exit code and stderr) when it
    never does."""
    from tftune.tuner.trial import discover
    from tftune.tuner.trial.launch import RunnerDeps
    from tftune.tuner.trial.watch import FALLBACK_S, FIRST_STEP_S

    note(f"discovering the tf.data call sites of {path.name} and its training loop ...")
    timeout = step_timeout_s if step_timeout_s is not None else FIRST_STEP_S
    found = discover(path, args, timeout_s=timeout, deps=RunnerDeps(spares=spares))
    trains = found.training
    if trains is None:
        raise ScriptError(f"{path.name}: {found.no_training()}")
    others = [s for s in found.streams if s.stream != trains.stream]
    if found.busiest_loop:
        waited = found.fallback_s or FALLBACK_S
        note(
            f"no optimizer update in {waited:.0f} s of iterating"
            + (" (its code names nothing that trains)" if waited < FALLBACK_S else "")
            + f": measuring the dataset loop that delivers the most ({trains.where()}), as a "
            "pipeline benchmark"
        )
    else:
        note(f"training loop: the dataset {trains.where()}")
        said = preamble_note(found.preamble_s)
        if said is not None:
            note(said)
    if others:
        note(
            "also iterated, not measured: "
            + "; ".join(f"{s.where()} ({s.elements:,} elements)" for s in others)
        )
    return found


def preamble_note(preamble_s: float | None) -> str | None:
    """What a long preamble costs the tuning, and why tftune cannot skip it."""
    if preamble_s is None or preamble_s < PREAMBLE_SAID_S:
        return None
    return (
        f"the script runs {preamble_s:.0f} s before its first training step (imports, "
        "counting or building a vocabulary, adapt): every trial pays it, and only training "
        "steps are measured. tftune cannot skip it: it runs in the script's own process, "
        "which holds TensorFlow's threads and so cannot be forked or checkpointed safely. "
        "Saving what it computes to a file and loading it when present shortens every run "
        "of the script, tftune's too"
    )


# The guided guess profiles steps [START, STOP) of the script as written.
GUIDE_PROFILE_STEPS = (5, 15)
GUIDE_PROFILE_TIMEOUT_S = 120.0


def screen_pipeline(
    path: Path,
    args: Sequence[str],
    found: Discovery,
    space: SearchSpace,
    note: Callable[[str], None],
    model: ModelHalf | None = None,
    spares: SparePool | None = None,
) -> Screen | None:
    """The pipeline screen (`tuner.screen`), when the space has pipeline knobs: its best
    configs seed the search, and its figure for the script as written is the bound
    analysis' pipeline alone. With the `model` alone measured, it stops after the
    script as written where that drains `MODEL_BOUND_FACTOR` times faster. It starts
    from the waiting spare, with none importing beside its drains (`LastSpare`)."""
    from tftune.tuner.screen import PIPELINE_FIELDS, run_screen
    from tftune.tuner.trial.launch import RunnerDeps
    from tftune.tuner.trial.spare import LastSpare

    if not any(k.field in PIPELINE_FIELDS for k in space.knobs):
        return None
    trains = found.training
    where = (trains.site, trains.place) if trains else None
    stop = MODEL_BOUND_FACTOR * model[0] if model is not None and model[0] else None
    deps = RunnerDeps(spares=LastSpare(spares)) if spares is not None else None
    screen = run_screen(path, args, space, where, deps=deps, stop_above=stop)
    note(screen.summary())
    return screen


def profile_skipped(found: Discovery, ceiling: Ceiling | None, screen: Screen | None) -> str | None:
    """Why the guided profile would tell nothing the trials need, or None when it would.
    The profile says whether the run is input-bound and where; the guided guess reads
    it. Where the pipeline screen ranked configs and the run is input-bound without it
    (a script that trains nothing waits on its pipeline by construction; or the bound
    analysis measured the model alone at `MODEL_BOUND_FACTOR` times the pipeline alone
    or more), the guess is the screen's best whatever the profile says: one run saved.
    A compute-bound run keeps its profile: its next moves come from there."""
    if screen is None or not screen.seeds():
        return None
    if found.busiest_loop:
        return "the script trains nothing, so it waits on its pipeline by construction"
    if ceiling is not None and ceiling.far_ahead == "model":
        return (
            "the bound analysis says input-bound (pipeline alone "
            f"{ceiling.pipeline_only_examples_per_s or 0:,.1f} ex/s, model alone "
            f"{ceiling.model_only_examples_per_s or 0:,.1f} ex/s)"
        )
    return None


def narrow_if_not_the_limit(
    space: SearchSpace, screen: Screen | None, note: Callable[[str], None]
) -> SearchSpace:
    """Where the screen found the pipeline is not the limit (`Screen.stopped`: as
    written, it drains at `MODEL_BOUND_FACTOR` times the model alone or more), its knobs
    are searched between as written and AUTOTUNE only: the trials go to what can gain
    (the batch, the precision), and TPE's combinations of pipeline knobs that cannot
    change the rate are not each measured."""
    from tftune.tuner.screen import PIPELINE_FIELDS

    if screen is None or not screen.stopped:
        return space
    narrowed = space.narrowed(PIPELINE_FIELDS, "the input pipeline is not the limit")
    if narrowed != space:
        note(
            "the input pipeline is not the limit: its knobs are searched between as written "
            "and AUTOTUNE only"
        )
    return narrowed


def guided_hint(
    path: Path,
    args: Sequence[str],
    found: Discovery,
    ceiling: Ceiling | None,
    screen: Screen | None,
    note: Callable[[str], None],
) -> GuidedHint | None:
    """The guided profile's hint (`profile_hint`), unless `profile_skipped` says it would
    tell nothing the trials need: the as-written trial's own input wait then stands in."""
    skipped = profile_skipped(found, ceiling, screen)
    if skipped is not None:
        note(f"no guided profile: {skipped}; the screen's best is the guided trial")
        return None
    return profile_hint(path, args, note, found.busiest_loop, found.preamble_s or 0.0)


def profile_hint(
    script: Path,
    args: Sequence[str],
    note: Callable[[str], None],
    busiest_loop: bool = False,
    preamble_s: float = 0.0,
) -> GuidedHint | None:
    """A short profile of the script as written, analyzed (`tftune analyze`): its input
    share and the bottleneck call sites. None (and a note) when no profile could be
    taken or read; the guided guess then uses the as-written trial's own measurement.
    `busiest_loop`: discovery found that the script updates nothing, so the profile need
    not wait the full fallback time for an update before it takes the busiest loop.
    `preamble_s`: what the script runs before training, added to the profile's time."""
    from tftune.core.errors import UserError
    from tftune.probes.analysis import analyze, step_advice
    from tftune.tuner.trial import profile_script
    from tftune.tuner.trial.watch import KNOWN_BUSIEST_S

    start, stop = GUIDE_PROFILE_STEPS
    with tempfile.TemporaryDirectory(prefix="tftune-guide-") as logdir:
        try:
            prof = profile_script(
                script,
                args,
                start,
                stop,
                logdir,
                timeout_s=GUIDE_PROFILE_TIMEOUT_S + preamble_s,
                fallback_s=KNOWN_BUSIEST_S if busiest_loop else "from_text",
            )
            if not prof.captured:
                note(f"guided guess without a profile: {prof.reason}")
                return None
            doc = analyze(Path(logdir), tool_version="optimize").document()
        except UserError as exc:
            note(f"guided guess without a profile: {exc}")
            return None
    share = doc.verdict.input_share
    # Each once (io and preprocessing in one stage share its site).
    sites = tuple(dict.fromkeys(b.call_site for b in doc.bottlenecks if b.call_site))
    note(
        "profile of the script as written: "
        + (f"{share:.0%} of each step waits for input" if share is not None else "no steps")
        + (f"; bottleneck at {', '.join(sites)}" if sites else "")
    )
    moves = step_advice(doc)  # the top fix where it is one for the step, then the moves
    return GuidedHint(share, sites, next_moves=moves)


def build_search_space(
    script: str | os.PathLike[str],
    path: Path,
    found: Discovery,
    gpu: bool,
    space_file: str | os.PathLike[str] | None,
    bound: BatchBound | None,
    note: Callable[[str], None],
    data_service: str | None = None,
) -> SearchSpace:
    """The space over the discovered call sites, narrowed by ``--space`` and
    ``--batch-size``, with the tf.data service's knobs for ``--data-service`` (the
    trainers' job name: ``tftune-<script>``); `ScriptError` when nothing is left."""
    from tftune.tuner.platform import cpu_flags, mentions_keras
    from tftune.tuner.space_build import build_space
    from tftune.tuner.space_file import apply_space_file

    if not found.sites:
        note(
            "note: no map, interleave, batch or prefetch call (nor a Keras PyDataset) in "
            "your own files: the dataset is built by a library (e.g. Keras from numpy "
            "arrays), so only the global knobs are searched"
        )
    space = build_space(
        found.sites,
        cores=os.cpu_count() or 1,
        gpu_visible=gpu,
        flags=cpu_flags(),
        uses_keras=found.uses_keras and mentions_keras(path),
        batch=bound,
        data_service=data_service,
        job_name=f"tftune-{path.stem}" if data_service else None,
        training_sites=found.training_sites(),
        elsewhere_sites=found.elsewhere_sites(),
    )
    if space_file is not None:
        space = apply_space_file(space, space_file, found.site_keys())
    if not space.knobs:
        raise ScriptError(f"{script}: nothing to search (every knob is fixed or left out)")
    for w in space.warnings:
        note(f"warning: {w}")
    for lo in space.left_out:
        note(f"left out {lo.name}: {lo.reason}")
    return space


def pick_objective(objective: str | None, gpu: bool, note: Callable[[str], None]) -> Objective:
    """``--objective``; by default GPU utilization where a GPU is visible, else throughput."""
    obj = (
        Objective(objective) if objective else (Objective.GPU_UTIL if gpu else Objective.THROUGHPUT)
    )
    if obj is not Objective.THROUGHPUT and not gpu:
        note(f"--objective {obj.value} on a CPU-only machine: utilization is the step duty cycle")
    return obj
