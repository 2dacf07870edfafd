"""The last phase of `tftune optimize`: what the study leaves becomes the user's files.

`write_outputs(run, ...)` takes the finished run (`TunedRun`: the script, what discovery
found, the space, the ceiling, the rewrites, the pipeline screen's ranking and the
study's outcome) and writes, in this order: the reproducibility record (the command
line as typed, or the API call), the winner's config file with its diff and snippet
(`winner_files.emit_winner`), the tuning document (`assemble`, schema 1,
docs/json.md), its JSON and, where the caller gave a renderer, its HTML page. The page
is drawn by the caller's renderer: the tuner never imports the reports.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from tftune.core.errors import ConfigError
from tftune.core.run_record import Environment, Record
from tftune.core.trial_notes import FLOAT32_OUTPUT_FIX
from tftune.core.tuning_document import TuningDocument
from tftune.core.tuning_parts import ABSENT
from tftune.core.tuning_run import ScreenRanking
from tftune.core.userfiles import write_output
from tftune.tuner.fixes.rewrite_check import RewritePlan
from tftune.tuner.options import OptimizeOptions
from tftune.tuner.output import assemble
from tftune.tuner.output.repro import api_call, build_record
from tftune.tuner.output.winner_files import WinnerFiles, emit_winner
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.searchspace.space import SearchSpace
from tftune.tuner.study import StudyOutcome
from tftune.tuner.trial import Discovery

HtmlRenderer = Callable[[TuningDocument], str]  # the tuning document → one HTML page


@dataclass(frozen=True, slots=True)
class TunedRun:
    """What the phases before the outputs measured and chose. `started` is the
    `time.monotonic()` at which `optimize` began (the document's wall time)."""

    script: str | os.PathLike[str]
    path: Path
    args: Sequence[str]
    found: Discovery
    space: SearchSpace
    ceiling: Ceiling | None
    gpu: bool
    plan: RewritePlan
    screen: ScreenRanking | None
    outcome: StudyOutcome
    started: float


@dataclass(frozen=True, slots=True)
class RunOutputs:
    """The files written: the winner's (config, command, diff, snippet), the tuning
    document, and its JSON and HTML where they were asked for."""

    won: WinnerFiles
    document: TuningDocument
    json_file: Path | None
    html_file: Path | None


def write_outputs(
    run: TunedRun,
    options: OptimizeOptions,
    invocation: Sequence[str] | None,
    environment: Future[Environment],
    render_html: HtmlRenderer | None,
    note: Callable[[str], None],
) -> RunOutputs:
    """The record, the winner's files, the document, its JSON and its page."""
    record = _record(run, options, invocation, environment)
    won = emit_winner(
        run.script,
        run.path,
        run.args,
        run.found,
        run.outcome,
        options.best_file,
        record,
        note,
        run.plan,
    )
    document = _tuning_document(run, won, options.seed, record)
    json_path = (
        None
        if options.json_file is None
        else assemble.write_json_atomic(document.to_json(), options.json_file)
    )
    html_path = _write_html(document, options.html_file, render_html)
    return RunOutputs(won, document, json_path, html_path)


def _record(
    run: TunedRun,
    options: OptimizeOptions,
    invocation: Sequence[str] | None,
    environment: Future[Environment],
) -> Record:
    """The reproducibility record: the command line as typed, or the API call."""
    if invocation is not None:
        argv = list(invocation)
    else:
        chosen = {
            "trials": options.trials,
            "seed": options.seed,
            "storage": options.storage,
            "study_name": options.study_name,
        }
        argv = [api_call(str(run.script), run.args, chosen)]
    return build_record(
        run.path, run.args, argv=argv, seed=options.seed, environment=environment.result()
    )


def _tuning_document(run: TunedRun, won: WinnerFiles, seed: int, record: Record) -> TuningDocument:
    """The tuning document, with the run's wall time, its record, the precision
    findings and the pipeline screen's ranking."""
    facts = assemble.RunFacts(
        wall_s=time.monotonic() - run.started,
        training=assemble.run_training(run.found, won.outcome),
        record=record,
        findings=tuple(f.message() for f in won.findings),
        advice=won.advice,
        requires=FLOAT32_OUTPUT_FIX if won.advice is not None else None,
        screen=run.screen,
        rewrites=run.plan.rows if run.plan.considered else ABSENT,
    )
    return assemble.tuning_document(
        script=str(run.script),
        outcome=won.outcome,
        space=run.space,
        ceiling=run.ceiling,
        device="GPU" if run.gpu else "CPU_ONLY",
        config_file=str(won.best_file),
        command=won.command,
        diff=won.diff,
        snippet=won.snippet,
        seed=seed,
        run=facts,
    )


def _write_html(
    document: TuningDocument,
    html_file: str | os.PathLike[str] | None,
    render_html: HtmlRenderer | None,
) -> Path | None:
    """The HTML tuning report, where the caller gave a renderer."""
    if html_file is None or render_html is None:
        return None
    write_output(html_file, str(render_html(document)), ConfigError)
    return Path(html_file)
