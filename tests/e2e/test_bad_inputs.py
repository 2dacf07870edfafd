"""Bad inputs through the real command line: one line that names the file or value, a
non-zero exit, no traceback, and nothing half-written.

What other test files already prove is not repeated here: trace-reader messages
(test_probes_trace.py, test_trace_fuzz.py), `analyze` on a missing path and on garbage
(test_analyze_cli.py), `report` on bad JSON and unwritable outputs (test_reports_cli.py),
`run`/`profile` with a malformed or missing config or script, and a config naming call
sites that no longer exist (test_tuner_runner.py), `optimize` with a missing script, a
malformed --space file or an unreachable PostgreSQL URL (test_optimize_cli.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from gputrace import gpu_trace

from tftune import cli


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.main, list(args))
    # A traceback would be an exception other than the SystemExit of a clean failure.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def _one_error_line(output: str, *needles: str) -> str:
    """The output's only `Error:` line, which must contain every needle."""
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def _temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tmp"))


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """A valid logdir with one run and one host, built without TensorFlow."""
    root = tmp_path / "logdir"
    gpu_trace(n_steps=6)[0].write(root / "plugins" / "profile" / "2026_01_01_00_00_00", "vm")
    return root


def _host_file(logdir: Path) -> Path:
    (path,) = logdir.rglob("*.xplane.pb")
    return path


# ------------------------------------------------------------------------- traces


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("empty", "file is empty"),
        ("truncated", "vm.xplane.pb"),
        ("corrupt", "vm.xplane.pb"),
        ("not_xspace", "XSpace"),
    ],
)
def test_analyze_a_damaged_trace(logdir: Path, damage: str, message: str) -> None:
    host = _host_file(logdir)
    data = host.read_bytes()
    host.write_bytes(
        {
            "empty": b"",
            "truncated": data[: len(data) // 2],
            "corrupt": bytes(b ^ 0xA5 for b in data[:64]) + data[64:],
            "not_xspace": b"hello, this is a text file\n",
        }[damage]
    )
    code, output = _invoke("analyze", str(logdir))
    assert code == 1
    _one_error_line(output, message)


def test_analyze_a_logdir_with_no_runs(tmp_path: Path) -> None:
    (tmp_path / "plugins" / "profile").mkdir(parents=True)
    code, output = _invoke("analyze", str(tmp_path))
    assert code == 1
    _one_error_line(output, str(tmp_path), "no profiler runs")


def test_analyze_an_unknown_run_names_it(logdir: Path) -> None:
    code, output = _invoke("analyze", str(logdir), "--run", "nope")
    assert code == 1
    _one_error_line(output, "nope")


# ------------------------------------------------------------------------- outputs


@pytest.mark.parametrize("flag", ["--json", "-o"])
@pytest.mark.parametrize("where", ["missing-dir/out", "a-dir"])
def test_analyze_output_that_cannot_be_written(
    logdir: Path, tmp_path: Path, flag: str, where: str
) -> None:
    (tmp_path / "a-dir").mkdir()
    target = tmp_path / where
    code, output = _invoke("analyze", str(logdir), flag, str(target))
    assert code == 1
    _one_error_line(output, str(target))
    assert _temp_files(tmp_path) == []
    assert not (tmp_path / "missing-dir").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into read-only folders")
def test_analyze_into_a_read_only_folder_leaves_nothing(logdir: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        code, output = _invoke("analyze", str(logdir), "--json", str(ro / "a.json"))
    finally:
        ro.chmod(0o700)
    assert code == 1
    _one_error_line(output, "cannot write")
    assert list(ro.iterdir()) == []


def test_a_failed_rewrite_keeps_the_old_file_whole(
    logdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Atomic writes: when the new report cannot replace the old one (disk full, quota),
    the old file stays whole and no temporary file is left."""
    target = tmp_path / "a.json"
    target.write_text('{"old": true}\n')

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    for flag in ("--json", "-o"):
        code, output = _invoke("analyze", str(logdir), flag, str(target))
        assert code == 1
        _one_error_line(output, str(target), "No space left")
        assert target.read_text() == '{"old": true}\n' and _temp_files(tmp_path) == []


@pytest.mark.parametrize("flag", ["--best", "--json", "-o"])
def test_optimize_output_that_cannot_be_written_fails_before_any_trial(
    tmp_path: Path, flag: str
) -> None:
    script = tmp_path / "train.py"
    ran = tmp_path / "ran"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    target = tmp_path / "missing-dir" / "out"
    code, output = _invoke(
        "optimize", str(script), "--storage", str(tmp_path / "s.journal"), flag, str(target)
    )
    assert code == 1
    _one_error_line(output, flag, str(target))
    assert not ran.exists()  # not even discovery ran


def test_best_file_write_failure_is_one_line_and_atomic(tmp_path: Path) -> None:
    from tftune.core.errors import ConfigError
    from tftune.tuner.output.assemble import write_json_atomic
    from tftune.tuner.searchspace.config import Config, save_config

    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError, match="cannot write"):
        save_config(Config(), tmp_path / "d")
    with pytest.raises(ConfigError, match="cannot write"):
        write_json_atomic({"schema": 1}, tmp_path / "d")
    assert _temp_files(tmp_path) == []


# ------------------------------------------------------------------------- scripts


def test_optimize_a_script_with_a_syntax_error(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import os\ndef f(:\n    pass\n")
    code, output = _invoke("optimize", str(script), "--storage", str(tmp_path / "s.journal"))
    assert code == 1
    _one_error_line(output, "train.py:2", "syntax error")


@pytest.mark.slow
def test_optimize_a_script_without_a_pipeline_says_what_still_works(tmp_path: Path) -> None:
    """Through the installed command in a subprocess: stderr holds exactly one line."""
    script = tmp_path / "train.py"
    script.write_text("print('training without tf.data')\n")
    out = subprocess.run(
        [sys.executable, "-m", "tftune", "optimize", str(script), "--storage", "s.journal"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()
    assert "train.py" in line and "no tf.data pipeline" in line
    assert "tftune profile" in line and "tftune analyze" in line
    assert not (tmp_path / "tftune-best.json").exists()


@pytest.mark.slow
def test_a_script_that_fails_before_training_shows_its_exit_code_and_stderr(
    tmp_path: Path,
) -> None:
    """The script's own message, not a guess: an argparse error before any pipeline."""
    script = tmp_path / "train.py"
    script.write_text(
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--epochs', type=int)\n"
        "parser.parse_args()\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tftune",
            "optimize",
            str(script),
            "--storage",
            "s.journal",
            "--",
            "--steps",
            "3",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert "exited with code 2" in out.stderr, out.stderr
    assert "unrecognized arguments: --steps 3" in out.stderr
    assert "Traceback" not in out.stderr


def test_an_unknown_option_before_the_separator_is_a_usage_error(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    code, output = _invoke("optimize", str(script), "--trails", "2")
    assert code == 2
    assert "No such option" in output and "--trials" in output


@pytest.mark.parametrize("command", ["run", "profile"])
def test_run_and_profile_a_script_with_a_syntax_error(tmp_path: Path, command: str) -> None:
    script = tmp_path / "train.py"
    script.write_text("x = (\n")
    args = ["run", "--config", str(_empty_config(tmp_path))] if command == "run" else ["profile"]
    code, output = _invoke(*args, str(script))
    assert code == 1
    _one_error_line(output, "train.py", "syntax error")


def _empty_config(tmp_path: Path) -> Path:
    path = tmp_path / "c.json"
    path.write_text("{}")
    return path


# ------------------------------------------------------------------------- configs


@pytest.mark.parametrize(
    ("content", "needle"),
    [("{not json", "not valid JSON"), ('{"sites": []}', "sites"), ("", "c.json")],
)
def test_profile_with_a_malformed_config(tmp_path: Path, content: str, needle: str) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    cfg = tmp_path / "c.json"
    cfg.write_text(content)
    code, output = _invoke("profile", str(script), "--config", str(cfg))
    assert code == 1
    _one_error_line(output, "c.json", needle)


# ------------------------------------------------------------------------- storage


@pytest.mark.parametrize(
    ("storage", "needle"),
    [
        ("{tmp}/no-such-dir/s.journal", "no-such-dir"),
        ("{tmp}", "is a directory"),
        ("sqlite:///{tmp}/no-such-dir/s.db", "cannot connect"),
    ],
)
def test_optimize_storage_that_cannot_be_reached(tmp_path: Path, storage: str, needle: str) -> None:
    script = tmp_path / "train.py"
    ran = tmp_path / "ran"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    url = storage.format(tmp=tmp_path)
    code, output = _invoke("optimize", str(script), "--storage", url)
    assert code == 1
    _one_error_line(output, "--storage", needle)
    assert not ran.exists()
