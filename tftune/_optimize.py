"""`tftune.optimize()`: discovery → space → bound analysis → study → emitted winner.

The public facade is `tftune.optimize`; `tftune optimize` (cli.py) only parses options,
shows progress and prints what this returns.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tftune.core.errors import ConfigError, ScriptError
from tftune.core.userfiles import write_text_atomic
from tftune.core.vocabulary import TrialState as State
from tftune.probes.environment import Environment, collect
from tftune.tuner.bounds import Ceiling
from tftune.tuner.config import Config
from tftune.tuner.precision import FLOAT32_OUTPUT_FIX, output_findings, recommendation
from tftune.tuner.record import api_call, build_record
from tftune.tuner.space import PY_DATASET_OPS, SearchSpace
from tftune.tuner.study import (
    DEFAULT_SEED,
    DEFAULT_TRIALS,
    GuidedHint,
    Mode,
    Objective,
    Runner,
    StudyOutcome,
    TrialRecord,
)
from tftune.tuner.trial import Discovery

TrialCallback = Callable[[TrialRecord, TrialRecord | None], None]


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    """What `optimize` measured and wrote."""

    outcome: StudyOutcome
    space: SearchSpace
    ceiling: Ceiling | None
    best_file: Path
    json_file: Path | None
    html_file: Path | None
    command: str
    diff: str
    snippet: str
    report: dict[str, Any]

    @property
    def best_config(self) -> Config:
        return self.outcome.best_config


def gpu_visible() -> bool:
    """Whether NVML sees a GPU (read-only query)."""
    from tftune.probes.nvml import NvmlUnavailable, PynvmlReader

    try:
        reader = PynvmlReader()
    except NvmlUnavailable:
        return False
    reader.close()
    return True


def default_study_name(script: str | os.PathLike[str]) -> str:
    return f"tftune-{Path(script).stem}"


def check_writable(path: str | os.PathLike[str], flag: str) -> None:
    """`ConfigError` unless a file can be written at `path` (its folder exists and is
    writable, and it is not a folder itself)."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise ConfigError(f"{flag} {path}: is a directory, expected a file name")
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path}: cannot write: no such directory {folder}")
    if not os.access(folder, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ConfigError(f"{flag} {path}: cannot write: permission denied")


def measure_ceiling(runner: Runner, on_note: Callable[[str], None] | None = None) -> Ceiling:
    """Bound analysis: the pipeline alone and the model alone on cached data, both as
    written. A half that cannot be measured (e.g. the script never iterates a dataset in
    a way we can isolate) is reported as not measured, with the reason."""
    pipe = runner.measure(Config(), mode=Mode.PIPELINE_ONLY)
    model = runner.measure(Config(), mode=Mode.MODEL_ONLY)

    def value(m: Any) -> tuple[float | None, str | None]:
        if m.state is State.COMPLETE and m.examples_per_s:
            return float(m.examples_per_s), None
        return None, f"not measured ({m.reason or 'no steps'})"

    p, pn = value(pipe)
    mo, mn = value(model)
    c = Ceiling(p, mo, pn, mn)
    if on_note is not None:
        on_note(
            f"bound analysis: pipeline alone {p or 0:,.1f} ex/s, model alone {mo or 0:,.1f} ex/s"
        )
    return c


def discover_training(
    path: Path, args: Sequence[str], step_timeout_s: float | None, note: Callable[[str], None]
) -> Discovery:
    """Discovery, run until the script trains; `ScriptError` with what was seen (streams,
    the script's exit code and stderr) when it never does."""
    from tftune.tuner.trial import discover
    from tftune.tuner.trial.watch import FALLBACK_S, FIRST_STEP_S

    note(f"discovering the tf.data call sites of {path.name} and its training loop ...")
    timeout = step_timeout_s if step_timeout_s is not None else FIRST_STEP_S
    found = discover(path, args, timeout_s=timeout)
    trains = found.training
    if trains is None:
        raise ScriptError(f"{path.name}: {found.no_training()}")
    others = [s for s in found.streams if s.stream != trains.stream]
    if found.busiest_loop:
        note(
            f"no optimizer update in {FALLBACK_S:.0f} s of iterating: measuring the dataset "
            f"loop that delivers the most ({trains.where()}), as a pipeline benchmark"
        )
    else:
        note(f"training loop: the dataset {trains.where()}")
    if others:
        note(
            "also iterated, not measured: "
            + "; ".join(f"{s.where()} ({s.elements:,} elements)" for s in others)
        )
    return found


# The guided guess profiles steps [START, STOP) of the script as written.
GUIDE_PROFILE_STEPS = (5, 15)
GUIDE_PROFILE_TIMEOUT_S = 120.0


def profile_hint(
    script: Path, args: Sequence[str], note: Callable[[str], None]
) -> GuidedHint | None:
    """A short profile of the script as written, analyzed (`tftune analyze`): its input
    share and the bottleneck call sites. None (and a note) when no profile could be
    taken or read; the guided guess then uses the as-written trial's own measurement."""

    from tftune.core.errors import UserError
    from tftune.probes.analysis import analyze
    from tftune.tuner.trial import profile_script

    start, stop = GUIDE_PROFILE_STEPS
    with tempfile.TemporaryDirectory(prefix="tftune-guide-") as logdir:
        try:
            prof = profile_script(
                script, args, start, stop, logdir, timeout_s=GUIDE_PROFILE_TIMEOUT_S
            )
            if not prof.captured:
                note(f"guided guess without a profile: {prof.reason}")
                return None
            data = analyze(Path(logdir), tool_version="optimize").to_json()
        except UserError as exc:
            note(f"guided guess without a profile: {exc}")
            return None
    share = data.get("input_share")
    sites = tuple(  # each once (io and preprocessing in one stage share its site)
        dict.fromkeys(
            str(b["call_site"])
            for b in data.get("bottlenecks", [])
            if isinstance(b, dict) and b.get("call_site")
        )
    )
    note(
        "profile of the script as written: "
        + (f"{share:.0%} of each step waits for input" if share is not None else "no steps")
        + (f"; bottleneck at {', '.join(sites)}" if sites else "")
    )
    return GuidedHint(share if isinstance(share, float) else None, sites)


def optimize(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    trials: int = DEFAULT_TRIALS,
    timeout_s: float | None = None,
    objective: str | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    seed: int = DEFAULT_SEED,
    guided: bool = True,
    space_file: str | os.PathLike[str] | None = None,
    batch_size: str | None = None,
    best_file: str | os.PathLike[str] = "tftune-best.json",
    json_file: str | os.PathLike[str] | None = None,
    html_file: str | os.PathLike[str] | None = None,
    window_s: float | None = None,
    repeats: int | None = None,
    step_timeout_s: float | None = None,
    bounds: bool = True,
    confirm: bool = True,
    profile: bool | None = None,
    runner: Runner | None = None,
    workers: int = 1,
    gpus_per_trial: int | None = None,
    cpus_per_trial: int | None = None,
    on_trial: TrialCallback | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    invocation: Sequence[str] | None = None,
    environment: Callable[[], Environment] | None = None,
) -> OptimizeResult:
    """Tune the tf.data pipeline (and optionally batch size and precision) of an
    unmodified training script. See ``tftune optimize --help`` for the options.

    ``invocation`` is the command line as typed (the CLI passes it) for the
    reproducibility record; from the API the record holds the ``tftune.optimize(...)``
    call. ``environment`` replaces `probes.environment.collect` (tests)."""
    from tftune.tuner import emit
    from tftune.tuner.config import save_config
    from tftune.tuner.platform import cpu_flags, mentions_keras
    from tftune.tuner.space import BatchBound, build_space
    from tftune.tuner.space_file import apply_space_file
    from tftune.tuner.study import ScriptRunner, StudySettings, open_storage, run_study
    from tftune.tuner.study import workers as parallel
    from tftune.tuner.trial import MeasureSpec, check_script

    started = time.monotonic()
    path = check_script(script)
    if trials < 1:
        raise ConfigError(f"--trials {trials}: must be at least 1")
    open_storage(storage)  # fail fast on an unreachable URL, before any trial runs
    for out_path, flag in ((best_file, "--best"), (json_file, "--json"), (html_file, "-o")):
        if out_path is not None:  # fail now, not after the whole study
            check_writable(out_path, flag)
    # The machine record (TF build, NVML, pip freeze) takes seconds: read it once, in the
    # Python that runs the script, while discovery and the trials run.
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tftune-record")
    env_future = pool.submit(environment or (lambda: collect(sys.executable)))
    pool.shutdown(wait=False)
    note = on_note or (lambda _s: None)
    bound = BatchBound.parse(batch_size) if batch_size else None
    if space_file is not None:  # a malformed file fails now, not after discovery
        apply_space_file(build_space([], cores=1), space_file, known_sites=None)

    found = discover_training(path, args, step_timeout_s, note)
    if not found.sites:
        note(
            "note: no map, interleave, batch or prefetch call (nor a Keras PyDataset) in "
            "your own files: the dataset is built by a library (e.g. Keras from numpy "
            "arrays), so only the global knobs are searched"
        )
    gpu = gpu_visible() if runner is None else runner.gpu_visible
    cores = os.cpu_count() or 1
    space = build_space(
        found.sites,
        cores=cores,
        gpu_visible=gpu,
        flags=cpu_flags(),
        uses_keras=found.uses_keras and mentions_keras(path),
        batch=bound,
    )
    if space_file is not None:
        space = apply_space_file(space, space_file, found.site_keys())
    if not space.knobs:
        raise ScriptError(f"{script}: nothing to search (every knob is fixed or left out)")
    for w in space.warnings:
        note(f"warning: {w}")
    for lo in space.left_out:
        note(f"left out {lo.name}: {lo.reason}")
    obj = (
        Objective(objective) if objective else (Objective.GPU_UTIL if gpu else Objective.THROUGHPUT)
    )
    if obj is not Objective.THROUGHPUT and not gpu:
        note(f"--objective {obj.value} on a CPU-only machine: utilization is the step duty cycle")

    slots = parallel.assign_slots(
        workers,
        gpus=parallel.visible_gpus() if gpus_per_trial is not None else (),
        gpus_per_trial=gpus_per_trial,
        cpus=parallel.available_cpus(),
        cpus_per_trial=cpus_per_trial,
    )
    if workers > 1 and not gpu:
        note(parallel.CPU_ONLY_WARNING.format(n=workers))
    elif workers > 1 and gpus_per_trial is None:
        note(parallel.SHARED_GPU_WARNING.format(n=workers))
    stop = threading.Event()
    reap: list[Callable[[], None]] = []
    runners: list[Runner] = []
    injected_runner = runner
    if runner is None:
        trains = found.training
        spec = MeasureSpec(
            step_timeout_s=step_timeout_s,
            busiest_loop=found.busiest_loop,
            training_at=(trains.site, trains.place) if trains is not None else None,
        )
        if window_s is not None:
            spec = replace(spec, window_s=window_s, warmup_s=min(spec.warmup_s, window_s))
        if repeats is not None:
            spec = replace(spec, repeats=repeats)
        for slot in slots:
            deps, launcher = parallel.slot_deps(slot, stop)
            reap.append(launcher.reap)
            runners.append(ScriptRunner(path, args, spec=spec, gpu_visible=gpu, deps=deps))
            if slot.gpus is not None or slot.cpus is not None:
                note(slot.describe())
        runner = runners[0]
    else:
        runners = [runner] * workers
    # The profile runs the real script: by default only when the trials do too.
    do_profile = (injected_runner is None) if profile is None else profile
    ceiling = measure_ceiling(runner, note) if bounds else None
    hint = profile_hint(path, args, note) if guided and do_profile else None

    settings = StudySettings(
        objective=obj,
        n_trials=trials,
        timeout_s=None if timeout_s is None else max(1.0, timeout_s - (time.monotonic() - started)),
        seed=seed,
        guided=guided,
        storage=storage,
        study_name=study_name or default_study_name(path),
        confirm=confirm,
        target=shlex.join([str(path), *args]),
        hint=hint,
    )
    if len(runners) > 1:
        outcome = parallel.run_parallel(
            space,
            runners,
            settings,
            on_trial=on_trial,
            on_start=on_start,
            on_note=note,
            stop=stop,
            reap=reap,
        )
    else:
        outcome = run_study(
            space, runner, settings, on_trial=on_trial, on_start=on_start, on_note=note
        )

    argv = (
        list(invocation)
        if invocation is not None
        else [
            api_call(
                str(script),
                args,
                {"trials": trials, "seed": seed, "storage": storage, "study_name": study_name},
            )
        ]
    )
    record = build_record(
        path, args, argv=argv, seed=seed, environment=env_future.result()
    ).to_json()
    # Mixed precision with a 16-bit output layer: recommended only with the fix.
    runs = [*outcome.records, *([outcome.confirm] if outcome.confirm is not None else [])]
    findings = sorted({f for r in runs for f in output_findings(r.notes)})
    advice = recommendation(outcome.best_config.mixed_precision or "off", findings)
    if advice is not None:
        note(advice)
    best_path = Path(best_file)
    command = emit.run_command(str(script), args, str(best_path))
    best = emit.best_config_with_metrics(outcome, command)
    extra: dict[str, Any] = {"record": record, "findings": findings}
    if advice is not None:
        extra["notes"] = [advice]
    save_config(replace(best, meta={**best.meta, **extra}), best_path)
    diff = emit.source_diff(path, outcome.best_config)
    own_pipeline = any(s.op not in PY_DATASET_OPS for s in found.sites)
    snippet = emit.globals_snippet(
        outcome.best_config, own_pipeline=own_pipeline, config_file=str(best_path)
    )
    report = emit.tuning_json(
        script=str(script),
        outcome=outcome,
        space=space,
        ceiling=ceiling,
        device="GPU" if gpu else "CPU_ONLY",
        config_file=str(best_path),
        command=command,
        diff=diff,
        snippet=snippet,
        seed=seed,
    )
    report["wall_s"] = round(time.monotonic() - started, 2)
    report["record"] = record
    report["findings"] = findings
    if advice is not None:
        report["notes"] = [*report.get("notes", []), advice]
        report["best"]["requires"] = [FLOAT32_OUTPUT_FIX]
    json_path = emit.write_json_atomic(report, json_file) if json_file is not None else None
    html_path = _write_html(report, html_file)
    return OptimizeResult(
        outcome, space, ceiling, best_path, json_path, html_path, command, diff, snippet, report
    )


def _write_html(report: dict[str, Any], html_file: str | os.PathLike[str] | None) -> Path | None:
    """The HTML tuning report, where the reports package provides a renderer."""
    if html_file is None:
        return None
    import importlib

    try:
        html_mod = importlib.import_module("tftune.reports.tuning_html")
    except ImportError:
        return None
    render = getattr(html_mod, "render_tuning_html", None)
    if render is None:
        return None
    text = render(report)
    p = write_text_atomic(html_file, str(text), ConfigError)
    return p
