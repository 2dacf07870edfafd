"""The guided start of the search: what is measured before the study, and how it shapes
the space and seeds the study.

- bound analysis' runs (`measure_model`, `measure_ceiling`): the model alone and the
  pipeline alone on cached data, as written (the arithmetic is `searchspace.bounds`);
- the pipeline screen (`screen_pipeline`, `searchspace.screen`): its best configs seed the
  search, and where the pipeline is not the limit its knobs are narrowed
  (`narrow_if_not_the_limit`);
- the guided profile (`guided_hint`, `profile_hint`): a short profile of the script as
  written, analyzed, unless the bounds or the screen already say what it would
  (`profile_skipped`); `with_bounds` marks the hint model-bound.

Each returns frozen data or a note; nothing here imports TensorFlow in this process: the
script runs in child processes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tftune.core.vocabulary import TrialState
from tftune.tuner.searchspace.bounds import MODEL_BOUND_FACTOR, Ceiling, pipeline_sizing
from tftune.tuner.searchspace.config import Config
from tftune.tuner.searchspace.screen import Screen, with_screen_sizing
from tftune.tuner.searchspace.space import SearchSpace
from tftune.tuner.study import GuidedHint, Mode, Runner
from tftune.tuner.trial import Discovery

if TYPE_CHECKING:
    from tftune.tuner.trial.spare import SparePool


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
    """The pipeline screen (`tuner.searchspace.screen`), when the space has pipeline knobs: its best
    configs seed the search, and its figure for the script as written is the bound
    analysis' pipeline alone. With the `model` alone measured, it stops after the
    script as written where that drains `MODEL_BOUND_FACTOR` times faster. It starts
    from the waiting spare, with none importing beside its drains (`LastSpare`)."""
    from tftune.tuner.searchspace.screen import PIPELINE_FIELDS, run_screen
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
    from tftune.tuner.searchspace.screen import PIPELINE_FIELDS

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
    from tftune.probes.advice.analysis import analyze, step_advice
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
