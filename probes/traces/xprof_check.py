"""XProf's own input-pipeline analysis of a trace, beside tftune's: `tftune analyze --xprof`.

XProf (tensorboard-plugin-profile / `xprof`) converts an XSpace without TensorFlow;
`xprof_input_pipeline` runs its `input_pipeline_analyzer` and returns its steps as typed
data. `compare_with_xprof` puts XProf's mean step time and input share beside tftune's
for the same file: the analysis JSON's optional `xprof` object. Users trust XProf;
seeing the two agree is what lets them trust tftune's finer split.

The contract of the comparison: it never raises for XProf's sake. XProf missing, its
converter failing or XProf finding no steps each give `null` figures and a one-line
`note`. tftune's figures are over the steps XProf kept (XProf drops the first and last
step when it has more than five), matched by step number, so the two speak of the same
steps; over all of tftune's steps, with a note, when the numbers do not match.

Read-only, like every probe: XProf reads the trace through a link in a temporary folder,
where it leaves the op stats it saves beside what it reads, and its C++ log lines on
stderr are held back. xprof is imported inside the functions (it is slow to import), so
`probes` imports and works without it. Times are milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tftune.core.analysis_trace import XProfCheck
from tftune.core.units import PS_PER_MS
from tftune.probes.traces.breakdown import Breakdown
from tftune.probes.traces.steps import Steps

TOOL = "input_pipeline_analyzer"


@dataclass(frozen=True, slots=True)
class XprofStep:
    name: str  # XProf's step label, e.g. "train 3", or the group number
    step_ms: float
    input_ms: float  # XProf's "Input": host wait input + host-to-device
    device_compute_ms: float
    host_compute_ms: float
    kernel_launch_ms: float
    output_ms: float
    other_ms: float


@dataclass(frozen=True, slots=True)
class XprofInputPipeline:
    hardware_type: str | None
    steps: tuple[XprofStep, ...]
    summary: dict[str, str]  # the step-breakdown table's properties, as XProf gives them
    conclusion: str

    @property
    def mean_step_ms(self) -> float | None:
        return sum(s.step_ms for s in self.steps) / len(self.steps) if self.steps else None

    @property
    def input_share(self) -> float | None:
        """Input time over step time, summed over XProf's steps."""
        total = sum(s.step_ms for s in self.steps)
        return sum(s.input_ms for s in self.steps) / total if total > 0 else None


def _linked(path: Path, folder: Path, i: int) -> Path:
    """`path` as seen from `folder` (a symbolic link; a copy where links are refused)."""
    target = folder / str(i) / path.name
    target.parent.mkdir()
    try:
        target.symlink_to(path.resolve())
    except OSError:
        shutil.copyfile(path, target)
    return target


def _table_with(tables: list[Any], column: str) -> dict[str, Any] | None:
    for t in tables:
        if isinstance(t, dict) and any(c.get("id") == column for c in t.get("cols", [])):
            return t
    return None


def xprof_input_pipeline(paths: Sequence[Path]) -> XprofInputPipeline:
    """Run XProf's `input_pipeline_analyzer` converter on `.xplane.pb` files."""
    with _native_stderr_quiet(), tempfile.TemporaryDirectory(prefix="tftune-xprof-") as tmp:
        from xprof.convert import raw_to_tool_data  # imported on use: slow, logs from C++

        # XProf saves its converted op stats beside the files it reads (and reuses them):
        # it reads links in a folder of our own, so the user's run folder stays untouched.
        links = [_linked(Path(p), Path(tmp), i) for i, p in enumerate(paths)]
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(p) for p in links], TOOL, {})
    tables = json.loads(data)
    table = _table_with(tables, "stepTimeMs")
    if table is None:
        return XprofInputPipeline(None, (), {}, "")
    cols = [c.get("id") for c in table.get("cols", [])]
    steps = []
    for row in table.get("rows", []):
        v = dict(zip(cols, (c.get("v") for c in row["c"]), strict=False))
        steps.append(
            XprofStep(
                name=str(v["stepnum"]),
                step_ms=float(v["stepTimeMs"]),
                input_ms=float(v["infeedTimeMs"]),
                device_compute_ms=float(v["deviceComputeTimeMs"]),
                host_compute_ms=float(v["hostComputeTimeMs"]),
                kernel_launch_ms=float(v["kernelLaunchTimeMs"]),
                output_ms=float(v["outfeedTimeMs"]),
                other_ms=float(v["otherTimeMs"]),
            )
        )
    props = {str(k): str(val) for k, val in (table.get("p") or {}).items()}
    return XprofInputPipeline(
        hardware_type=props.get("hardware_type"),
        steps=tuple(steps),
        summary=props,
        conclusion=props.get("input_conclusion", ""),
    )


@contextlib.contextmanager
def _native_stderr_quiet() -> Iterator[None]:
    """Hold back what native code writes to file descriptor 2 (XProf's C++ logs a few
    dozen INFO lines per conversion), so the user's terminal shows tftune's output only."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (captured, embedded)
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), fd)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, fd)
    finally:
        os.close(saved)


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def compare_with_xprof(path: Path, steps: Steps, breakdown: Breakdown) -> XProfCheck:
    """XProf's figures for the `.xplane.pb` at `path` beside tftune's `steps` and
    `breakdown` of it. Never raises for XProf: a failure is a `note`."""
    try:
        xp: XprofInputPipeline | None = xprof_input_pipeline([path])
        failure = None
    except ImportError:
        xp, failure = None, "XProf is not installed (pip install tensorboard-plugin-profile)"
    except Exception as exc:  # XProf's converter: any failure is a note, never ours
        first = _first_line(str(exc))
        detail = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        xp, failure = None, f"XProf's converter failed ({detail})"
    kept = _kept_steps(xp, steps) if xp is not None and xp.steps else None
    ours_ms, ours_share = _ours(steps, breakdown, kept)
    if xp is None:
        return _check(None, None, ours_ms, ours_share, failure)
    if not xp.steps:
        why = _first_line(xp.conclusion).split(". ")[0].rstrip(".")
        found_none = "XProf found no steps" + (f" ({why})" if why else "")
        return _check(None, None, ours_ms, ours_share, found_none)
    unmatched = (
        "XProf's steps could not be matched to tftune's by number: "
        "tftune's figures are over all its steps"
    )
    note = unmatched if kept is None else None
    return _check(xp.mean_step_ms, xp.input_share, ours_ms, ours_share, note)


def _check(
    steptime_ms: float | None,
    input_share: float | None,
    tftune_steptime_ms: float | None,
    tftune_input_share: float | None,
    note: str | None,
) -> XProfCheck:
    """The analysis JSON's `xprof` figures, rounded as the document writes them."""
    return XProfCheck(
        _round(steptime_ms, 3),
        _round(input_share, 4),
        _round(tftune_steptime_ms, 3),
        _round(tftune_input_share, 4),
        note,
    )


def _kept_steps(xp: XprofInputPipeline, steps: Steps) -> list[int] | None:
    """Indices into `steps` of the steps XProf kept, by step number; None if any is not
    found."""
    by_num = {int(n): i for i, n in enumerate(steps.numbers.tolist())}
    kept = []
    for s in xp.steps:
        label = s.name.split()[-1] if s.name.split() else ""
        if not label.lstrip("-").isdigit() or int(label) not in by_num:
            return None
        kept.append(by_num[int(label)])
    return kept


def _ours(
    steps: Steps, breakdown: Breakdown, kept: list[int] | None
) -> tuple[float | None, float | None]:
    """tftune's mean step time (ms) and input share, over `kept` steps or all of them."""
    which = kept if kept is not None else list(range(len(steps)))
    if not which:
        return None, None
    total = sum(int(steps.duration_ps[i]) for i in which)
    if total <= 0:
        return None, None
    wait, h2d = breakdown.ps["input_wait"], breakdown.ps["host_to_device"]
    inputs = sum(int(wait[i] + h2d[i]) for i in which)
    return total / len(which) / PS_PER_MS, inputs / total
