"""`tftune optimize`: discovery → space → bound analysis → guided profile → study → winner.

The orchestration of one tuning run, as `probes.advice.analysis` is that of `tftune analyze`.
`optimize(script, args, options, hooks)` takes the run's one `OptimizeOptions` (built by
the front door, `tuner.options`) and the caller's `OptimizeHooks` (progress, the HTML
renderer, test doubles), and runs named phases: check the inputs and output paths
(before any trial runs), discover the training loop and build the space, make the
runners (one per worker slot), measure the bounds and take the guided profile, run the
study, then write the outputs (`tuner.output.run_outputs`: config file, diff, snippet,
tuning JSON, HTML page). It returns a frozen `OptimizeResult`. The steps before the
study live where their job does (options' checks, `trial.discovery`,
`searchspace.space_build`, `searchspace.guided`) and are re-exported here.

The HTML page is drawn by the caller's ``render_html`` (the front door passes
`tftune._notebook.tuning_page`): the tuner never imports the reports.
The public facade is `tftune.optimize`; `tftune optimize` (cli.py) only builds the
options, shows progress and prints what this returns.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tftune.core.errors import ConfigError
from tftune.core.run_record import Environment
from tftune.core.tuning_document import TuningDocument
from tftune.core.userfiles import check_writable
from tftune.core.vocabulary import Phase
from tftune.probes.live.environment import collect
from tftune.probes.live.nvml import gpu_visible
from tftune.tuner.fixes.rewrite_check import RewritePlan, step_limited
from tftune.tuner.options import (
    OptimizeOptions,
    default_study_name,
    pick_objective,
)
from tftune.tuner.output.run_outputs import HtmlRenderer, TunedRun, write_outputs
from tftune.tuner.runners import MeasureOptions, RunnerPool, Slots, make_runners, spare_pool
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.searchspace.config import Config
from tftune.tuner.searchspace.guided import (
    GUIDE_PROFILE_STEPS,
    GUIDE_PROFILE_TIMEOUT_S,
    guided_hint,
    measure_ceiling,
    measure_model,
    narrow_if_not_the_limit,
    profile_hint,
    screen_pipeline,
    with_bounds,
)
from tftune.tuner.searchspace.screen import Screen, search_seeds
from tftune.tuner.searchspace.service import check_address
from tftune.tuner.searchspace.space import SearchSpace
from tftune.tuner.searchspace.space_build import BatchBound, build_search_space
from tftune.tuner.study import (
    GuidedHint,
    Objective,
    Runner,
    StudyOutcome,
    StudySettings,
    TrialRecord,
    trial_budget,
)
from tftune.tuner.trial import Discovery
from tftune.tuner.trial.discovery import discover_training
from tftune.tuner.trial.spare import SparePool

__all__ = [
    "GUIDE_PROFILE_STEPS",
    "GUIDE_PROFILE_TIMEOUT_S",
    "HtmlRenderer",
    "OptimizeHooks",
    "OptimizeOptions",
    "OptimizeResult",
    "PhaseCallback",
    "TrialCallback",
    "default_study_name",
    "discover_training",
    "gpu_visible",
    "measure_ceiling",
    "optimize",
    "profile_hint",
]

TrialCallback = Callable[[TrialRecord, TrialRecord | None], None]
PhaseCallback = Callable[[Phase], None]


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    """What `optimize` measured and wrote: the study's outcome, the space, the ceiling,
    the files, the winner as code, and the tuning document (`document`; its JSON,
    `report`, is what ``--json`` wrote)."""

    outcome: StudyOutcome
    space: SearchSpace
    ceiling: Ceiling | None
    best_file: Path
    json_file: Path | None
    html_file: Path | None
    command: str
    diff: str
    snippet: str
    document: TuningDocument
    # What draws it in a notebook cell (`tftune.optimize` hands it in: the tuner may not
    # import reports/); None: the cell shows `__repr__`.
    inline: Callable[[TuningDocument], str] | None = field(default=None, compare=False)

    @property
    def best_config(self) -> Config:
        return self.outcome.best_config

    @property
    def report(self) -> dict[str, Any]:
        """The tuning JSON (docs/json.md), as ``--json`` writes it."""
        return self.document.to_json()

    def __repr__(self) -> str:
        """One line: the winner, its rate and speed-up over the script as written, and
        where its config is."""
        speedup = self.document.best.speedup_vs_as_written
        o = self.outcome
        rate = f", {o.best.examples_per_s:,.1f} ex/s" if o.best.examples_per_s else ""
        gain = f", {speedup:.2f}x the script as written" if speedup else ""
        return (
            f"<tftune OptimizeResult: winner trial {o.best.number} ({o.best.role.value}){rate}"
            f"{gain}; {len(o.records)} trials; config {self.best_file}>"
        )

    def _repr_html_(self) -> str | None:
        return self.inline(self.document) if self.inline is not None else None


@dataclass(frozen=True, slots=True)
class OptimizeHooks:
    """What the caller plugs into a run beside its options; none of it changes what is
    searched. ``on_trial``, ``on_start``, ``on_note``, ``on_phase`` (as each `Phase`
    begins): progress. ``render_html``: draws ``html_file`` (the tuning document → the page;
    no page without it). ``invocation``: the command line as typed, for the
    reproducibility record (None: the API call is recorded). ``runner`` replaces the
    script's trials and ``environment`` `probes.live.environment.collect` (tests, the API)."""

    on_trial: TrialCallback | None = None
    on_start: Callable[[int, int], None] | None = None
    on_note: Callable[[str], None] | None = None
    on_phase: PhaseCallback | None = None
    render_html: HtmlRenderer | None = None
    inline: Callable[[TuningDocument], str] | None = None  # `OptimizeResult.inline`
    invocation: Sequence[str] | None = None
    runner: Runner | None = None
    environment: Callable[[], Environment] | None = None


def optimize(
    script: str | os.PathLike[str],
    args: Sequence[str],
    options: OptimizeOptions,
    hooks: OptimizeHooks | None = None,
) -> OptimizeResult:
    """Tune an unmodified script's tf.data pipeline as `options` say (its fields:
    `tuner.options.OptimizeOptions`; ``tftune optimize --help``), with the caller's
    `hooks`."""
    started = time.monotonic()
    o, h = options, hooks or OptimizeHooks()
    path = check_inputs(script, o)
    env_future = _read_environment(h.environment)
    note = h.on_note or (lambda _s: None)
    phase = h.on_phase or (lambda _p: None)
    bound = check_search_options(o)
    service = check_address(o.data_service) if o.data_service else None
    slots = Slots(o.workers, o.gpus_per_trial, o.cpus_per_trial)
    with spare_pool(path, slots, h.runner, note) as spares:  # runs start warm where safe
        phase(Phase.DISCOVERY)
        found = discover_training(path, args, o.step_timeout_s, note, spares)
        gpu = gpu_visible() if h.runner is None else h.runner.gpu_visible
        space = build_search_space(script, path, found, gpu, o.space_file, bound, note, service)
        # The profile and the checks run the real script: by default only when the
        # trials do too.
        do_profile = (h.runner is None) if o.profile is None else o.profile
        plan = _plan_rewrites(o, do_profile, gpu, path, args, found, space, note, spares)
        space = plan.space
        obj = pick_objective(o.objective, gpu, note)
        measure = MeasureOptions(o.window_s, o.repeats, o.step_timeout_s)
        pool = make_runners(
            path, args, found, gpu, h.runner, slots, measure, note, spares, plan.epoch_examples
        )
        look = _Guidance(o.guided and do_profile, o.bounds, o.guided)
        phase(Phase.SCREEN)
        screen, ceiling, hint = look.measure(path, args, found, space, pool, note)
        plan = step_limited(plan, ceiling)
        space = plan.space
        space = narrow_if_not_the_limit(space, screen, note)
        settings = _settings(o, obj, hint, path, args, started, screen, space)
        phase(Phase.SEARCH)
        outcome = _run_study(space, pool, settings, h, note)
    screened = screen.ranking() if screen is not None else None
    run = TunedRun(script, path, args, found, space, ceiling, gpu, plan, screened, outcome, started)
    out = write_outputs(run, o, h.invocation, env_future, h.render_html, note)
    won = out.won
    return OptimizeResult(
        outcome,
        space,
        ceiling,
        won.best_file,
        out.json_file,
        out.html_file,
        won.command,
        won.diff,
        won.snippet,
        out.document,
        inline=h.inline,
    )


def _plan_rewrites(
    options: OptimizeOptions,
    real: bool,
    gpu: bool,
    path: Path,
    args: Sequence[str],
    found: Discovery,
    space: SearchSpace,
    note: Callable[[str], None],
    spares: SparePool | None,
) -> RewritePlan:
    """The rewrites the training pipeline allows, checked and added to the space
    (`tuner.fixes.rewrite_check`; with ``--no-rewrites`` only the count of an epoch whose
    length tf.data does not know), none where the trials do not run the real script
    (`real`: an injected runner)."""
    from tftune.tuner.fixes.rewrite_check import RewriteOptions, plan_rewrites
    from tftune.tuner.trial.launch import RunnerDeps

    if not real:
        return RewritePlan((), space, considered=False)
    deps = RunnerDeps(spares=spares) if spares is not None else None
    chosen = RewriteOptions(options.rewrites, options.cache_budget, options.cache_dir, gpu)
    return plan_rewrites(path, args, found, space, chosen, note, deps)


def _read_environment(environment: Callable[[], Environment] | None) -> Future[Environment]:
    """The machine record (TF build, NVML, pip freeze) takes seconds: read it once, in
    the Python that runs the script, while discovery and the trials run. Its thread is a
    daemon: a run stopped early (Ctrl-C, an error) exits at once, never waiting for
    TensorFlow's import or pip in the record's probes (up to minutes on a loaded host)."""
    future: Future[Environment] = Future()
    read = environment or (lambda: collect(sys.executable))

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(read())
        except BaseException as exc:  # handed to whoever asks for the record
            future.set_exception(exc)

    threading.Thread(target=work, name="tftune-record", daemon=True).start()
    return future


# --- the study ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Guidance:
    """What is measured before the study: the pipeline screen and the guided profile
    (`profile`: they run the real script), the bound analysis (`bounds`), and whether a
    guided guess is made at all (`guided`)."""

    profile: bool
    bounds: bool
    guided: bool

    def measure(
        self,
        path: Path,
        args: Sequence[str],
        found: Discovery,
        space: SearchSpace,
        pool: RunnerPool,
        note: Callable[[str], None],
    ) -> tuple[Screen | None, Ceiling | None, GuidedHint | None]:
        runner = pool.runners[0]  # the model alone first: where it is the limit, the
        # screen stops after the script as written
        model = measure_model(runner, found.busiest_loop) if self.bounds else None
        screen = (
            screen_pipeline(path, args, found, space, note, model, pool.spares)
            if self.profile
            else None
        )
        ceiling = measure_ceiling(runner, note, screen, model=model) if self.bounds else None
        hint = guided_hint(path, args, found, ceiling, screen, note) if self.profile else None
        return screen, ceiling, with_bounds(hint, ceiling) if self.guided else None


def _settings(
    options: OptimizeOptions,
    obj: Objective,
    hint: GuidedHint | None,
    path: Path,
    args: Sequence[str],
    started: float,
    screen: Screen | None,
    space: SearchSpace,
) -> StudySettings:
    """The study's settings; ``--timeout`` counts from the start of `optimize`; the
    pipeline screen's best configs are the search's first trials."""
    elapsed = time.monotonic() - started
    n_trials, patience = trial_budget(options.trials)
    return StudySettings(
        objective=obj,
        n_trials=n_trials,
        patience=patience,
        timeout_s=None if options.timeout_s is None else max(1.0, options.timeout_s - elapsed),
        seed=options.seed,
        guided=options.guided,
        storage=options.storage,
        study_name=options.study_name or default_study_name(path),
        confirm=options.confirm,
        learning_check=options.objective is not Objective.THROUGHPUT,
        target=shlex.join([str(path), *args]),
        hint=hint,
        seeds=tuple(_seeds(space, screen)),
        screened=screen is not None and (screen.stopped or bool(screen.seeds())),
    )


def _seeds(space: SearchSpace, screen: Screen | None) -> list[dict[str, Any]]:
    """The search's first trials: the pipeline screen's best config (the guided trial),
    the rewrites over it, each rewrite alone (`rewrite_check.rewrite_seeds`), then the
    screen's next best. The rewrites come before the screen's runners-up: ``--trials
    auto`` stops after a run of trials without a gain, and what each rewrite gains alone
    is in the report."""
    from tftune.tuner.fixes.rewrite_check import rewrite_seeds

    screened = search_seeds(space, screen)
    alone, together = rewrite_seeds(space, screened)
    return [*screened[:1], *together, *alone, *screened[1:]]


def _run_study(
    space: SearchSpace,
    pool: RunnerPool,
    settings: StudySettings,
    hooks: OptimizeHooks,
    note: Callable[[str], None],
) -> StudyOutcome:
    """The study: in this thread with one runner; one worker thread a runner with more."""
    from tftune.tuner.study import run_parallel, run_study

    if len(pool.runners) > 1:
        return run_parallel(
            space,
            pool.runners,
            settings,
            on_trial=hooks.on_trial,
            on_start=hooks.on_start,
            on_note=note,
            on_phase=hooks.on_phase,
            stop=pool.stop,
            reap=pool.reap,
        )
    return run_study(
        space,
        pool.runners[0],
        settings,
        on_trial=hooks.on_trial,
        on_start=hooks.on_start,
        on_note=note,
        on_phase=hooks.on_phase,
    )


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
    from tftune.tuner.searchspace.space_build import build_space
    from tftune.tuner.searchspace.space_file import apply_space_file

    bound = BatchBound.parse(options.batch_size) if options.batch_size else None
    if options.space_file is not None:
        apply_space_file(build_space([], cores=1), options.space_file, known_sites=None)
    return bound
