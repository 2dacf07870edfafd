"""The recorded traces the analysis tests read: one set per TensorFlow version, committed
under tests/fixtures/traces/tf-<major.minor>/ (its README.md says how to record them).

A set holds, for each case of `tracegen.CASES` (tests/tracegen*.py), the logdir that
`tracegen.record` wrote, each file compressed with xz (`PACKED`, about a quarter of its
size; `unpack` restores the logdir byte for byte), and a `manifest.json` with what
recorded it: the TensorFlow and Python versions, the generator and each case's
parameters with a digest of its source (the harness included). A case whose source or
parameters changed since the set was recorded is stale: the `trace_case` fixture
records it live instead, and tests/probes/test_trace_recording.py fails until the set is
recorded again.

Not a test module: conftest.py and scripts/record_traces.py import it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import lzma
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import tracegen

TRACES = Path(__file__).resolve().parent / "fixtures" / "traces"
MANIFEST = "manifest.json"
PACKED = ".xz"  # the suffix of a committed file: the recorded file, xz-compressed
RECORD_COMMAND = "python scripts/record_traces.py"
# The modules that register cases in `tracegen.CASES` besides tracegen itself.
CASE_MODULES = ("tracegen_steps", "tracegen_real", "tracegen_loops")
# The distributions TensorFlow is installed as (the first one found is the version).
TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-macos")


def all_cases() -> dict[str, tracegen.Case]:
    """Every case the tests record, registered by importing the modules that define them."""
    import importlib

    for module in CASE_MODULES:
        importlib.import_module(module)
    return dict(tracegen.CASES)


def installed_tensorflow() -> str | None:
    """The installed TensorFlow's full version (without importing it), or None."""
    for dist in TF_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def series(version: str) -> str:
    """A set's name for a TensorFlow version: ``2.21.0`` -> ``tf-2.21``."""
    return "tf-" + ".".join(version.split(".")[:2])


@dataclass(frozen=True)
class CaseRecord:
    """What recorded one case: its parameters and a digest of its source."""

    steps: int
    markers: bool
    warmup: int
    python_tracer: int
    runs: int
    source_sha256: str

    @staticmethod
    def of(case: tracegen.Case) -> CaseRecord:
        text = tracegen.HARNESS + "\n" + case.source
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return CaseRecord(
            case.steps, case.markers, case.warmup, case.python_tracer, case.runs, digest
        )


@dataclass(frozen=True)
class TraceSet:
    """One committed set: its folder and its manifest."""

    path: Path
    manifest: dict[str, Any]

    def record_of(self, name: str) -> CaseRecord | None:
        entry = self.manifest.get("cases", {}).get(name)
        if entry is None:
            return None
        fields = {k: entry[k] for k in CaseRecord.__dataclass_fields__}
        return CaseRecord(**fields)

    def unpack(self, name: str, logdir: Path) -> Path:
        """Write case `name`'s logdir, as `tracegen.record` left it, at `logdir`."""
        for rel in self.manifest["cases"][name]["files"]:
            packed = self.path / name / (rel + PACKED)
            target = logdir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(lzma.decompress(packed.read_bytes()))
        return logdir

    def stale(self, cases: dict[str, tracegen.Case]) -> list[str]:
        """The cases this set lacks or recorded from another source or parameters."""
        return sorted(n for n, c in cases.items() if self.record_of(n) != CaseRecord.of(c))


def load_set(path: Path) -> TraceSet | None:
    manifest = path / MANIFEST
    if not manifest.is_file():
        return None
    return TraceSet(path, json.loads(manifest.read_text(encoding="utf-8")))


def committed_sets() -> list[TraceSet]:
    """Every committed set, oldest TensorFlow first."""
    found = [load_set(p) for p in TRACES.glob("tf-*") if p.is_dir()]
    sets = [s for s in found if s is not None]
    return sorted(sets, key=lambda s: tuple(int(x) for x in s.path.name[3:].split(".")))


def set_for_tests() -> tuple[TraceSet | None, str]:
    """The set the analysis tests read, and why: the installed TensorFlow's; where
    TensorFlow is not installed, the newest set (analysis needs no TensorFlow); None
    where the installed TensorFlow has none (the traces are then recorded live)."""
    version = installed_tensorflow()
    if version is None:
        sets = committed_sets()
        if not sets:
            return None, "no recorded traces are committed and tensorflow is not installed"
        return sets[-1], f"tensorflow is not installed: read {sets[-1].path.name}"
    found = load_set(TRACES / series(version))
    if found is None:
        return None, (
            f"no recorded traces for TensorFlow {version} "
            f"(tests/fixtures/traces/{series(version)}): recording live; "
            f"record a set with: {RECORD_COMMAND}"
        )
    return found, f"recorded traces of {found.path.name}"


def pack(logdir: Path, folder: Path) -> dict[str, Any]:
    """Store a recorded `logdir` in `folder`, each file compressed (`PACKED`); its
    manifest entry's ``files`` (relative to the logdir) and ``bytes`` (unpacked)."""
    files = sorted(p for p in logdir.rglob("*") if p.is_file())
    for f in files:
        target = folder / (f.relative_to(logdir).as_posix() + PACKED)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(lzma.compress(f.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
    return {
        "files": [f.relative_to(logdir).as_posix() for f in files],
        "bytes": sum(f.stat().st_size for f in files),
    }


def manifest_of(
    cases: dict[str, tracegen.Case], stored: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The manifest of a set just recorded: `stored` is each case's `pack` entry."""
    import platform

    return {
        "tensorflow": installed_tensorflow(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "generator": "scripts/record_traces.py (tests/tracegen.py: record, then pack)",
        "command": RECORD_COMMAND,
        "compression": "xz",
        "cases": {
            name: {**asdict(CaseRecord.of(case)), **stored[name]}
            for name, case in sorted(cases.items())
        },
    }
