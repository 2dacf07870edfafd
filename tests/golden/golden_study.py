"""The tuning JSON of a replayed study: the golden case `tuning_replayed_study`.

The study is the real one (`tuner.study.run_study`: Optuna, its journal, the baselines,
the search, pruning, the final round) over `tftune.testing.FakeRunner`, whose
measurements are a fixed function of the config (tests/studykit.py's latency-bound map,
with one batch size that runs out of memory); the document is the real writer's
(`tuner.output.assemble.tuning_document`, written by `write_json_atomic`). What would vary is
fixed where it enters:

- the clock: `run_study(clock=...)` ticks one second per reading, so the study's wall
  time is a count of readings; `FakeRunner` reports each run's wall time as 0;
- the sampler: the study's seed (`SEED`);
- the folder: the study runs in a temporary folder, with its journal and the script
  named relatively (as `tftune optimize` run in the script's folder names them);
- this machine: the CPU flags and core count the space is built for (`studykit.CORES`);
  the document's ``platform`` values (this Python, this machine's cores) are replaced by
  `PLATFORM`'s, key by key, after the document is made: a key the writer adds still
  shows.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from studykit import BATCH, latency_bound, space

from tftune.testing import FakeRunner
from tftune.tuner.output.assemble import RunFacts, tuning_document, write_json_atomic
from tftune.tuner.output.emit import globals_snippet, run_command, source_diff
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.searchspace.config import Config, SiteConfig
from tftune.tuner.study import StudySettings, run_study

SCRIPT = "train.py"
JOURNAL = "tftune-study.journal"
CONFIG_FILE = "tftune-best.json"
SEED = 0
TRIALS = 10
PLATFORM = {"python": "3.11.7", "cores": 2}  # what replaces this machine's values
# The script the study tunes: its map at studykit.MAP (line 10), its batch at BATCH (11).
SOURCE = (
    "import tensorflow as tf\n"
    + "".join(f"# line {n}\n" for n in range(2, 9))
    + "ds = tf.data.Dataset.range(100000)\n"
    + "ds = ds.map(lambda x: tf.py_function(fetch, [x], tf.int64))\n"
    + "ds = ds.batch(32)\n"
    + "for batch in ds:\n"
    + "    train_step(batch)\n"
)


@contextlib.contextmanager
def _working_in(folder: Path) -> Iterator[None]:
    """`folder` as the working directory (contextlib.chdir, which Python 3.10 lacks)."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _runs_out_of_memory(config: Config) -> bool:
    """The largest batch size does not fit (the runner's OOM failure)."""
    return (config.sites.get(BATCH) or SiteConfig()).batch_size == 128


def tuning_json() -> str:
    """The tuning JSON of the replayed study, byte for byte as `tftune optimize --json`
    writes it."""
    ticks = itertools.count()
    runner = FakeRunner(latency_bound, fail=_runs_out_of_memory)
    settings = StudySettings(
        n_trials=TRIALS, seed=SEED, storage=JOURNAL, study_name="tftune-train-py"
    )
    with tempfile.TemporaryDirectory(prefix="tftune-golden-") as tmp:
        folder = Path(tmp)
        (folder / SCRIPT).write_text(SOURCE, encoding="utf-8")
        with _working_in(folder):
            searched = space()
            outcome = run_study(
                searched,
                runner,
                settings,
                clock=lambda: float(next(ticks)),
                sleep=lambda _s: None,
            )
            doc = tuning_document(
                script=SCRIPT,
                outcome=outcome,
                space=searched,
                ceiling=Ceiling(17000.0, 20000.0),
                device="CPU_ONLY",
                config_file=CONFIG_FILE,
                command=run_command(SCRIPT, [], CONFIG_FILE),
                diff=source_diff(SCRIPT, outcome.best_config),
                snippet=globals_snippet(outcome.best_config),
                seed=SEED,
                run=RunFacts(),
            ).to_json()
            written = write_json_atomic(_pinned(doc), folder / "tuning.json")
            return written.read_text(encoding="utf-8")


def _pinned(doc: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(doc))
    for key in PLATFORM.keys() & data["platform"].keys():
        data["platform"][key] = PLATFORM[key]
    return data
