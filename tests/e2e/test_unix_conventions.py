"""The commands by Unix conventions (issue 30): `-` is standard output for a document,
plain lines off a terminal, NO_COLOR, --quiet, every output path checked before any
work, one meaning per option name, and a trace handed to `report` pointed to `analyze`.
In-process (click's runner: standard output is not a terminal) on a recorded-convention
trace, so no TensorFlow."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import golden_traces
import pytest
from click.testing import CliRunner

from tftune import cli
from tftune.probes.traces.callsites import write_sites

RUN = "2026_01_01_00_00_00"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    run_dir = root / "plugins" / "profile" / RUN
    golden_traces.cpu_pyfunc().write(run_dir, host="vm")
    write_sites(run_dir, "train.py", golden_traces.CPU_PYFUNC_SITES)
    return root


def _run(*argv: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli.main, list(argv), env=env)


def test_json_dash_is_standard_output_and_the_words_go_to_stderr(logdir: Path) -> None:
    r = _run("analyze", str(logdir), "--json", "-")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)  # nothing but the document
    assert data["schema"] == 1 and data["input_bound"] is True
    assert "input-bound" in r.stderr.lower() and not Path("-").exists()


def test_html_dash_is_standard_output(logdir: Path) -> None:
    r = _run("analyze", str(logdir), "-o", "-", "-q")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("<!DOCTYPE html>") and r.stderr == ""
    both = _run("analyze", str(logdir), "-o", "-", "--json", "-")
    assert both.exit_code == 1 and "only one" in both.output


def test_piped_output_is_plain_lines(logdir: Path) -> None:
    r = _run("analyze", str(logdir))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) > 10 and "\x1b[" not in r.stdout
    assert [line for line in lines if line != line.rstrip()] == []


def test_quiet_prints_nothing_and_still_writes(logdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    r = _run("analyze", str(logdir), "--json", str(out), "-q")
    assert r.exit_code == 0, r.output
    assert r.stdout == "" and r.stderr == ""
    assert json.loads(out.read_text())["schema"] == 1
    page = tmp_path / "a.html"
    r = _run("report", str(out), "-o", str(page), "--quiet")
    assert r.exit_code == 0 and r.output == "" and page.read_text().startswith("<!DOCTYPE")


def test_an_output_path_is_checked_before_any_work(tmp_path: Path) -> None:
    # The logdir does not exist either: the output path is what is said, so it was
    # checked first.
    missing = tmp_path / "no-such-folder" / "report.html"
    r = _run("analyze", str(tmp_path / "nowhere"), "-o", str(missing))
    assert r.exit_code == 1 and "no-such-folder" in r.output and "nowhere" not in r.output
    r = _run("analyze", str(tmp_path / "nowhere"), "--json", str(tmp_path))
    assert r.exit_code == 1 and "is a directory" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_report_on_a_trace_says_to_analyze_it(logdir: Path, tmp_path: Path) -> None:
    (trace,) = (logdir / "plugins" / "profile" / RUN).glob("*.xplane.pb")
    r = _run("report", str(trace), "-o", str(tmp_path / "r.html"))
    assert r.exit_code == 1 and "tftune analyze" in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = _run("report", str(logdir), "-o", str(tmp_path / "r.html"))
    assert r.exit_code == 1 and "is a directory" in r.output and "tftune analyze" in r.output
    binary = tmp_path / "run.bin"
    binary.write_bytes(bytes([0xD6, 0x00, 0xFF]) * 10)
    r = _run("report", str(binary), "-o", str(tmp_path / "r.html"))
    assert r.exit_code == 1 and "not a JSON file" in r.output and "codec" not in r.output


def test_no_color_and_terminals() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("NO_COLOR", raising=False)
        mp.setenv("TERM", "xterm")
        assert cli.use_color(Tty()) and not cli.use_color(io.StringIO())
        mp.setenv("NO_COLOR", "1")
        assert not cli.use_color(Tty())


def test_profiles_folder_is_logdir_and_o_is_deprecated(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tftune.tuner.trial as trial
    from tftune.core.errors import ScriptError

    seen: list[str] = []

    def fake(script: str, args: Any, first: int, stop: int, logdir: str, **kw: Any) -> Any:
        seen.append(logdir)
        raise ScriptError("stopped here")

    monkeypatch.setattr(trial, "profile_script", fake)
    r = _run("profile", "t.py", "--logdir", str(tmp_path / "new"))
    assert r.exit_code == 1 and seen == [str(tmp_path / "new")]
    r = _run("profile", "t.py", "-o", str(tmp_path / "old"))
    assert seen[-1] == str(tmp_path / "old")
    assert "deprecated" in r.stderr and "--logdir" in r.stderr


def test_optimize_words_go_where_its_documents_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import tftune._optimize_cli as optimize_cli

    seen: list[Any] = []

    def record(*a: Any) -> None:  # the streams as the command saw them
        seen.append({"words": a[3], "stdout": sys.stdout, "stderr": sys.stderr, None: None})

    monkeypatch.setattr(optimize_cli, "run_optimize_command", record)
    for argv, expected in (
        (["optimize", "t.py"], "stdout"),
        (["optimize", "t.py", "--json", "-"], "stderr"),
        (["optimize", "t.py", "-q"], None),
    ):
        r = _run(*argv)
        assert r.exit_code == 0, r.output
        assert seen[-1]["words"] is seen[-1][expected], argv


@pytest.mark.slow  # the installed entry point, in bash
def test_shell_completion_as_the_readme_sets_it_up(tmp_path: Path) -> None:
    """README: `eval "$(_TFTUNE_COMPLETE=bash_source tftune)"` (zsh_source, fish_source):
    bash then completes commands and options on Tab; zsh's and fish's scripts ask the
    same entry point, which answers them."""
    import os
    import shutil
    import subprocess
    import sys

    bin_dir = str(Path(sys.executable).parent)  # where `pip install` put `tftune`
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}

    def tab(*words: str) -> list[str]:
        line = " ".join(words)
        script = (
            'eval "$(_TFTUNE_COMPLETE=bash_source tftune)"; '
            f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
            'complete -p tftune >/dev/null && _tftune_completion tftune; printf "%s\\n" '
            '"${COMPREPLY[@]}"'
        )
        r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr, r.stderr
        return r.stdout.split()

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    assert tab("tftune", "opt") == ["optimize"]
    assert {"analyze", "report", "optimize", "run", "status"} <= set(tab("tftune", "''"))
    assert "--list" in tab("tftune", "analyze", "--l")
    for shell, words in (("zsh", "tftune an"), ("fish", "tftune an")):
        source = subprocess.run(
            ["tftune"],
            env={**env, "_TFTUNE_COMPLETE": f"{shell}_source"},
            capture_output=True,
            text=True,
        )
        assert source.returncode == 0 and f"_TFTUNE_COMPLETE={shell}_complete" in source.stdout
        answer = subprocess.run(
            ["tftune"],
            env={
                **env,
                "_TFTUNE_COMPLETE": f"{shell}_complete",
                "COMP_WORDS": words,
                "COMP_CWORD": "1" if shell == "zsh" else "an",
            },
            capture_output=True,
            text=True,
        )
        assert "analyze" in answer.stdout, (shell, answer.stdout, answer.stderr)
