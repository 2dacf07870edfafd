"""The pipeline screen, parent side: rank pipeline configs in one run of the script.

Before the study, one child runs the script up to its training dataset and drains that
dataset, rebuilt under each candidate config, without the model, for about a second
each (tuner/child/screen_drain.py). The candidates (`candidates`) are the script as written,
AUTOTUNE everywhere (with the default thread pool, and with the largest: AUTOTUNE never
goes past the pool), and a coarse grid of the parallelism of every parallel call site
with the private thread pool it needs (AUTOTUNE never goes past the pool), every buffer
AUTOTUNE; the batch size and precision stay as written (they are the model's side).

What the screen is for (`Screen.seeds`): the best screened configs are enqueued as the
first search trials, so that TPE starts from configs the pipeline can feed. It never
picks the winner: full trials decide, since on a CPU-only host the pipeline and the
model share the cores. A candidate the screen could not rebuild at one of its call sites
(``missing``: built by a library, or inside a ``tf.function``) is not ranked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tftune.core.tuning_run import ScreenCandidate, ScreenRanking
from tftune.probes.advice.service_sizing import sizing_at_best
from tftune.probes.live.environment import usable_cores
from tftune.tuner.child.screen_drain import SCREEN_META_KEY, STOPPED_KEY
from tftune.tuner.option_defaults import FIRST_STEP_S
from tftune.tuner.searchspace.bounds import MODEL_BOUND_FACTOR, Ceiling
from tftune.tuner.searchspace.config import AUTOTUNE, Config
from tftune.tuner.searchspace.space import KnobValue, SearchSpace
from tftune.tuner.study.baselines import with_larger_batch
from tftune.tuner.trial.launch import ChildRun, RunnerDeps, child_spec, workdir

SCREEN_SECONDS = 1.0  # drained per candidate, after ...
SCREEN_WARMUP_S = 0.5  # ... this long for its buffers to fill and functions to trace
# The grid's parallelism values (those in a knob's choices; with the core count).
SCREEN_PARALLELISM = (4, 8, 16, 32, 64)
MAX_CANDIDATES = 12
NOT_REACHED = "not reached"
NOT_SCREENED = "not screened: the pipeline as written outruns the model"
# How many of the best screened configs seed the search (`Screen.seeds`).
SEEDS = 2


def candidates(space: SearchSpace) -> list[dict[str, KnobValue]]:
    """As written, AUTOTUNE everywhere (with the default and with the largest thread
    pool), then parallelism x thread pool (module docstring)."""
    fixed = {k.name: k.as_written for k in space.knobs if k.field in _MODEL_FIELDS}
    out: list[dict[str, KnobValue]] = [space.as_written_params()]
    auto = {"num_parallel_calls": AUTOTUNE, "cycle_length": AUTOTUNE}
    buffers = {"buffer_size": AUTOTUNE, "final_prefetch": AUTOTUNE}
    out.append({**space.params_for({**auto, **buffers}), **fixed})
    cores = space.cores
    # AUTOTUNE never goes past the thread pool: with the largest one it finds its own level
    # (a latency-bound map's best config in an exhaustive grid).
    widest = {**auto, **buffers, "threadpool_size": max(SCREEN_PARALLELISM)}
    out.append({**space.params_for(widest), **fixed})
    for par in sorted({cores, *SCREEN_PARALLELISM}):
        pool = par if par > cores else None
        want = {"num_parallel_calls": par, "cycle_length": par, "threadpool_size": pool}
        out.append({**space.params_for({**want, **buffers}), **fixed})
    unique: list[dict[str, KnobValue]] = []
    for params in out:
        params = space.feasible(params)
        if params not in unique:
            unique.append(params)
    return unique[:MAX_CANDIDATES]


_MODEL_FIELDS = frozenset({"batch_size", "mixed_precision"})
# The knobs the screen varies: without one of them in the space, there is nothing to rank.
PIPELINE_FIELDS = frozenset(
    {"num_parallel_calls", "cycle_length", "buffer_size", "final_prefetch", "threadpool_size"}
)


@dataclass(frozen=True, slots=True)
class ScreenEntry:
    params: Mapping[str, KnobValue]
    description: str
    examples_per_s: float | None
    error: str | None = None
    missing: tuple[str, ...] = ()
    busy_cores: float | None = None  # the child's CPU time over the wall time, drained

    @property
    def ranked(self) -> bool:
        return self.examples_per_s is not None and not self.missing


@dataclass(frozen=True, slots=True)
class Screen:
    """The screened candidates, in the order they ran; `reason` when none was measured."""

    entries: tuple[ScreenEntry, ...]
    wall_s: float
    reason: str | None = None

    def best_first(self) -> list[ScreenEntry]:
        return sorted(
            (e for e in self.entries if e.ranked),
            key=lambda e: -(e.examples_per_s or 0.0),
        )

    def as_written(self) -> ScreenEntry | None:
        """The script as written drained alone (the first candidate), when it ran."""
        first = self.entries[0] if self.entries else None
        return first if first is not None and first.ranked else None

    @property
    def stopped(self) -> bool:
        """It ended after the script as written, whose pipeline outran the model."""
        rest = self.entries[1:]
        return bool(rest) and all(e.error == NOT_SCREENED for e in rest)

    def seeds(self, k: int = SEEDS) -> list[dict[str, KnobValue]]:
        """The `k` best screened configs, best first (none when it `stopped`)."""
        return [] if self.stopped else [dict(e.params) for e in self.best_first()[:k]]

    def summary(self) -> str:
        """One line for the progress output."""
        best = self.best_first()
        if self.stopped:
            return (
                f"pipeline screen: the script as written drained alone at "
                f"{best[0].examples_per_s or 0.0:,.1f} ex/s, at least {MODEL_BOUND_FACTOR:.0f}x "
                "the model alone: the pipeline is not the limit, so no other config was "
                f"screened ({self.wall_s:.0f} s)"
            )
        if self.reason is not None or not best:
            return f"pipeline screen: {self.reason or 'nothing ranked'}"
        written = self.entries[0].examples_per_s if self.entries else None
        line = (
            f"pipeline screen: {len(self.entries)} configs drained alone in "
            f"{self.wall_s:.0f} s; best {best[0].examples_per_s or 0.0:,.1f} ex/s "
            f"({best[0].description})"
        )
        if written:
            line += f", as written {written:,.1f}"
        return line + f"; the search starts from the {min(SEEDS, len(best))} best"

    def ranking(self) -> ScreenRanking:
        """The screen as the tuning document holds it (``screen``)."""
        return ScreenRanking(
            wall_s=round(self.wall_s, 2),
            reason=self.reason,
            candidates=tuple(
                ScreenCandidate(
                    e.description, _round(e.examples_per_s), e.error, e.missing, e.busy_cores
                )
                for e in self.entries
            ),
        )


def search_seeds(space: SearchSpace, screen: Screen | None) -> list[dict[str, KnobValue]]:
    """The search's first trials: the screen's best, the same with a larger batch where
    the batch size is searched (the screen drains the pipeline alone, so it cannot see
    what a larger batch saves each step; measured: the previous search's winners on
    cpu_heavy_map and bursty_source had a larger batch), then the screen's next best."""
    seeds = screen.seeds() if screen is not None else []
    if not seeds:
        return []
    larger = with_larger_batch(space, seeds[0])
    return [seeds[0], *([larger] if larger is not None else []), *seeds[1:]]


def with_screen_sizing(ceiling: Ceiling | None, screen: Screen | None) -> Ceiling | None:
    """`ceiling` with its "one host is not enough" sizing taken from the pipeline alone at
    its best screened config (its rate and the cores it kept busy) rather than as
    written, where the screen ranked one with a CPU figure. At its best config with cores
    left idle, CPU is not its limit: no hosts are counted (`sizing_at_best`)."""
    if ceiling is None or screen is None or ceiling.model_only_examples_per_s is None:
        return ceiling
    best = next((e for e in screen.best_first() if e.busy_cores), None)
    if best is None or best.examples_per_s is None or best.busy_cores is None:
        return ceiling
    sizing = sizing_at_best(
        pipeline_rate=best.examples_per_s,
        busy_cores=best.busy_cores,
        model_rate=ceiling.model_only_examples_per_s,
        host_cores=usable_cores(),
        unit="examples",
    )
    return replace(ceiling, sizing=sizing) if sizing is not None else ceiling


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def run_screen(
    script: Path,
    args: Sequence[str],
    space: SearchSpace,
    training_at: tuple[str | None, str | None] | None,
    *,
    deps: RunnerDeps | None = None,
    seconds: float = SCREEN_SECONDS,
    stop_above: float | None = None,
) -> Screen:
    """Screen `candidates(space)` in one run of the script (module docstring); stop
    after the script as written when it drains at `stop_above` examples/s or more."""
    params = candidates(space)
    started = time.monotonic()
    with workdir() as work:
        out = work / "screen.json"
        meta = {
            "candidates": [space.config(p).to_json() for p in params],
            "seconds": seconds,
            "warmup_s": SCREEN_WARMUP_S,
            "out": str(out),
            "stop_above": stop_above,
        }
        spec = child_spec("apply", script, args, replace(Config(), meta={SCREEN_META_KEY: meta}))
        if training_at is not None:
            spec["training_at"] = list(training_at)
        per = seconds + SCREEN_WARMUP_S + 2.0
        # The script's start-up comes first: a trial's allowance for its first step.
        ended = ChildRun(deps or RunnerDeps(), work, spec).run(
            deadline_s=FIRST_STEP_S + per * len(params)
        )
        got = [r for r in _read(out) if isinstance(r, dict)]
    stopped = bool(got) and bool(got[-1].get(STOPPED_KEY))
    rows = got + [{"error": NOT_SCREENED if stopped else NOT_REACHED}] * (len(params) - len(got))
    entries = tuple(
        ScreenEntry(
            p,
            space.describe(p),
            row.get("examples_per_s"),
            row.get("error"),
            tuple(row.get("missing", ())),
            row.get("busy_cores"),
        )
        for p, row in zip(params, rows, strict=True)
    )
    reason = None
    if not any(e.ranked for e in entries):
        said = next((e.error for e in entries if e.error and e.error != NOT_REACHED), None)
        if said is None and not got and ended.returncode:
            said = f"the script exited with code {ended.returncode} before its training loop"
        reason = "no candidate could be screened" + (f": {said}" if said else "")
    return Screen(entries, time.monotonic() - started, reason)


def _read(path: Path) -> list[Any]:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return rows if isinstance(rows, list) else []
