"""The call sites a `tftune profile` run recorded, and the stage each one became.

TensorFlow's trace names a tf.data stage (``Iterator::Root::ParallelMapV2``) but not the
line of the user's code that built it: TF 2.21 records neither the source line nor the
UDF's name. `tftune profile` knows the lines (it patches the Dataset methods), so it
writes them beside the trace, in the order the script called them:
``<logdir>/plugins/profile/<run>/tftune-sites.json``, in the run's own folder (a logdir
holds many runs, of many scripts). `tftune analyze` reads that file when it is there and
names a bottleneck stage's line from it (`site_for_stage`). The record also holds the
TensorFlow version the trace was taken with (`tf_version`), which the trace itself does
not say; the analysis shows it.

A stage is matched to a call site by kind (a ``ParallelMapV2`` or ``MapAndBatch`` stage
is a ``map`` call, and so on) and, when several calls of that kind exist, by position:
the stage nearest the source is the call made first. When the trace and the record do not
line up one to one (two pipelines, a stage TF added or fused away), no line is named.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tftune.core.userfiles import json_text, write_text_atomic
from tftune.probes.traces.stages import Stage

SITES_FILE = "tftune-sites.json"
SCHEMA = 1

# The call (`op` in the record) behind each stage kind, by family.
_FAMILIES: dict[str, frozenset[str]] = {
    "map": frozenset({"map"}),
    "interleave": frozenset({"interleave", "parallel_interleave"}),
    "batch": frozenset({"batch", "padded_batch"}),
    "prefetch": frozenset({"prefetch"}),
    "reader": frozenset({"TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset"}),
    # Keras iterates a PyDataset through `from_generator`: its Generator stage.
    "py_dataset": frozenset({"PyDataset"}),
}
PY_DATASET_CALLS = _FAMILIES["py_dataset"]


@dataclass(frozen=True, slots=True)
class RecordedSite:
    site: str  # "path.py:LINE", relative to the script's folder
    op: str  # "map", "interleave", "batch", "TFRecordDataset", ...
    function: str | None = None


def family(kind: str) -> str | None:
    """The call family of a stage kind (``ParallelMapV2`` -> map), else None."""
    if kind.startswith(("Map", "ParallelMap")):
        return "map"
    if kind.startswith(("Interleave", "ParallelInterleave", "LegacyParallelInterleave")):
        return "interleave"
    if kind.startswith(("Batch", "PaddedBatch", "ParallelBatch")):
        return "batch"
    if kind == "Prefetch":
        return "prefetch"
    if kind.startswith(("TFRecord", "TextLine", "FixedLengthRecord")):
        return "reader"
    if kind == "Generator":
        return "py_dataset"
    return None


@dataclass(frozen=True, slots=True)
class SitesRecord:
    """What a run folder's record says: its call sites, the TensorFlow version the trace
    was taken with, and a note when the record is there but unusable."""

    sites: tuple[RecordedSite, ...] = ()
    tf_version: str | None = None
    note: str | None = None


def write_sites(
    run_dir: str | os.PathLike[str],
    script: str,
    sites: Iterable[RecordedSite],
    tf_version: str | None = None,
) -> Path:
    """Write the record (each (site, op) once, first call first) atomically."""
    seen: dict[tuple[str, str], RecordedSite] = {}
    for s in sites:
        seen.setdefault((s.site, s.op), s)
    data: dict[str, object] = {
        "schema": SCHEMA,
        "script": script,
        "sites": [{"site": s.site, "op": s.op, "function": s.function} for s in seen.values()],
    }
    if tf_version is not None:
        data["tf_version"] = tf_version
    path = Path(run_dir) / SITES_FILE
    write_text_atomic(path, json_text(data))
    return path


def newest_run_dir(logdir: str | os.PathLike[str]) -> Path | None:
    """The run folder the profiler wrote last under `logdir` (plugins/profile/<run>)."""
    runs = Path(logdir) / "plugins" / "profile"
    try:
        folders = [p for p in runs.iterdir() if p.is_dir()]
    except OSError:
        return None
    return max(folders, key=lambda p: p.stat().st_mtime, default=None)


def read_sites(run_dir: str | os.PathLike[str]) -> SitesRecord:
    """The record of a run folder; an empty one when there is none."""
    found = Path(run_dir) / SITES_FILE
    if not found.is_file():
        return SitesRecord()
    try:
        data = json.loads(found.read_text(encoding="utf-8"))
        rows = data["sites"] if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise ValueError("no list of sites")
        sites = tuple(
            RecordedSite(str(r["site"]), str(r["op"]), r.get("function") or None)
            for r in rows
            if isinstance(r, dict)
        )
        version = data.get("tf_version")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return SitesRecord(
            note=f"{found}: not a call-site record ({exc}); call sites are not named"
        )
    return SitesRecord(sites, version if isinstance(version, str) else None)


def site_for_stage(
    stage: Stage, stages: Sequence[Stage], sites: Sequence[RecordedSite]
) -> RecordedSite | None:
    """The recorded call site that built `stage`, or None.

    The calls of the stage's family, in the order the script made them, are matched to
    that family's stages of the trace (`stages`) from the source up, the deepest first;
    only a one-to-one match names a line."""
    fam = family(stage.kind)
    if fam is None:
        return None
    calls = [s for s in sites if s.op in _FAMILIES[fam]]
    kin = sorted((st for st in stages if family(st.kind) == fam), key=lambda st: -st.depth)
    names = [st.name for st in kin]
    if not calls or len(calls) != len(kin) or stage.name not in names:
        return None
    return calls[names.index(stage.name)]
