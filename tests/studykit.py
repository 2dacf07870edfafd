"""What tests of the study share: a two-site space, the latency-bound model of a script,
the study's settings, and an outcome's tuning document as `tftune optimize` makes and renders
it. Not a test module: the tests import it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table

from tftune.core.tuning_document import TuningDocument
from tftune.reports import tuning_terminal
from tftune.tuner.output.assemble import RunFacts, trial_row, tuning_document
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.searchspace.config import AUTOTUNE, Config, SiteConfig
from tftune.tuner.searchspace.space import SearchSpace
from tftune.tuner.searchspace.space_build import build_space
from tftune.tuner.study import StudyOutcome, StudySettings, TrialRecord
from tftune.tuner.trial.discovery import CallSite

MAP = "train.py:10"
BATCH = "train.py:11"
CORES = 2
SITES = [
    CallSite(MAP, "map", (), SiteConfig(), None, 1),
    CallSite(BATCH, "batch", (), SiteConfig(batch_size=32), None, 1),
]


def space(**kw: object) -> SearchSpace:
    """The space of a script with one map (`MAP`) and one batch (`BATCH`) on 2 cores."""
    return build_space(SITES, cores=CORES, **kw)  # type: ignore[arg-type]


def latency_bound(config: Config) -> tuple[float, float]:
    """A 4 ms py_function map: parallelism is capped by the thread pool."""
    s = config.sites.get(MAP) or SiteConfig()
    pool = config.threadpool_size or CORES
    par = s.num_parallel_calls or 1
    par = pool if par == AUTOTUNE else par
    eps = 250.0 * min(par, pool)
    return eps, min(1.0, eps / 20000)


def settings(tmp_path: Path, **kw: object) -> StudySettings:
    """A study in a journal under `tmp_path`; `kw` as `StudySettings` takes them."""
    base: dict[str, object] = {"storage": str(tmp_path / "study.journal"), "study_name": "t"}
    base.update(kw)
    return StudySettings(**base)  # type: ignore[arg-type]


def outcome_document(
    out: StudyOutcome,
    ceiling: Ceiling | None = None,
    *,
    script: str = "t.py",
    searched: SearchSpace | None = None,
    run: RunFacts | None = None,
) -> TuningDocument:
    """`out`'s tuning document as `tftune optimize` makes it (and its renderers draw it):
    `script` tuned over `searched` (a one-map space by default), with what the whole run
    adds (`run`)."""
    one_map = [CallSite(f"{script}:3", "map", (), SiteConfig(), None, 1)]
    return tuning_document(
        script=script,
        outcome=out,
        space=searched or build_space(one_map, cores=2),
        ceiling=ceiling,
        device="CPU_ONLY",
        config_file="tftune-best.json",
        command=f"tftune run --config tftune-best.json {script}",
        diff="",
        snippet="",
        seed=0,
        run=run,
    )


def outcome_json(
    out: StudyOutcome,
    ceiling: Ceiling | None = None,
    *,
    script: str = "t.py",
    searched: SearchSpace | None = None,
    run: RunFacts | None = None,
) -> dict[str, Any]:
    """`out`'s tuning JSON as written to the file (`outcome_document`'s)."""
    data = outcome_document(out, ceiling, script=script, searched=searched, run=run).to_json()
    loaded: dict[str, Any] = json.loads(json.dumps(data))
    return loaded


def render_table(out: StudyOutcome, ceiling: Ceiling | None) -> Table | Group:
    return tuning_terminal.render_table(outcome_document(out, ceiling))


def table_rows(out: StudyOutcome) -> list[tuple[str, str, str, str, str]]:
    return tuning_terminal.table_rows(outcome_document(out))


def ceiling_sentence(out: StudyOutcome, ceiling: Ceiling) -> str:
    return tuning_terminal.ceiling_sentence(outcome_document(out, ceiling))


def trial_line(r: TrialRecord, best: TrialRecord | None) -> str:
    return tuning_terminal.trial_line(trial_row(r), best.number if best is not None else None)
