"""The gates: ruff (lint and format) and mypy strict on the package, run as tests so that
the README's full test command covers them (mypy is slow: the quick lane leaves it out)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from repo_paths import ROOT

PACKAGE_DIRS = ["tftune", "core", "probes", "tuner", "reports"]


def _run(module: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed: pip install -e '.[dev]'")
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True
    )


def test_ruff_lint() -> None:
    out = _run("ruff", "check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format() -> None:
    out = _run("ruff", "format", "--check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_mypy_strict_on_package(tmp_path: Path) -> None:
    # The source folders install as tftune.probes/tuner/reports through package-dir, which
    # mypy cannot follow. Check them as the installed package is laid out: a tree of links.
    pkg = tmp_path / "tftune"
    pkg.mkdir()
    for f in (ROOT / "tftune").glob("*.py"):
        (pkg / f.name).symlink_to(f)
    for sub in PACKAGE_DIRS[1:]:
        (pkg / sub).symlink_to(ROOT / sub, target_is_directory=True)
    out = _run(
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--no-incremental",
        "-p",
        "tftune",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_shape_limits() -> None:
    """Modules at most 500 lines, functions at most 80, no import cycle, and dependencies
    that point one way (core ← probes ← reports/tuner ← tftune): scripts/shape_report.py."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "shape_report.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


UNTYPED_DOCUMENT = """\
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import JsonValue

Free = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Part:
    evidence: Mapping[str, JsonValue]  # typed: JSON values
    name: str = ""


@dataclass(frozen=True)
class Document:
    training: Mapping[str, Any] | None
    sizing: "dict[str, Any]"
    record: Free | None = None
    part: Part | None = None


@dataclasses.dataclass
class Loose:
    extra: dict[str, Any]


class NotADataclass:
    anything: Mapping[str, Any]
"""


def _shape_report() -> Any:
    """scripts/shape_report.py as a module (it is a script, not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "shape_report", ROOT / "scripts" / "shape_report.py"
    )
    assert spec is not None and spec.loader is not None
    shape = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shape)
    return shape


def test_shape_check_refuses_a_free_json_object_in_a_core_document(tmp_path: Path) -> None:
    """A dataclass field in core/ annotated ``Mapping[str, Any]`` or ``dict[str, Any]``
    (in a union, a string, or an alias of its module) is a shape problem naming it; a
    mapping of typed JSON values, or a class that is no dataclass, is not. `report` runs
    the check on core/'s modules only, and the package passes it (`test_shape_limits`)."""
    shape = _shape_report()
    path = tmp_path / "document.py"
    path.write_text(UNTYPED_DOCUMENT)
    problems = shape.untyped_fields(path, "tftune.core.document")
    assert sorted(p.split(" is ")[0] for p in problems) == [
        "tftune.core.document:Document.record",
        "tftune.core.document:Document.sizing",
        "tftune.core.document:Document.training",
        "tftune.core.document:Loose.extra",
    ], problems
    assert all(p.endswith("a document's field is a typed value") for p in problems)
    assert shape.untyped_fields(ROOT / "core" / "tuning_document.py", "core") == []


def test_shape_check_finds_a_default_spelled_in_a_click_option() -> None:
    """The command line's defaults are the options' own (tuner/options.py): a click option
    of tftune/cli.py that spells one is a shape problem, a name or None is not."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "shape_report", ROOT / "scripts" / "shape_report.py"
    )
    assert spec is not None and spec.loader is not None
    shape = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shape)
    bad = (
        "import click\n"
        "@click.option('--seed', default=0, help='TPE sampler seed.')\n"
        "@click.option('--best', 'best_file', default='tftune-best.json')\n"
        "@click.option('--steps', default=PROFILE_STEPS)\n"
        "@click.option('--timeout', default=None)\n"
        "@option('--guided/--no-guided', default=True)\n"
        "def optimize(): ...\n"
    )
    problems = shape.literal_defaults(bad, "cli.py")
    assert [p.split(":")[1] for p in problems] == ["2", "3", "6"]
    assert problems[0].startswith("cli.py:2: --seed's default 0 is spelled here")
    assert shape.literal_defaults(bad.replace("=0", "=DEFAULT_SEED"), "cli.py")[0].startswith(
        "cli.py:3: --best's default 'tftune-best.json'"
    )


def _mapped_modules(text: str) -> set[str]:
    """The modules docs/ARCHITECTURE.md's map lists: `name.py` rows under each
    `### folder/` heading, as folder/name.py."""
    found: set[str] = set()
    folder = None
    for line in text.splitlines():
        if line.startswith("### "):
            head = line[4:].split(" ", 1)[0]
            folder = head if head.endswith("/") else None
        elif folder and line.startswith("| `") and line.count("`") >= 2:
            name = line.split("`")[1]
            if name.endswith(".py"):
                found.add(folder + name)
    return found


def test_architecture_map_lists_every_module() -> None:
    """docs/ARCHITECTURE.md's module map names every module of the package (each
    `__init__.py` but the front door's is its package's heading), and nothing that is
    gone; the page stays short enough to keep true."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    mapped = _mapped_modules(text)
    modules = {
        p.relative_to(ROOT).as_posix()
        for d in PACKAGE_DIRS
        for p in (ROOT / d).rglob("*.py")
        if "__pycache__" not in p.parts and (p.name != "__init__.py" or d == "tftune")
    }
    assert not modules - mapped, f"missing from the module map: {sorted(modules - mapped)}"
    assert not mapped - modules, f"in the map but gone: {sorted(mapped - modules)}"
    assert len(text.splitlines()) <= 400


def test_no_test_module_imports_another() -> None:
    """What tests share lives in helper modules (docs/ARCHITECTURE.md, "tests/"): a test
    module that imports another runs the other's module-level code and couples the two."""
    import re

    pattern = re.compile(r"^\s*(?:from|import)\s+test_\w+", re.M)
    offenders = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "tests").rglob("*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert not offenders, offenders
