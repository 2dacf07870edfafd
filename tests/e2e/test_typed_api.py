"""The public API type-checks from a user's code (PEP 561): the wheel ships `py.typed`,
and mypy, run on a user's file outside the package against the installed wheel, sees
tftune's real types (not `Any`) and reports a wrong one."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from repo_paths import ROOT

pytestmark = pytest.mark.slow  # a wheel build and a mypy run

USER_FILE = """\
import tftune
import tftune.keras

analysis = tftune.analyze("logs/")
reveal_type(analysis)
reveal_type(analysis.to_json())
reveal_type(tftune.report(analysis, "report.html"))
reveal_type(tftune.optimize("train.py", trials=5))
reveal_type(tftune.keras.Profile(steps=(10, 20)))
tftune.apply("tftune-best.json")
wrong: int = tftune.analyze(3)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, unpacked as pip installs it into site-packages."""
    out = tmp_path_factory.mktemp("wheel")
    build = ["pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out)]
    subprocess.run(
        [sys.executable, "-m", *build, str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("tftune-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # Each source folder that installs as a package ships the marker (pyproject's
    # package-data); PEP 561's marker covers the subpackages below it.
    for pkg in ("tftune", "tftune/core", "tftune/probes", "tftune/tuner", "tftune/reports"):
        assert f"{pkg}/py.typed" in names, pkg
    target = out / "site-packages"
    zipfile.ZipFile(wheel).extractall(target)
    return target


def test_mypy_sees_the_public_apis_types_from_outside(site: Path, tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text(USER_FILE)
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(user.name)],
        cwd=tmp_path,  # outside the repository: only the unpacked wheel is importable
        env=env,
        capture_output=True,
        text=True,
    )
    said = out.stdout + out.stderr
    assert "py.typed" not in said and "import-untyped" not in said, said
    revealed = [
        line.split('Revealed type is "', 1)[1].rstrip('"')
        for line in said.splitlines()
        if "Revealed type is" in line
    ]
    assert revealed == [
        "tftune.probes.advice.analysis.Analysis",
        "dict[str, Any]",
        "str | pathlib.Path",
        "tftune.tuner.optimize.OptimizeResult",
        "tftune.keras.Profile",
    ], said
    errors = [line for line in said.splitlines() if ": error:" in line]
    assert len(errors) == 2, said  # both halves of the deliberate mistake, nothing else
    assert any('expected "str | PathLike[str]"' in e and "user.py:11:" in e for e in errors)
    assert any('has type "Analysis", variable has type "int"' in e for e in errors)
    assert out.returncode == 1
