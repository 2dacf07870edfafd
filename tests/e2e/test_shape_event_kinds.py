"""`scripts/shape_report.py --check`'s rule on the child's events: a kind's text is
compared only inside the codec; everywhere else the events are matched on their types."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from repo_paths import ROOT

BAD = """
def take(e, row, kind):
    if e.kind == "epoch":
        pass
    done = e.kind in ("finished", "exception")
    started = row.get("kind") == "started" or row["kind"] != "stream"
    if kind == "site":
        pass
    match e.kind:
        case "nan" | "notes":
            pass
"""
GOOD = """
def take(e, stages):
    if isinstance(e, EpochStart):
        pass
    caches = [s for s in stages if s.kind == "cache"]  # a pipeline stage's kind
    label = {"epoch": 1}["epoch"]
"""


@pytest.fixture(scope="module")
def shape() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "shape_report", ROOT / "scripts" / "shape_report.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_kinds_are_read_from_the_codecs(shape: ModuleType) -> None:
    kinds = shape.event_kinds()
    assert {"epoch", "started", "finished", "nan", "site", "step_function"} <= kinds
    assert "cache" not in kinds


def test_an_event_kind_compared_as_text_is_found(shape: ModuleType) -> None:
    found = shape.kind_comparisons(BAD, shape.event_kinds())
    assert found == [
        (3, "epoch"),
        (5, "exception"),
        (5, "finished"),
        (6, "started"),
        (6, "stream"),
        (7, "site"),
        (10, "nan"),
        (10, "notes"),
    ]
    assert shape.kind_comparisons(GOOD, shape.event_kinds()) == []


def test_the_check_fails_on_such_a_module(tmp_path: Path) -> None:
    """The whole check, run on a copy of the package with one bad module added."""
    for folder in ("tftune", "core", "probes", "reports"):
        (tmp_path / folder).symlink_to(ROOT / folder, target_is_directory=True)
    (tmp_path / "tuner").mkdir()
    for entry in (ROOT / "tuner").iterdir():
        (tmp_path / "tuner" / entry.name).symlink_to(entry)
    (tmp_path / "tuner" / "stringly.py").write_text(BAD)
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "shape_report.py"),
            "--check",
            "--root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "tftune.tuner.stringly:3: the event kind 'epoch' compared as text" in out.stdout
