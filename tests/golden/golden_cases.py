"""The golden cases: what each one renders, and the one place that renders them.

Used by tests/golden/test_golden.py (compare) and scripts/regen_golden.py (write); read
tests/golden/README.md first. Each case is a folder of tests/golden/ holding the expected
bytes of what tftune writes for it:

- an analysis case: a fixed trace (golden_traces.py) → `analysis.json` (the analysis
  JSON as `tftune analyze --json` writes it), `terminal.txt` (the summary `tftune
  analyze` prints, 100 columns, no colour) and `report.html` (what `tftune report
  analysis.json` writes);
- a tuning case: a saved tuning JSON (tests/fixtures/) → `terminal.txt` (the trial lines
  and the table `tftune optimize` prints, 100 columns, no colour) and `report.html`
  (what `tftune report` writes);
- a study case: a study replayed over fixed measurements (golden_study.py) →
  `tuning.json` (the tuning JSON as `tftune optimize --json` writes it) and
  `terminal.txt` (what it prints, as for a tuning case).

What would vary is pinned where it enters, never patched in the output: the report's time
is the renderers' `generated_at` argument, the tool version is the analysis' own
`tool_version` argument, and the trace's temporary folder is replaced by `/golden/<case>`
in the analysis (`relocated`) before it is written as JSON.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import golden_study
import golden_traces
from gputrace import XSpaceBuilder

from tftune.core.analysis_document import AnalysisDocument
from tftune.core.training import TrainingTime
from tftune.core.tuning_document import TuningDocument
from tftune.core.userfiles import json_text
from tftune.probes.advice.analysis import Analysis, analyze
from tftune.probes.live.training_record import write_clock_file
from tftune.probes.traces.callsites import RecordedSite, write_sites
from tftune.reports import analysis_terminal, render_report_json, tuning_terminal

GOLDEN = Path(__file__).resolve().parent
FIXTURES = GOLDEN.parent / "fixtures"
REGEN_COMMAND = "python scripts/regen_golden.py"
GENERATED_AT = "2026-01-01 00:00 UTC"  # the reports' time stamp (`generated_at=`)
TOOL_VERSION = "0+golden"  # the analysis JSON's tool version (`tool_version=`)
WIDTH = 100  # terminal columns; no colour
RUN = "2026_01_01_00_00_00"  # the run folder (profiler runs are named by their start)
ANALYSIS_FILES = ("analysis.json", "terminal.txt", "report.html")
TUNING_FILES = ("terminal.txt", "report.html")
STUDY_FILES = ("tuning.json", "terminal.txt")
ALL_FILES = frozenset((*ANALYSIS_FILES, *TUNING_FILES, *STUDY_FILES))


@dataclass(frozen=True)
class AnalysisCase:
    name: str
    why: str
    trace: Callable[[], XSpaceBuilder]
    host: str = "vm"
    # What `tftune profile` records beside the trace: the call sites, the step clock.
    sites: tuple[RecordedSite, ...] = ()
    clock: TrainingTime | None = None


@dataclass(frozen=True)
class TuningCase:
    name: str
    why: str
    source: Path  # the tuning JSON, as `tftune optimize --json` wrote it


@dataclass(frozen=True)
class StudyCase:
    name: str
    why: str
    tuning_json: Callable[[], str]  # the tuning JSON's text, as the writer wrote it


Case = AnalysisCase | TuningCase | StudyCase

ANALYSES = (
    AnalysisCase(
        "analysis_cpu_pyfunc",
        "CPU only, highly input-bound: a tf.py_function map at parallelism 1, its line "
        "named from the recorded call sites",
        golden_traces.cpu_pyfunc,
        sites=golden_traces.CPU_PYFUNC_SITES,
    ),
    AnalysisCase(
        "analysis_gpu_h2d",
        "GPU: host-to-device copies of the batch dominate the step (prefetch_to_device)",
        golden_traces.gpu_h2d,
        host="gpuhost",
    ),
    AnalysisCase(
        "analysis_gpu_compute",
        "GPU, compute-bound: no tf.data stages, the fix is the GPU's 16-bit policy",
        golden_traces.gpu_compute,
        host="gpuhost",
    ),
    AnalysisCase(
        "analysis_cpu_epoch_stall",
        "CPU, the step's own work: steady steps, and an epoch-start stall named from the "
        "step clock's record beside the trace (a shuffle buffer behind the map)",
        golden_traces.cpu_epoch_stall,
        clock=golden_traces.EPOCH_STALL,
    ),
)
TUNINGS = (
    TuningCase(
        "tuning_latency",
        "CPU only, throughput, duty cycle: a latency-bound map tuned 31x, an OOM failure",
        FIXTURES / "tuning_latency.json",
    ),
    TuningCase(
        "tuning_gpu_both",
        "GPU, --objective both, NVML: guided trial, final round, native crash, model-bound",
        FIXTURES / "tuning_gpu_both.json",
    ),
)
STUDIES = (
    StudyCase(
        "tuning_replayed_study",
        "the real study and writer over fixed measurements: guided trial, pruned trials, "
        "an OOM failure, a final round, the diff and snippet of a latency-bound map",
        golden_study.tuning_json,
    ),
)
CASES: tuple[Case, ...] = (*ANALYSES, *TUNINGS, *STUDIES)


def relocated(a: Analysis, logdir: Path) -> Analysis:
    """`a` as if its trace had been recorded under `logdir`: the paths the JSON's `source`
    names (the logdir, the run folder, each host's file) move there; nothing else does."""
    run_dir = logdir / "plugins" / "profile" / a.run.name
    hosts = tuple(replace(h, path=run_dir / h.path.name) for h in a.run.hosts)
    skipped = tuple(replace(s, path=run_dir / s.path.name) for s in a.run.skipped)
    run = replace(a.run, path=run_dir, hosts=hosts, skipped=skipped)
    host = next(h for h in hosts if h.host == a.host.host)
    return replace(a, logdir=logdir, run=run, host=host)


def analysis_json(case: AnalysisCase) -> str:
    """The analysis JSON of the case's trace, as `tftune analyze --json` writes it."""
    with tempfile.TemporaryDirectory(prefix="tftune-golden-") as tmp:
        logdir = Path(tmp)
        run_dir = logdir / "plugins" / "profile" / RUN
        case.trace().write(run_dir, host=case.host)
        if case.sites:
            write_sites(run_dir, "train.py", case.sites)
        if case.clock is not None:
            write_clock_file(run_dir, case.clock)
        a = relocated(analyze(logdir, tool_version=TOOL_VERSION), Path("/golden") / case.name)
        data = a.to_json()
    return json_text(data)  # as tftune/cli.py's `analyze` writes it


def render(case: Case) -> dict[str, str]:
    """Every golden file of a case: {file name: the text tftune writes for it}."""
    if isinstance(case, StudyCase):
        text = case.tuning_json()
        data = json.loads(text)  # as `tftune report` and the terminal read it back
        return {
            "tuning.json": text,
            "terminal.txt": tuning_terminal.render(
                TuningDocument.from_json(data), width=WIDTH, color=False
            ),
        }
    if isinstance(case, AnalysisCase):
        text = analysis_json(case)
        data = json.loads(text)  # the saved JSON, as `tftune report` reads it back
        return {
            "analysis.json": text,
            "terminal.txt": analysis_terminal.render(
                AnalysisDocument.from_json(data), width=WIDTH, color=False
            ),
            "report.html": render_report_json(
                data, generated_at=GENERATED_AT, source="analysis.json"
            ),
        }
    data = json.loads(case.source.read_text(encoding="utf-8"))
    return {
        "terminal.txt": tuning_terminal.render(
            TuningDocument.from_json(data), width=WIDTH, color=False
        ),
        "report.html": render_report_json(data, generated_at=GENERATED_AT, source=case.source.name),
    }


def files_of(case: Case) -> tuple[str, ...]:
    if isinstance(case, StudyCase):
        return STUDY_FILES
    return ANALYSIS_FILES if isinstance(case, AnalysisCase) else TUNING_FILES


def golden_path(case: Case, name: str) -> Path:
    return GOLDEN / case.name / name


def first_difference(expected: bytes, actual: bytes) -> str:
    """Where two outputs first differ: the line (and column), with both versions of it."""
    old = expected.decode("utf-8", "replace").splitlines(keepends=True)
    new = actual.decode("utf-8", "replace").splitlines(keepends=True)
    for i, (a, b) in enumerate(zip(old, new, strict=False), start=1):
        if a != b:
            col = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            col = min(len(a), len(b)) if col is None else col
            lo = max(0, col - 60)
            return (
                f"first difference at line {i}, column {col + 1}:\n"
                f"  expected: {a[lo : col + 60]!r}\n"
                f"  actual:   {b[lo : col + 60]!r}"
            )
    if len(new) > len(old):
        return f"the output goes on past line {len(old)}: {new[len(old)][:120]!r}"
    if len(old) > len(new):
        return f"the output ends at line {len(new)}; expected next: {old[len(new)][:120]!r}"
    return "the lines read the same: the bytes differ (line endings or encoding)"
