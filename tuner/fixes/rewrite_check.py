"""The rewrites before the study, parent side: consider, check, then search them.

`tftune optimize` reads the training pipeline discovery saw (`tuner.fixes.rewrites.consider`),
runs the script once more up to its training loop to check each candidate's equivalence
there (`check_rewrites`: tuner/child/equivalence.py writes a `RewriteRow` each), decides
where a cache lives (`place_cache`: in memory within the budget, else a file under
``--cache-dir``, else refused with both figures), and adds each rewrite that passed to the
search space as a dimension off / on (`with_rewrites`). The rows of every rewrite
considered, refused ones and those that do not apply included, go to the tuning JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tftune.core.tuning_rewrites import CheckReport, RewriteKind, RewriteRow, RewriteState
from tftune.core.vocabulary import TrialState
from tftune.tuner.child.elements import CHECK_COUNT_S
from tftune.tuner.child.equivalence import CHECK_CANDIDATE_S, CHECK_META_KEY, CheckSpec
from tftune.tuner.fixes.rewrites import (
    COMPUTE_FIELDS,
    REWRITE_FIELDS,
    UNKNOWN_LENGTH,
    Candidate,
    consider,
    consider_compute,
    consider_device,
)
from tftune.tuner.fixes.training_calls import LOOP_FIT, LOOP_FIT_STEPS
from tftune.tuner.option_defaults import CACHE_BUDGET_SHARE, FIRST_STEP_S
from tftune.tuner.options import parse_bytes
from tftune.tuner.output.rewrite_code import RewriteFacts
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.searchspace.config import CACHE_MEMORY, Config
from tftune.tuner.searchspace.space import Knob, KnobValue, LeftOut, SearchSpace, split_knob
from tftune.tuner.study import Role, StudyOutcome
from tftune.tuner.trial import Discovery
from tftune.tuner.trial.launch import ChildRun, RunnerDeps, child_spec, workdir


@dataclass(frozen=True, slots=True)
class RewritePlan:
    """The rewrites of one tuning run: every row considered, and the space with the
    ones that passed as dimensions."""

    rows: tuple[RewriteRow, ...]
    space: SearchSpace
    candidates: tuple[Candidate, ...] = ()
    facts: RewriteFacts = field(default_factory=RewriteFacts)
    considered: bool = True  # False: --no-rewrites (or no real script to check them on)
    # The training dataset's examples per pass, counted where tf.data does not know its
    # length (None: known, or not counted): the trials price an epoch's stall with it.
    epoch_examples: int | None = None


def available_memory() -> int | None:
    """The memory available to new work on this host, in bytes (Linux' MemAvailable)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def cache_budget(option: str | None) -> int | None:
    """``--cache-budget`` in bytes, or `CACHE_BUDGET_SHARE` of the memory available."""
    if option is not None:
        return parse_bytes(option, "--cache-budget")
    free = available_memory()
    return int(free * CACHE_BUDGET_SHARE) if free is not None else None


def _size(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def place_cache(row: RewriteRow, budget: int | None, cache_dir: str | None) -> str | RewriteRow:
    """Where a checked cache lives: `CACHE_MEMORY` when its measured size fits the
    `budget`, else `cache_dir`; else the row refused with both figures."""
    size = row.cache_bytes
    if size is not None and budget is not None and size <= budget:
        return CACHE_MEMORY
    if cache_dir is not None:
        return str(Path(cache_dir).resolve())
    if size is None:
        why = "its size is not known (a pass's length is unknown to tf.data and took too "
        why += "long to count): give --cache-dir to cache it in a file"
    elif budget is None:
        why = f"needs {_size(size)} and this host's available memory is not known: give "
        why += "--cache-budget or --cache-dir"
    else:
        why = f"needs {_size(size)}, budget {_size(budget)} (--cache-budget, or --cache-dir "
        why += "for a file)"
    return replace(row, state=RewriteState.REFUSED, reason=why)


def check_rewrites(
    script: Path,
    args: Sequence[str],
    candidates: Sequence[Candidate],
    training_at: tuple[str | None, str | None] | None,
    deps: RunnerDeps | None = None,
) -> CheckReport:
    """One run of the script up to its training loop, where each candidate is checked
    (tuner/child/equivalence.py) and the training dataset's examples per pass counted
    where tf.data does not know them; a candidate the run never reached is refused,
    saying why."""
    with workdir() as work:
        out = work / "check.json"
        spec = CheckSpec(tuple(candidates), str(out))
        config = replace(Config(), meta={CHECK_META_KEY: spec.to_meta()})
        child = child_spec("apply", script, args, config)
        if training_at is not None:
            child["training_at"] = list(training_at)
        deadline = FIRST_STEP_S + CHECK_COUNT_S + (CHECK_CANDIDATE_S + 5.0) * len(candidates)
        ended = ChildRun(deps or RunnerDeps(), work, child).run(deadline_s=deadline)
        report = _read(out)
    done = {(r.kind, r.site, r.value) for r in report.rows}
    if ended.timed_out:
        why = "not checked: the check ran out of time before it"
    else:
        why = f"not checked: the script ended (code {ended.returncode}) before its training loop"
    missing = [
        c.row(RewriteState.REFUSED, why)
        for c in candidates
        if (c.kind, c.site, c.value) not in done
    ]
    return replace(report, rows=(*report.rows, *missing))


def _read(path: Path) -> CheckReport:
    from tftune.core.document_reading import Reader

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return CheckReport()
    if not isinstance(raw, dict):
        return CheckReport()
    return CheckReport.from_reader(Reader(raw, source=str(path)))


def with_rewrites(
    space: SearchSpace,
    rows: Sequence[RewriteRow],
    placed: dict[str, str],
    candidates: Sequence[Candidate],
) -> SearchSpace:
    """`space` with a dimension (off / on) for each rewrite that passed its check, a
    `LeftOut` for each refused one, and the order rewrites a cache at one of their maps
    switches off (`SearchSpace.overridden_by`)."""
    knobs, left = list(space.knobs), list(space.left_out)
    passed = {(r.param, r.value) for r in rows if r.state is RewriteState.CHECKED and r.param}
    choices: dict[str, list[KnobValue]] = {}
    for c in candidates:  # a parameter's values that passed, in the candidates' order
        if (c.param, c.value) in passed:
            on = [placed[c.param]] if c.param in placed else list(c.choices[1:])
            choices.setdefault(c.param, [None]).extend(
                v for v in on if v not in choices.get(c.param, [])
            )
    for row in rows:
        if row.param is not None and row.param not in choices:
            left.append(LeftOut(row.param, f"refused: {row.reason}"))
    for param, values in choices.items():
        site, field = split_knob(param)
        label = next(r.kind.label for r in rows if r.param == param)
        knobs.append(Knob(param, field, site, tuple(values), None, label))
    passed_params = set(choices)
    caches = {c.site: c.param for c in candidates if c.kind is RewriteKind.CACHE}
    overridden = {
        c.param: tuple(caches[s] for s in c.crosses if caches.get(s) in passed_params)
        for c in candidates
        if c.kind is RewriteKind.ORDER and c.param in passed_params
    }
    overridden = {k: v for k, v in overridden.items() if v}
    return replace(space, knobs=tuple(knobs), left_out=tuple(left), overridden_by=overridden)


def plan_rewrites(
    script: Path,
    args: Sequence[str],
    found: Discovery,
    space: SearchSpace,
    options: RewriteOptions,
    note: Callable[[str], None],
    deps: RunnerDeps | None = None,
) -> RewritePlan:
    """Consider, check and place the rewrites of the training pipeline (module
    docstring); notes say what was found. Where tf.data does not know the training
    dataset's length, the same run counts its examples per pass (`epoch_examples`), even
    with the rewrites off: a trial that sees one epoch start prices its stall with it."""
    pipeline = found.training_pipeline()
    if pipeline is None:
        return RewritePlan((), space, considered=options.rewrites)
    candidates, rows = consider(pipeline.chain, pipeline.loop) if options.rewrites else ([], [])
    if options.rewrites:
        compiled = found.compiles[-1] if found.compiles else None
        more, said = consider_compute(pipeline.loop, compiled, found.step_function)
        device, advice = consider_device(pipeline.loop, options.gpu)
        candidates, rows = [*candidates, *more, *device], [*rows, *said, *advice]
    trains = found.training
    where = (trains.site, trains.place) if trains else None
    unknown = bool(pipeline.chain) and pipeline.chain[-1].elements == UNKNOWN_LENGTH
    report = CheckReport()
    if candidates or unknown:
        report = check_rewrites(script, args, candidates, where, deps)
    checked, placed = _placed(report.rows, options)
    final = [*checked, *rows]
    for row in final:
        at = f" at {row.site}" if row.site else ""
        word = "checked" if row.state is RewriteState.CHECKED else row.state.value
        note(f"rewrite {row.kind.value}{at}: {word.replace('_', ' ')}: {row.reason}")
    return RewritePlan(
        tuple(final),
        with_rewrites(space, final, placed, candidates),
        tuple(candidates),
        facts_of(found, candidates),
        considered=options.rewrites,
        epoch_examples=report.epoch_examples,
    )


@dataclass(frozen=True, slots=True)
class RewriteOptions:
    """``--rewrites``, ``--cache-budget``, ``--cache-dir``."""

    rewrites: bool = True
    cache_budget: str | None = None
    cache_dir: str | os.PathLike[str] | None = None
    gpu: bool = False  # a GPU is visible: batches can be prefetched to it


def _placed(
    rows: Sequence[RewriteRow], options: RewriteOptions
) -> tuple[list[RewriteRow], dict[str, str]]:
    """The rows with each checked cache placed (`place_cache`: one that fits nowhere is
    refused), and where each placed one lives, by its parameter."""
    budget = cache_budget(options.cache_budget)
    folder = str(options.cache_dir) if options.cache_dir else None
    out: list[RewriteRow] = []
    placed: dict[str, str] = {}
    for row in rows:
        param = row.param
        if row.kind is RewriteKind.CACHE and row.state is RewriteState.CHECKED and param:
            where = place_cache(row, budget, folder)
            if isinstance(where, RewriteRow):
                row = where
            else:
                placed[param] = where
                size = f"{_size(row.cache_bytes)} " if row.cache_bytes is not None else ""
                held = "in memory" if where == CACHE_MEMORY else f"in a file under {where}"
                row = replace(row, reason=f"{row.reason}, {size}{held}")
        out.append(row)
    return out, placed


def facts_of(found: Discovery, candidates: Sequence[Candidate]) -> RewriteFacts:
    """What the rewrites' code needs from discovery (`rewrite_code.RewriteFacts`)."""
    pipeline = found.training_pipeline()
    fitted = pipeline is not None and pipeline.loop in (LOOP_FIT, LOOP_FIT_STEPS)
    chain = pipeline.chain if pipeline is not None else ()
    return RewriteFacts(
        crosses={c.site: c.crosses for c in candidates if c.kind is RewriteKind.ORDER and c.site},
        fit=found.fits[-1] if fitted and found.fits else None,
        loop_place=found.training.place if found.training is not None else None,
        epoch_length=chain[-1].elements if chain and (chain[-1].elements or 0) > 0 else None,
        compiled=found.compiles[-1] if fitted and found.compiles else None,
        step=found.step_function,
    )


def rewrite_seeds(
    space: SearchSpace, best_knobs: Sequence[Mapping[str, KnobValue]]
) -> tuple[list[dict[str, KnobValue]], list[dict[str, KnobValue]]]:
    """The search's first trials for the rewrites: the script as written with each
    rewrite alone (its own gain, for the report), and every pipeline rewrite on top of
    the pipeline screen's best config (`best_knobs`, best first; the script as written
    where the screen ranked none), so that the rewrites and the knobs are measured
    together."""
    fields = {k.name: k for k in space.knobs if k.field in REWRITE_FIELDS}
    if not fields:
        return [], []
    written = space.as_written_params()
    on = {name: next(c for c in k.choices if c is not None) for name, k in fields.items()}
    alone = [{**written, name: value} for name, value in on.items()]
    base = dict(best_knobs[0]) if best_knobs else written
    # Together: the pipeline's rewrites only. A compute switch can cost more than it
    # gives (XLA's compile on a CPU): it joins the best once it gained alone
    # (`study.ladder.rewrite_rung`).
    pipeline = {n: v for n, v in on.items() if fields[n].field not in COMPUTE_FIELDS}
    together = {**base, **pipeline}
    fresh = pipeline and together not in alone
    return alone, ([together] if fresh else [])


def _applied(config: Config, row: RewriteRow) -> bool:
    """Whether `config` applies the rewrite of `row` (at its value, where it has several)."""
    if row.kind is RewriteKind.ITERATOR:
        return bool(config.one_iterator)
    if row.kind is RewriteKind.HOST_TO_DEVICE:
        return bool(config.prefetch_to_device)
    if row.kind is RewriteKind.JIT_COMPILE:
        return bool(config.jit_compile)
    if row.kind is RewriteKind.STEPS_PER_EXECUTION:
        return (config.steps_per_execution or 1) > 1
    if row.kind is RewriteKind.COMPILE_STEP:
        return config.compile_step is not None and config.compile_step == row.value
    site = config.site(row.site) if row.site is not None else None
    if site is None:
        return False
    if row.kind is RewriteKind.VECTORIZE:
        return site.vectorize is not None and site.vectorize == row.value
    if row.kind is RewriteKind.FILES:
        return site.files_at_once is not None
    if row.kind is RewriteKind.FILTER:
        return bool(site.filter_first)
    return bool(site.cache) if row.kind is RewriteKind.CACHE else bool(site.shuffle_first)


def measured_rewrites(
    rows: Sequence[RewriteRow], outcome: StudyOutcome, space: SearchSpace
) -> tuple[RewriteRow, ...]:
    """The rows with what the trials measured: how many ran with each checked rewrite,
    the best of those with it alone (the script as written plus it) and its gain over
    the script as written, and whether the winner holds it."""
    written = outcome.baselines.get(Role.AS_WRITTEN)
    base = written.examples_per_s if written is not None else None
    # A pruned trial was measured too (its first windows), a failed one not.
    done = [r for r in outcome.records if r.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    out: list[RewriteRow] = []
    for row in rows:
        if row.param is None or row.state is not RewriteState.CHECKED:
            out.append(row)
            continue
        with_it = [r for r in done if _applied(space.config(r.params), row)]
        alone = [r.examples_per_s for r in with_it if _alone(space, r.params, row.param)]
        best_alone = max((x for x in alone if x is not None), default=None)
        out.append(
            replace(
                row,
                state=RewriteState.MEASURED if with_it else RewriteState.CHECKED,
                trials=len(with_it),
                alone_examples_per_s=_round(best_alone),
                alone_gain=_round(best_alone / base, 3) if best_alone and base else None,
                in_winner=_applied(outcome.best_config, row),
            )
        )
    return tuple(out)


def _alone(space: SearchSpace, params: Mapping[str, KnobValue], param: str) -> bool:
    written = space.as_written_params()
    differs = {k for k, v in params.items() if v != written.get(k)}
    return differs == {param}


def _round(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def step_limited(plan: RewritePlan, ceiling: Ceiling | None) -> RewritePlan:
    """`plan` with its compute switches left out where the bound analysis found the input
    pipeline the limit (the model alone far faster): a faster step would wait for it."""
    if ceiling is None or ceiling.far_ahead != "model":
        return plan
    why = (
        f"the input pipeline is the limit (pipeline alone "
        f"{ceiling.pipeline_only_examples_per_s or 0:,.1f} examples/s, model alone "
        f"{ceiling.model_only_examples_per_s or 0:,.1f}): a faster step would wait for it"
    )
    compute = {k.name for k in plan.space.knobs if k.field in COMPUTE_FIELDS}
    if not compute or len(compute) == len(plan.space.knobs):  # nothing else to search
        return plan
    space = replace(
        plan.space,
        knobs=tuple(k for k in plan.space.knobs if k.name not in compute),
        left_out=(*plan.space.left_out, *(LeftOut(n, why) for n in sorted(compute))),
    )
    rows = tuple(
        replace(r, state=RewriteState.NOT_APPLICABLE, reason=why) if r.param in compute else r
        for r in plan.rows
    )
    return replace(plan, space=space, rows=rows)
