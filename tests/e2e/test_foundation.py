"""The package layout, the CLI shell and the TensorFlow-free boundary."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner
from repo_paths import ROOT

import tftune
from tftune import cli
from tftune.core.errors import UserError


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_version_matches_distribution() -> None:
    assert tftune.__version__ == metadata.version("tftune")
    result = CliRunner().invoke(cli.main, ["--version"])
    assert result.exit_code == 0
    assert tftune.__version__ in result.output


def test_python_dash_m_runs_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tftune", "--help"], capture_output=True, text=True, check=True
    )
    assert "Usage:" in out.stdout and "tftune" in out.stdout


@pytest.mark.slow
def test_probes_and_reports_do_not_import_tensorflow() -> None:
    mods = _modules_after(
        "import tftune.probes, tftune.reports\n"
        "import pkgutil, importlib\n"
        "for pkg in (tftune.probes, tftune.reports):\n"
        "    for m in pkgutil.iter_modules(pkg.__path__):\n"
        "        importlib.import_module(pkg.__name__ + '.' + m.name)\n"
    )
    assert "tftune.probes" in mods
    assert not {m for m in mods if m == "tensorflow" or m.startswith("tensorflow.")}
    assert "optuna" not in mods


def test_the_fake_runner_imports_neither_tensorflow_nor_optuna() -> None:
    """`tftune.testing` is for tests that run no script: it must stay light."""
    mods = _modules_after("import tftune.testing")
    assert "tftune.testing" in mods
    assert not {m for m in mods if m == "tensorflow" or m.startswith("tensorflow.")}
    assert not {m for m in mods if m == "optuna" or m.startswith("optuna.")}


@pytest.mark.slow
def test_help_commands_do_not_import_tensorflow() -> None:
    # Every command's help must be fast and TensorFlow-free, analyze and report above all.
    every = [["--help"]] + [[name, "--help"] for name in sorted(cli.main.commands)]
    for args in every:
        code = (
            "import sys\n"
            f"sys.argv = ['tftune', *{args!r}]\n"
            "from tftune import cli\n"
            "try:\n"
            "    cli.main(standalone_mode=False)\n"
            "except SystemExit:\n"
            "    pass\n"
        )
        mods = _modules_after(code)
        assert "tensorflow" not in mods, args


def test_user_error_is_one_line_exit_1() -> None:
    @cli.main.command("_boom")
    def _boom() -> None:
        raise UserError("data/train.tfrecord: file is empty")

    try:
        result = CliRunner().invoke(cli.main, ["_boom"])
    finally:
        cli.main.commands.pop("_boom")
    assert result.exit_code == 1
    assert result.output.strip() == "Error: data/train.tfrecord: file is empty"
    assert "Traceback" not in result.output


def test_usage_error_exits_2() -> None:
    result = CliRunner().invoke(cli.main, ["no-such-command"])
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)


@pytest.mark.slow
def test_wheel_installs_only_tftune(tmp_path: Path) -> None:
    """`pip install .` must put only `tftune/` and its dist-info into site-packages:
    bare names such as `probes` or `reports` would shadow users' own modules."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("tftune-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"tftune", f"tftune-{tftune.__version__}.dist-info"}, tops
    for sub in ("core", "probes", "tuner", "reports"):
        assert f"tftune/{sub}/__init__.py" in names


def test_the_checkout_imports_whole_without_an_editable_install() -> None:
    """From a checkout's root, `import tftune` is the checkout's front package, also where
    tftune is installed as a wheel (no editable finder maps its layers): the layers are
    found beside it, as `python -m tftune` and a notebook started there need them."""
    site = [p for p in sys.path if p.endswith("site-packages")]
    code = (
        f"import sys; sys.path += {site!r}; import tftune, tftune.probes.advice.analysis; "
        f"assert tftune.__file__.startswith({str(ROOT)!r}), tftune.__file__; "
        "print(tftune.probes.__file__)"
    )
    # -S: no site, so no editable install's finder; the checkout's root is the current
    # folder, first on the path, as for `python -c` run there.
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(ROOT / "probes" / "__init__.py")
