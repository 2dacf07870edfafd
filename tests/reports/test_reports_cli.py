"""`tftune report FILE.json`: re-render from saved JSON, with one-line user errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from repo_paths import FIXTURES

from tftune import cli


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli.main, list(args), env=env)
    return result.exit_code, result.output


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "run analysis.json"  # a space: paths are passed through untouched
    shutil.copy(FIXTURES / "analysis_cpu_pyfunc.json", path)
    return path


def test_report_with_output(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code, output = invoke("report", str(saved), "-o", str(out))
    assert code == 0, output
    assert output.strip() == str(out)
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "slow_tokenize" in page
    assert "run analysis.json" in page  # the source is named in the header
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_report_without_output_writes_next_to_the_json(saved: Path) -> None:
    code, output = invoke("report", str(saved))
    assert code == 0, output
    target = saved.with_suffix(".html")
    assert output.strip() == str(target) and target.is_file()


def test_tuning_json_is_detected(tmp_path: Path) -> None:
    out = tmp_path / "t.html"
    code, output = invoke("report", str(FIXTURES / "tuning_latency.json"), "-o", str(out))
    assert code == 0, output
    assert "<title>tuning report</title>" in out.read_text()


def test_source_date_epoch_makes_output_reproducible(saved: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    env = {"SOURCE_DATE_EPOCH": "1796000000"}
    assert invoke("report", str(saved), "-o", str(a), env=env)[0] == 0
    assert invoke("report", str(saved), "-o", str(b), env=env)[0] == 0
    assert a.read_bytes() == b.read_bytes()
    assert "generated 2026-11-30 00:53 UTC" in a.read_text()


def test_existing_output_is_replaced_whole(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("old")
    assert invoke("report", str(saved), "-o", str(out))[0] == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "not valid JSON (line 1, column 2)"),
        ("", "not valid JSON"),
        ('{"schema": 1, "hello": 2}', "not a tftune analysis or tuning JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"schema": 1, "bottlenecks": [], "breakdown": {}}', "field 'steps' is missing"),
        (b"\xff\xfe{", "not a JSON file"),
    ],
)
def test_bad_input_is_one_line_exit_1(
    tmp_path: Path, content: str | bytes | None, message: str
) -> None:
    path = tmp_path / "in.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    code, output = invoke("report", str(path), "-o", str(tmp_path / "r.html"))
    assert code == 1
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], output
    assert "in.json" in lines[0]
    assert not (tmp_path / "r.html").exists()


def test_directory_as_input(tmp_path: Path) -> None:
    code, output = invoke("report", str(tmp_path))
    assert code == 1 and "is a directory" in output and len(output.strip().splitlines()) == 1


@pytest.mark.parametrize("where", ["missing-dir/r.html", "."])
def test_unwritable_output_is_one_line_exit_1(saved: Path, tmp_path: Path, where: str) -> None:
    code, output = invoke("report", str(saved), "-o", str(tmp_path / where))
    assert code == 1
    assert len(output.strip().splitlines()) == 1 and output.startswith("Error: ")
    assert "cannot write" in output or "is a directory" in output
    assert [p.name for p in tmp_path.rglob("*.tmp")] == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write to read-only directories")
def test_read_only_directory(saved: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        code, output = invoke("report", str(saved), "-o", str(ro / "r.html"))
    finally:
        ro.chmod(0o700)
    assert code == 1 and "cannot write" in output


@pytest.mark.slow
def test_installed_command_renders_without_importing_tensorflow(
    saved: Path, tmp_path: Path
) -> None:
    """`tftune report` as a user runs it, and proof that TensorFlow stays out of it."""
    out = tmp_path / "r.html"
    proc = subprocess.run(
        [sys.executable, "-m", "tftune", "report", str(saved), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out) and out.is_file()
    probe = (
        "import sys, json\n"
        "from tftune import cli\n"
        f"sys.argv = ['tftune', 'report', {str(saved)!r}, '-o', {str(tmp_path / 'p.html')!r}]\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'optuna'))\n"
        "print(json.dumps(bad))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    missing = subprocess.run(
        [sys.executable, "-m", "tftune", "report", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"Error: {tmp_path / 'nope.json'}: no such file"
    assert "Traceback" not in missing.stderr


def test_a_trace_without_steps_gets_its_report(tmp_path: Path) -> None:
    """A trace where no training step was found (a pipeline that ran with no consumer in
    the profiled window) has no verdict level: analyze still writes the report, and says
    input wait was not measured, as `tftune report` does from its JSON."""
    from gputrace import MS, XSpaceBuilder

    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    for i in range(5):
        t = i * 10 * MS
        r = "tf_data_iterator_resource/9"
        host.event(r, "Iterator::Root::Prefetch::Map", t, 8 * MS, id=3)
        host.event(r, "Iterator::Root::Prefetch::Map::Range", t + MS, MS, id=4, parent_id=3)
    logdir = tmp_path / "logdir"
    b.write(logdir / "plugins" / "profile" / "run1", host="vm")
    page, saved = tmp_path / "report.html", tmp_path / "analysis.json"
    code, output = invoke("analyze", str(logdir), "-o", str(page), "--json", str(saved))
    assert code == 0, output
    assert json.loads(saved.read_text())["verdict"]["level"] is None
    assert "Input wait not measured" in page.read_text()
    again = tmp_path / "again.html"
    code, output = invoke("report", str(saved), "-o", str(again))
    assert code == 0, output
    assert "Input wait not measured" in again.read_text()
